// The CPU runtime's thread pool: launches a grid of kernel programs over all cores
// at a cost of about a microsecond per launch.
#include "tessera/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

// How one launch works (see ThreadPool::Impl for the fields):
//
//   caller                                  each worker
//   ------                                  -----------
//   write body, n, chunk, open_seats;
//   next_index = 0
//   job_state = odd  (the job is open)  -->  sees a new odd job_state (spinning
//   wake up to 2 sleepers, if any sleep       ~500 us, then asleep on a futex)
//   take chunks from next_index              takes a seat, or skips the job
//                                            (woken from sleep: wakes 2 more)
//                                            workers_inside += 1
//                                            job_state still the same? take chunks
//   job_state = even (closed)                workers_inside -= 1
//   wait until workers_inside == 0
//
// The caller never waits for a worker to wake up: it takes chunks itself until
// none are left, so a launch of two tiny programs costs the caller no more than
// running them. A worker that wakes late finds the job closed and backs out
// without touching the job's fields. The "enter, then re-check the state" step
// against "close, then read workers_inside" is a Dekker pair (both sequentially
// consistent), so either the worker sees the close or the caller waits for it.
// job_state only grows, so a stale worker can never mistake a new job for its own.
//
// Measured on 16 cores, trivial bodies, 2 programs per launch:
// - Seats (one per chunk beyond the caller's first): without them all 15 spinning
//   workers entered every job and the caller waited for each to leave: 2.9 us.
// - Sleeping workers are woken as a tree (the caller wakes 2, each of those 2 more):
//   a futex wake costs the waker ~1 us, so waking 15 from the caller took 15 us.
// - Raw futexes, not std::condition_variable: glibc's notify can block the
//   notifier until a woken waiter runs, which put 170 us on the caller at p90.

namespace tessera::runtime {
namespace {

// Workers stay awake this long after a job closes so back-to-back launches (a kernel
// sequence, a loop over launches) skip the wake-up (microseconds, far more from a
// deep idle state, or a vCPU the hypervisor descheduled). 50 us was too short for
// Python-driven launches on the 2-vCPU benchmark VM: attention_score's forward
// (8x512x64, 2 threads, back to back) had a median of 4.2-4.9 ms with 50 us, 2.7-3.0
// with 200-500 us, 2.6-2.7 with 1 ms (best 2.1-2.5 ms throughout). A waiting worker
// yields its core after kSpinWithoutYield, so the spin costs little to other threads.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(500);
// For the first few microseconds of that, spin on the core; after that, yield it
// between checks. The thread we wait for may be queued on our own core (more
// threads than cores, or the scheduler put a woken worker there), and spinning
// would keep it off the core for a whole time slice.
constexpr auto kSpinWithoutYield = std::chrono::microseconds(4);
// Chunks per thread: several, so uneven programs still balance (dynamic scheduling).
constexpr int64_t kChunksPerThread = 4;
// Sleeping workers each thread wakes for a job: caller and woken workers alike.
constexpr int kWakesPerThread = 2;
constexpr int kMaxThreads = 1024;
// How often a pool with no OpenMP runtime in the process looks for one (a walk over
// the loaded libraries, a few microseconds): torch may be imported after Tessera.
constexpr auto kOpenMPLookupInterval = std::chrono::milliseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Sleeps while `word` holds `expected` (spurious returns are fine: callers loop).
void sleep_while_equal(std::atomic<int>& word, int expected) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
#else
  // Elsewhere, poll: slower to wake, and just as correct, since callers re-check.
  if (word.load() == expected) std::this_thread::sleep_for(std::chrono::microseconds(100));
#endif
}

void wake_sleepers_on(std::atomic<int>& word, int count) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAKE_PRIVATE, count, nullptr,
          nullptr, 0);
#else
  (void)word, (void)count;
#endif
}

// Waits until done() is true, spinning and then yielding for up to
// kSpinBeforeSleep; returns false if the caller should go to sleep instead. While
// hold_clock() is true the wait has not really begun (see wait_for_new_job), so the
// clock starts again.
template <typename Done, typename HoldClock>
bool spin_until(Done done, HoldClock hold_clock) {
  auto start = std::chrono::steady_clock::now();
  for (uint32_t spins = 1;; ++spins) {
    if (done()) return true;
    cpu_relax();
    // Reading the clock costs ~20 ns; every 32 pauses keeps that out of the loop.
    if (spins % 32 != 0) continue;
    auto now = std::chrono::steady_clock::now();
    if (hold_clock()) start = now;
    auto waited = now - start;
    if (waited > kSpinBeforeSleep) return false;
    if (waited > kSpinWithoutYield || hold_clock()) sched_yield();
  }
}

template <typename Done>
bool spin_until(Done done) {
  return spin_until(done, [] { return false; });
}

// True on worker threads, and on a caller while it runs its share of a job:
// a parallel_for from there runs inline instead of deadlocking on the pool.
thread_local bool t_running_in_pool = false;

// Set in a child of fork(): the workers did not survive the fork (and the pool's
// mutex may be held by a thread that no longer exists), so every call runs inline.
std::atomic<bool> g_in_forked_child{false};

int usable_cpu_count() {
#ifdef __linux__
  // Honour taskset / cgroup cpusets, which hardware_concurrency() ignores.
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) {
    int count = CPU_COUNT(&cpus);
    if (count > 0) return count;
  }
#endif
  return static_cast<int>(std::thread::hardware_concurrency());
}

int thread_count_from_environment() {
  if (const char* text = std::getenv("TESSERA_NUM_THREADS")) {
    char* end = nullptr;
    long requested = std::strtol(text, &end, 10);
    if (end != text && *end == '\0' && requested >= 1)
      return static_cast<int>(std::min<long>(requested, kMaxThreads));
  }
  return std::clamp(usable_cpu_count(), 1, kMaxThreads);
}

// ---------------------------------------------------------------- sharing an OpenMP team
constexpr int64_t kMinProgramsOnTeam = 16;

//
// torch (and numpy builds on OpenMP BLAS) run their parallel ops on an OpenMP team,
// whose workers then spin-wait for the next parallel region: libgomp's default
// GOMP_SPINCOUNT is 300k pauses, 12-15 ms on the 2-core EPYC we benchmark on. A
// Tessera launch right after a torch op then has our workers compete with a spinning
// OpenMP worker for the same cores: attention_score's forward (2.0 ms alone) took a
// median 8 ms right after torch.ones_like (bench/pool_interference.py). Launching on
// that same team instead (GOMP_parallel, which every OpenMP runtime on Linux exports:
// libgomp, LLVM's libomp, Intel's libiomp5) puts our chunks on the threads already
// spinning for work, so no thread waits for a core. Only while they spin, though:
// GOMP_parallel waits for every team thread at its end, so a sleeping (or descheduled)
// team worker delays the whole launch, where our own pool never waits for a worker
// that has not started. Whether they spin is their scheduler state ('R' in
// /proc/self/task/<tid>/stat; they cannot be running a region of their own, since
// the caller is their master). We only use a runtime the process has already
// loaded; we never load one, nor change its settings.
// TESSERA_CPU_THREADS=own keeps launches on Tessera's own workers.

using GompParallelFn = void (*)(void (*)(void*), void*, unsigned, unsigned);

bool openmp_sharing_disabled_by_environment() {
  const char* text = std::getenv("TESSERA_CPU_THREADS");
  return text && std::strcmp(text, "own") == 0;
}

// GOMP_parallel of an OpenMP runtime already loaded in this process, or nullptr.
GompParallelFn find_loaded_openmp_runtime() {
#if defined(__linux__)
  // The runtime is usually a dependency of a library loaded RTLD_LOCAL (torch's
  // libtorch_cpu), so dlsym(RTLD_DEFAULT) misses it; and wheels rename it
  // (libgomp-<hash>.so.1). Walk the loaded objects instead.
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        const char* name = info->dlpi_name;
        if (!name || !*name) return 0;
        const char* base = std::strrchr(name, '/');
        base = base ? base + 1 : name;
        for (const char* prefix : {"libgomp", "libomp", "libiomp5"})
          if (std::strncmp(base, prefix, std::strlen(prefix)) == 0) {
            *static_cast<std::string*>(out) = name;
            return 1;
          }
        return 0;
      },
      &path);
  if (path.empty()) return nullptr;
  // RTLD_NOLOAD: a handle to the loaded copy (kept open, so it stays loaded).
  void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!handle) return nullptr;
  return reinterpret_cast<GompParallelFn>(dlsym(handle, "GOMP_parallel"));
#else
  return nullptr;
#endif
}

}  // namespace

struct ThreadPool::Impl {
  using Body = std::function<void(int64_t, int64_t)>;

  // The open job. Written by the caller only while no worker is inside (after the
  // previous job closed and workers_inside reached 0); read by workers inside.
  const Body* body = nullptr;
  int64_t n = 0;
  int64_t chunk = 1;
  std::exception_ptr first_error;  // guarded by error_mutex
  std::mutex error_mutex;

  // Each hot atomic gets its own cache line: workers hammer next_index while
  // spinning workers poll job_state.
  alignas(64) std::atomic<int64_t> next_index{0};
  alignas(64) std::atomic<uint64_t> job_state{0};  // odd: a job is open
  alignas(64) std::atomic<int> workers_inside{0};  // also the caller's futex word
  alignas(64) std::atomic<int> open_seats{0};      // workers the open job still wants
  std::atomic<bool> failed{false};

  // Sleeping workers wait on wake_generation, which the caller bumps before a wake
  // so that a worker about to sleep sees the change instead of missing the wake.
  alignas(64) std::atomic<int> wake_generation{0};
  std::atomic<int> sleeping_workers{0};
  std::atomic<bool> caller_sleeping{false};
  std::atomic<bool> stopping{false};

  std::mutex call_mutex;  // serializes parallel_for calls from different threads
  // The process's OpenMP runtime, once one is loaded (guarded by call_mutex):
  // looked for again at most every kOpenMPLookupInterval until found.
  bool share_openmp_team = false;
  GompParallelFn gomp_parallel = nullptr;
  std::chrono::steady_clock::time_point next_openmp_lookup{};
  // /proc/self/task/<tid>/stat of each team worker that has run our chunks (kept
  // open: re-reading one costs about a microsecond), to tell whether they spin.
  std::vector<int> team_worker_stat_fds;
  std::mutex new_team_workers_mutex;
  std::vector<int> new_team_worker_tids;  // guarded by new_team_workers_mutex
  std::thread::id team_master;  // the caller of the open GOMP_parallel
  std::vector<pthread_t> workers;
  int num_threads = 1;  // workers + the caller

  void run_chunks();
  uint64_t wait_for_new_job(uint64_t last_seen, bool& slept);
  bool take_seat();
  void worker_loop();
  void wake_sleeping_workers(int how_many);
  void wait_for_workers_to_leave();
  GompParallelFn loaded_openmp_runtime();
  bool team_workers_awake();
  void note_team_worker();
  void rethrow_first_error();
};

// Called on a team worker running our chunks: remembers its thread id, once.
void ThreadPool::Impl::note_team_worker() {
#if defined(__linux__)
  thread_local const Impl* t_noted_for = nullptr;
  if (t_noted_for == this) return;
  t_noted_for = this;
  std::lock_guard<std::mutex> lock(new_team_workers_mutex);
  new_team_worker_tids.push_back(static_cast<int>(syscall(SYS_gettid)));
#endif
}

// True when a worker of the OpenMP team is running or runnable, i.e. spin-waiting
// after a parallel region (it cannot be inside one: this thread is its master),
// and false when they all sleep. Also true before we know the team's threads, so
// the first launch on the team finds them out.
bool ThreadPool::Impl::team_workers_awake() {
#if defined(__linux__)
  {
    std::lock_guard<std::mutex> lock(new_team_workers_mutex);
    for (int tid : new_team_worker_tids) {
      std::string path = "/proc/self/task/" + std::to_string(tid) + "/stat";
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) team_worker_stat_fds.push_back(fd);
    }
    new_team_worker_tids.clear();
  }
  if (team_worker_stat_fds.empty()) return true;
  bool awake = false;
  for (size_t i = 0; i < team_worker_stat_fds.size();) {
    // "<tid> (<name>) <state> ...": the name may hold spaces and parentheses.
    char text[256];
    ssize_t got = pread(team_worker_stat_fds[i], text, sizeof(text) - 1, 0);
    if (got <= 0) {  // the thread exited
      close(team_worker_stat_fds[i]);
      team_worker_stat_fds.erase(team_worker_stat_fds.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    text[got] = '\0';
    const char* name_end = std::strrchr(text, ')');
    if (name_end && name_end[1] == ' ' && name_end[2] == 'R') awake = true;
    ++i;
  }
  return awake;
#else
  return true;
#endif
}

GompParallelFn ThreadPool::Impl::loaded_openmp_runtime() {
  if (!share_openmp_team || gomp_parallel) return gomp_parallel;
  auto now = std::chrono::steady_clock::now();
  if (now < next_openmp_lookup) return nullptr;
  next_openmp_lookup = now + kOpenMPLookupInterval;
  gomp_parallel = find_loaded_openmp_runtime();
  return gomp_parallel;
}

// Takes chunks until none are left or some body has thrown. Never throws.
void ThreadPool::Impl::run_chunks() {
  const Body& run = *body;
  const int64_t total = n, step = chunk;
  while (!failed.load(std::memory_order_relaxed)) {
    int64_t begin = next_index.fetch_add(step, std::memory_order_relaxed);
    if (begin >= total) return;
    try {
      run(begin, std::min(begin + step, total));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
      failed.store(true, std::memory_order_relaxed);
    }
  }
}

// Returns the state of an open job other than last_seen, or anything once stopping.
uint64_t ThreadPool::Impl::wait_for_new_job(uint64_t last_seen, bool& slept) {
  auto is_new_job = [last_seen](uint64_t state) { return (state & 1) && state != last_seen; };
  uint64_t state = 0;
  slept = false;
  // The spin-before-sleep window starts when the job we were in closes, not when we
  // ran out of its chunks: the caller may still be running its last chunk for a
  // while (attention_score's forward: up to ~400 us), and a worker asleep by the next
  // launch joins it late (waking a vCPU from idle took long enough here that 2-thread
  // launches ran at about 1-thread speed: median 4.2 ms against 2.1 ms).
  if (spin_until(
          [&] {
            state = job_state.load(std::memory_order_acquire);
            return is_new_job(state) || stopping.load(std::memory_order_relaxed);
          },
          [&] { return state == last_seen && (state & 1); }))
    return state;
  slept = true;
  // Dekker pair with parallel_for's "open the job, then read sleeping_workers":
  // either the caller sees us counted and bumps wake_generation after we read it
  // (so the futex wait returns at once or is woken), or we see the open job.
  sleeping_workers.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    int generation = wake_generation.load(std::memory_order_seq_cst);
    state = job_state.load(std::memory_order_seq_cst);
    if (is_new_job(state) || stopping.load(std::memory_order_seq_cst)) break;
    sleep_while_equal(wake_generation, generation);
  }
  sleeping_workers.fetch_sub(1, std::memory_order_relaxed);
  return state;
}

// The seat count may already belong to a newer job than the one this worker saw;
// then it takes a seat it will not use (it backs out below), which only means one
// helper fewer for that job.
bool ThreadPool::Impl::take_seat() {
  return open_seats.load(std::memory_order_relaxed) > 0 &&
         open_seats.fetch_sub(1, std::memory_order_relaxed) > 0;
}

void ThreadPool::Impl::worker_loop() {
  t_running_in_pool = true;
  uint64_t last_seen = 0;
  for (;;) {
    bool slept = false;
    uint64_t state = wait_for_new_job(last_seen, slept);
    if (stopping.load(std::memory_order_acquire)) return;
    last_seen = state;
    if (!take_seat()) continue;
    if (slept)
      wake_sleeping_workers(std::min(kWakesPerThread, open_seats.load(std::memory_order_relaxed)));
    workers_inside.fetch_add(1, std::memory_order_seq_cst);
    if (job_state.load(std::memory_order_seq_cst) == state) run_chunks();
    if (workers_inside.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping.load(std::memory_order_seq_cst))
      wake_sleepers_on(workers_inside, 1);
  }
}

// Called after job_state was opened. Spinning workers need nothing; sleeping ones
// get a futex wake, and no more than the job has seats for.
void ThreadPool::Impl::wake_sleeping_workers(int how_many) {
  if (how_many <= 0 || sleeping_workers.load(std::memory_order_seq_cst) == 0) return;
  wake_generation.fetch_add(1, std::memory_order_seq_cst);
  wake_sleepers_on(wake_generation, how_many);
}

// Called after job_state was closed: every chunk is taken, wait for those running.
void ThreadPool::Impl::wait_for_workers_to_leave() {
  if (spin_until([&] { return workers_inside.load(std::memory_order_seq_cst) == 0; })) return;
  // Dekker pair with the worker's "leave, then read caller_sleeping"; the futex
  // wait itself returns at once if workers_inside changed since we read it.
  caller_sleeping.store(true, std::memory_order_seq_cst);
  for (int inside; (inside = workers_inside.load(std::memory_order_seq_cst)) != 0;)
    sleep_while_equal(workers_inside, inside);
  caller_sleeping.store(false, std::memory_order_relaxed);
}

ThreadPool& ThreadPool::global() {
  // Leaked on purpose: destroying it at exit would join workers while other static
  // destructors (or a still-running kernel) may use it.
  static ThreadPool* pool = [] {
    pthread_atfork(nullptr, nullptr, [] { g_in_forked_child.store(true); });
    return new ThreadPool(thread_count_from_environment(), !openmp_sharing_disabled_by_environment());
  }();
  return *pool;
}

ThreadPool::ThreadPool(int threads, bool share_openmp_team) : impl_(new Impl) {
  impl_->share_openmp_team = share_openmp_team;
  threads = std::clamp(threads, 1, kMaxThreads);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, static_cast<size_t>(kWorkerStackBytes));
  for (int i = 1; i < threads; ++i) {
    pthread_t worker;
    auto start = [](void* impl) -> void* {
      static_cast<Impl*>(impl)->worker_loop();
      return nullptr;
    };
    // Out of threads or memory for stacks: run with the workers we got.
    if (pthread_create(&worker, &attributes, start, impl_) != 0) break;
#ifdef __linux__
    pthread_setname_np(worker, "tessera-worker");
#endif
    impl_->workers.push_back(worker);
  }
  pthread_attr_destroy(&attributes);
  impl_->num_threads = static_cast<int>(impl_->workers.size()) + 1;
}

ThreadPool::~ThreadPool() {
  impl_->stopping.store(true, std::memory_order_seq_cst);
  impl_->wake_generation.fetch_add(1, std::memory_order_seq_cst);
  wake_sleepers_on(impl_->wake_generation, INT_MAX);
  for (pthread_t worker : impl_->workers) pthread_join(worker, nullptr);
  delete impl_;
}

int ThreadPool::num_threads() const {
  return g_in_forked_child.load(std::memory_order_relaxed) ? 1 : impl_->num_threads;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body,
                              int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  Impl& pool = *impl_;
  // The fast path: no atomics, no locks, so a one-program launch costs a call.
  if (n == 1 || n <= min_chunk || pool.num_threads == 1 || t_running_in_pool ||
      g_in_forked_child.load(std::memory_order_relaxed)) {
    body(0, n);
    return;
  }

  std::lock_guard<std::mutex> one_call_at_a_time(pool.call_mutex);
  const int64_t target_chunks = int64_t{pool.num_threads} * kChunksPerThread;
  const int64_t chunk = std::max(min_chunk, (n + target_chunks - 1) / target_chunks);
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  const int seats = static_cast<int>(std::min<int64_t>(num_chunks - 1, pool.num_threads - 1));

  pool.body = &body;
  pool.n = n;
  pool.chunk = chunk;
  pool.first_error = nullptr;
  pool.failed.store(false, std::memory_order_relaxed);
  pool.next_index.store(0, std::memory_order_relaxed);
  GompParallelFn gomp_parallel = pool.loaded_openmp_runtime();
  // Only while the team's workers are awake: asleep, they would have to be woken
  // and GOMP_parallel would wait for each of them (our own pool never waits for a
  // late worker), and they compete with nothing.
  // And only for launches of many programs: a region costs a few microseconds (a
  // tiny 4-program launch: 4.1 us on the team, 0.5 us on our workers), and every
  // region of ours keeps the team spinning, so small launches would pay it forever.
  if (gomp_parallel && n >= kMinProgramsOnTeam && pool.team_workers_awake()) {
    // Every thread of the team (the caller is its master) takes chunks as our own
    // workers would; GOMP_parallel returns after all of them are done.
    auto run_on_team = [](void* impl) {
      Impl& pool = *static_cast<Impl*>(impl);
      bool was_in_pool = t_running_in_pool;
      if (!was_in_pool && std::this_thread::get_id() != pool.team_master) pool.note_team_worker();
      t_running_in_pool = true;  // a nested launch runs inline, as on our workers
      pool.run_chunks();
      t_running_in_pool = was_in_pool;
    };
    pool.team_master = std::this_thread::get_id();
    gomp_parallel(run_on_team, &pool, static_cast<unsigned>(std::min<int64_t>(num_chunks, pool.num_threads)), 0);
    pool.rethrow_first_error();
    return;
  }
  pool.open_seats.store(seats, std::memory_order_relaxed);
  const uint64_t open_state = pool.job_state.load(std::memory_order_relaxed) + 1;
  pool.job_state.store(open_state, std::memory_order_seq_cst);
  pool.wake_sleeping_workers(std::min(kWakesPerThread, seats));

  t_running_in_pool = true;
  pool.run_chunks();
  t_running_in_pool = false;

  pool.job_state.store(open_state + 1, std::memory_order_seq_cst);
  pool.wait_for_workers_to_leave();
  pool.rethrow_first_error();
}

void ThreadPool::Impl::rethrow_first_error() {
  if (!failed.load(std::memory_order_relaxed)) return;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mutex);
    error = first_error;
    first_error = nullptr;
  }
  std::rethrow_exception(error);
}

}  // namespace tessera::runtime
