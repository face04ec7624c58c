// Dead code elimination: removes pure ops whose results are never used, and
// unused loop-carried values are left alone (their removal changes op shapes).
#include <unordered_map>

#include "transforms/passes.h"

namespace tessera::transforms {

using namespace ir;

namespace {

bool removable(const Op& op) {
  if (op.results.empty()) return false;
  if (op.kind == OpKind::Load) return true;  // loads have no side effects
  return op_has_trait(op.kind, 'P');
}

}  // namespace

void eliminate_dead_code(Kernel& k) {
  bool changed = true;
  while (changed) {
    changed = false;
    std::unordered_map<const Value*, int> uses;
    for_each_op(k.body(), [&](Op* op) {
      for (Value* v : op->operands) uses[v]++;
    });
    std::function<void(Block*)> sweep = [&](Block* b) {
      for (auto it = b->ops.begin(); it != b->ops.end();) {
        Op& op = **it;
        for (auto& r : op.regions) sweep(r->block.get());
        bool dead = removable(op);
        for (auto& r : op.results) dead = dead && uses[r.get()] == 0;
        if (dead) {
          it = b->ops.erase(it);
          changed = true;
        } else {
          ++it;
        }
      }
    };
    sweep(k.body());
  }
}

}  // namespace tessera::transforms
