// Tensor-core register layouts and the staging swizzle (see mma_layout.h).
#include "codegen/nvptx/mma_layout.h"

#include <algorithm>

namespace tessera::codegen::nvptx {

MmaTiling choose_mma_tiling(int64_t M, int64_t N, int num_warps, bool rows_only) {
  MmaTiling t;
  t.M = M;
  t.N = N;
  while (t.warps_m * t.warps_n < num_warps) {
    bool can_m = t.warp_m() >= 32;
    bool can_n = !rows_only && t.warp_n() >= 32;
    if (!can_m && !can_n) break;  // the rest of the warps replicate
    if (can_m && (!can_n || t.warp_m() >= t.warp_n())) t.warps_m *= 2;
    else t.warps_n *= 2;
  }
  return t;
}

namespace {

using Src = BlockedLayout::Src;

// A layout of `shape` from per-dim bit sources; thread_mask from the thread bits.
BlockedLayout assemble(std::vector<int64_t> shape, std::vector<std::vector<Src>> bits, int reg_bits) {
  BlockedLayout l;
  l.shape = std::move(shape);
  l.bits = std::move(bits);
  l.reg_bits = reg_bits;
  for (auto& dim : l.bits)
    for (const Src& s : dim)
      if (!s.reg) l.thread_mask |= 1u << s.bit;
  return l;
}

}  // namespace

BlockedLayout mma_acc_layout(const MmaTiling& t) {
  const int nt_bits = log2_exact(t.n_tiles()), mt_bits = log2_exact(t.m_tiles());
  const int wn_bits = log2_exact(t.warps_n), wm_bits = log2_exact(t.warps_m);
  std::vector<Src> n = {{true, 0}, {false, 0}, {false, 1}};
  for (int i = 0; i < nt_bits; ++i) n.push_back({true, 2 + i});
  for (int i = 0; i < wn_bits; ++i) n.push_back({false, 5 + i});
  std::vector<Src> m = {{false, 2}, {false, 3}, {false, 4}, {true, 1}};
  for (int i = 0; i < mt_bits; ++i) m.push_back({true, 2 + nt_bits + i});
  for (int i = 0; i < wm_bits; ++i) m.push_back({false, 5 + wn_bits + i});
  return assemble({t.M, t.N}, {m, n}, 2 + nt_bits + mt_bits);
}

BlockedLayout wgmma_swapped_acc_layout(int64_t M, int64_t N) {
  const int j_bits = log2_exact(M / 8), warp_bits = log2_exact(N / 16);
  std::vector<Src> m = {{true, 1}, {false, 0}, {false, 1}};
  for (int i = 0; i < j_bits; ++i) m.push_back({true, 2 + i});
  std::vector<Src> n = {{true, 0}, {false, 2}, {false, 3}, {false, 4}};
  for (int i = 0; i < warp_bits; ++i) n.push_back({false, 5 + i});
  return assemble({M, N}, {m, n}, 2 + j_bits);
}

BlockedLayout mma_a_layout(const MmaTiling& t, int64_t K) {
  const int kt_bits = log2_exact(K / 16), mt_bits = log2_exact(t.m_tiles());
  const int wn_bits = log2_exact(t.warps_n), wm_bits = log2_exact(t.warps_m);
  std::vector<Src> k = {{true, 0}, {false, 0}, {false, 1}, {true, 2}};
  for (int i = 0; i < kt_bits; ++i) k.push_back({true, 3 + i});
  std::vector<Src> m = {{false, 2}, {false, 3}, {false, 4}, {true, 1}};
  for (int i = 0; i < mt_bits; ++i) m.push_back({true, 3 + kt_bits + i});
  // Warps along N hold replicas of A: their thread bits (5 .. 5+wn_bits-1) are unused.
  for (int i = 0; i < wm_bits; ++i) m.push_back({false, 5 + wn_bits + i});
  return assemble({t.M, K}, {m, k}, 3 + kt_bits + mt_bits);
}

int64_t mma_swizzle_chunk(int64_t row, int64_t chunk, int64_t row_bytes) {
  const int64_t chunks_per_row = std::max<int64_t>(1, row_bytes / 16);
  if (chunks_per_row >= 8) return chunk ^ (row % 8);
  // Rows shorter than the 128 bytes of one pass over the banks: 8/chunks_per_row
  // consecutive rows share a pass; rows of different passes xor their chunk.
  const int64_t rows_per_pass = 8 / chunks_per_row;
  return chunk ^ ((row / rows_per_pass) % chunks_per_row);
}

}  // namespace tessera::codegen::nvptx
