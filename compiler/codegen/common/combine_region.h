// Evaluates a reduce/scan combine region on LLVM values (both back ends).
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/ir.h"

namespace tessera::codegen {

using ValueMap = std::unordered_map<const ir::Value*, llvm::Value*>;

// combine(lhs, rhs) for the region of `op` (a reduce or scan): binds the region's
// arguments in `values` (lhs tuple, then rhs tuple), lowers each region op with
// `lower_scalar_op` (which reads and writes `values`), and returns the yielded
// values, splat to the width of lhs[0] (region constants are scalars). Ops other
// than elementwise ones are passed to `reject`, which must throw.
std::vector<llvm::Value*> emit_combine_region(llvm::IRBuilderBase& b, const ir::Op& op,
                                              const std::vector<llvm::Value*>& lhs,
                                              const std::vector<llvm::Value*>& rhs, ValueMap& values,
                                              const std::function<void(const ir::Op&)>& lower_scalar_op,
                                              const std::function<void(const ir::Op&, const std::string&)>& reject);

}  // namespace tessera::codegen
