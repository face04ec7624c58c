// Vectorized math functions emitted as LLVM IR polynomials (no libm calls), so
// that loops over tiles stay vector code. Target independent: the x86 lowering
// uses them directly; the NVPTX lowering may prefer hardware approximations.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace tessera::codegen {

enum class MathFn {
  Exp, Exp2, Log, Log2, Sin, Cos, Erf, Tanh, Sigmoid,
};

// Emits fn(x) for x a float/double scalar or a vector of them (any width).
// Accuracy (measured, tests/cpp/test_vector_math.cpp): within 2 ulp of the correctly
// rounded result for f32 and f64 over the whole domain (sin/cos of huge arguments
// included); inf/nan/denormal inputs and outputs follow C's <math.h>. sin/cos emit a
// branch (the builder must be inside a function); the rest is straight-line code.
llvm::Value* emit_math(llvm::IRBuilderBase& b, MathFn fn, llvm::Value* x);

}  // namespace tessera::codegen
