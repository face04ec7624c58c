// NVPTX lowering: register prefetch of a K loop's dot operands (software
// pipelining by one iteration), used by lower_for.
//
// A loop whose body loads tiles that feed a tensor-core dot waits for those global
// loads at the top of every iteration. Instead, the loads of iteration i+1 are
// issued at the end of iteration i (after its mma instructions), into registers
// carried around the loop, so their latency overlaps the tensor-core work:
//   prologue:  pf = load(addresses at iv = lb, carried = inits)   if lb < ub
//   body:      the load's value is pf (no load here)
//              ... dot ...
//   latch:     pf = load(addresses at iv + step, carried = yields) if iv + step < ub
// The addresses are recomputed by lowering the load's backward slice in the body
// (pure, region-free ops only) again with the loop's block arguments bound to the
// next iteration's values. Worked example (the tutorial matmul, 128x128x32 f16, 8
// warps): a and b (8 + 8 registers per thread) are loaded in the latch; the next
// iteration's staging stores wait for them while the previous mma drain.
#include "analysis/grid_dependency.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

bool pure_slice_op(const Op& op) {
  if (!op.regions.empty()) return false;
  switch (op.kind) {
    case OpKind::Const:
    case OpKind::Arange:
    case OpKind::Splat:
    case OpKind::Broadcast:
    case OpKind::ExpandDims:
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::Join:
    case OpKind::Split:
    case OpKind::Hint:
    case OpKind::ProgramId:
    case OpKind::NumPrograms: return true;
    case OpKind::Load: return false;
    default: return op_has_trait(op.kind, 'E');
  }
}

// The load `v` is, seen through permutes, hints and casts.
const Op* operand_load(const Value* v, int depth = 0) {
  const Op* op = v->def();
  if (!op || depth > 8) return nullptr;
  if (op->kind == OpKind::Load) return op;
  if (op->kind == OpKind::Permute || op->kind == OpKind::Hint || op->kind == OpKind::Cast)
    return operand_load(op->operands[0], depth + 1);
  return nullptr;
}

}  // namespace

// Collects the body ops `v` depends on (in `body` itself), or fails on an op that
// cannot be evaluated twice.
bool GpuLowering::collect_slice(const Block& body, const Value* v, std::set<const Op*>& slice) {
  const Op* op = v->def();
  if (!op || op->parent != &body) return true;  // a block argument, or defined outside the loop
  if (slice.count(op)) return true;
  if (!pure_slice_op(*op)) return false;
  slice.insert(op);
  for (const Value* a : op->operands)
    if (!collect_slice(body, a, slice)) return false;
  return true;
}

std::vector<GpuLowering::Prefetch> GpuLowering::plan_prefetch(const Block& body) {
  std::vector<Prefetch> out;
  if (cc_ < 80) return out;
  // The first iteration's loads go before the loop: never ahead of a gdc_wait in it.
  if (analysis::waits_on_prior_grid(body)) return out;
  // At most 32 registers per thread of prefetched operands (each is live for a
  // whole iteration next to the tile the iteration is using).
  constexpr int64_t kMaxPrefetchBytesPerThread = 128;
  int64_t prefetch_bytes = 0;
  for (auto& op : body.ops) {
    if (op->kind != OpKind::Dot || !mma_kind(*op)) continue;
    // The accumulator plus the prefetched operands must fit the register file:
    // 128 accumulators per thread already fill half of it.
    int64_t acc_regs = op->result()->type.numel() / num_threads_;
    if (acc_regs >= 128) continue;
    for (int i = 0; i < 2; ++i) {
      const Op* load = operand_load(op->operands[i]);
      if (!load || load->parent != &body || !load->result()->type.is_tile()) continue;
      const Type& lt = load->result()->type;
      int64_t bytes = lt.numel() * lt.elem.bytes() / num_threads_;
      bool seen = false;
      for (auto& p : out) seen = seen || p.load == load;
      if (seen) continue;
      std::set<const Op*> slice;
      bool ok = true;
      for (const Value* a : load->operands) ok = ok && collect_slice(body, a, slice);
      if (!ok || prefetch_bytes + bytes > kMaxPrefetchBytesPerThread) continue;
      prefetch_bytes += bytes;
      Prefetch p;
      p.load = load;
      for (auto& o : body.ops)
        if (slice.count(o.get())) p.slice.push_back(o.get());
      out.push_back(std::move(p));
    }
  }
  return out;
}

// Lowers the prefetched loads for the iteration whose block arguments are `args`
// (induction variable, then carried values as TileVals or scalars), predicated on
// `active`, and stores them into their slots. Leaves the value maps as it found them.
void GpuLowering::emit_prefetch(const Block& body, std::vector<Prefetch>& pf, llvm::Value* iv,
                                const std::vector<TileVal>& carried, const std::vector<llvm::Value*>& carried_scalars,
                                llvm::Value* active) {
  std::vector<const Value*> bound;
  bound.push_back(body.args[0].get());
  for (size_t i = 1; i < body.args.size(); ++i) bound.push_back(body.args[i].get());
  for (auto& p : pf) {
    for (const Op* o : p.slice)
      for (auto& r : o->results) bound.push_back(r.get());
    bound.push_back(p.load->result());
  }
  SavedBindings saved = forget_bindings(std::move(bound));
  scalars_[body.args[0].get()] = iv;
  for (size_t i = 1; i < body.args.size(); ++i) {
    if (body.args[i]->type.is_tile()) tiles_[body.args[i].get()] = carried[i - 1];
    else scalars_[body.args[i].get()] = carried_scalars[i - 1];
  }
  std::set<const Op*> done;
  extra_load_pred_ = active;
  for (auto& p : pf) {
    for (const Op* o : p.slice)
      if (done.insert(o).second) lower_op(*o);
    lower_load(*p.load);
    const TileVal& t = tile(p.load->result());
    if (p.slots.empty()) {
      p.layout = t.layout;
      p.slots = carry_slots(p.load->result()->type, t.layout);
    }
    for (size_t r = 0; r < t.regs.size(); ++r) b_.CreateStore(t.regs[r], p.slots[r]);
  }
  extra_load_pred_ = nullptr;
  restore_bindings(saved);
}

}  // namespace tessera::codegen::nvptx
