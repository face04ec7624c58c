// NVPTX lowering of gather(src, index, axis): out[i] = src[i with i[axis] = index[i]].
//
// The element an output position needs may live in any thread's registers, so src goes
// through shared memory once (smem_copy_of: row-major, between barriers), and each
// output element is one shared load at a runtime address. Worked example, src
// tile<8x16xf32>, axis 0, output element (r, c) with index value k:
//   flat = clamp(k, 0, 7) * 16 + c;   out = smem_src[flat]
// An index outside 0 .. n-1 is clamped (as the CPU back end and the interpreter do), so
// a bad index reads another element of the tile, never memory outside it.
#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

llvm::Value* GpuLowering::gather_at(const Op& op, const SymIndex& s) {
  const Value* src = op.operands[0];
  const Value* index = op.operands[1];
  const int64_t axis = op.int_attr("axis");
  const auto& shape = src->type.shape;
  llvm::Value* k = at(index, s);
  k = index->type.elem.is_unsigned() ? b_.CreateZExtOrTrunc(k, b_.getInt64Ty()) : b_.CreateSExtOrTrunc(k, b_.getInt64Ty());
  k = b_.CreateSelect(b_.CreateICmpSLT(k, b_.getInt64(0)), b_.getInt64(0), k);
  k = b_.CreateSelect(b_.CreateICmpSGT(k, b_.getInt64(shape[axis] - 1)), b_.getInt64(shape[axis] - 1), k);
  k = b_.CreateTrunc(k, b_.getInt32Ty());
  llvm::Value* flat = b_.getInt32(0);
  int64_t stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    llvm::Value* coord = d == axis ? k : runtime_index(s[d]);
    flat = b_.CreateAdd(flat, b_.CreateMul(coord, b_.getInt32(static_cast<uint32_t>(stride))));
    stride *= shape[d];
  }
  const ElemType& e = src->type.elem;
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  llvm::Value* buf = smem_copy_of(src);
  return from_mem(b_, b_.CreateLoad(mt, b_.CreateInBoundsGEP(mt, buf, flat)), e);
}

}  // namespace tessera::codegen::nvptx
