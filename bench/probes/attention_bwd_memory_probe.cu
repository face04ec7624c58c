// A measurement probe, not a kernel of the library (those are written in the Tessera
// language): the memory side of attention_score's backward on an sm_90 GPU, without its
// tensor-core work, to test one claim before the compiler is taught a design built on it.
//
// The claim (bench/results/attention_score_bwd_s15_l2_prefetch.md): the shipped backward
// (kernels/attention.py, _score_backward_flat_kernel) is held below a copy's speed on the
// H200 because every ds tile is looked up in the L2 twice -- by the dq program that reads
// its rows and the dk program that reads its columns -- and that a design in which each
// tile leaves the L2 once, multicast by the TMA to both programs of a cluster, would read
// at about a copy's speed.
//
// Both variants move exactly the backward's bytes (8 x 2048 x 2048 x 64 fp16: ds 67 MB,
// q and k 2 MB each in, dq and dk 2 MB each out) with the shipped grid's shape: per batch
// 8 "dq" CTAs (256 rows of ds each) and 8 "dk" CTAs (256 columns each), 128 CTAs, one per
// SM, ring of 4 ds stages of 32 KB filled by the TMA, a producer warp and a consumer warp
// that waits for each stage, touches it and releases it (no MMA). At phase p (of 8) dq
// CTA t and dk CTA u = (p - t) mod 8 both consume block (t, u) of the batch's 8 x 8
// blocks of 256 x 256, as four 256 x 64 column strips:
//   unicast: each of the two loads every strip itself (the shipped pairing: one read from
//            memory, one L2 hit);
//   multicast: a cluster of the batch's 16 CTAs; dq CTA t issues each strip once with
//            .multicast::cluster to itself and its partner (ctaMask); a dk CTA's consumer
//            releases each stage on the "empty" mbarrier of the dq CTA whose copy fills
//            the stage next (the next phase's partner), through the cluster.
// dq CTAs also load k (64 x 64 a strip), dk CTAs q (256 x 64 a phase), each locally.
//
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -std=c++17 attention_bwd_memory_probe.cu -lcuda -o probe
// (bench/probes/run_attention_bwd_memory_probe.sh). Prints kernel time per call against a
// copy kernel of the same bytes (copy_kernel), ds cycled over 4 sets so no call meets its ds in
// the L2.
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)
#define CHECK_CU(x)                                                              \
  do {                                                                           \
    CUresult r_ = (x);                                                           \
    if (r_ != CUDA_SUCCESS) {                                                    \
      const char* s_ = nullptr;                                                  \
      cuGetErrorString(r_, &s_);                                                 \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

constexpr int kSeq = 2048, kHead = 64, kRows = 256, kBlocks = kSeq / kRows;  // 8 blocks a side
constexpr int kStages = 4, kStrip = kRows * 64 * 2;                                      // 32 KB a ds strip
constexpr int kSteps = kBlocks * 4;                                                      // 4 strips a block
constexpr int kKTile = 64 * kHead * 2, kQTile = kRows * kHead * 2;                       // 8 KB, 32 KB
constexpr int kQStages = 2;
// Shared memory: ds stages, k stages (dq), q stages (dk), then the mbarriers.
constexpr int kDsOff = 0, kKOff = kStages * kStrip, kQOff = kKOff + kStages * kKTile;
constexpr int kBarOff = kQOff + kQStages * kQTile;
constexpr int kSmem = kBarOff + 128 + 1024;  // + barriers, + alignment slack

struct Maps {
  CUtensorMap ds, k, q;
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void expect_tx(uint32_t bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void arrive_local(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void arrive_remote(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}" ::"r"(bar),
      "r"(rank)
      : "memory");
}
__device__ __forceinline__ void wait_parity(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  for (long long spins = 0; !done; ++spins) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
    if (spins == (1ll << 24)) {  // a probe that hangs says where, then stops
      printf("stuck: CTA %d thread %d, barrier at %u, parity %u\n", blockIdx.x, threadIdx.x, bar, parity);
      __trap();
    }
  }
}
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::
          "r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_multicast(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar,
                                              uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
      "l"(map), "r"(x), "r"(y), "r"(bar), "h"(mask)
      : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Grid: kBatch x 16 CTAs of 64 threads (warp 0 the producer, warp 1 the consumer);
// CTA rank r < 8 is dq CTA r of batch blockIdx.x / 16, r >= 8 dk CTA r - 8. kS: ring
// stages. kDqOnly (a cut): kBatch x 8 dq CTAs alone, without k (so that 6 stages fit):
// what one kind's distinct streams read at 4, 5 or 6 stages of 32 KB. kNoKQ (a cut): no k
// or q loads, ds alone.
template <bool kMulticast, int kS = 4, bool kDqOnly = false, bool kNoKQ = false>
__global__ void __launch_bounds__(64, 1) probe(const __grid_constant__ Maps maps, __half* dq, __half* dk,
                                               float* sink) {
  extern __shared__ uint8_t raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  const uint32_t base = smem_u32(smem);
  static_assert(kS * kStrip <= (kDqOnly || kNoKQ ? kBarOff : kKOff), "the shared-memory layout");
  const uint32_t full = base + kBarOff, empty = full + 8 * kS;
  const uint32_t fullq = empty + 8 * kS, emptyq = fullq + 8 * kQStages;
  const int per_batch = kDqOnly ? 8 : 16, rank = blockIdx.x % per_batch, batch = blockIdx.x / per_batch;
  const bool is_dq = rank < 8;
  const int me = is_dq ? rank : rank - 8;
  const int row0 = batch * kSeq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kS; ++s) {
      bar_init(full + 8 * s, 1);
      // dq's stages are released by its own consumer and, multicast, by the dk CTA its next
      // copy into the stage goes to (step s + kS's partner, which held step s of another dq).
      bar_init(empty + 8 * s, is_dq && kMulticast ? 2 : 1);
    }
    for (int s = 0; s < kQStages; ++s) {
      bar_init(fullq + 8 * s, 1);
      bar_init(emptyq + 8 * s, 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    // A multicast dk CTA is not its stages' issuer: it announces each stage's bytes
    // itself, the first four here, the others as it releases the stage before.
    if (!is_dq && kMulticast)
      for (int s = 0; s < kS; ++s) expect_tx(full + 8 * s, kStrip);
  }
  if (kMulticast) cluster_sync();
  else __syncthreads();

  if (warp == 0 && lane == 0) {  // the producer
    for (int s = 0; s < kSteps; ++s) {
      const int p = s / 4, c = s % 4, slot = s % kS;
      const int partner = (p - me + kBlocks) % kBlocks;  // dq: the block's column; dk: its row
      if (is_dq || !kMulticast) {
        if (s >= kS) wait_parity(empty + 8 * slot, ((s / kS) - 1) & 1);
        const int col = is_dq ? partner * kRows + 64 * c : me * kRows + 64 * c;
        const int row = row0 + (is_dq ? me : partner) * kRows;
        expect_tx(full + 8 * slot, kStrip + (is_dq && !kDqOnly && !kNoKQ ? kKTile : 0));
        if (kMulticast)
          tma_multicast(base + kDsOff + slot * kStrip, &maps.ds, col, row, full + 8 * slot,
                        static_cast<uint16_t>((1u << me) | (1u << (8 + partner))));
        else
          tma_load(base + kDsOff + slot * kStrip, &maps.ds, col, row, full + 8 * slot);
        if (is_dq && !kDqOnly && !kNoKQ) tma_load(base + kKOff + slot * kKTile, &maps.k, 0, row0 + partner * kRows + 64 * c, full + 8 * slot);
      }
      if (!is_dq && c == 0 && !kNoKQ) {  // q rows of the block's row block, once a phase
        const int qs = p % kQStages;
        if (p >= kQStages) wait_parity(emptyq + 8 * qs, ((p / kQStages) - 1) & 1);
        expect_tx(fullq + 8 * qs, kQTile);
        tma_load(base + kQOff + qs * kQTile, &maps.q, 0, row0 + partner * kRows, fullq + 8 * qs);
      }
    }
  } else if (warp == 1) {  // the consumer: wait, touch, release
    float acc = 0.f;
    for (int s = 0; s < kSteps; ++s) {
      const int p = s / 4, c = s % 4, slot = s % kS;
      if (!is_dq && c == 0 && !kNoKQ) wait_parity(fullq + 8 * (p % kQStages), (p / kQStages) & 1);
      wait_parity(full + 8 * slot, (s / kS) & 1);
      const uint8_t* strip = smem + kDsOff + slot * kStrip;
      acc += __half2float(*reinterpret_cast<const __half*>(strip + lane * 1024));
      __syncwarp();
      if (lane == 0) {
        if (!is_dq && kMulticast) {
          // The stage's next bytes (step s + kS's) come from that step's partner: announce
          // them here, then tell that dq CTA the stage is free.
          if (s + kS < kSteps) {
            expect_tx(full + 8 * slot, kStrip);
            arrive_remote(empty + 8 * slot, ((s + kS) / 4 - me + kBlocks) % kBlocks);
          }
        } else {
          arrive_local(empty + 8 * slot);
        }
        if (!is_dq && c == 3 && !kNoKQ) arrive_local(emptyq + 8 * (p % kQStages));
      }
    }
    // The outputs: this CTA's 256 x 64 rows of dq or dk, 16-byte stores.
    __half* out = (is_dq ? dq : dk) + (static_cast<size_t>(row0) + me * kRows) * kHead;
    const uint4 v = make_uint4(__float_as_uint(acc), 0, 0, 0);
    for (int i = lane; i < kRows * kHead / 8; i += 32) reinterpret_cast<uint4*>(out)[i] = v;
    if (acc == 12345.f) sink[blockIdx.x] = acc;
  }
  __syncwarp();
  if (kMulticast) cluster_sync();  // no CTA leaves while a partner may still arrive on its barriers
}

// The copy the ratios divide by: 16-byte loads and stores over a grid of 8 CTAs of 512 threads
// an SM (torch's copy_ runs about as fast: 19.2 us for the benchmark's 75.5 MB on an H200, where a
// cudaMemcpy takes 20.7; the cudaMemcpy is printed too).
__global__ void __launch_bounds__(512) copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

static CUtensorMap make_map(const void* base, uint64_t cols, uint64_t rows, uint32_t box_cols, uint32_t box_rows) {
  CUtensorMap m;
  cuuint64_t dims[2] = {cols, rows};
  cuuint64_t strides[1] = {cols * 2};
  cuuint32_t box[2] = {box_cols, box_rows};
  cuuint32_t elem[2] = {1, 1};
  CHECK_CU(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<void*>(base), dims, strides, box, elem,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return m;
}

template <typename F>
static float best_us(F&& call, int calls) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  float best = 1e30f;
  for (int round = 0; round < 3; ++round) {
    call(-1);  // warm-up
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < calls; ++i) call(i);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, ms * 1000.f / calls);
  }
  CHECK(cudaGetLastError());
  return best;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  const char* only = argc > 1 ? argv[1] : "unicast";  // the variant: unicast, multicast or dq
  const int kBatch = argc > 2 ? std::atoi(argv[2]) : 8;  // heads (a cluster of 16 CTAs each)
  constexpr int kSets = 4;
  const size_t ds_elems = size_t(kBatch) * kSeq * kSeq, qk_elems = size_t(kBatch) * kSeq * kHead;
  const double bytes = 2.0 * (ds_elems + 4 * qk_elems);  // ds, q, k in; dq, dk out
  std::vector<__half*> ds(kSets);
  for (auto& p : ds) {
    CHECK(cudaMalloc(&p, ds_elems * 2));
    CHECK(cudaMemset(p, 0x3c, ds_elems * 2));
  }
  __half *q, *k, *dq, *dk;
  float* sink;
  CHECK(cudaMalloc(&q, qk_elems * 2));
  CHECK(cudaMalloc(&k, qk_elems * 2));
  CHECK(cudaMalloc(&dq, qk_elems * 2));
  CHECK(cudaMalloc(&dk, qk_elems * 2));
  CHECK(cudaMalloc(&sink, 4096));
  CHECK(cudaMemset(q, 0, qk_elems * 2));
  CHECK(cudaMemset(k, 0, qk_elems * 2));
  std::vector<Maps> maps(kSets);
  for (int i = 0; i < kSets; ++i)
    maps[i] = {make_map(ds[i], kSeq, uint64_t(kBatch) * kSeq, 64, kRows), make_map(k, kHead, uint64_t(kBatch) * kSeq, 64, 64),
               make_map(q, kHead, uint64_t(kBatch) * kSeq, 64, kRows)};

  // The copy of the same bytes (read half, write half), over 4 buffer pairs as the kernels' ds.
  std::vector<void*> src(kSets), dst(kSets);
  for (int i = 0; i < kSets; ++i) {
    CHECK(cudaMalloc(&src[i], static_cast<size_t>(bytes / 2) + 256));
    CHECK(cudaMalloc(&dst[i], static_cast<size_t>(bytes / 2) + 256));
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto copy_us = [&](double nbytes) {
    const size_t half = static_cast<size_t>(nbytes / 2) / 256 * 256;
    const float memcpy_us = best_us([&](int i) {
      CHECK(cudaMemcpyAsync(dst[(i + kSets) % kSets], src[(i + kSets) % kSets], half, cudaMemcpyDeviceToDevice));
    }, 20);
    const float us = best_us([&](int i) {
      copy_kernel<<<sms * 8, 512>>>(static_cast<const uint4*>(src[(i + kSets) % kSets]),
                                    static_cast<uint4*>(dst[(i + kSets) % kSets]), half / 16);
    }, 20);
    std::printf("| copy kernel (%.1f MB; cudaMemcpy %.1f us) | %.1f | 1.000 |\n", nbytes / 1e6, memcpy_us, us);
    return us;
  };

  // ctas: a batch's CTAs (16 with dk, 8 dq alone); nbytes: the variant's bytes.
  auto run = [&](auto kernel, bool cluster, const char* name, int ctas, double nbytes) {
    const float copy = copy_us(nbytes);
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    if (cluster) CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(kBatch * ctas);
    cfg.blockDim = dim3(64);
    cfg.dynamicSmemBytes = kSmem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster ? 16 : 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cluster) {
      int clusters = 0;
      CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
      std::printf("| (%s: %d clusters of 16 resident at once, %d needed) | | |\n", name, clusters, kBatch);
    }
    const float us = best_us([&](int i) {
      CHECK(cudaLaunchKernelEx(&cfg, kernel, maps[(i + kSets) % kSets], dq, dk, sink));
    }, 20);
    std::printf("| %s, batch %d (%d CTAs) | %.1f | %.3f |\n", name, kBatch, kBatch * ctas, us, copy / us);
  };
  const double dq_only = 2.0 * (ds_elems + qk_elems);  // ds in, dq out
  if (!std::strcmp(only, "unicast")) run(probe<false>, false, "unicast pairs (the shipped pairing, no MMA)", 16, bytes);
  if (!std::strcmp(only, "multicast")) run(probe<true>, true, "multicast pairs, cluster of 16 (no MMA)", 16, bytes);
  const double ds_only = 2.0 * (ds_elems + 2 * qk_elems);  // ds in, dq and dk out
  if (!std::strcmp(only, "unicast-ds"))
    run(probe<false, 4, false, true>, false, "unicast pairs, ds only (no k or q, no MMA)", 16, ds_only);
  if (!std::strcmp(only, "multicast-ds")) {
    run(probe<true, 4, false, true>, true, "multicast pairs, ds only (no k or q, no MMA)", 16, ds_only);
    run(probe<true, 5, false, true>, true, "multicast pairs, ds only, 5 stages", 16, ds_only);
    run(probe<true, 6, false, true>, true, "multicast pairs, ds only, 6 stages", 16, ds_only);
  }
  if (!std::strcmp(only, "unicast-ds6"))
    run(probe<false, 6, false, true>, false, "unicast pairs, ds only, 6 stages", 16, ds_only);
  if (!std::strcmp(only, "dq")) {
    run(probe<false, 4, true>, false, "dq CTAs alone, 4 stages (no k, no MMA)", 8, dq_only);
    run(probe<false, 5, true>, false, "dq CTAs alone, 5 stages (no k, no MMA)", 8, dq_only);
    run(probe<false, 6, true>, false, "dq CTAs alone, 6 stages (no k, no MMA)", 8, dq_only);
  }
  return 0;
}
