// Written pointer arguments: which kernel arguments each pointer value derives from,
// as a least fixed point over the IR (unions of sets grow until nothing changes).
//
// A pointer value's roots are the arguments it was computed from: addptr, splat,
// broadcast, reshape, permute, expand_dims, hint and ptr->ptr bitcasts keep their
// operand's roots; select and join take the union; loop-carried values take the
// union of their initial and yielded values (for, while), if results the union of
// both branches. Anything else (a pointer loaded from memory, an int->ptr bitcast)
// has no roots. Example: `p = out + offs; for ...: p += 16; store p` gives p's
// loop-carried value the roots {out} from its initial value, and the store writes out.
#include "analysis/written_args.h"

#include <map>
#include <set>

namespace tessera::analysis {

using namespace ir;

namespace {

class Roots {
 public:
  explicit Roots(const Kernel& k) {
    for (size_t i = 0; i < k.args.size(); ++i)
      if (k.args[i].value->type.elem.is_ptr()) roots_[k.args[i].value].insert(static_cast<int>(i));
  }

  const std::set<int>& of(Value* v) { return roots_[v]; }

  // Adds the roots of `from` to `to`; true when `to` grew.
  bool flow(Value* from, Value* to) {
    if (!from || !to || !to->type.elem.is_ptr()) return false;
    auto& dst = roots_[to];
    size_t before = dst.size();
    const auto& src = roots_[from];
    dst.insert(src.begin(), src.end());
    return dst.size() != before;
  }

 private:
  std::map<Value*, std::set<int>> roots_;
};

Op* terminator(Region* r) { return r->block->ops.empty() ? nullptr : r->block->ops.back().get(); }

// One pass over the ops; true when some root set grew.
bool propagate(Block* body, Roots& roots) {
  bool changed = false;
  for_each_op(body, [&](Op* op) {
    auto flow = [&](Value* from, Value* to) { changed |= roots.flow(from, to); };
    switch (op->kind) {
      case OpKind::AddPtr:
      case OpKind::Splat:
      case OpKind::Broadcast:
      case OpKind::ExpandDims:
      case OpKind::Reshape:
      case OpKind::Permute:
      case OpKind::Hint:
      case OpKind::Split:
        for (auto& r : op->results) flow(op->operands[0], r.get());
        break;
      case OpKind::Bitcast:
        if (op->operands[0]->type.elem.is_ptr()) flow(op->operands[0], op->result());
        break;
      case OpKind::Select:
        flow(op->operands[1], op->result());
        flow(op->operands[2], op->result());
        break;
      case OpKind::Join:
        flow(op->operands[0], op->result());
        flow(op->operands[1], op->result());
        break;
      case OpKind::For: {  // operands: lb, ub, step, inits; body args: iv, carried
        Block* b = op->regions[0]->block.get();
        Op* y = terminator(op->regions[0].get());
        for (size_t i = 0; i < op->results.size(); ++i) {
          Value* arg = b->args[i + 1].get();
          flow(op->operands[i + 3], arg);
          if (y && i < y->operands.size()) {
            flow(y->operands[i], arg);
            flow(y->operands[i], op->result(static_cast<int>(i)));
          }
        }
        break;
      }
      case OpKind::While: {  // before(args = carried) -> condition(c, fwd...) -> after(args = fwd) -> yield
        Block* before = op->regions[0]->block.get();
        Block* after = op->regions[1]->block.get();
        Op* cond = terminator(op->regions[0].get());
        Op* y = terminator(op->regions[1].get());
        for (size_t i = 0; i < before->args.size(); ++i) {
          if (i < op->operands.size()) flow(op->operands[i], before->args[i].get());
          if (y && i < y->operands.size()) flow(y->operands[i], before->args[i].get());
        }
        if (cond)
          for (size_t i = 1; i < cond->operands.size(); ++i) {
            if (i - 1 < after->args.size()) flow(cond->operands[i], after->args[i - 1].get());
            if (i - 1 < op->results.size()) flow(cond->operands[i], op->result(static_cast<int>(i - 1)));
          }
        break;
      }
      case OpKind::If:
        for (auto& region : op->regions)
          if (Op* y = terminator(region.get()))
            for (size_t i = 0; i < op->results.size() && i < y->operands.size(); ++i)
              flow(y->operands[i], op->result(static_cast<int>(i)));
        break;
      default:
        break;
    }
  });
  return changed;
}

}  // namespace

std::vector<int> written_pointer_args(const Kernel& k) {
  Roots roots(k);
  while (propagate(k.body(), roots)) {
  }
  std::set<int> written;
  for_each_op(k.body(), [&](Op* op) {
    if (op->kind == OpKind::Store || op->kind == OpKind::AtomicRmw || op->kind == OpKind::AtomicCas) {
      const auto& r = roots.of(op->operands[0]);
      written.insert(r.begin(), r.end());
    }
  });
  return {written.begin(), written.end()};
}

}  // namespace tessera::analysis
