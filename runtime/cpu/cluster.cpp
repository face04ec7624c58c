// Clusters of programs on the CPU (cluster_reduce_scatter, docs/language.md): the
// programs of a cluster run at the same time, one thread each, and meet at barriers;
// each has an exchange slot the others read between two barriers. A program that
// returns while others wait at a barrier (or reaches one after another returned)
// breaks the cluster: its barriers stop waiting and the launch raises ClusterError.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/cpu_launcher.h"
#include "tessera/thread_pool.h"

namespace tessera::runtime {

namespace {

// An exchange slot's memory. A slot only grows, and every buffer it had stays until the
// cluster ends, so a program that reads a peer's slot while the peer grows it (possible
// only in a broken cluster, whose barriers no longer wait) reads stale bytes, never freed ones.
struct SlotBuffer {
  std::unique_ptr<uint64_t[]> data;
  int64_t bytes = 0;
};

struct Slot {
  std::atomic<SlotBuffer*> current{nullptr};
  std::vector<std::unique_ptr<SlotBuffer>> kept;  // touched by the slot's own program only
};

struct Cluster {
  int size = 0;
  int32_t n1 = 0, n2 = 0;            // the grid's y and z extents (the entry takes them)
  int32_t first = 0, y = 0, z = 0;   // rank 0's program id: error messages name programs
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t phase = 0;
  int exited = 0;
  bool broken = false;                  // under mu
  std::atomic<bool> broken_flag{false};  // the same, for slot reads without the lock
  std::string error;
  std::unique_ptr<Slot[]> slots;  // per rank
};

struct Member {
  Cluster* cluster = nullptr;
  int rank = 0;
};

thread_local Member t_member;

// A cluster op ran in a launch without clusters (launch_cpu's cluster = 0: a caller that
// ignored the compiled metadata): its calls get a lone program's view, the launch raises.
std::atomic<bool> g_unclustered_call{false};

std::string program_name(const Cluster& c, int rank) {
  return "(" + std::to_string(c.first + rank) + ", " + std::to_string(c.y) + ", " + std::to_string(c.z) + ")";
}

void break_cluster(Cluster& c, const std::string& why) {  // under c.mu
  if (!c.broken) c.error = why;
  c.broken = true;
  c.broken_flag.store(true, std::memory_order_release);
  c.cv.notify_all();
}

// What a program of a broken cluster reads instead of a peer's slot (zeros).
void* scratch(int64_t bytes) {
  thread_local std::vector<uint64_t> zeros;
  if (zeros.size() * 8 < static_cast<uint64_t>(bytes)) zeros.assign((bytes + 7) / 8, 0);
  return zeros.data();
}

// Runs rank `rank` of the cluster: program flat index `flat`.
void run_member(CpuEntry entry, const uint64_t* argv, Cluster& c, int rank, int64_t flat, int32_t n0) {
  t_member = {&c, rank};
  entry(argv, flat, flat + 1, n0, c.n1, c.n2);
  t_member = {};
  std::lock_guard<std::mutex> lock(c.mu);
  ++c.exited;
  if (c.arrived > 0)
    break_cluster(c, "program " + program_name(c, rank) + " returned while other programs of its cluster (x " +
                         std::to_string(c.first) + " .. " + std::to_string(c.first + c.size - 1) +
                         ") waited for it in tl.cluster_reduce_scatter: every program of a cluster must make the "
                         "same calls");
}

}  // namespace

bool take_unclustered_call() { return g_unclustered_call.exchange(false); }

void launch_cpu_clusters(CpuEntry entry, const uint64_t* argv, int32_t n0, int32_t n1, int32_t n2, int cluster) {
  if (cluster < 1 || n0 % cluster)
    throw ClusterError("the grid's x extent " + std::to_string(n0) +
                       " is not a multiple of the kernel's cluster size " +
                       std::to_string(cluster));
  int64_t clusters = int64_t(n0 / cluster) * n1 * n2;
  std::mutex error_mu;
  std::string first_error;
  ThreadPool::global().parallel_for(clusters, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      Cluster c;
      c.size = cluster, c.n1 = n1, c.n2 = n2;
      int64_t flat0 = i * cluster;  // x fastest: a cluster's programs are consecutive
      c.first = static_cast<int32_t>(flat0 % n0);
      c.y = static_cast<int32_t>(flat0 / n0 % n1), c.z = static_cast<int32_t>(flat0 / n0 / n1);
      c.slots = std::make_unique<Slot[]>(cluster);
      std::vector<std::thread> others;
      for (int r = 1; r < cluster; ++r) others.emplace_back(run_member, entry, argv, std::ref(c), r, flat0 + r, n0);
      run_member(entry, argv, c, 0, flat0, n0);
      for (auto& t : others) t.join();
      if (c.broken) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (first_error.empty()) first_error = c.error;
      }
    }
  });
  if (!first_error.empty()) throw ClusterError(first_error);
}

}  // namespace tessera::runtime

extern "C" {

// This program's rank in its cluster.
int32_t tessera_cpu_cluster_rank() { return tessera::runtime::t_member.rank; }  // 0 without a cluster

// The exchange slot of rank `rank` of this program's cluster, `bytes` long. Its own
// (written before the barrier that publishes it) grows to that; a peer's (read between
// that barrier and the next) must have that many bytes: a shorter one means the
// programs called different exchanges, which breaks the cluster. A broken cluster's
// reads get zeros.
void* tessera_cpu_cluster_slot(int32_t rank, int64_t bytes) {
  using namespace tessera::runtime;
  if (!t_member.cluster) {
    g_unclustered_call.store(true);
    return scratch(std::max<int64_t>(bytes, 8));
  }
  auto& c = *t_member.cluster;
  auto& slot = c.slots[rank];
  SlotBuffer* buf = slot.current.load(std::memory_order_acquire);
  if (rank == t_member.rank) {
    if (!buf || buf->bytes < bytes) {
      auto grown = std::make_unique<SlotBuffer>();
      grown->data = std::make_unique<uint64_t[]>((bytes + 7) / 8);
      grown->bytes = bytes;
      buf = grown.get();
      slot.kept.push_back(std::move(grown));
      slot.current.store(buf, std::memory_order_release);
    }
    return buf->data.get();
  }
  if (c.broken_flag.load(std::memory_order_acquire)) return scratch(bytes);
  if (!buf || buf->bytes < bytes) {
    std::lock_guard<std::mutex> lock(c.mu);
    break_cluster(c, "programs " + program_name(c, t_member.rank) + " and " + program_name(c, rank) +
                         " of a cluster met at different tl.cluster_reduce_scatter calls (tiles of different "
                         "sizes): every program of a cluster must make the same calls");
    return scratch(bytes);
  }
  return buf->data.get();
}

// Waits until every program of the cluster is here; returns at once in a broken cluster.
void tessera_cpu_cluster_barrier() {
  using tessera::runtime::t_member;
  if (!t_member.cluster) {
    tessera::runtime::g_unclustered_call.store(true);
    return;
  }
  auto& c = *t_member.cluster;
  std::unique_lock<std::mutex> lock(c.mu);
  if (c.broken) return;
  if (c.exited > 0) {
    tessera::runtime::break_cluster(
        c, "program " + tessera::runtime::program_name(c, t_member.rank) +
               " called tl.cluster_reduce_scatter after another program of its cluster had returned: every program "
               "of a cluster must make the same calls");
    return;
  }
  uint64_t phase = c.phase;
  if (++c.arrived == c.size) {
    c.arrived = 0;
    ++c.phase;
    c.cv.notify_all();
    return;
  }
  c.cv.wait(lock, [&] { return c.phase != phase || c.broken; });
}

}  // extern "C"
