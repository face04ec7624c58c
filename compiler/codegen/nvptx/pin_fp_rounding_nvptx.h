// With FMA contraction on (fp_fusion), keeps every float +, -, * that may not contract
// rounded on its own: see pin_fp_rounding_nvptx.cpp.
#pragma once

#include <llvm/IR/Module.h>

namespace tessera::codegen::nvptx {

// Rewrites each float fadd, fsub and fmul without the `contract` flag into ops that
// print with .rn (f32/f64: llvm.nvvm.{add,mul}.rn.{f,d}; f16/bf16: see the .cpp), which
// neither LLVM nor ptxas fuses; cc is the compute capability. Returns how many it pinned.
int pin_uncontracted_fp_rounding(llvm::Module& m, int cc);

}  // namespace tessera::codegen::nvptx
