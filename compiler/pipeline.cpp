// The compilation pipeline as one readable list of named stages:
//   tir (parsed) -> verify -> canonicalize -> licm -> cse -> canonicalize -> dce -> early-loads
//   -> tir-opt (the verifier runs after every pass)
//   -> llir (lowered) -> llir-opt (LLVM O3) -> asm + object        [cpu]
//   -> llir (NVVM) -> llir-opt (LLVM O3) -> ptx                     [cuda:XX / sm_XX]
// TESSERA_DUMP=stage,... (CompileOptions::dump) prints the IR after each stage.
#include <cstdio>

#include "analysis/grid_dependency.h"
#include "analysis/written_args.h"
#include "codegen/nvptx/compile_nvptx.h"
#include "codegen/x86/compile_x86.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tessera/compiler.h"
#include "transforms/passes.h"

#ifndef TESSERA_BUILD_STAMP
#define TESSERA_BUILD_STAMP "dev"
#endif
#include "tessera_build_id.h"

namespace tessera {

namespace {

void dump(const CompileOptions& o, const std::string& stage, const std::string& text) {
  for (auto& d : o.dump)
    if (d == stage || d == "all") std::fprintf(stderr, "// ----- %s -----\n%s\n", stage.c_str(), text.c_str());
}

}  // namespace

std::string compiler_build_id() { return TESSERA_SOURCES_HASH; }
std::string host_cpu_name() { return codegen::x86::host_cpu_name(); }
std::string host_cpu_features() { return codegen::x86::host_cpu_features(); }

std::string run_passes(const std::string& ir_text, const std::vector<std::string>& passes) {
  auto k = ir::parse_kernel(ir_text);
  ir::verify_kernel(*k);
  for (auto& p : passes) {
    transforms::run_pass(*k, p);
    ir::verify_kernel(*k);
  }
  return ir::print_kernel(*k);
}

CompileResult compile_tile_ir(const std::string& ir_text, const CompileOptions& opts) {
  CompileResult r;
  auto add_stage = [&](const std::string& name, std::string text) {
    dump(opts, name, text);
    r.stage_order.push_back(name);
    r.stages[name] = std::move(text);
  };
  auto k = ir::parse_kernel(ir_text);
  r.kernel_name = k->name;
  ir::verify_kernel(*k);
  add_stage("tir", ir::print_kernel(*k));
  for (const char* const* p = transforms::kDefaultPipeline; *p; ++p) {
    transforms::run_pass(*k, *p);
    ir::verify_kernel(*k);
  }
  add_stage("tir-opt", ir::print_kernel(*k));
  std::string written;
  for (int i : analysis::written_pointer_args(*k)) written += (written.empty() ? "" : ",") + std::to_string(i);
  r.metadata["written_args"] = written;  // the launch refuses read-only arrays for these
  // Programs run in clusters of this many along grid axis 0 (cluster_reduce_scatter):
  // the launch checks the grid and groups them (CPU threads, GPU thread-block clusters).
  if (int c = analysis::cluster_size(*k->body())) r.metadata["cluster"] = std::to_string(c);

  if (opts.target == "cpu") {
    auto out = codegen::x86::compile_x86(*k, opts);
    add_stage("llir", std::move(out.llir));
    add_stage("llir-opt", std::move(out.llir_opt));
    add_stage("asm", std::move(out.asm_text));
    r.binary = std::move(out.object);
    r.binary_kind = "elf-object";
    r.entry_symbol = out.entry_symbol;
    r.metadata["cpu_name"] = out.cpu_name;
    r.metadata["cpu_features"] = out.cpu_features;
    return r;
  }
  if (codegen::nvptx::is_nvptx_target(opts.target)) {
    auto out = codegen::nvptx::compile_nvptx(*k, opts);
    add_stage("llir", std::move(out.llir));
    add_stage("llir-opt", std::move(out.llir_opt));
    add_stage("ptx", out.ptx);
    r.binary = std::move(out.ptx);
    r.binary_kind = "ptx";
    r.entry_symbol = out.entry_symbol;
    r.metadata["arch"] = out.arch;
    r.metadata["num_warps"] = std::to_string(out.num_warps);
    r.metadata["threads"] = std::to_string(out.threads);  // per block (a warp-specialized loop adds a warp)
    r.metadata["shared"] = std::to_string(out.shared_bytes);  // static shared memory, bytes
    if (!out.tensor_maps.empty()) r.metadata["tensor_maps"] = out.tensor_maps;  // built by the runtime at launch
    // The rule of programmatic dependent launch (docs/language.md): a kernel that calls
    // gdc_wait is launched with PDL, so it may start before the previous grid in the
    // stream ends and must read that grid's output only after the wait. Before sm_90
    // the wait is not emitted and the launch is an ordinary one.
    if (out.compute_capability >= 90 && analysis::waits_on_prior_grid(*k->body())) r.metadata["pdl"] = "1";
    return r;
  }
  throw CompileError("target '" + opts.target + "' is not supported yet (supported: cpu, cuda:XX, sm_XX)", true);
}

}  // namespace tessera
