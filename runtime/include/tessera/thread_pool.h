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
//
// Sharing an OpenMP team: when the process has already loaded an OpenMP runtime
// (torch does) and that runtime's workers are awake, the global pool runs the launch
// on that team (GOMP_parallel) instead of its own workers. The team's workers
// spin-wait for work after every torch op (12-15 ms with libgomp's defaults here),
// so our own workers would compete with them for the cores; the team's threads take
// the chunks at once instead. Once they sleep, launches go back to our own workers. Chunks then run on the team's stacks (OMP_STACKSIZE, by
// default the same size as the caller's). $TESSERA_CPU_THREADS=own turns this off.
class ThreadPool {
 public:
  static ThreadPool& global();
  // A pool of `threads` threads, the caller included; share_openmp_team as above.
  ThreadPool(int threads, bool share_openmp_team);
  int num_threads() const;  // including the caller
  // Runs body over [0, n) in chunks of at least min_chunk indices (the last may be
  // shorter). n <= min_chunk runs body(0, n) inline, with no synchronization.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& body,
                    int64_t min_chunk = 1);

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

 private:
  struct Impl;
  Impl* impl_;
};

// Stack size given to each worker thread, in bytes.
constexpr int64_t kWorkerStackBytes = 64ll << 20;

}  // namespace tessera::runtime
