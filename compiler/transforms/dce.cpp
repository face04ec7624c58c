// Dead code elimination: removes ops whose results are all unused and whose
// removal cannot be observed: pure ops, loads, and `if`/`for` ops whose regions
// hold no side effects. Unused loop-carried values are left alone (removing one
// changes the loop's signature); `while` stays (it may not terminate).
#include <unordered_map>

#include "transforms/passes.h"

namespace tessera::transforms {

using namespace ir;

namespace {

using UseCounts = std::unordered_map<const Value*, int>;

bool has_side_effects(const Block& b) {
  for (auto& op : b.ops) {
    if (op_has_trait(op->kind, 'S') || op->kind == OpKind::While) return true;
    for (auto& r : op->regions)
      if (has_side_effects(*r->block)) return true;
  }
  return false;
}

bool removable_if_unused(const Op& op) {
  if (op_has_trait(op.kind, 'T')) return false;
  bool pure_or_control = op_has_trait(op.kind, 'P') || op.kind == OpKind::If || op.kind == OpKind::For;
  if (op.kind == OpKind::Load) return true;  // loads have no side effects
  if (!pure_or_control) return false;
  for (auto& r : op.regions)
    if (has_side_effects(*r->block)) return false;
  return true;
}

void count_uses(Block* b, UseCounts& uses, int delta) {
  for_each_op(b, [&](Op* op) {
    for (Value* v : op->operands) uses[v] += delta;
  });
}

// Walks each block backwards, so that an op's users (later in the block, or
// nested in later ops) are gone before the op itself is considered.
bool sweep(Block* b, UseCounts& uses) {
  bool changed = false;
  for (auto it = b->ops.end(); it != b->ops.begin();) {
    --it;
    Op& op = **it;
    bool dead = removable_if_unused(op);
    for (auto& r : op.results) dead = dead && uses[r.get()] == 0;
    if (dead) {
      for (Value* v : op.operands) uses[v]--;
      for (auto& r : op.regions) count_uses(r->block.get(), uses, -1);
      it = b->ops.erase(it);
      changed = true;
      continue;
    }
    for (auto& r : op.regions) changed |= sweep(r->block.get(), uses);
  }
  return changed;
}

}  // namespace

void eliminate_dead_code(Kernel& k) {
  UseCounts uses;
  count_uses(k.body(), uses, +1);
  // One backward sweep finds everything; the loop is a safety net.
  while (sweep(k.body(), uses)) {
  }
}

}  // namespace tessera::transforms
