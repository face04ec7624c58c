// Tensor-core dots in the NVPTX back end: the MMA register layouts checked against
// the PTX ISA's fragment formulas, the staging swizzle's bank behaviour, and the
// PTX of f16/bf16/tf32/tf32x3/i8 dots, chained dots and >48 KB of shared memory
// (compiled for sm_80 and sm_90a, assembled with ptxas when the toolkit is there).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "codegen/nvptx/mma_layout.h"
#include "ptx_test_util.h"

namespace {

using namespace tessera::codegen::nvptx;
using tessera_test::count;
using tessera_test::ptr_tile;
using tessera_test::subst;

// Evaluates an index bit string for one thread id.
int64_t eval_bits(const std::vector<IndexBit>& bits, int tid) {
  int64_t v = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    bool one = bits[i].kind == IndexBit::One || (bits[i].kind == IndexBit::Thread && ((tid >> bits[i].thread_bit) & 1));
    if (one) v |= int64_t(1) << i;
  }
  return v;
}

// PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type", C/D:
//   groupID = %laneid >> 2, threadID_in_group = %laneid % 4
//   row = groupID            for c0, c1;  groupID + 8 for c2, c3
//   col = threadID_in_group * 2 + (i & 0x1)
// repeated over the warp's m-tiles (16 rows) and n-tiles (8 columns), warps tiled
// warps_m x warps_n with the warp's column index fastest.
void check_acc_layout(int64_t M, int64_t N, int num_warps, bool rows_only) {
  SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(N) + " warps " + std::to_string(num_warps));
  MmaTiling t = choose_mma_tiling(M, N, num_warps, rows_only);
  BlockedLayout l = mma_acc_layout(t);
  ASSERT_EQ(l.num_regs(), t.m_tiles() * t.n_tiles() * 4);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (int tid = 0; tid < num_warps * 32; ++tid) {
    int lane = tid % 32, warp = tid / 32;
    if (warp >= t.warps_m * t.warps_n) continue;  // replicas
    int group_id = lane >> 2, thread_in_group = lane % 4;
    int wn = warp % t.warps_n, wm = warp / t.warps_n;
    for (int r = 0; r < l.num_regs(); ++r) {
      int i = r & 3, ni = (r >> 2) % t.n_tiles(), mi = (r >> 2) / t.n_tiles();
      int64_t row = wm * t.warp_m() + 16 * mi + group_id + (i >= 2 ? 8 : 0);
      int64_t col = wn * t.warp_n() + 8 * ni + thread_in_group * 2 + (i & 1);
      SymIndex s = l.index_of(r);
      ASSERT_EQ(eval_bits(s[0], tid), row) << "tid " << tid << " reg " << r << " " << l.str();
      ASSERT_EQ(eval_bits(s[1], tid), col) << "tid " << tid << " reg " << r << " " << l.str();
      seen.insert({row, col});
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), M * N);  // every element exactly once per replica
}

TEST(MmaLayout, AccumulatorMatchesPtxIsaFragments) {
  for (auto [M, N, w] : {std::tuple{16, 16, 1}, {16, 16, 4}, {128, 128, 4}, {128, 128, 8}, {64, 32, 4}, {32, 128, 8},
                         {128, 64, 4}, {256, 128, 8}})
    check_acc_layout(M, N, w, false);
  check_acc_layout(128, 64, 4, true);
  check_acc_layout(64, 128, 8, true);
}

// The swapped tf32 wgmma (C^T = B^T A^T) accumulator: PTX ISA, wgmma m64nN f32 D, per
// warp w of the CTA: d[4j + 2h + i] is row 16w + groupID + 8h, column 8j + 2t + i of
// C^T; its row g + 8h stands for column 16w + 2g + h of C (wgmma_swapped_acc_layout).
TEST(MmaLayout, SwappedWgmmaAccumulatorIsTheTransposedFragment) {
  for (auto [M, N, w] : {std::tuple{256, 128, 8}, {128, 128, 8}, {16, 64, 4}, {64, 64, 4}}) {
    SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(N));
    BlockedLayout l = wgmma_swapped_acc_layout(M, N);
    ASSERT_EQ(l.num_regs(), M / 2);  // wgmma m64nM: M/2 f32 per thread
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int tid = 0; tid < w * 32; ++tid) {
      int lane = tid % 32, warp = tid / 32, g = lane >> 2, t = lane % 4;
      for (int d = 0; d < M / 2; ++d) {
        int i = d & 1, h = (d >> 1) & 1, j = d >> 2;
        const int r = swapped_acc_register(d);
        EXPECT_EQ(swapped_acc_register(r), d);  // an involution
        SymIndex s = l.index_of(r);
        ASSERT_EQ(eval_bits(s[0], tid), 8 * j + 2 * t + i) << "tid " << tid << " d " << d << " " << l.str();
        ASSERT_EQ(eval_bits(s[1], tid), 16 * warp + 2 * g + h) << "tid " << tid << " d " << d << " " << l.str();
        seen.insert({eval_bits(s[0], tid), eval_bits(s[1], tid)});
      }
    }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), M * N);
    EXPECT_EQ(l.contiguous_regs(), 2);  // two adjacent columns of a row: 8-byte stores
  }
}

TEST(MmaLayout, TilingSplitsTheLargerSideAndKeepsWarpTilesWhole) {
  MmaTiling t = choose_mma_tiling(128, 128, 4, false);
  EXPECT_EQ(t.warps_m, 2);
  EXPECT_EQ(t.warps_n, 2);
  t = choose_mma_tiling(128, 128, 8, false);
  EXPECT_EQ(t.warps_m * t.warps_n, 8);
  t = choose_mma_tiling(128, 64, 4, true);  // rows only: attention's Q.K^T and P.V
  EXPECT_EQ(t.warps_m, 4);
  EXPECT_EQ(t.warps_n, 1);
  t = choose_mma_tiling(16, 16, 4, false);  // one mma tile: the other warps replicate
  EXPECT_EQ(t.warps_m * t.warps_n, 1);
  EXPECT_EQ(mma_acc_layout(t).thread_mask, 31u);
}

// PTX ISA, A of mma.m16n8k16 (f16/bf16): a0,a1: (groupID, tig*2 + i&1);
// a2,a3: (groupID+8, ...); a4,a5: (groupID, tig*2 + 8 + i&1); a6,a7: (groupID+8, ... + 8).
TEST(MmaLayout, AOperandMatchesPtxIsaFragments) {
  MmaTiling t = choose_mma_tiling(128, 64, 4, true);
  const int64_t K = 64;
  BlockedLayout l = mma_a_layout(t, K);
  ASSERT_EQ(l.num_regs(), t.m_tiles() * (K / 16) * 8);
  for (int tid = 0; tid < 128; ++tid) {
    int lane = tid % 32, warp = tid / 32, g = lane >> 2, tig = lane % 4;
    for (int r = 0; r < l.num_regs(); ++r) {
      int i = r % 8, kk = (r / 8) % (K / 16), mi = (r / 8) / (K / 16);
      int64_t row = warp * t.warp_m() + 16 * mi + g + ((i >> 1) & 1) * 8;
      int64_t col = 16 * kk + tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      SymIndex s = l.index_of(r);
      ASSERT_EQ(eval_bits(s[0], tid), row) << "tid " << tid << " reg " << r;
      ASSERT_EQ(eval_bits(s[1], tid), col) << "tid " << tid << " reg " << r;
    }
  }
}

// The C fragment of one dot is the A fragment of the next: every element of the
// A layout sits in the same thread in the accumulator layout (a register rename).
TEST(MmaLayout, AccumulatorOfRowTiledDotIsTheNextDotsAOperand) {
  for (int w : {1, 4, 8}) {
    MmaTiling t1 = choose_mma_tiling(128, 64, w, true);
    MmaTiling t2 = choose_mma_tiling(128, 32, w, true);
    BlockedLayout c = mma_acc_layout(t1), a = mma_a_layout(t2, 64);
    for (int r = 0; r < a.num_regs(); ++r) EXPECT_TRUE(c.find(a.index_of(r)).has_value()) << w << " " << r;
  }
  // Warps split over N hold different columns: not a free conversion.
  MmaTiling t1 = choose_mma_tiling(64, 64, 4, false);
  ASSERT_GT(t1.warps_n, 1);
  MmaTiling t2;
  t2.M = 64, t2.N = 32, t2.warps_m = t1.warps_m, t2.warps_n = 1;
  BlockedLayout c = mma_acc_layout(t1), a = mma_a_layout(t2, 64);
  bool all = true;
  for (int r = 0; r < a.num_regs(); ++r) all = all && c.find(a.index_of(r)).has_value();
  EXPECT_FALSE(all);
}

// ldmatrix reads 8 rows (16 bytes each) per phase: the rows of one matrix, at one
// logical chunk. With the swizzle they cover all 32 banks once; a thread's row of
// chunks stays a permutation (16-byte stores stay aligned and in the row).
TEST(MmaLayout, SwizzleMakesLdmatrixPhasesConflictFree) {
  for (int64_t row_bytes : {32, 64, 128, 256, 512}) {
    int64_t cpr = row_bytes / 16;
    for (int64_t row0 = 0; row0 < 64; row0 += 8)
      for (int64_t chunk = 0; chunk < cpr; ++chunk) {
        std::set<int64_t> bank_groups;
        for (int64_t r = row0; r < row0 + 8; ++r) {
          int64_t byte = r * row_bytes + mma_swizzle_chunk(r, chunk, row_bytes) * 16;
          bank_groups.insert((byte / 16) % 8);
        }
        EXPECT_EQ(bank_groups.size(), 8u) << row_bytes << " row " << row0 << " chunk " << chunk;
      }
    for (int64_t r = 0; r < 16; ++r) {
      std::set<int64_t> chunks;
      for (int64_t c = 0; c < cpr; ++c) chunks.insert(mma_swizzle_chunk(r, c, row_bytes));
      EXPECT_EQ(static_cast<int64_t>(chunks.size()), cpr);
      EXPECT_EQ(*chunks.rbegin(), cpr - 1);
    }
  }
}

// --- PTX ----------------------------------------------------------------------

// C = A @ B (+ C loaded when `acc_from_memory`), with B stored K x N (N-contiguous)
// or, when `b_transposed`, loaded N x K and permuted (K-contiguous).
std::string mma_kernel(int M, int N, int K, const std::string& in, const std::string& acc, const std::string& prec,
                       bool b_transposed = false, int num_warps = 4) {
  std::string zero = acc[0] == 'f' ? "0.0" : "0";
  std::string b_ops = b_transposed ? ptr_tile("pb", "b", N, K, in) + subst("  %yt = load %pb : tile<$Nx$Kx$IN>\n"
                                                                            "  %y = permute %yt {order = [1, 0]} : tile<$Kx$Nx$IN>\n",
                                                                            {{"$N", std::to_string(N)}, {"$K", std::to_string(K)}, {"$IN", in}})
                                   : ptr_tile("pb", "b", K, N, in) + subst("  %y = load %pb : tile<$Kx$Nx$IN>\n",
                                                                           {{"$N", std::to_string(N)}, {"$K", std::to_string(K)}, {"$IN", in}});
  return "kernel @mma_kernel(%a: ptr<" + in + "> {divisibility = 16}, %b: ptr<" + in +
         "> {divisibility = 16}, %c: ptr<" + acc + "> {divisibility = 16}) attributes {file = \"/t/mma.py\", "
         "num_warps = " + std::to_string(num_warps) + "} {\n" +
         ptr_tile("pa", "a", M, K, in) + ptr_tile("pc", "c", M, N, acc) +
         subst("  %x = load %pa : tile<$Mx$Kx$IN>\n", {{"$M", std::to_string(M)}, {"$K", std::to_string(K)}, {"$IN", in}}) +
         b_ops +
         subst(R"(  %z = const {value = $ZERO} : tile<$Mx$Nx$ACC>
  %d = dot %x, %y, %z {input_precision = "$PREC"} : tile<$Mx$Nx$ACC>
  store %pc, %d
  return
}
)",
               {{"$M", std::to_string(M)}, {"$N", std::to_string(N)}, {"$ACC", acc}, {"$ZERO", zero}, {"$PREC", prec}});
}

// Compiles for sm_80 and sm_90a, assembles both with ptxas (-v: no spills).
std::string build(const std::string& ir, int num_warps = 4, std::string* meta_shared = nullptr) {
  std::string ptx90;
  for (auto [target, arch] : {std::pair<std::string, std::string>{"cuda:90a", "sm_90a"}, {"cuda:80", "sm_80"}}) {
    tessera::CompileResult r = tessera_test::compile_gpu(ir, target, num_warps);
    EXPECT_EQ(count(r.binary, "ld.local"), 0) << r.binary;
    if (tessera_test::have_ptxas()) EXPECT_EQ(tessera_test::ptxas(r.binary, arch), "") << r.binary;
    if (arch == "sm_90a") {
      ptx90 = r.binary;
      if (meta_shared) *meta_shared = r.metadata.at("shared");
    }
  }
  return ptx90;
}

TEST(NvptxMma, F16AndBf16UseLdmatrixAndM16n8k16) {
  for (const char* in : {"f16", "bf16"}) {
    SCOPED_TRACE(in);
    std::string ptx = build(mma_kernel(128, 128, 32, in, "f32", "ieee"));
    // 2x2 warps of 64x64: 4 m-tiles x 8 n-tiles x 2 k-steps.
    EXPECT_EQ(count(ptx, std::string("mma.sync.aligned.m16n8k16.row.col.f32.") + in + "." + in + ".f32"), 64) << ptx;
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), 8) << ptx;        // A, K-contiguous
    EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"), 8) << ptx;  // B, N-contiguous
    EXPECT_GE(count(ptx, "st.shared.v4"), 1) << ptx;  // 8 halves per 16-byte staging store
    EXPECT_EQ(count(ptx, "fma.rn"), 0) << ptx;
  }
}

TEST(NvptxMma, KContiguousBUsesLdmatrixWithoutTranspose) {
  std::string ptx = build(mma_kernel(64, 64, 64, "f16", "f32", "ieee", /*b_transposed=*/true));
  EXPECT_EQ(count(ptx, ".trans"), 0) << ptx;
  EXPECT_EQ(count(ptx, "mma.sync.aligned.m16n8k16"), 32) << ptx;
}

TEST(NvptxMma, Tf32RoundsWithCvtRnaAndIeeeStaysExact) {
  std::string tf32 = build(mma_kernel(64, 64, 32, "f32", "f32", "tf32"));
  // 2x2 warps of 32x32: 2 m-tiles x 4 n-tiles x 4 k-steps of 8.
  EXPECT_EQ(count(tf32, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"), 32) << tf32;
  EXPECT_GE(count(tf32, "cvt.rna.tf32.f32"), 1) << tf32;
  std::string x3 = build(mma_kernel(64, 64, 32, "f32", "f32", "tf32x3"));
  EXPECT_EQ(count(x3, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"), 3 * 32) << x3;
  EXPECT_GT(count(x3, "cvt.rna.tf32.f32"), count(tf32, "cvt.rna.tf32.f32")) << x3;  // the small parts too
  EXPECT_GE(count(x3, "sub.rn.f32"), 1) << x3;  // small = x - big
  std::string ieee = build(mma_kernel(64, 64, 32, "f32", "f32", "ieee"));
  EXPECT_EQ(count(ieee, "mma.sync"), 0) << ieee;
  EXPECT_GE(count(ieee, "fma.rn.f32"), 32) << ieee;
}

TEST(NvptxMma, Int8UsesM16n8k32) {
  std::string ptx = build(mma_kernel(64, 64, 64, "i8", "i32", "ieee"));
  // 2x2 warps of 32x32: 2 m-tiles x 4 n-tiles x 2 k-steps of 32.
  EXPECT_EQ(count(ptx, "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"), 16) << ptx;
  EXPECT_EQ(count(ptx, ".trans"), 0) << ptx;  // B staged K-contiguous (no 8-bit transpose in ldmatrix)
}

// 128x128x32 f16 tiles, 4 and 8 warps: no local memory (build checks ld.local;
// ptxas -v is run by the pytest test as well).
TEST(NvptxMma, LargeTilesDoNotSpill) {
  for (int w : {4, 8}) {
    SCOPED_TRACE(w);
    std::string ptx = build(mma_kernel(128, 128, 32, "f16", "f32", "ieee", false, w), w);
    EXPECT_EQ(count(ptx, "st.local"), 0) << ptx;
  }
}

// Beyond 48 KB: 128x256 + 256x128 f16 = 128 KB of staging in dynamic shared memory.
TEST(NvptxMma, DynamicSharedMemoryBeyond48KB) {
  std::string shared;
  std::string ptx;
  tessera::CompileResult r = tessera_test::compile_gpu(mma_kernel(128, 128, 256, "f16", "f32", "ieee"), "cuda:90a");
  EXPECT_EQ(r.metadata.at("shared"), std::to_string(2 * 128 * 256 * 2));
  EXPECT_NE(r.binary.find(".extern .shared .align 1024 .b8 tessera_dyn_smem[]"), std::string::npos) << r.binary;
  if (tessera_test::have_ptxas()) EXPECT_EQ(tessera_test::ptxas(r.binary, "sm_90a"), "");
  // sm_80 allows 163 KB, sm_90 227 KB: 256x256 f16 operands (256 KB) fit neither.
  try {
    tessera_test::compile_gpu(mma_kernel(256, 256, 256, "f16", "f32", "ieee"), "cuda:90a");
    FAIL() << "expected a CompileError";
  } catch (const tessera::CompileError& e) {
    EXPECT_TRUE(e.user_error);
    EXPECT_NE(std::string(e.what()).find("at most 227 KB"), std::string::npos) << e.what();
  }
}

// Attention's P.V: P = exp(Q.K^T) cast to f16 feeds the second dot's A operand
// from registers (no shared-memory round trip for A): one staging buffer (B) and
// the Q.K^T result's registers reused as A fragments.
TEST(NvptxMma, ChainedDotTakesAFromRegisters) {
  std::string ir = "kernel @attn(%q: ptr<f16> {divisibility = 16}, %k: ptr<f16> {divisibility = 16}, %v: ptr<f16> "
                   "{divisibility = 16}, %o: ptr<f32> {divisibility = 16}) attributes {file = \"/t/attn.py\", "
                   "num_warps = 4} {\n" +
                   ptr_tile("pq", "q", 128, 64, "f16") + ptr_tile("pk", "k", 64, 64, "f16") +
                   ptr_tile("pv", "v", 64, 64, "f16") + ptr_tile("po", "o", 128, 64, "f32") + R"(  %qt = load %pq : tile<128x64xf16>
  %kt = load %pk : tile<64x64xf16>
  %ktt = permute %kt {order = [1, 0]} : tile<64x64xf16>
  %vt = load %pv : tile<64x64xf16>
  %z = const {value = 0.0} : tile<128x64xf32>
  %s = dot %qt, %ktt, %z {input_precision = "ieee"} : tile<128x64xf32>
  %e = exp %s : tile<128x64xf32>
  %p = cast %e : tile<128x64xf16>
  %acc = dot %p, %vt, %z {input_precision = "ieee"} : tile<128x64xf32>
  store %po, %acc
  return
}
)";
  std::string ptx = build(ir);
  EXPECT_EQ(count(ptx, "mma.sync.aligned.m16n8k16"), 2 * 2 * 8 * 4) << ptx;  // per warp 2 m-tiles x 8 n-tiles x 4 k
  // A of the first dot and both B operands come from ldmatrix; P does not.
  EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.shared.b16"), 2 * 4 + 4 * 4) << ptx;
  EXPECT_EQ(count(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"), 4 * 4) << ptx;
  // Each P element of the warp's 32x64 once, two per cvt.rn.f16x2.f32 (pair_half_conversions_nvptx.cpp:
  // the two f16 of one A-operand register).
  EXPECT_EQ(count(ptx, "cvt.rn.f16x2.f32"), 32 * 64 / 32 / 2) << ptx;
  EXPECT_EQ(count(ptx, "cvt.rn.f16.f32"), 0) << ptx;
}

// A K loop whose operands come from carried pointer tiles advanced each iteration:
// with num_stages S the loads become a ring of S shared-memory stages filled by
// cp.async (16 bytes each), S-1 stages issued before the loop, one per iteration,
// each iteration waiting for all but S-2 groups; no operand passes through registers.
std::string pipelined_kernel(int num_stages) {
  return "kernel @pipe(%a: ptr<f16> {divisibility = 16}, %b: ptr<f16> {divisibility = 16}, %c: ptr<f32> "
         "{divisibility = 16}, %n: i32) attributes {file = \"/t/pipe.py\", num_warps = 4, num_stages = " +
         std::to_string(num_stages) + "} {\n" + ptr_tile("pa", "a", 64, 32, "f16") + ptr_tile("pb", "b", 32, 64, "f16") +
         ptr_tile("pc", "c", 64, 64, "f32") + R"(  %z = const {value = 0.0} : tile<64x64xf32>
  %lb = const {value = 0} : i32
  %st = const {value = 1} : i32
  %da = const {value = 32} : tile<64x32xi32>
  %db = const {value = 2048} : tile<32x64xi32>
  %acc, %ea, %eb = for %lb, %n, %st, %z, %pa, %pb : tile<64x64xf32>, tile<64x32xptr<f16>>, tile<32x64xptr<f16>> {
  ^(%i: i32, %c0: tile<64x64xf32>, %qa: tile<64x32xptr<f16>>, %qb: tile<32x64xptr<f16>>):
    %x = load %qa : tile<64x32xf16>
    %y = load %qb : tile<32x64xf16>
    %d = dot %x, %y, %c0 {input_precision = "ieee"} : tile<64x64xf32>
    %na = addptr %qa, %da : tile<64x32xptr<f16>>
    %nb = addptr %qb, %db : tile<32x64xptr<f16>>
    yield %d, %na, %nb
  }
  store %pc, %acc
  return
}
)";
}

TEST(NvptxPipeline, CpAsyncRingWithWaitGroupStagesMinusTwo) {
  for (int s : {2, 3, 4}) {
    SCOPED_TRACE(s);
    std::string shared;
    std::string ptx90 = build(pipelined_kernel(s), 4, &shared);
    EXPECT_EQ(shared, std::to_string(s * 8192));
    std::string ptx80 = tessera_test::compile_gpu(pipelined_kernel(s), "cuda:80").binary;
    // sm_80: mma.sync reads stage j while stages j+1 .. j+S-1 are in flight (S-1 ahead).
    // sm_90a: one warpgroup (M = 64 = 16 x 4 warps) runs wgmma m64n64k16 from the stages; with
    // S >= 4 it keeps one wgmma group in flight (wait_group 1), so the ring runs S-2 ahead (the
    // stage a copy overwrites was read two iterations ago, by a retired group).
    for (bool wg : {false, true}) {
      SCOPED_TRACE(wg ? "sm_90a" : "sm_80");
      const std::string& ptx = wg ? ptx90 : ptx80;
      const bool in_flight = wg && s >= 4;
      const int ahead = in_flight ? s - 2 : s - 1;
      // Per issue: A 64x32 + B 32x64 f16 = 8 KB = 512 copies of 16 bytes over 128 threads; the
      // prologue issues `ahead` stages (unrolled), the loop body one.
      EXPECT_EQ(count(ptx, "cp.async.cg.shared.global"), 4 * (ahead + 1)) << ptx;
      EXPECT_EQ(count(ptx, "cp.async.commit_group;"), ahead + 1) << ptx;
      // In the body, and "wait_group 0" once more where the loop exits (drains the empty groups).
      EXPECT_EQ(count(ptx, "cp.async.wait_group " + std::to_string(ahead - 1) + ";"), ahead == 1 ? 2 : 1) << ptx;
      EXPECT_EQ(count(ptx, "cp.async.wait_group 0;"), ahead == 1 ? 2 : 1) << ptx;
      EXPECT_EQ(count(ptx, "ld.global"), 0) << ptx;  // operands never pass through registers
      EXPECT_EQ(count(ptx, "st.shared"), 0) << ptx;
      if (wg) {
        EXPECT_EQ(count(ptx, "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"), 2) << ptx;
        EXPECT_EQ(count(ptx, "fence.proxy.async.shared::cta;"), 1) << ptx;
        EXPECT_EQ(count(ptx, "wgmma.wait_group.sync.aligned 1;"), in_flight ? 1 : 0) << ptx;
        EXPECT_EQ(count(ptx, "wgmma.wait_group.sync.aligned 0;"), 1) << ptx;  // in the body, or after the loop
        EXPECT_EQ(count(ptx, "mma.sync"), 0) << ptx;
      } else {
        EXPECT_EQ(count(ptx, "mma.sync.aligned.m16n8k16"), 2 * 4 * 2) << ptx;
        EXPECT_EQ(count(ptx, "wgmma"), 0) << ptx;
      }
      // The body issues the next stage before its tensor-core work, after the wait and barrier.
      size_t wait = ptx.find("cp.async.wait_group " + std::to_string(ahead - 1) + ";");
      size_t bar = ptx.find("bar.sync", wait);
      size_t cp = ptx.find("cp.async.cg", bar);
      size_t mma = ptx.find(wg ? "wgmma.mma_async" : "ldmatrix", bar);
      EXPECT_LT(bar, cp);
      EXPECT_LT(cp, mma);
    }
  }
}

TEST(NvptxPipeline, NumStagesOneKeepsTheRegisterPrefetch) {
  std::string ptx = build(pipelined_kernel(1));
  EXPECT_EQ(count(ptx, "cp.async"), 0) << ptx;
  EXPECT_GE(count(ptx, "ld.global"), 1) << ptx;
}

}  // namespace
