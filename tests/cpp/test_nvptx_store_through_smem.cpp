// NVPTX: tile stores from tensor-core accumulators (2-element runs) go through shared
// memory into 16-byte global stores (store_through_smem_nvptx.cpp) when the output
// elements are 16-bit; the buffer reuses a finished K loop's ring; f32 outputs
// (8-byte runs already fill whole sectors) and small tiles store directly.
#include <gtest/gtest.h>

#include <string>

#include "ptx_test_util.h"

namespace {

using tessera_test::count;
using tessera_test::ptr_tile;

// C (f16 or f32) = A @ B over a K loop of BK-wide carried pointer tiles, num_stages 3.
std::string matmul_store_kernel(int m, int n, int k, const std::string& out_t) {
  std::string ir = "kernel @mm(%a: ptr<f16> {divisibility = 16}, %b: ptr<f16> {divisibility = 16}, %c: ptr<" + out_t +
                   "> {divisibility = 16}, %K: i32) attributes {file = \"/t/mm.py\", num_warps = 4, num_stages = 3} {\n" +
                   ptr_tile("pa", "a", m, k, "f16") + ptr_tile("pb", "b", k, n, "f16") + ptr_tile("pc", "c", m, n, out_t);
  ir += "  %z = const {value = 0.0} : tile<" + std::to_string(m) + "x" + std::to_string(n) + R"(xf32>
  %lb = const {value = 0} : i32
  %st = const {value = 1} : i32
  %da = const {value = KK} : tile<MxKxi32>
  %db = const {value = KN} : tile<KxNxi32>
  %acc, %ea, %eb = for %lb, %K, %st, %z, %pa, %pb : tile<MxNxf32>, tile<MxKxptr<f16>>, tile<KxNxptr<f16>> {
  ^(%i: i32, %c0: tile<MxNxf32>, %qa: tile<MxKxptr<f16>>, %qb: tile<KxNxptr<f16>>):
    %x = load %qa : tile<MxKxf16>
    %y = load %qb : tile<KxNxf16>
    %d = dot %x, %y, %c0 {input_precision = "ieee"} : tile<MxNxf32>
    %na = addptr %qa, %da : tile<MxKxptr<f16>>
    %nb = addptr %qb, %db : tile<KxNxptr<f16>>
    yield %d, %na, %nb
  }
)";
  if (out_t == "f32") {
    ir += "  store %pc, %acc\n";
  } else {
    ir += "  %h = cast %acc : tile<MxNx" + out_t + ">\n  store %pc, %h\n";
  }
  ir += "  return\n}\n";
  auto rep = [&](const std::string& from, const std::string& to) {
    for (size_t p = ir.find(from); p != std::string::npos; p = ir.find(from, p + to.size())) ir.replace(p, from.size(), to);
  };
  rep("KK", std::to_string(k));
  rep("KN", std::to_string(k * n));
  rep("MxKx", std::to_string(m) + "x" + std::to_string(k) + "x");
  rep("KxNx", std::to_string(k) + "x" + std::to_string(n) + "x");
  rep("MxNx", std::to_string(m) + "x" + std::to_string(n) + "x");
  return ir;
}

struct Built {
  std::string ptx;
  std::string shared;
};

Built build(const std::string& ir, const std::string& target) {
  tessera::CompileResult r = tessera_test::compile_gpu(ir, target, 4);
  if (tessera_test::have_ptxas())
    EXPECT_EQ(tessera_test::ptxas(r.binary, target == "cuda:80" ? "sm_80" : "sm_90a"), "") << r.binary;
  return {r.binary, r.metadata.at("shared")};
}

TEST(NvptxStoreThroughSmem, HalfOutputBecomes16ByteStores) {
  for (const char* out : {"f16", "bf16"}) {
    for (const char* target : {"cuda:90a", "cuda:80"}) {
      SCOPED_TRACE(std::string(out) + " " + target);
      Built b = build(matmul_store_kernel(64, 64, 32, out), target);
      // 64x64 16-bit elements over 128 threads: 32 each, 4 stores of 8 (16 bytes).
      EXPECT_EQ(count(b.ptx, "st.global.v4.b32"), 4) << b.ptx;
      EXPECT_EQ(count(b.ptx, "st.global.b32"), 0) << b.ptx;
      // The accumulator's 2-element runs into the buffer (16 per thread), read back 16 bytes at a time.
      EXPECT_EQ(count(b.ptx, "st.shared."), 16) << b.ptx;
      EXPECT_EQ(count(b.ptx, "ld.shared.v4"), 4) << b.ptx;
      // The buffer (64 x (64 + 8) x 2 = 9 KB) reuses the 3-stage ring (3 x 8 KB): no extra shared memory.
      EXPECT_EQ(b.shared, std::to_string(3 * 8192)) << b.ptx;
    }
  }
}

TEST(NvptxStoreThroughSmem, FloatOutputAndSmallTilesStoreDirectly) {
  Built f32 = build(matmul_store_kernel(64, 64, 32, "f32"), "cuda:90a");
  EXPECT_EQ(count(f32.ptx, "st.shared"), 0) << f32.ptx;
  EXPECT_EQ(count(f32.ptx, "st.global.v2.f32"), 16) << f32.ptx;  // 8-byte runs: whole sectors already
  // 16x32 f16 = 1 KB: not worth a round trip.
  Built small = build(matmul_store_kernel(16, 32, 16, "f16"), "cuda:90a");
  EXPECT_EQ(count(small.ptx, "ld.shared.v4"), 0) << small.ptx;
  EXPECT_EQ(count(small.ptx, "st.global.v4"), 0) << small.ptx;
  EXPECT_GT(count(small.ptx, "st.global.b32"), 0) << small.ptx;  // the accumulator's 4-byte runs
}

// A ring too small for the buffer (64x64x16: 3 x 4 KB < 9 KB): the buffer is allocated.
TEST(NvptxStoreThroughSmem, AllocatesWhenNoRingIsLargeEnough) {
  Built b = build(matmul_store_kernel(64, 64, 16, "f16"), "cuda:90a");
  EXPECT_EQ(count(b.ptx, "st.global.v4.b32"), 4) << b.ptx;
  EXPECT_EQ(b.shared, std::to_string(3 * 4096 + 64 * 72 * 2)) << b.ptx;
}

}  // namespace
