// A JIT for the x86 back-end unit tests: builds modules for one CPU ("" = the host,
// else an LLVM CPU name such as "haswell" with its default features), runs LLVM's O2
// pipeline on them, and either JIT-links them or prints their assembly.
#pragma once

#include <gtest/gtest.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <memory>
#include <string>

namespace tessera_test {

class CpuJit {
 public:
  // vectorize = false keeps LLVM's loop and SLP vectorizers off (so that a width-1
  // test stays scalar code).
  explicit CpuJit(const std::string& cpu, bool vectorize = true) : vectorize_(vectorize) {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jtmb = cpu.empty() ? llvm::cantFail(llvm::orc::JITTargetMachineBuilder::detectHost())
                            : llvm::orc::JITTargetMachineBuilder(llvm::Triple(llvm::sys::getProcessTriple()));
    if (!cpu.empty()) jtmb.setCPU(cpu);
    jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    tm_ = llvm::cantFail(jtmb.createTargetMachine());
    jit_ = llvm::cantFail(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create());
  }

  std::unique_ptr<llvm::Module> new_module(llvm::LLVMContext& ctx) {
    auto m = std::make_unique<llvm::Module>("test", ctx);
    m->setDataLayout(tm_->createDataLayout());
    m->setTargetTriple(tm_->getTargetTriple().str());
    return m;
  }

  // The CPU's feature string, for functions' "target-features" attribute (as the x86
  // lowering sets it; vector_math.cpp picks AVX-512 instructions from it).
  std::string features() const { return tm_->getTargetFeatureString().str(); }

  void optimize(llvm::Module& m) {
    EXPECT_FALSE(llvm::verifyModule(m, &llvm::errs()));
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = vectorize_;
    pto.SLPVectorization = vectorize_;
    llvm::PassBuilder pb(tm_.get(), pto);
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(m, mam);
  }

  void add(std::unique_ptr<llvm::Module> m, std::unique_ptr<llvm::LLVMContext> ctx) {
    optimize(*m);
    llvm::cantFail(jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx))));
  }

  template <class Fn>
  Fn* lookup(const std::string& name) {
    return llvm::cantFail(jit_->lookup(name)).toPtr<Fn*>();
  }

  std::string assembly(llvm::Module& m) {
    optimize(m);
    llvm::SmallString<0> text;
    llvm::raw_svector_ostream os(text);
    llvm::legacy::PassManager pm;
    EXPECT_FALSE(tm_->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile));
    pm.run(m);
    return std::string(text.str());
  }

 private:
  bool vectorize_;
  std::unique_ptr<llvm::TargetMachine> tm_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
};

}  // namespace tessera_test
