// GoogleTests for the CPU thread pool: coverage of [0, n), chunking, exceptions,
// nesting, concurrent callers, big stacks, the sleep/wake paths, and sharing a
// loaded OpenMP runtime's team.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>

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
// Gaps below and above the workers' spin-before-sleep window (500 us), and jobs
// whose first chunk outlasts the others (workers out of chunks keep spinning until
// the job closes, then start their window).
TEST(ThreadPoolTest, WorksAcrossSleepAndWake) {
  std::mt19937 random(3);
  for (int round = 0; round < 60; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 1500));
    bool slow = round % 3 == 0, first_chunk_slow = round % 3 == 1;
    std::vector<std::atomic<int>> hits(64);
    pool().parallel_for(64, [&](int64_t begin, int64_t end) {
      if (slow || (first_chunk_slow && begin == 0)) std::this_thread::sleep_for(std::chrono::microseconds(700));
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

// ---------------------------------------------------------------- sharing an OpenMP team
//
// Loading an OpenMP runtime changes the whole process (the global pool starts using
// it, and it can never be unloaded once its threads run), so these tests run in a
// child process: SharesALoadedOpenMPTeam re-runs this binary with only the
// ThreadPoolInOpenMPProcess tests and TESSERA_TEST_OPENMP_CHILD set.

extern "C" char** environ;

struct OpenMP {
  void* handle = nullptr;
  int (*level)() = nullptr;        // omp_get_level: 1 inside a parallel region
  int (*thread_num)() = nullptr;   // omp_get_thread_num: 0 on the master
};

OpenMP load_openmp() {
  OpenMP omp;
  omp.handle = dlopen("libgomp.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!omp.handle) return omp;
  omp.level = reinterpret_cast<int (*)()>(dlsym(omp.handle, "omp_get_level"));
  omp.thread_num = reinterpret_cast<int (*)()>(dlsym(omp.handle, "omp_get_thread_num"));
  return omp;
}

bool in_openmp_child() { return std::getenv("TESSERA_TEST_OPENMP_CHILD") != nullptr; }

TEST(ThreadPoolTest, SharesALoadedOpenMPTeam) {
  if (in_openmp_child()) GTEST_SKIP() << "the parent's test";
  std::string filter = "--gtest_filter=ThreadPoolInOpenMPProcess.*";
  std::string self = "/proc/self/exe";
  char* child_argv[] = {self.data(), filter.data(), nullptr};
  std::vector<std::string> env_strings = {"TESSERA_TEST_OPENMP_CHILD=1"};
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  std::vector<char*> child_env;
  for (auto& e : env_strings) child_env.push_back(e.data());
  child_env.push_back(nullptr);
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, self.c_str(), nullptr, nullptr, child_argv, child_env.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child died (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a ThreadPoolInOpenMPProcess test failed (its output is above)";
}

// Every chunk runs inside an OpenMP parallel region, on the team's threads (the
// master waits until another thread of the team has run one), each index once.
TEST(ThreadPoolInOpenMPProcess, RunsChunksOnTheTeam) {
  if (!in_openmp_child()) GTEST_SKIP() << "runs in SharesALoadedOpenMPTeam's child";
  OpenMP omp = load_openmp();
  if (!omp.handle) GTEST_SKIP() << "no libgomp.so.1 on this machine";
  ASSERT_TRUE(omp.level && omp.thread_num) << dlerror();
  ThreadPool team_pool(2, /*share_openmp_team=*/true);
  const int64_t n = 1000;
  std::vector<std::atomic<int>> hits(n);
  std::atomic<int> outside_region{0}, non_master_chunks{0};
  team_pool.parallel_for(n, [&](int64_t begin, int64_t end) {
    if (omp.level() != 1) ++outside_region;
    if (omp.thread_num() != 0) {
      ++non_master_chunks;
    } else {
      auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      while (non_master_chunks.load() == 0 && std::chrono::steady_clock::now() < give_up)
        std::this_thread::yield();
    }
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  EXPECT_EQ(outside_region.load(), 0);
  EXPECT_GT(non_master_chunks.load(), 0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
}

TEST(ThreadPoolInOpenMPProcess, RethrowsAndNestsInline) {
  if (!in_openmp_child()) GTEST_SKIP() << "runs in SharesALoadedOpenMPTeam's child";
  OpenMP omp = load_openmp();
  if (!omp.handle) GTEST_SKIP() << "no libgomp.so.1 on this machine";
  ASSERT_TRUE(omp.level) << dlerror();
  ThreadPool team_pool(2, /*share_openmp_team=*/true);
  EXPECT_THROW(team_pool.parallel_for(100,
                                      [](int64_t begin, int64_t) {
                                        if (begin == 0) throw std::runtime_error("chunk 0 failed");
                                      }),
               std::runtime_error);
  // The pool still works after a failed launch, and a launch from inside a chunk
  // runs inline on that thread (no second region).
  std::atomic<int> inner_elsewhere{0}, inner_indices{0};
  team_pool.parallel_for(8, [&](int64_t, int64_t) {
    auto outer = std::this_thread::get_id();
    int outer_level = omp.level();
    team_pool.parallel_for(10, [&](int64_t begin, int64_t end) {
      if (std::this_thread::get_id() != outer || omp.level() != outer_level) ++inner_elsewhere;
      inner_indices += static_cast<int>(end - begin);
    });
  });
  EXPECT_EQ(inner_elsewhere.load(), 0);
  EXPECT_EQ(inner_indices.load(), 8 * 10);
}

// The team is used only while its workers spin (right after an OpenMP region, e.g.
// a torch op); once they sleep, launches go back to our own workers.
TEST(ThreadPoolInOpenMPProcess, UsesTheTeamOnlyWhileItsWorkersSpin) {
  if (!in_openmp_child()) GTEST_SKIP() << "runs in SharesALoadedOpenMPTeam's child";
  OpenMP omp = load_openmp();
  if (!omp.handle) GTEST_SKIP() << "no libgomp.so.1 on this machine";
  auto omp_parallel = reinterpret_cast<void (*)(void (*)(void*), void*, unsigned, unsigned)>(
      dlsym(omp.handle, "GOMP_parallel"));
  ASSERT_TRUE(omp.level && omp_parallel) << dlerror();
  ThreadPool team_pool(2, /*share_openmp_team=*/true);
  auto level_of_a_launch = [&] {
    std::atomic<int> max_level{0};
    team_pool.parallel_for(16, [&](int64_t, int64_t) {
      int level = omp.level();
      for (int seen = max_level.load(); level > seen && !max_level.compare_exchange_weak(seen, level);) {
      }
    });
    return max_level.load();
  };
  EXPECT_EQ(level_of_a_launch(), 1);  // the first launch meets the team's threads
  // libgomp's workers sleep after GOMP_SPINCOUNT pauses (about 10 ms here, longer
  // under load): then a launch runs on our workers.
  bool ran_on_own_workers = false;
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!ran_on_own_workers && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ran_on_own_workers = level_of_a_launch() == 0;
  }
  EXPECT_TRUE(ran_on_own_workers);
  // An OpenMP region of someone else (a torch op) leaves the workers spinning: the
  // next launch joins them. (Tried a few times: a loaded machine can leave the one
  // check between the two calls unlucky; it failed once in about 30 runs.)
  bool joined_the_team = false;
  for (int attempt = 0; attempt < 10 && !joined_the_team; ++attempt) {
    omp_parallel([](void*) {}, nullptr, 2, 0);
    joined_the_team = level_of_a_launch() == 1;
  }
  EXPECT_TRUE(joined_the_team);
}

// share_openmp_team=false (TESSERA_CPU_THREADS=own for the global pool) keeps
// launches on Tessera's own workers, with their large stacks.
TEST(ThreadPoolInOpenMPProcess, OwnWorkersWhenSharingIsOff) {
  if (!in_openmp_child()) GTEST_SKIP() << "runs in SharesALoadedOpenMPTeam's child";
  OpenMP omp = load_openmp();
  if (!omp.handle) GTEST_SKIP() << "no libgomp.so.1 on this machine";
  ASSERT_TRUE(omp.level) << dlerror();
  ThreadPool own_pool(2, /*share_openmp_team=*/false);
  std::atomic<int> in_region{0}, chunks{0};
  own_pool.parallel_for(64, [&](int64_t, int64_t) {
    if (omp.level() != 0) ++in_region;
    ++chunks;
  });
  EXPECT_EQ(in_region.load(), 0);
  EXPECT_GT(chunks.load(), 0);
}

}  // namespace
}  // namespace tessera::runtime
