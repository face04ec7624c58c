// NVPTX lowering: a stream ring, multi-stage software pipelining of a loop's plain
// loads (not tensor-core operands) through per-thread slots of shared memory filled
// with cp.async (sm_80+). lower_for takes it for a loop that asks for it with
// tl.range(..., num_stages=S), S >= 2, and has no tl.dot.
//
// Why: a loop that walks rows (a normalization's backward, a bias gradient) loads row
// i+1 while it reduces row i at best (a register prefetch in the source), so one row
// per program is in flight. The H200 streams ~4 TB/s and needs ~30 KB in flight per
// SM; carrying rows further ahead in registers costs registers and stalls on the
// copies between them (the copy of a register waits for its load). Here the copies of
// iterations i+1 .. i+S-1 land in shared memory while iteration i computes, and no
// register holds them.
//
// Each thread copies exactly the elements its own registers hold in the load's layout
// (runs of 4, 8 or 16 bytes as the global load would: access_width) and later reads
// back only those, so no barrier is needed: cp.async.wait_group orders a thread's own
// copies before its reads, and the stage a copy overwrites was read by the same thread
// an iteration earlier. A stage holds, per load, run k of thread t at byte
// (k * threads + t) * run_bytes (ld.shared.v4 of a warp: consecutive 16-byte slots).
// A scalar load (a row's mean) takes one 4- or 8-byte slot per thread.
//
// Worked example, S = 3, a loop loading x[r, :] and dy[r, :] (fp16, 4096 columns, 16
// warps: 8 elements a thread, one 16-byte run each) and rstd[r]:
//   prologue:  barrier                              (an earlier use of this memory)
//              for s in 0, 1:  cp.async stage s <- iteration s's runs; commit_group
//   iteration j:
//              cp.async stage (j+2)%3 <- iteration j+2's runs; commit_group
//                                                   (that stage was read in iteration j-1)
//              cp.async.wait_group 2                (iteration j's group has landed)
//              loads of the body: ld.shared from stage j%3
//   after:     cp.async.wait_group 0
// Iterations past the loop's end issue no copies (the commit keeps the group count).
// A masked-off run is copied with src-size 0 (zero-filled); a load whose `other` is not
// zero selects it back in. The addresses of iteration j+S-1 are computed as the dot
// operands' ring computes them (pipeline_nvptx.cpp: the ahead copies of the carried
// values), so loads must be pure functions of the induction variable, loop invariants
// and carried values that advance purely.
//
// The copies of a load are issued S-1 iterations before its turn: a loop asking for a
// ring must not load what an earlier iteration of it stores (docs/language.md).
#include <llvm/IR/InlineAsm.h>

#include "analysis/grid_dependency.h"
#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;


std::optional<GpuLowering::Pipeline> GpuLowering::plan_stream_ring(const Block& body) {
  const Op* loop = body.parent() ? body.parent()->parent() : nullptr;
  // Only on the loop's own request (the kernel's num_stages is the dot rings' default).
  if (cc_ < 80 || in_ping_pong_ || !loop || loop->kind != OpKind::For || !loop->attrs.count("num_stages"))
    return std::nullopt;
  const int stages = static_cast<int>(loop->int_attr("num_stages", 0));
  if (stages < 2 || holds_op(body, OpKind::Dot)) return std::nullopt;
  // Copies run ahead of their iteration, so never past a gdc_wait in the body.
  if (analysis::waits_on_prior_grid(body)) return std::nullopt;
  Pipeline p;
  p.stream = true;
  p.stages = stages;
  std::set<const Op*> slice;
  std::vector<const Op*> loads;
  for (auto& op : body.ops) {
    if (op->kind != OpKind::Load) continue;
    const Value* res = op->result();
    const int eb = res->type.elem.bytes();
    StreamLoad sl;
    sl.load = op.get();
    if (res->type.is_tile()) {
      auto planned = load_layout_.find(res);
      sl.layout = planned != load_layout_.end() ? planned->second : canonical_layout(res->type.shape);
      sl.width = access_width(*op, sl.layout);
      if (sl.width * eb < 4) continue;  // cp.async copies 4, 8 or 16 bytes
      sl.thread_bytes = sl.layout.num_regs() * eb;
    } else {
      if (eb != 4 && eb != 8) continue;
      sl.thread_bytes = eb;
    }
    std::set<const Op*> s;
    bool ok = true;
    for (const Value* a : op->operands) ok = ok && collect_slice(body, a, s);
    if (!ok) continue;
    sl.stage_bytes = (sl.thread_bytes * num_threads_ + 15) / 16 * 16;
    slice.insert(s.begin(), s.end());
    loads.push_back(op.get());
    p.stream_loads.push_back(std::move(sl));
  }
  if (p.stream_loads.empty() || !plan_ahead_values(body, slice, loads, p)) return std::nullopt;
  // Fewer stages where the ring would not fit next to what is already allocated and
  // some room for layout conversions and reductions.
  int64_t per_stage = 0;
  for (auto& sl : p.stream_loads) per_stage += sl.stage_bytes;
  const int64_t budget = max_dynamic_shared_bytes(cc_) - shared_bytes_ - 16 * 1024;
  while (p.stages > 2 && p.stages * per_stage > budget) --p.stages;
  if (p.stages * per_stage > budget) return std::nullopt;
  return p;
}

// The copies of one iteration (its loads' operands bound by issue_stage) into `stage`.
void GpuLowering::stream_issue(Pipeline& p, llvm::Value* stage, llvm::Value* active) {
  auto* i32 = b_.getInt32Ty();
  auto* gptr_ty = llvm::PointerType::get(ctx_, 1);
  for (auto& sl : p.stream_loads) {
    const Op& load = *sl.load;
    const int eb = load.result()->type.elem.bytes();
    const int bytes = sl.width * eb;
    const Value* mask = load.operands.size() >= 2 ? load.operands[1] : nullptr;
    llvm::Value* buf = b_.CreateInBoundsGEP(b_.getInt8Ty(), sl.ring,
                                            b_.CreateMul(stage, b_.getInt32(static_cast<uint32_t>(sl.stage_bytes))));
    // @active cp.async.{cg|ca}.shared.global [dst], [src], bytes, src_size;
    std::string text = std::string("@$3 cp.async.") + (bytes == 16 ? "cg" : "ca") + ".shared.global [$0], [$1], " +
                       std::to_string(bytes) + ", $2;";
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {i32, gptr_ty, i32, b_.getInt1Ty()}, false);
    auto* cp = llvm::InlineAsm::get(fty, text, "r,l,r,b,~{memory}", /*hasSideEffects=*/true);
    auto copy = [&](llvm::Value* src, llvm::Value* pred, llvm::Value* slot) {
      llvm::Value* src_size = pred ? b_.CreateSelect(pred, b_.getInt32(bytes), b_.getInt32(0)) : b_.getInt32(bytes);
      llvm::Value* dst = b_.CreateInBoundsGEP(b_.getInt8Ty(), buf, slot);
      llvm::Value* dst32 = b_.CreateTrunc(b_.CreatePtrToInt(dst, b_.getInt64Ty()), i32);
      b_.CreateCall(fty, cp, {dst32, b_.CreateAddrSpaceCast(src, gptr_ty), src_size, active});
    };
    if (!load.result()->type.is_tile()) {
      copy(scalar(load.operands[0]), mask ? scalar(mask) : nullptr, b_.CreateMul(tid_, b_.getInt32(bytes)));
      continue;
    }
    for (int r0 = 0, k = 0; r0 < sl.layout.num_regs(); r0 += sl.width, ++k) {
      SymIndex s0 = sl.layout.index_of(r0);
      llvm::Value* slot = b_.CreateMul(b_.CreateAdd(b_.getInt32(static_cast<uint32_t>(k * num_threads_)), tid_),
                                       b_.getInt32(bytes));
      copy(at(load.operands[0], s0), mask ? at(mask, s0) : nullptr, slot);
    }
  }
}

// Top of an iteration: the copies of iteration j+S-1 (into the stage iteration j-1
// read), then the wait for iteration j's; the body's loads then read stage j % S.
void GpuLowering::stream_iteration(const Block& body, Pipeline& p, llvm::Value* step,
                                   const std::function<llvm::Value*(llvm::Value*)>& in_range) {
  auto next = [&](llvm::Value* s) {
    llvm::Value* n = b_.CreateAdd(s, b_.getInt32(1));
    return b_.CreateSelect(b_.CreateICmpEQ(n, b_.getInt32(p.stages)), b_.getInt32(0), n);
  };
  llvm::Value* ws = b_.CreateLoad(b_.getInt32Ty(), p.write_stage);
  llvm::Value* iv = b_.CreateLoad(step->getType(), p.ahead_iv);
  issue_stage(body, p, iv, ws, in_range(iv));
  b_.CreateStore(b_.CreateAdd(iv, step), p.ahead_iv);
  b_.CreateStore(next(ws), p.write_stage);
  emit_ptx(b_, "cp.async.wait_group " + std::to_string(p.stages - 1) + ";", /*convergent=*/false);
  llvm::Value* rs = b_.CreateLoad(b_.getInt32Ty(), p.read_stage);
  b_.CreateStore(next(rs), p.read_stage);
  p.current_stage = rs;
  for (auto& sl : p.stream_loads) {
    llvm::Value* buf = b_.CreateInBoundsGEP(b_.getInt8Ty(), sl.ring,
                                            b_.CreateMul(rs, b_.getInt32(static_cast<uint32_t>(sl.stage_bytes))));
    streamed_[sl.load] = {&sl, buf};
  }
}

std::vector<llvm::Value*> GpuLowering::streamed_load(const Op& op) {
  auto it = streamed_.find(&op);
  if (it == streamed_.end()) return {};
  const StreamLoad& sl = *it->second.first;
  llvm::Value* buf = it->second.second;
  const ElemType& e = op.result()->type.elem;
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  const int bytes = sl.width * e.bytes();
  auto read = [&](llvm::Value* slot, int n) {
    llvm::Value* ptr = b_.CreateInBoundsGEP(b_.getInt8Ty(), buf, slot);
    llvm::Type* t = n == 1 ? mt : llvm::FixedVectorType::get(mt, n);
    llvm::Value* v = b_.CreateAlignedLoad(t, ptr, llvm::Align(bytes));
    std::vector<llvm::Value*> out;
    if (n == 1) out.push_back(from_mem(b_, v, e));
    else
      for (int i = 0; i < n; ++i) out.push_back(from_mem(b_, b_.CreateExtractElement(v, b_.getInt32(i)), e));
    return out;
  };
  const Value* mask = op.operands.size() >= 2 ? op.operands[1] : nullptr;
  const bool select_other = mask && op.operands.size() >= 3 && !is_zero_const(op.operands[2]);  // masked-off runs were zero-filled
  if (!op.result()->type.is_tile()) {
    llvm::Value* v = read(b_.CreateMul(tid_, b_.getInt32(bytes)), 1)[0];
    if (select_other) v = b_.CreateSelect(scalar(mask), v, scalar(op.operands[2]));
    return {v};
  }
  std::vector<llvm::Value*> regs;
  for (int r0 = 0, k = 0; r0 < sl.layout.num_regs(); r0 += sl.width, ++k) {
    llvm::Value* slot = b_.CreateMul(b_.CreateAdd(b_.getInt32(static_cast<uint32_t>(k * num_threads_)), tid_),
                                     b_.getInt32(bytes));
    std::vector<llvm::Value*> vals = read(slot, sl.width);
    if (select_other) {
      SymIndex s0 = sl.layout.index_of(r0);
      llvm::Value* m = at(mask, s0);
      for (int i = 0; i < sl.width; ++i) vals[i] = b_.CreateSelect(m, vals[i], at(op.operands[2], sl.layout.index_of(r0 + i)));
    }
    regs.insert(regs.end(), vals.begin(), vals.end());
  }
  return regs;
}

}  // namespace tessera::codegen::nvptx
