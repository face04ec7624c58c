// Loop hints a Tile IR `for` op carries into LLVM: tl.range(..., loop_unroll_factor=n)
// as llvm.loop metadata on the loop's back edge, which LLVM's unroller honours on both
// back ends (x86 and NVPTX run the same O3 pipeline).
#include "codegen/common/loop_hints.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Metadata.h>

namespace tessera::codegen {

void attach_loop_hints(const ir::Op& for_op, llvm::Instruction* latch) {
  const int64_t factor = for_op.int_attr("loop_unroll_factor", 0);
  if (factor <= 0 || !latch) return;
  llvm::LLVMContext& ctx = latch->getContext();
  llvm::Metadata* hint =
      factor == 1 ? static_cast<llvm::Metadata*>(llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.disable")}))
                  : llvm::MDNode::get(ctx, {llvm::MDString::get(ctx, "llvm.loop.unroll.count"),
                                            llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(
                                                llvm::Type::getInt32Ty(ctx), static_cast<uint64_t>(factor)))});
  // A loop ID is a distinct node whose first operand is itself.
  llvm::MDNode* id = llvm::MDNode::getDistinct(ctx, {nullptr, hint});
  id->replaceOperandWith(0, id);
  latch->setMetadata(llvm::LLVMContext::MD_loop, id);
}

}  // namespace tessera::codegen
