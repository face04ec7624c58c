// NVPTX lowering: warp specialization of a loop whose TMA ring (tma_nvptx.cpp) feeds
// wgmma dots: `tl.range(..., warp_specialize=True)` on sm_90a.
//
// The CTA gets one extra warpgroup, the producer; the loop is lowered twice.
//   producer (thread num_warps*32 alone, after the warpgroup gave up registers with
//   setmaxnreg.dec; its other threads return at once):
//     for every iteration: the ring's address arithmetic (the pipelined loads' slice
//     and the carried values they read, as issue_stage re-lowers them), wait on the
//     stage's "empty" mbarrier, expect_tx + the TMA copies into it; then return. Nothing
//     else of the body is lowered, so it runs ahead by itself, bounded only by the
//     stages the consumers have released -- across tile boundaries and through the
//     epilogue of a flat persistent loop, which nothing overlapped before.
//   consumers (the kernel's num_warps warps, thread ids and layouts unchanged; they take
//   the producer's registers with setmaxnreg.inc):
//     the body as usual, but no copies: wait on the stage's "full" mbarrier, wgmma,
//     arrive on its "empty" mbarrier, epilogue, stores.
// Worked example, the flat persistent x @ W^T (128x256x64 tiles, 8 warps, 3 stages):
//   all 384 threads: mbarrier.init full[0..2] (1), empty[0..2] (8); bar.sync 0
//   tid >= 256:  setmaxnreg.dec 40; tid != 256: ret
//                for w in 0..steps-1: if w >= 3: try_wait.parity empty[w%3], (w/3-1)&1
//                                     expect_tx full[w%3]; the boxes of step w; ret
//   tid < 256:   setmaxnreg.inc 232
//                for j in 0..steps-1: try_wait.parity full[j%3], (j/3)&1; wgmma ...;
//                                     wait_group 1 (group j-1 retired); lane 0 of each warp:
//                                     arrive empty[(j-1)%3] (j > 0); (last K step: wait_group 0,
//                                     epilogue, with bar.sync 1, 256 where it needs a barrier)
// (kernels/linear.py runs it with 4 stages: pipeline_nvptx.cpp keeps the group in flight
// from 3 stages in a specialized loop, where every released stage is refilled at once.)
// Every CTA barrier after the split is the named barrier 1 over the consumers only
// (the producer has returned, and barrier 0 counts every thread of the CTA).
// The loop must be the kernel's own (not inside another loop: the producer returns
// after it), the only specialized one, and load tl.dot operands itself (a ring in an
// inner loop is not taken: the loop to specialize is the flat one, Triton's
// flatten=True) -- else a CompilationError. Where the launch's specialization gives
// the ring no TMA (rows not provably 16-byte aligned, other operand types) the loop
// runs unspecialized, as on targets without TMA and wgmma (sm_80, sm_90 without "a"),
// the CPU and the interpreter (the same source runs everywhere), and with
// TESSERA_TMA=0/2 (debugging switches).
#include <llvm/IR/InlineAsm.h>

#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

// Registers per thread the producer warpgroup keeps: its loop is scalar address
// arithmetic (as CUTLASS's Hopper kernels, 40).
constexpr int kProducerRegs = 40;

bool inside_loop(const Op& op) {
  for (const Block* b = op.parent; b && b->parent() && b->parent()->parent();) {
    const Op* outer = b->parent()->parent();
    if (outer->kind == OpKind::For || outer->kind == OpKind::While) return true;
    b = outer->parent;
  }
  return false;
}

// The body (not its inner loops) loads a tile that a tl.dot of the body reads, directly
// or transposed: what a ring is made of, whatever the launch's alignment.
bool loads_dot_operand(const Block& body) {
  for (auto& op : body.ops) {
    if (op->kind != OpKind::Dot) continue;
    for (int i = 0; i < 2; ++i) {
      const Value* v = op->operands[i];
      if (v->def() && v->def()->kind == OpKind::Permute) v = v->def()->operands[0];
      if (v->def() && v->def()->kind == OpKind::Load && v->def()->parent == &body) return true;
    }
  }
  return false;
}

// A loop nested in `b` loads tl.dot operands.
bool inner_loop_loads_dot_operand(const Block& b) {
  for (auto& op : b.ops)
    for (auto& r : op->regions)
      if ((op->kind == OpKind::For && loads_dot_operand(*r->block)) || inner_loop_loads_dot_operand(*r->block))
        return true;
  return false;
}

}  // namespace

bool asks_warp_specialize(const Op& loop) {
  auto attr = loop.attrs.find("warp_specialize");
  return attr != loop.attrs.end() && std::holds_alternative<int64_t>(attr->second) && std::get<int64_t>(attr->second);
}

bool GpuLowering::warp_specialize_loop(const Op& loop, const std::optional<Pipeline>& pipe) {
  if (!asks_warp_specialize(loop)) return false;
  if (!wgmma_ || !tma_ || tma_cta_barrier_) return false;  // a schedule hint other targets ignore
  const std::string why = "tl.range(..., warp_specialize=True): ";
  if (cluster_)
    unsupported(loop, why + "the kernel calls tl.cluster_reduce_scatter, whose cluster barriers the producer warp "
                            "would not join; leave the loop unspecialized");
  if (inside_loop(loop))
    unsupported(loop, why + "the loop is inside another loop; only a loop of the kernel itself can be specialized "
                            "(its producer warp returns after it)");
  if (producer_threads_)
    unsupported(loop, why + "the kernel already has a warp-specialized loop on this path; only one is supported "
                            "(each branch of an if may specialize its own)");
  if (pipe && pipe->tma) return true;
  const Block& body = *loop.regions[0]->block;
  if (!loads_dot_operand(body) && inner_loop_loads_dot_operand(body))
    unsupported(loop, why + "the tl.dot operands are loaded in an inner loop; write the loop flat (one loop over "
                            "every K step of the program's tiles, as Triton's flatten=True) and specialize that one");
  if (!loads_dot_operand(body))
    unsupported(loop, why + "the loop loads no tl.dot operand, so it has no ring of copies for a producer warp to "
                            "issue");
  // A ring this specialization cannot fill with the TMA (rows not 16-byte aligned, an
  // operand type or layout it does not take, num_stages 1): the loop runs unspecialized,
  // as for other shapes of the same kernel it may not (docs/language.md). In a kernel with
  // another loop that may be specialized, the producer warpgroup that loop's launch has
  // must not run this loop's layouts: it leaves here.
  if (specialize_asks_ > 1) leave_extra_threads();
  return false;
}

namespace {

void emit_setmaxnreg(llvm::IRBuilderBase& b, bool inc, int regs) {
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), {}, false);
  std::string text = std::string("setmaxnreg.") + (inc ? "inc" : "dec") + ".sync.aligned.u32 " + std::to_string(regs) + ";";
  b.CreateCall(llvm::InlineAsm::get(fty, text, "~{memory}", /*hasSideEffects=*/true), {})
      ->addFnAttr(llvm::Attribute::Convergent);
}

}  // namespace

void GpuLowering::emit_producer(const Block& body, Pipeline& p, llvm::Value* lb, llvm::Value* step,
                                const std::function<llvm::Value*(llvm::Value*)>& in_range) {
  // A whole warpgroup, so that it can hand registers over with setmaxnreg (which a
  // warpgroup executes together): launched with W consumer warps and 4 more, every
  // thread gets the registers that 4 SM sub-partitions of 16K registers give a block of
  // W + 4 warps (168 for 8 + 4: three warps per sub-partition); one producer warp would
  // cost as much (a ninth warp also makes three in one sub-partition). The producer keeps
  // kProducerRegs; the consumers take what it releases (8 warps: 168 -> 232).
  producer_threads_ = 128;
  consumer_groups_ = p.ping_pong ? 2 : 1;  // (ping_pong_nvptx.cpp)
  const int consumers = num_threads_ * consumer_groups_;
  const int block = consumers + producer_threads_;
  launch_threads_ = std::max(launch_threads_, block);
  int launch_regs = std::min(255, 65536 / 4 / ((block / 32 + 3) / 4) / 32) / 8 * 8;
  // The maxnreg launch option caps it (.maxnreg): several CTAs of the block per SM (two
  // of 8 + 4 warps at 80).
  if (auto cap = k_.attrs.find("maxnreg"); cap != k_.attrs.end() && std::holds_alternative<int64_t>(cap->second))
    launch_regs = std::min<int>(launch_regs, static_cast<int>(std::get<int64_t>(cap->second)) / 8 * 8);
  // setmaxnreg.inc waits until the pool the block was launched with has the registers:
  // what the producer released is all there is.
  const int pool = launch_regs * block;
  const int consumer_regs = std::min(256, (pool - kProducerRegs * producer_threads_) / consumers / 8 * 8);
  llvm::BasicBlock* producer_bb = llvm::BasicBlock::Create(ctx_, "ws.producer", fn_);
  llvm::BasicBlock* consumer_bb = llvm::BasicBlock::Create(ctx_, "ws.consumer", fn_);
  llvm::BasicBlock* issuer_bb = llvm::BasicBlock::Create(ctx_, "ws.issuer", fn_);
  llvm::BasicBlock* done_bb = llvm::BasicBlock::Create(ctx_, "ws.producer.done", fn_);
  const uint32_t first = static_cast<uint32_t>(consumers);
  b_.CreateCondBr(b_.CreateICmpUGE(tid_, b_.getInt32(first)), producer_bb, consumer_bb);
  b_.SetInsertPoint(producer_bb);
  if (consumer_regs > launch_regs) emit_setmaxnreg(b_, /*inc=*/false, kProducerRegs);
  b_.CreateCondBr(b_.CreateICmpEQ(tid_, b_.getInt32(first)), issuer_bb, done_bb);

  // The issuing thread's loop: iteration iv's copies into stage write_stage.
  b_.SetInsertPoint(issuer_bb);
  in_producer_ = true;
  p.issuer = b_.getTrue();
  b_.CreateStore(b_.getInt32(0), p.write_stage);
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "ws.for.header", fn_);
  auto* loop_body = llvm::BasicBlock::Create(ctx_, "ws.for.body", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(lb->getType(), 2);
  iv->addIncoming(lb, pre);
  b_.CreateCondBr(in_range(iv), loop_body, done_bb);
  b_.SetInsertPoint(loop_body);
  memo_.clear();
  llvm::Value* ws = b_.CreateLoad(b_.getInt32Ty(), p.write_stage);
  issue_stage(body, p, iv, ws, b_.getTrue());
  llvm::Value* n = b_.CreateAdd(ws, b_.getInt32(1));
  b_.CreateStore(b_.CreateSelect(b_.CreateICmpEQ(n, b_.getInt32(static_cast<uint32_t>(p.stages))), b_.getInt32(0), n),
                 p.write_stage);
  llvm::Value* next = b_.CreateAdd(iv, step);
  iv->addIncoming(next, b_.GetInsertBlock());
  b_.CreateBr(header);
  in_producer_ = false;
  p.issuer = nullptr;

  b_.SetInsertPoint(done_bb);
  b_.CreateRetVoid();

  // The consumers go on with the loop and the rest of the kernel.
  b_.SetInsertPoint(consumer_bb);
  if (consumer_regs > launch_regs) emit_setmaxnreg(b_, /*inc=*/true, consumer_regs);
  if (p.ping_pong) {
    // Each warpgroup runs the kernel's num_warps-warp layouts on its own tiles: its
    // thread ids are 0..num_threads-1 again.
    group_ = b_.CreateLShr(tid_, b_.getInt32(7));
    tid_ = b_.CreateAnd(tid_, b_.getInt32(static_cast<uint32_t>(num_threads_ - 1)));
    group_anchor_ = llvm::cast<llvm::Instruction>(tid_);
  }
  memo_.clear();
  smem_written_.clear();
  consumer_barriers_ = true;
  consumer_threads_ = consumers;
}

// Threads past the kernel's num_warps warps (the producer warpgroup a specialized loop
// elsewhere in the kernel launched, warp_specialize_nvptx.cpp) leave here: the path
// goes on with the kernel's warps, its barriers named 1 over them. (Where the launch
// ends up with no extra threads, no thread leaves and the barrier counts them all.)
void GpuLowering::count_specialize_asks(const Block& b) {
  for (auto& o : b.ops) {
    if (o->kind == OpKind::For && asks_warp_specialize(*o)) ++specialize_asks_;
    for (auto& r : o->regions) count_specialize_asks(*r->block);
  }
}

void GpuLowering::leave_extra_threads() {
  if (consumer_barriers_) return;  // split already
  llvm::BasicBlock* leave = llvm::BasicBlock::Create(ctx_, "ws.extra.leave", fn_);
  llvm::BasicBlock* stay = llvm::BasicBlock::Create(ctx_, "ws.extra.stay", fn_);
  b_.CreateCondBr(b_.CreateICmpUGE(tid_, b_.getInt32(static_cast<uint32_t>(num_threads_))), leave, stay);
  b_.SetInsertPoint(leave);
  b_.CreateRetVoid();
  b_.SetInsertPoint(stay);
  consumer_barriers_ = true;
  consumer_threads_ = num_threads_;
}

void GpuLowering::restore_split_state(const SplitState& s) {
  producer_threads_ = s.producer_threads;
  consumer_threads_ = s.consumer_threads;
  consumer_groups_ = s.consumer_groups;
  consumer_barriers_ = s.consumer_barriers;
  tid_ = s.tid;
  group_ = s.group;
  group_anchor_ = s.group_anchor;
  // Values lowered past the split do not dominate the other branch.
  memo_.clear();
  smem_written_.clear();
}

}  // namespace tessera::codegen::nvptx
