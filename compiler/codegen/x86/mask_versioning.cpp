// x86 lowering: loops specialized for masks that are all true.
//
// Most programs of a masked kernel see a mask that is true everywhere: `offs < n`
// with offs = pid*BLOCK + arange(0, BLOCK) is false only in the last block. For a
// consumer's loop (a store, a reduce, a materialization), masks of the form
// cmp(range, range) (ranges built from arange, splat, constants, +, -, * by a
// constant, broadcast), and `and`s and `or`s of those, get a whole-tile test computed once
// before the loop; the loop is then emitted twice:
//
//   if (pid*BLOCK + BLOCK-1 < n  [no lane wrapped])  { loop, the mask replaced by true }
//   else                                               { loop as before }
//
// In the first copy a masked load is a plain load (`other` is never computed), a
// masked store a plain store and a `where` its true operand: per 16-lane chunk that
// removes the broadcast/or/compare that rebuild the mask and the k-register moves.
//
// Ranges are exact integers (i128): each op's range must fit its type, or some lane
// may have wrapped and the test says "not known".
#include "codegen/common/elementwise.h"
#include "codegen/x86/kernel_lowering.h"

namespace tessera::codegen::x86 {

using namespace ir;

namespace {

bool is_range_int(const ElemType& e) { return e.is_int() && !e.is_bool() && !e.is_ptr(); }

}  // namespace

std::optional<KernelLowering::IntRange> KernelLowering::tile_range(const Value* v) {
  const ElemType& e = v->type.elem;
  if (!is_range_int(e)) return std::nullopt;
  llvm::Type* i128 = b_.getInt128Ty();
  auto ext = [&](llvm::Value* x) { return e.is_unsigned() ? b_.CreateZExt(x, i128) : b_.CreateSExt(x, i128); };
  auto point = [&](llvm::Value* x) { return IntRange{x, x, b_.getTrue()}; };
  if (v->type.is_scalar()) return point(ext(scalar(v)));
  // From the defining op, lazy or materialized alike (a materialized offset tile has
  // the same values): the test only needs the ends of the range.
  const Op* def = v->def();
  if (!def) return std::nullopt;
  const Op& op = *def;
  auto c128 = [&](int64_t x) { return llvm::ConstantInt::get(i128, x, /*signed=*/true); };
  switch (op.kind) {
    case OpKind::Arange: return IntRange{c128(op.int_attr("start")), c128(op.int_attr("end") - 1), b_.getTrue()};
    case OpKind::Splat: return point(ext(scalar(op.operands[0])));
    case OpKind::Const: {
      const Attr& a = op.attrs.at("value");
      if (!std::holds_alternative<int64_t>(a)) return std::nullopt;
      return point(ext(llvm::ConstantInt::get(llvm_elem_type(ctx_, e), std::get<int64_t>(a), true)));
    }
    case OpKind::Broadcast: case OpKind::ExpandDims: case OpKind::Hint: return tile_range(op.operands[0]);
    case OpKind::Add: case OpKind::Sub: case OpKind::Mul: break;
    default: return std::nullopt;
  }
  auto a = tile_range(op.operands[0]);
  auto b = a ? tile_range(op.operands[1]) : std::nullopt;
  if (!b) return std::nullopt;
  IntRange out;
  if (op.kind == OpKind::Add) {
    out.lo = b_.CreateAdd(a->lo, b->lo);
    out.hi = b_.CreateAdd(a->hi, b->hi);
  } else if (op.kind == OpKind::Sub) {
    out.lo = b_.CreateSub(a->lo, b->hi);
    out.hi = b_.CreateSub(a->hi, b->lo);
  } else {
    // Only by a constant (a stride): its sign decides which end is which.
    auto* ca = llvm::dyn_cast<llvm::ConstantInt>(a->lo);
    auto* cb = llvm::dyn_cast<llvm::ConstantInt>(b->lo);
    if (cb && b->lo == b->hi) std::swap(a, b), std::swap(ca, cb);
    if (!ca || a->lo != a->hi || ca->getValue().getSignificantBits() > 33) return std::nullopt;
    bool neg = ca->isNegative();
    out.lo = b_.CreateMul(neg ? b->hi : b->lo, a->lo);
    out.hi = b_.CreateMul(neg ? b->lo : b->hi, a->lo);
  }
  // The op computed in its own type: no lane wrapped when the exact range fits.
  int bits = e.bits();
  llvm::APInt tmin = e.is_unsigned() ? llvm::APInt::getMinValue(bits) : llvm::APInt::getSignedMinValue(bits);
  llvm::APInt tmax = e.is_unsigned() ? llvm::APInt::getMaxValue(bits) : llvm::APInt::getSignedMaxValue(bits);
  llvm::Value* lo_ok = b_.CreateICmpSGE(out.lo, llvm::ConstantInt::get(i128, e.is_unsigned() ? tmin.zext(128) : tmin.sext(128)));
  llvm::Value* hi_ok = b_.CreateICmpSLE(out.hi, llvm::ConstantInt::get(i128, e.is_unsigned() ? tmax.zext(128) : tmax.sext(128)));
  out.ok = b_.CreateAnd(b_.CreateAnd(a->ok, b->ok), b_.CreateAnd(lo_ok, hi_ok));
  range_ops_.push_back(v);
  return out;
}

llvm::Value* KernelLowering::all_true(const Value* m) {
  if (!m->type.elem.is_bool()) return nullptr;
  if (m->type.is_scalar()) return scalar(m);
  const Op* def = m->def();
  if (!def) return nullptr;
  const Op& op = *def;
  switch (op.kind) {
    case OpKind::Splat: return scalar(op.operands[0]);
    case OpKind::Broadcast: case OpKind::ExpandDims: case OpKind::Hint: return all_true(op.operands[0]);
    case OpKind::And: {
      llvm::Value* a = all_true(op.operands[0]);
      llvm::Value* b = a ? all_true(op.operands[1]) : nullptr;
      return b ? b_.CreateAnd(a, b) : nullptr;
    }
    case OpKind::Or: {
      // All true where either side is. The ops whose ranges a side's test proved free of
      // wrapping (range_ops_, nsw in the all-true copy) stay proved only where that side's
      // test alone decides: with both sides tested, either may be the true one, so
      // neither side's ops are recorded; a side with no test records none.
      const size_t mark = range_ops_.size();
      llvm::Value* a = all_true(op.operands[0]);
      if (!a) range_ops_.resize(mark);
      const size_t mid = range_ops_.size();
      llvm::Value* b = all_true(op.operands[1]);
      if (!b) range_ops_.resize(mid);
      if (a && b) {
        range_ops_.resize(mark);
        return b_.CreateOr(a, b);
      }
      return a ? a : b;
    }
    case OpKind::Cmp: {
      auto a = tile_range(op.operands[0]);
      auto b = a ? tile_range(op.operands[1]) : std::nullopt;
      if (!b) return nullptr;
      std::string p = op.str_attr("pred");
      llvm::Value* t;
      if (p == "lt") t = b_.CreateICmpSLT(a->hi, b->lo);
      else if (p == "le") t = b_.CreateICmpSLE(a->hi, b->lo);
      else if (p == "gt") t = b_.CreateICmpSGT(a->lo, b->hi);
      else if (p == "ge") t = b_.CreateICmpSGE(a->lo, b->hi);
      else return nullptr;
      return b_.CreateAnd(t, b_.CreateAnd(a->ok, b->ok));
    }
    default: return nullptr;
  }
}

void KernelLowering::collect_masks(const Value* v, std::unordered_set<const Value*>& seen,
                                   std::vector<std::pair<const Value*, llvm::Value*>>& masks) {
  if (!v || v->type.is_scalar() || !seen.insert(v).second) return;
  const TileRef& r = tile(v);
  // (a materialized mask is tested too: known true, its buffer is not read)
  if (v->type.elem.is_bool() && !known_true_.count(v)) {
    size_t mark = range_ops_.size();
    if (llvm::Value* t = all_true(v)) {
      if (!llvm::isa<llvm::Constant>(t) || llvm::cast<llvm::Constant>(t)->isOneValue()) masks.push_back({v, t});
      return;
    }
    range_ops_.resize(mark);  // not part of any test: may wrap
  }
  if (r.kind != TileRef::Lazy) return;
  for (const Value* o : lazy_inputs(*r.op, r.result_index)) collect_masks(o, seen, masks);
}

void KernelLowering::versioned_loop_nest(const std::vector<const Value*>& roots, const std::vector<int64_t>& shape,
                                         int width, int skip_dim, const std::function<void(Chunk&)>& body,
                                         llvm::Value* stream, int rows) {
  // A lazy if's condition first (lazy_if.cpp): one copy of the nest per branch.
  if (const Op* lazy_if = undecided_lazy_if(roots))
    return split_on_lazy_if(*lazy_if, [&] { versioned_loop_nest(roots, shape, width, skip_dim, body, stream, rows); });
  ++nest_id_;
  // The loop without masks, itself split on `stream` (see streaming_stores.cpp).
  auto unmasked_loop = [&] {
    if (!stream) return loop_nest(shape, width, skip_dim, body, rows);
    auto* streaming = llvm::BasicBlock::Create(ctx_, "store.streaming", fn_);
    auto* cached = llvm::BasicBlock::Create(ctx_, "store.cached", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "store.done", fn_);
    b_.CreateCondBr(stream, streaming, cached);
    b_.SetInsertPoint(streaming);
    streaming_ = true;
    bool saved = keep_loops_rolled_;
    keep_loops_rolled_ = true;
    loop_nest(shape, width, skip_dim, body, rows);
    keep_loops_rolled_ = saved;
    streaming_ = false;
    b_.CreateBr(done);
    b_.SetInsertPoint(cached);
    loop_nest(shape, width, skip_dim, body, rows);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  };
  std::unordered_set<const Value*> seen;
  std::vector<std::pair<const Value*, llvm::Value*>> masks;
  range_ops_.clear();
  for (const Value* v : roots) collect_masks(v, seen, masks);
  std::vector<const Value*> no_wrap = std::move(range_ops_);
  range_ops_.clear();
  bool masked = false;
  for (const Value* v : roots) masked = masked || (v && v->type.elem.is_bool());
  if (masks.empty() && !masked) return unmasked_loop();
  if (masks.empty()) return loop_nest(shape, width, skip_dim, body, rows);
  llvm::Value* cond = b_.getTrue();
  for (auto& m : masks) cond = b_.CreateAnd(cond, m.second);
  auto* fast = llvm::BasicBlock::Create(ctx_, "mask.all_true", fn_);
  auto* general = llvm::BasicBlock::Create(ctx_, "mask.general", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "mask.join", fn_);
  b_.CreateCondBr(cond, fast, general);

  // The body may define scalars (a reduce's result): each copy defines its own,
  // merged by a phi at the join.
  auto before = scalars_;
  b_.SetInsertPoint(fast);
  // The test also proved that the integer arithmetic under the masks never wraps:
  // its adds carry nsw/nuw there, so offsets widen to i64 once, not per chunk.
  auto saved_no_wrap = known_no_wrap_;
  for (auto& m : masks) known_true_.insert(m.first);
  known_no_wrap_.insert(no_wrap.begin(), no_wrap.end());
  unmasked_loop();
  for (auto& m : masks) known_true_.erase(m.first);
  known_no_wrap_ = saved_no_wrap;
  llvm::BasicBlock* fast_end = b_.GetInsertBlock();
  b_.CreateBr(join);
  auto fast_scalars = scalars_;
  scalars_ = before;
  b_.SetInsertPoint(general);
  bool saved_rolled = keep_loops_rolled_;
  keep_loops_rolled_ = true;
  loop_nest(shape, width, skip_dim, body, rows);
  keep_loops_rolled_ = saved_rolled;
  llvm::BasicBlock* general_end = b_.GetInsertBlock();
  b_.CreateBr(join);
  b_.SetInsertPoint(join);
  // Merge the results of the op being lowered (a reduce's scalars); other scalars
  // the body set are temporaries of a combine region, dead after it (and perhaps
  // defined where they would not dominate a phi here): drop them.
  std::vector<const Value*> dead;
  for (auto& [v, x] : scalars_) {
    auto it = before.find(v);
    if (it != before.end() && it->second == x) continue;
    if (!v->def() || v->def()->kind != OpKind::Reduce) {
      dead.push_back(v);
      continue;
    }
    llvm::PHINode* phi = b_.CreatePHI(x->getType(), 2);
    phi->addIncoming(fast_scalars.at(v), fast_end);
    phi->addIncoming(x, general_end);
    x = phi;
  }
  for (const Value* v : dead) {
    auto it = before.find(v);
    if (it != before.end()) scalars_[v] = it->second;
    else scalars_.erase(v);
  }
}

}  // namespace tessera::codegen::x86
