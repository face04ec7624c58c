// Canonicalize: constant folding, algebraic identities, shape ops of constants and
// splats, and control flow with constant conditions. Every op that survives or is
// rewritten in place keeps its loc; folded constants take the loc of the op they
// replace. Dead ops are left for dce.
#include <cmath>

#include "transforms/constant_fold.h"
#include "transforms/passes.h"
#include "transforms/rewrite_utils.h"

namespace tessera::transforms {

using namespace ir;

namespace {

bool is_int_constant(const Value* v, int64_t want) {
  auto c = constant_of(v);
  return c && !c->is_float && c->i == want;
}

// Compares bit patterns, so that +0.0 and -0.0 differ.
bool is_float_constant(const Value* v, double want) {
  auto c = constant_of(v);
  return c && c->is_float && c->f == want && std::signbit(c->f) == std::signbit(want);
}

bool is_all_ones(const Value* v) {
  auto c = constant_of(v);
  return c && !c->is_float && c->i == wrap_int(v->type.elem, ~uint64_t(0));
}

bool is_shape_op(OpKind k) {
  return k == OpKind::Broadcast || k == OpKind::ExpandDims || k == OpKind::Reshape || k == OpKind::Permute;
}

class Canonicalizer {
 public:
  // One walk in program order; returns whether anything changed.
  bool run(Kernel& k) {
    changed_ = false;
    simplify_block(k.body());
    return changed_;
  }

 private:
  ValueSubstitution subst_;
  OpGraveyard graveyard_;
  bool changed_ = false;

  void simplify_block(Block* b) {
    for (auto it = b->ops.begin(); it != b->ops.end();) {
      Op* op = it->get();
      subst_.apply(op);
      if (op->kind == OpKind::If) {
        if (auto next = inline_constant_if(b, it)) {
          it = *next;  // continue with the inlined ops
          changed_ = true;
          continue;
        }
      }
      if (op->kind == OpKind::For && forward_zero_trip_for(op)) {
        it = graveyard_.erase(b, it);
        changed_ = true;
        continue;
      }
      for (auto& r : op->regions) simplify_block(r->block.get());
      if (op->regions.empty() && op->results.size() == 1) {
        if (Value* same = identity_of(op)) {
          subst_.replace(op->result(), same);
          it = graveyard_.erase(b, it);
          changed_ = true;
          continue;
        }
        // A rewrite may enable another (broadcast(splat(c)) -> splat(c) -> const).
        for (int round = 0; round < 4 && rewrite_in_place(op); ++round) changed_ = true;
      }
      ++it;
    }
  }

  // `if` on a constant: the taken region's ops move before the `if`, its results
  // become the values the region yields. Returns where the walk continues.
  std::optional<OpIterator> inline_constant_if(Block* b, OpIterator it) {
    Op* op = it->get();
    auto cond = constant_of(op->operands[0]);
    if (!cond || cond->is_float || op->regions.size() != 2) return std::nullopt;
    Block* taken = op->regions[cond->i != 0 ? 0 : 1]->block.get();
    Op* term = taken->terminator();
    bool yields = term && term->kind == OpKind::Yield;
    if (yields ? term->operands.size() != op->results.size() : !op->results.empty()) return std::nullopt;
    for (size_t i = 0; i < op->results.size(); ++i) subst_.replace(op->result(i), term->operands[i]);
    auto end = yields ? std::prev(taken->ops.end()) : taken->ops.end();
    std::optional<OpIterator> first;
    while (taken->ops.begin() != end) {
      OpIterator moved = taken->ops.begin();
      move_op_before(taken, moved, b, it);  // list splicing keeps `moved` valid
      if (!first) first = moved;
    }
    OpIterator next = graveyard_.erase(b, it);
    return first ? *first : next;
  }

  // `for` whose constant bounds give zero trips: its results are its inits.
  bool forward_zero_trip_for(Op* op) {
    if (op->operands.size() < 3 || op->results.size() + 3 != op->operands.size()) return false;
    auto lb = constant_of(op->operands[0]), ub = constant_of(op->operands[1]);
    if (!lb || !ub || lb->is_float || ub->is_float) return false;
    const ElemType& t = op->operands[0]->type.elem;
    bool zero_trips = t.is_unsigned() || t.is_bool() ? static_cast<uint64_t>(lb->i) >= static_cast<uint64_t>(ub->i)
                                                     : lb->i >= ub->i;
    if (!zero_trips) return false;
    for (size_t i = 0; i < op->results.size(); ++i) subst_.replace(op->result(i), op->operands[3 + i]);
    return true;
  }

  // An existing value equal to op's result (x + 0 -> x, ...), or null.
  Value* identity_of(Op* op) {
    const Type& rt = op->result()->type;
    auto& in = op->operands;
    auto same = [&](Value* v) { return v->type == rt ? v : nullptr; };
    bool is_float = !in.empty() && in[0]->type.elem.is_float();
    bool binary = in.size() == 2;
    // The operand that is not the neutral element, when the other one is.
    auto other_if = [&](auto&& neutral) -> Value* {
      if (!binary) return nullptr;
      if (neutral(in[1])) return same(in[0]);
      if (neutral(in[0])) return same(in[1]);
      return nullptr;
    };
    auto zero = [](Value* v) { return is_int_constant(v, 0); };
    switch (op->kind) {
      case OpKind::Add:  // x + 0.0 is not x for x = -0.0, but x + -0.0 always is
        return is_float ? other_if([](Value* v) { return is_float_constant(v, -0.0); }) : other_if(zero);
      case OpKind::Sub:
        if (binary && (is_float ? is_float_constant(in[1], 0.0) : zero(in[1]))) return same(in[0]);
        return nullptr;
      case OpKind::Mul: {
        if (Value* v = other_if([&](Value* c) { return is_float ? is_float_constant(c, 1.0) : is_int_constant(c, 1); }))
          return v;
        if (is_float || !binary) return nullptr;  // x * 0.0 is -0.0, NaN or 0.0
        return zero(in[0]) ? same(in[0]) : zero(in[1]) ? same(in[1]) : nullptr;
      }
      case OpKind::Div:
        if (binary && (is_float ? is_float_constant(in[1], 1.0) : is_int_constant(in[1], 1))) return same(in[0]);
        return nullptr;
      case OpKind::Or:
      case OpKind::Xor:
        if (binary && in[0] == in[1] && op->kind == OpKind::Or) return same(in[0]);
        return other_if(zero);
      case OpKind::And:
        if (binary && in[0] == in[1]) return same(in[0]);
        if (binary && (zero(in[0]) || zero(in[1]))) return same(zero(in[0]) ? in[0] : in[1]);
        return other_if(is_all_ones);
      case OpKind::Shl:
      case OpKind::Shr:
        return binary && zero(in[1]) ? same(in[0]) : nullptr;
      case OpKind::Min:
      case OpKind::Max:
      case OpKind::MinimumNan:
      case OpKind::MaximumNan:
        return binary && in[0] == in[1] ? same(in[0]) : nullptr;
      case OpKind::Select: {
        if (in.size() != 3) return nullptr;
        if (in[1] == in[2]) return same(in[1]);
        auto c = constant_of(in[0]);
        return c && !c->is_float ? same(in[c->i != 0 ? 1 : 2]) : nullptr;
      }
      case OpKind::AddPtr:
        return binary && zero(in[1]) ? same(in[0]) : nullptr;
      case OpKind::Cast:
      case OpKind::Bitcast:
      case OpKind::Broadcast:
      case OpKind::Reshape:
        return in.size() == 1 ? same(in[0]) : nullptr;
      case OpKind::Permute: {
        auto order = op->ints_attr("order");
        for (size_t i = 0; i < order.size(); ++i)
          if (order[i] != static_cast<int64_t>(i)) return nullptr;
        return in.size() == 1 ? same(in[0]) : nullptr;
      }
      default:
        return nullptr;
    }
  }

  // Rewrites op in place into a simpler op with the same result; returns whether
  // it did. Constants: folded elementwise ops, splats and shape ops of constants.
  // Splats: shape ops of splats (expand_dims(splat(x)) -> splat(x)).
  bool rewrite_in_place(Op* op) {
    if (op->kind == OpKind::Const || op->operands.empty()) return false;
    Value* src = op->operands[0];
    if (op->kind == OpKind::Splat || is_shape_op(op->kind)) {
      if (op->operands.size() != 1 || src->type.elem != op->result()->type.elem) return false;
      if (auto c = constant_of(src)) {
        make_const_in_place(op, c->attr());
        return true;
      }
      Op* def = src->def();
      if (op->kind != OpKind::Splat && def && def->kind == OpKind::Splat && op->result()->type.is_tile()) {
        op->kind = OpKind::Splat;
        op->operands = {def->operands[0]};
        op->attrs.clear();
        return true;
      }
      return false;
    }
    if (!op_has_trait(op->kind, 'E') || !op_has_trait(op->kind, 'P')) return false;
    std::vector<ConstantValue> args;
    for (Value* v : op->operands) {
      auto c = constant_of(v);
      if (!c) return false;
      args.push_back(*c);
    }
    auto folded = fold_elementwise(*op, args);
    if (!folded) return false;
    make_const_in_place(op, folded->attr());
    return true;
  }
};

}  // namespace

void canonicalize(Kernel& k) {
  // Every op is simplified after its operands, so one walk reaches the fixed point;
  // the walk after a change only confirms it (the bound keeps a bug from hanging).
  Canonicalizer c;
  for (int walk = 0; walk < 8 && c.run(k); ++walk) {
  }
}

}  // namespace tessera::transforms
