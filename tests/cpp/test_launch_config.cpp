// The runtime's own declaration of cuLaunchKernelEx's argument (runtime/cuda/launch_config.h)
// against cuda.h, where the CUDA toolkit is installed: the driver must read the grid, the
// stream and the PDL attribute where the runtime wrote them.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>

#include "cuda/launch_config.h"

#if __has_include(<cuda.h>)
#include <cuda.h>
#define TESSERA_TEST_HAVE_CUDA_H 1
#elif __has_include("/usr/local/cuda/include/cuda.h")
#include "/usr/local/cuda/include/cuda.h"
#define TESSERA_TEST_HAVE_CUDA_H 1
#endif

namespace {

using tessera::runtime::cuda::kLaunchAttributeProgrammaticStreamSerialization;
using tessera::runtime::cuda::LaunchAttribute;
using tessera::runtime::cuda::LaunchAttributeValue;
using tessera::runtime::cuda::LaunchConfig;

#ifdef TESSERA_TEST_HAVE_CUDA_H

TEST(LaunchConfig, LayoutMatchesCudaH) {
  EXPECT_EQ(kLaunchAttributeProgrammaticStreamSerialization, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  EXPECT_EQ(sizeof(LaunchAttributeValue), sizeof(CUlaunchAttributeValue));
  EXPECT_EQ(alignof(LaunchAttributeValue), alignof(CUlaunchAttributeValue));
  EXPECT_EQ(offsetof(CUlaunchAttributeValue, programmaticStreamSerializationAllowed), 0u);
  EXPECT_EQ(sizeof(LaunchAttribute), sizeof(CUlaunchAttribute));
  EXPECT_EQ(offsetof(LaunchAttribute, value), offsetof(CUlaunchAttribute, value));
  EXPECT_EQ(sizeof(LaunchConfig), sizeof(CUlaunchConfig));
  EXPECT_EQ(offsetof(LaunchConfig, grid_dim_x), offsetof(CUlaunchConfig, gridDimX));
  EXPECT_EQ(offsetof(LaunchConfig, grid_dim_z), offsetof(CUlaunchConfig, gridDimZ));
  EXPECT_EQ(offsetof(LaunchConfig, block_dim_x), offsetof(CUlaunchConfig, blockDimX));
  EXPECT_EQ(offsetof(LaunchConfig, block_dim_z), offsetof(CUlaunchConfig, blockDimZ));
  EXPECT_EQ(offsetof(LaunchConfig, shared_mem_bytes), offsetof(CUlaunchConfig, sharedMemBytes));
  EXPECT_EQ(offsetof(LaunchConfig, stream), offsetof(CUlaunchConfig, hStream));
  EXPECT_EQ(offsetof(LaunchConfig, attrs), offsetof(CUlaunchConfig, attrs));
  EXPECT_EQ(offsetof(LaunchConfig, num_attrs), offsetof(CUlaunchConfig, numAttrs));
}

// What the runtime writes, read back through cuda.h's types.
TEST(LaunchConfig, DriverReadsWhatTheRuntimeWrites) {
  LaunchAttribute attr{};
  attr.id = kLaunchAttributeProgrammaticStreamSerialization;
  attr.value.programmatic_stream_serialization_allowed = 1;
  LaunchConfig config{};
  config.grid_dim_x = 7, config.grid_dim_y = 5, config.grid_dim_z = 3;
  config.block_dim_x = 256, config.block_dim_y = 1, config.block_dim_z = 1;
  config.shared_mem_bytes = 49152;
  config.stream = reinterpret_cast<void*>(0x1234);
  config.attrs = &attr;
  config.num_attrs = 1;

  CUlaunchConfig seen;
  std::memcpy(&seen, &config, sizeof seen);
  EXPECT_EQ(seen.gridDimX, 7u);
  EXPECT_EQ(seen.gridDimY, 5u);
  EXPECT_EQ(seen.gridDimZ, 3u);
  EXPECT_EQ(seen.blockDimX, 256u);
  EXPECT_EQ(seen.sharedMemBytes, 49152u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(seen.hStream), 0x1234u);
  EXPECT_EQ(seen.numAttrs, 1u);
  CUlaunchAttribute seen_attr;
  std::memcpy(&seen_attr, seen.attrs, sizeof seen_attr);
  EXPECT_EQ(seen_attr.id, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  EXPECT_EQ(seen_attr.value.programmaticStreamSerializationAllowed, 1);
}

#else

TEST(LaunchConfig, LayoutMatchesCudaH) { GTEST_SKIP() << "cuda.h (the CUDA toolkit) is not installed"; }

#endif

}  // namespace
