// analysis/written_args: which pointer arguments stores and atomics write through.
#include <gtest/gtest.h>

#include "analysis/written_args.h"
#include "ir/parser.h"

namespace {

using tessera::analysis::written_pointer_args;
using tessera::ir::parse_kernel;

// a: stored through a loop-carried pointer; b, c: atomics through a select of both;
// d: only loaded.
const char* kLoopSelectAtomic = R"(kernel @k(%a: ptr<f32>, %b: ptr<f32>, %c: ptr<f32>, %d: ptr<f32>, %n: i32, %flag: i32) {
  %0 = arange {end = 16, start = 0} : tile<16xi32> loc(4:12)
  %1 = splat %a : tile<16xptr<f32>> loc(5:9)
  %2 = addptr %1, %0 : tile<16xptr<f32>> loc(5:9)
  %3 = const {value = 0} : i32 loc(6:5)
  %4 = const {value = 1} : i32 loc(6:5)
  %5 = const {value = 16} : tile<16xi32> loc(7:9)
  %6 = for %3, %n, %4, %2 : tile<16xptr<f32>> {
    ^(%7: i32, %8: tile<16xptr<f32>>):
    %9 = addptr %8, %5 : tile<16xptr<f32>> loc(7:9)
    yield %9 loc(6:5)
  } loc(6:5)
  %10 = cmp %flag, %3 {pred = "gt"} : i1 loc(8:18)
  %11 = select %10, %b, %c : ptr<f32> loc(8:9)
  %12 = splat %d : tile<16xptr<f32>> loc(9:25)
  %13 = addptr %12, %0 : tile<16xptr<f32>> loc(9:25)
  %14 = load %13 : tile<16xf32> loc(9:17)
  store %6, %14 loc(9:5)
  %15 = splat %11 : tile<16xptr<f32>> loc(10:19)
  %16 = addptr %15, %0 : tile<16xptr<f32>> loc(10:19)
  %17 = const {value = 1.0} : tile<16xf32> loc(10:5)
  %18 = atomic_rmw %16, %17 {kind = "fadd"} : tile<16xf32> loc(10:5)
  return loc(10:5)
}
)";

TEST(WrittenArgs, FollowsLoopCarriedPointersSelectsAndAtomics) {
  auto k = parse_kernel(kLoopSelectAtomic);
  EXPECT_EQ(written_pointer_args(*k), (std::vector<int>{0, 1, 2}));
}

TEST(WrittenArgs, ALoadOnlyKernelWritesNothing) {
  auto k = parse_kernel(R"(kernel @k(%a: ptr<f32>) {
  %0 = load %a : f32 loc(1:1)
  return loc(2:1)
}
)");
  EXPECT_TRUE(written_pointer_args(*k).empty());
}

}  // namespace
