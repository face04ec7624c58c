// Exact float remainder (C fmod) for the NVPTX lowering.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace tessera::codegen::nvptx {

// fmod(x, y) of two f32 or f64 scalars, exact (IEEE remainder toward zero): LLVM's
// NVPTX backend expands `frem` as x - trunc(x / y) * y, which is wrong whenever the
// quotient is inexact (fmod(1e10f, 3) gave 256, fmod(1, 0.1f) a negative number)
// and loses the sign of a zero result. Emits a loop, so the builder ends in a new
// block.
llvm::Value* emit_exact_fmod(llvm::IRBuilderBase& b, llvm::Value* x, llvm::Value* y);

}  // namespace tessera::codegen::nvptx
