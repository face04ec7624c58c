// x86 lowering: software prefetch of the next program's row for kernels that
// process one long contiguous row per program (softmax, layernorm).
//
// Rows of consecutive programs are usually consecutive in memory, and the thread
// pool hands each thread a run of consecutive programs (runtime/cpu/thread_pool.cpp:
// chunks of n / (4 x threads) programs), so the row a row length past this one is
// this thread's next row. Prefetching it while this program computes lets the DRAM
// read overlap the arithmetic, instead of the hardware prefetcher retraining at
// every new 4 KB page. prefetcht1 never faults, so running past the array is harmless.
//
// Where: a row loaded again by several loop nests (see reloadable in
// tile_values.cpp) gets its prefetches only in the LAST nest that loads it. Softmax
// is max(x) | exp(x - max) + sum | divide + store: prefetching in the max nest
// issued 256 prefetches in a burst of ~500 cycles and left the exp and divide nests
// (~85% of the time) with no reads in flight; in the exp nest one prefetch per 64-byte
// chunk is spread over the longest nest. Measured on 4096x4096 fp32, one thread,
// CPU time per element: softmax 0.491 -> 0.371 ns, layernorm (sum | centred sum of
// squares | scale, x loaded by all three) 0.363 -> 0.31 ns; 2 threads, best of 40:
// softmax 5.1 -> 3.3 ms (bench/results/cpu_softmax_bound.md).
// Every nest emits its prefetches as it is lowered (the last nest is not known
// yet); drop_prefetches_outside_last_nest removes the others at the end.
//
// A row that only one nest reads (vector add, copy: load, compute, store) gets no
// prefetch: consecutive programs read consecutive blocks, one sequential stream the
// hardware prefetcher follows, and the prefetch instructions only cost issue slots
// and L2 queue entries. Vector add 2^24 fp32, BLOCK=1024 (4 KB per program), one
// thread, CPU time, best of 30, in one process: 33.7-33.8 GB/s with the next
// block prefetched, 35.5-36.2 GB/s without (copy 36.4); copy itself within 2%.
//
// Which loads: contiguous, at least 4 KB per row, and addressed through the program
// id. A row every program reads (layernorm's weight and bias) stays in cache, and a
// row length past it is unrelated memory.
#include <llvm/IR/Intrinsics.h>

#include <algorithm>

#include "codegen/x86/kernel_lowering.h"

namespace tessera::codegen::x86 {

using namespace ir;

// Elements of the load's contiguous run per program: its minor dim, or for a [G, L]
// tile whose rows follow each other in memory (cross_entropy's realigned [1024, 4]
// slices, multi_row_chunks.cpp) all G x L of them.
int64_t KernelLowering::contiguous_run(const Op& load) {
  const Type& t = load.result()->type;
  size_t r = t.shape.size();
  if (r == 2 && t.shape.back() < target_.chunk_lanes) {
    auto steps = element_steps(load.operands[0]);
    if (steps && (*steps)[1] == 1 && (*steps)[0] == t.shape[1]) return t.shape[0] * t.shape[1];
  }
  return t.shape.back();
}

bool KernelLowering::prefetches_next_row(const Op& load) {
  constexpr int64_t kMinRowBytes = 4096;
  const Type& t = load.result()->type;
  if (contiguous_run(load) * t.elem.bytes() < kMinRowBytes) return false;
  return varies_by_program(load.operands[0], k_.body(), varies_memo_);
}

void KernelLowering::prefetch_next_row(const Op& load, llvm::Value* p0, const Chunk& c) {
  // Distances of 1 and 2 rows measured the same (one thread, 4096x4096, exp nest:
  // 0.371 / 0.345 ns per element, within the machine's noise; layernorm 0.316 /
  // 0.326): one row, the least cache it holds. Into L2 (prefetcht1): prefetcht0
  // measured 0.388 against 0.371.
  const Type& t = load.result()->type;
  int64_t bytes = t.elem.bytes();
  if (c.width < 2 || !prefetches_next_row(load)) return;
  llvm::Value* ahead = b_.CreateConstGEP1_64(b_.getInt8Ty(), p0, contiguous_run(load) * bytes);
  auto& emitted = row_prefetches_[&load];
  for (int64_t off = 0; off < c.width * bytes; off += 64) {  // one prefetch per cache line
    llvm::Value* at = b_.CreateConstGEP1_64(b_.getInt8Ty(), ahead, off);
    auto* call = b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {at->getType()},
                                    {at, /*rw=*/b_.getInt32(0), /*locality: L2=*/b_.getInt32(2), /*data=*/b_.getInt32(1)});
    emitted.push_back({nest_id_, call});
  }
}

void KernelLowering::drop_prefetches_outside_last_nest() {
  for (auto& [load, calls] : row_prefetches_) {
    if (calls.empty()) continue;
    int first = calls.front().first, last = first;
    for (auto& [nest, call] : calls) first = std::min(first, nest), last = std::max(last, nest);
    // A row read by one nest only is a plain stream: keep none (see above).
    bool single_pass = first == last;
    for (auto& [nest, call] : calls) {
      if (nest == last && !single_pass) continue;
      // Its address computation is left to LLVM's dead code elimination.
      call->eraseFromParent();
    }
  }
  row_prefetches_.clear();
}

}  // namespace tessera::codegen::x86
