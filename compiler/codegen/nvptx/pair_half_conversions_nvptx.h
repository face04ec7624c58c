// Pairs f32 -> f16/bf16 conversions that fill two adjacent lanes of one vector into one
// cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32 (sm_80+): see pair_half_conversions_nvptx.cpp.
#pragma once

#include <llvm/IR/Module.h>

namespace tessera::codegen::nvptx {

// Rewrites, on sm_80+ (cc >= 80), each pair of scalar fptrunc float -> half (or bfloat)
// inserted into lanes 2k and 2k+1 of one vector, and each vector fptrunc of an even lane
// count, into llvm.nvvm.ff2f16x2.rn / ff2bf16x2.rn calls (one instruction per two
// elements, rounded to nearest even like the single conversions). Returns how many
// pairs it formed; below sm_80 it changes nothing and returns 0.
int pair_half_conversions(llvm::Module& m, int cc);

}  // namespace tessera::codegen::nvptx
