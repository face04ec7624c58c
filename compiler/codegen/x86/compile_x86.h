// The x86 back end: Tile IR kernel -> LLVM IR -> optimized LLVM IR -> object code.
#pragma once

#include <string>

#include "ir/ir.h"
#include "tessera/compiler.h"

namespace tessera::codegen::x86 {

struct X86Output {
  std::string llir, llir_opt, asm_text, object, entry_symbol, cpu_name, cpu_features;
};

X86Output compile_x86(const ir::Kernel& k, const CompileOptions& opts);

// Host CPU as LLVM sees it.
std::string host_cpu_name();
std::string host_cpu_features();

}  // namespace tessera::codegen::x86
