// The GPU back end's limit on a tile's elements per thread (tile_budget_nvptx.cpp).
#pragma once

#include <cstdint>

#include "ir/ir.h"

namespace tessera::codegen::nvptx {

// Most elements of one tile value per thread the GPU back end compiles.
constexpr int64_t kMaxTileElementsPerThread = 1024;

// Throws CompileError (user_error, at the op) when a tile of the kernel exceeds
// kMaxTileElementsPerThread elements per thread with `num_warps` warps.
void check_tile_budget(const ir::Kernel& k, int num_warps);

}  // namespace tessera::codegen::nvptx
