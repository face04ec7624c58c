// Evaluates Tile IR elementwise ops on constant scalars with the semantics of
// docs/tile_ir.md: the arithmetic half of canonicalize (canonicalize.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/ir.h"

namespace tessera::transforms {

// One number as a value of some element type holds it. Ints are wrapped to the
// type's width and sign- or zero-extended to 64 bits by signedness (i1 is 0 or 1;
// u64 keeps its bit pattern); floats are exactly representable in the type.
struct ConstantValue {
  bool is_float = false;
  int64_t i = 0;
  double f = 0;
  ir::Attr attr() const { return is_float ? ir::Attr(f) : ir::Attr(i); }
};

// `raw`'s low bits as a value of int type t (see ConstantValue).
int64_t wrap_int(const ir::ElemType& t, uint64_t raw);
// x rounded to float type t (round to nearest even, overflow to +-inf).
double round_float(const ir::ElemType& t, double x);

// The number every element of `v` equals, if `v` is a `const` op's result or a
// `splat` of one; nullopt otherwise (also for pointers and malformed constants).
std::optional<ConstantValue> constant_of(const ir::Value* v);

// `op` (elementwise or cast; not select) evaluated on constant operands `args`,
// or nullopt when the op is not folded: integer division by zero or INT_MIN / -1
// and shifts out of [0, width) (undefined in the IR), transcendental math (the
// compiled code uses its own approximations: folding with libm would make a
// result depend on whether its input happened to be constant), bitcasts that
// would need f16/bf16 bit patterns or produce a NaN payload, pointer casts.
std::optional<ConstantValue> fold_elementwise(const ir::Op& op, const std::vector<ConstantValue>& args);

}  // namespace tessera::transforms
