// The tensor-map descriptions the compiler hands the runtime (metadata "tensor_maps",
// runtime/include/tessera/tensor_map_spec.h): parsing, reading extents from packed
// launch parameters, and malformed text refused.
#include <gtest/gtest.h>

#include <cstdint>

#include "tessera/tensor_map_spec.h"

namespace {

using tessera::runtime::parse_tensor_maps;

TEST(TensorMapSpec, ParsesTheBenchMatmulMaps) {
  auto t = parse_tensor_maps("9|0:2:128:64:128:i5:i3:i6|1:2:128:64:64:i4:i5:l7");
  EXPECT_EQ(t.num_params, 9);
  ASSERT_EQ(t.maps.size(), 2u);
  EXPECT_EQ(t.maps[0].base_param, 0);
  EXPECT_EQ(t.maps[0].elem_bytes, 2);
  EXPECT_EQ(t.maps[0].swizzle_bytes, 128);
  EXPECT_EQ(t.maps[0].box_inner, 64);
  EXPECT_EQ(t.maps[0].box_outer, 128);
  EXPECT_EQ(t.maps[0].dim_inner.kind, 'i');
  EXPECT_EQ(t.maps[0].dim_inner.value, 5);
  EXPECT_EQ(t.maps[1].stride_outer.kind, 'l');
  EXPECT_EQ(t.maps[1].stride_outer.value, 7);
  EXPECT_TRUE(parse_tensor_maps("").maps.empty());
}

TEST(TensorMapSpec, ReadsExtentsFromPackedSlots) {
  // Slots as the launch packs them: 8 bytes each, an i32 in the low 4 bytes.
  uint64_t slots[3] = {0xFFFFFFFFull /* i32 -1 */, 4096, (uint64_t{1} << 40) + 3};
  void* params[3] = {&slots[0], &slots[1], &slots[2]};
  auto t = parse_tensor_maps("3|0:2:64:32:64:i0:u0:l2");
  EXPECT_EQ(t.maps[0].dim_inner.read(params), -1);  // sign-extended: the runtime's "empty" case
  EXPECT_EQ(t.maps[0].dim_outer.read(params), 0xFFFFFFFFll);
  EXPECT_EQ(t.maps[0].stride_outer.read(params), (int64_t{1} << 40) + 3);
  tessera::runtime::TensorMapExtent c;
  c.kind = 'c';
  c.value = 77;
  EXPECT_EQ(c.read(params), 77);
}

TEST(TensorMapSpec, RefusesMalformedText) {
  for (const char* bad : {"x", "2|0:2:128:64", "2|0:2:128:64:128:i5:i0:i1",  // parameter 5 of 2
                          "2|0:2:128:64:128:q1:i0:i1", "2|3:2:128:64:128:c1:c1:c8", "2|0:2:128:64:128:i:c1:c8"})
    EXPECT_THROW(parse_tensor_maps(bad), std::invalid_argument) << bad;
}

}  // namespace
