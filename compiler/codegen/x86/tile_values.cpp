// x86 lowering, part 2: tile values — fusion planning, lazy chunk evaluation,
// views over buffers, loop nests, loads and stores (see kernel_lowering.h).
//
// Worked example: y = exp(x - max) with x a tile<1024xf32> View and max a
// scalar. A consumer storing y walks 64 chunks of 16 lanes; for chunk j it emits
//   v = load <16 x float> x_buf[16j]; d = fsub v, splat(max); e = exp_poly(d)
// and stores e — one loop, no temporary for x - max or exp(x - max).
#include <llvm/IR/Intrinsics.h>

#include <algorithm>

#include "codegen/common/elementwise.h"
#include "codegen/x86/kernel_lowering.h"

namespace tessera::codegen::x86 {

using namespace ir;

bool lazy_eligible(const Op& op) {
  if (op.results.size() != 1 || !op.result()->type.is_tile()) return false;
  switch (op.kind) {
    case OpKind::Const: case OpKind::Splat: case OpKind::Arange: case OpKind::Broadcast:
    case OpKind::ExpandDims: case OpKind::Join: case OpKind::Hint: case OpKind::Load:
      return true;
    default:
      return op_has_trait(op.kind, 'E') && op_has_trait(op.kind, 'P');
  }
}

namespace {

bool has_side_effects(const Op& op) {
  if (op_has_trait(op.kind, 'S') && op.kind != OpKind::Return) return true;
  for (auto& r : op.regions)
    for (auto& inner : r->block->ops)
      if (has_side_effects(*inner)) return true;
  return false;
}

// The op of block `b` that is or contains `user`.
const Op* ancestor_in(const Op* user, const Block* b) {
  while (user && user->parent != b) {
    Region* r = user->parent ? user->parent->parent() : nullptr;
    user = r ? r->parent() : nullptr;
  }
  return user;
}

constexpr int kMaxReloads = 4;

// Ops in the integer/bool/pointer expression tree under `v` down to its leaves (arange,
// splat, constants), or -1 if it holds anything else or more than `budget` ops: index
// and mask arithmetic such as `first + 4 * g[:, None] + j[None, :]` or
// `(col >= 0) & (col < n)`, which costs a few vector ops per chunk to recompute.
int index_tree_ops(const Value* v, int budget) {
  if (v->type.is_scalar()) return 0;
  const Op* d = v->def();
  if (!d || budget <= 0 || v->type.elem.is_float()) return -1;
  switch (d->kind) {
    case OpKind::Const: case OpKind::Splat: case OpKind::Arange: return 1;
    case OpKind::ExpandDims: case OpKind::Broadcast: case OpKind::Hint: case OpKind::Add: case OpKind::Sub:
    case OpKind::Mul: case OpKind::AddPtr: case OpKind::Cmp: case OpKind::And: case OpKind::Or: case OpKind::Xor:
    case OpKind::Cast:
      break;
    default: return -1;
  }
  int total = 1;
  for (const Value* o : d->operands) {
    if (o->type.is_tile() && o->type.elem.is_float()) return -1;
    int n = index_tree_ops(o, budget - total);
    if (n < 0) return -1;
    total += n;
  }
  return total <= budget ? total : -1;
}

}  // namespace

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] == 1) s[d] = 0;  // index is always 0: any stride works
  return s;
}

bool is_contiguous(const TileRef& r, const Type& t) {
  if (r.kind != TileRef::View || r.offset != 0) return false;
  auto rm = row_major_strides(t.shape);
  for (size_t d = 0; d < rm.size(); ++d)
    if (t.shape[d] != 1 && r.strides[d] != rm[d]) return false;
  return true;
}


TileRef& KernelLowering::tile(const Value* v) {
  auto it = tiles_.find(v);
  if (it == tiles_.end()) throw CompileError("tile value used before it was lowered (this is a Tessera bug)", false);
  return it->second;
}

// Small enough to stay in the core's caches between a program's passes over it, and
// contiguous along the minor dimension (a reload is a plain vector load, not a gather).
bool KernelLowering::reloadable(const Op& load) const {
  constexpr int64_t kMaxReloadBytes = 32 * 1024;
  const Type& t = load.result()->type;
  if (t.numel() * std::max(1, t.elem.bits() / 8) > kMaxReloadBytes) return false;
  const auto& ai = axis_.get(load.operands[0]);
  return !ai.contiguity.empty() && ai.contiguity.back() >= chunk_width(t);
}

void KernelLowering::plan_fusion(const Block& b) {
  if (!uses_built_) {
    for_each_op(k_.body(), [&](Op* op) {
      for (Value* v : op->operands) uses_[v].push_back(op);
    });
    uses_built_ = true;
  }
  std::vector<const Op*> ops;
  std::unordered_map<const Op*, int> pos;
  for (auto& op : b.ops) pos[op.get()] = static_cast<int>(ops.size()), ops.push_back(op.get());
  std::vector<int> se(ops.size() + 1, 0);  // side-effecting ops before position i
  for (size_t i = 0; i < ops.size(); ++i) se[i + 1] = se[i] + (has_side_effects(*ops[i]) ? 1 : 0);

  // Per value: how many code copies its lazy evaluation would emit (cheap ops are
  // recomputed in each), the last position evaluating it, and whether some copy
  // runs inside a nested region (a loop body: evaluated again every iteration).
  std::unordered_map<const Value*, int> eval_count, root_pos;
  std::unordered_map<const Value*, bool> nested;
  constexpr int kNestedCopies = 4;  // a guess: the nested block may evaluate it a few times
  auto tally = [&](const Value* v, int& count, int& root, bool& in_nested) {
    count = 0, root = -1, in_nested = false;
    for (const Op* user : uses_[v]) {
      const Op* anc = ancestor_in(user, &b);
      if (anc != user && lazy_ifs_.count(anc)) {
        // inside a lazy if's branch: evaluated where the if's results are
        for (const auto& res : anc->results) {
          count += std::max(1, eval_count[res.get()]);
          root = std::max(root, root_pos[res.get()]);
          in_nested |= nested[res.get()];
        }
      } else if (anc != user) {
        count += kNestedCopies;
        in_nested = true;
        root = std::max(root, pos[anc]);
      } else if (lazy_.count(user)) {
        count += eval_count[user->result()];
        root = std::max(root, root_pos[user->result()]);
        in_nested |= nested[user->result()];
      } else {
        count += 1;
        root = std::max(root, pos[user]);
      }
    }
  };
  for (int i = static_cast<int>(ops.size()) - 1; i >= 0; --i) {
    const Op& op = *ops[i];
    if (op.kind == OpKind::If && if_can_be_lazy(op)) {
      // lazy_if.cpp: evaluated per chunk by its results' consumers, when they are
      // few, outside loops, and no side effect runs between the if and them
      std::vector<int> counts, roots;
      bool any_nested = false;
      for (const auto& res : op.results) {
        int count, root;
        bool in_nested;
        tally(res.get(), count, root, in_nested);
        counts.push_back(count), roots.push_back(root);
        any_nested |= in_nested;
      }
      int last = *std::max_element(roots.begin(), roots.end());
      int copies = 0;
      for (int c : counts) copies += c;
      if (!any_nested && last > i && copies <= kMaxReloads && se[last] - se[i + 1] == 0) {
        lazy_ifs_.insert(&op);
        for (size_t k = 0; k < op.results.size(); ++k) {
          eval_count[op.results[k].get()] = counts[k];
          root_pos[op.results[k].get()] = roots[k];
          nested[op.results[k].get()] = false;
        }
      }
      continue;
    }
    if (!lazy_eligible(op)) continue;
    const Value* v = op.result();
    int count, root;
    bool in_nested;
    tally(v, count, root, in_nested);
    bool expensive = op.kind == OpKind::Load || op_has_trait(op.kind, 'X');
    // A contiguous load used a few times is loaded again by each use rather than
    // buffered: it is still in L1/L2 the second time, and a reload costs one vector
    // load where the buffer costs a store and a load (and 16 KB more of L1 for a row
    // of 4096 floats). Softmax: x feeds the max and, again, the exp.
    if (op.kind == OpKind::Load && reloadable(op) && count <= kMaxReloads && !in_nested) expensive = false;
    // Leaves (no tile operands) cost an instruction or two per copy, and copies in
    // one chunk body are CSE'd: always lazy. A materialized arange would cost a
    // buffer write per program and turn contiguous addresses into loaded offsets.
    bool leaf = op.kind == OpKind::Const || op.kind == OpKind::Splat || op.kind == OpKind::Arange;
    // So is an op of leaves only (the mask `arange < n`): materializing it would also
    // hide it from mask versioning, which tests such masks once before a loop.
    bool of_leaves = std::all_of(op.operands.begin(), op.operands.end(), [](const Value* o) {
      const Op* d = o->def();
      return d && (d->kind == OpKind::Const || d->kind == OpKind::Splat || d->kind == OpKind::Arange);
    });
    // And so is index and mask arithmetic (recomputing a few integer ops per chunk
    // is cheaper than the 16 KB buffer of a [1024, 4] i32 tile, and keeps the
    // pointers' steps visible to multi-row chunks and the masks to mask versioning).
    constexpr int kIndexTreeBudget = 16;
    bool index_arithmetic = index_tree_ops(v, kIndexTreeBudget) >= 0;
    if (expensive && (count > 1 || in_nested)) continue;
    if (!expensive && !leaf && !of_leaves && !index_arithmetic && count > 8) continue;
    if (op.kind == OpKind::Load && root >= 0 && se[root] - se[i + 1] > 0) continue;
    lazy_.insert(&op);
    eval_count[v] = count;
    root_pos[v] = root;
    nested[v] = in_nested;
  }

  // Deferred materialization: a non-lazy value whose first use (all uses in this
  // block) is a single-operand reduce of the value itself, with no side effects in
  // between (its lazy operands, loads included, are evaluated at the reduce).
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = *ops[i];
    if (lazy_.count(&op) || !lazy_eligible(op)) continue;
    const Value* v = op.result();
    const Op* first = nullptr;
    bool ok = !uses_[v].empty();
    for (const Op* user : uses_[v]) {
      if (ancestor_in(user, &b) != user) ok = false;
      else if (!first || pos[user] < pos[first]) first = user;
    }
    if (!ok || first->kind != OpKind::Reduce || first->operands.size() != 1) continue;
    if (se[pos[first]] - se[i + 1] > 0) continue;
    deferred_[&op] = first;
  }
}

llvm::Value* KernelLowering::alloca_in_entry(llvm::Type* t, int64_t count) {
  llvm::IRBuilder<> eb(entry_, entry_->begin());
  auto* a = eb.CreateAlloca(t, eb.getInt64(count));
  a->setAlignment(llvm::Align(64));
  return a;
}

int KernelLowering::chunk_width(const Type& t) const {
  return static_cast<int>(std::min<int64_t>(t.shape.back(), target_.chunk_lanes));
}

TileRef KernelLowering::new_buffer(const Type& t) {
  TileRef r;
  r.kind = TileRef::View;
  r.base = alloca_in_entry(llvm_mem_type(ctx_, t.elem), t.numel());
  r.strides = row_major_strides(t.shape);
  return r;
}

void KernelLowering::counted_loop(int64_t n, int64_t step, const std::function<void(llvm::Value*)>& body, bool reverse) {
  if (n <= 0) return;  // e.g. the rest of a reduction along a dimension of size 1
  if (n <= step) {
    body(b_.getInt64(0));
    return;
  }
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* loop = llvm::BasicBlock::Create(ctx_, "tile.loop", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "tile.exit", fn_);
  b_.CreateBr(loop);
  b_.SetInsertPoint(loop);
  llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2);
  i->addIncoming(b_.getInt64(0), pre);
  llvm::Value* idx = reverse ? b_.CreateSub(b_.getInt64(n - step), i) : static_cast<llvm::Value*>(i);
  body(idx);
  llvm::Value* next = b_.CreateAdd(i, b_.getInt64(step));
  i->addIncoming(next, b_.GetInsertBlock());
  auto* latch = b_.CreateCondBr(b_.CreateICmpULT(next, b_.getInt64(n)), loop, exit);
  if (keep_loops_rolled_) {
    // Kept small (see keep_loops_rolled_).
    llvm::MDNode* off = llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")});
    llvm::MDNode* id = llvm::MDNode::getDistinct(ctx_, {nullptr, off});
    id->replaceOperandWith(0, id);
    latch->setMetadata(llvm::LLVMContext::MD_loop, id);
  }
  b_.SetInsertPoint(exit);
}

void KernelLowering::loop_nest(const std::vector<int64_t>& shape, int width, int skip_dim,
                               const std::function<void(Chunk&)>& body, int rows) {
  int r = static_cast<int>(shape.size());
  Chunk c;
  c.idx.assign(r, nullptr);
  c.width = width;
  c.rows = rows;
  std::function<void(int)> rec = [&](int d) {
    if (d == r) {
      body(c);
      return;
    }
    if (d == skip_dim) {
      c.idx[d] = nullptr;
      rec(d + 1);
      return;
    }
    int64_t step = d == r - 1 ? (rows > 1 ? shape[d] : width) : d == r - 2 ? rows : 1;
    if (shape[d] == 1 || shape[d] == step) {
      c.idx[d] = b_.getInt64(0);
      rec(d + 1);
      return;
    }
    counted_loop(shape[d], step, [&](llvm::Value* iv) {
      c.idx[d] = iv;
      rec(d + 1);
    });
  };
  rec(0);
}

llvm::Value* KernelLowering::view_address(const TileRef& r, const Type& t, const Chunk& c) {
  llvm::Value* off = b_.getInt64(r.offset);
  for (size_t d = 0; d < c.idx.size(); ++d)
    if (r.strides[d] != 0 && c.idx[d]) off = b_.CreateAdd(off, b_.CreateMul(c.idx[d], b_.getInt64(r.strides[d])));
  return b_.CreateGEP(llvm_mem_type(ctx_, t.elem), r.base, off);
}

llvm::Value* KernelLowering::view_chunk(const TileRef& r, const Type& t, const Chunk& c) {
  if (c.rows > 1) return multi_row_view_chunk(r, t, c);
  llvm::Type* mt = llvm_mem_type(ctx_, t.elem);
  llvm::Value* addr = view_address(r, t, c);
  int64_t inner = r.strides.back();
  llvm::Value* v;
  if (c.width == 1 || inner == 0) {
    v = from_mem(b_, b_.CreateLoad(mt, addr), t.elem);
    return splat_lanes(b_, v, c.width);
  }
  auto* vt = llvm::FixedVectorType::get(mt, c.width);
  if (inner == 1) {
    v = b_.CreateAlignedLoad(vt, addr, llvm::Align(mt->getScalarSizeInBits() / 8 ? mt->getScalarSizeInBits() / 8 : 1));
  } else {
    std::vector<llvm::Constant*> lanes;
    for (int l = 0; l < c.width; ++l) lanes.push_back(b_.getInt64(l * inner));
    llvm::Value* addrs = b_.CreateGEP(mt, addr, llvm::ConstantVector::get(lanes));
    v = b_.CreateMaskedGather(vt, addrs, llvm::Align(1));
  }
  return from_mem(b_, v, t.elem);
}

llvm::Value* KernelLowering::emit_chunk(const Value* v, const Chunk& c) {
  if (v->type.is_scalar()) return splat_lanes(b_, scalar(v), c.width);
  if (known_true_.count(v)) return splat_lanes(b_, b_.getTrue(), c.width);
  const TileRef& r = tile(v);
  if (r.kind == TileRef::View) return view_chunk(r, v->type, c);
  return emit_lazy_chunk(*r.op, r.result_index, c);
}

llvm::Value* KernelLowering::contiguous_pointer(const Value* ptrs, const Chunk& c) {
  if (c.rows > 1) {
    if (!rows_are_contiguous(ptrs, c)) return nullptr;
    // The tile's first address plus the chunk's offset from its steps, in i64: the
    // first address is the same in every chunk (LLVM hoists it), and the offset is
    // the loop's induction variable times a constant, where evaluating the chunk's
    // own i32 index arithmetic costs a sign extension per chunk.
    auto steps = element_steps(ptrs);
    Chunk origin = c;
    for (auto& i : origin.idx) i = b_.getInt64(0);
    origin.width = 1;
    origin.rows = 1;
    llvm::Value* off = b_.getInt64(0);
    for (size_t d = 0; d < c.idx.size(); ++d)
      if ((*steps)[d] != 0 && c.idx[d])
        off = b_.CreateNSWAdd(off, b_.CreateNSWMul(c.idx[d], b_.getInt64((*steps)[d])));
    llvm::Type* elem = llvm_mem_type(ctx_, ptrs->type.elem.pointee_type());
    return b_.CreateGEP(elem, emit_chunk(ptrs, origin), off);
  } else {
    const auto& ai = axis_.get(ptrs);
    if (ai.contiguity.empty() || ai.contiguity.back() < c.width) return nullptr;
  }
  Chunk one = c;
  one.width = 1;
  one.rows = 1;
  return emit_chunk(ptrs, one);
}

llvm::Value* KernelLowering::emit_load_chunk(const Op& op, const Chunk& c) {
  const ElemType& e = op.result()->type.elem;
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  llvm::Align align(std::max<unsigned>(1, mt->getScalarSizeInBits() / 8));
  llvm::Value* mask = op.operands.size() >= 2 ? emit_chunk(op.operands[1], c) : nullptr;
  if (mask && llvm::isa<llvm::Constant>(mask) && llvm::cast<llvm::Constant>(mask)->isAllOnesValue()) mask = nullptr;
  llvm::Value* other = nullptr;
  if (mask) {
    other = op.operands.size() == 3 ? emit_chunk(op.operands[2], c)
                                    : llvm::Constant::getNullValue(llvm_lanes_type(ctx_, e, c.width));
    other = to_mem(b_, other, e);
  }
  if (c.width == 1) {
    llvm::Value* p = emit_chunk(op.operands[0], c);
    if (!mask) return from_mem(b_, b_.CreateLoad(mt, p), e);
    llvm::Value* dummy = alloca_in_entry(mt, 1);
    llvm::Value* v = b_.CreateLoad(mt, b_.CreateSelect(mask, p, dummy));
    return from_mem(b_, b_.CreateSelect(mask, v, other), e);
  }
  auto* vt = llvm::FixedVectorType::get(mt, c.width);
  llvm::Value* v;
  if (llvm::Value* p0 = contiguous_pointer(op.operands[0], c)) {
    prefetch_next_row(op, p0, c);  // row_prefetch.cpp
    v = mask ? masked_load(vt, p0, align, mask, other)
             : static_cast<llvm::Value*>(b_.CreateAlignedLoad(vt, p0, align));
  } else {
    llvm::Value* ptrs = emit_chunk(op.operands[0], c);
    v = masked_gather(vt, ptrs, align, mask, other);
  }
  return from_mem(b_, v, e);
}

llvm::Value* KernelLowering::emit_lazy_chunk(const Op& op, int result, const Chunk& c) {
  const Type& t = op.results[result]->type;
  switch (op.kind) {
    case OpKind::Const: return emit_constant(b_, t.elem, c.width, op.attrs.at("value"));
    case OpKind::Arange: {
      if (c.rows > 1) throw CompileError("a multi-row chunk of a 1-D arange (this is a Tessera bug)", false);
      // start + index stays in [start, end): never wraps.
      llvm::Value* base = b_.CreateTrunc(c.idx.back(), b_.getInt32Ty(), "", /*nuw=*/true, /*nsw=*/true);
      base = b_.CreateNSWAdd(base, b_.getInt32(static_cast<uint32_t>(op.int_attr("start"))));
      if (c.width == 1) return base;
      std::vector<llvm::Constant*> lanes;
      for (int l = 0; l < c.width; ++l) lanes.push_back(b_.getInt32(l));
      return b_.CreateNSWAdd(b_.CreateVectorSplat(c.width, base), llvm::ConstantVector::get(lanes));
    }
    case OpKind::Splat: return splat_lanes(b_, scalar(op.operands[0]), c.width);
    case OpKind::Hint: return emit_chunk(op.operands[0], c);
    case OpKind::Broadcast: {
      if (c.rows > 1) return multi_row_broadcast(op, c);
      const Type& in = op.operands[0]->type;
      Chunk ci = c;
      for (size_t d = 0; d < in.shape.size(); ++d)
        if (in.shape[d] == 1) ci.idx[d] = b_.getInt64(0);
      if (in.shape.back() == 1) ci.width = 1;
      return splat_lanes(b_, emit_chunk(op.operands[0], ci), c.width);
    }
    case OpKind::ExpandDims: {
      int64_t ax = op.int_attr("axis");
      Chunk ci = c;
      if (c.rows > 1 && ax == static_cast<int64_t>(c.idx.size()) - 1) {
        // [G] -> [G, 1]: the chunk's rows are the operand's lanes
        ci.idx.pop_back();
        ci.rows = 1;
        return emit_chunk(op.operands[0], ci);
      }
      ci.idx.erase(ci.idx.begin() + ax);
      if (ci.idx.empty()) return splat_lanes(b_, scalar(op.operands[0]), c.width);
      return emit_chunk(op.operands[0], ci);
    }
    case OpKind::Join: {
      Chunk ci = c;
      llvm::Value* last = ci.idx.back();
      ci.idx.pop_back();
      if (c.rows > 1) {
        // rows i .. i+R-1 of both operands, interleaved: <a_i, b_i, a_i+1, b_i+1, ...>
        ci.rows = 1;
        ci.width = c.rows;
        llvm::Value* a = emit_chunk(op.operands[0], ci);
        llvm::Value* bb = emit_chunk(op.operands[1], ci);
        std::vector<int> lanes;
        for (int l = 0; l < c.rows; ++l) lanes.push_back(l), lanes.push_back(c.rows + l);
        return b_.CreateShuffleVector(a, bb, lanes);
      }
      ci.width = 1;
      llvm::Value* a = emit_chunk(op.operands[0], ci);
      llvm::Value* bb = emit_chunk(op.operands[1], ci);
      if (c.width == 2) {
        llvm::Value* v = llvm::UndefValue::get(llvm::FixedVectorType::get(a->getType(), 2));
        v = b_.CreateInsertElement(v, a, uint64_t(0));
        return b_.CreateInsertElement(v, bb, uint64_t(1));
      }
      return b_.CreateSelect(b_.CreateICmpEQ(last, b_.getInt64(0)), a, bb);
    }
    case OpKind::Load: return emit_load_chunk(op, c);
    case OpKind::Gather: return c.rows > 1 ? emit_row_by_row(op.result(), c) : emit_gather_chunk(op, c);
    case OpKind::If: return emit_lazy_if_chunk(op, result, c);
    default: break;
  }
  std::vector<llvm::Value*> args;
  for (const Value* v : op.operands) args.push_back(emit_chunk(v, c));
  llvm::Value* r = emit_elementwise(b_, op, args);
  if (known_no_wrap_.count(op.results[result].get())) {
    if (auto* bin = llvm::dyn_cast<llvm::OverflowingBinaryOperator>(r)) {
      auto* inst = llvm::cast<llvm::BinaryOperator>(bin);
      if (t.elem.is_unsigned()) inst->setHasNoUnsignedWrap(true);
      else inst->setHasNoSignedWrap(true);
    }
  }
  return r;
}

// A chunk of gather(src, index, axis): each lane's src element is the chunk's own
// position with the axis coordinate replaced by its index lane (clamped into 0 .. n-1),
// read from src's buffer (lower_tile_op made src a View) -- one masked gather a chunk.
llvm::Value* KernelLowering::emit_gather_chunk(const Op& op, const Chunk& c) {
  const Value* src = op.operands[0];
  const TileRef& r = tile(src);
  const Type& st = src->type;
  const int64_t axis = op.int_attr("axis");
  const bool minor = axis == static_cast<int64_t>(c.idx.size()) - 1;
  llvm::Type* mt = llvm_mem_type(ctx_, st.elem);
  // Lane 0's address with the axis coordinate 0; the lanes add their index's rows and,
  // when the chunk runs along another dim than the axis, their own column.
  Chunk at_zero = c;
  at_zero.idx[axis] = b_.getInt64(0);
  llvm::Value* base = view_address(r, st, at_zero);
  llvm::Value* idx = emit_chunk(op.operands[1], c);
  llvm::Type* i64 = c.width == 1 ? static_cast<llvm::Type*>(b_.getInt64Ty()) : llvm::FixedVectorType::get(b_.getInt64Ty(), c.width);
  idx = op.operands[1]->type.elem.is_unsigned() ? b_.CreateZExtOrTrunc(idx, i64) : b_.CreateSExtOrTrunc(idx, i64);
  auto lanes = [&](int64_t v) { return c.width == 1 ? static_cast<llvm::Value*>(b_.getInt64(v)) : b_.CreateVectorSplat(c.width, b_.getInt64(v)); };
  idx = b_.CreateSelect(b_.CreateICmpSLT(idx, lanes(0)), lanes(0), idx);
  idx = b_.CreateSelect(b_.CreateICmpSGT(idx, lanes(st.shape[axis] - 1)), lanes(st.shape[axis] - 1), idx);
  llvm::Value* off = b_.CreateMul(idx, lanes(r.strides[axis]));
  if (c.width == 1) return from_mem(b_, b_.CreateLoad(mt, b_.CreateGEP(mt, base, off)), st.elem);
  if (!minor && r.strides.back() != 0) {
    std::vector<llvm::Constant*> cols;
    for (int l = 0; l < c.width; ++l) cols.push_back(b_.getInt64(l * r.strides.back()));
    off = b_.CreateAdd(off, llvm::ConstantVector::get(cols));
  }
  auto* vt = llvm::FixedVectorType::get(mt, c.width);
  return from_mem(b_, b_.CreateMaskedGather(vt, b_.CreateGEP(mt, base, off), llvm::Align(1)), st.elem);
}

void KernelLowering::write_into(const TileRef& dst, const Value* v) {
  const Type& t = v->type;
  llvm::Type* mt = llvm_mem_type(ctx_, t.elem);
  // (dst is a row-major buffer or a view: multi-row chunks only where its rows follow each other)
  size_t rank = dst.strides.size();
  bool rows_follow = rank >= 2 && (t.shape.back() == 1 || dst.strides.back() == 1) &&
                     dst.strides[rank - 2] == t.shape.back();
  int rows = rows_follow ? chunk_rows(t) : 1;
  int width = rows > 1 ? static_cast<int>(rows * t.shape.back()) : chunk_width(t);
  versioned_loop_nest({v}, t.shape, width, -1, [&](Chunk& c) {
    llvm::Value* val = to_mem(b_, emit_chunk(v, c), t.elem);
    b_.CreateAlignedStore(val, view_address(dst, t, c), llvm::Align(std::max<unsigned>(1, mt->getScalarSizeInBits() / 8)));
  }, nullptr, rows);
}

void KernelLowering::copy_view(const TileRef& dst, const TileRef& src, const Type& t) {
  llvm::Type* mt = llvm_mem_type(ctx_, t.elem);
  loop_nest(t.shape, chunk_width(t), -1, [&](Chunk& c) {
    llvm::Value* val = to_mem(b_, view_chunk(src, t, c), t.elem);
    b_.CreateAlignedStore(val, view_address(dst, t, c), llvm::Align(std::max<unsigned>(1, mt->getScalarSizeInBits() / 8)));
  });
}

TileRef KernelLowering::materialize(const Value* v) {
  const TileRef& r = tile(v);
  if (is_contiguous(r, v->type)) return r;
  TileRef buf = new_buffer(v->type);
  write_into(buf, v);
  tiles_[v] = buf;
  return buf;
}

void KernelLowering::lower_tile_op(const Op& op) {
  const Value* res = op.result();
  if (auto it = fused_dot_adds_.find(&op); it != fused_dot_adds_.end()) {
    tiles_[res] = it->second;  // the dot already stored the sum there
    return;
  }
  if (deferred_.count(&op)) {
    TileRef r;
    r.kind = TileRef::Lazy;
    r.op = &op;
    tiles_[res] = r;
    pending_[res] = new_buffer(res->type);
    return;
  }
  if (is_lazy(op)) {
    TileRef r;
    r.kind = TileRef::Lazy;
    r.op = &op;
    tiles_[res] = r;
    return;
  }
  auto view_of = [&](const Value* v) -> TileRef {
    const TileRef& r = tile(v);
    return r.kind == TileRef::View ? r : materialize(v);
  };
  switch (op.kind) {
    case OpKind::Broadcast: {
      TileRef r = view_of(op.operands[0]);
      const Type& in = op.operands[0]->type;
      for (size_t d = 0; d < in.shape.size(); ++d)
        if (in.shape[d] == 1) r.strides[d] = 0;
      tiles_[res] = r;
      return;
    }
    case OpKind::ExpandDims: {
      TileRef r = view_of(op.operands[0]);
      r.strides.insert(r.strides.begin() + op.int_attr("axis"), 0);
      tiles_[res] = r;
      return;
    }
    case OpKind::Permute: {
      TileRef r = view_of(op.operands[0]);
      auto order = op.ints_attr("order");
      std::vector<int64_t> s;
      for (int64_t o : order) s.push_back(r.strides[o]);
      r.strides = s;
      tiles_[res] = r;
      return;
    }
    case OpKind::Reshape: {
      TileRef r = materialize(op.operands[0]);
      r.strides = row_major_strides(res->type.shape);
      tiles_[res] = r;
      return;
    }
    case OpKind::Gather: {
      // src in a buffer (its elements are read at lane-dependent rows), then the result
      // evaluated chunk by chunk (emit_gather_chunk)
      if (tile(op.operands[0]).kind != TileRef::View) tiles_[op.operands[0]] = materialize(op.operands[0]);
      TileRef r;
      r.kind = TileRef::Lazy;
      r.op = &op;
      tiles_[res] = r;
      materialize(res);
      return;
    }
    case OpKind::Split: {
      TileRef r = view_of(op.operands[0]);
      int64_t s = r.strides.back();
      r.strides.pop_back();
      tiles_[op.result(0)] = r;
      r.offset += s;
      tiles_[op.result(1)] = r;
      return;
    }
    default: break;
  }
  if (!lazy_eligible(op)) unsupported(op, std::string("op '") + op.name() + "' on tiles is not supported on the CPU yet");
  // Evaluate now into a buffer.
  TileRef r;
  r.kind = TileRef::Lazy;
  r.op = &op;
  tiles_[res] = r;
  materialize(res);
}

void KernelLowering::lower_store(const Op& op) {
  const Value* ptrs = op.operands[0];
  const Value* val = op.operands[1];
  const Value* maskv = op.operands.size() == 3 ? op.operands[2] : nullptr;
  const ElemType& e = val->type.elem;
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  llvm::Align align(std::max<unsigned>(1, mt->getScalarSizeInBits() / 8));
  auto store_one = [&](llvm::Value* p, llvm::Value* v, llvm::Value* m) {
    v = to_mem(b_, v, e);
    if (!m) {
      b_.CreateAlignedStore(v, p, align);
      return;
    }
    auto* yes = llvm::BasicBlock::Create(ctx_, "store.on", fn_);
    auto* cont = llvm::BasicBlock::Create(ctx_, "store.cont", fn_);
    b_.CreateCondBr(m, yes, cont);
    b_.SetInsertPoint(yes);
    b_.CreateAlignedStore(v, p, align);
    b_.CreateBr(cont);
    b_.SetInsertPoint(cont);
  };
  if (ptrs->type.is_scalar()) {
    store_one(scalar(ptrs), emit_chunk(val, Chunk{{}, 1}), maskv ? scalar(maskv) : nullptr);
    return;
  }
  llvm::Value* stream = streaming_condition(op);
  int rows = chunk_rows(ptrs->type);
  int width = rows > 1 ? static_cast<int>(rows * ptrs->type.shape.back()) : chunk_width(ptrs->type);
  versioned_loop_nest({ptrs, val, maskv}, ptrs->type.shape, width, -1, [&](Chunk& c) {
    llvm::Value* v = emit_chunk(val, c);
    llvm::Value* m = maskv ? emit_chunk(maskv, c) : nullptr;
    if (m && llvm::isa<llvm::Constant>(m) && llvm::cast<llvm::Constant>(m)->isAllOnesValue()) m = nullptr;
    if (c.width == 1) {
      store_one(emit_chunk(ptrs, c), v, m);
      return;
    }
    v = to_mem(b_, v, e);
    if (llvm::Value* p0 = contiguous_pointer(ptrs, c)) {
      if (m) masked_store(v, p0, align, m);
      else if (streaming_) store_streaming(v, p0);
      else b_.CreateAlignedStore(v, p0, align);
    } else {
      llvm::Value* ps = emit_chunk(ptrs, c);
      if (!m) m = llvm::Constant::getAllOnesValue(llvm::FixedVectorType::get(b_.getInt1Ty(), c.width));
      masked_scatter(v, ps, align, m);
    }
  }, stream, rows);
}

void KernelLowering::lower_atomic(const Op& op) {
  bool cas = op.kind == OpKind::AtomicCas;
  const Value* ptrs = op.operands[0];
  const Value* maskv = !cas && op.operands.size() == 3 ? op.operands[2] : nullptr;
  const Type& rt = op.result()->type;
  const ElemType& e = rt.elem;
  std::string kind = op.str_attr("kind");
  llvm::AtomicRMWInst::BinOp bin = llvm::AtomicRMWInst::Add;
  if (!cas) {
    bool f = e.is_float(), u = e.is_unsigned();
    if (kind == "add") bin = llvm::AtomicRMWInst::Add;
    else if (kind == "fadd") bin = llvm::AtomicRMWInst::FAdd;
    else if (kind == "max") bin = f ? llvm::AtomicRMWInst::FMax : u ? llvm::AtomicRMWInst::UMax : llvm::AtomicRMWInst::Max;
    else if (kind == "min") bin = f ? llvm::AtomicRMWInst::FMin : u ? llvm::AtomicRMWInst::UMin : llvm::AtomicRMWInst::Min;
    else if (kind == "umax") bin = llvm::AtomicRMWInst::UMax;
    else if (kind == "umin") bin = llvm::AtomicRMWInst::UMin;
    else if (kind == "and") bin = llvm::AtomicRMWInst::And;
    else if (kind == "or") bin = llvm::AtomicRMWInst::Or;
    else if (kind == "xor") bin = llvm::AtomicRMWInst::Xor;
    else if (kind == "xchg") bin = llvm::AtomicRMWInst::Xchg;
    else unsupported(op, "unknown atomic kind '" + kind + "'");
    // f16 fadd expands (LLVM AtomicExpand) to a 16-bit cmpxchg loop around an f32 add
    // rounded once, which is the correctly rounded f16 sum.
    bool f16_fadd = e.kind == ScalarKind::F16 && kind == "fadd";
    if ((e.kind == ScalarKind::F16 && !f16_fadd) || e.kind == ScalarKind::BF16 || e.is_bool())
      unsupported(op, "atomics on " + e.str() + " are not supported on the CPU");
  }
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  auto one = [&](const Chunk& c) -> llvm::Value* {
    llvm::Value* p = emit_chunk(ptrs, c);
    llvm::Value* m = maskv ? emit_chunk(maskv, c) : nullptr;
    llvm::Value* slot = alloca_in_entry(mt, 1);
    b_.CreateStore(llvm::Constant::getNullValue(mt), slot);
    llvm::BasicBlock* cont = nullptr;
    if (m) {
      auto* yes = llvm::BasicBlock::Create(ctx_, "atomic.on", fn_);
      cont = llvm::BasicBlock::Create(ctx_, "atomic.cont", fn_);
      b_.CreateCondBr(m, yes, cont);
      b_.SetInsertPoint(yes);
    }
    llvm::Value* old;
    if (cas) {
      llvm::Value* cmp = emit_chunk(op.operands[1], c);
      llvm::Value* nv = emit_chunk(op.operands[2], c);
      if (e.is_float()) {
        llvm::Type* it = b_.getIntNTy(e.bits());
        cmp = b_.CreateBitCast(cmp, it);
        nv = b_.CreateBitCast(nv, it);
      }
      auto* x = b_.CreateAtomicCmpXchg(p, cmp, nv, llvm::MaybeAlign(), llvm::AtomicOrdering::AcquireRelease,
                                       llvm::AtomicOrdering::Acquire);
      old = b_.CreateExtractValue(x, 0);
      if (e.is_float()) old = b_.CreateBitCast(old, mt);
    } else {
      old = b_.CreateAtomicRMW(bin, p, emit_chunk(op.operands[1], c), llvm::MaybeAlign(),
                               llvm::AtomicOrdering::AcquireRelease);
    }
    b_.CreateStore(old, slot);
    if (cont) {
      b_.CreateBr(cont);
      b_.SetInsertPoint(cont);
    }
    return b_.CreateLoad(mt, slot);
  };
  if (rt.is_scalar()) {
    scalars_[op.result()] = one(Chunk{{}, 1});
    return;
  }
  TileRef buf = new_buffer(rt);
  loop_nest(rt.shape, 1, -1, [&](Chunk& c) { b_.CreateStore(one(c), view_address(buf, rt, c)); });
  tiles_[op.result()] = buf;
}

}  // namespace tessera::codegen::x86
