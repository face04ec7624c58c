// The NVPTX back end: hand-written Tile IR kernels compile to PTX for sm_90a and
// sm_80, the PTX assembles with ptxas (skipped when the CUDA toolkit is absent),
// and the PTX shows the intended instructions (vector accesses, warp shuffles).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

#include "codegen/nvptx/blocked_layout.h"
#include "ptx_test_util.h"
#include "tessera/compiler.h"

namespace {

using tessera::codegen::nvptx::BlockedLayout;
using tessera::codegen::nvptx::IndexBit;
using tessera::codegen::nvptx::make_blocked_layout;

// tile<1024xf32>, 4 warps, vec 4: index bits [r0, r1, t0..t6, r2].
TEST(BlockedLayout, VectorAddLayout) {
  BlockedLayout l = make_blocked_layout({1024}, 4, 128);
  EXPECT_EQ(l.str(), "[r0,r1,t0,t1,t2,t3,t4,t5,t6,r2]");
  EXPECT_EQ(l.num_regs(), 8);
  EXPECT_EQ(l.contiguous_regs(), 4);
  EXPECT_EQ(l.thread_mask, 127u);
  auto s = l.index_of(5);  // register 5 = element 512 + 4t + 1
  EXPECT_EQ(s[0][0].kind, IndexBit::One);
  EXPECT_EQ(s[0][2].kind, IndexBit::Thread);
  EXPECT_EQ(s[0][9].kind, IndexBit::One);
  EXPECT_EQ(l.find(s), 5);
  s[0][2] = IndexBit{IndexBit::Zero, 0};  // an element another thread holds
  EXPECT_FALSE(l.find(s).has_value());
}

// Small tiles replicate: tile<16xf32> on 128 threads uses 4 thread bits.
TEST(BlockedLayout, SmallTilesReplicate) {
  BlockedLayout l = make_blocked_layout({16}, 1, 128);
  EXPECT_EQ(l.str(), "[t0,t1,t2,t3]");
  EXPECT_EQ(l.num_regs(), 1);
  EXPECT_EQ(l.thread_mask, 15u);
}

// A row reduction of tile<4x256xf32> keeps the row bits: [t6, r0] after slicing.
TEST(BlockedLayout, SliceAndCollapse) {
  BlockedLayout l = make_blocked_layout({4, 256}, 4, 128);
  EXPECT_EQ(l.str(), "[t6,r2; r0,r1,t0,t1,t2,t3,t4,t5]");
  BlockedLayout rows = l.slice(1);
  EXPECT_EQ(rows.str(), "[t6,r0]");
  EXPECT_EQ(rows.num_regs(), 2);
  EXPECT_EQ(rows.thread_mask, 64u);
  BlockedLayout col = l.collapse(0);  // a [1,256] operand broadcast along rows
  EXPECT_EQ(col.str(), "[; r0,r1,t0,t1,t2,t3,t4,t5]");
  EXPECT_EQ(col.num_regs(), 4);
  EXPECT_EQ(col.find(col.index_of(3)), 3);
}

using tessera_test::compile_gpu;
using tessera_test::count;
using tessera_test::have_ptxas;
using tessera_test::ptxas;

// Compiles for both architectures, checks the result's shape and that ptxas
// accepts the PTX; returns the sm_90a PTX.
std::string compile_and_assemble(const std::string& ir, int num_warps = 4) {
  std::string ptx90;
  for (auto [target, arch] : {std::pair<std::string, std::string>{"cuda:90a", "sm_90a"}, {"cuda:80", "sm_80"}}) {
    tessera::CompileResult r = compile_gpu(ir, target, num_warps);
    EXPECT_EQ(r.binary_kind, "ptx");
    EXPECT_EQ(r.stage_order, (std::vector<std::string>{"tir", "tir-opt", "llir", "llir-opt", "ptx"}));
    EXPECT_EQ(r.binary, r.stages.at("ptx"));
    EXPECT_EQ(r.entry_symbol, r.kernel_name);
    EXPECT_EQ(r.metadata.at("num_warps"), std::to_string(num_warps));
    EXPECT_NE(r.binary.find(".entry " + r.kernel_name), std::string::npos) << r.binary;
    EXPECT_NE(r.binary.find(".target " + arch), std::string::npos);
    if (have_ptxas()) EXPECT_EQ(ptxas(r.binary, arch), "") << r.binary;
    if (arch == "sm_90a") ptx90 = r.binary;
  }
  return ptx90;
}

const char* kVectorAdd = R"(
kernel @add_kernel(%x_ptr: ptr<f32> {divisibility = 16}, %y_ptr: ptr<f32> {divisibility = 16}, %out_ptr: ptr<f32> {divisibility = 16}, %n_elements: i32 {divisibility = 16}) attributes {file = "/t/add.py", num_warps = 4} {
  %0 = program_id {axis = 0} : i32 loc(4:11)
  %1 = const {value = 1024} : i32 loc(5:15)
  %2 = mul %0, %1 : i32 loc(5:15)
  %3 = arange {end = 1024, start = 0} : tile<1024xi32> loc(5:31)
  %4 = splat %2 : tile<1024xi32> loc(5:15)
  %5 = add %4, %3 : tile<1024xi32> loc(5:15)
  %6 = splat %n_elements : tile<1024xi32> loc(6:12)
  %7 = cmp %5, %6 {pred = "lt"} : tile<1024xi1> loc(6:12)
  %8 = splat %x_ptr : tile<1024xptr<f32>> loc(7:17)
  %9 = addptr %8, %5 : tile<1024xptr<f32>> loc(7:17)
  %10 = load %9, %7 : tile<1024xf32> loc(7:9)
  %11 = splat %y_ptr : tile<1024xptr<f32>> loc(8:17)
  %12 = addptr %11, %5 : tile<1024xptr<f32>> loc(8:17)
  %13 = load %12, %7 : tile<1024xf32> loc(8:9)
  %14 = splat %out_ptr : tile<1024xptr<f32>> loc(9:14)
  %15 = addptr %14, %5 : tile<1024xptr<f32>> loc(9:14)
  %16 = add %10, %13 : tile<1024xf32> loc(9:33)
  store %15, %16, %7 loc(9:5)
  return loc(9:5)
}
)";

TEST(NvptxCodegen, VectorAddUsesV4Accesses) {
  std::string ptx = compile_and_assemble(kVectorAdd);
  // 1024 floats over 128 threads: two runs of 4 per thread and per array.
  EXPECT_EQ(count(ptx, "ld.global.v4.f32"), 4) << ptx;
  EXPECT_EQ(count(ptx, "st.global.v4.f32"), 2) << ptx;
  EXPECT_EQ(count(ptx, "ld.global.f32"), 0) << ptx;
  EXPECT_NE(ptx.find("%ctaid.x"), std::string::npos);
  EXPECT_NE(ptx.find(".maxntid 128, 1, 1"), std::string::npos) << ptx;
}

TEST(NvptxCodegen, VectorAddWithoutAlignmentUsesScalarAccesses) {
  // No divisibility facts: pointers may be 4-byte aligned only, n arbitrary.
  std::string ir = kVectorAdd;
  for (const char* s : {" {divisibility = 16}"}) {
    for (size_t p = ir.find(s); p != std::string::npos; p = ir.find(s)) ir.erase(p, std::string(s).size());
  }
  std::string ptx = compile_and_assemble(ir);
  EXPECT_EQ(count(ptx, "ld.global.v4.f32"), 0) << ptx;
  EXPECT_EQ(count(ptx, "ld.global.f32"), 16) << ptx;
}

TEST(NvptxCodegen, NumWarpsChangesThreadsAndRuns) {
  std::string ir = kVectorAdd;
  ir.replace(ir.find("num_warps = 4"), 13, "num_warps = 8");
  std::string ptx = compile_and_assemble(ir, 8);
  EXPECT_EQ(count(ptx, "ld.global.v4.f32"), 2) << ptx;  // 1024 / 256 threads = one run of 4
  EXPECT_NE(ptx.find(".maxntid 256, 1, 1"), std::string::npos) << ptx;
}

// out[i, j] = x[i] + y[j] for a 16x64 tile: [16,1] and [1,64] loads broadcast.
TEST(NvptxCodegen, Broadcast2D) {
  const char* ir = R"(
kernel @outer_add(%x: ptr<f32> {divisibility = 16}, %y: ptr<f32> {divisibility = 16}, %out: ptr<f32> {divisibility = 16}) attributes {file = "/t/b.py", num_warps = 4} {
  %r = arange {start = 0, end = 16} : tile<16xi32> loc(1:1)
  %c = arange {start = 0, end = 64} : tile<64xi32> loc(1:2)
  %re = expand_dims %r {axis = 1} : tile<16x1xi32> loc(1:3)
  %ce = expand_dims %c {axis = 0} : tile<1x64xi32> loc(1:4)
  %xs = splat %x : tile<16x1xptr<f32>> loc(2:1)
  %xp = addptr %xs, %re : tile<16x1xptr<f32>> loc(2:2)
  %xv = load %xp : tile<16x1xf32> loc(2:3)
  %ys = splat %y : tile<1x64xptr<f32>> loc(3:1)
  %yp = addptr %ys, %ce : tile<1x64xptr<f32>> loc(3:2)
  %yv = load %yp : tile<1x64xf32> loc(3:3)
  %xb = broadcast %xv : tile<16x64xf32> loc(4:1)
  %yb = broadcast %yv : tile<16x64xf32> loc(4:2)
  %s = add %xb, %yb : tile<16x64xf32> loc(4:3)
  %k64 = const {value = 64} : tile<16x1xi32> loc(5:1)
  %rowoff = mul %re, %k64 : tile<16x1xi32> loc(5:2)
  %rb = broadcast %rowoff : tile<16x64xi32> loc(5:3)
  %cb = broadcast %ce : tile<16x64xi32> loc(5:4)
  %off = add %rb, %cb : tile<16x64xi32> loc(5:5)
  %os = splat %out : tile<16x64xptr<f32>> loc(6:1)
  %op = addptr %os, %off : tile<16x64xptr<f32>> loc(6:2)
  store %op, %s loc(6:3)
  return loc(7:1)
}
)";
  std::string ptx = compile_and_assemble(ir);
  // The [16,1] and [1,64] loads take the layout of the broadcast: no shared memory.
  EXPECT_EQ(count(ptx, "ld.global.v4.f32"), 1) << ptx;
  EXPECT_EQ(count(ptx, "ld.global.f32"), 2) << ptx;
  EXPECT_EQ(count(ptx, "st.global.v4.f32"), 2) << ptx;
  EXPECT_EQ(compile_gpu(ir, "cuda:90a").metadata.at("shared"), "0");
}

// A transpose: the permuted tile's elements live in other threads, so the value
// goes through shared memory (store, barrier, load).
TEST(NvptxCodegen, PermuteGoesThroughSharedMemory) {
  const char* ir = R"(
kernel @transpose(%x: ptr<f32> {divisibility = 16}, %y: ptr<f32> {divisibility = 16}) attributes {file = "/t/p.py", num_warps = 4} {
  %r = arange {start = 0, end = 32} : tile<32xi32> loc(1:1)
  %re = expand_dims %r {axis = 1} : tile<32x1xi32> loc(1:2)
  %ce = expand_dims %r {axis = 0} : tile<1x32xi32> loc(1:3)
  %k = const {value = 32} : tile<32x1xi32> loc(1:4)
  %ro = mul %re, %k : tile<32x1xi32> loc(1:5)
  %rb = broadcast %ro : tile<32x32xi32> loc(1:6)
  %cb = broadcast %ce : tile<32x32xi32> loc(1:7)
  %off = add %rb, %cb : tile<32x32xi32> loc(1:8)
  %xs = splat %x : tile<32x32xptr<f32>> loc(2:1)
  %xp = addptr %xs, %off : tile<32x32xptr<f32>> loc(2:2)
  %v = load %xp : tile<32x32xf32> loc(2:3)
  %t = permute %v {order = [1, 0]} : tile<32x32xf32> loc(2:4)
  %ys = splat %y : tile<32x32xptr<f32>> loc(3:1)
  %yp = addptr %ys, %off : tile<32x32xptr<f32>> loc(3:2)
  store %yp, %t loc(3:3)
  return loc(4:1)
}
)";
  std::string ptx = compile_and_assemble(ir);
  EXPECT_NE(ptx.find("bar.sync"), std::string::npos) << ptx;
  EXPECT_NE(ptx.find("st.shared"), std::string::npos) << ptx;
  EXPECT_EQ(compile_gpu(ir, "cuda:90a").metadata.at("shared"), std::to_string(32 * 32 * 4));
}

// Masked loads with `other`, on data that is not known to be aligned (scalar
// predicated accesses) and on f16 (packed in 32-bit words).
TEST(NvptxCodegen, MaskedLoadsWithOther) {
  const char* ir = R"(
kernel @masked(%x: ptr<f32>, %h: ptr<f16> {divisibility = 16}, %out: ptr<f32> {divisibility = 16}, %oh: ptr<f16> {divisibility = 16}, %n: i32) attributes {file = "/t/m.py", num_warps = 2} {
  %a = arange {start = 0, end = 256} : tile<256xi32> loc(1:1)
  %ns = splat %n : tile<256xi32> loc(1:2)
  %m = cmp %a, %ns {pred = "lt"} : tile<256xi1> loc(1:3)
  %xs = splat %x : tile<256xptr<f32>> loc(2:1)
  %xp = addptr %xs, %a : tile<256xptr<f32>> loc(2:2)
  %other = const {value = -1.5} : tile<256xf32> loc(2:3)
  %xv = load %xp, %m, %other : tile<256xf32> loc(2:4)
  %hs = splat %h : tile<256xptr<f16>> loc(3:1)
  %hp = addptr %hs, %a : tile<256xptr<f16>> loc(3:2)
  %hv = load %hp : tile<256xf16> loc(3:3)
  %hf = cast %hv : tile<256xf32> loc(3:4)
  %s = add %xv, %hf : tile<256xf32> loc(4:1)
  %os = splat %out : tile<256xptr<f32>> loc(5:1)
  %op = addptr %os, %a : tile<256xptr<f32>> loc(5:2)
  store %op, %s, %m loc(5:3)
  %ohs = splat %oh : tile<256xptr<f16>> loc(6:1)
  %ohp = addptr %ohs, %a : tile<256xptr<f16>> loc(6:2)
  %s16 = cast %s : tile<256xf16> loc(6:3)
  store %ohp, %s16 loc(6:4)
  return loc(7:1)
}
)";
  std::string ptx = compile_and_assemble(ir, 2);
  EXPECT_GE(count(ptx, "@%p"), 4) << ptx;                  // predicated accesses
  EXPECT_NE(ptx.find("ld.global.f32"), std::string::npos);  // x: only 4-byte aligned
  EXPECT_NE(ptx.find("0fBFC00000"), std::string::npos);     // other = -1.5
}

// A loop carrying a tile accumulator: acc += x[i*256 + arange] for i < n.
TEST(NvptxCodegen, ForLoopCarriesTile) {
  const char* ir = R"(
kernel @rowsum(%x: ptr<f32> {divisibility = 16}, %out: ptr<f32> {divisibility = 16}, %n: i32) attributes {file = "/t/f.py", num_warps = 4} {
  %z = const {value = 0} : i32 loc(1:1)
  %one = const {value = 1} : i32 loc(1:2)
  %k = const {value = 256} : i32 loc(1:3)
  %a = arange {start = 0, end = 256} : tile<256xi32> loc(1:4)
  %acc0 = const {value = 0.0} : tile<256xf32> loc(1:5)
  %acc, %cnt = for %z, %n, %one, %acc0, %z : tile<256xf32>, i32 {
  ^(%i: i32, %acc_in: tile<256xf32>, %c: i32):
    %base = mul %i, %k : i32 loc(2:1)
    %bs = splat %base : tile<256xi32> loc(2:2)
    %off = add %bs, %a : tile<256xi32> loc(2:3)
    %xs = splat %x : tile<256xptr<f32>> loc(2:4)
    %xp = addptr %xs, %off : tile<256xptr<f32>> loc(2:5)
    %v = load %xp : tile<256xf32> loc(2:6)
    %nacc = add %acc_in, %v : tile<256xf32> loc(2:7)
    %nc = add %c, %one : i32 loc(2:8)
    yield %nacc, %nc loc(2:9)
  } loc(2:10)
  %cf = cast %cnt : f32 loc(3:1)
  %cs = splat %cf : tile<256xf32> loc(3:2)
  %mean = div %acc, %cs : tile<256xf32> loc(3:3)
  %os = splat %out : tile<256xptr<f32>> loc(4:1)
  %op = addptr %os, %a : tile<256xptr<f32>> loc(4:2)
  store %op, %mean loc(4:3)
  return loc(5:1)
}
)";
  std::string ptx = compile_and_assemble(ir);
  EXPECT_GE(count(ptx, "ld.global.v2.f32"), 1) << ptx;  // 256 floats / 128 threads
  EXPECT_EQ(count(ptx, "st.global.v2.f32"), 1) << ptx;
  EXPECT_EQ(count(ptx, ".local"), 0) << ptx;  // carried registers stay in registers
}

// An `if` on a scalar yielding a tile, and a `while` carrying a scalar.
TEST(NvptxCodegen, IfAndWhile) {
  const char* ir = R"(
kernel @branchy(%x: ptr<i32> {divisibility = 16}, %flag: i32) attributes {file = "/t/i.py", num_warps = 1} {
  %z = const {value = 0} : i32 loc(1:1)
  %a = arange {start = 0, end = 128} : tile<128xi32> loc(1:2)
  %c = cmp %flag, %z {pred = "ne"} : i1 loc(1:3)
  %t = if %c : tile<128xi32> {
    %d = mul %a, %a : tile<128xi32> loc(2:1)
    yield %d loc(2:2)
  } {
    %e = const {value = 7} : tile<128xi32> loc(2:3)
    yield %e loc(2:4)
  } loc(2:5)
  %one = const {value = 1} : i32 loc(3:1)
  %w = while %flag : i32 {
  ^(%v: i32):
    %go = cmp %v, %one {pred = "gt"} : i1 loc(3:2)
    condition %go, %v loc(3:3)
  } {
  ^(%v2: i32):
    %h = shr %v2, %one : i32 loc(3:4)
    yield %h loc(3:5)
  } loc(3:6)
  %ws = splat %w : tile<128xi32> loc(4:1)
  %r = add %t, %ws : tile<128xi32> loc(4:2)
  %xs = splat %x : tile<128xptr<i32>> loc(5:1)
  %xp = addptr %xs, %a : tile<128xptr<i32>> loc(5:2)
  store %xp, %r loc(5:3)
  return loc(6:1)
}
)";
  std::string ptx = compile_and_assemble(ir, 1);
  EXPECT_EQ(count(ptx, "st.global.v4.u32") + count(ptx, "st.global.v4.b32"), 1) << ptx;
}

// Row softmax over a 4x256 tile: reduce max and sum along the rows (axis 1),
// broadcast back through expand_dims.
const char* kSoftmax2D = R"(
kernel @softmax_rows(%x: ptr<f32> {divisibility = 16}, %y: ptr<f32> {divisibility = 16}, %n_cols: i32 {divisibility = 16}) attributes {file = "/t/s.py", num_warps = 4} {
  %pid = program_id {axis = 0} : i32 loc(1:1)
  %r = arange {start = 0, end = 4} : tile<4xi32> loc(1:2)
  %c = arange {start = 0, end = 256} : tile<256xi32> loc(1:3)
  %re = expand_dims %r {axis = 1} : tile<4x1xi32> loc(1:4)
  %ce = expand_dims %c {axis = 0} : tile<1x256xi32> loc(1:5)
  %k4 = const {value = 4} : i32 loc(1:6)
  %row0 = mul %pid, %k4 : i32 loc(1:7)
  %row0s = splat %row0 : tile<4x1xi32> loc(1:8)
  %rows = add %row0s, %re : tile<4x1xi32> loc(1:9)
  %ncs = splat %n_cols : tile<4x1xi32> loc(1:10)
  %rowoff = mul %rows, %ncs : tile<4x1xi32> loc(1:11)
  %rb = broadcast %rowoff : tile<4x256xi32> loc(2:1)
  %cb = broadcast %ce : tile<4x256xi32> loc(2:2)
  %off = add %rb, %cb : tile<4x256xi32> loc(2:3)
  %ncb = splat %n_cols : tile<4x256xi32> loc(2:4)
  %mask = cmp %cb, %ncb {pred = "lt"} : tile<4x256xi1> loc(2:5)
  %xs = splat %x : tile<4x256xptr<f32>> loc(3:1)
  %xp = addptr %xs, %off : tile<4x256xptr<f32>> loc(3:2)
  %ninf = const {value = -inf} : tile<4x256xf32> loc(3:3)
  %v = load %xp, %mask, %ninf : tile<4x256xf32> loc(3:4)
  %mx = reduce %v {axis = 1} : tile<4xf32> {
  ^(%a: f32, %b: f32):
    %m = max %a, %b : f32 loc(4:1)
    yield %m loc(4:2)
  } loc(4:3)
  %mxe = expand_dims %mx {axis = 1} : tile<4x1xf32> loc(5:1)
  %mxb = broadcast %mxe : tile<4x256xf32> loc(5:2)
  %z = sub %v, %mxb : tile<4x256xf32> loc(5:3)
  %e = exp %z : tile<4x256xf32> loc(5:4)
  %sum = reduce %e {axis = 1} : tile<4xf32> {
  ^(%a2: f32, %b2: f32):
    %s = add %a2, %b2 : f32 loc(6:1)
    yield %s loc(6:2)
  } loc(6:3)
  %se = expand_dims %sum {axis = 1} : tile<4x1xf32> loc(7:1)
  %sb = broadcast %se : tile<4x256xf32> loc(7:2)
  %out = div %e, %sb : tile<4x256xf32> loc(7:3)
  %ys = splat %y : tile<4x256xptr<f32>> loc(8:1)
  %yp = addptr %ys, %off : tile<4x256xptr<f32>> loc(8:2)
  store %yp, %out, %mask loc(8:3)
  return loc(9:1)
}
)";

TEST(NvptxCodegen, RowSoftmaxUsesWarpShuffles) {
  std::string ptx = compile_and_assemble(kSoftmax2D);
  EXPECT_NE(ptx.find("shfl.sync.bfly"), std::string::npos) << ptx;
  EXPECT_EQ(count(ptx, "ld.global.v4.f32"), 2) << ptx;
  EXPECT_EQ(count(ptx, "st.global.v4.f32"), 2) << ptx;
  // 256 columns = 64 threads of 4: a row spans two warps, so the row results
  // cross warps through shared memory.
  EXPECT_NE(ptx.find("bar.sync"), std::string::npos) << ptx;
}

// Full reduction to a scalar (the tutorial's 1-D softmax), and an i32 sum.
TEST(NvptxCodegen, FullReductions) {
  const char* ir = R"(
kernel @softmax_kernel(%out_ptr: ptr<f32> {divisibility = 16}, %in_ptr: ptr<f32> {divisibility = 16}, %in_row_stride: i32 {divisibility = 16}, %out_row_stride: i32 {divisibility = 16}, %n_cols: i32, %cnt: ptr<i32>) attributes {file = "/t/s1.py", num_stages = 3, num_warps = 4} {
  %0 = program_id {axis = 0} : i32 loc(12:11)
  %1 = arange {end = 1024, start = 0} : tile<1024xi32> loc(13:12)
  %2 = splat %n_cols : tile<1024xi32> loc(14:12)
  %3 = cmp %1, %2 {pred = "lt"} : tile<1024xi1> loc(14:12)
  %4 = mul %0, %in_row_stride : i32 loc(15:26)
  %5 = addptr %in_ptr, %4 : ptr<f32> loc(15:17)
  %6 = splat %5 : tile<1024xptr<f32>> loc(15:17)
  %7 = addptr %6, %1 : tile<1024xptr<f32>> loc(15:17)
  %8 = const {value = -inf} : tile<1024xf32> loc(15:9)
  %9 = load %7, %3, %8 : tile<1024xf32> loc(15:9)
  %10 = reduce %9 {axis = 0} : f32 {
    ^(%11: f32, %12: f32):
    %13 = max %11, %12 : f32 loc(16:13)
    yield %13 loc(16:13)
  } loc(16:13)
  %14 = splat %10 : tile<1024xf32> loc(16:9)
  %15 = sub %9, %14 : tile<1024xf32> loc(16:9)
  %16 = exp %15 : tile<1024xf32> loc(17:11)
  %17 = reduce %16 {axis = 0} : f32 {
    ^(%18: f32, %19: f32):
    %20 = add %18, %19 : f32 loc(18:11)
    yield %20 loc(18:11)
  } loc(18:11)
  %21 = mul %0, %out_row_stride : i32 loc(19:24)
  %22 = addptr %out_ptr, %21 : ptr<f32> loc(19:14)
  %23 = splat %22 : tile<1024xptr<f32>> loc(19:14)
  %24 = addptr %23, %1 : tile<1024xptr<f32>> loc(19:14)
  %25 = splat %17 : tile<1024xf32> loc(19:53)
  %26 = div %16, %25 : tile<1024xf32> loc(19:53)
  store %24, %26, %3 loc(19:5)
  %m32 = cast %3 : tile<1024xi32> loc(20:1)
  %live = reduce %m32 {axis = 0} : i32 {
    ^(%p: i32, %q: i32):
    %pq = add %p, %q : i32 loc(20:2)
    yield %pq loc(20:2)
  } loc(20:3)
  %cp = addptr %cnt, %0 : ptr<i32> loc(20:4)
  store %cp, %live loc(20:5)
  return loc(19:5)
}
)";
  std::string ptx = compile_and_assemble(ir);
  EXPECT_GE(count(ptx, "shfl.sync.bfly.b32"), 15) << ptx;  // 3 reductions x 5 lane bits
}

// A dot whose operands do not fit the shared memory of the target (sm_75: 64 KB;
// 128x128 + 128x128 f32 = 128 KB) is a user error at the dot's line.
TEST(NvptxCodegen, DotTooLargeForSharedMemoryIsAUserErrorWithLocation) {
  const char* ir = R"(
kernel @mm(%a: ptr<f32>, %out: ptr<f32>) attributes {file = "/t/mm.py", num_warps = 4} {
  %za = const {value = 0.0} : tile<128x128xf32> loc(3:7)
  %zb = const {value = 0.0} : tile<128x128xf32> loc(3:8)
  %zc = const {value = 0.0} : tile<128x128xf32> loc(3:9)
  %d = dot %za, %zb, %zc {input_precision = "ieee"} : tile<128x128xf32> loc(4:9)
  %r = arange {start = 0, end = 128} : tile<128xi32> loc(5:1)
  %re = expand_dims %r {axis = 1} : tile<128x1xi32> loc(5:2)
  %rb = broadcast %re : tile<128x128xi32> loc(5:3)
  %os = splat %out : tile<128x128xptr<f32>> loc(5:4)
  %op = addptr %os, %rb : tile<128x128xptr<f32>> loc(5:5)
  store %op, %d loc(5:6)
  return loc(6:1)
}
)";
  try {
    compile_gpu(ir, "cuda:75");
    FAIL() << "expected a CompileError";
  } catch (const tessera::CompileError& e) {
    EXPECT_TRUE(e.user_error);
    EXPECT_EQ(e.line, 4);
    EXPECT_EQ(e.col, 9);
    EXPECT_NE(std::string(e.what()).find("131072 bytes of shared memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at most 64 KB"), std::string::npos) << e.what();
  }
}

TEST(NvptxCodegen, BadTargetsAreUserErrors) {
  for (const char* t : {"cuda:", "cuda:abc", "sm_9x", "cuda:100a"}) {
    try {
      compile_gpu(kVectorAdd, t);
      FAIL() << "expected a CompileError for " << t;
    } catch (const tessera::CompileError& e) {
      EXPECT_TRUE(e.user_error) << t;
    }
  }
  EXPECT_EQ(compile_gpu(kVectorAdd, "sm_90a").metadata.at("arch"), "sm_90a");
  EXPECT_EQ(compile_gpu(kVectorAdd, "cuda:90").metadata.at("arch"), "sm_90");
}

}  // namespace
