// erf, tanh and sigmoid of f32 for the NVPTX lowering, built on the SFU's ex2.approx and
// rcp.approx units instead of the shared polynomials' exact divisions.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace tessera::codegen::nvptx {

// erf(x) for an f32 scalar. Max error 2 ulp (1 ulp measured over 1.2M inputs on an
// H100: tests/python/test_gpu_math.py); about 20 instructions where the shared lowering
// (vector_math.cpp, < 1 ulp) needs about 80, a correctly rounded division among them.
// nan -> nan, ±inf -> ±1, ±0 -> ±0, denormals in, denormals out.
llvm::Value* emit_erf_f32_nvptx(llvm::IRBuilderBase& b, llvm::Value* x);

// tanh(x) for an f32 scalar. Max error 3 ulp (2 ulp measured as above); same special
// values as erf.
llvm::Value* emit_tanh_f32_nvptx(llvm::IRBuilderBase& b, llvm::Value* x);

// sigmoid(x) = 1 / (1 + e^-x) for an f32 scalar. Max error 4 ulp (4 measured over 1.3M inputs
// on an H200, at x = -4.14: ex2.approx's error reaches e^x undamped on the x < 0 side); about 25 instructions where the shared lowering needs a correctly rounded
// division and the compensated exp (~60). nan -> nan, +inf -> 1, -inf -> 0, ±0 -> 0.5,
// results below 2^-126 denormal.
llvm::Value* emit_sigmoid_f32_nvptx(llvm::IRBuilderBase& b, llvm::Value* x);

}  // namespace tessera::codegen::nvptx
