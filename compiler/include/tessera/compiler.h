// Tessera's compiler, as the binding and tools see it: Tile IR text in, every
// stage's text and a binary out. No LLVM types cross this header.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera {

// A compile failure. `user_error` is true when the input is at fault (the message
// says what is wrong and where); false means a Tessera bug.
class CompileError : public std::runtime_error {
 public:
  CompileError(const std::string& msg, bool user_error, int line = 0, int col = 0)
      : std::runtime_error(msg), user_error(user_error), line(line), col(col) {}
  bool user_error;
  int line, col;  // in the kernel's source file; 0 if unknown
};

struct CompileOptions {
  std::string target = "cpu";  // "cpu" (host) or "cuda:90a", "cuda:80", ...
  int num_warps = 4;
  int num_stages = 3;
  bool debug = false;               // keep device_assert
  std::vector<std::string> dump;    // stage names to print to stderr (TESSERA_DUMP)
  std::string cpu_name;             // override host CPU (tests), e.g. "haswell"
  std::string cpu_features;         // override host features
};

struct CompileResult {
  std::string kernel_name;
  std::string entry_symbol;               // symbol of the launch entry point
  std::vector<std::string> stage_order;   // e.g. tir, tir-opt, llir, llir-opt, asm
  std::map<std::string, std::string> stages;  // stage name -> text
  std::string binary;                     // relocatable object (cpu) or cubin/ptx (gpu)
  std::string binary_kind;                // "elf-object", "ptx", "cubin"
  std::map<std::string, std::string> metadata;
};

// Parses, verifies, optimizes and lowers one kernel. Throws CompileError.
CompileResult compile_tile_ir(const std::string& ir_text, const CompileOptions& opts);

// Runs only the named passes on IR text and prints the result (tile-opt, tests).
std::string run_passes(const std::string& ir_text, const std::vector<std::string>& passes);

// Identity of this build of the compiler: part of every cache key.
std::string compiler_build_id();

// Host CPU name and feature string as LLVM sees them: part of CPU cache keys.
std::string host_cpu_name();
std::string host_cpu_features();

}  // namespace tessera
