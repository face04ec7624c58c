// The runtime's cache of encoded tensor maps (runtime/cuda/tensor_map_cache.h): a hit
// only for the same map slot and the same base, extents and stride; least recently
// used replaced; each slot's maps kept apart.
#include <gtest/gtest.h>

#include <cstring>

#include "cuda/tensor_map_cache.h"

namespace {

using tessera::runtime::cuda::TensorMapCache;
using tessera::runtime::cuda::TensorMapFields;

struct Map {
  unsigned char bytes[TensorMapCache::kMapBytes];
  explicit Map(unsigned char fill) { std::memset(bytes, fill, sizeof bytes); }
};

TEST(TensorMapCache, HitsOnlyTheSameFields) {
  TensorMapCache cache;
  cache.resize(2);
  const TensorMapFields a{0x7f0000000000, 1024, 4096, 2048};
  Map out(0);
  EXPECT_FALSE(cache.find(0, a, out.bytes));
  cache.store(0, a, Map(7).bytes);
  ASSERT_TRUE(cache.find(0, a, out.bytes));
  EXPECT_EQ(out.bytes[0], 7);
  EXPECT_EQ(out.bytes[127], 7);
  // Any field changed: another pointer, shape or stride must be encoded again.
  for (TensorMapFields changed : {TensorMapFields{a.base + 4096, a.inner, a.outer, a.stride},
                                  TensorMapFields{a.base, a.inner + 8, a.outer, a.stride},
                                  TensorMapFields{a.base, a.inner, a.outer - 1, a.stride},
                                  TensorMapFields{a.base, a.inner, a.outer, a.stride * 2}})
    EXPECT_FALSE(cache.find(0, changed, out.bytes));
  EXPECT_FALSE(cache.find(1, a, out.bytes));  // the kernel's other map
  EXPECT_FALSE(cache.find(2, a, out.bytes));  // no such map: a miss, never out of bounds
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(cache.stores(), 1u);
}

TEST(TensorMapCache, ReplacesTheLeastRecentlyUsed) {
  TensorMapCache cache;
  cache.resize(1);
  Map out(0);
  auto fields = [](uint64_t i) { return TensorMapFields{0x1000 * (i + 1), 64, 64, 128}; };
  for (int i = 0; i < TensorMapCache::kWays; ++i) cache.store(0, fields(i), Map(static_cast<unsigned char>(i)).bytes);
  ASSERT_TRUE(cache.find(0, fields(0), out.bytes));  // 0 used again: 1 is now the oldest
  cache.store(0, fields(99), Map(99).bytes);
  EXPECT_FALSE(cache.find(0, fields(1), out.bytes));
  for (uint64_t i : {0, 2, 3, 99}) {
    ASSERT_TRUE(cache.find(0, fields(i), out.bytes)) << i;
    EXPECT_EQ(out.bytes[5], static_cast<unsigned char>(i));
  }
}

TEST(TensorMapCache, ResizeForgetsEverything) {
  TensorMapCache cache;
  cache.resize(1);
  const TensorMapFields a{0x2000, 8, 8, 16};
  cache.store(0, a, Map(1).bytes);
  cache.resize(1);
  Map out(0);
  EXPECT_FALSE(cache.find(0, a, out.bytes));
}

}  // namespace
