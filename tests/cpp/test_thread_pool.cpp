// GoogleTests for the CPU thread pool: coverage of [0, n), chunking, exceptions,
// nesting, concurrent callers, big stacks, and the sleep/wake paths.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tessera/thread_pool.h"

namespace tessera::runtime {
namespace {

ThreadPool& pool() { return ThreadPool::global(); }

// Runs parallel_for(n) and checks each index ran exactly once, in chunks of at
// least min_chunk (all but the last one).
void expect_each_index_once(int64_t n, int64_t min_chunk = 1) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int> bad_ranges{0}, short_chunks{0};
  pool().parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        if (begin < 0 || end > n || begin >= end) {
          ++bad_ranges;
          return;
        }
        if (end - begin < min_chunk && end != n) ++short_chunks;
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
      },
      min_chunk);
  EXPECT_EQ(bad_ranges.load(), 0) << "n=" << n;
  EXPECT_EQ(short_chunks.load(), 0) << "n=" << n << " min_chunk=" << min_chunk;
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n;
}

TEST(ThreadPoolTest, HasAtLeastOneThread) { EXPECT_GE(pool().num_threads(), 1); }

TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  for (int64_t n : {0, 1, 2, 3, 5, 7, 8, 31, 64, 65, 127, 1000, 4097, 100003})
    expect_each_index_once(n);
}

TEST(ThreadPoolTest, NegativeCountRunsNothing) {
  bool ran = false;
  pool().parallel_for(-5, [&](int64_t, int64_t) { ran = true; });
  EXPECT_FALSE(ran);
}

TEST(ThreadPoolTest, HonoursMinChunk) {
  for (int64_t min_chunk : {1, 2, 3, 16, 1000})
    for (int64_t n : {1, 2, 17, 999, 1000, 1001, 5000}) expect_each_index_once(n, min_chunk);
}

TEST(ThreadPoolTest, SmallLaunchRunsInlineOnCaller) {
  const auto caller = std::this_thread::get_id();
  for (auto sizes : {std::pair<int64_t, int64_t>{1, 1}, {8, 8}, {5, 100}}) {
    // Not a structured binding: C++17 lambdas cannot capture those.
    const int64_t n = sizes.first, min_chunk = sizes.second;
    int calls = 0;
    pool().parallel_for(
        n,
        [&](int64_t begin, int64_t end) {
          ++calls;  // not atomic on purpose: TSan flags it if this is not inline
          EXPECT_EQ(std::this_thread::get_id(), caller);
          EXPECT_EQ(begin, 0);
          EXPECT_EQ(end, n);
        },
        min_chunk);
    EXPECT_EQ(calls, 1);
  }
}

// Many back-to-back tiny launches: the path kernels take, and the one most likely
// to expose a race between a closing job and a late worker.
TEST(ThreadPoolTest, ManyTinyLaunches) {
  std::atomic<int64_t> total{0};
  for (int launch = 0; launch < 20000; ++launch)
    pool().parallel_for(2 + launch % 5, [&](int64_t begin, int64_t end) { total += end - begin; });
  int64_t expected = 0;
  for (int launch = 0; launch < 20000; ++launch) expected += 2 + launch % 5;
  EXPECT_EQ(total.load(), expected);
}

// Pauses longer than the workers' spin make them sleep, so launches also go
// through the futex wake; slow bodies make the caller sleep while it waits.
TEST(ThreadPoolTest, WorksAcrossSleepAndWake) {
  std::mt19937 random(3);
  for (int round = 0; round < 60; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 300));
    bool slow = round % 3 == 0;
    std::vector<std::atomic<int>> hits(64);
    pool().parallel_for(64, [&](int64_t begin, int64_t end) {
      if (slow) std::this_thread::sleep_for(std::chrono::microseconds(200));
      for (int64_t i = begin; i < end; ++i) ++hits[i];
    });
    for (auto& hit : hits) ASSERT_EQ(hit.load(), 1) << "round " << round;
  }
}

struct KernelFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

TEST(ThreadPoolTest, RethrowsExceptionInCaller) {
  auto throw_at_17 = [](int64_t begin, int64_t end) {
    if (begin <= 17 && 17 < end) throw KernelFault("program 17 failed");
  };
  try {
    pool().parallel_for(1000, throw_at_17);
    FAIL() << "no exception";
  } catch (const KernelFault& fault) {
    EXPECT_STREQ(fault.what(), "program 17 failed");
  }
  EXPECT_THROW(pool().parallel_for(1, [](int64_t, int64_t) { throw KernelFault("inline"); }),
               KernelFault);
  expect_each_index_once(1000);  // the pool is usable after a failure
}

// After the first failure no new chunks start: each thread runs at most the one
// chunk it took before it saw the failure.
TEST(ThreadPoolTest, StopsHandingOutChunksAfterFailure) {
  std::atomic<int> chunks_run{0};
  EXPECT_THROW(pool().parallel_for(100000,
                                   [&](int64_t, int64_t) {
                                     ++chunks_run;
                                     throw KernelFault("every chunk fails");
                                   }),
               KernelFault);
  EXPECT_LE(chunks_run.load(), pool().num_threads());
}

TEST(ThreadPoolTest, NestedCallRunsInlineInSameThread) {
  const int64_t outer = 64, inner = 37;
  std::vector<std::atomic<int>> hits(outer * inner);
  std::atomic<int> moved_threads{0};
  pool().parallel_for(outer, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const auto me = std::this_thread::get_id();
      pool().parallel_for(inner, [&](int64_t b, int64_t e) {
        if (std::this_thread::get_id() != me) ++moved_threads;
        for (int64_t j = b; j < e; ++j) ++hits[i * inner + j];
      });
    }
  });
  EXPECT_EQ(moved_threads.load(), 0);
  for (auto& hit : hits) ASSERT_EQ(hit.load(), 1);
}

TEST(ThreadPoolTest, CallsFromTwoThreadsAreSerialized) {
  std::atomic<int> running[2] = {0, 0};
  std::atomic<int> overlaps{0};
  std::atomic<int64_t> totals[2] = {0, 0};
  auto caller = [&](int me) {
    for (int call = 0; call < 300; ++call) {
      pool().parallel_for(100, [&](int64_t begin, int64_t end) {
        ++running[me];
        if (running[1 - me].load() != 0) ++overlaps;
        totals[me] += end - begin;
        --running[me];
      });
    }
  };
  std::thread first(caller, 0), second(caller, 1);
  first.join();
  second.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(totals[0].load(), 300 * 100);
  EXPECT_EQ(totals[1].load(), 300 * 100);
}

// Touches 16 MB of stack: more than a default 8 MB thread stack holds.
__attribute__((noinline)) int touch_big_stack_frame() {
  volatile char frame[16 << 20];
  for (size_t i = 0; i < sizeof(frame); i += 4096) frame[i] = static_cast<char>(i);
  return frame[4096];
}

// The caller's own stack is whatever its thread has, so only workers are held to
// kWorkerStackBytes; the caller's chunk waits until a worker has run one.
TEST(ThreadPoolTest, WorkersHaveLargeStacks) {
  if (pool().num_threads() < 2) GTEST_SKIP() << "no worker threads";
  ASSERT_GE(kWorkerStackBytes, int64_t{32} << 20);
  const auto caller = std::this_thread::get_id();
  std::atomic<int> worker_chunks{0};
  pool().parallel_for(pool().num_threads() * 4, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() != caller) {
      touch_big_stack_frame();
      ++worker_chunks;
      return;
    }
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (worker_chunks.load() == 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::yield();
  });
  EXPECT_GT(worker_chunks.load(), 0);
}

// A forked child has no workers; the pool must notice and run inline, not hang.
TEST(ThreadPoolTest, WorksInForkedChild) {
  expect_each_index_once(1000);  // make sure the workers exist before the fork
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(5);  // a hang becomes a failure
    std::vector<int> hits(1000, 0);
    ThreadPool::global().parallel_for(1000, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ++hits[i];
    });
    for (int hit : hits)
      if (hit != 1) _exit(1);
    _exit(ThreadPool::global().num_threads() == 1 ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child died (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace tessera::runtime
