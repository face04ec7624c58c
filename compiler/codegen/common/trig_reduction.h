// Payne–Hanek argument reduction for sin/cos of huge arguments (|x| > 2^18 in f32,
// > 2^40 in f64), where x - q·π/2 with a three-part π/2 is no longer exact.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace tessera::codegen {

// x = q·π/2 + (hi + lo) with q in {0, 1, 2, 3} (returned as a float of x's type) and
// |hi + lo| <= π/4, hi + lo accurate to well below an ulp of x's type even for the
// finite float closest to a multiple of π/2. x: finite normal f32/f64 scalar or vector
// with |x| >= 2^-5 (the reduction of smaller x is exact anyway). Straight-line code:
// the caller branches around it when no lane needs it.
struct TrigReduction {
  llvm::Value* quadrant;
  llvm::Value* hi;
  llvm::Value* lo;
};
TrigReduction reduce_huge_trig_argument(llvm::IRBuilderBase& b, llvm::Value* x);

}  // namespace tessera::codegen
