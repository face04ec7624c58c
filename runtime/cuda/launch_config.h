// The argument of cuLaunchKernelEx (CUDA 12+): CUlaunchConfig and CUlaunchAttribute of
// cuda.h, declared here because the runtime loads libcuda with dlopen and includes no
// CUDA header. The layouts must match cuda.h byte for byte; the asserts below pin them
// and tests/cpp/test_launch_config.cpp compares them with cuda.h where it is installed.
#pragma once

#include <cstddef>

namespace tessera::runtime::cuda {

// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (a CUlaunchAttributeID): the
// launched grid may start before the previous grid in its stream has finished, once that
// grid's programs have all issued griddepcontrol.launch_dependents or exited; the grid
// waits for the previous one itself with griddepcontrol.wait.
constexpr int kLaunchAttributeProgrammaticStreamSerialization = 6;

// CUlaunchAttributeValue: a union of 64 bytes, 8-byte aligned (members hold pointers).
union LaunchAttributeValue {
  char pad[64];
  void* aligns_like_the_pointer_members;
  int programmatic_stream_serialization_allowed;
};

// CUlaunchAttribute: the id (a 4-byte enum), padded to 8 bytes, then the value.
struct LaunchAttribute {
  int id;
  char pad[8 - sizeof(int)];
  LaunchAttributeValue value;
};

// CUlaunchConfig.
struct LaunchConfig {
  unsigned grid_dim_x, grid_dim_y, grid_dim_z;
  unsigned block_dim_x, block_dim_y, block_dim_z;
  unsigned shared_mem_bytes;
  void* stream;  // CUstream
  LaunchAttribute* attrs;
  unsigned num_attrs;
};

static_assert(sizeof(LaunchAttributeValue) == 64 && alignof(LaunchAttributeValue) == 8,
              "CUlaunchAttributeValue is 64 bytes, 8-byte aligned");
static_assert(sizeof(LaunchAttribute) == 72 && offsetof(LaunchAttribute, value) == 8,
              "CUlaunchAttribute is the id padded to 8 bytes, then the value");
static_assert(sizeof(LaunchConfig) == 56 && offsetof(LaunchConfig, shared_mem_bytes) == 24 &&
                  offsetof(LaunchConfig, stream) == 32 && offsetof(LaunchConfig, attrs) == 40 &&
                  offsetof(LaunchConfig, num_attrs) == 48,
              "CUlaunchConfig's layout on x86-64");

}  // namespace tessera::runtime::cuda
