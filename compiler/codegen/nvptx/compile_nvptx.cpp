// The NVPTX back end driver: builds the kernel's LLVM module, runs LLVM's O3
// pipeline with the NVPTX target machine, and prints PTX.
#include "codegen/common/elementwise.h"
#include "codegen/common/llvm_errors.h"
#include "codegen/common/llvm_pipeline.h"
#include "codegen/nvptx/compile_nvptx.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include <cctype>
#include <mutex>

#include "codegen/nvptx/gpu_lowering.h"
#include "codegen/nvptx/pair_half_conversions_nvptx.h"
#include "codegen/nvptx/pin_fp_rounding_nvptx.h"
#include "codegen/nvptx/widen_bf16_words_nvptx.h"
#include "codegen/nvptx/tile_budget_nvptx.h"

namespace tessera::codegen::nvptx {

namespace {

constexpr const char* kTriple = "nvptx64-nvidia-cuda";
// The newest PTX ISA LLVM 19 emits that CUDA 12+/13 ptxas and driver 580 accept.
constexpr const char* kPtxFeatures = "+ptx80";
// How sm_90a kernels fill wgmma rings unless the kernel says otherwise (TESSERA_TMA):
// 0: cp.async; 1: TMA, stages released through mbarriers; 2: TMA, a CTA barrier per
// iteration; (debugging, to measure against) 3: a specialized loop keeps a wgmma group in
// flight from 4 stages only; 4: as 1 but tile stores not by the TMA (tma_store_nvptx.cpp). 1 was the fastest on an H100 in 11 of 12 configurations, up to 1.35x
// cp.async (bench/results/gpu_matmul_tma.md).
constexpr int kTmaByDefault = 1;

void init_llvm_nvptx() {
  install_llvm_error_handler();
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}

// "cuda:90a" / "sm_90a" -> "90a"; empty if malformed.
std::string arch_digits(const std::string& target) {
  std::string s;
  if (target.rfind("cuda:", 0) == 0) s = target.substr(5);
  else if (target.rfind("sm_", 0) == 0) s = target.substr(3);
  else return "";
  if (s.rfind("sm_", 0) == 0) s = s.substr(3);  // "cuda:sm_90a"
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0 || !(i == s.size() || (i + 1 == s.size() && s[i] == 'a'))) return "";
  return s;
}

}  // namespace

bool is_nvptx_target(const std::string& target) {
  return target.rfind("cuda:", 0) == 0 || target.rfind("sm_", 0) == 0;
}

// The kernel's thread-block cluster shape (cluster_nvptx.cpp) in its PTX entry, which
// LLVM 19 cannot write: `.explicitcluster` and `.reqnctapercluster c, 1, 1` after the
// parameter list, where nvcc puts __cluster_dims__. An ordinary launch then runs the
// grid in clusters of c CTAs along x.
static void name_cluster_shape(std::string& ptx, int c, const std::string& kernel) {
  size_t entry = ptx.find(".entry ");
  size_t body = entry == std::string::npos ? entry : ptx.find("\n{", entry);
  if (body == std::string::npos)
    throw CompileError("no kernel entry in the PTX of " + kernel + " (this is a Tessera bug)", false);
  ptx.insert(body, "\n.explicitcluster\n.reqnctapercluster " + std::to_string(c) + ", 1, 1");
}

NvptxOutput compile_nvptx(const ir::Kernel& k, const CompileOptions& opts) {
  std::string digits = arch_digits(opts.target);
  if (digits.empty())
    throw CompileError("target '" + opts.target + "' is not a CUDA architecture (expected e.g. 'cuda:90a', 'cuda:80' or 'sm_90a')", true);
  int cc = std::stoi(digits);
  if (cc < 70 || cc > 90)
    throw CompileError("target '" + opts.target + "': the GPU back end supports sm_70 to sm_90a", true);
  init_llvm_nvptx();
  NvptxOutput out;
  out.arch = "sm_" + digits;
  out.compute_capability = cc;
  // The kernel's own attribute (written by the frontend from the same option) wins.
  auto nw = k.attrs.find("num_warps");
  out.num_warps = nw != k.attrs.end() && std::holds_alternative<int64_t>(nw->second)
                      ? static_cast<int>(std::get<int64_t>(nw->second))
                      : opts.num_warps;
  if (out.num_warps < 1 || out.num_warps > 32 || (out.num_warps & (out.num_warps - 1)))
    throw CompileError("num_warps must be a power of two from 1 to 32, got " + std::to_string(out.num_warps), true);

  check_tile_budget(k, out.num_warps);

  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(kTriple, err);
  if (!target) throw CompileError("LLVM has no NVPTX target: " + err + " (this is a Tessera bug)", false);
  // FMA contraction (the kernel's fp_fusion attribute, see gpu_lowering.h): fusion is
  // allowed module-wide, so that the kernel's ops print without a rounding mode and ptxas
  // may fuse them as it does Triton's; pin_uncontracted_fp_rounding keeps the rest rounded.
  const bool fp_fusion = kernel_fp_fusion(k);
  llvm::TargetOptions to;
  if (fp_fusion) to.AllowFPOpFusion = llvm::FPOpFusion::Fast;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(kTriple, out.arch, kPtxFeatures, to, std::nullopt,
                                                                      std::nullopt, llvm::CodeGenOptLevel::Aggressive));

  llvm::LLVMContext ctx;
  auto m = std::make_unique<llvm::Module>("tessera_" + k.name, ctx);
  m->setTargetTriple(kTriple);
  m->setDataLayout(tm->createDataLayout());
  m->addModuleFlag(llvm::Module::Error, kNvptxSmFlag, cc);  // elementwise.cpp: hardware conversions
  auto ns = k.attrs.find("num_stages");
  int num_stages = ns != k.attrs.end() && std::holds_alternative<int64_t>(ns->second)
                       ? static_cast<int>(std::get<int64_t>(ns->second))
                       : opts.num_stages;
  // TMA rings on sm_90a (tma_nvptx.cpp): the kernel's `tma` attribute (the frontend
  // writes it from TESSERA_TMA) or the default.
  auto tma_attr = k.attrs.find("tma");
  const int tma = tma_attr != k.attrs.end() && std::holds_alternative<int64_t>(tma_attr->second)
                      ? static_cast<int>(std::get<int64_t>(tma_attr->second))
                      : kTmaByDefault;
  GpuLowering lowering(k, *m, out.num_warps, opts.debug, cc, num_stages, /*wgmma=*/digits == "90a", tma);
  llvm::Function* fn = lowering.run();
  out.entry_symbol = fn->getName().str();
  out.shared_bytes = lowering.shared_bytes();
  out.threads = lowering.block_threads();
  out.tensor_maps = lowering.tensor_map_spec();
  if (out.shared_bytes > max_dynamic_shared_bytes(cc))
    throw CompileError("kernel " + k.name + " needs " + std::to_string(out.shared_bytes) + " bytes of shared memory; " +
                           out.arch + " allows at most " + std::to_string(max_dynamic_shared_bytes(cc) / 1024) +
                           " KB per block (use smaller tiles)",
                       true);
  for (llvm::Function& f : *m) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", out.arch);
    f.addFnAttr("target-features", kPtxFeatures);
  }
  out.llir = print_llvm_module(*m);
  verify_llvm_module(*m, k.name);

  optimize_llvm_module(*m, tm.get(), /*vectorize=*/false);
  if (fp_fusion) pin_uncontracted_fp_rounding(*m, cc);
  pair_half_conversions(*m, cc);  // two f32 -> f16/bf16 per cvt from sm_80
  widen_bf16_words(*m);           // bf16 lanes widened from their 32-bit words
  out.llir_opt = print_llvm_module(*m);

  llvm::SmallVector<char, 0> buf;
  llvm::raw_svector_ostream os(buf);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    throw CompileError("LLVM cannot emit PTX for " + out.arch + " (this is a Tessera bug)", false);
  pm.run(*m);
  out.ptx.assign(buf.begin(), buf.end());
  if (int c = lowering.cluster_size()) name_cluster_shape(out.ptx, c, k.name);
  return out;
}

}  // namespace tessera::codegen::nvptx
