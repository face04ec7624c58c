// Launches compiled CPU kernels: a grid of programs over the thread pool.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

namespace tessera::runtime {

// Signature of the entry point the x86 back end emits (see kernel_lowering.cpp):
// runs programs [begin, end) of an n0 x n1 x n2 grid, axis 0 fastest.
using CpuEntry = void (*)(const void* argv, int64_t begin, int64_t end, int32_t n0, int32_t n1, int32_t n2);

// Raised after a launch in which a device_assert failed (TESSERA_DEBUG=1).
class DeviceAssertError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Raised by a launch in clusters whose grid does not divide into clusters, or in which
// a cluster's programs did not make the same cluster calls (cluster.cpp).
class ClusterError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs the whole grid; argv holds one 8-byte slot per kernel argument. cluster > 0: the
// kernel calls cluster_reduce_scatter, and its programs run in clusters of that many
// along x (launch_cpu_clusters); a kernel whose compiled metadata names a "cluster" must
// be launched with it (its exchanges find their cluster through the launch). Throws
// DeviceAssertError if a program's assertion failed.
void launch_cpu(CpuEntry entry, const uint64_t* argv, int32_t n0, int32_t n1, int32_t n2, int cluster = 0);

// The grid in clusters of `cluster` consecutive programs along x (n0 a multiple of it),
// each cluster's programs on threads of their own, at the same time (cluster.cpp).
void launch_cpu_clusters(CpuEntry entry, const uint64_t* argv, int32_t n0, int32_t n1, int32_t n2, int cluster);

// Whether a cluster op ran outside a cluster launch since the last call (and clears it):
// launch_cpu then raises ClusterError rather than return what a lone program computed.
bool take_unclustered_call();

// Helper functions kernels call (print, assert), by symbol name, for the loader.
std::map<std::string, void*> cpu_runtime_symbols();

}  // namespace tessera::runtime
