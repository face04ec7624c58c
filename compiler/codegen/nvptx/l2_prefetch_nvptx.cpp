// NVPTX lowering: a TMA ring's boxes asked of the L2 some iterations before the
// ring copies them (`tl.range(..., l2_prefetch=P)`, sm_90a).
//
// A ring of S stages keeps at most S iterations of copies in flight per CTA; an L2
// prefetch asks for lines further ahead without shared memory. With P > 0 the issuing
// thread follows each iteration's copies (tma_nvptx.cpp) with one
//   cp.async.bulk.prefetch.tensor.2d.L2.global.tile [map, {x, y}]
// per copy of iteration iv + P, at that iteration's coordinates: the loop body's
// address ops lowered again with the induction variable bound to iv + P * step. By
// the time the ring copies that iteration its lines are in (or on their way to) the
// L2. Only iterations the loop runs are prefetched (its bounds test on iv + P * step);
// a box past the tensor's bounds is dropped by the TMA, so a prefetch never faults.
// Where a box's coordinates read a carried value (a pointer advanced round the loop)
// iteration iv + P's value is not at hand and the hint is ignored, as it is off sm_90a
// or without a TMA ring; the CPU back end and the interpreter ignore it too.
// Measured (bench/results/attention_score_bwd_s15_l2_prefetch.md): on attention_score's
// backward, whose limit turned out not to be requests in flight, every distance was
// slower on both the H200 and the H100, single-kind grids included; the library does
// not set it. It stays as a switch for kernels that are short of requests in flight.
#include <llvm/IR/InlineAsm.h>

#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

void GpuLowering::tma_prefetch_l2(const Block& body, Pipeline& p, llvm::Value* iv) {
  if (p.l2_prefetch <= 0 || !p.tma || !p.ahead_args.empty() || !p.step || !p.in_range) return;
  llvm::Value* ahead =
      b_.CreateAdd(iv, b_.CreateMul(p.step, llvm::ConstantInt::get(iv->getType(), p.l2_prefetch)));
  // The boxes of iteration `ahead`: the address ops lowered with iv bound to it.
  std::vector<const Value*> bound{body.args[0].get()};
  for (const Op* o : p.ops)
    for (auto& r : o->results) bound.push_back(r.get());
  SavedBindings saved = forget_bindings(std::move(bound));
  scalars_[body.args[0].get()] = ahead;
  for (const Op* o : p.ops) lower_op(*o);
  struct Box {
    const TmaMap* map;
    llvm::Value *desc, *inner, *outer;
  };
  std::vector<Box> boxes;
  for (auto& pl : p.loads) {
    const TmaMap& m = *tma_map_of(pl.load);
    boxes.push_back({&m, b_.CreatePtrToInt(fn_->getArg(m.param), b_.getInt64Ty()), tma_coord(m.start[1]),
                     tma_coord(m.start[0])});
  }
  restore_bindings(saved);

  llvm::Value* issuer = p.issuer ? p.issuer : b_.CreateICmpEQ(tid_, b_.getInt32(0));
  llvm::BasicBlock* go = llvm::BasicBlock::Create(ctx_, "l2.prefetch", fn_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "l2.prefetched", fn_);
  b_.CreateCondBr(b_.CreateAnd(issuer, p.in_range(ahead)), go, done);
  b_.SetInsertPoint(go);
  auto* i32 = b_.getInt32Ty();
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt64Ty(), i32, i32}, false);
  auto* prefetch = llvm::InlineAsm::get(fty, "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [$0, {$1, $2}];",
                                        "l,r,r,~{memory}", /*hasSideEffects=*/true);
  for (const Box& box : boxes) {
    const TmaMap& m = *box.map;
    for (int c = 0; c < m.copies; ++c) {
      llvm::Value* x = c ? b_.CreateAdd(box.inner, b_.getInt32(static_cast<uint32_t>(c * m.box_inner))) : box.inner;
      b_.CreateCall(fty, prefetch, {box.desc, x, box.outer});
    }
  }
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
  memo_.clear();  // at() results are valid in the block they were emitted in
}

}  // namespace tessera::codegen::nvptx
