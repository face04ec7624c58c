// Common subexpression elimination: a pure, region-free op equal to an earlier
// one (same kind, operands, attributes and result types) that is visible from it
// (same block or an enclosing one) is replaced by that earlier op.
#include <unordered_set>

#include "transforms/passes.h"
#include "transforms/rewrite_utils.h"

namespace tessera::transforms {

using namespace ir;

namespace {

bool commutative(OpKind k) {
  // Float min/max are left out: minNum(-0, +0) may differ from minNum(+0, -0).
  return k == OpKind::Add || k == OpKind::Mul || k == OpKind::And || k == OpKind::Or || k == OpKind::Xor ||
         k == OpKind::Umulhi;
}

bool eligible(const Op& op) {
  return op_has_trait(op.kind, 'P') && op.regions.empty() && !op.results.empty();
}

struct OpHash {
  size_t operator()(const Op* op) const {
    size_t h = static_cast<size_t>(op->kind) * 0x100000001b3ULL ^ attrs_hash(op->attrs);
    size_t operands = 0;
    for (size_t i = 0; i < op->operands.size(); ++i) {
      size_t v = std::hash<const Value*>()(op->operands[i]);
      // Order-independent for commutative ops, so that a + b meets b + a.
      operands = commutative(op->kind) ? operands + v : operands * 31 + v;
    }
    h ^= operands + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    for (auto& r : op->results) h = h * 31 + std::hash<std::string>()(r->type.str());
    return h;
  }
};

struct OpEqual {
  bool operator()(const Op* a, const Op* b) const {
    if (a->kind != b->kind || a->operands.size() != b->operands.size() || a->results.size() != b->results.size())
      return false;
    for (size_t i = 0; i < a->results.size(); ++i)
      if (a->results[i]->type != b->results[i]->type) return false;
    if (!attrs_equal(a->attrs, b->attrs)) return false;
    if (a->operands == b->operands) return true;
    return commutative(a->kind) && a->operands.size() == 2 && a->operands[0] == b->operands[1] &&
           a->operands[1] == b->operands[0];
  }
};

class CommonSubexpressionEliminator {
 public:
  void run(Kernel& k) { walk(k.body()); }

 private:
  // One table per enclosing block, innermost last: an op defined in an outer block
  // can replace one in a nested block, never the other way around.
  std::vector<std::unordered_set<Op*, OpHash, OpEqual>> scopes_;
  ValueSubstitution subst_;
  OpGraveyard graveyard_;

  Op* find_visible(Op* op) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      auto it = s->find(op);
      if (it != s->end()) return *it;
    }
    return nullptr;
  }

  void walk(Block* b) {
    scopes_.emplace_back();
    for (auto it = b->ops.begin(); it != b->ops.end();) {
      Op* op = it->get();
      subst_.apply(op);
      if (eligible(*op)) {
        if (Op* earlier = find_visible(op)) {
          for (size_t i = 0; i < op->results.size(); ++i) subst_.replace(op->result(i), earlier->result(i));
          it = graveyard_.erase(b, it);
          continue;
        }
        scopes_.back().insert(op);
      }
      for (auto& r : op->regions) walk(r->block.get());
      ++it;
    }
    scopes_.pop_back();
  }
};

}  // namespace

void eliminate_common_subexpressions(Kernel& k) { CommonSubexpressionEliminator().run(k); }

}  // namespace tessera::transforms
