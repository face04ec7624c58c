// NVPTX lowering: multi-stage software pipelining of a K loop's dot operands
// through a ring of shared-memory stages filled with cp.async (sm_80+), used by
// lower_for in place of the one-iteration register prefetch when it applies.
//
// A loop whose body loads the A and/or B tile of a tensor-core dot (the load used
// by that dot alone, its addresses and mask a pure function of the induction
// variable and of carried values that themselves advance purely, e.g. pointer
// tiles `p += BK*stride` or block pointers) keeps `num_stages` (S) copies of each
// such tile in shared memory, already in the dot's swizzled staging format, so the
// dot reads them with ldmatrix directly and no thread ever holds them in registers.
// Worked example, the tutorial matmul (128x128x32 f16 tiles, S = 3):
//   prologue:  barrier                              (a previous run may still read)
//              for s in 0, 1:  cp.async stage s <- tiles of iteration s; commit_group
//   iteration j (stage j%3 is read, stage (j+2)%3 written):
//              cp.async.wait_group 1                (group j, this thread's copies, done)
//              barrier                              (everyone's copies visible; everyone
//                                                    has finished reading stage (j-1)%3)
//              cp.async stage (j+2)%3 <- tiles of iteration j+2; commit_group
//              ldmatrix from stage j%3, mma.sync    (overlaps the copies in flight)
//   after:     cp.async.wait_group 0
// Every thread commits exactly one group per iteration (empty groups past the end),
// so "wait until at most S-2 groups are pending" always means "iteration j landed".
// When the dot runs as wgmma (lower_dot_wgmma_nvptx.cpp) the barrier is preceded by
// fence.proxy.async (wgmma reads through the async proxy), stages are 1024-byte
// aligned, and with S >= 4 the wgmma group of iteration j stays in flight until
// iteration j+1 retires it: the ring then runs S-2 ahead (wait_group S-3), so the
// stage a copy overwrites was read by iteration j-2, retired before the barrier.
// Each copy moves 16 bytes (cp.async.cg; 8 or 4 with .ca where contiguity,
// alignment or mask constancy allow no more); a masked-off run is copied with
// src-size 0, which reads nothing and zero-fills its 16 bytes, so out-of-range K
// (K not a multiple of BK) and M/N edges read as the zeros `other=0` asks for.
// The addresses of iteration j+S-1 come from "ahead" copies of the carried values
// they depend on: the prologue starts them at the loop's inits and every issue
// advances them through the carried values' yields, re-lowered with the body's
// block arguments bound to the ahead values.
// On sm_90a a ring whose loads the host can describe as tensor maps is filled by the
// TMA instead, completing on mbarriers (tma_nvptx.cpp); the stage bookkeeping here is shared.
#include <llvm/IR/InlineAsm.h>

#include <cmath>

#include "analysis/grid_dependency.h"
#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

int count_uses(const Block& b, const Value* v) {
  int n = 0;
  for (auto& op : b.ops) {
    for (const Value* o : op->operands) n += o == v;
    for (auto& r : op->regions) n += count_uses(*r->block, v);
  }
  return n;
}


// Carried-value indices (block argument k >= 1 -> k-1) that `v` or `ops` read.
void carried_args_read(const Block& body, const std::set<const Op*>& ops, const Value* v, std::set<size_t>& out) {
  auto note = [&](const Value* x) {
    for (size_t k = 1; k < body.args.size(); ++k)
      if (body.args[k].get() == x) out.insert(k - 1);
  };
  if (v) note(v);
  for (const Op* op : ops)
    for (const Value* o : op->operands) note(o);
}

void collect_dots(const Block& b, std::vector<const Op*>& out) {
  for (auto& op : b.ops) {
    if (op->kind == OpKind::Dot) out.push_back(op.get());
    for (auto& r : op->regions) collect_dots(*r->block, out);
  }
}

}  // namespace

bool is_zero_const(const Value* v) {
  const Op* op = v->def();
  if (!op) return false;
  if (op->kind == OpKind::Splat || op->kind == OpKind::Broadcast) return is_zero_const(op->operands[0]);
  if (op->kind != OpKind::Const) return false;
  const Attr& a = op->attrs.at("value");
  if (auto* d = std::get_if<double>(&a)) return *d == 0.0 && !std::signbit(*d);
  if (auto* i = std::get_if<int64_t>(&a)) return *i == 0;
  if (auto* b = std::get_if<bool>(&a)) return !*b;
  return false;
}

std::optional<GpuLowering::Pipeline> GpuLowering::plan_pipeline(const Block& body) {
  // The loop's own num_stages (tl.range(..., num_stages=n)) before the kernel's.
  const Op* loop = body.parent() ? body.parent()->parent() : nullptr;
  const int stages = loop ? static_cast<int>(loop->int_attr("num_stages", num_stages_)) : num_stages_;
  if (cc_ < 80 || stages < 2) return std::nullopt;
  // The prologue copies the first stages before the loop: never ahead of a gdc_wait
  // in its body (they may read what the previous grid writes).
  if (analysis::waits_on_prior_grid(body)) return std::nullopt;
  Pipeline p;
  p.stages = stages;
  p.l2_prefetch = loop ? static_cast<int>(loop->int_attr("l2_prefetch", 0)) : 0;
  std::set<const Op*> slice;
  for (auto& op : body.ops) {
    if (op->kind != OpKind::Dot) continue;
    auto kind = mma_kind(*op);
    if (!kind) continue;
    const int eb = (*kind == MmaKind::I8) ? 1 : (*kind == MmaKind::F16 || *kind == MmaKind::BF16) ? 2 : 4;
    for (int i = 0; i < 2; ++i) {
      // The operand is the load, or its transpose (tl.trans(k) in attention): the ring
      // keeps the load's rows either way, so the transpose only swaps which operand
      // dim runs along the buffer's rows.
      const Value* operand = op->operands[i];
      const Value* v = operand;
      bool transposed = false;
      if (v->def() && v->def()->kind == OpKind::Permute && v->def()->ints_attr("order") == std::vector<int64_t>{1, 0} &&
          count_uses(*k_.body(), v) == 1) {
        v = v->def()->operands[0];
        transposed = true;
      }
      const Op* load = v->def();
      if (!load || load->kind != OpKind::Load || load->parent != &body || v->type.rank() != 2) continue;
      if (count_uses(*k_.body(), v) != 1) continue;
      // 32- and 8-bit fragments need K-contiguous buffer rows (no ldmatrix transpose),
      // except a tf32 B that a swapped wgmma reads with ld.shared (while plan_wgmma
      // decides: any dot of a shape it could take).
      const int contig_dim = transposed ? 0 : 1, kdim = i == 0 ? 1 : 0;
      const bool swapped_b =
          i == 1 && (planning_ ? wgmma_swapped_shape_ok(*op) : wgmma_swapped_dots_.count(op.get()) > 0);
      if (eb != 2 && contig_dim != kdim && !swapped_b) continue;
      if (load->operands.size() >= 3 && !is_zero_const(load->operands[2])) continue;
      std::set<const Op*> s;
      bool ok = true;
      for (const Value* a : load->operands) ok = ok && collect_slice(body, a, s);
      if (!ok) continue;
      PipelinedLoad pl;
      pl.load = load;
      const int64_t cols = v->type.shape[1];
      const int vec = static_cast<int>(std::min<int64_t>(16 / eb, cols));
      pl.layout = make_blocked_layout(v->type.shape, vec, num_threads_);
      pl.width = access_width(*load, pl.layout);
      if (pl.width * eb < 4) {  // cp.async copies 4, 8 or 16 bytes
        // A block pointer's mask has no constancy axis analysis proves: the TMA
        // (which checks bounds itself) may still fill the ring.
        if (!tma_ || !match_tma_access(*load, nullptr)) continue;
        pl.needs_tma = true;
      }
      pl.operand = operand;
      pl.geom.contig_dim = contig_dim;
      pl.geom.row_bytes = cols * eb;
      pl.geom.elem_bytes = eb;
      pl.stage_bytes = (v->type.numel() * eb + 127) / 128 * 128;
      slice.insert(s.begin(), s.end());
      p.loads.push_back(std::move(pl));
    }
  }
  if (p.loads.empty()) return std::nullopt;
  // Operands of wgmma dots (plan_wgmma): MN-major operands in 64-element blocks, and stages on
  // 1024-byte boundaries (the swizzle atoms' alignment).
  for (auto& op : body.ops)
    if (wgmma_dots_.count(op.get()))
      for (auto& pl : p.loads) {
        if (pl.operand != op->operands[0] && pl.operand != op->operands[1]) continue;
        p.async_proxy = true;
        pl.stage_bytes = (pl.stage_bytes + 1023) / 1024 * 1024;
        // MN-major operands (N-major B, M-major A) in 64-element column blocks.
        if ((pl.operand == op->operands[1] && pl.geom.contig_dim == 1) ||
            (pl.operand == op->operands[0] && pl.geom.contig_dim == 0))
          pl.geom.block_bytes = pl.load->result()->type.shape[0] * 128;
      }

  std::vector<const Op*> ring_loads;
  for (auto& pl : p.loads) ring_loads.push_back(pl.load);
  if (!plan_ahead_values(body, slice, ring_loads, p)) return std::nullopt;

  // Fewer stages where the ring would not fit next to what is already allocated, the
  // register-staging buffers (unless every dot of the kernel reads only ring stages)
  // and some room for layout conversions.
  int64_t per_stage = 0;
  for (auto& pl : p.loads) per_stage += pl.stage_bytes;
  std::vector<const Op*> dots;
  collect_dots(*k_.body(), dots);
  bool all_from_rings = true;
  for (const Op* d : dots)
    for (int i = 0; i < 2; ++i) {
      bool in_ring = false;
      for (auto& pl : p.loads) in_ring = in_ring || pl.operand == d->operands[i];
      all_from_rings = all_from_rings && in_ring;
    }
  const int64_t staging = dot_smem_[0] || all_from_rings ? 0 : dot_staging_bytes();
  const int64_t budget = max_dynamic_shared_bytes(cc_) - shared_bytes_ - staging - 16 * 1024;
  while (p.stages > 2 && p.stages * per_stage > budget) --p.stages;
  if (p.stages * per_stage > budget) return std::nullopt;
  // Every load of the ring has a tensor map (plan_tma): the TMA fills the stages.
  if (p.async_proxy && !tma_maps_.empty()) {
    p.tma = true;
    for (auto& pl : p.loads) p.tma = p.tma && tma_map_of(pl.load) != nullptr;
  }
  // wgmma dots whose accumulator only goes round the loop keep a group in flight. That
  // costs a stage of lookahead, so only from 4 stages: on an H100 the 128x128x32 matmul
  // fell from 432 to 341-362 TFLOP/s with 3 stages in flight (1 stage ahead) and gained
  // 1-3% with 4 (bench/results/gpu_matmul_notes.md). A warp-specialized loop's producer
  // (warp_specialize_nvptx.cpp) fills every stage the consumers released, so there a
  // group in flight costs one stage of S: from 3 stages (bench/results/kernels_cuda_float16_wspec.md).
  const bool specialized = p.tma && !tma_cta_barrier_ && ws_inflight_from_3_ && loop && loop->kind == OpKind::For &&
                           asks_warp_specialize(*loop);
  // (In a ping-pong loop, ping_pong_nvptx.cpp, within a warpgroup's run of iterations.)
  if (p.async_proxy && p.stages >= (specialized ? 3 : 4)) {
    const Op* y = body.terminator();
    bool all = y && y->kind == OpKind::Yield;
    std::vector<size_t> idx;
    std::vector<std::pair<std::pair<const Op*, int>, const Value*>> waits;
    for (auto& op : body.ops) {
      if (!all || !wgmma_dots_.count(op.get())) continue;
      bool ok = false;
      for (size_t i = 0; i < y->operands.size() && !ok; ++i) {
        const Value* carried = body.args[1 + i].get();
        if (op->operands[2] != carried || count_uses(*k_.body(), carried) != 1) continue;
        if (y->operands[i] == op->result() && count_uses(*k_.body(), op->result()) == 1) {
          ok = true;
          idx.push_back(i);
          continue;
        }
        // Or the accumulator is reset at a tile's end (the persistent matmul's flat loop:
        // `acc = dot(a, b, acc); if last: epilogue(acc); acc = zeros`): it goes round
        // through an if whose other branch yields zeros and alone reads it. That branch
        // waits for the group on entry (lower_if); the path going round keeps it in flight.
        const Op* f = y->operands[i]->def();
        if (!f || f->kind != OpKind::If || f->parent != &body) continue;
        size_t j = 0;
        while (j < f->results.size() && f->result(j) != y->operands[i]) ++j;
        for (int keep = 0; keep < 2 && !ok; ++keep) {
          const Op* ky = f->regions[keep]->block->terminator();
          const Op* ry = f->regions[1 - keep]->block->terminator();
          if (!ky || !ry || ky->kind != OpKind::Yield || ry->kind != OpKind::Yield || ky->operands[j] != op->result() ||
              !is_zero_const(ry->operands[j]) ||
              count_uses(*k_.body(), op->result()) != 1 + count_uses(*f->regions[1 - keep]->block, op->result()))
            continue;
          ok = true;
          idx.push_back(i);
          waits.push_back({{f, 1 - keep}, op->result()});
        }
      }
      all = all && ok;
    }
    if (all && !idx.empty())
      for (auto& [branch, v] : waits) wgmma_wait_in_branch_[branch].insert(v);
    if (all && !idx.empty()) {
      p.wgmma_async = true;
      p.async_results = idx;
      for (auto& op : body.ops)
        if (wgmma_dots_.count(op.get())) wgmma_async_dots_.insert(op.get());
    }
  }
  // Loads only the TMA could copy, in a ring it does not fill: back to plain loads
  // (while plan_wgmma runs, tensor maps are yet to be made).
  if (!p.tma && !planning_) {
    bool dropped = false;
    for (size_t i = p.loads.size(); i-- > 0;)
      if (p.loads[i].needs_tma) {
        p.loads.erase(p.loads.begin() + static_cast<std::ptrdiff_t>(i));
        dropped = true;
      }
    if (p.loads.empty()) return std::nullopt;
    if (dropped && p.wgmma_async) return std::nullopt;  // planned for operands no longer in the ring
  }

  return p;
}

bool GpuLowering::plan_ahead_values(const Block& body, const std::set<const Op*>& slice,
                                    const std::vector<const Op*>& loads, Pipeline& p) {
  std::set<size_t> args;
  for (const Op* load : loads)
    for (const Value* a : load->operands) carried_args_read(body, slice, a, args);
  std::set<size_t> done;
  std::set<const Op*> ahead;
  const Op* yield = body.terminator();
  while (done.size() < args.size()) {
    for (size_t i : std::set<size_t>(args)) {
      if (!done.insert(i).second) continue;
      if (!yield || yield->kind != OpKind::Yield || i >= yield->operands.size()) return false;
      const Value* y = yield->operands[i];
      std::set<const Op*> s;
      if (!collect_slice(body, y, s)) return false;
      carried_args_read(body, s, y, args);
      ahead.insert(s.begin(), s.end());
    }
  }
  p.ahead_args.assign(args.begin(), args.end());
  for (auto& op : body.ops)
    if (slice.count(op.get()) || ahead.count(op.get())) p.ops.push_back(op.get());
  return true;
}

// Issues the copies of the iteration whose induction variable is `iv` (carried
// values: the ahead copies) into ring stage `stage`, commits them as one group and
// advances the ahead values by one iteration. `active`: the iteration exists.
void GpuLowering::issue_stage(const Block& body, Pipeline& p, llvm::Value* iv, llvm::Value* stage, llvm::Value* active) {
  // Bind the block arguments to the ahead values; forget everything computed after.
  std::vector<const Value*> bound;
  for (auto& a : body.args) bound.push_back(a.get());
  for (const Op* o : p.ops)
    for (auto& r : o->results) bound.push_back(r.get());
  SavedBindings saved = forget_bindings(std::move(bound));
  scalars_[body.args[0].get()] = iv;
  for (size_t j = 0; j < p.ahead_args.size(); ++j) {
    const Value* a = body.args[1 + p.ahead_args[j]].get();
    std::vector<llvm::Value*> regs;
    for (llvm::Value* s : p.ahead_slots[j]) regs.push_back(b_.CreateLoad(llvm_elem_type(ctx_, a->type.elem), s));
    if (a->type.is_tile()) tiles_[a] = TileVal{TileVal::Regs, p.ahead_layouts[j], regs};
    else scalars_[a] = regs[0];
  }
  for (const Op* o : p.ops) lower_op(*o);

  auto* i32 = b_.getInt32Ty();
  if (p.stream) stream_issue(p, stage, active);
  if (p.tma) {
    tma_issue(p, stage, active);
    tma_prefetch_l2(body, p, iv);
  }
  for (auto& pl : p.loads) {
    if (p.tma) break;
    const Op& load = *pl.load;
    const ElemType& e = load.result()->type.elem;
    const int bytes = pl.width * e.bytes();
    const Value* mask = load.operands.size() >= 2 ? load.operands[1] : nullptr;
    llvm::Value* buf = b_.CreateInBoundsGEP(b_.getInt8Ty(), pl.ring, b_.CreateMul(stage, b_.getInt32(static_cast<uint32_t>(pl.stage_bytes))));
    StagedOperand st = pl.geom;
    st.buf = buf;
    llvm::Value* first = is_first_replica(pl.layout);
    llvm::Value* issue = first ? first : b_.getTrue();
    // @issue cp.async.{cg|ca}.shared.global [dst], [src], bytes, src_size;
    std::string text = std::string("@$3 cp.async.") + (bytes == 16 ? "cg" : "ca") + ".shared.global [$0], [$1], " +
                       std::to_string(bytes) + ", $2;";
    auto* gptr_ty = llvm::PointerType::get(ctx_, 1);
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {i32, gptr_ty, i32, b_.getInt1Ty()}, false);
    auto* cp = llvm::InlineAsm::get(fty, text, "r,l,r,b,~{memory}", /*hasSideEffects=*/true);
    for (int r0 = 0; r0 < pl.layout.num_regs(); r0 += pl.width) {
      SymIndex s0 = pl.layout.index_of(r0);
      llvm::Value* src = b_.CreateAddrSpaceCast(at(load.operands[0], s0), gptr_ty);
      llvm::Value* pred = active;
      if (mask) pred = b_.CreateAnd(pred, at(mask, s0));
      llvm::Value* src_size = b_.CreateSelect(pred, b_.getInt32(bytes), b_.getInt32(0));
      llvm::Value* dst = b_.CreateInBoundsGEP(b_.getInt8Ty(), buf,
                                              staged_offset(st, runtime_index(s0[0]), runtime_index(s0[1])));
      llvm::Value* dst32 = b_.CreateTrunc(b_.CreatePtrToInt(dst, b_.getInt64Ty()), i32);
      b_.CreateCall(fty, cp, {dst32, src, src_size, issue});
    }
  }
  if (!p.tma) emit_ptx(b_, "cp.async.commit_group;", /*convergent=*/false);

  // Advance the ahead values through their yields (computed before any is stored).
  const Op* yield = body.terminator();
  std::vector<std::vector<llvm::Value*>> next(p.ahead_args.size());
  for (size_t j = 0; j < p.ahead_args.size(); ++j) {
    const Value* y = yield->operands[p.ahead_args[j]];
    next[j] = y->type.is_tile() ? materialize(y, p.ahead_layouts[j]) : std::vector<llvm::Value*>{scalar(y)};
  }
  for (size_t j = 0; j < next.size(); ++j)
    for (size_t r = 0; r < next[j].size(); ++r) b_.CreateStore(next[j][r], p.ahead_slots[j][r]);

  restore_bindings(saved);
}

void GpuLowering::pipeline_prologue(const Block& body, Pipeline& p, llvm::Value* lb, llvm::Value* step,
                                    const std::vector<BlockedLayout>& layouts,
                                    const std::vector<std::vector<llvm::Value*>>& slots,
                                    const std::function<llvm::Value*(llvm::Value*)>& in_range) {
  for (auto& pl : p.loads) pl.ring = new_smem(b_.getInt8Ty(), p.stages * pl.stage_bytes, "ring", p.async_proxy ? 1024 : 16);
  for (auto& sl : p.stream_loads) sl.ring = new_smem(b_.getInt8Ty(), p.stages * sl.stage_bytes, "stream", 16);
  for (size_t i : p.ahead_args) {
    const Type& t = body.args[1 + i]->type;
    p.ahead_layouts.push_back(layouts[i]);
    p.ahead_slots.push_back(carry_slots(t, layouts[i]));
    for (size_t r = 0; r < slots[i].size(); ++r)
      b_.CreateStore(b_.CreateLoad(llvm_elem_type(ctx_, t.elem), slots[i][r]), p.ahead_slots.back()[r]);
  }
  p.lb = lb;
  p.step = step;
  p.in_range = in_range;
  p.ahead_iv = alloca_in_entry(lb->getType());
  p.read_stage = alloca_in_entry(b_.getInt32Ty());
  p.write_stage = alloca_in_entry(b_.getInt32Ty());
  barrier();  // an earlier run of this loop (an enclosing loop) may still read the ring
  if (p.tma) tma_prologue(p);
  if (p.warp_specialized) {  // the producer warp issues every stage, from the first
    emit_producer(body, p, lb, step, in_range);
    b_.CreateStore(b_.getInt32(0), p.read_stage);
    return;
  }
  llvm::Value* iv = lb;
  const int ahead = p.wgmma_async ? p.stages - 2 : p.stages - 1;
  for (int s = 0; s < ahead; ++s) {
    issue_stage(body, p, iv, b_.getInt32(s), in_range(iv));
    iv = b_.CreateAdd(iv, step);
  }
  b_.CreateStore(iv, p.ahead_iv);
  b_.CreateStore(b_.getInt32(0), p.read_stage);
  b_.CreateStore(b_.getInt32(ahead), p.write_stage);
}

void GpuLowering::pipeline_iteration(const Block& body, Pipeline& p, llvm::Value* step,
                                     const std::function<llvm::Value*(llvm::Value*)>& in_range) {
  if (p.stream) return stream_iteration(body, p, step, in_range);
  const int ahead = p.wgmma_async ? p.stages - 2 : p.stages - 1;
  if (!p.tma) {
    emit_ptx(b_, "cp.async.wait_group " + std::to_string(ahead - 1) + ";", /*convergent=*/false);
    // wgmma reads shared memory through the async proxy: order this thread's copies
    // (generic proxy) before it.
    if (p.async_proxy) emit_ptx(b_, "fence.proxy.async.shared::cta;", /*convergent=*/false);
  }
  // cp.async: everyone's copies of this iteration are visible; both: every warp has
  // finished reading the stage the next copies overwrite (unless the TMA ring's
  // "empty" mbarriers say so: tma_nvptx.cpp).
  if (!p.tma || !p.empty_bars) barrier();
  llvm::Value* rs = b_.CreateLoad(b_.getInt32Ty(), p.read_stage);
  p.current_stage = rs;
  p.first_iteration = b_.CreateICmpEQ(scalar(body.args[0].get()), p.lb);
  auto next = [&](llvm::Value* s) {
    llvm::Value* n = b_.CreateAdd(s, b_.getInt32(1));
    return b_.CreateSelect(b_.CreateICmpEQ(n, b_.getInt32(p.stages)), b_.getInt32(0), n);
  };
  if (!p.warp_specialized) {  // (else the producer warp issues: warp_specialize_nvptx.cpp)
    llvm::Value* ws = b_.CreateLoad(b_.getInt32Ty(), p.write_stage);
    llvm::Value* iv = b_.CreateLoad(step->getType(), p.ahead_iv);
    issue_stage(body, p, iv, ws, in_range(iv));
    b_.CreateStore(b_.CreateAdd(iv, step), p.ahead_iv);
    b_.CreateStore(next(ws), p.write_stage);
  }
  llvm::Value* next_rs = next(rs);
  b_.CreateStore(next_rs, p.read_stage);
  if (p.tma) {  // the copies of this iteration have landed (mbarrier of stage rs)
    tma_wait(p, rs);
    tma_advance_phase(p, next_rs);
  }
  for (auto& pl : p.loads) {
    StagedOperand st = pl.geom;
    st.buf = b_.CreateInBoundsGEP(b_.getInt8Ty(), pl.ring, b_.CreateMul(rs, b_.getInt32(static_cast<uint32_t>(pl.stage_bytes))));
    pipelined_[pl.operand] = st;
    prefetched_.insert(pl.load->result());
  }
}

void GpuLowering::pipeline_end_iteration(Pipeline& p) {
  if (p.tma && p.empty_bars) tma_release_stage(p);
  for (auto& sl : p.stream_loads) streamed_.erase(sl.load);
  for (auto& pl : p.loads) {
    pipelined_.erase(pl.operand);
    prefetched_.erase(pl.load->result());
  }
}

void GpuLowering::pipeline_epilogue(Pipeline& p) {
  // (wgmma groups still in flight were waited for on the loop's way out: lower_for.)
  if (p.tma) tma_epilogue(p);
  else emit_ptx(b_, "cp.async.wait_group 0;", /*convergent=*/false);
}

}  // namespace tessera::codegen::nvptx
