// Tensor-core (mma.sync) register layouts, expressed as BlockedLayouts (index bit
// <- register bit or thread-id bit), so the rest of the NVPTX lowering reads them.
//
// PTX ISA, "Matrix Fragments for mma.m16n8k16" (f32 accumulator), per warp:
//   groupID = lane >> 2, threadID_in_group = lane % 4
//   c0,c1: row = groupID,     col = threadID_in_group*2 + (i & 1)
//   c2,c3: row = groupID + 8, col = threadID_in_group*2 + (i & 1)
// As index bits of C[16x8]: col bit 0 <- reg bit 0, col bits 1-2 <- lane bits 0-1,
// row bits 0-2 <- lane bits 2-4, row bit 3 <- reg bit 1.
// Worked example, C = 128x128 f32, 4 warps tiled 2x2 (each warp 64x64: 4 m-tiles
// of 16 rows x 8 n-tiles of 8 columns, 128 registers per thread):
//   N: [r0, t0, t1, r2, r3, r4, t5]      (r2-r4: n-tile, t5: warp column)
//   M: [t2, t3, t4, r1, r5, r6, t6]      (r5-r6: m-tile, t6: warp row)
// so register  j | half<<1 | ni<<2 | mi<<5  of thread (lane, warp) holds
//   C[64*(warp>>1) + 16*mi + 8*half + (lane>>2),  64*(warp&1) + 8*ni + 2*(lane&3) + j].
// The same pattern describes the A operand (M x K, "row") of m16n8k16 with K in
// place of N, two 8-column halves per k-tile: a0,a1 (g, 2t+j), a2,a3 (g+8, 2t+j),
// a4,a5 (g, 2t+8+j), a6,a7 (g+8, 2t+8+j). So C of one dot, columns 16kk..16kk+15,
// is exactly the A fragment of k-tile kk of the next dot when both tile warps over
// M alone (mma_a_layout below), and the conversion is free.
#pragma once

#include <cstdint>

#include "codegen/nvptx/blocked_layout.h"

namespace tessera::codegen::nvptx {

// How a CTA's warps split an M x N accumulator: warps_m x warps_n warp tiles of
// (M/warps_m) x (N/warps_n); leftover warps replicate the whole computation.
struct MmaTiling {
  int64_t M = 0, N = 0;
  int warps_m = 1, warps_n = 1;
  int64_t warp_m() const { return M / warps_m; }  // rows per warp (multiple of 16)
  int64_t warp_n() const { return N / warps_n; }  // columns per warp (multiple of 16)
  int m_tiles() const { return static_cast<int>(warp_m() / 16); }
  int n_tiles() const { return static_cast<int>(warp_n() / 8); }
};

// Splits the larger warp-tile side first (more operand reuse per ldmatrix);
// `rows_only` keeps every warp on whole rows (warps_n = 1), which chained dots need.
// M and N: powers of two >= 16.
MmaTiling choose_mma_tiling(int64_t M, int64_t N, int num_warps, bool rows_only);

// The accumulator layout of an m16n8 mma, as in the worked example above.
// Register index = j | half<<1 | ni<<2 | mi<<(2+log2(n_tiles)).
BlockedLayout mma_acc_layout(const MmaTiling& t);

// The accumulator of an M x N dot computed transposed by wgmma (C^T = B^T A^T, the
// tf32 NN path of lower_dot_wgmma_swapped_nvptx.cpp): the warps own 16 columns of N
// each (N = 16 x num_warps), and fragment row g + 8h of a warp is column 2g + h, so
// a thread's register pair (h = 0, 1) is two adjacent columns. As index bits of C:
//   N: [r0, t2, t3, t4, t5, t6, ...]   M: [r1, t0, t1, r2, r3, ...]
// Register index = h | i<<1 | j<<2 holds C[8j + 2(lane%4) + i][16 warp + 2(lane/4) + h],
// so registers 2q, 2q+1 are 8 contiguous bytes of a row of C (stores, epilogues). wgmma
// writes it as d[4j + 2h + i] (fragment row g + 8h, column 8j + 2t + i): the register
// index with bits 0 and 1 swapped (swapped_acc_register).
BlockedLayout wgmma_swapped_acc_layout(int64_t M, int64_t N);
inline int swapped_acc_register(int d) { return (d & ~3) | (d & 1) << 1 | (d >> 1 & 1); }

// The 16-bit A-operand layout (M x K) of m16n8k16 for the warps of `t` (warps_n
// warps along N hold replicas). Register index = j | (row+8)<<1 | (col+8)<<2 |
// kk<<3 | mi<<(3+log2(K/16)): registers 8(mi*K/16+kk) .. +7 are fragment (mi, kk).
BlockedLayout mma_a_layout(const MmaTiling& t, int64_t K);

// The shared-memory swizzle: 16-byte chunk `chunk` of row `row` of a row-major
// staging buffer with `row_bytes` bytes per row is stored at chunk
// mma_swizzle_chunk(...). Any 8 consecutive rows at one logical chunk land on 8
// distinct 16-byte bank groups (ldmatrix phases are conflict-free), and a row's
// chunks stay a permutation of themselves.
int64_t mma_swizzle_chunk(int64_t row, int64_t chunk, int64_t row_bytes);

}  // namespace tessera::codegen::nvptx
