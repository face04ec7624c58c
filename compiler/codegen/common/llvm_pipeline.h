// The LLVM steps both back ends share: print a module, verify it, run O3.
#pragma once

#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include <string>

namespace tessera::codegen {

std::string print_llvm_module(const llvm::Module& m);

// Throws CompileError (a Tessera bug) when the module is invalid.
void verify_llvm_module(const llvm::Module& m, const std::string& kernel_name);

// LLVM's default O3 pipeline for `tm`'s target; `vectorize` forces the loop and SLP
// vectorizers on (the CPU wants them); otherwise LLVM's default tuning applies.
void optimize_llvm_module(llvm::Module& m, llvm::TargetMachine* tm, bool vectorize);

}  // namespace tessera::codegen
