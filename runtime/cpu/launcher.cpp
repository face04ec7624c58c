// Runs a CPU kernel's grid over the thread pool, and the helpers kernels call
// back into (device_print, device_assert).
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#include "tessera/cpu_launcher.h"
#include "tessera/thread_pool.h"

namespace {

std::mutex g_print_mutex;
std::mutex g_assert_mutex;
std::atomic<bool> g_assert_failed{false};
std::string g_assert_message;

}  // namespace

extern "C" {

// cluster.cpp
int32_t tessera_cpu_cluster_rank();
void* tessera_cpu_cluster_slot(int32_t rank, int64_t bytes);
void tessera_cpu_cluster_barrier();

void tessera_cpu_print(const char* prefix, int32_t p0, int32_t p1, int32_t p2, int64_t flat, int32_t operand,
                       int32_t kind, int64_t ival, double dval) {
  std::lock_guard<std::mutex> lock(g_print_mutex);
  bool hex = (kind >> 4) & 1;
  kind &= 0xF;
  std::printf("pid (%d, %d, %d)", p0, p1, p2);
  if (flat >= 0) std::printf(" idx (%" PRId64 ")", flat);
  std::printf(" %s", prefix);
  if (operand > 0) std::printf(" (operand %d)", operand);
  if (kind == 2) std::printf("%.9g\n", dval);
  else if (kind == 3 || hex) std::printf("0x%" PRIx64 "\n", static_cast<uint64_t>(ival));
  else if (kind == 1) std::printf("%" PRIu64 "\n", static_cast<uint64_t>(ival));
  else std::printf("%" PRId64 "\n", ival);
  std::fflush(stdout);
}

void tessera_cpu_assert_fail(const char* msg, const char* file, int32_t line, int32_t col, int32_t p0, int32_t p1,
                             int32_t p2) {
  std::lock_guard<std::mutex> lock(g_assert_mutex);
  if (g_assert_failed.load()) return;
  g_assert_message = std::string(file) + ":" + std::to_string(line) + ":" + std::to_string(col) +
                     ": device-side assertion failed in program (" + std::to_string(p0) + ", " + std::to_string(p1) +
                     ", " + std::to_string(p2) + ")" + (msg && *msg ? std::string(": ") + msg : std::string());
  g_assert_failed.store(true);
}

}  // extern "C"

namespace tessera::runtime {

void launch_cpu(CpuEntry entry, const uint64_t* argv, int32_t n0, int32_t n1, int32_t n2, int cluster) {
  int64_t total = int64_t(n0) * n1 * n2;
  if (total <= 0) return;
  std::optional<ClusterError> broken;
  if (cluster > 0) {
    // A program whose assertion failed returned early, which breaks its cluster: the
    // assertion is the error to report, the broken cluster only its consequence.
    try {
      launch_cpu_clusters(entry, argv, n0, n1, n2, cluster);
    } catch (const ClusterError& e) {
      broken = e;
    }
  } else if (total == 1) {
    entry(argv, 0, 1, n0, n1, n2);
  } else {
    ThreadPool::global().parallel_for(total, [&](int64_t b, int64_t e) { entry(argv, b, e, n0, n1, n2); });
  }
  if (g_assert_failed.load(std::memory_order_relaxed)) {
    std::string msg;
    {
      std::lock_guard<std::mutex> lock(g_assert_mutex);
      msg = g_assert_message;
      g_assert_failed.store(false);
    }
    throw DeviceAssertError(msg);
  }
  if (broken) throw *broken;
  if (cluster == 0 && take_unclustered_call())
    throw ClusterError("the kernel calls tl.cluster_reduce_scatter but was launched without clusters (its compiled "
                       "metadata's \"cluster\" is the cluster size to launch with)");
}

std::map<std::string, void*> cpu_runtime_symbols() {
  return {{"tessera_cpu_print", reinterpret_cast<void*>(&tessera_cpu_print)},
          {"tessera_cpu_assert_fail", reinterpret_cast<void*>(&tessera_cpu_assert_fail)},
          {"tessera_cpu_cluster_rank", reinterpret_cast<void*>(&tessera_cpu_cluster_rank)},
          {"tessera_cpu_cluster_slot", reinterpret_cast<void*>(&tessera_cpu_cluster_slot)},
          {"tessera_cpu_cluster_barrier", reinterpret_cast<void*>(&tessera_cpu_cluster_barrier)}};
}

}  // namespace tessera::runtime
