// NVPTX lowering: ping-pong consumers for a warp-specialized loop
// (`tl.range(..., warp_specialize=True, ping_pong=True)` on sm_90a): two consumer
// warpgroups take the loop's tiles in turn, so one's epilogue runs under the other's MMA.
//
// A flat persistent matmul's loop runs every K step of the program's tiles; a tile ends
// in the iteration whose `if` runs the epilogue and resets the accumulator:
//     for i in tl.range(0, steps, warp_specialize=True, ping_pong=True):
//         acc = tl.dot(a, b, acc); k += BK
//         if k >= K: epilogue(acc); acc = tl.zeros(...)
// With warp_specialize alone (warp_specialize_nvptx.cpp) the kernel's num_warps warps
// split each tile and all of them run its epilogue while the tensor cores idle. With
// ping_pong the kernel is written for one warpgroup (num_warps=4: a 64-row wgmma tile,
// e.g. 64x256, the accumulator in its 128 threads' registers) and launched with two of
// them plus the producer. The iterations form runs (the steps of one tile) that end where
// that `if` resets the carried tiles; runs go to the warpgroups in turn.
// Worked example, 64x256x64 tiles, K = 1024 (16 steps a tile), 4 stages, 12 warps:
//   before the split: thread 0 also inits turn[0], turn[1] (1 arrival each) and arrives
//     on turn[0] (warpgroup 0's first turn).
//   producer (tid 256..383): as warp_specialize_nvptx.cpp, issues every iteration's
//     copies in order: tile 0's 16 stages, tile 1's, ... (the ring is shared).
//   consumer warpgroup g = tid / 128 (thread ids tid % 128 from here, so the layouts
//   are the kernel's 4-warp ones), turn = 0, for every iteration j:
//     turn == g:  a run's first step: try_wait.parity turn[g], runs_g & 1 (the other
//                 warpgroup has waited for all its stages: no full barrier can be two
//                 phases behind this warpgroup's parity);
//                 try_wait full[j%4]; wgmma (m64n256k16 x 4); wait_group 1 (a group in
//                 flight within the run); lane 0 of each of g's 4 warps: arrive
//                 empty[(j-1)%4] (the empty barriers count 4 arrivals; not in a run's first
//                 step); on a run's last step, entering the epilogue branch: wait_group 0,
//                 arrive empty[(j-1)%4] and empty[j%4], thread 0: arrive turn[1-g] -- the
//                 tensor cores are the other warpgroup's while this one runs the epilogue,
//                 whose CTA barriers are the named barrier 2 + g over g's 128 threads and
//                 whose shared memory is g's own copy (group_smem);
//     else:       read stage and phase advance; the carried scalars (t, k) advance.
//     turn ^= (k >= K)
//   After the loop: bar.sync 1, 256; warpgroup 1 returns, 0 goes on alone (barrier 1 over
//   its 128 threads).
// Measured on an H100 (bench/results/kernels_cuda_float16_pingpong.md): correct, but a
// 64-row tile loads B for half the rows of the cooperative 128x256 tile (1.67x the L2 ->
// shared bytes per MAC), and the mainloop, not the epilogue, then sets the pace: 0.77 of
// cuBLAS against the cooperative kernel's 0.97 (x @ W^T + b, 4096x1024x2048 fp16).
// The sequential meaning is kept exactly (the CPU and the interpreter run the loop in
// order): every carried tile starts from zeros and is reset to zeros in the run-ending
// branch, so a run's tiles never depend on the run before, which the other warpgroup ran;
// carried scalars and the run-ending condition are computed by both warpgroups in every
// iteration, so they may read no tile; the loop's tile results are not used after it.
// Else a CompilationError says which rule the loop breaks.
#include <llvm/IR/InlineAsm.h>

#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

bool asks_ping_pong(const Op& loop) {
  auto attr = loop.attrs.find("ping_pong");
  return attr != loop.attrs.end() && std::holds_alternative<int64_t>(attr->second) && std::get<int64_t>(attr->second);
}

void GpuLowering::plan_ping_pong(const Op& loop, Pipeline& p) {
  const std::string why = "tl.range(..., ping_pong=True): ";
  if (num_warps_ != 4)
    unsupported(loop, why + "each of the two consumer warpgroups runs a whole tile, so the kernel is written for one "
                            "warpgroup: launch it with num_warps=4 (got " + std::to_string(num_warps_) + ")");
  const Block& body = *loop.regions[0]->block;
  const Op* yield = body.terminator();
  const size_t n = loop.operands.size() - 3;
  // The if that resets every carried tile: the branch whose yield gives it zeros.
  for (size_t i = 0; i < n; ++i) {
    if (!body.args[1 + i]->type.is_tile()) continue;
    const Value* y = yield->operands[i];
    const Op* f = y->def();
    const std::string which = "the loop's carried tile #" + std::to_string(i + 1);
    if (!is_zero_const(loop.operands[3 + i]))
      unsupported(loop, why + which + " does not start from zeros; each warpgroup's tiles start from zeros, as the "
                              "tile a run-ending branch resets it to");
    if (has_uses(loop.results[i].get()))
      unsupported(loop, why + which + " is used after the loop; with two warpgroups taking turns there is no one "
                              "value to use (reset it in the loop and keep what the tile makes in memory)");
    int branch = -1;
    if (f && f->kind == OpKind::If && f->parent == &body) {
      size_t j = 0;
      while (j < f->results.size() && f->result(j) != y) ++j;
      for (int r = 0; r < 2 && branch < 0; ++r) {
        const Op* ry = f->regions[r]->block->terminator();
        if (ry && ry->kind == OpKind::Yield && j < ry->operands.size() && is_zero_const(ry->operands[j])) branch = r;
      }
    }
    if (branch < 0 || (p.reset_if && (p.reset_if != f || p.reset_branch != branch)))
      unsupported(loop, why + which + " is not reset to zeros by the loop's `if` that ends a tile (`if last: "
                              "epilogue(acc); acc = tl.zeros(...)`); the warpgroups take turns at that if");
    p.reset_if = f;
    p.reset_branch = branch;
  }
  if (!p.reset_if)
    unsupported(loop, why + "the loop carries no tile (an accumulator) that an `if` resets at the end of a tile, so "
                            "there are no tiles for the warpgroups to take in turn");
  // What the warpgroup whose turn it is not still computes: the carried scalars and the
  // condition that ends a run.
  std::set<const Op*> slice;
  auto need = [&](const Value* v, const std::string& what) {
    if (!collect_slice(body, v, slice))
      unsupported(loop, why + what + " is computed from a load, a dot or a branch of the loop; both warpgroups "
                              "compute it in every iteration (the other one's too), so it must be plain arithmetic "
                              "on scalars");
  };
  for (size_t i = 0; i < n; ++i)
    if (!body.args[1 + i]->type.is_tile())
      need(yield->operands[i], "the loop's carried scalar #" + std::to_string(i + 1));
  need(p.reset_if->operands[0], "the condition of the `if` that ends a tile");
  for (auto& op : body.ops)
    if (slice.count(op.get())) p.scalar_ops.push_back(op.get());
  p.ping_pong = true;
}

namespace {

void emit_asm(llvm::IRBuilderBase& b, const std::string& text, std::vector<llvm::Value*> args,
              const std::string& constraints) {
  std::vector<llvm::Type*> types;
  for (llvm::Value* a : args) types.push_back(a->getType());
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), types, false);
  b.CreateCall(llvm::InlineAsm::get(fty, text, constraints, /*hasSideEffects=*/true), args)
      ->addFnAttr(llvm::Attribute::Convergent);
}

}  // namespace

void GpuLowering::emit_ping_pong_barriers(Pipeline& p) {
  // Before the split, by thread 0, in the ring's prologue (tma_prologue: it fences the
  // mbarrier inits and synchronizes the CTA after them): one arrival completes a turn;
  // warpgroup 0's first is given now.
  p.turn_bars = new_smem(b_.getInt64Ty(), 2, "pingpong_turn", 8);
  llvm::Value* leader = b_.CreateICmpEQ(tid_, b_.getInt32(0));
  for (int g = 0; g < 2; ++g)
    emit_asm(b_, "@$1 mbarrier.init.shared::cta.b64 [$0], 1;",
             {smem32(b_.CreateInBoundsGEP(b_.getInt8Ty(), p.turn_bars, b_.getInt32(8 * g))), leader}, "r,b,~{memory}");
  emit_asm(b_, "@$1 mbarrier.arrive.shared::cta.b64 _, [$0];", {smem32(p.turn_bars), leader}, "r,b,~{memory}");
  p.turn = alloca_in_entry(b_.getInt32Ty());
  p.runs = alloca_in_entry(b_.getInt32Ty());
  p.run_start = alloca_in_entry(b_.getInt1Ty());
  p.released = alloca_in_entry(b_.getInt1Ty());
  b_.CreateStore(b_.getInt32(0), p.turn);  // warpgroup 0 runs the first tile
  b_.CreateStore(b_.getInt32(0), p.runs);
  b_.CreateStore(b_.getTrue(), p.run_start);
  b_.CreateStore(b_.getFalse(), p.released);
}

void GpuLowering::ping_pong_hand_over(Pipeline& p) {
  // The run's last wgmma has retired (no group stays in flight in a ping-pong loop):
  // its stage goes back to the producer now, not after the epilogue, and the other
  // warpgroup may start (every stage of this run has landed: its parity waits are safe).
  // With a wgmma group in flight (pipeline_nvptx.cpp) the stage of the run's previous
  // iteration is still held too: the branch waited for both (lower_if).
  llvm::Value* lane0 = b_.CreateICmpEQ(b_.CreateAnd(tid_, b_.getInt32(31)), b_.getInt32(0));
  if (p.wgmma_async) {
    llvm::Value* prev = b_.CreateSelect(b_.CreateICmpEQ(p.current_stage, b_.getInt32(0)),
                                        b_.getInt32(static_cast<uint32_t>(p.stages - 1)),
                                        b_.CreateSub(p.current_stage, b_.getInt32(1)));
    emit_asm(b_, "@$1 mbarrier.arrive.shared::cta.b64 _, [$0];",
             {smem32(empty_of(p, prev)), b_.CreateAnd(lane0, b_.CreateNot(p.first_iteration))}, "r,b,~{memory}");
  }
  emit_asm(b_, "@$1 mbarrier.arrive.shared::cta.b64 _, [$0];", {smem32(empty_of(p, p.current_stage)), lane0},
           "r,b,~{memory}");
  b_.CreateStore(b_.getTrue(), p.released);
  llvm::Value* other = b_.CreateInBoundsGEP(b_.getInt8Ty(), p.turn_bars,
                                            b_.CreateMul(b_.CreateXor(group_, b_.getInt32(1)), b_.getInt32(8)));
  emit_asm(b_, "@$1 mbarrier.arrive.shared::cta.b64 _, [$0];",
           {smem32(other), b_.CreateICmpEQ(tid_, b_.getInt32(0))}, "r,b,~{memory}");
  memo_.clear();
}

llvm::Value* GpuLowering::group_smem(int64_t offset, int64_t bytes) {
  llvm::Value* base = llvm::ConstantExpr::getInBoundsGetElementPtr(b_.getInt8Ty(), dyn_smem_,
                                                                   llvm::ConstantInt::get(b_.getInt64Ty(), offset));
  if (!in_ping_pong_ || consumer_groups_ < 2) return base;
  // Computed where group_ is, so that it dominates every later use (conversion buffers
  // are remembered across blocks: smem_copy_of).
  llvm::IRBuilder<> at_split(group_anchor_);
  return at_split.CreateInBoundsGEP(
      b_.getInt8Ty(), base, at_split.CreateMul(group_, at_split.getInt32(static_cast<uint32_t>(bytes))));
}

void GpuLowering::ping_pong_iteration(const Block& body, Pipeline& p, llvm::Value* step,
                                      const std::function<llvm::Value*(llvm::Value*)>& in_range,
                                      const std::function<void()>& load_args,
                                      const std::function<void(const std::vector<const Value*>&, bool)>& store_yields) {
  auto* i32 = b_.getInt32Ty();
  std::vector<const Value*> ys(body.terminator()->operands.begin(), body.terminator()->operands.end());
  const Value* cond = p.reset_if->operands[0];
  auto run_ends = [&]() -> llvm::Value* {
    llvm::Value* c = scalar(cond);
    return p.reset_branch == 0 ? c : b_.CreateNot(c);
  };
  llvm::Value* mine = b_.CreateICmpEQ(b_.CreateLoad(i32, p.turn), group_);
  auto* own = llvm::BasicBlock::Create(ctx_, "pingpong.own", fn_);
  auto* other = llvm::BasicBlock::Create(ctx_, "pingpong.other", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "pingpong.join", fn_);
  b_.CreateCondBr(mine, own, other);

  // The other warpgroup's iteration: the carried scalars and the ring's read position.
  b_.SetInsertPoint(other);
  memo_.clear();
  std::vector<const Value*> bound;
  for (auto& a : body.args) bound.push_back(a.get());
  for (const Op* o : p.scalar_ops)
    for (auto& r : o->results) bound.push_back(r.get());
  SavedBindings saved = forget_bindings(std::move(bound));
  load_args();
  for (const Op* o : p.scalar_ops) lower_op(*o);
  llvm::Value* rs = b_.CreateLoad(i32, p.read_stage);
  llvm::Value* n = b_.CreateAdd(rs, b_.getInt32(1));
  llvm::Value* next_rs = b_.CreateSelect(b_.CreateICmpEQ(n, b_.getInt32(static_cast<uint32_t>(p.stages))),
                                         b_.getInt32(0), n);
  b_.CreateStore(next_rs, p.read_stage);
  tma_advance_phase(p, next_rs);
  store_yields(ys, /*scalars_only=*/true);
  llvm::Value* other_end = run_ends();
  llvm::BasicBlock* other_exit = b_.GetInsertBlock();
  b_.CreateBr(join);
  restore_bindings(saved);

  // This warpgroup's iteration: the whole body, its barriers and buffers its own.
  b_.SetInsertPoint(own);
  memo_.clear();
  llvm::Value* starts = b_.CreateLoad(b_.getInt1Ty(), p.run_start);
  {  // A run's first iteration waits for its turn (the turn_bars[g] completion of this run).
    auto* wait = llvm::BasicBlock::Create(ctx_, "pingpong.turn", fn_);
    auto* go = llvm::BasicBlock::Create(ctx_, "pingpong.go", fn_);
    b_.CreateCondBr(starts, wait, go);
    b_.SetInsertPoint(wait);
    llvm::Value* runs = b_.CreateLoad(i32, p.runs);
    emit_mbarrier_wait(smem32(b_.CreateInBoundsGEP(b_.getInt8Ty(), p.turn_bars, b_.CreateMul(group_, b_.getInt32(8)))),
                       b_.CreateAnd(runs, b_.getInt32(1)));
    b_.CreateStore(b_.CreateAdd(runs, b_.getInt32(1)), p.runs);
    b_.CreateStore(b_.getFalse(), p.run_start);
    b_.CreateBr(go);
    b_.SetInsertPoint(go);
    memo_.clear();
  }
  b_.CreateStore(b_.getFalse(), p.released);
  load_args();
  in_ping_pong_ = true;
  ping_pong_ = &p;
  pipeline_iteration(body, p, step, in_range);
  // A group in flight (wait_group 1) releases the previous iteration's stage, which the
  // run's first iteration does not have (the last run ended with none in flight).
  p.first_iteration = starts;
  lower_block(body);
  pipeline_end_iteration(p);
  in_ping_pong_ = false;
  ping_pong_ = nullptr;
  store_yields(ys, /*scalars_only=*/false);
  llvm::Value* own_end = run_ends();
  b_.CreateStore(own_end, p.run_start);
  llvm::BasicBlock* own_exit = b_.GetInsertBlock();
  b_.CreateBr(join);

  b_.SetInsertPoint(join);
  memo_.clear();
  llvm::PHINode* ends = b_.CreatePHI(b_.getInt1Ty(), 2);
  ends->addIncoming(other_end, other_exit);
  ends->addIncoming(own_end, own_exit);
  llvm::Value* turn = b_.CreateLoad(i32, p.turn);
  b_.CreateStore(b_.CreateXor(turn, b_.CreateZExt(ends, i32)), p.turn);
}

void GpuLowering::ping_pong_exit(Pipeline& p) {
  // Both warpgroups have left the loop (no one polls its barriers any more); the code
  // after it runs once, on warpgroup 0.
  barrier();
  auto* rest = llvm::BasicBlock::Create(ctx_, "pingpong.rest", fn_);
  auto* leave = llvm::BasicBlock::Create(ctx_, "pingpong.leave", fn_);
  b_.CreateCondBr(b_.CreateICmpEQ(group_, b_.getInt32(0)), rest, leave);
  b_.SetInsertPoint(leave);
  b_.CreateRetVoid();
  b_.SetInsertPoint(rest);
  memo_.clear();
  consumer_threads_ = num_threads_;
  llvm::Value* leader = b_.CreateICmpEQ(tid_, b_.getInt32(0));
  for (int g = 0; g < 2; ++g)
    emit_asm(b_, "@$1 mbarrier.inval.shared::cta.b64 [$0];",
             {smem32(b_.CreateInBoundsGEP(b_.getInt8Ty(), p.turn_bars, b_.getInt32(8 * g))), leader}, "r,b,~{memory}");
}

}  // namespace tessera::codegen::nvptx
