// The LLVM steps both back ends share: print a module, verify it, run O3.
#include "codegen/common/llvm_pipeline.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>

#include "tessera/compiler.h"

namespace tessera::codegen {

std::string print_llvm_module(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

void verify_llvm_module(const llvm::Module& m, const std::string& kernel_name) {
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(m, &os))
    throw CompileError("LLVM IR verification failed for kernel " + kernel_name + ": " + err + " (this is a Tessera bug)",
                       false);
}

void optimize_llvm_module(llvm::Module& m, llvm::TargetMachine* tm, bool vectorize) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  if (vectorize) pto.LoopVectorization = pto.SLPVectorization = true;
  llvm::PassBuilder pb(tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

}  // namespace tessera::codegen
