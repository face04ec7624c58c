// Checks Tile IR invariants (operand counts, types, shapes, regions).
#pragma once

#include "ir/ir.h"

namespace tessera::ir {

// Throws tessera::CompileError (a Tessera bug: the frontend must never produce
// invalid IR) naming the op, its source location and the broken rule.
void verify_kernel(const Kernel& k);

}  // namespace tessera::ir
