// x86 lowering: an if whose branches only compute tiles, evaluated per chunk by its
// results' consumers instead of into a buffer.
//
// cross_entropy's realigned slice (kernels/softmax_ce.py):
//   x = load(src + at, mask=whole)
//   if edge: x = where(whole, x, load(src + at, mask=partial))
//   m = max(max(x, 1), 0); s = sum(sum(exp(x - m), 1), 0)
// An if writes its tile results into a buffer in each branch, which made x a 16 KB
// buffer written once and read twice (the load materialized too: a value used in a
// branch counts as used in a loop) -- a third more time than the same kernel without
// the if. A lazy if is a chunk-level branch instead: each consumer's chunk k computes
//   edge ? where(whole, x, load(partial))[k] : x[k]
// -- the consumer's loop nest is emitted once per branch, under a test of `edge`
// before it (versioned_loop_nest; a branch per chunk kept LLVM from vectorizing
// across chunks) -- and x stays a lazy load, read again by each consumer as a 1-D
// row's is. plan_fusion makes
// an if lazy when its branches hold at most kMaxBranchOps lazy-eligible ops and a
// yield, its results have few uses (each re-evaluates the branch), none in a loop, and
// nothing with side effects runs between the if and its results' last use.
#include "codegen/x86/kernel_lowering.h"

#include <unordered_set>

namespace tessera::codegen::x86 {

using namespace ir;

namespace {
constexpr size_t kMaxBranchOps = 16;
}  // namespace

bool KernelLowering::if_can_be_lazy(const Op& op) const {
  if (op.kind != OpKind::If || op.results.empty() || op.regions.size() != 2) return false;
  for (const auto& res : op.results)
    if (!res->type.is_tile()) return false;
  for (const auto& region : op.regions) {
    const Block& blk = *region->block;
    if (blk.ops.empty() || blk.ops.size() > kMaxBranchOps + 1) return false;
    const Op* y = blk.terminator();
    if (!y || y->kind != OpKind::Yield || y->operands.size() != op.results.size()) return false;
    for (const auto& inner : blk.ops)
      if (inner.get() != y && (!lazy_eligible(*inner) || !inner->regions.empty())) return false;
  }
  return true;
}

void KernelLowering::lower_lazy_if(const Op& op) {
  for (const auto& region : op.regions)
    for (const auto& inner : region->block->ops) {
      if (inner->kind == OpKind::Yield) continue;
      TileRef r;
      r.kind = TileRef::Lazy;
      r.op = inner.get();
      tiles_[inner->result()] = r;
    }
  for (size_t i = 0; i < op.results.size(); ++i) {
    TileRef r;
    r.kind = TileRef::Lazy;
    r.op = &op;
    r.result_index = static_cast<int>(i);
    tiles_[op.result(i)] = r;
  }
}

llvm::Value* KernelLowering::emit_lazy_if_chunk(const Op& op, int result, const Chunk& c) {
  // inside one version of a loop nest split on this if (versioned_loop_nest): that branch
  if (auto it = if_choice_.find(&op); it != if_choice_.end())
    return emit_chunk(op.regions[it->second]->block->terminator()->operands[result], c);
  // elsewhere a branch per chunk
  auto* thenbb = llvm::BasicBlock::Create(ctx_, "lazy_if.then", fn_);
  auto* elsebb = llvm::BasicBlock::Create(ctx_, "lazy_if.else", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "lazy_if.join", fn_);
  b_.CreateCondBr(scalar(op.operands[0]), thenbb, elsebb);
  llvm::Value* vals[2];
  llvm::BasicBlock* ends[2];
  for (int r = 0; r < 2; ++r) {
    b_.SetInsertPoint(r == 0 ? thenbb : elsebb);
    vals[r] = emit_chunk(op.regions[r]->block->terminator()->operands[result], c);
    ends[r] = b_.GetInsertBlock();
    b_.CreateBr(join);
  }
  b_.SetInsertPoint(join);
  llvm::PHINode* phi = b_.CreatePHI(vals[0]->getType(), 2);
  phi->addIncoming(vals[0], ends[0]);
  phi->addIncoming(vals[1], ends[1]);
  return phi;
}

const Op* KernelLowering::undecided_lazy_if(const std::vector<const Value*>& roots) {
  std::unordered_set<const Value*> seen;
  std::vector<const Value*> todo(roots.begin(), roots.end());
  while (!todo.empty()) {
    const Value* v = todo.back();
    todo.pop_back();
    if (!v || v->type.is_scalar() || known_true_.count(v) || !seen.insert(v).second) continue;
    const TileRef& r = tile(v);
    if (r.kind != TileRef::Lazy) continue;
    if (r.op->kind == OpKind::If) {
      auto it = if_choice_.find(r.op);
      if (it == if_choice_.end()) return r.op;
      todo.push_back(r.op->regions[it->second]->block->terminator()->operands[r.result_index]);
      continue;
    }
    for (const Value* o : r.op->operands) todo.push_back(o);
  }
  return nullptr;
}

void KernelLowering::split_on_lazy_if(const Op& lazy_if, const std::function<void()>& emit) {
  auto* thenbb = llvm::BasicBlock::Create(ctx_, "lazy_if.then_nest", fn_);
  auto* elsebb = llvm::BasicBlock::Create(ctx_, "lazy_if.else_nest", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "lazy_if.nests_join", fn_);
  b_.CreateCondBr(scalar(lazy_if.operands[0]), thenbb, elsebb);
  // The nest may define scalars (a reduce's result): each version its own, merged by
  // a phi (as mask_versioning.cpp does).
  auto before = scalars_;
  std::unordered_map<const Value*, llvm::Value*> version_scalars[2];
  llvm::BasicBlock* ends[2];
  for (int r = 0; r < 2; ++r) {
    scalars_ = before;
    b_.SetInsertPoint(r == 0 ? thenbb : elsebb);
    if_choice_[&lazy_if] = r;
    emit();
    ends[r] = b_.GetInsertBlock();
    b_.CreateBr(join);
    version_scalars[r] = scalars_;
  }
  if_choice_.erase(&lazy_if);
  b_.SetInsertPoint(join);
  scalars_ = before;
  for (auto& [v, x] : version_scalars[1]) {
    auto it = before.find(v);
    if (it != before.end() && it->second == x) continue;
    auto other = version_scalars[0].find(v);
    if (!v->def() || v->def()->kind != OpKind::Reduce || other == version_scalars[0].end()) continue;
    llvm::PHINode* phi = b_.CreatePHI(x->getType(), 2);
    phi->addIncoming(other->second, ends[0]);
    phi->addIncoming(x, ends[1]);
    scalars_[v] = phi;
  }
}

std::vector<const Value*> KernelLowering::lazy_inputs(const Op& op, int result) const {
  if (op.kind == OpKind::If) {
    // in a nest version that chose a branch, only that branch's (its masks are the
    // ones mask versioning may test; the other branch's are not evaluated there)
    if (auto it = if_choice_.find(&op); it != if_choice_.end())
      return {op.regions[it->second]->block->terminator()->operands[result]};
    return {op.regions[0]->block->terminator()->operands[result], op.regions[1]->block->terminator()->operands[result]};
  }
  return std::vector<const Value*>(op.operands.begin(), op.operands.end());
}

}  // namespace tessera::codegen::x86
