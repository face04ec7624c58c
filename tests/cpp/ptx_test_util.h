// Helpers for the GPU back-end tests: compile Tile IR for a CUDA target and
// assemble the PTX with the toolkit's ptxas.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

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

// Replaces every occurrence of each key (in the order given) in an IR template.
inline std::string subst(std::string text, const std::vector<std::pair<std::string, std::string>>& vars) {
  for (auto& [k, v] : vars)
    for (size_t p = text.find(k); p != std::string::npos; p = text.find(k, p + v.size())) text.replace(p, k.size(), v);
  return text;
}

// IR lines defining %NAME: tile<RxCxptr<T>> = BASE + r*C + c (a row-major R x C tile).
inline std::string ptr_tile(const std::string& name, const std::string& base, int R, int C, const std::string& t) {
  return subst(R"(  %NAME_r = arange {end = $R, start = 0} : tile<$Rxi32>
  %NAME_re = expand_dims %NAME_r {axis = 1} : tile<$Rx1xi32>
  %NAME_rs = const {value = $C} : tile<$Rx1xi32>
  %NAME_rm = mul %NAME_re, %NAME_rs : tile<$Rx1xi32>
  %NAME_rb = broadcast %NAME_rm : tile<$Rx$Cxi32>
  %NAME_c = arange {end = $C, start = 0} : tile<$Cxi32>
  %NAME_ce = expand_dims %NAME_c {axis = 0} : tile<1x$Cxi32>
  %NAME_cb = broadcast %NAME_ce : tile<$Rx$Cxi32>
  %NAME_off = add %NAME_rb, %NAME_cb : tile<$Rx$Cxi32>
  %NAME_s = splat %BASE : tile<$Rx$Cxptr<$T>>
  %NAME = addptr %NAME_s, %NAME_off : tile<$Rx$Cxptr<$T>>
)",
               {{"NAME", name}, {"BASE", base}, {"$R", std::to_string(R)}, {"$C", std::to_string(C)}, {"$T", t}});
}

}  // namespace tessera_test
