// Loop-invariant code motion: pure, region-free ops at the top level of a
// `for`/`while` region whose operands are all defined outside the loop move to
// just before the loop. Inner loops go first, so invariants climb out of nests.
#include <unordered_set>

#include "transforms/passes.h"
#include "transforms/rewrite_utils.h"

namespace tessera::transforms {

using namespace ir;

namespace {

// Every value a loop defines: arguments of its (nested) blocks, results of its ops.
void collect_defined_inside(const Op& loop, std::unordered_set<const Value*>& inside) {
  for (auto& r : loop.regions) {
    for (auto& a : r->block->args) inside.insert(a.get());
    for (auto& op : r->block->ops) {
      for (auto& res : op->results) inside.insert(res.get());
      collect_defined_inside(*op, inside);
    }
  }
}

// Only pure ops move. Loads are not hoisted although they have no side effects:
// a store in the loop (or another program) may change the memory they read, and
// a masked load hoisted out of a zero-trip loop could touch memory it never would.
// Hoisting a pure op out of a loop that runs zero times only wastes its work.
bool hoistable(const Op& op, const std::unordered_set<const Value*>& inside) {
  if (!op_has_trait(op.kind, 'P') || !op.regions.empty() || op_has_trait(op.kind, 'T')) return false;
  for (Value* v : op.operands)
    if (inside.count(v)) return false;
  return true;
}

void hoist_out_of(Block* parent, OpIterator loop_it) {
  Op* loop = loop_it->get();
  std::unordered_set<const Value*> inside;
  collect_defined_inside(*loop, inside);
  for (auto& r : loop->regions) {
    Block* body = r->block.get();
    // In program order, so that an op whose operands were just hoisted follows them.
    for (auto it = body->ops.begin(); it != body->ops.end();) {
      auto next = std::next(it);
      if (hoistable(**it, inside)) {
        for (auto& res : (*it)->results) inside.erase(res.get());
        move_op_before(body, it, parent, loop_it);
      }
      it = next;
    }
  }
}

void hoist_in_block(Block* b) {
  for (auto it = b->ops.begin(); it != b->ops.end(); ++it) {
    for (auto& r : (*it)->regions) hoist_in_block(r->block.get());
    if ((*it)->kind == OpKind::For || (*it)->kind == OpKind::While) hoist_out_of(b, it);
  }
}

}  // namespace

void hoist_loop_invariants(Kernel& k) { hoist_in_block(k.body()); }

}  // namespace tessera::transforms
