// The CPU dot: C += A·B over row-major tile buffers, as register-blocked FMA code.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <functional>

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
// the emitted code (in a new block). Scratch buffers (the packed panels) are
// allocas in the function's entry block.
//
// `start` says where the sums start and where they go:
//   LoadC:       C = C + A·B, accumulating from C's values (the default);
//   Zero:        C = A·B, the sums start at zero and C is only written;
//   ZeroThenAdd: C = C + (A·B) with A·B summed from zero in registers and then added
//                to C in one rounded add, i.e. exactly `add(C, dot(A, B, 0))` (or
//                `add(dot(A, B, 0), C)` with c_first = false: the operand order of
//                the add, kept for NaN payloads) without a buffer for the dot.
enum class DotStart { LoadC, Zero, ZeroThenAdd };

// How A and B lie in their buffers: row-major (the default), or transposed, i.e. the
// buffer is A^T (K×M row-major) or B^T (N×K row-major), as `tl.trans(tl.load(...))` of a
// tile loaded along its rows leaves it (x @ W^T, q @ k^T, dz^T @ x). A transposed A is
// read in place (its M elements at one k are adjacent: the broadcasts get cheaper); a
// transposed B is transposed 16×16 blocks at a time in registers into the packed panels.
struct DotLayout {
  bool a_transposed = false;
  bool b_transposed = false;
};

// `each_micro_tile(index, count)`, if given, emits code at the start of each of the
// `count` full micro-tiles (index an i64 in [0, count)): the caller spreads work over
// the dot with it (prefetches of the next K step's tiles).
using MicroTileHook = std::function<void(llvm::Value* index, int64_t count)>;
void emit_dot(llvm::IRBuilderBase& b, llvm::Value* a, llvm::Value* bm, llvm::Value* c,
              DotShape shape, llvm::Type* a_ty, llvm::Type* b_ty, llvm::Type* c_ty,
              int vector_bits, DotStart start = DotStart::LoadC, bool c_first = true,
              DotLayout layout = {}, const MicroTileHook& each_micro_tile = {});

// Which operands emit_dot copies before the micro-tiles run (see dot_microkernel.cpp):
//   pack_b:    each K×NR column panel of B is copied, widened to the accumulator type,
//              into one contiguous buffer just before the row blocks that read it;
//   convert_a: A is widened to the accumulator type once (f16/bf16/i8 inputs), so the
//              micro-tiles broadcast from it without a conversion per use.
// A transposed B is always packed (the copy is where it is transposed).
// Exposed for the tests; the choice depends on the shape, the types and the blocking.
struct DotPacking {
  bool pack_b = false;
  bool convert_a = false;
};
DotPacking choose_dot_packing(DotShape shape, llvm::Type* a_ty, llvm::Type* c_ty, int vector_bits,
                              DotLayout layout = {});

}  // namespace tessera::codegen::x86
