// The NVPTX back end: Tile IR kernel -> LLVM IR (NVVM) -> optimized LLVM IR -> PTX.
#pragma once

#include <string>

#include "ir/ir.h"
#include "tessera/compiler.h"

namespace tessera::codegen::nvptx {

struct NvptxOutput {
  std::string llir, llir_opt, ptx;
  std::string entry_symbol;  // the kernel's name: the PTX .entry
  std::string arch;          // e.g. "sm_90a"
  int compute_capability = 0;  // e.g. 90 for sm_90 and sm_90a
  int num_warps = 4;
  int threads = 128;         // threads per block to launch (num_warps*32, plus a producer warp)
  int shared_bytes = 0;      // dynamic shared memory the kernel uses (pass at launch)
  std::string tensor_maps;   // tensor maps it takes after its parameters ("" none; tensor_map_spec.h)
};

// True for targets this back end handles: "cuda:90a", "cuda:80", "sm_90a", ...
bool is_nvptx_target(const std::string& target);

// Throws CompileError (user_error) for ops the GPU path does not support yet.
NvptxOutput compile_nvptx(const ir::Kernel& k, const CompileOptions& opts);

}  // namespace tessera::codegen::nvptx
