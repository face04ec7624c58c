// The GPU back end's limit on a tile's elements per thread, checked before lowering.
//
// A tile lives in its threads' registers (a blocked layout spreads it over the CTA). A
// thread has at most 255 registers, so a tile beyond a few hundred 32-bit elements per
// thread spills to local memory, and the straight-line code for it grows with the
// element count: ptxas then takes minutes (measured on this softmax row with 4 warps,
// fp32: 1024 elements per thread 3.8 s, 2048 29 s, 4096 237 s; the LLVM part 84 s at
// 8192). A launch would look hung, so such a kernel is refused with the tile, its count
// per thread and the ways out. The CPU back end strip-mines large tiles and has no limit.
#include "codegen/nvptx/tile_budget_nvptx.h"

#include <string>
#include <utility>

#include "tessera/compiler.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

// The first op (in program order) with a tile result of more than `limit` elements,
// and that result.
std::pair<const Op*, const Value*> first_oversized(const Block& b, int64_t limit) {
  for (auto& op : b.ops) {
    for (auto& r : op->results)
      if (r->type.is_tile() && r->type.numel() > limit) return {op.get(), r.get()};
    for (auto& region : op->regions) {
      auto inner = first_oversized(*region->block, limit);
      if (inner.first) return inner;
    }
  }
  return {nullptr, nullptr};
}

}  // namespace

void check_tile_budget(const Kernel& k, int num_warps) {
  const int64_t threads = 32LL * num_warps;
  auto [op, big] = first_oversized(*k.body(), kMaxTileElementsPerThread * threads);
  if (!op) return;
  const int64_t n = big->type.numel();
  std::string msg = "the tile " + big->type.str() + " is " + std::to_string(n / threads) +
                    " elements per thread with num_warps=" + std::to_string(num_warps) + " (" +
                    std::to_string(threads) + " threads); on a GPU a tile lives in registers (at most 255 per "
                    "thread) and the GPU back end refuses more than " +
                    std::to_string(kMaxTileElementsPerThread) +
                    " elements per thread, where ptxas would spill and take minutes: use a smaller block and loop "
                    "over it";
  int64_t warps = 1;  // the fewest (a power of two) that would do
  while (warps <= 32 && n > kMaxTileElementsPerThread * 32 * warps) warps *= 2;
  if (warps <= 32) msg += ", or launch with num_warps=" + std::to_string(warps) + " or more";
  throw CompileError(msg + " (in kernel " + k.name + " at " + k.file() + ":" + std::to_string(op->loc.line) + ":" +
                         std::to_string(op->loc.col) + ")",
                     /*user_error=*/true, op->loc.line, op->loc.col);
}

}  // namespace tessera::codegen::nvptx
