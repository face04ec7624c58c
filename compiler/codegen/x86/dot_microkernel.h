// The CPU dot: C += A·B over row-major tile buffers, as register-blocked FMA code.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace tessera::codegen::x86 {

struct DotShape {
  int M = 0, N = 0, K = 0;  // powers of two, each >= 1
};

// Emits, at the builder's insertion point, code computing
//   C[m][n] += sum_k A[m][k] * B[k][n]   for all m < M, n < N
// A: M×K elements of a_ty, B: K×N elements of b_ty, C: M×N elements of c_ty, all
// dense row-major buffers (pointers in address space 0, no aliasing between C and
// A/B). Supported: a/b f32 → c f32; f16/bf16 → f32 (converted on the fly);
// f64 → f64; i8 → i32. `vector_bits` is the widest vector register of the target
// (256 for AVX2, 512 for AVX-512). On return the builder is positioned after
// the emitted code (in a new block).
void emit_dot(llvm::IRBuilderBase& b, llvm::Value* a, llvm::Value* bm, llvm::Value* c,
              DotShape shape, llvm::Type* a_ty, llvm::Type* b_ty, llvm::Type* c_ty,
              int vector_bits);

}  // namespace tessera::codegen::x86
