// Evaluates a reduce/scan combine region on LLVM values (both back ends).
#include "codegen/common/combine_region.h"

#include "codegen/common/elementwise.h"

namespace tessera::codegen {

std::vector<llvm::Value*> emit_combine_region(llvm::IRBuilderBase& b, const ir::Op& op,
                                              const std::vector<llvm::Value*>& lhs,
                                              const std::vector<llvm::Value*>& rhs, ValueMap& values,
                                              const std::function<void(const ir::Op&)>& lower_scalar_op,
                                              const std::function<void(const ir::Op&, const std::string&)>& reject) {
  const ir::Block& blk = *op.regions[0]->block;
  size_t n = lhs.size();
  for (size_t i = 0; i < n; ++i) {
    values[blk.args[i].get()] = lhs[i];
    values[blk.args[n + i].get()] = rhs[i];
  }
  for (auto& inner : blk.ops) {
    if (inner->kind == ir::OpKind::Yield) break;
    bool elementwise = ir::op_has_trait(inner->kind, 'E') || inner->kind == ir::OpKind::Const ||
                       inner->kind == ir::OpKind::Hint;
    if (!elementwise || inner->kind == ir::OpKind::Load || !inner->regions.empty())
      reject(*inner, "a combine function may only use elementwise operations");
    lower_scalar_op(*inner);
  }
  int width = 1;
  if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(lhs[0]->getType())) width = vt->getNumElements();
  std::vector<llvm::Value*> out;
  for (ir::Value* v : blk.terminator()->operands) out.push_back(splat_lanes(b, values.at(v), width));
  return out;
}

}  // namespace tessera::codegen
