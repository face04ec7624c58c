// NVPTX: a warp-specialized loop's tile store written by the TMA (tma_store_nvptx.cpp):
// the store's tensor map beside the ring's, the consumers' chunks through swizzled shared
// memory with one thread issuing bulk copies, and the stores it leaves alone (rows not
// 16-byte aligned, no bounds mask, an unspecialized loop, TMA mode 4).
#include <gtest/gtest.h>

#include <string>

#include "ptx_test_util.h"

namespace {

using tessera_test::count;
using tessera_test::subst;

// C (f16, M x N row-major) = A (M x K) @ B (N x K)^T over a warp-specialized K loop of
// 128x256x64 tiles fed by TMA rings; the store after the loop (what the frontend emits for
// tessera.kernel mm_ws: rm/rn tiles, masks (rm < M) & (rn < N)).
const char* kKernel = R"(kernel @mm_ws(%A: ptr<f16> {divisibility = 16}, %B: ptr<f16> {divisibility = 16}, %C: ptr<f16> {divisibility = 16}, %M: i32, %N: i32$NDIV, %K: i32 {divisibility = 16}, %s_am: i32 {divisibility = 16}, %s_bn: i32 {divisibility = 16}) attributes {file = "/t/mm_ws.py", num_stages = $STAGES, num_warps = 8$TMA} {
  %0 = program_id {axis = 0} : i32
  %1 = const {value = 128} : i32
  %2 = mul %0, %1 : i32
  %3 = arange {end = 128, start = 0} : tile<128xi32>
  %4 = splat %2 : tile<128xi32>
  %5 = add %4, %3 : tile<128xi32>
  %6 = program_id {axis = 1} : i32
  %7 = const {value = 256} : i32
  %8 = mul %6, %7 : i32
  %9 = arange {end = 256, start = 0} : tile<256xi32>
  %10 = splat %8 : tile<256xi32>
  %11 = add %10, %9 : tile<256xi32>
  %12 = arange {end = 64, start = 0} : tile<64xi32>
  %13 = const {value = 0.0} : tile<128x256xf32>
  %14 = const {value = 0} : i32
  %15 = const {value = 64} : i32
  %16 = expand_dims %5 {axis = 1} : tile<128x1xi32>
  %17 = splat %s_am : tile<128x1xi32>
  %18 = mul %16, %17 : tile<128x1xi32>
  %19 = splat %A : tile<128x1xptr<f16>>
  %20 = addptr %19, %18 : tile<128x1xptr<f16>>
  %21 = broadcast %20 : tile<128x64xptr<f16>>
  %22 = splat %M : tile<128x1xi32>
  %23 = cmp %16, %22 {pred = "lt"} : tile<128x1xi1>
  %24 = splat %K : tile<1x64xi32>
  %25 = broadcast %23 : tile<128x64xi1>
  %26 = const {value = 0.0} : tile<128x64xf16>
  %27 = expand_dims %11 {axis = 1} : tile<256x1xi32>
  %28 = splat %s_bn : tile<256x1xi32>
  %29 = mul %27, %28 : tile<256x1xi32>
  %30 = splat %B : tile<256x1xptr<f16>>
  %31 = addptr %30, %29 : tile<256x1xptr<f16>>
  %32 = broadcast %31 : tile<256x64xptr<f16>>
  %33 = splat %N : tile<256x1xi32>
  %34 = cmp %27, %33 {pred = "lt"} : tile<256x1xi1>
  %35 = broadcast %34 : tile<256x64xi1>
  %36 = const {value = 0.0} : tile<256x64xf16>
  %37 = for %14, %K, %15, %13 $WS : tile<128x256xf32> {
    ^(%38: i32, %39: tile<128x256xf32>):
    %40 = splat %38 : tile<64xi32>
    %41 = add %40, %12 : tile<64xi32>
    %42 = expand_dims %41 {axis = 0} : tile<1x64xi32>
    %43 = broadcast %42 : tile<128x64xi32>
    %44 = addptr %21, %43 : tile<128x64xptr<f16>>
    %45 = cmp %42, %24 {pred = "lt"} : tile<1x64xi1>
    %46 = broadcast %45 : tile<128x64xi1>
    %47 = and %25, %46 : tile<128x64xi1>
    %48 = load %44, %47, %26 : tile<128x64xf16>
    %49 = broadcast %42 : tile<256x64xi32>
    %50 = addptr %32, %49 : tile<256x64xptr<f16>>
    %51 = broadcast %45 : tile<256x64xi1>
    %52 = and %35, %51 : tile<256x64xi1>
    %53 = load %50, %52, %36 : tile<256x64xf16>
    %54 = permute %53 {order = [1, 0]} : tile<64x256xf16>
    %55 = dot %48, %54, %39 {input_precision = "ieee"} : tile<128x256xf32>
    yield %55
  }
  %56 = splat %N : tile<128x1xi32>
  %57 = mul %16, %56 : tile<128x1xi32>
  %58 = splat %C : tile<128x1xptr<f16>>
  %59 = addptr %58, %57 : tile<128x1xptr<f16>>
  %60 = expand_dims %11 {axis = 0} : tile<1x256xi32>
  %61 = broadcast %59 : tile<128x256xptr<f16>>
  %62 = broadcast %60 : tile<128x256xi32>
  %63 = addptr %61, %62 : tile<128x256xptr<f16>>
  %64 = cast %37 : tile<128x256xf16>
  %65 = splat %N : tile<1x256xi32>
  %66 = cmp %60, %65 {pred = "lt"} : tile<1x256xi1>
  %67 = broadcast %23 : tile<128x256xi1>
  %68 = broadcast %66 : tile<128x256xi1>
  %69 = and %67, %68 : tile<128x256xi1>
  $STORE
  return
}
)";

struct Options {
  int stages = 4;
  std::string n_divisibility = " {divisibility = 16}";  // N: C's row stride and column bound
  bool specialize = true;
  std::string store = "store %63, %64, %69";
  std::string tma;  // the kernel's tma attribute ("" the default)
};

tessera::CompileResult build(const Options& o) {
  std::string ir = subst(kKernel, {{"$STAGES", std::to_string(o.stages)},
                                   {"$TMA", o.tma.empty() ? "" : ", tma = " + o.tma},
                                   {"$NDIV", o.n_divisibility},
                                   {"$WS", o.specialize ? "{warp_specialize = 1}" : ""},
                                   {"$STORE", o.store}});
  tessera::CompileResult r = tessera_test::compile_gpu(ir, "cuda:90a", 8);
  if (tessera_test::have_ptxas()) {
    EXPECT_EQ(tessera_test::ptxas(r.binary, "sm_90a"), "") << r.binary;
  }
  return r;
}

// The ring's maps (A: base 0, box 64x128; B: base 1, box 64x256) and, where the store
// qualifies, C's: base 2, 2-byte elements, 128-byte swizzle, box 64 x 64 (128 bytes of
// columns, one consumer warpgroup's rows), dims {N (param 4), M (param 3)}, row stride N.
const std::string kRingMaps = "8|0:2:128:64:128:i5:i3:i6|1:2:128:64:256:i5:i4:i7";
const std::string kStoreMap = "|2:2:128:64:64:i4:i3:i4";

TEST(NvptxTmaStore, FourStagesTwoChunkBuffers) {
  tessera::CompileResult r = build({});
  const std::string& ptx = r.binary;
  EXPECT_EQ(r.metadata.at("tensor_maps"), kRingMaps + kStoreMap);
  // 4 column chunks of 128x64; each warpgroup (rows 0-63, 64-127) copies its half of a chunk
  // (its thread 0: one copy instruction in the code) as its own group.
  EXPECT_EQ(count(ptx, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd"), 4) << ptx;
  EXPECT_EQ(count(ptx, "cp.async.bulk.commit_group;"), 4);
  // Two 16 KB buffers beside the 192 KB ring: before chunk 0, at most one group unread; before
  // chunks 1-3 (whose buffer chunk c-1's copy read), none.
  EXPECT_EQ(count(ptx, "cp.async.bulk.wait_group.read 1;"), 1);
  EXPECT_EQ(count(ptx, "cp.async.bulk.wait_group.read 0;"), 3);
  EXPECT_EQ(std::stoi(r.metadata.at("shared")), 4 * (128 + 256) * 64 * 2 + 1024 + 2 * 128 * 128);
  // Each chunk: written by st.shared (16 runs of 2 f16 per thread), fenced for the async proxy.
  // Barriers: per warpgroup (named 2 and 3 over 128 threads) before chunk 0 and one per
  // chunk; the consumers' (1, 256 threads) only at the ring's end. No global stores.
  EXPECT_EQ(count(ptx, "st.shared.b32"), 64);
  EXPECT_EQ(count(ptx, "fence.proxy.async.shared::cta;"), 1 + 4);
  EXPECT_EQ(count(ptx, "@p barrier.sync.aligned 2, 128;"), 1 + 4);
  EXPECT_EQ(count(ptx, "@p barrier.sync.aligned 3, 128;"), 1 + 4);
  EXPECT_EQ(count(ptx, "barrier.sync \t1, 256;"), 1);
  EXPECT_EQ(count(ptx, "st.global"), 0);
  EXPECT_EQ(count(ptx, "ld.shared"), 0);
  // Every path to the return (the producer's and the consumers') waits for the copies first.
  EXPECT_EQ(count(ptx, "cp.async.bulk.wait_group 0;"), 2);
  EXPECT_LT(ptx.rfind("cp.async.bulk.tensor.2d.global.shared::cta"), ptx.rfind("cp.async.bulk.wait_group 0;"));
}

TEST(NvptxTmaStore, ThreeStagesHoldTheWholeTile) {
  Options three;
  three.stages = 3;
  tessera::CompileResult r = build(three);
  EXPECT_EQ(r.metadata.at("tensor_maps"), kRingMaps + kStoreMap);
  // Four buffers: no chunk waits for an earlier one of its own tile (at most 3, then 2 unread).
  EXPECT_EQ(count(r.binary, "cp.async.bulk.wait_group.read 3;"), 1);
  EXPECT_EQ(count(r.binary, "cp.async.bulk.wait_group.read 2;"), 3);
  EXPECT_EQ(std::stoi(r.metadata.at("shared")), 3 * (128 + 256) * 64 * 2 + 1024 + 4 * 128 * 128);
}

TEST(NvptxTmaStore, OneWarpgroupStoresWholeChunks) {
  // 4 consumer warps (one warpgroup, a 64x256 tile): one 64-row box per chunk.
  std::string ir = subst(kKernel, {{"$STAGES", "4"}, {"$TMA", ""}, {"$NDIV", " {divisibility = 16}"},
                                   {"$WS", "{warp_specialize = 1}"}, {"$STORE", "store %63, %64, %69"},
                                   {"num_warps = 8", "num_warps = 4"}, {"128", "64"}});
  tessera::CompileResult r = tessera_test::compile_gpu(ir, "cuda:90a", 4);
  if (tessera_test::have_ptxas()) {
    EXPECT_EQ(tessera_test::ptxas(r.binary, "sm_90a"), "") << r.binary;
  }
  EXPECT_NE(r.metadata.at("tensor_maps").find("|2:2:128:64:64:i4:i3:i4"), std::string::npos)
      << r.metadata.at("tensor_maps");
  EXPECT_EQ(count(r.binary, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd"), 4);
  EXPECT_EQ(count(r.binary, "barrier.sync \t1, 128;"), 1 + 4 + 1);
}

TEST(NvptxTmaStore, StoresItLeavesAlone) {
  struct Case {
    const char* what;
    Options o;
  };
  Options unaligned, unmasked, plain, mode4;
  unaligned.n_divisibility = "";  // N = 1030: rows 2060 bytes apart, not 16-byte aligned
  unmasked.store = "store %63, %64";  // no bounds for the map
  plain.specialize = false;
  mode4.tma = "4";  // TESSERA_TMA=4: TMA rings, stores as before
  for (const Case& c : {Case{"unaligned rows", unaligned}, Case{"no mask", unmasked}, Case{"unspecialized", plain},
                        Case{"TESSERA_TMA=4", mode4}}) {
    SCOPED_TRACE(c.what);
    tessera::CompileResult r = build(c.o);
    EXPECT_EQ(r.metadata.count("tensor_maps") ? r.metadata.at("tensor_maps").find(kStoreMap) : std::string::npos,
              std::string::npos);
    EXPECT_EQ(count(r.binary, "global.shared::cta.bulk_group"), 0);
    EXPECT_EQ(count(r.binary, "cp.async.bulk.wait_group"), 0);
    EXPECT_GT(count(r.binary, "st.global"), 0);
  }
}

}  // namespace
