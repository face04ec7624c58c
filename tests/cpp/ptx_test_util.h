// Helpers for the GPU back-end tests: compile Tile IR for a CUDA target and
// assemble the PTX with the toolkit's ptxas.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "tessera/compiler.h"

namespace tessera_test {

inline const char* kPtxas = "/usr/local/cuda/bin/ptxas";

inline bool have_ptxas() { return access(kPtxas, X_OK) == 0; }

inline tessera::CompileResult compile_gpu(const std::string& ir, const std::string& target, int num_warps = 4,
                                          bool debug = false) {
  tessera::CompileOptions o;
  o.target = target;
  o.num_warps = num_warps;
  o.debug = debug;
  return tessera::compile_tile_ir(ir, o);
}

// Runs ptxas on the PTX; returns "" on success, else its output.
inline std::string ptxas(const std::string& ptx, const std::string& arch) {
  char dir[] = "/tmp/tessera_ptxas_XXXXXX";
  if (!mkdtemp(dir)) return "cannot make a temp dir";
  std::string in = std::string(dir) + "/k.ptx", out = std::string(dir) + "/k.cubin", log = std::string(dir) + "/log";
  std::ofstream(in) << ptx;
  std::string cmd = std::string(kPtxas) + " -arch=" + arch + " " + in + " -o " + out + " > " + log + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::string text;
  {
    std::ifstream f(log);
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
  std::remove(log.c_str());
  rmdir(dir);
  return rc == 0 ? "" : "ptxas failed (" + std::to_string(rc) + "): " + text;
}

inline int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace tessera_test
