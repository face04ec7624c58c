// The NVPTX back end beyond elementwise code: dot (FMA through shared memory),
// scan, atomics, print and assert. Hand-written Tile IR compiles for sm_90a and
// sm_80, ptxas assembles it (skipped when the CUDA toolkit is absent), and the PTX
// shows the intended instructions.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <unistd.h>

#include "ptx_test_util.h"
#include "tessera/compiler.h"

namespace {

using tessera_test::count;
using tessera_test::ptr_tile;
using tessera_test::subst;
using tessera_test::have_ptxas;

tessera::CompileResult compile_for(const std::string& ir, const std::string& target, bool debug = false) {
  return tessera_test::compile_gpu(ir, target, 4, debug);
}

std::string run_ptxas(const std::string& ptx, const std::string& arch) { return tessera_test::ptxas(ptx, arch); }

// Compiles for sm_90a and sm_80, assembles both; returns the sm_90a result.
tessera::CompileResult build(const std::string& ir, bool debug = false) {
  tessera::CompileResult r90;
  for (auto [target, arch] : {std::pair<std::string, std::string>{"cuda:90a", "sm_90a"}, {"cuda:80", "sm_80"}}) {
    tessera::CompileResult r = compile_for(ir, target, debug);
    EXPECT_NE(r.binary.find(".entry " + r.kernel_name), std::string::npos) << r.binary;
    if (have_ptxas()) {
      EXPECT_EQ(run_ptxas(r.binary, arch), "") << r.binary;
    }
    if (arch == "sm_90a") r90 = r;
  }
  return r90;
}

// c = a @ b for one tile: a, b of type `in`, accumulator `acc` from zero.
std::string dot_kernel(int M, int N, int K, const std::string& in, const std::string& acc) {
  std::string zero = acc[0] == 'f' ? "0.0" : "0";
  return "kernel @dot_kernel(%a: ptr<" + in + "> {divisibility = 16}, %b: ptr<" + in +
         "> {divisibility = 16}, %c: ptr<" + acc + "> {divisibility = 16}) attributes {file = \"/t/dot.py\", "
         "num_warps = 4} {\n" +
         ptr_tile("pa", "a", M, K, in) + ptr_tile("pb", "b", K, N, in) + ptr_tile("pc", "c", M, N, acc) +
         subst(R"(  %x = load %pa : tile<$Mx$Kx$IN>
  %y = load %pb : tile<$Kx$Nx$IN>
  %z = const {value = $ZERO} : tile<$Mx$Nx$ACC>
  %d = dot %x, %y, %z {input_precision = "ieee"} : tile<$Mx$Nx$ACC> loc(7:9)
  store %pc, %d
  return
}
)",
               {{"$M", std::to_string(M)}, {"$N", std::to_string(N)}, {"$K", std::to_string(K)}, {"$IN", in},
                {"$ACC", acc}, {"$ZERO", zero}});
}

// --- dot ---------------------------------------------------------------------

TEST(NvptxDot, F32UsesFmaOnSharedMemoryOperands) {
  tessera::CompileResult r = build(dot_kernel(64, 64, 32, "f32", "f32"));
  const std::string& ptx = r.binary;
  // Thread t owns 8 rows x 4 columns of C: 32 fma per k, B read as float4.
  EXPECT_GE(count(ptx, "fma.rn.f32"), 32) << ptx;
  EXPECT_GE(count(ptx, "ld.shared.v4.f32"), 1) << ptx;
  EXPECT_EQ(count(ptx, "bar.sync"), 2) << ptx;        // before and after staging
  EXPECT_EQ(r.metadata.at("shared"), "16384");        // A 8 KB + B 8 KB
}

// f16/bf16/i8 run on tensor cores from sm_80 (test_nvptx_mma.cpp); f64 stays on
// FMA, and so does everything on sm_75 (no m16n8k16 mma there).
TEST(NvptxDot, InputTypes) {
  struct Case {
    const char *in, *acc, *instr;
  };
  for (Case c : {Case{"f16", "f32", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"},
                 Case{"bf16", "f32", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"},
                 Case{"f64", "f64", "fma.rn.f64"}, Case{"i8", "i32", "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"}}) {
    SCOPED_TRACE(c.in);
    std::string ptx = build(dot_kernel(32, 32, 32, c.in, c.acc)).binary;
    EXPECT_GE(count(ptx, c.instr), 2) << ptx;
    // FMA: a barrier before and after staging; mma: double-buffered staging, after only.
    EXPECT_EQ(count(ptx, "bar.sync"), std::string(c.in) == "f64" ? 2 : 1) << ptx;
  }
  for (Case c : {Case{"f16", "f32", "fma.rn.f32"}, Case{"i8", "i32", "mad.lo.s32"}}) {
    SCOPED_TRACE(std::string(c.in) + " on sm_75");
    tessera::CompileResult r = compile_for(dot_kernel(32, 32, 32, c.in, c.acc), "cuda:75");
    EXPECT_GE(count(r.binary, c.instr), 8) << r.binary;
    EXPECT_EQ(count(r.binary, "mma.sync"), 0) << r.binary;
    if (have_ptxas()) EXPECT_EQ(run_ptxas(r.binary, "sm_75"), "") << r.binary;
  }
}

// Odd shapes: dims of 1, tiles smaller than the CTA (replicated layouts), K = 1.
TEST(NvptxDot, SmallAndDegenerateShapes) {
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, {2, 4, 8}, {8, 1, 32}, {1, 16, 4}, {16, 16, 16}, {16, 128, 64},
                         {128, 128, 32}}) {
    SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K));
    std::string ptx = build(dot_kernel(M, N, K, "f32", "f32")).binary;
    EXPECT_GE(count(ptx, "fma.rn.f32"), 1) << ptx;
  }
}

// Two dots share the staging buffers (sized for the larger), with a barrier
// before each restaging.
TEST(NvptxDot, DotsReuseTheStagingBuffers) {
  std::string ir = "kernel @two_dots(%a: ptr<f32>, %b: ptr<f32>, %c: ptr<f32>) attributes {file = \"/t/dot.py\", "
                   "num_warps = 4} {\n" +
                   ptr_tile("pa", "a", 64, 32, "f32") + ptr_tile("pb", "b", 32, 64, "f32") +
                   ptr_tile("pc", "c", 64, 64, "f32") + R"(  %x = load %pa : tile<64x32xf32>
  %y = load %pb : tile<32x64xf32>
  %z = const {value = 0.0} : tile<64x64xf32>
  %d = dot %x, %y, %z {input_precision = "ieee"} : tile<64x64xf32>
  %e = dot %x, %y, %d {input_precision = "ieee"} : tile<64x64xf32>
  store %pc, %e
  return
}
)";
  tessera::CompileResult r = build(ir);
  EXPECT_EQ(r.metadata.at("shared"), "16384");
  EXPECT_EQ(count(r.binary, "bar.sync"), 4) << r.binary;
}

// The tutorial matmul: a K loop carrying the accumulator, masked loads.
TEST(NvptxDot, MatmulWithKLoop) {
  const char* ir = R"(
kernel @matmul_kernel(%a_ptr: ptr<f16>, %b_ptr: ptr<f16>, %c_ptr: ptr<f32>, %M: i32, %N: i32, %K: i32, %s_am: i32, %s_bk: i32, %s_cm: i32) attributes {file = "/t/mm.py", num_warps = 4} {
  %0 = program_id {axis = 0} : i32
  %1 = program_id {axis = 1} : i32
  %2 = const {value = 64} : i32
  %3 = mul %0, %2 : i32
  %4 = arange {end = 64, start = 0} : tile<64xi32>
  %5 = splat %3 : tile<64xi32>
  %6 = add %5, %4 : tile<64xi32>
  %7 = mul %1, %2 : i32
  %8 = splat %7 : tile<64xi32>
  %9 = add %8, %4 : tile<64xi32>
  %10 = arange {end = 32, start = 0} : tile<32xi32>
  %11 = const {value = 0.0} : tile<64x64xf32>
  %12 = const {value = 32} : i32
  %13 = add %K, %12 : i32
  %14 = const {value = 1} : i32
  %15 = sub %13, %14 : i32
  %16 = div %15, %12 : i32
  %17 = const {value = 0} : i32
  %18 = expand_dims %6 {axis = 1} : tile<64x1xi32>
  %19 = splat %s_am : tile<64x1xi32>
  %20 = mul %18, %19 : tile<64x1xi32>
  %21 = splat %a_ptr : tile<64x1xptr<f16>>
  %22 = addptr %21, %20 : tile<64x1xptr<f16>>
  %24 = broadcast %22 : tile<64x32xptr<f16>>
  %25 = splat %M : tile<64x1xi32>
  %26 = cmp %18, %25 {pred = "lt"} : tile<64x1xi1>
  %27 = splat %K : tile<1x32xi32>
  %28 = broadcast %26 : tile<64x32xi1>
  %29 = const {value = 0.0} : tile<64x32xf16>
  %30 = splat %s_bk : tile<32x1xi32>
  %31 = splat %b_ptr : tile<32x1xptr<f16>>
  %32 = expand_dims %9 {axis = 0} : tile<1x64xi32>
  %35 = broadcast %32 : tile<32x64xi32>
  %36 = splat %K : tile<32x1xi32>
  %37 = splat %N : tile<1x64xi32>
  %38 = cmp %32, %37 {pred = "lt"} : tile<1x64xi1>
  %39 = broadcast %38 : tile<32x64xi1>
  %40 = const {value = 0.0} : tile<32x64xf16>
  %41 = for %17, %16, %14, %11 : tile<64x64xf32> {
    ^(%42: i32, %43: tile<64x64xf32>):
    %44 = mul %42, %12 : i32
    %45 = splat %44 : tile<32xi32>
    %46 = add %45, %10 : tile<32xi32>
    %47 = expand_dims %46 {axis = 0} : tile<1x32xi32>
    %49 = broadcast %47 : tile<64x32xi32>
    %50 = addptr %24, %49 : tile<64x32xptr<f16>>
    %51 = cmp %47, %27 {pred = "lt"} : tile<1x32xi1>
    %52 = broadcast %51 : tile<64x32xi1>
    %53 = and %28, %52 : tile<64x32xi1>
    %54 = load %50, %53, %29 : tile<64x32xf16>
    %55 = expand_dims %46 {axis = 1} : tile<32x1xi32>
    %56 = mul %55, %30 : tile<32x1xi32>
    %57 = addptr %31, %56 : tile<32x1xptr<f16>>
    %58 = broadcast %57 : tile<32x64xptr<f16>>
    %59 = addptr %58, %35 : tile<32x64xptr<f16>>
    %60 = cmp %55, %36 {pred = "lt"} : tile<32x1xi1>
    %61 = broadcast %60 : tile<32x64xi1>
    %62 = and %61, %39 : tile<32x64xi1>
    %63 = load %59, %62, %40 : tile<32x64xf16>
    %64 = dot %54, %63, %43 {input_precision = "ieee"} : tile<64x64xf32>
    yield %64
  }
  %65 = splat %s_cm : tile<64x1xi32>
  %66 = mul %18, %65 : tile<64x1xi32>
  %67 = splat %c_ptr : tile<64x1xptr<f32>>
  %68 = addptr %67, %66 : tile<64x1xptr<f32>>
  %71 = broadcast %68 : tile<64x64xptr<f32>>
  %72 = broadcast %32 : tile<64x64xi32>
  %73 = addptr %71, %72 : tile<64x64xptr<f32>>
  %74 = broadcast %26 : tile<64x64xi1>
  %75 = broadcast %38 : tile<64x64xi1>
  %76 = and %74, %75 : tile<64x64xi1>
  store %73, %41, %76
  return
}
)";
  tessera::CompileResult r = build(ir);
  // 4 warps tiled 2x2 over 64x64: per warp 2 m-tiles x 4 n-tiles x 2 k-steps.
  EXPECT_EQ(count(r.binary, "mma.sync.aligned.m16n8k16"), 16) << r.binary;
  // One barrier per iteration (double-buffered staging); the accumulator is not converted.
  EXPECT_EQ(count(r.binary, "bar.sync"), 1) << r.binary;
  EXPECT_EQ(count(r.binary, "ld.local"), 0) << r.binary;
  EXPECT_EQ(r.metadata.at("shared"), "16384");  // f16 operands: 2 x (A 4 KB + B 4 KB)
}

// --- scan --------------------------------------------------------------------

std::string scan_kernel(const std::vector<int>& shape, int axis, bool reverse, const std::string& t) {
  std::string sh;
  int numel = 1;
  for (int d : shape) sh += std::to_string(d) + "x", numel *= d;
  std::string flat = "tile<" + std::to_string(numel) + "xi32>";
  std::string add = t[0] == 'f' ? "add" : "add";
  return subst(R"(kernel @scan_kernel(%x: ptr<$T> {divisibility = 16}, %out: ptr<$T> {divisibility = 16}) attributes {file = "/t/scan.py", num_warps = 4} {
  %i = arange {end = $NUMEL, start = 0} : $FLAT
  %xs = splat %x : tile<$NUMELxptr<$T>>
  %xp = addptr %xs, %i : tile<$NUMELxptr<$T>>
  %v = load %xp : tile<$NUMELx$T>
  %v2 = reshape %v : tile<$SH$T>
  %s = scan %v2 {axis = $AXIS, reverse = $REV} : tile<$SH$T> {
    ^(%a: $T, %b: $T):
    %c = add %a, %b : $T
    yield %c
  }
  %s1 = reshape %s : tile<$NUMELx$T>
  %os = splat %out : tile<$NUMELxptr<$T>>
  %op = addptr %os, %i : tile<$NUMELxptr<$T>>
  store %op, %s1
  return
}
)",
               {{"$NUMEL", std::to_string(numel)}, {"$FLAT", flat}, {"$SH", sh}, {"$T", t},
                {"$AXIS", std::to_string(axis)}, {"$REV", reverse ? "true" : "false"}});
}

TEST(NvptxScan, CumsumThroughSharedMemory) {
  for (bool rev : {false, true}) {
    SCOPED_TRACE(rev);
    tessera::CompileResult r = build(scan_kernel({1024}, 0, rev, "f32"));
    // Stage, scan chunks, add the earlier chunks' totals, read back.
    EXPECT_EQ(count(r.binary, "bar.sync"), 4) << r.binary;
    // The combine is the kernel's own add: with FMA contraction (the default) it prints
    // without a rounding mode (add.f32), ptxas being free to fuse it.
    EXPECT_GE(count(r.binary, "\tadd.f32"), 2) << r.binary;
    EXPECT_EQ(count(r.binary, "add.rn.f32"), 0) << r.binary;
    EXPECT_GE(count(r.binary, "st.shared"), 1) << r.binary;
  }
}

TEST(NvptxScan, ShapesAxesAndTypes) {
  struct Case {
    std::vector<int> shape;
    int axis;
    const char* t;
  };
  for (const Case& c : {Case{{32, 64}, 0, "i32"}, Case{{32, 64}, 1, "i32"}, Case{{512, 4}, 1, "f32"},
                        Case{{4, 256}, 1, "f64"}, Case{{2, 8, 16}, 1, "i64"}, Case{{1}, 0, "f32"},
                        Case{{16}, 0, "i8"}, Case{{8, 2}, 0, "f16"}}) {
    for (bool rev : {false, true}) {
      SCOPED_TRACE(std::to_string(c.axis) + c.t + (rev ? " reverse" : ""));
      build(scan_kernel(c.shape, c.axis, rev, c.t));
    }
  }
}

TEST(NvptxScan, TwoOperandScan) {
  const char* ir = R"(
kernel @scan2(%x: ptr<f32>, %out: ptr<f32>, %iout: ptr<i32>) attributes {file = "/t/scan.py", num_warps = 4} {
  %i = arange {end = 256, start = 0} : tile<256xi32>
  %xs = splat %x : tile<256xptr<f32>>
  %xp = addptr %xs, %i : tile<256xptr<f32>>
  %v = load %xp : tile<256xf32>
  %s, %k = scan %v, %i {axis = 0, reverse = false} : tile<256xf32>, tile<256xi32> {
    ^(%a0: f32, %b0: i32, %a1: f32, %b1: i32):
    %gt = cmp %a1, %a0 {pred = "gt"} : i1
    %m = select %gt, %a1, %a0 : f32
    %j = select %gt, %b1, %b0 : i32
    yield %m, %j
  }
  %os = splat %out : tile<256xptr<f32>>
  %op = addptr %os, %i : tile<256xptr<f32>>
  store %op, %s
  %is = splat %iout : tile<256xptr<i32>>
  %ip = addptr %is, %i : tile<256xptr<i32>>
  store %ip, %k
  return
}
)";
  tessera::CompileResult r = build(ir);
  EXPECT_EQ(count(r.binary, "bar.sync"), 4) << r.binary;
}

// --- atomics -----------------------------------------------------------------

TEST(NvptxAtomic, HistogramUsesAtomGlobalAdd) {
  const char* ir = R"(
kernel @histogram_kernel(%x_ptr: ptr<i32>, %hist_ptr: ptr<i32>, %n: i32) attributes {file = "/t/hist.py", num_warps = 4} {
  %0 = program_id {axis = 0} : i32
  %1 = const {value = 1024} : i32
  %2 = mul %0, %1 : i32
  %3 = arange {end = 1024, start = 0} : tile<1024xi32>
  %4 = splat %2 : tile<1024xi32>
  %5 = add %4, %3 : tile<1024xi32>
  %6 = splat %n : tile<1024xi32>
  %7 = cmp %5, %6 {pred = "lt"} : tile<1024xi1>
  %8 = splat %x_ptr : tile<1024xptr<i32>>
  %9 = addptr %8, %5 : tile<1024xptr<i32>>
  %10 = const {value = 0} : tile<1024xi32>
  %11 = load %9, %7, %10 : tile<1024xi32>
  %12 = splat %hist_ptr : tile<1024xptr<i32>>
  %13 = addptr %12, %11 : tile<1024xptr<i32>>
  %14 = const {value = 1} : tile<1024xi32>
  %15 = atomic_rmw %13, %14, %7 {kind = "add"} : tile<1024xi32>
  return
}
)";
  std::string ptx = build(ir).binary;
  EXPECT_EQ(count(ptx, "atom.global.add.u32"), 8) << ptx;  // 8 keys a thread
  EXPECT_EQ(count(ptx, "fence.acq_rel.gpu"), 2) << ptx;    // acq_rel around the op
  EXPECT_EQ(count(ptx, "bar.sync"), 0) << ptx;             // nothing replicated
}

std::string atomic_kernel(const std::string& kind, const std::string& t, int n) {
  return subst(R"(kernel @atomic_kernel(%p: ptr<$T>, %v: ptr<$T>, %old: ptr<$T>, %n: i32) attributes {file = "/t/atomic.py", num_warps = 4} {
  %i = arange {end = $N, start = 0} : tile<$Nxi32>
  %ns = splat %n : tile<$Nxi32>
  %m = cmp %i, %ns {pred = "lt"} : tile<$Nxi1>
  %ps = splat %p : tile<$Nxptr<$T>>
  %pp = addptr %ps, %i : tile<$Nxptr<$T>>
  %vs = splat %v : tile<$Nxptr<$T>>
  %vp = addptr %vs, %i : tile<$Nxptr<$T>>
  %x = load %vp, %m : tile<$Nx$T>
  %r = atomic_rmw %pp, %x, %m {kind = "$KIND"} : tile<$Nx$T>
  %os = splat %old : tile<$Nxptr<$T>>
  %op = addptr %os, %i : tile<$Nxptr<$T>>
  store %op, %r
  return
}
)",
               {{"$T", t}, {"$KIND", kind}, {"$N", std::to_string(n)}});
}

TEST(NvptxAtomic, EveryKindAndType) {
  struct Case {
    const char *kind, *t, *ptx;
  };
  for (Case c : {Case{"add", "i32", "atom.global.add.u32"}, Case{"max", "i32", "atom.global.max.s32"},
                 Case{"min", "i32", "atom.global.min.s32"}, Case{"umax", "i32", "atom.global.max.u32"},
                 Case{"umin", "i32", "atom.global.min.u32"}, Case{"max", "u32", "atom.global.max.u32"},
                 Case{"and", "i32", "atom.global.and.b32"}, Case{"or", "i32", "atom.global.or.b32"},
                 Case{"xor", "i32", "atom.global.xor.b32"}, Case{"xchg", "i32", "atom.global.exch.b32"},
                 Case{"add", "i64", "atom.global.add.u64"}, Case{"fadd", "f32", "atom.global.add.f32"},
                 Case{"fadd", "f64", "atom.global.add.f64"}, Case{"fadd", "f16", "atom.global.add.noftz.f16"},
                 Case{"xchg", "f32", "atom.global.exch.b32"}, Case{"max", "f32", "atom.global.cas.b32"},
                 Case{"min", "f64", "atom.global.cas.b64"}}) {
    SCOPED_TRACE(std::string(c.kind) + " " + c.t);
    std::string ptx = build(atomic_kernel(c.kind, c.t, 256)).binary;
    EXPECT_GE(count(ptx, c.ptx), 1) << ptx;
  }
}

// tile<16xi32> on 128 threads: 8 replicas of each element; one performs the atomic
// and the old values reach the others through shared memory.
TEST(NvptxAtomic, ReplicatedElementsActOnce) {
  tessera::CompileResult r = build(atomic_kernel("add", "i32", 16));
  EXPECT_EQ(count(r.binary, "atom.global.add.u32"), 1) << r.binary;
  EXPECT_EQ(count(r.binary, "bar.sync"), 2) << r.binary;
  EXPECT_EQ(r.metadata.at("shared"), "64");
  EXPECT_NE(r.stages.at("llir").find("and i32 %0, 112"), std::string::npos) << r.stages.at("llir");  // replica bits 4-6 clear
}

TEST(NvptxAtomic, CasAndScalarAtomics) {
  const char* ir = R"(
kernel @cas_kernel(%p: ptr<i32>, %cnt: ptr<i32>, %old: ptr<i32>) attributes {file = "/t/atomic.py", num_warps = 4} {
  %i = arange {end = 128, start = 0} : tile<128xi32>
  %ps = splat %p : tile<128xptr<i32>>
  %pp = addptr %ps, %i : tile<128xptr<i32>>
  %one = const {value = 1} : tile<128xi32>
  %r = atomic_cas %pp, %i, %one : tile<128xi32>
  %os = splat %old : tile<128xptr<i32>>
  %op = addptr %os, %i : tile<128xptr<i32>>
  store %op, %r
  %c1 = const {value = 1} : i32
  %t = atomic_rmw %cnt, %c1 {kind = "add"} : i32
  %ts = splat %t : tile<128xi32>
  %tt = add %ts, %i : tile<128xi32>
  store %op, %tt
  return
}
)";
  tessera::CompileResult r = build(ir);
  EXPECT_EQ(count(r.binary, "atom.global.cas.b32"), 1) << r.binary;
  EXPECT_EQ(count(r.binary, "atom.global.add.u32"), 1) << r.binary;  // thread 0 only
  // One before the scalar atomic (the stores of %r by every thread come first), two for
  // the broadcast of its old value.
  EXPECT_EQ(count(r.binary, "bar.sync"), 3) << r.binary;
}

// --- print and assert --------------------------------------------------------

const char* kPrintAssert = R"(
kernel @dbg(%x: ptr<f32>, %n: i32) attributes {file = "/t/dbg.py", num_warps = 4} {
  %pid = program_id {axis = 0} : i32
  %i = arange {end = 16, start = 0} : tile<16xi32>
  %xs = splat %x : tile<16xptr<f32>>
  %xp = addptr %xs, %i : tile<16xptr<f32>>
  %v = load %xp : tile<16xf32>
  print %pid, %v, %i {hex = false, prefix = "vals: "}
  print %i {hex = true, prefix = "100% hex "}
  %z = const {value = 0.0} : tile<16xf32>
  %ok = cmp %v, %z {pred = "gt"} : tile<16xi1>
  assert %ok {msg = "x must be positive"} loc(9:5)
  return
}
)";

TEST(NvptxDebug, PrintCallsVprintfPerElement) {
  tessera::CompileResult r = build(kPrintAssert);
  // One call per operand: the scalar (thread 0) and one element each of the tiles.
  EXPECT_EQ(count(r.binary, "call.uni (retval0), \n\tvprintf") + count(r.binary, "call.uni (retval0),\n\tvprintf"), 4)
      << r.binary;
  EXPECT_NE(r.stages.at("llir").find("pid (%d, %d, %d) idx (%lld) vals:  (operand 1)%.9g\\0A"), std::string::npos) << r.stages.at("llir");
  EXPECT_NE(r.stages.at("llir").find("100%% hex 0x%llx"), std::string::npos) << r.stages.at("llir");
  EXPECT_EQ(count(r.binary, "__assertfail,"), 0) << r.binary;  // assert is off without debug
}

TEST(NvptxDebug, AssertCallsAssertfailWhenDebug) {
  tessera::CompileResult r = build(kPrintAssert, /*debug=*/true);
  EXPECT_NE(r.stages.at("llir").find("call void @__assertfail"), std::string::npos) << r.stages.at("llir");
  EXPECT_NE(r.stages.at("llir").find("x must be positive"), std::string::npos);
  EXPECT_NE(r.stages.at("llir").find("i32 9, ptr"), std::string::npos) << r.stages.at("llir");  // the line
}

}  // namespace
