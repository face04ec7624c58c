// The CPU runtime's thread pool: runs the programs of a grid over all cores.
#pragma once

#include <cstdint>
#include <functional>

namespace tessera::runtime {

// A fixed set of worker threads (one per CPU this process may run on, or
// $TESSERA_NUM_THREADS) with large stacks (kernels keep tiles in stack buffers).
// parallel_for splits [0, n) into contiguous chunks; the calling thread works
// too. An exception thrown by `body` in any thread is rethrown in the caller
// after all chunks end.
// Calls from several threads are serialized; a nested call runs inline. So does
// every call in a child of fork(), where the workers no longer exist.
// Only workers get kWorkerStackBytes: chunks the caller runs use the caller's own
// stack (8 MB on a default Linux main thread).
class ThreadPool {
 public:
  static ThreadPool& global();
  int num_threads() const;  // including the caller
  // Runs body over [0, n) in chunks of at least min_chunk indices (the last may be
  // shorter). n <= min_chunk runs body(0, n) inline, with no synchronization.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& body,
                    int64_t min_chunk = 1);

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

 private:
  explicit ThreadPool(int threads);
  struct Impl;
  Impl* impl_;
};

// Stack size given to each worker thread, in bytes.
constexpr int64_t kWorkerStackBytes = 64ll << 20;

}  // namespace tessera::runtime
