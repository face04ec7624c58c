// GoogleTests for analysis::AxisAnalysis on parsed Tile IR: aranges, splat +
// arange offsets, pointer tiles (1-D and the 2-D tiles of a matmul), values
// carried around a for loop, and hints.
#include <gtest/gtest.h>

#include "analysis/axis_info.h"
#include "ir/parser.h"
#include "ir/verifier.h"

namespace tessera::analysis {
namespace {

using ir::Kernel;
using ir::Op;
using ir::Value;
using V = std::vector<int64_t>;
constexpr int64_t kMaxDiv = int64_t(1) << 30;  // axis_info.cpp's "divisible by anything"

// A parsed, verified kernel whose ops are found by the line of their loc.
struct Analyzed {
  std::unique_ptr<Kernel> kernel;
  std::unique_ptr<AxisAnalysis> axis;

  explicit Analyzed(const std::string& text) : kernel(ir::parse_kernel(text)) {
    ir::verify_kernel(*kernel);
    axis = std::make_unique<AxisAnalysis>(*kernel);
  }
  Op* op_at(int line) const {
    Op* found = nullptr;
    ir::for_each_op(kernel->body(), [&](Op* op) {
      if (op->loc.line == line) found = op;
    });
    EXPECT_NE(found, nullptr) << "no op at line " << line;
    return found;
  }
  const AxisInfo& at(int line, int result = 0) const { return axis->get(op_at(line)->result(result)); }
};

void expect_info(const AxisInfo& a, V contiguity, V divisibility, V constancy) {
  EXPECT_EQ(a.contiguity, contiguity) << a.str();
  EXPECT_EQ(a.divisibility, divisibility) << a.str();
  EXPECT_EQ(a.constancy, constancy) << a.str();
}

TEST(AxisInfo, Arange) {
  Analyzed a(R"(kernel @k() {
  %0 = arange {start = 0, end = 128} : tile<128xi32> loc(1:1)
  %1 = arange {start = 64, end = 128} : tile<64xi32> loc(2:1)
  %2 = arange {start = 3, end = 7} : tile<4xi32> loc(3:1)
  return
})");
  expect_info(a.at(1), {128}, {kMaxDiv}, {1});
  expect_info(a.at(2), {64}, {64}, {1});
  expect_info(a.at(3), {4}, {1}, {1});
}

TEST(AxisInfo, ConstantsAndScalars) {
  Analyzed a(R"(kernel @k(%n: i32 {divisibility = 8}, %m: i32) {
  %0 = const {value = 12} : i32 loc(1:1)
  %1 = const {value = 20} : i32 loc(2:1)
  %2 = add %0, %1 : i32 loc(3:1)
  %3 = mul %n, %0 : i32 loc(4:1)
  %4 = const {value = 0} : tile<4x8xi32> loc(5:1)
  %5 = add %m, %n : i32 loc(6:1)
  return
})");
  expect_info(a.at(1), {1}, {4}, {1});
  EXPECT_EQ(a.at(1).constant, 12);
  EXPECT_EQ(a.at(3).constant, 32);
  EXPECT_EQ(a.at(3).divisibility, V{4});  // gcd of the operands' divisibility, not of the sum
  EXPECT_EQ(a.at(4).divisibility, V{32});
  EXPECT_FALSE(a.at(4).constant.has_value());
  expect_info(a.at(5), {1, 1}, {kMaxDiv, kMaxDiv}, {4, 8});
  EXPECT_EQ(a.at(5).constant, 0);
  EXPECT_EQ(a.at(6).divisibility, V{1});
}

// offs = splat(pid * 1024) + arange(0, 1024): runs of 1024 consecutive values
// starting at multiples of 1024.
TEST(AxisInfo, SplatPlusArange) {
  Analyzed a(R"(kernel @k(%x: ptr<f32> {divisibility = 16}, %y: ptr<f32>, %n: i32) {
  %0 = program_id {axis = 0} : i32 loc(1:1)
  %1 = const {value = 1024} : i32 loc(2:1)
  %2 = mul %0, %1 : i32 loc(3:1)
  %3 = splat %2 : tile<1024xi32> loc(4:1)
  %4 = arange {start = 0, end = 1024} : tile<1024xi32> loc(5:1)
  %5 = add %3, %4 : tile<1024xi32> loc(6:1)
  %6 = add %4, %3 : tile<1024xi32> loc(7:1)
  %7 = sub %5, %3 : tile<1024xi32> loc(8:1)
  %8 = splat %n : tile<1024xi32> loc(9:1)
  %9 = add %8, %4 : tile<1024xi32> loc(10:1)
  return
})");
  expect_info(a.at(4), {1}, {1024}, {1024});
  expect_info(a.at(6), {1024}, {1024}, {1});
  expect_info(a.at(7), {1024}, {1024}, {1});
  EXPECT_EQ(a.at(8).contiguity, V{1024}) << "x - splat keeps x's runs";
  expect_info(a.at(10), {1024}, {1}, {1});  // n: nothing known about its divisibility
}

// ptrs = addptr(splat(x), offs): contiguity in elements, divisibility in bytes.
TEST(AxisInfo, AddPtr) {
  Analyzed a(R"(kernel @k(%x: ptr<f32> {divisibility = 16}, %y: ptr<f16>, %o: i64 {divisibility = 4}) {
  %0 = program_id {axis = 0} : i32 loc(1:1)
  %1 = const {value = 256} : i32 loc(2:1)
  %2 = mul %0, %1 : i32 loc(3:1)
  %3 = splat %2 : tile<256xi32> loc(4:1)
  %4 = arange {start = 0, end = 256} : tile<256xi32> loc(5:1)
  %5 = add %3, %4 : tile<256xi32> loc(6:1)
  %6 = splat %x : tile<256xptr<f32>> loc(7:1)
  %7 = addptr %6, %5 : tile<256xptr<f32>> loc(8:1)
  %8 = splat %y : tile<256xptr<f16>> loc(9:1)
  %9 = addptr %8, %5 : tile<256xptr<f16>> loc(10:1)
  %10 = addptr %x, %o : ptr<f32> loc(11:1)
  return
})");
  expect_info(a.at(7), {1}, {16}, {256});
  expect_info(a.at(8), {256}, {16}, {1});   // gcd(16 bytes, 256 * 4 bytes)
  expect_info(a.at(10), {256}, {1}, {1});   // y: no divisibility known
  EXPECT_EQ(a.at(11).divisibility, V{16});  // gcd(16, 4 * 4 bytes)
}

// a_ptrs of a 32x16 f16 tile; stride_attr: stride_am's divisibility attribute or "".
std::string matmul_pointer_tiles(const std::string& stride_attr, const std::string& extra = "") {
  return "kernel @k(%a: ptr<f16> {divisibility = 16}, %stride_am: i32" + stride_attr + ") {\n" + R"(
  %0 = program_id {axis = 0} : i32 loc(1:1)
  %1 = const {value = 32} : i32 loc(2:1)
  %2 = mul %0, %1 : i32 loc(3:1)
  %3 = splat %2 : tile<32xi32> loc(4:1)
  %4 = arange {start = 0, end = 32} : tile<32xi32> loc(5:1)
  %5 = add %3, %4 : tile<32xi32> loc(6:1)
  %6 = expand_dims %5 {axis = 1} : tile<32x1xi32> loc(7:1)
  %7 = splat %stride_am : tile<32x1xi32> loc(8:1)
  %8 = mul %6, %7 : tile<32x1xi32> loc(9:1)
  %9 = broadcast %8 : tile<32x16xi32> loc(10:1)
  %10 = arange {start = 0, end = 16} : tile<16xi32> loc(11:1)
  %11 = expand_dims %10 {axis = 0} : tile<1x16xi32> loc(12:1)
  %12 = broadcast %11 : tile<32x16xi32> loc(13:1)
  %13 = add %9, %12 : tile<32x16xi32> loc(14:1)
  %14 = splat %a : tile<32x16xptr<f16>> loc(15:1)
  %15 = addptr %14, %13 : tile<32x16xptr<f16>> loc(16:1)
)" + extra + "  return\n}";
}

// The 2-D pointer tiles of a matmul:
//   a_ptrs = a + (offs_m[:, None] * stride_am) + offs_k[None, :]
// rows start anywhere (stride unknown beyond 16), columns are 16 contiguous f16.
TEST(AxisInfo, MatmulPointerTiles) {
  Analyzed a(matmul_pointer_tiles(" {divisibility = 16}"));
  // offs_m[:, None]: runs of 32 start at multiples of 32 along axis 0; along the new
  // axis 1 every element is a run of one, and pid * 32 + 1 is odd: divisibility 1.
  expect_info(a.at(7), {32, 1}, {32, 1}, {1, 1});
  // offs_m[:, None] * stride_am: runs of one, and (pid * 32 + 1) * 16 is divisible by
  // 16 only (not 32 * 16: that holds at offs_m's run starts, not at every element).
  expect_info(a.at(9), {1, 1}, {16, 16}, {1, 1});
  expect_info(a.at(10), {1, 1}, {16, 16}, {1, 16});
  // offs_k[None, :] likewise: along the new axis 0 its elements 0..15 include odd ones.
  expect_info(a.at(12), {1, 16}, {1, kMaxDiv}, {1, 1});
  expect_info(a.at(13), {1, 16}, {1, kMaxDiv}, {32, 1});
  expect_info(a.at(14), {1, 16}, {1, 16}, {1, 1});
  expect_info(a.at(16), {1, 16}, {2, 16}, {1, 1});  // rows of 16 f16 starting 16-byte aligned
}

// The same tiles with a row stride nothing is known of (lda = 204 f16: 408-byte rows):
// each row's 16 contiguous elements start only 2-byte aligned, so no load or cp.async
// may be wider than one element. (Taking the divisibility of offs_m's run starts for
// the new axis claimed 16 bytes here, and a 16-byte cp.async ring faulted on an H100.)
TEST(AxisInfo, MatmulPointerTilesUnknownRowStride) {
  Analyzed a(matmul_pointer_tiles("", R"(  %16 = const {value = 4} : i32 loc(17:1)
  %17 = splat %16 : tile<1xi32> loc(18:1)
  %18 = expand_dims %17 {axis = 0} : tile<1x1xi32> loc(19:1)
)"));
  expect_info(a.at(9), {1, 1}, {1, 1}, {1, 1});
  expect_info(a.at(16), {1, 16}, {2, 2}, {1, 1});
  EXPECT_EQ(a.at(19).divisibility, V({4, 4}));  // a constant keeps its own divisor
}

// Pointer tiles carried around the K loop keep their facts when the increment
// keeps them; an offset that loses divisibility in the body loses it at entry.
TEST(AxisInfo, LoopCarriedPointerTiles) {
  Analyzed a(R"(kernel @k(%a: ptr<f32> {divisibility = 16}, %K: i32) {
  %0 = arange {start = 0, end = 16} : tile<16xi32> loc(1:1)
  %1 = splat %a : tile<16xptr<f32>> loc(2:1)
  %2 = addptr %1, %0 : tile<16xptr<f32>> loc(3:1)
  %3 = const {value = 0} : i32 loc(4:1)
  %4 = const {value = 16} : i32 loc(5:1)
  %5, %6 = for %3, %K, %4, %2, %0 : tile<16xptr<f32>>, tile<16xi32> {
  ^(%k: i32, %p: tile<16xptr<f32>>, %offs: tile<16xi32>):
    %7 = load %p : tile<16xf32> loc(6:1)
    %8 = splat %4 : tile<16xi32> loc(7:1)
    %9 = addptr %p, %8 : tile<16xptr<f32>> loc(8:1)
    %10 = const {value = 3} : tile<16xi32> loc(9:1)
    %11 = add %offs, %10 : tile<16xi32> loc(10:1)
    yield %9, %11 loc(11:1)
  } loc(12:1)
  return
})");
  Op* loop = a.op_at(12);
  const ir::Block& body = *loop->regions[0]->block;
  expect_info(a.axis->get(body.args[1].get()), {16}, {16}, {1});
  expect_info(a.at(8), {16}, {16}, {1});
  expect_info(a.at(12, 0), {16}, {16}, {1});
  expect_info(a.axis->get(body.args[2].get()), {16}, {1}, {1});
  expect_info(a.at(12, 1), {16}, {1}, {1});
  EXPECT_EQ(a.axis->get(body.args[0].get()).divisibility, V{16});  // the induction variable: 0 + 16 j
}

// The induction variable is divisible by gcd(div(lb), div(step)), so K - k keeps K's
// divisibility: the GPU lowering's mask_constancy then sees a K-edge mask written
// against the loop variable (`rk < K - k`) constant over 16-byte runs, which the
// cp.async ring needs (without it kernels/linear.py fell back to plain loads).
TEST(AxisInfo, InductionVariableDivisibility) {
  Analyzed a(R"(kernel @k(%K: i32 {divisibility = 16}, %lb: i32 {divisibility = 8}, %n: i32) {
  %0 = arange {start = 0, end = 64} : tile<64xi32> loc(1:1)
  %1 = const {value = 0} : i32 loc(2:1)
  %2 = const {value = 64} : i32 loc(3:1)
  for %1, %K, %2 {
  ^(%k: i32):
    %3 = sub %K, %k : i32 loc(4:1)
    %4 = splat %3 : tile<64xi32> loc(5:1)
    %5 = cmp %0, %4 {pred = "lt"} : tile<64xi1> loc(6:1)
    yield loc(7:1)
  } loc(8:1)
  for %lb, %K, %2 {
  ^(%j: i32):
    yield loc(9:1)
  } loc(10:1)
  for %1, %K, %n {
  ^(%i: i32):
    yield loc(11:1)
  } loc(12:1)
  return
})");
  auto iv_div = [&](int line) { return a.axis->get(a.op_at(line)->regions[0]->block->args[0].get()).divisibility; };
  EXPECT_EQ(iv_div(8), V{64});
  EXPECT_EQ(iv_div(10), V{8});
  EXPECT_EQ(iv_div(12), V{1});  // a step of unknown divisibility
  expect_info(a.at(4), {1}, {16}, {1});
}

// A loop-carried value that changes shape of its facts every trip: the analysis
// must still terminate, with facts that hold at every trip.
TEST(AxisInfo, LoopFixpointTerminates) {
  Analyzed a(R"(kernel @k(%K: i32) {
  %0 = const {value = 1024} : tile<8xi32> loc(1:1)
  %1 = const {value = 0} : i32 loc(2:1)
  %2 = const {value = 1} : i32 loc(3:1)
  %3 = for %1, %K, %2, %0 : tile<8xi32> {
  ^(%k: i32, %v: tile<8xi32>):
    %4 = const {value = 2} : tile<8xi32> loc(4:1)
    %5 = mul %v, %4 : tile<8xi32> loc(5:1)
    %6 = const {value = 1} : tile<8xi32> loc(6:1)
    %7 = sub %5, %6 : tile<8xi32> loc(7:1)
    yield %7 loc(8:1)
  } loc(9:1)
  return
})");
  const AxisInfo& r = a.at(9);
  EXPECT_EQ(r.divisibility, V{1});
  EXPECT_FALSE(r.constant.has_value());
}

// Loaded offsets are unknown until a hint (multiple_of / max_contiguous) says so.
TEST(AxisInfo, HintRaisesFacts) {
  Analyzed a(R"(kernel @k(%p: ptr<i32> {divisibility = 16}) {
  %0 = splat %p : tile<64xptr<i32>> loc(1:1)
  %1 = arange {start = 0, end = 64} : tile<64xi32> loc(2:1)
  %2 = addptr %0, %1 : tile<64xptr<i32>> loc(3:1)
  %3 = load %2 : tile<64xi32> loc(4:1)
  %4 = hint %3 {contiguity = [64], divisibility = [16], constancy = [1]} : tile<64xi32> loc(5:1)
  %5 = addptr %0, %4 : tile<64xptr<i32>> loc(6:1)
  %6 = addptr %0, %3 : tile<64xptr<i32>> loc(7:1)
  %7 = hint %1 {divisibility = [8]} : tile<64xi32> loc(8:1)
  return
})");
  expect_info(a.at(4), {1}, {1}, {1});
  expect_info(a.at(5), {64}, {16}, {1});
  expect_info(a.at(6), {64}, {16}, {1});
  expect_info(a.at(7), {1}, {4}, {1});  // unhinted: only i32 alignment survives
  expect_info(a.at(8), {64}, {kMaxDiv}, {1});  // hints never lower what is known
}

// The rules below were found unsound by test_axis_info_fuzz.cpp; each case is the
// smallest form of one, with the fact the rule used to claim.

// offs * stride with offs in runs: every element of the product is a run start, and
// offs's elements inside its runs are not divisible by offs's run-start divisibility.
// (offs_m * stride_am)[:, None] + offs_k[None, :] with an odd stride claimed 16-byte
// rows (div(offs_m) = 32 carried to every element): the expand_dims fault again.
TEST(AxisInfo, MulDividesEveryElementByTheFactorsElementDivisibility) {
  Analyzed a(R"(kernel @k(%a: ptr<f16> {divisibility = 16}, %stride: i32) {
  %0 = arange {start = 0, end = 4} : tile<4xi32> loc(1:1)
  %1 = const {value = 2} : tile<4xi32> loc(2:1)
  %2 = mul %0, %1 : tile<4xi32> loc(3:1)
  %3 = program_id {axis = 0} : i32 loc(4:1)
  %4 = const {value = 32} : i32 loc(5:1)
  %5 = mul %3, %4 : i32 loc(6:1)
  %6 = splat %5 : tile<32xi32> loc(7:1)
  %7 = arange {start = 0, end = 32} : tile<32xi32> loc(8:1)
  %8 = add %6, %7 : tile<32xi32> loc(9:1)
  %9 = splat %stride : tile<32xi32> loc(10:1)
  %10 = mul %8, %9 : tile<32xi32> loc(11:1)
  %11 = expand_dims %10 {axis = 1} : tile<32x1xi32> loc(12:1)
  %12 = broadcast %11 : tile<32x16xi32> loc(13:1)
  %13 = arange {start = 0, end = 16} : tile<16xi32> loc(14:1)
  %14 = expand_dims %13 {axis = 0} : tile<1x16xi32> loc(15:1)
  %15 = broadcast %14 : tile<32x16xi32> loc(16:1)
  %16 = add %12, %15 : tile<32x16xi32> loc(17:1)
  %17 = splat %a : tile<32x16xptr<f16>> loc(18:1)
  %18 = addptr %17, %16 : tile<32x16xptr<f16>> loc(19:1)
  return
})");
  expect_info(a.at(3), {1}, {2}, {1});  // [0, 2, 4, 6], not 2^30
  expect_info(a.at(11), {1}, {1}, {1});  // was 32
  expect_info(a.at(19), {1, 16}, {2, 2}, {1, 1});  // rows 2-byte aligned, not 16
}

// x + y with y constant in pairs only: the sum's runs are pairs, and the pair starting
// at x's element 2 is divisible by 2, not by div(y) = 4.
TEST(AxisInfo, AddDividesItsShorterRunsStarts) {
  Analyzed a(R"(kernel @k(%p: ptr<i32> {divisibility = 16}) {
  %0 = arange {start = 0, end = 8} : tile<8xi32> loc(1:1)
  %1 = splat %p : tile<8xptr<i32>> loc(2:1)
  %2 = addptr %1, %0 : tile<8xptr<i32>> loc(3:1)
  %3 = load %2 : tile<8xi32> loc(4:1)
  %4 = hint %3 {divisibility = [4], constancy = [2]} : tile<8xi32> loc(5:1)
  %5 = add %0, %4 : tile<8xi32> loc(6:1)
  %6 = addptr %2, %4 : tile<8xptr<i32>> loc(7:1)
  return
})");
  expect_info(a.at(6), {2}, {2}, {1});  // was divisibility 4
  expect_info(a.at(7), {2}, {8}, {1});  // pairs start at 16-byte base + 8 bytes: 8, was 16
}

// (a + i) % m stays contiguous only where a >= 0 and a's runs start at multiples of
// what divides m; the remainder's divisibility holds at its own run starts.
TEST(AxisInfo, RemRunsNeedANonNegativeAlignedDividend) {
  Analyzed a(R"(kernel @k(%M: i32 {divisibility = 16}, %n: i32 {divisibility = 64}) {
  %0 = program_id {axis = 0} : i32 loc(1:1)
  %1 = const {value = 64} : i32 loc(2:1)
  %2 = mul %0, %1 : i32 loc(3:1)
  %3 = splat %2 : tile<64xi32> loc(4:1)
  %4 = arange {start = 0, end = 64} : tile<64xi32> loc(5:1)
  %5 = add %3, %4 : tile<64xi32> loc(6:1)
  %6 = splat %M : tile<64xi32> loc(7:1)
  %7 = rem %5, %6 : tile<64xi32> loc(8:1)
  %8 = arange {start = 1, end = 5} : tile<4xi32> loc(9:1)
  %9 = const {value = 4} : tile<4xi32> loc(10:1)
  %10 = rem %8, %9 : tile<4xi32> loc(11:1)
  %11 = splat %n : tile<64xi32> loc(12:1)
  %12 = add %11, %4 : tile<64xi32> loc(13:1)
  %13 = rem %12, %6 : tile<64xi32> loc(14:1)
  %14 = arange {start = 0, end = 4} : tile<4xi32> loc(15:1)
  %15 = mul %14, %9 : tile<4xi32> loc(16:1)
  %16 = add %15, %9 : tile<4xi32> loc(17:1)
  %17 = rem %14, %16 : tile<4xi32> loc(18:1)
  return
})");
  expect_info(a.at(8), {16}, {16}, {1});  // the matmul's offs % M: kept
  EXPECT_TRUE(a.at(8).nonnegative);
  expect_info(a.at(11), {1}, {1}, {1});   // [1, 2, 3, 0], was contiguity 4
  expect_info(a.at(14), {1}, {1}, {1});   // n may be negative: -64 % 16 = 0, -63 % 16 = -15; was 16
  expect_info(a.at(18), {1}, {1}, {1});   // [0, 1, 2, 3] % [4, 8, 12, 16]: was divisibility 4
}

// A cast that changes values (i32 -> u32 of a negative, narrowing) keeps each element's
// divisibility and the constancy but no runs; a value-preserving one keeps everything.
TEST(AxisInfo, CastsThatChangeValuesDropRuns) {
  Analyzed a(R"(kernel @k() {
  %0 = const {value = -4} : tile<4xi32> loc(1:1)
  %1 = cast %0 : tile<4xu32> loc(2:1)
  %2 = arange {start = -2, end = 2} : tile<4xi32> loc(3:1)
  %3 = cast %2 : tile<4xu32> loc(4:1)
  %4 = cast %3 : tile<4xi64> loc(5:1)
  %5 = arange {start = 0, end = 4} : tile<4xi32> loc(6:1)
  %6 = cast %5 : tile<4xu32> loc(7:1)
  %7 = cast %2 : tile<4xi64> loc(8:1)
  %8 = const {value = 8} : tile<4xi32> loc(9:1)
  %9 = mul %5, %8 : tile<4xi32> loc(10:1)
  %10 = cast %9 : tile<4xi16> loc(11:1)
  return
})");
  EXPECT_EQ(a.at(2).constant, 4294967292);  // was -4
  expect_info(a.at(2), {1}, {4}, {4});
  expect_info(a.at(5), {1}, {1}, {1});  // [4294967294, 4294967295, 0, 1]: was contiguity 4
  expect_info(a.at(7), {4}, {kMaxDiv}, {1});  // non-negative: the same values
  expect_info(a.at(8), {4}, {2}, {1});        // sign extension keeps values
  expect_info(a.at(11), {1}, {8}, {1});       // truncation keeps the low bits
}

// A loop-carried value is contiguous at entry and scaled in the body: at some trip it
// is each, so its divisibility is what holds for both at every element.
TEST(AxisInfo, LoopJoinDividesAtTheJoinedRunStarts) {
  Analyzed a(R"(kernel @k(%K: i32) {
  %0 = arange {start = 0, end = 16} : tile<16xi32> loc(1:1)
  %1 = const {value = 0} : i32 loc(2:1)
  %2 = const {value = 1} : i32 loc(3:1)
  %3 = for %1, %K, %2, %0 : tile<16xi32> {
  ^(%k: i32, %v: tile<16xi32>):
    %4 = const {value = 8} : tile<16xi32> loc(4:1)
    %5 = mul %v, %4 : tile<16xi32> loc(5:1)
    yield %5 loc(6:1)
  } loc(7:1)
  return
})");
  const ir::Block& body = *a.op_at(7)->regions[0]->block;
  expect_info(a.axis->get(body.args[1].get()), {1}, {1}, {1});  // was divisibility 8: element 1 at trip 0 is 1
  expect_info(a.at(7), {1}, {1}, {1});
  expect_info(a.at(5), {1}, {8}, {1});
  EXPECT_TRUE(a.axis->get(body.args[0].get()).nonnegative);  // 0 + j * 1
}

// A mask `offs < n` is constant over runs where offs's runs start at multiples of g
// and n is a multiple of g (the NVPTX access width reads this constancy).
TEST(AxisInfo, EdgeMaskConstancy) {
  Analyzed a(R"(kernel @k(%n: i32 {divisibility = 8}) {
  %0 = program_id {axis = 0} : i32 loc(1:1)
  %1 = const {value = 64} : i32 loc(2:1)
  %2 = mul %0, %1 : i32 loc(3:1)
  %3 = splat %2 : tile<64xi32> loc(4:1)
  %4 = arange {start = 0, end = 64} : tile<64xi32> loc(5:1)
  %5 = add %3, %4 : tile<64xi32> loc(6:1)
  %6 = splat %n : tile<64xi32> loc(7:1)
  %7 = cmp %5, %6 {pred = "lt"} : tile<64xi1> loc(8:1)
  %8 = cmp %6, %5 {pred = "gt"} : tile<64xi1> loc(9:1)
  %9 = cmp %5, %6 {pred = "ge"} : tile<64xi1> loc(10:1)
  %10 = cmp %5, %6 {pred = "le"} : tile<64xi1> loc(11:1)
  %11 = cmp %6, %5 {pred = "lt"} : tile<64xi1> loc(12:1)
  %12 = and %7, %9 : tile<64xi1> loc(13:1)
  %13 = expand_dims %7 {axis = 0} : tile<1x64xi1> loc(14:1)
  %14 = broadcast %13 : tile<4x64xi1> loc(15:1)
  return
})");
  EXPECT_EQ(a.at(8).constancy, V{8});   // offs < n
  EXPECT_EQ(a.at(9).constancy, V{8});   // n > offs
  EXPECT_EQ(a.at(10).constancy, V{8});  // offs >= n
  EXPECT_EQ(a.at(11).constancy, V{1});  // offs <= n: true at offs = n, false at n + 1
  EXPECT_EQ(a.at(12).constancy, V{1});  // n < offs, the same
  EXPECT_EQ(a.at(13).constancy, V{8});
  EXPECT_EQ(a.at(15).constancy, V({4, 8}));
}

// permute carries each dim's facts to its new place.
TEST(AxisInfo, PermuteMovesFacts) {
  Analyzed a(R"(kernel @k() {
  %0 = arange {start = 0, end = 16} : tile<16xi32> loc(1:1)
  %1 = expand_dims %0 {axis = 0} : tile<1x16xi32> loc(2:1)
  %2 = broadcast %1 : tile<4x16xi32> loc(3:1)
  %3 = permute %2 {order = [1, 0]} : tile<16x4xi32> loc(4:1)
  return
})");
  expect_info(a.at(3), {1, 16}, {1, kMaxDiv}, {4, 1});
  expect_info(a.at(4), {16, 1}, {kMaxDiv, 1}, {1, 4});
  EXPECT_TRUE(a.at(4).nonnegative);
}

// x << k is x * 2^k; offs // GROUP is constant over GROUP-long runs of non-negative
// offsets (not of offsets of unknown sign: -4 / 4 = -1, -3 / 4 = 0).
TEST(AxisInfo, ShiftByConstantAndDivisionIntoGroups) {
  Analyzed a(R"(kernel @k(%n: i32 {divisibility = 64}) {
  %0 = program_id {axis = 0} : i32 loc(1:1)
  %1 = const {value = 64} : i32 loc(2:1)
  %2 = mul %0, %1 : i32 loc(3:1)
  %3 = splat %2 : tile<64xi32> loc(4:1)
  %4 = arange {start = 0, end = 64} : tile<64xi32> loc(5:1)
  %5 = add %3, %4 : tile<64xi32> loc(6:1)
  %6 = const {value = 4} : tile<64xi32> loc(7:1)
  %7 = div %5, %6 : tile<64xi32> loc(8:1)
  %8 = const {value = 2} : tile<64xi32> loc(9:1)
  %9 = shl %5, %8 : tile<64xi32> loc(10:1)
  %10 = splat %n : tile<64xi32> loc(11:1)
  %11 = add %10, %4 : tile<64xi32> loc(12:1)
  %12 = div %11, %6 : tile<64xi32> loc(13:1)
  return
})");
  expect_info(a.at(8), {1}, {1}, {4});
  expect_info(a.at(10), {1}, {4}, {1});
  expect_info(a.at(13), {1}, {1}, {1});
}

}  // namespace
}  // namespace tessera::analysis
