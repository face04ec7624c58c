// x86 lowering: multi-row chunks, for tiles whose minor dim is narrower than a vector.
//
// A [G, L] tile with L < 16 (cross_entropy's realigned [BLOCK / 4, 4] f32 slices, a
// [G, 1] column) walked one row per chunk gets L-lane vectors (xmm for L = 4) and a
// horizontal reduction per row. A multi-row chunk takes R = 16 / L whole rows at once:
// its W = 16 lanes are rows i .. i+R-1 in row-major order, so elementwise chains run
// on full vectors, a load whose rows are consecutive in memory is one vector load,
// and a reduce along the minor dim combines within each group of L lanes.
//
// Worked example, x: tile<1024x4xf32> loaded from p + 4*g[:, None] + j[None, :] with
// the mask whole[:, None] (a [1024, 1] tile, one bit per row), R = 4: chunk k covers
// rows 4k .. 4k+3; the pointer tile's steps are (4, 1), so its 16 lanes are p + 16k +
// 0..15 (one vector load); the mask chunk is whole[4k .. 4k+3] shuffled to lanes
// <0,0,0,0,1,1,1,1,2,2,2,2,3,3,3,3>; max(x, axis=1) takes two shuffle+max steps per
// chunk, leaving lanes <row 4k, .., row 4k+3> for a 4-lane store.
#include <llvm/IR/Constants.h>

#include <algorithm>
#include <iterator>

#include "codegen/common/elementwise.h"
#include "codegen/x86/kernel_lowering.h"

namespace tessera::codegen::x86 {

using namespace ir;

int KernelLowering::chunk_rows(const Type& t, int skip_dim) const {
  int r = t.rank();
  if (r < 2 || skip_dim == r - 1 || skip_dim == r - 2) return 1;
  int64_t minor = t.shape.back();
  int64_t lanes = target_.chunk_lanes;
  if (minor < 1 || minor >= lanes || lanes % minor != 0) return 1;
  int64_t rows = std::min<int64_t>(lanes / minor, t.shape[r - 2]);
  while (rows > 1 && t.shape[r - 2] % rows != 0) rows /= 2;
  return static_cast<int>(rows);
}

namespace {

// The integer value of a constant tile or scalar operand (a stride), if it is one.
std::optional<int64_t> constant_int(const Op* def, llvm::Value* scalar_value) {
  if (def && def->kind == OpKind::Const) {
    const Attr& a = def->attrs.at("value");
    if (std::holds_alternative<int64_t>(a)) return std::get<int64_t>(a);
    return std::nullopt;
  }
  if (auto* ci = llvm::dyn_cast_or_null<llvm::ConstantInt>(scalar_value))
    if (ci->getValue().getSignificantBits() <= 63) return ci->getSExtValue();
  return std::nullopt;
}

}  // namespace

std::optional<std::vector<int64_t>> KernelLowering::element_steps(const Value* v) {
  size_t rank = v->type.is_scalar() ? 0 : v->type.shape.size();
  std::vector<int64_t> zeros(rank, 0);
  if (v->type.is_scalar()) return zeros;
  // From the defining op, lazy or materialized alike: the steps are the values'.
  const Op* def = v->def();
  if (!def) return std::nullopt;
  const Op& op = *def;
  auto binary = [&](int sign) -> std::optional<std::vector<int64_t>> {
    auto a = element_steps(op.operands[0]);
    auto b = a ? element_steps(op.operands[1]) : std::nullopt;
    if (!b) return std::nullopt;
    std::vector<int64_t> s(rank, 0);
    for (size_t d = 0; d < rank; ++d)
      s[d] = (a->empty() ? 0 : (*a)[d]) + sign * (b->empty() ? 0 : (*b)[d]);
    return s;
  };
  switch (op.kind) {
    case OpKind::Const: case OpKind::Splat: return zeros;
    case OpKind::Arange: return std::vector<int64_t>{1};
    case OpKind::Hint: return element_steps(op.operands[0]);
    case OpKind::ExpandDims: {
      auto s = element_steps(op.operands[0]);
      if (!s) return std::nullopt;
      s->insert(s->begin() + op.int_attr("axis"), 0);
      return s;
    }
    case OpKind::Broadcast: {
      auto s = element_steps(op.operands[0]);
      if (!s) return std::nullopt;
      const Type& in = op.operands[0]->type;
      for (size_t d = 0; d < rank; ++d)
        if (in.shape[d] == 1) (*s)[d] = 0;
      return s;
    }
    case OpKind::Cast: {
      // integer widening keeps the steps (lanes are assumed not to wrap, as axis info does)
      const ElemType& from = op.operands[0]->type.elem;
      const ElemType& to = v->type.elem;
      if (!from.is_int() || from.is_bool() || !to.is_int() || to.is_bool() || to.bits() < from.bits())
        return std::nullopt;
      return element_steps(op.operands[0]);
    }
    case OpKind::Add: case OpKind::AddPtr: return binary(1);
    case OpKind::Sub: return binary(-1);
    case OpKind::Mul: {
      for (int k = 0; k < 2; ++k) {
        const Value* c = op.operands[k];
        auto factor = constant_int(c->def(), c->type.is_scalar() ? scalar(c) : nullptr);
        if (!factor) continue;
        auto s = element_steps(op.operands[1 - k]);
        if (!s) return std::nullopt;
        for (int64_t& x : *s) x *= *factor;
        return s;
      }
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

bool KernelLowering::rows_are_contiguous(const Value* ptrs, const Chunk& c) {
  auto s = element_steps(ptrs);
  size_t r = ptrs->type.shape.size();
  return s && s->size() == r && (*s)[r - 1] == 1 && (*s)[r - 2] == ptrs->type.shape.back();
}

namespace {

// One vector of the parts' lanes in order (parts all scalars, or all vectors of one width).
llvm::Value* concat_lanes(llvm::IRBuilderBase& b, std::vector<llvm::Value*> parts) {
  if (!parts[0]->getType()->isVectorTy()) {
    llvm::Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(parts[0]->getType(), parts.size()));
    for (size_t i = 0; i < parts.size(); ++i) v = b.CreateInsertElement(v, parts[i], uint64_t(i));
    return v;
  }
  while (parts.size() > 1) {
    std::vector<llvm::Value*> next;
    for (size_t i = 0; i + 1 < parts.size(); i += 2) {
      int w = static_cast<int>(llvm::cast<llvm::FixedVectorType>(parts[i]->getType())->getNumElements());
      std::vector<int> all;
      for (int l = 0; l < 2 * w; ++l) all.push_back(l);
      next.push_back(b.CreateShuffleVector(parts[i], parts[i + 1], all));
    }
    if (parts.size() % 2) next.push_back(parts.back());
    parts = next;
  }
  return parts[0];
}

}  // namespace

llvm::Value* KernelLowering::emit_row_by_row(const Value* v, const Chunk& c) {
  size_t r = c.idx.size();
  std::vector<llvm::Value*> parts;
  for (int i = 0; i < c.rows; ++i) {
    Chunk one = c;
    one.rows = 1;
    one.width = static_cast<int>(v->type.shape.back());
    one.idx[r - 2] = b_.CreateAdd(c.idx[r - 2], b_.getInt64(i));
    parts.push_back(emit_chunk(v, one));
  }
  return concat_lanes(b_, parts);
}

// Worked example, whole: tile<1024x1xi1> broadcast to [1024, 4], rows 4: the operand's
// chunk is its rows 4k .. 4k+3 (4 lanes), shuffled with <0,0,0,0,1,1,1,1,...>.
llvm::Value* KernelLowering::multi_row_broadcast(const Op& op, const Chunk& c) {
  const Type& in = op.operands[0]->type;
  size_t r = c.idx.size();
  int64_t minor = op.result()->type.shape.back();
  int64_t in_minor = in.shape.back();
  Chunk ci = c;
  for (size_t d = 0; d < r; ++d)
    if (in.shape[d] == 1) ci.idx[d] = b_.getInt64(0);
  ci.rows = in.shape[r - 2] == 1 ? 1 : c.rows;
  ci.width = static_cast<int>(ci.rows * in_minor);
  llvm::Value* v = emit_chunk(op.operands[0], ci);
  if (ci.width == 1) return splat_lanes(b_, v, c.width);
  if (ci.rows == c.rows && in_minor == minor) return v;
  std::vector<int> lanes;
  for (int l = 0; l < c.width; ++l) {
    int64_t row = l / minor, col = l % minor;
    lanes.push_back(static_cast<int>((ci.rows == 1 ? 0 : row) * in_minor + (in_minor == 1 ? 0 : col)));
  }
  return b_.CreateShuffleVector(v, lanes);
}

llvm::Value* KernelLowering::multi_row_view_chunk(const TileRef& r, const Type& t, const Chunk& c) {
  llvm::Type* mt = llvm_mem_type(ctx_, t.elem);
  llvm::Value* addr = view_address(r, t, c);
  size_t rank = t.shape.size();
  int64_t row_step = r.strides[rank - 2], col_step = r.strides[rank - 1];
  int64_t minor = t.shape.back();
  llvm::Align align(std::max<unsigned>(1, mt->getScalarSizeInBits() / 8));
  if (row_step == 0 && col_step == 0) return splat_lanes(b_, from_mem(b_, b_.CreateLoad(mt, addr), t.elem), c.width);
  std::vector<int64_t> offs;
  for (int l = 0; l < c.width; ++l) offs.push_back((l / minor) * row_step + (l % minor) * col_step);
  int64_t lo = *std::min_element(offs.begin(), offs.end()), hi = *std::max_element(offs.begin(), offs.end());
  auto* vt = llvm::FixedVectorType::get(mt, c.width);
  if (lo >= 0 && hi < 2 * c.width) {
    // the lanes lie in a short span of the buffer (a broadcast [G, 1] column's R
    // elements, a transposed 2 x 8 block): one load of the span and a shuffle
    auto* span_t = llvm::FixedVectorType::get(mt, static_cast<unsigned>(hi + 1));
    llvm::Value* span = b_.CreateAlignedLoad(span_t, addr, align);
    bool identity = hi + 1 == c.width;
    for (int l = 0; l < c.width && identity; ++l) identity = offs[l] == l;
    if (identity) return from_mem(b_, span, t.elem);
    std::vector<int> lanes(offs.begin(), offs.end());
    return from_mem(b_, b_.CreateShuffleVector(span, lanes), t.elem);
  }
  std::vector<llvm::Constant*> consts;
  for (int64_t o : offs) consts.push_back(b_.getInt64(o));
  llvm::Value* addrs = b_.CreateGEP(mt, addr, llvm::ConstantVector::get(consts));
  return from_mem(b_, b_.CreateMaskedGather(vt, addrs, align), t.elem);
}

// Halving steps inside each row's group of `minor` lanes, e.g. minor 4, rows 4:
// <a0 a1 a2 a3 b0 ..> -> combine(<a0 a1 b0 b1 ..>, <a2 a3 b2 b3 ..>) -> combine of
// its lanes 0, 2, .. and 1, 3, ..: one lane per row.
std::vector<llvm::Value*> KernelLowering::combine_within_rows(const Op& reduce, std::vector<llvm::Value*> vals,
                                                              int rows, int minor) {
  for (int width = minor; width > 1; width /= 2) {
    int h = width / 2;
    std::vector<int> lo_lanes, hi_lanes;
    for (int s = 0; s < rows; ++s)
      for (int i = 0; i < h; ++i) lo_lanes.push_back(s * width + i), hi_lanes.push_back(s * width + h + i);
    std::vector<llvm::Value*> lo, hi;
    for (llvm::Value* v : vals) {
      lo.push_back(b_.CreateShuffleVector(v, lo_lanes));
      hi.push_back(b_.CreateShuffleVector(v, hi_lanes));
    }
    vals = emit_combine(reduce, lo, hi);
  }
  return vals;
}

namespace {

// The single associative, commutative op of a reduce's combine region (nullptr if
// the region is anything else).
const Op* single_combine_op(const Op& reduce) {
  if (reduce.regions.size() != 1) return nullptr;
  const Block& blk = *reduce.regions[0]->block;
  if (blk.ops.size() != 2 || blk.args.size() != 2) return nullptr;
  const Op& f = *blk.ops.front();
  const Op& y = *blk.ops.back();
  if (y.kind != OpKind::Yield || y.operands.size() != 1 || y.operands[0] != f.result()) return nullptr;
  switch (f.kind) {
    case OpKind::Add: case OpKind::Mul: case OpKind::Max: case OpKind::Min: case OpKind::MaximumNan:
    case OpKind::MinimumNan: case OpKind::And: case OpKind::Or: case OpKind::Xor:
      break;
    default: return nullptr;
  }
  const Value* a = blk.args[0].get();
  const Value* b = blk.args[1].get();
  if (f.operands.size() != 2 || !((f.operands[0] == a && f.operands[1] == b) || (f.operands[0] == b && f.operands[1] == a)))
    return nullptr;
  return &f;
}

}  // namespace

const Op* KernelLowering::fusable_inner_reduce(const Op& outer) {
  if (outer.kind != OpKind::Reduce || outer.operands.size() != 1 || outer.int_attr("axis") != 0) return nullptr;
  const Value* mid = outer.operands[0];
  const Op* inner = mid->def();
  if (!inner || inner->kind != OpKind::Reduce || inner->operands.size() != 1 || inner->int_attr("axis") != 1)
    return nullptr;
  const Type& x = inner->operands[0]->type;
  if (x.rank() != 2 || chunk_rows(x) < 2) return nullptr;
  auto it = uses_.find(mid);
  if (it == uses_.end() || it->second.size() != 1 || it->second[0] != &outer) return nullptr;
  // adjacent in one block: nothing runs between them
  if (inner->parent != outer.parent) return nullptr;
  const auto& ops = inner->parent->ops;
  auto at = std::find_if(ops.begin(), ops.end(), [&](const auto& o) { return o.get() == inner; });
  if (at == ops.end() || std::next(at) == ops.end() || std::next(at)->get() != &outer) return nullptr;
  const Op* fi = single_combine_op(*inner);
  const Op* fo = single_combine_op(outer);
  if (!fi || !fo || fi->kind != fo->kind || fi->attrs != fo->attrs) return nullptr;
  return inner;
}

}  // namespace tessera::codegen::x86
