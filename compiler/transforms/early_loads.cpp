// Issue loads early: each load, with the pure ops computing its address, mask and
// `other`, moves up its block to just after the last op it must follow — an op
// defining one of its operands that cannot move itself, an op with side effects
// (store, atomic, print, assert, assume, a region holding an early return...), or
// a loop or branch — and never out of its block, nor above an earlier load (loads
// keep their program order: the first is usually the one streaming from DRAM).
//
// Why: a GPU block reduction ends with bar.sync, and neither LLVM nor ptxas moves a
// global load above a barrier. In layernorm the loads of w and b, written after the
// mean and the variance, each waited for a round trip to L2 at the end of every
// program; issued first, their latency hides under the load of x and the two
// reductions. Moving a load up past pure ops never changes whether or what it reads:
// nothing in between writes memory, and the block runs them all or none.
// On the CPU the position changes nothing: loads are evaluated where they are used.
//
// Worked example (layernorm):
//   %x = load %px          %x = load %px
//   %s = reduce %x    ->   %pw = addptr %w, %cols
//   %pw = addptr %w, %cols %wv = load %pw
//   %wv = load %pw         %s = reduce %x
#include <algorithm>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "transforms/passes.h"
#include "transforms/rewrite_utils.h"

namespace tessera::transforms {

using namespace ir;

namespace {

bool has_side_effects(const Op& op) {
  if (op_has_trait(op.kind, 'S')) return true;
  for (auto& r : op.regions)
    for (auto& inner : r->block->ops)
      if (has_side_effects(*inner)) return true;
  return false;
}

// Ops nothing may move above: side effects, control flow (a loop may not end; a
// branch may skip what follows), terminators.
bool is_fence(const Op& op) {
  return has_side_effects(op) || op.kind == OpKind::For || op.kind == OpKind::While || op.kind == OpKind::If ||
         op_has_trait(op.kind, 'T');
}

// Pure ops without regions may move up with a load that needs them.
bool movable(const Op& op) { return op_has_trait(op.kind, 'P') && op.regions.empty(); }

void schedule_block(Block* b) {
  for (auto& op : b->ops)
    for (auto& r : op->regions) schedule_block(r->block.get());

  // position: program order as numbers; a moved op gets a number between those of
  // its new neighbours, so comparisons stay valid without renumbering.
  std::unordered_map<const Op*, double> position;
  double n = 0;
  for (auto& op : b->ops) position[op.get()] = n++;
  std::unordered_map<const Value*, Op*> defined_here;
  double last_fence = -1, last_load = -1;
  for (auto it = b->ops.begin(); it != b->ops.end();) {
    auto next = std::next(it);
    Op* op = it->get();
    if (op->kind == OpKind::Load) {
      // The load's backward slice of movable ops in this block below the last fence;
      // `bound`: the last op it must stay below.
      std::vector<Op*> slice;
      std::unordered_set<const Op*> seen;
      double bound = std::max(last_fence, last_load);  // loads keep their order
      std::function<void(Op*)> collect = [&](Op* o) {
        for (Value* v : o->operands) {
          auto d = defined_here.find(v);
          if (d == defined_here.end() || position[d->second] <= last_fence || !seen.insert(d->second).second) continue;
          if (movable(*d->second)) {
            collect(d->second);
            slice.push_back(d->second);
          } else {
            bound = std::max(bound, position[d->second]);  // e.g. a reduce, or another load
          }
        }
      };
      collect(op);
      slice.push_back(op);
      std::sort(slice.begin(), slice.end(), [&](Op* a, Op* c) { return position[a] < position[c]; });
      for (Op* o : slice) {
        if (position[o] <= bound) continue;  // already above: later slice ops go below it
        OpIterator d = b->ops.begin();
        while (position[d->get()] <= bound) ++d;  // the first op below the bound
        if (d->get() != o) {
          position[o] = (bound + position[d->get()]) / 2;
          move_op_before(b, iterator_of(o), b, d);
        }
        bound = position[o];
      }
      last_load = position[op];
    }
    for (auto& r : op->results) defined_here[r.get()] = op;
    if (is_fence(*op)) last_fence = position[op];
    it = next;
  }
}

}  // namespace

void issue_loads_early(Kernel& k) { schedule_block(k.body()); }

}  // namespace tessera::transforms
