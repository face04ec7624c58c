// Small IR-rewriting helpers shared by the passes (see rewrite_utils.h).
#include "transforms/rewrite_utils.h"

#include <cmath>
#include <cstring>
#include <functional>

namespace tessera::transforms {

using namespace ir;

void replace_all_uses(Block* root, Value* from, Value* to) {
  for_each_op(root, [&](Op* op) {
    for (Value*& v : op->operands)
      if (v == from) v = to;
  });
}

Value* ValueSubstitution::resolve(Value* v) const {
  for (auto it = map_.find(v); it != map_.end(); it = map_.find(v)) v = it->second;
  return v;
}

void ValueSubstitution::apply(Op* op) const {
  if (map_.empty()) return;
  for (Value*& v : op->operands) v = resolve(v);
}

OpIterator OpGraveyard::erase(Block* b, OpIterator it) {
  dead_.push_back(std::move(*it));
  dead_.back()->parent = nullptr;
  return b->ops.erase(it);
}

void move_op_before(Block* from, OpIterator from_it, Block* to, OpIterator pos) {
  (*from_it)->parent = to;
  to->ops.splice(pos, from->ops, from_it);
}

OpIterator iterator_of(Op* op) {
  Block* b = op->parent;
  for (auto it = b->ops.begin(); it != b->ops.end(); ++it)
    if (it->get() == op) return it;
  return b->ops.end();
}

namespace {

uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

}  // namespace

bool attr_equal(const Attr& a, const Attr& b) {
  if (a.index() != b.index()) return false;
  if (auto* x = std::get_if<double>(&a)) {
    double y = std::get<double>(b);
    if (std::isnan(*x) || std::isnan(y)) return std::isnan(*x) && std::isnan(y);
    return double_bits(*x) == double_bits(y);
  }
  return a == b;
}

bool attrs_equal(const std::map<std::string, Attr>& a, const std::map<std::string, Attr>& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib)
    if (ia->first != ib->first || !attr_equal(ia->second, ib->second)) return false;
  return true;
}

size_t attrs_hash(const std::map<std::string, Attr>& attrs) {
  size_t h = attrs.size();
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (auto& [k, v] : attrs) {
    mix(std::hash<std::string>()(k));
    mix(v.index());
    if (auto* i = std::get_if<int64_t>(&v)) mix(std::hash<int64_t>()(*i));
    else if (auto* d = std::get_if<double>(&v)) mix(std::isnan(*d) ? 0x7ff8 : std::hash<uint64_t>()(double_bits(*d)));
    else if (auto* s = std::get_if<std::string>(&v)) mix(std::hash<std::string>()(*s));
    else if (auto* b = std::get_if<bool>(&v)) mix(*b);
    else
      for (int64_t x : std::get<std::vector<int64_t>>(v)) mix(std::hash<int64_t>()(x));
  }
  return h;
}

void make_const_in_place(Op* op, Attr value) {
  op->kind = OpKind::Const;
  op->operands.clear();
  op->regions.clear();
  op->attrs.clear();
  op->attrs["value"] = std::move(value);
}

}  // namespace tessera::transforms
