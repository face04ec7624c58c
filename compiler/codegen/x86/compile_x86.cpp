// The x86 back end driver: builds the LLVM module, runs LLVM's O3 pipeline for
// the host CPU, and emits assembly text and an ELF relocatable object.
#include "codegen/x86/compile_x86.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <unistd.h>

#include <fstream>
#include <mutex>

#include "codegen/common/llvm_errors.h"
#include "codegen/common/llvm_pipeline.h"
#include "codegen/x86/kernel_lowering.h"

namespace tessera::codegen::x86 {

namespace {

void init_llvm_x86() {
  static std::once_flag once;
  std::call_once(once, [] {
    install_llvm_error_handler();
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    LLVMInitializeX86AsmParser();
  });
}

// The size of one instance of the last-level cache (what a core can use), from
// sysfs as lscpu reads it; else the C library's answer (in a VM it may be the sum
// over all of the host's L3 slices), else 32 MB. Only the threshold of streaming
// stores depends on it.
int64_t host_last_level_cache_bytes() {
  int64_t best = 0;
  for (int index = 0; index < 8; ++index) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream type(dir + "type"), size(dir + "size");
    std::string t, s;
    if (!(type >> t) || !(size >> s)) break;
    if (t == "Instruction" || s.empty()) continue;
    int64_t v = std::atoll(s.c_str());
    char unit = s.back();
    v *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1;
    best = std::max(best, v);
  }
  if (best > 0) return best;
  long bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return bytes > 0 ? bytes : int64_t{32} << 20;
}

}  // namespace

std::string host_cpu_name() { return llvm::sys::getHostCPUName().str(); }

std::string host_cpu_features() {
  std::string f;
  auto feats = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> names;
  for (auto& kv : feats) names.push_back((kv.second ? "+" : "-") + kv.first().str());
  std::sort(names.begin(), names.end());
  for (auto& n : names) f += (f.empty() ? "" : ",") + n;
  return f;
}

X86Output compile_x86(const ir::Kernel& k, const CompileOptions& opts) {
  init_llvm_x86();
  X86Output out;
  out.cpu_name = opts.cpu_name.empty() ? host_cpu_name() : opts.cpu_name;
  out.cpu_features = opts.cpu_name.empty() && opts.cpu_features.empty() ? host_cpu_features() : opts.cpu_features;
  std::string triple = llvm::sys::getProcessTriple();
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target) throw CompileError("LLVM has no x86 target: " + err + " (this is a Tessera bug)", false);
  llvm::TargetOptions to;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, out.cpu_name, out.cpu_features, to, llvm::Reloc::PIC_, llvm::CodeModel::Small, llvm::CodeGenOptLevel::Aggressive));

  // From the subtarget, so a CPU name alone (TESSERA_CPU=skylake-avx512) implies its features.
  const llvm::MCSubtargetInfo* sti = tm->getMCSubtargetInfo();
  if (out.cpu_features.empty()) {
    // Spell the name's implied features out: the lowering reads the functions'
    // "target-features" (vector_math's AVX-512 exp), which a bare name leaves empty.
    std::vector<std::string> names;
    for (const llvm::SubtargetFeatureKV& kv : sti->getAllProcessorFeatures())
      if (sti->getFeatureBits().test(kv.Value)) names.push_back(std::string("+") + kv.Key);
    std::sort(names.begin(), names.end());
    for (auto& n : names) out.cpu_features += (out.cpu_features.empty() ? "" : ",") + n;
  }
  TargetDesc td;
  td.has_avx512 = sti->checkFeatures("+avx512f");
  td.has_avx512bw = td.has_avx512 && sti->checkFeatures("+avx512bw");
  td.vector_bits = td.has_avx512 ? 512 : 256;
  td.cpu_features = out.cpu_features;
  td.chunk_lanes = 16;
  td.last_level_cache_bytes = host_last_level_cache_bytes();

  llvm::LLVMContext ctx;
  auto m = std::make_unique<llvm::Module>("tessera_" + k.name, ctx);
  m->setTargetTriple(triple);
  m->setDataLayout(tm->createDataLayout());
  KernelLowering lowering(k, *m, td, opts);
  out.entry_symbol = lowering.run();
  for (llvm::Function& f : *m) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", out.cpu_name);
    f.addFnAttr("target-features", out.cpu_features);
    f.addFnAttr("prefer-vector-width", std::to_string(td.vector_bits));
    f.addFnAttr("min-legal-vector-width", std::to_string(td.vector_bits));
    f.addFnAttr(llvm::Attribute::NoUnwind);
  }
  out.llir = print_llvm_module(*m);
  verify_llvm_module(*m, k.name);

  optimize_llvm_module(*m, tm.get(), /*vectorize=*/true);
  out.llir_opt = print_llvm_module(*m);

  auto emit = [&](llvm::Module& mod, llvm::CodeGenFileType kind) {
    llvm::SmallVector<char, 0> buf;
    llvm::raw_svector_ostream os(buf);
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, kind))
      throw CompileError("LLVM cannot emit code for this target (this is a Tessera bug)", false);
    pm.run(mod);
    return std::string(buf.begin(), buf.end());
  };
  {
    auto clone = llvm::CloneModule(*m);
    out.asm_text = emit(*clone, llvm::CodeGenFileType::AssemblyFile);
  }
  out.object = emit(*m, llvm::CodeGenFileType::ObjectFile);
  return out;
}

}  // namespace tessera::codegen::x86
