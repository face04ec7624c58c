// Small IR-rewriting helpers shared by the passes: replacing uses of values,
// erasing and moving ops, comparing attributes.
#pragma once

#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ir/ir.h"

namespace tessera::transforms {

using OpIterator = std::list<std::unique_ptr<ir::Op>>::iterator;

// Rewrites every operand equal to `from` into `to`, in all ops nested in `root`.
// One walk per call: fine for a handful of replacements; passes that replace many
// values while walking in program order use ValueSubstitution instead.
void replace_all_uses(ir::Block* root, ir::Value* from, ir::Value* to);

// Forward substitution for passes that walk the IR in program order (pre-order).
// A definition always comes before its uses in that order, so recording
// `from -> to` when an op is rewritten and resolving each op's operands when the
// walk reaches it replaces every use exactly once, in one walk.
class ValueSubstitution {
 public:
  void replace(ir::Value* from, ir::Value* to) { map_[from] = to; }
  ir::Value* resolve(ir::Value* v) const;  // follows chains a -> b -> c
  void apply(ir::Op* op) const;            // resolves op's operands in place
  bool empty() const { return map_.empty(); }

 private:
  std::unordered_map<const ir::Value*, ir::Value*> map_;
};

// Erased ops are parked here, not freed, until the pass ends: a substitution map
// keyed by pointers to their results must never see a new Value reuse the address.
class OpGraveyard {
 public:
  // Unlinks the op at `it` from `b`, returns the iterator to the next op.
  OpIterator erase(ir::Block* b, OpIterator it);

 private:
  std::vector<std::unique_ptr<ir::Op>> dead_;
};

// Moves the op at `from_it` in `from` to just before `pos` in `to`.
void move_op_before(ir::Block* from, OpIterator from_it, ir::Block* to, OpIterator pos);

// The iterator of `op` in its parent block (linear search).
OpIterator iterator_of(ir::Op* op);

// Attribute equality that tells -0.0 from 0.0 and treats NaN as equal to NaN.
bool attr_equal(const ir::Attr& a, const ir::Attr& b);
bool attrs_equal(const std::map<std::string, ir::Attr>& a, const std::map<std::string, ir::Attr>& b);
size_t attrs_hash(const std::map<std::string, ir::Attr>& attrs);

// Turns `op` in place into `const {value = value} : <its result type>`, keeping its
// result value (so no uses change) and its loc.
void make_const_in_place(ir::Op* op, ir::Attr value);

}  // namespace tessera::transforms
