// NVPTX lowering: control flow -- scf-style for / while loops and ifs. Carried values
// live in allocas (one per register), which SROA turns back into registers; a carried
// tile keeps one layout for the whole loop. Pipelined, TMA-filled, warp-specialized
// and ping-pong loops branch off lower_for into their own files.
#include "codegen/common/elementwise.h"
#include "codegen/common/loop_hints.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {
struct Carried {
  BlockedLayout layout;
  std::vector<llvm::Value*> slots;
};
}  // namespace

GpuLowering::SavedBindings GpuLowering::forget_bindings(std::vector<const Value*> values) {
  SavedBindings saved;
  saved.values = std::move(values);
  for (const Value* v : saved.values) {
    if (auto it = tiles_.find(v); it != tiles_.end()) saved.tiles[v] = it->second;
    if (auto it = scalars_.find(v); it != scalars_.end()) saved.scalars[v] = it->second;
    tiles_.erase(v);
    scalars_.erase(v);
  }
  memo_.clear();
  smem_written_.clear();
  return saved;
}

void GpuLowering::restore_bindings(const SavedBindings& saved) {
  for (const Value* v : saved.values) {
    tiles_.erase(v);
    scalars_.erase(v);
  }
  for (auto& [v, t] : saved.tiles) tiles_[v] = t;
  for (auto& [v, x] : saved.scalars) scalars_[v] = x;
  memo_.clear();
  smem_written_.clear();
}

void GpuLowering::lower_for(const Op& op) {
  const Block& body = *op.regions[0]->block;
  size_t n = op.operands.size() - 3;
  llvm::Value* lb = scalar(op.operands[0]);
  llvm::Value* ub = scalar(op.operands[1]);
  llvm::Value* step = scalar(op.operands[2]);
  const ElemType& ivt = op.operands[0]->type.elem;
  std::vector<Carried> c(n);
  auto store_values = [&](const std::vector<const Value*>& vals) {
    std::vector<std::vector<llvm::Value*>> v(n);
    for (size_t i = 0; i < n; ++i)
      v[i] = vals[i]->type.is_tile() ? materialize(vals[i], c[i].layout) : std::vector<llvm::Value*>{scalar(vals[i])};
    for (size_t i = 0; i < n; ++i)
      for (size_t r = 0; r < v[i].size(); ++r) b_.CreateStore(v[i][r], c[i].slots[r]);
  };
  auto load_values = [&](const std::vector<Value*>& dst) {
    for (size_t i = 0; i < n; ++i) {
      const Type& t = dst[i]->type;
      std::vector<llvm::Value*> regs;
      for (llvm::Value* s : c[i].slots) regs.push_back(b_.CreateLoad(llvm_elem_type(ctx_, t.elem), s));
      if (t.is_tile()) tiles_[dst[i]] = TileVal{TileVal::Regs, c[i].layout, regs};
      else scalars_[dst[i]] = regs[0];
    }
  };
  std::vector<const Value*> inits;
  for (size_t i = 0; i < n; ++i) {
    inits.push_back(op.operands[3 + i]);
    if (inits[i]->type.is_tile()) {
      // A tensor-core accumulator stays in its MMA layout across iterations.
      auto mma = planned_layout(body.terminator()->operands[i]);
      c[i].layout = mma ? *mma : preferred_layout(inits[i]);
    }
    c[i].slots = carry_slots(inits[i]->type, c[i].layout);
  }
  store_values(inits);
  // Carried values as they are in the slots now (for the prefetch's bindings).
  auto carried_now = [&](std::vector<TileVal>& tiles, std::vector<llvm::Value*>& scalars) {
    tiles.assign(n, TileVal{});
    scalars.assign(n, nullptr);
    for (size_t i = 0; i < n; ++i) {
      const Type& t = body.args[1 + i]->type;
      std::vector<llvm::Value*> regs;
      for (llvm::Value* s : c[i].slots) regs.push_back(b_.CreateLoad(llvm_elem_type(ctx_, t.elem), s));
      if (t.is_tile()) tiles[i] = TileVal{TileVal::Regs, c[i].layout, regs};
      else scalars[i] = regs[0];
    }
  };
  auto in_range = [&](llvm::Value* i) { return ivt.is_unsigned() ? b_.CreateICmpULT(i, ub) : b_.CreateICmpSLT(i, ub); };
  std::optional<Pipeline> pipe = plan_pipeline(body);
  if (warp_specialize_loop(op, pipe)) {
    pipe->warp_specialized = true;
    if (asks_ping_pong(op)) plan_ping_pong(op, *pipe);
  }
  if (!pipe) pipe = plan_stream_ring(body);
  std::vector<Prefetch> pf = pipe ? std::vector<Prefetch>{} : plan_prefetch(body);
  if (pipe) {
    std::vector<BlockedLayout> layouts;
    std::vector<std::vector<llvm::Value*>> slots;
    for (auto& ci : c) layouts.push_back(ci.layout), slots.push_back(ci.slots);
    pipeline_prologue(body, *pipe, lb, step, layouts, slots, in_range);
  }
  if (!pf.empty()) {
    std::vector<TileVal> ct;
    std::vector<llvm::Value*> cs;
    carried_now(ct, cs);
    emit_prefetch(body, pf, lb, ct, cs, in_range(lb));
  }
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "for.header", fn_);
  auto* bodybb = llvm::BasicBlock::Create(ctx_, "for.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "for.exit", fn_);
  // With wgmma groups in flight across iterations the loop is entered once its first
  // iteration is known to run and leaves through for.drain (below): exit is reached
  // from the loop only there.
  const bool drained = pipe && pipe->wgmma_async;
  if (drained) b_.CreateCondBr(in_range(lb), header, exit);
  else b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(lb->getType(), 2);
  iv->addIncoming(lb, pre);
  if (drained) b_.CreateBr(bodybb);
  else b_.CreateCondBr(in_range(iv), bodybb, exit);
  b_.SetInsertPoint(bodybb);
  scalars_[body.args[0].get()] = iv;
  std::vector<Value*> args;
  for (size_t i = 0; i < n; ++i) args.push_back(body.args[1 + i].get());
  load_values(args);
  for (auto& p : pf) {
    std::vector<llvm::Value*> regs;
    for (llvm::Value* s : p.slots) regs.push_back(b_.CreateLoad(llvm_elem_type(ctx_, p.load->result()->type.elem), s));
    tiles_[p.load->result()] = TileVal{TileVal::Regs, p.layout, regs};
    prefetched_.insert(p.load->result());
  }
  std::vector<const Value*> ys(body.terminator()->operands.begin(), body.terminator()->operands.end());
  if (pipe && pipe->ping_pong) {  // (ping_pong_nvptx.cpp)
    auto store_yields = [&](const std::vector<const Value*>& vals, bool scalars_only) {
      std::vector<std::vector<llvm::Value*>> v(n);
      for (size_t i = 0; i < n; ++i)
        if (!vals[i]->type.is_tile()) v[i] = {scalar(vals[i])};
        else if (!scalars_only) v[i] = materialize(vals[i], c[i].layout);
      for (size_t i = 0; i < n; ++i)
        for (size_t r = 0; r < v[i].size(); ++r) b_.CreateStore(v[i][r], c[i].slots[r]);
    };
    ping_pong_iteration(body, *pipe, step, in_range, [&] { load_values(args); }, store_yields);
  } else {
    if (pipe) pipeline_iteration(body, *pipe, step, in_range);
    lower_block(body);
    if (pipe) pipeline_end_iteration(*pipe);
    for (auto& p : pf) prefetched_.erase(p.load->result());
    store_values(ys);
  }
  llvm::Value* next = b_.CreateAdd(iv, step);
  if (!pf.empty() && !b_.GetInsertBlock()->getTerminator()) {
    std::vector<TileVal> ct;
    std::vector<llvm::Value*> cs;
    carried_now(ct, cs);
    emit_prefetch(body, pf, next, ct, cs, in_range(next));
  }
  iv->addIncoming(next, b_.GetInsertBlock());
  if (drained) {
    // The wgmma groups still in flight after the last iteration are waited for on the
    // loop's way out only: ptxas serializes every wgmma of the loop when a path into
    // that wait defines the accumulators' registers otherwise (the zero-trip path's
    // copies of their initial values), and injects waits where a path leaves the loop
    // without one.
    auto* drain = llvm::BasicBlock::Create(ctx_, "for.drain", fn_);
    attach_loop_hints(op, b_.CreateCondBr(in_range(next), header, drain));
    b_.SetInsertPoint(drain);
    for (size_t i : pipe->async_results) {
      std::vector<llvm::Value*> regs;
      for (llvm::Value* s : c[i].slots) regs.push_back(b_.CreateLoad(b_.getFloatTy(), s));
      regs = wgmma_wait_tied(regs);
      for (size_t r = 0; r < regs.size(); ++r) b_.CreateStore(regs[r], c[i].slots[r]);
    }
    b_.CreateBr(exit);
  } else {
    attach_loop_hints(op, b_.CreateBr(header));
  }
  b_.SetInsertPoint(exit);
  std::vector<Value*> results;
  for (auto& r : op.results) results.push_back(r.get());
  load_values(results);
  if (pipe && pipe->ping_pong) ping_pong_exit(*pipe);
  if (pipe) {
    pipeline_epilogue(*pipe);
    // Past the loop its ring is scratch memory (store_through_smem_nvptx.cpp).
    for (auto& pl : pipe->loads) dead_smem_.emplace_back(smem_offset_.at(pl.ring), pipe->stages * pl.stage_bytes);
    for (auto& sl : pipe->stream_loads) dead_smem_.emplace_back(smem_offset_.at(sl.ring), pipe->stages * sl.stage_bytes);
  }
}

void GpuLowering::lower_while(const Op& op) {
  const Block& before = *op.regions[0]->block;
  const Block& after = *op.regions[1]->block;
  size_t n = op.operands.size();
  std::vector<Carried> c(n);
  for (size_t i = 0; i < n; ++i) {
    if (op.operands[i]->type.is_tile()) c[i].layout = preferred_layout(op.operands[i]);
    c[i].slots = carry_slots(op.operands[i]->type, c[i].layout);
  }
  auto store_into = [&](std::vector<Carried>& dst, const std::vector<const Value*>& vals) {
    std::vector<std::vector<llvm::Value*>> v(vals.size());
    for (size_t i = 0; i < vals.size(); ++i)
      v[i] = vals[i]->type.is_tile() ? materialize(vals[i], dst[i].layout) : std::vector<llvm::Value*>{scalar(vals[i])};
    for (size_t i = 0; i < vals.size(); ++i)
      for (size_t r = 0; r < v[i].size(); ++r) b_.CreateStore(v[i][r], dst[i].slots[r]);
  };
  auto load_from = [&](std::vector<Carried>& src, const std::vector<Value*>& dst) {
    for (size_t i = 0; i < dst.size(); ++i) {
      const Type& t = dst[i]->type;
      std::vector<llvm::Value*> regs;
      for (llvm::Value* s : src[i].slots) regs.push_back(b_.CreateLoad(llvm_elem_type(ctx_, t.elem), s));
      if (t.is_tile()) tiles_[dst[i]] = TileVal{TileVal::Regs, src[i].layout, regs};
      else scalars_[dst[i]] = regs[0];
    }
  };
  store_into(c, std::vector<const Value*>(op.operands.begin(), op.operands.end()));
  auto* header = llvm::BasicBlock::Create(ctx_, "while.before", fn_);
  auto* bodybb = llvm::BasicBlock::Create(ctx_, "while.after", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "while.exit", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  std::vector<Value*> bargs;
  for (auto& a : before.args) bargs.push_back(a.get());
  load_from(c, bargs);
  lower_block(before);
  const Op* cond = before.terminator();
  std::vector<const Value*> passed(cond->operands.begin() + 1, cond->operands.end());
  std::vector<Carried> p(passed.size());
  for (size_t i = 0; i < passed.size(); ++i) {
    if (passed[i]->type.is_tile()) p[i].layout = preferred_layout(passed[i]);
    p[i].slots = carry_slots(passed[i]->type, p[i].layout);
  }
  store_into(p, passed);
  b_.CreateCondBr(scalar(cond->operands[0]), bodybb, exit);
  b_.SetInsertPoint(bodybb);
  std::vector<Value*> aargs;
  for (auto& a : after.args) aargs.push_back(a.get());
  load_from(p, aargs);
  lower_block(after);
  std::vector<const Value*> ys(after.terminator()->operands.begin(), after.terminator()->operands.end());
  store_into(c, ys);
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
  std::vector<Value*> results;
  for (auto& r : op.results) results.push_back(r.get());
  load_from(p, results);
}

// Whether lower_if may give the else branch of `op` the shared memory its then branch
// used (from offset `start`): not inside a loop (one iteration's then branch could still
// be read by slow warps while fast ones start the next iteration's else branch), and
// not when the then branch allocated the kernel-wide dot staging buffers (the else
// branch's dots use them too). Conversion buffers the then branch made for values of
// the enclosing code are forgotten, so the else branch makes its own.
bool GpuLowering::branches_share_smem(const Op& op, int start, bool dot_staging_before) {
  for (const Block* b = op.parent; b && b->parent() && b->parent()->parent(); b = b->parent()->parent()->parent)
    if (b->parent()->parent()->kind == OpKind::For || b->parent()->parent()->kind == OpKind::While) return false;
  if (!dot_staging_before && dot_smem_[0]) return false;
  forget_smem_from(start);
  return true;
}

// Drops the conversion buffers (read_through_smem) allocated from offset `start` on.
void GpuLowering::forget_smem_from(int start) {
  for (auto it = smem_of_.begin(); it != smem_of_.end();) {
    auto off = smem_offset_.find(it->second);
    if (off != smem_offset_.end() && off->second >= start) it = smem_of_.erase(it);
    else ++it;
  }
}

// Whether `op` may be lowered before the wait for the in-flight wgmma accumulators
// `in_flight`: it reads none of them, and it is address arithmetic, an elementwise op or a
// global load (nothing that stores, synchronizes, or runs a region or a tensor-core op).
bool GpuLowering::runs_before_wgmma_wait(const Op& op,
                                         const std::vector<std::pair<const Value*, TileVal>>& in_flight) const {
  if (!op.regions.empty()) return false;
  for (const Value* a : op.operands)
    for (auto& [v, t] : in_flight)
      if (a == v) return false;
  switch (op.kind) {
    case OpKind::Load:
    case OpKind::Const:
    case OpKind::Splat:
    case OpKind::Broadcast:
    case OpKind::ExpandDims:
    case OpKind::Arange:
    case OpKind::AddPtr:
    case OpKind::Cmp:
    case OpKind::And:
    case OpKind::Or:
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Cast:
    case OpKind::Select:
      return true;
    default:
      return false;
  }
}

// `b` (not its loops' bodies) has a loop that asks for warp specialization.
bool GpuLowering::asks_warp_specialize_in(const Block& b) const {
  for (auto& o : b.ops) {
    if (o->kind == OpKind::For && asks_warp_specialize(*o)) return true;
    if (o->kind == OpKind::If)
      for (auto& r : o->regions)
        if (asks_warp_specialize_in(*r->block)) return true;
  }
  return false;
}

// Nothing but the kernel's return follows `op` (an if of the kernel's own block).
bool GpuLowering::only_return_after(const Op& op) const {
  const Block* b = op.parent;
  if (!b || b != k_.body()) return false;
  bool after = false;
  for (auto& o : b->ops) {
    if (o.get() == &op) after = true;
    else if (after && o->kind != OpKind::Return) return false;
  }
  return true;
}

void GpuLowering::lower_if(const Op& op) {
  size_t n = op.results.size();
  std::vector<Carried> c(n);
  auto* thenbb = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
  auto* elsebb = llvm::BasicBlock::Create(ctx_, "if.else", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "if.join", fn_);
  b_.CreateCondBr(scalar(op.operands[0]), thenbb, elsebb);
  bool slots_made = false;
  // A program runs one branch (scalars are the same in all its threads), so outside a
  // loop the else branch's shared memory may start where the then branch's did.
  const int shared_before = shared_bytes_;
  const size_t dead_before = dead_smem_.size();
  const bool dot_staging_before = dot_smem_[0] != nullptr;
  int shared_then = shared_before;
  std::vector<std::pair<int64_t, int64_t>> dead_then;
  bool shared = false;
  // A warp-specialized loop in a branch splits the CTA there (warp_specialize_nvptx.cpp):
  // the other branch starts from the state before the if, and where it specializes no
  // loop of its own, the threads past the kernel's warps leave at its start.
  // {state at the branch's end, whether it went on to the join}.
  const SplitState split_before = split_state();
  std::pair<SplitState, bool> split_after[2] = {{split_before, false}, {split_before, false}};
  const bool asks[2] = {asks_warp_specialize_in(*op.regions[0]->block), asks_warp_specialize_in(*op.regions[1]->block)};
  for (int r = 0; r < 2; ++r) {
    if (r == 1 && !(split_after[0].first == split_before)) restore_split_state(split_before);
    if (r == 1 && (shared = branches_share_smem(op, shared_before, dot_staging_before))) {
      shared_then = shared_bytes_;
      shared_bytes_ = shared_before;
      dead_then.assign(dead_smem_.begin() + static_cast<std::ptrdiff_t>(dead_before), dead_smem_.end());
      dead_smem_.resize(dead_before);
    }
    b_.SetInsertPoint(r == 0 ? thenbb : elsebb);
    if (asks[1 - r] && !asks[r]) leave_extra_threads();
    const Block& blk = *op.regions[r]->block;
    // In-flight wgmma accumulators this branch reads (pipeline_nvptx.cpp): wait for
    // them on this path only, as late as the branch allows: its loads that need no
    // accumulator (a matmul epilogue's bias) go first, so that their latency passes
    // while the tile's last wgmma group runs.
    std::vector<std::pair<const Value*, TileVal>> in_flight;
    if (auto w = wgmma_wait_in_branch_.find({&op, r}); w != wgmma_wait_in_branch_.end())
      for (const Value* v : w->second) in_flight.push_back({v, tile(v)});
    bool waited = in_flight.empty();
    auto wait = [&] {
      for (auto& [v, t] : in_flight) tiles_[v].regs = wgmma_wait_tied(tiles_[v].regs);
      waited = true;
    };
    const bool hand_over = ping_pong_ && ping_pong_->reset_if == &op && ping_pong_->reset_branch == r && in_ping_pong_;
    if (hand_over) {
      wait();
      ping_pong_hand_over(*ping_pong_);  // (a tile's last MMA is done: ping_pong_nvptx.cpp)
    }
    for (auto& o : blk.ops) {
      if (b_.GetInsertBlock()->getTerminator()) break;  // after a return
      if (!waited && !runs_before_wgmma_wait(*o, in_flight)) wait();
      lower_op(*o);
    }
    if (!waited && !b_.GetInsertBlock()->getTerminator()) wait();
    for (auto& [v, t] : in_flight) tiles_[v] = t;
    if (!in_flight.empty()) memo_.clear();
    split_after[r].first = split_state();
    if (b_.GetInsertBlock()->getTerminator()) continue;  // returned
    split_after[r].second = true;
    const Op* y = blk.terminator();
    if (y && y->kind == OpKind::Yield && n) {
      if (!slots_made) {  // results take the layout of the first branch's values, or a
        // tensor-core accumulator's (`if last: ...; acc = zeros` in a persistent matmul's
        // loop: acc stays in its MMA layout on both paths, with no conversion)
        for (size_t i = 0; i < n; ++i) {
          if (op.result(i)->type.is_tile()) {
            auto mma = planned_layout(op.result(i));
            c[i].layout = mma ? *mma : preferred_layout(y->operands[i]);
          }
          c[i].slots = carry_slots(op.result(i)->type, c[i].layout);
        }
        slots_made = true;
      }
      std::vector<std::vector<llvm::Value*>> v(n);
      for (size_t i = 0; i < n; ++i)
        v[i] = y->operands[i]->type.is_tile() ? materialize(y->operands[i], c[i].layout)
                                              : std::vector<llvm::Value*>{scalar(y->operands[i])};
      for (size_t i = 0; i < n; ++i)
        for (size_t k = 0; k < v[i].size(); ++k) b_.CreateStore(v[i][k], c[i].slots[k]);
    }
    b_.CreateBr(join);
  }
  // Past the if: the state the branches that reach the join agree on (or nothing but the
  // kernel's return follows).
  const auto& [end0, on0] = split_after[0];
  const auto& [end1, on1] = split_after[1];
  if (on0 && on1 && !end0.same_threads(end1) && !only_return_after(op))
    unsupported(op, "tl.range(..., warp_specialize=True): the branches of this if go on to the code after it with "
                    "different threads (one branch's loop split the block into a producer and consumers, the "
                    "other's did not, or specialized another way); specialize both the same way, or return");
  if (const SplitState& past = on0 || !on1 ? end0 : end1; !(past == split_state())) restore_split_state(past);
  shared_bytes_ = std::max(shared_bytes_, shared_then);
  dead_smem_.insert(dead_smem_.end(), dead_then.begin(), dead_then.end());  // past the if, both are scratch
  // ... so the else branch's conversion buffers may overlap the then branch's dead ring,
  // which a store after the if may take (store_through_smem): forget them too.
  if (shared) forget_smem_from(shared_before);
  b_.SetInsertPoint(join);
  if (!slots_made) {
    if (n) b_.CreateUnreachable();
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    const Type& t = op.result(i)->type;
    std::vector<llvm::Value*> regs;
    for (llvm::Value* s : c[i].slots) regs.push_back(b_.CreateLoad(llvm_elem_type(ctx_, t.elem), s));
    if (t.is_tile()) tiles_[op.result(i)] = TileVal{TileVal::Regs, c[i].layout, regs};
    else scalars_[op.result(i)] = regs[0];
  }
}

}  // namespace tessera::codegen::nvptx
