// GoogleTests for the CPU runtime of clusters (runtime/cpu/cluster.cpp), driven by
// hand-written entry points that call the helpers the x86 code calls for
// cluster_reduce_scatter: every cluster of a grid exchanges at once, sums in rank
// order, several exchanges reuse the slots, and programs that do not make the same
// calls break their cluster with an error instead of a hang.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tessera/cpu_launcher.h"

extern "C" {
int32_t tessera_cpu_cluster_rank();
void* tessera_cpu_cluster_slot(int32_t rank, int64_t bytes);
void tessera_cpu_cluster_barrier();
}

namespace tessera::runtime {
namespace {

constexpr int kParts = 4;  // floats each rank owns of a program's tile

struct Args {
  int cluster;
  int exchanges;
  const float* in;  // per program: exchanges x (cluster x kParts)
  float* out;       // per program: exchanges x kParts
  int skip_rank;    // that rank leaves out its exchanges (-1: none)
};

// What the x86 lowering emits for `out[e] = cluster_reduce_scatter(in[e], cluster)`.
void entry(const void* argv, int64_t begin, int64_t end, int32_t, int32_t, int32_t) {
  const Args& a = **static_cast<Args* const*>(argv);
  const int tile = a.cluster * kParts;
  for (int64_t p = begin; p < end; ++p) {
    int rank = tessera_cpu_cluster_rank();
    if (rank == a.skip_rank) continue;
    for (int e = 0; e < a.exchanges; ++e) {
      auto* own = static_cast<float*>(tessera_cpu_cluster_slot(rank, tile * 4));
      for (int i = 0; i < tile; ++i) own[i] = a.in[(p * a.exchanges + e) * tile + i];
      tessera_cpu_cluster_barrier();
      for (int i = 0; i < kParts; ++i) {
        float sum = 0.0f;
        for (int c = 0; c < a.cluster; ++c)
          sum = (c == 0 ? 0.0f : sum) + static_cast<float*>(tessera_cpu_cluster_slot(c, tile * 4))[rank * kParts + i];
        a.out[(p * a.exchanges + e) * kParts + i] = sum;
      }
      tessera_cpu_cluster_barrier();
    }
  }
}

std::vector<float> run(int cluster, int programs, int exchanges, int skip_rank, std::vector<float>& in) {
  in.resize(static_cast<size_t>(programs) * exchanges * cluster * kParts);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 7919) % 1000) / 8.0f;
  std::vector<float> out(static_cast<size_t>(programs) * exchanges * kParts, -1.0f);
  Args a{cluster, exchanges, in.data(), out.data(), skip_rank};
  const Args* pa = &a;
  uint64_t argv[1];
  static_assert(sizeof(pa) == sizeof(argv[0]), "one slot per argument");
  std::memcpy(argv, &pa, sizeof(pa));
  launch_cpu(entry, argv, programs, 1, 1, cluster);
  return out;
}

TEST(ClusterRuntime, SumsEveryClusterInRankOrder) {
  for (int cluster : {2, 4, 16}) {
    const int programs = 4 * cluster, exchanges = 3;
    std::vector<float> in;
    std::vector<float> out = run(cluster, programs, exchanges, -1, in);
    const int tile = cluster * kParts;
    for (int p = 0; p < programs; ++p)
      for (int e = 0; e < exchanges; ++e)
        for (int i = 0; i < kParts; ++i) {
          int first = p - p % cluster, rank = p % cluster;
          float want = 0.0f;
          for (int c = 0; c < cluster; ++c)
            want = (c == 0 ? 0.0f : want) + in[((first + c) * exchanges + e) * tile + rank * kParts + i];
          ASSERT_EQ(out[(p * exchanges + e) * kParts + i], want) << "cluster " << cluster << " program " << p;
        }
  }
}

TEST(ClusterRuntime, GridNotAMultipleOfTheClusterIsAnError) {
  std::vector<float> in;
  EXPECT_THROW(run(4, 6, 1, -1, in), ClusterError);
}

TEST(ClusterRuntime, AProgramThatSkipsTheExchangesBreaksItsClusterWithoutAHang) {
  for (int skip : {0, 3}) {
    std::vector<float> in;
    try {
      run(4, 8, 2, skip, in);
      ADD_FAILURE() << "no error";
    } catch (const ClusterError& e) {
      EXPECT_NE(std::string(e.what()).find("every program of a cluster must make the same calls"), std::string::npos)
          << e.what();
    }
  }
  std::vector<float> in;  // the runtime is clean afterwards
  std::vector<float> out = run(2, 4, 1, -1, in);
  EXPECT_EQ(out[0], in[0] + in[2 * kParts]);
}

}  // namespace
}  // namespace tessera::runtime
