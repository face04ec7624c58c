// Loop hints a Tile IR `for` op carries into LLVM (tl.range's loop_unroll_factor).
#pragma once

#include <llvm/IR/Instructions.h>

#include "ir/ir.h"

namespace tessera::codegen {

// Puts the loop's unroll request on its back edge `latch` (llvm.loop metadata): the
// for op's `loop_unroll_factor` n unrolls by n (llvm.loop.unroll.count), 1 forbids
// unrolling; without the attribute LLVM's own heuristics decide.
void attach_loop_hints(const ir::Op& for_op, llvm::Instruction* latch);

}  // namespace tessera::codegen
