// NVPTX lowering, part 6: atomic_rmw and atomic_cas on global memory.
//
// Each element's atomic is an LLVM atomicrmw / cmpxchg on an addrspace(1) pointer,
// which NVPTX emits as atom.global.* (or a CAS loop where the hardware has no such
// atom). A layout may replicate a small tile across threads (tile<16xi32> on 128
// threads: threads t, t+16, t+32, ... hold element t&15); only the first replica
// performs the atomic, and when the old values are used they travel to the
// replicas through shared memory. Worked example, a histogram of 1024 keys on 128
// threads: each thread owns 8 keys and issues 8 `atom.global.add.u32`, predicated
// on the mask. A scalar atomic runs in thread 0 and its result is broadcast.
#include <llvm/IR/InlineAsm.h>

#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

constexpr unsigned kGlobalAS = 1;

void collect_uses(const Block& b, std::set<const Value*>& used) {
  for (auto& op : b.ops) {
    for (const Value* v : op->operands) used.insert(v);
    for (auto& r : op->regions) collect_uses(*r->block, used);
  }
}

}  // namespace

bool GpuLowering::has_uses(const Value* v) {
  if (!used_ready_) {
    collect_uses(*k_.body(), used_);
    used_ready_ = true;
  }
  return used_.count(v) > 0;
}

void GpuLowering::lower_atomic(const Op& op) {
  const bool cas = op.kind == OpKind::AtomicCas;
  const Value* ptrs = op.operands[0];
  const Value* mask = !cas && op.operands.size() == 3 ? op.operands[2] : nullptr;
  const Value* res = op.result();
  const ElemType& e = res->type.elem;
  const std::string kind = cas ? "cas" : op.str_attr("kind");
  llvm::AtomicRMWInst::BinOp bin = llvm::AtomicRMWInst::Add;
  if (e.is_bool()) unsupported(op, "atomics on i1 are not supported");
  if (!cas) {
    bool f = e.is_float(), u = e.is_unsigned();
    if (kind == "add") bin = f ? llvm::AtomicRMWInst::FAdd : llvm::AtomicRMWInst::Add;
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
    if (bin == llvm::AtomicRMWInst::FAdd && !f) unsupported(op, "atomic 'fadd' needs a float element type");
    if (f && (bin == llvm::AtomicRMWInst::And || bin == llvm::AtomicRMWInst::Or || bin == llvm::AtomicRMWInst::Xor ||
              bin == llvm::AtomicRMWInst::UMax || bin == llvm::AtomicRMWInst::UMin))
      unsupported(op, "atomic '" + kind + "' needs an integer element type");
  }
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  llvm::Type* gptr_ty = llvm::PointerType::get(ctx_, kGlobalAS);
  // Acquire-release semantics at GPU scope (Triton's default sem and scope) for the
  // whole op: relaxed atomics between two `fence.acq_rel.gpu`, not a fence per
  // element. (LLVM 19's NVPTX selects no scoped fences, and ignores the ordering
  // of atomicrmw: it always emits relaxed atom.global.)
  auto fence = [&] {
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), false);
    b_.CreateCall(fty, llvm::InlineAsm::get(fty, "fence.acq_rel.gpu;", "~{memory}", /*hasSideEffects=*/true));
  };
  const llvm::SyncScope::ID gpu_scope = llvm::SyncScope::System;
  // A scalar atomic is one operation of the program, performed by thread 0: the
  // program's earlier writes, made by all of its threads, must be ordered before it (a
  // barrier, then thread 0's release fence), or a program that counts itself done
  // (the last-arriver pattern of kernels/reduce.py's _finish_split) could be counted
  // before another warp's partial store and the last one read a stale partial.
  // Scalar control flow is uniform across the program, so every thread reaches it.
  if (res->type.is_scalar()) barrier();
  fence();

  // One element: the atomic when `pred` holds (null: always), else 0.
  auto one = [&](const SymIndex& s, llvm::Value* pred) -> llvm::Value* {
    llvm::Value* p = b_.CreateAddrSpaceCast(at(ptrs, s), gptr_ty);
    llvm::BasicBlock* pre = nullptr;
    llvm::BasicBlock* cont = nullptr;
    if (pred) {
      auto* yes = llvm::BasicBlock::Create(ctx_, "atomic.on", fn_);
      cont = llvm::BasicBlock::Create(ctx_, "atomic.cont", fn_);
      pre = b_.GetInsertBlock();
      b_.CreateCondBr(pred, yes, cont);
      b_.SetInsertPoint(yes);
    }
    llvm::Value* old;
    if (cas) {
      llvm::Value* cmp = to_mem(b_, at(op.operands[1], s), e);
      llvm::Value* nv = to_mem(b_, at(op.operands[2], s), e);
      if (e.is_float()) {
        llvm::Type* it = b_.getIntNTy(e.bits());
        cmp = b_.CreateBitCast(cmp, it);
        nv = b_.CreateBitCast(nv, it);
      }
      auto* x = b_.CreateAtomicCmpXchg(p, cmp, nv, llvm::MaybeAlign(), llvm::AtomicOrdering::Monotonic,
                                       llvm::AtomicOrdering::Monotonic, gpu_scope);
      old = b_.CreateExtractValue(x, 0);
      if (e.is_float()) old = b_.CreateBitCast(old, mt);
    } else {
      old = b_.CreateAtomicRMW(bin, p, to_mem(b_, at(op.operands[1], s), e), llvm::MaybeAlign(),
                               llvm::AtomicOrdering::Monotonic, gpu_scope);
    }
    if (!pred) return from_mem(b_, old, e);
    llvm::BasicBlock* did = b_.GetInsertBlock();
    b_.CreateBr(cont);
    b_.SetInsertPoint(cont);
    llvm::PHINode* phi = b_.CreatePHI(mt, 2);
    phi->addIncoming(old, did);
    phi->addIncoming(llvm::Constant::getNullValue(mt), pre);
    return from_mem(b_, phi, e);
  };

  // The old values reach the threads that did not perform the atomic through
  // shared memory: the performers store them (at flat index `idx`), a barrier,
  // everyone loads. The barrier before the stores guards a reuse in a loop.
  auto acquire = fence;
  auto broadcast = [&](const std::vector<std::pair<llvm::Value*, llvm::Value*>>& idx_val, llvm::Value* performer,
                       const std::vector<llvm::Value*>& read_idx) {
    llvm::Value* buf = new_smem(mt, res->type.is_tile() ? res->type.numel() : 1, "atomic");
    barrier();
    auto* yes = llvm::BasicBlock::Create(ctx_, "atomic.bcast", fn_);
    auto* cont = llvm::BasicBlock::Create(ctx_, "atomic.bcast.end", fn_);
    b_.CreateCondBr(performer, yes, cont);
    b_.SetInsertPoint(yes);
    for (auto& [i, v] : idx_val) b_.CreateStore(to_mem(b_, v, e), b_.CreateInBoundsGEP(mt, buf, i));
    b_.CreateBr(cont);
    b_.SetInsertPoint(cont);
    barrier();
    std::vector<llvm::Value*> out;
    for (llvm::Value* i : read_idx) out.push_back(from_mem(b_, b_.CreateLoad(mt, b_.CreateInBoundsGEP(mt, buf, i)), e));
    return out;
  };

  if (res->type.is_scalar()) {
    llvm::Value* thread0 = b_.CreateICmpEQ(tid_, b_.getInt32(0));
    llvm::Value* pred = mask ? b_.CreateAnd(thread0, scalar(mask)) : thread0;
    llvm::Value* old = one({}, pred);
    acquire();
    if (has_uses(res)) old = broadcast({{b_.getInt32(0), old}}, thread0, {b_.getInt32(0)})[0];
    scalars_[res] = old;
    return;
  }

  // The layout of the values (or compare operands) when they are a tile, so a
  // loaded tile needs no data movement.
  const Value* shaped = op.operands[1]->type.is_tile() ? op.operands[1] : res;
  BlockedLayout l = preferred_layout(shaped);
  llvm::Value* first = is_first_replica(l);
  std::vector<llvm::Value*> regs;
  for (int r = 0; r < l.num_regs(); ++r) {
    SymIndex s = l.index_of(r);
    llvm::Value* pred = mask ? at(mask, s) : nullptr;
    if (first) pred = pred ? b_.CreateAnd(pred, first) : first;
    regs.push_back(one(s, pred));
  }
  acquire();
  if (first && has_uses(res)) {
    std::vector<std::pair<llvm::Value*, llvm::Value*>> iv;
    std::vector<llvm::Value*> idx;
    for (int r = 0; r < l.num_regs(); ++r) {
      idx.push_back(runtime_index(flat_bits(l.index_of(r))));
      iv.push_back({idx.back(), regs[r]});
    }
    regs = broadcast(iv, first, idx);
  }
  tiles_[res] = TileVal{TileVal::Regs, std::move(l), std::move(regs)};
}

}  // namespace tessera::codegen::nvptx
