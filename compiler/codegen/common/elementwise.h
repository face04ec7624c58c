// Lowers one elementwise Tile IR op to LLVM IR on scalars or vectors of any width
// (the same code serves kernel-body scalars, fused tile chunks and combine regions).
#pragma once

#include <llvm/IR/IRBuilder.h>

#include "ir/ir.h"

namespace tessera::codegen {

// Module flag (an i32) holding the SM version of a GPU module (e.g. 90): conversions
// emit the hardware's instructions where it has them (f32 -> bf16 from sm_80).
inline constexpr const char* kNvptxSmFlag = "tessera.nvptx_sm";

// LLVM type of one element held in registers (i1 stays i1, bf16 is bfloat).
llvm::Type* llvm_elem_type(llvm::LLVMContext& ctx, const ir::ElemType& e);
// LLVM type of one element stored in memory (i1 is stored as i8).
llvm::Type* llvm_mem_type(llvm::LLVMContext& ctx, const ir::ElemType& e);
// Register type for `width` lanes (width 1 = scalar).
llvm::Type* llvm_lanes_type(llvm::LLVMContext& ctx, const ir::ElemType& e, int width);

// Register value <-> memory value (i1 <-> i8).
llvm::Value* to_mem(llvm::IRBuilderBase& b, llvm::Value* v, const ir::ElemType& e);
llvm::Value* from_mem(llvm::IRBuilderBase& b, llvm::Value* v, const ir::ElemType& e);

// A constant of element type e, splat to `width` lanes.
llvm::Value* emit_constant(llvm::IRBuilderBase& b, const ir::ElemType& e, int width, const ir::Attr& value);

// Splats a scalar to `width` lanes (no-op for width 1 or if already a vector).
llvm::Value* splat_lanes(llvm::IRBuilderBase& b, llvm::Value* v, int width);

// Numeric conversion between element types (docs/tile_ir.md `cast`).
llvm::Value* emit_cast(llvm::IRBuilderBase& b, llvm::Value* v, const ir::ElemType& from, const ir::ElemType& to);

// Emits `op` (an elementwise op: arithmetic, compare, select, math, cast,
// bitcast, addptr, umulhi, fma) on `args`, all of one width. Scalar args mixed with
// vector args are splat first.
llvm::Value* emit_elementwise(llvm::IRBuilderBase& b, const ir::Op& op, llvm::ArrayRef<llvm::Value*> args);

}  // namespace tessera::codegen
