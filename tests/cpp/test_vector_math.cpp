// Accuracy of emit_math: JIT-compiled kernels (widths 1, 8, 16; host CPU and AVX2-only
// haswell) against long double libm, as max ulp over dense sweeps plus special values.
#include <gtest/gtest.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "codegen/common/vector_math.h"
#include "cpu_jit_test_util.h"

namespace {

using llvm::Value;
using tessera::codegen::emit_math;
using tessera::codegen::MathFn;

// ---- JIT for one CPU ---------------------------------------------------------------
// Modules go through the O2 pipeline (vectorizers off, so width 1 stays scalar code)
// before codegen, so the test sees what optimization does to the compensated arithmetic.
using tessera_test::CpuJit;

// ---- the functions under test --------------------------------------------------------
long double sigmoid_ref(long double x) {
  if (x >= 0) return 1.0L / (1.0L + expl(-x));
  long double e = expl(x);
  return e / (1.0L + e);
}

struct MathCase {
  MathFn fn;
  const char* name;
  long double (*ref)(long double);
  double f32_ulp, f64_ulp;  // the bounds promised in vector_math.h
};

const MathCase kCases[] = {
    {MathFn::Exp, "exp", expl, 2, 4},
    {MathFn::Exp2, "exp2", exp2l, 2, 4},
    {MathFn::Log, "log", logl, 2, 4},
    {MathFn::Log2, "log2", log2l, 2, 4},
    {MathFn::Sin, "sin", sinl, 2, 4},
    {MathFn::Cos, "cos", cosl, 2, 4},
    {MathFn::Erf, "erf", erfl, 4, 4},
    {MathFn::Tanh, "tanh", tanhl, 4, 4},
    {MathFn::Sigmoid, "sigmoid", sigmoid_ref, 4, 4},
};
const int kWidths[] = {1, 8, 16};

template <class T>
const char* type_name() {
  return std::is_same_v<T, float> ? "f32" : "f64";
}

std::string kernel_name(const MathCase& c, const char* type, int width) {
  return std::string(c.name) + "_" + type + "_w" + std::to_string(width);
}

// void kernel(const T* in, T* out, int64_t n): out[i] = fn(in[i]), `width` at a time;
// n is a positive multiple of width. Width 1 uses scalar types, not <1 x T>. `features`
// becomes the function's "target-features", as in kernels (AVX-512 code takes vscalef).
void add_kernel(llvm::Module& m, const std::string& name, MathFn fn, llvm::Type* elem, int width,
                const std::string& features = "") {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Type* ptr = llvm::PointerType::get(ctx, 0);
  llvm::Type* i64 = llvm::Type::getInt64Ty(ctx);
  auto* fn_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, ptr, i64}, false);
  auto* f = llvm::Function::Create(fn_ty, llvm::Function::ExternalLinkage, name, m);
  if (!features.empty()) f->addFnAttr("target-features", features);
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", f);
  auto* loop = llvm::BasicBlock::Create(ctx, "loop", f);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", f);
  llvm::IRBuilder<> b(entry);
  b.CreateBr(loop);
  b.SetInsertPoint(loop);
  llvm::PHINode* i = b.CreatePHI(i64, 2);
  i->addIncoming(b.getInt64(0), entry);
  llvm::Type* ty = width == 1 ? elem : llvm::FixedVectorType::get(elem, width);
  llvm::Align align(elem->getPrimitiveSizeInBits() / 8);
  Value* x = b.CreateAlignedLoad(ty, b.CreateGEP(elem, f->getArg(0), i), align);
  b.CreateAlignedStore(emit_math(b, fn, x), b.CreateGEP(elem, f->getArg(1), i), align);
  Value* next = b.CreateAdd(i, b.getInt64(width));
  i->addIncoming(next, b.GetInsertBlock());  // sin/cos end in another block
  b.CreateCondBr(b.CreateICmpULT(next, f->getArg(2)), loop, exit);
  b.SetInsertPoint(exit);
  b.CreateRetVoid();
}

// One JIT per CPU holding every (function, type, width) kernel, built on first use.
CpuJit& math_jit(const std::string& cpu) {
  auto build = [](const std::string& cpu) {
    auto jit = std::make_unique<CpuJit>(cpu, /*vectorize=*/false);
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto m = jit->new_module(*ctx);
    for (const MathCase& c : kCases)
      for (int w : kWidths) {
        add_kernel(*m, kernel_name(c, "f32", w), c.fn, llvm::Type::getFloatTy(*ctx), w, jit->features());
        add_kernel(*m, kernel_name(c, "f64", w), c.fn, llvm::Type::getDoubleTy(*ctx), w, jit->features());
      }
    jit->add(std::move(m), std::move(ctx));
    return jit;
  };
  // Both compiled at once, each on its own thread and LLVMContext.
  static std::future<std::unique_ptr<CpuJit>> haswell_future =
      std::async(std::launch::async, build, "haswell");
  static std::unique_ptr<CpuJit> host = build("");
  static std::unique_ptr<CpuJit> haswell = haswell_future.get();
  return cpu.empty() ? *host : *haswell;
}

// ---- inputs ---------------------------------------------------------------------------
template <class T>
using Bits = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint64_t>;

template <class T>
T from_bits(Bits<T> u) {
  T x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
template <class T>
Bits<T> to_bits(T x) {
  Bits<T> u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

template <class T>
void add_uniform(std::vector<T>& xs, double lo, double hi, int n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> d(lo, hi);
  for (int i = 0; i < n; ++i) xs.push_back(static_cast<T>(d(rng)));
}

// Evenly spaced in the bit pattern between +0 and max_abs (so every binade, denormals
// included, gets its share), with random signs if `both_signs`.
template <class T>
void add_bit_sweep(std::vector<T>& xs, T max_abs, int n, bool both_signs, std::mt19937_64& rng) {
  Bits<T> top = to_bits(max_abs);
  for (int i = 0; i < n; ++i) {
    T x = from_bits<T>(static_cast<Bits<T>>(static_cast<long double>(top) * i / n));
    xs.push_back(both_signs && (rng() & 1) ? -x : x);
  }
}

template <class T>
void add_specials(std::vector<T>& xs) {
  using L = std::numeric_limits<T>;
  for (T v : {T(0), L::denorm_min(), 2 * L::denorm_min(), L::min(), T(0.5), T(1), T(2), T(10),
              L::max(), L::infinity()}) {
    xs.push_back(v);
    xs.push_back(-v);
  }
  xs.push_back(L::quiet_NaN());
}

// Dense sweeps over where each function is interesting, plus its small arguments.
template <class T>
std::vector<T> inputs_for(MathFn fn) {
  constexpr bool f32 = std::is_same_v<T, float>;
  constexpr int n = 200000;
  std::mt19937_64 rng(1234);
  std::vector<T> xs;
  add_specials(xs);
  switch (fn) {
    case MathFn::Exp:
      add_uniform(xs, f32 ? -104.0 : -746.0, f32 ? 89.0 : 710.0, 2 * n, rng);
      add_uniform(xs, -1.0, 1.0, n, rng);
      add_bit_sweep<T>(xs, T(800), n, true, rng);
      for (T v : f32 ? std::vector<T>{88.72283f, 88.72284f, -87.33655f, -103.2789f, -103.9721f}
                     : std::vector<T>{709.782712893384, 709.7827128933841, -708.3964185322641,
                                      -744.4400719213812, -745.1332191019412})
        xs.push_back(v);
      break;
    case MathFn::Exp2:
      add_uniform(xs, f32 ? -151.0 : -1076.0, f32 ? 129.0 : 1025.0, 2 * n, rng);
      add_uniform(xs, -1.0, 1.0, n, rng);
      add_bit_sweep<T>(xs, T(1100), n, true, rng);
      for (int k = -160; k <= 130; ++k) xs.push_back(T(k));
      break;
    case MathFn::Log:
    case MathFn::Log2:
      add_bit_sweep<T>(xs, std::numeric_limits<T>::infinity(), 2 * n, false, rng);
      add_uniform(xs, 0.5, 2.0, n, rng);
      add_uniform(xs, 0.999, 1.001, n / 2, rng);
      for (int k = -20; k <= 20; ++k) xs.push_back(std::ldexp(T(1), k));
      break;
    case MathFn::Sin:
    case MathFn::Cos:
      // Within the range where accuracy is promised (see vector_math.cpp); the specials
      // past it (max) are checked by SinCosStayBoundedBeyondAccurateRange instead.
      xs.erase(std::remove_if(xs.begin(), xs.end(),
                              [](T x) { return std::isfinite(x) && std::fabs(x) > 1e6; }),
               xs.end());
      add_uniform(xs, f32 ? -0x1p18 : -0x1p40, f32 ? 0x1p18 : 0x1p40, n, rng);
      add_uniform(xs, -1e5, 1e5, n, rng);
      add_uniform(xs, -10.0, 10.0, n, rng);
      add_bit_sweep<T>(xs, T(f32 ? 0x1p18 : 0x1p40), n, true, rng);
      for (int k = -8; k <= 8; ++k) xs.push_back(T(k * 0.78539816339744830962));
      break;
    case MathFn::Erf:
      add_uniform(xs, -6.5, 6.5, 2 * n, rng);
      add_uniform(xs, -1.5, 1.5, n, rng);
      add_bit_sweep<T>(xs, T(8), n, true, rng);
      break;
    case MathFn::Tanh:
      add_uniform(xs, -25.0, 25.0, 2 * n, rng);
      add_uniform(xs, -1.0, 1.0, n, rng);
      add_bit_sweep<T>(xs, T(30), n, true, rng);
      break;
    case MathFn::Sigmoid:
      add_uniform(xs, f32 ? -110.0 : -750.0, 40.0, 2 * n, rng);
      add_uniform(xs, -20.0, 20.0, n, rng);
      add_bit_sweep<T>(xs, T(800), n, true, rng);
      break;
  }
  return xs;
}

// ---- measuring -------------------------------------------------------------------------
// The exact result (long double libm) and 1/ulp of it in T: ulps are those of T at the
// exact result's binade, the denormal spacing below the normal range.
struct Reference {
  long double value;
  long double inv_ulp;
};

template <class T>
Reference reference(long double value) {
  using L = std::numeric_limits<T>;
  int exp = L::min_exponent - 1;
  if (std::isfinite(value) && value != 0) exp = std::max<int>(ilogbl(value), exp);
  return {value, ldexpl(1.0L, (L::digits - 1) - exp)};
}

// Error of `got` in ulps. Non-finite results, and zeros where the exact result is zero,
// must match exactly, sign included.
template <class T>
double ulp_error(T got, const Reference& ref) {
  constexpr double kMismatch = std::numeric_limits<double>::infinity();
  if (std::isnan(ref.value)) return std::isnan(got) ? 0 : kMismatch;
  if (std::isnan(got)) return kMismatch;
  T rounded = static_cast<T>(ref.value);
  if (std::isinf(rounded) || std::isinf(got)) return got == rounded ? 0 : kMismatch;
  if (got == 0 && ref.value == 0)
    return std::signbit(got) == std::signbit(ref.value) ? 0 : kMismatch;
  return static_cast<double>(fabsl(static_cast<long double>(got) - ref.value) * ref.inv_ulp);
}

template <class T>
void run_kernel(CpuJit& jit, const std::string& name, const std::vector<T>& xs,
                std::vector<T>& ys) {
  using Kernel = void(const T*, T*, int64_t);
  ys.clear();
  if (xs.empty()) return;  // the kernels run at least one vector
  std::vector<T> padded(xs);
  padded.resize((xs.size() + 15) / 16 * 16, T(0));
  ys.assign(padded.size(), T(0));
  jit.lookup<Kernel>(name)(padded.data(), ys.data(), static_cast<int64_t>(padded.size()));
  ys.resize(xs.size());
}

// fn(i) for i < n, split over the machine's cores (libm long double is the slow part).
template <class Fn>
void parallel_for(size_t n, const Fn& fn) {
  unsigned threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t i = n * t / threads; i < n * (t + 1) / threads; ++i) fn(i);
    });
  for (std::thread& th : pool) th.join();
}

template <class T>
void check_accuracy(const MathCase& c) {
  std::vector<T> xs = inputs_for<T>(c.fn);
  std::vector<Reference> refs(xs.size());
  parallel_for(xs.size(), [&](size_t i) { refs[i] = reference<T>(c.ref(xs[i])); });
  double bound = std::is_same_v<T, float> ? c.f32_ulp : c.f64_ulp;
  std::string line = std::string(c.name) + " " + type_name<T>() + " (" + std::to_string(xs.size()) +
                     " points) max ulp:";
  double overall = 0;
  T overall_at = 0;
  for (const char* cpu : {"", "haswell"}) {
    for (int w : kWidths) {
      std::vector<T> ys;
      run_kernel(math_jit(cpu), kernel_name(c, type_name<T>(), w), xs, ys);
      double worst = 0;
      size_t at = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        double e = ulp_error(ys[i], refs[i]);
        if (!(e <= worst)) worst = e, at = i;
      }
      char buf[64];
      std::snprintf(buf, sizeof buf, " %s/w%d %.3f", *cpu ? cpu : "host", w, worst);
      line += buf;
      if (!(worst <= overall)) overall = worst, overall_at = xs[at];
      EXPECT_LE(worst, bound) << c.name << " " << type_name<T>() << " cpu=" << (*cpu ? cpu : "host")
                              << " width=" << w << ": x=" << std::hexfloat << xs[at]
                              << " got=" << ys[at]
                              << " want=" << static_cast<double>(refs[at].value);
    }
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, " (worst at x=%.9g)", static_cast<double>(overall_at));
  std::printf("%s%s\n", line.c_str(), buf);
}

// The same bits at every width and on both CPUs (NaNs as NaNs): a value's fn must not
// depend on the shape of the tile that holds it (an f32 exp once took a faster
// polynomial on 512-bit vectors only, and a [G, 8] tile's exp differed from a row's).
template <class T>
void check_same_bits_everywhere(const MathCase& c) {
  std::vector<T> xs = inputs_for<T>(c.fn);
  std::vector<T> first;
  run_kernel(math_jit(""), kernel_name(c, type_name<T>(), kWidths[0]), xs, first);
  for (const char* cpu : {"", "haswell"}) {
    for (int w : kWidths) {
      std::vector<T> ys;
      run_kernel(math_jit(cpu), kernel_name(c, type_name<T>(), w), xs, ys);
      size_t differing = 0, at = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        bool same = std::isnan(ys[i]) ? std::isnan(first[i]) : to_bits(ys[i]) == to_bits(first[i]);
        if (!same && differing++ == 0) at = i;
      }
      EXPECT_EQ(differing, 0u) << c.name << " " << type_name<T>() << " cpu=" << (*cpu ? cpu : "host")
                               << " width=" << w << " vs width " << kWidths[0] << ": first at x=" << std::hexfloat
                               << xs[at] << " got=" << ys[at] << " want=" << first[at];
    }
  }
}

class VectorMathAccuracy : public ::testing::TestWithParam<MathCase> {};

TEST_P(VectorMathAccuracy, F32WithinBound) { check_accuracy<float>(GetParam()); }
TEST_P(VectorMathAccuracy, F64WithinBound) { check_accuracy<double>(GetParam()); }
TEST_P(VectorMathAccuracy, F32SameBitsAtEveryWidth) { check_same_bits_everywhere<float>(GetParam()); }
TEST_P(VectorMathAccuracy, F64SameBitsAtEveryWidth) { check_same_bits_everywhere<double>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(AllFunctions, VectorMathAccuracy, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

template <class T>
std::vector<T> eval(MathFn fn, const std::vector<T>& xs, int width = 8) {
  for (const MathCase& c : kCases)
    if (c.fn == fn) {
      std::vector<T> ys;
      run_kernel(math_jit(""), kernel_name(c, type_name<T>(), width), xs, ys);
      return ys;
    }
  return {};
}

// Every float (every TESSERA_EXHAUSTIVE_STRIDE-th, if set) through the 16-wide host
// kernels; sin/cos only where accuracy is promised. Minutes of libm long double time, so
// disabled by default: run with --gtest_also_run_disabled_tests --gtest_filter=*Exhaustive*.
TEST(VectorMath, DISABLED_ExhaustiveF32) {
  const char* stride_env = std::getenv("TESSERA_EXHAUSTIVE_STRIDE");
  uint64_t stride = stride_env ? std::max(1, std::atoi(stride_env)) : 1;
  constexpr uint64_t kChunk = 1 << 22;
  for (const MathCase& c : kCases) {
    double worst = 0;
    float worst_x = 0;
    for (uint64_t first = 0; first < (uint64_t{1} << 32); first += kChunk * stride) {
      std::vector<float> xs;
      for (uint64_t i = first; i < std::min(first + kChunk * stride, uint64_t{1} << 32); i += stride) {
        float x = from_bits<float>(static_cast<uint32_t>(i));
        bool trig = c.fn == MathFn::Sin || c.fn == MathFn::Cos;
        if (!trig || !(std::fabs(x) > 0x1p18f)) xs.push_back(x);
      }
      std::vector<Reference> refs(xs.size());
      parallel_for(xs.size(), [&](size_t i) { refs[i] = reference<float>(c.ref(xs[i])); });
      std::vector<float> ys;
      run_kernel(math_jit(""), kernel_name(c, "f32", 16), xs, ys);
      for (size_t i = 0; i < xs.size(); ++i) {
        double e = ulp_error(ys[i], refs[i]);
        if (!(e <= worst)) worst = e, worst_x = xs[i];
      }
    }
    std::printf("exhaustive %s f32 (stride %llu): max ulp %.3f at x=%.9g\n", c.name,
                static_cast<unsigned long long>(stride), worst, worst_x);
    EXPECT_LE(worst, c.f32_ulp) << c.name;
  }
}

// Exactness that a ulp bound alone would not catch.
TEST(VectorMath, Exp2OfIntegersAndLog2OfPowersOfTwoAreExact) {
  std::vector<float> ks, pows;
  for (int k = -149; k <= 127; ++k) ks.push_back(float(k)), pows.push_back(std::ldexp(1.0f, k));
  std::vector<float> e = eval(MathFn::Exp2, ks), l = eval(MathFn::Log2, pows);
  for (size_t i = 0; i < ks.size(); ++i) {
    EXPECT_EQ(e[i], pows[i]) << "exp2(" << ks[i] << ")";
    EXPECT_EQ(l[i], ks[i]) << "log2(2^" << ks[i] << ")";
  }
  std::vector<double> kd, pd;
  for (int k = -1074; k <= 1023; ++k) kd.push_back(k), pd.push_back(std::ldexp(1.0, k));
  std::vector<double> ed = eval(MathFn::Exp2, kd), ld = eval(MathFn::Log2, pd);
  for (size_t i = 0; i < kd.size(); ++i) {
    EXPECT_EQ(ed[i], pd[i]) << "exp2(" << kd[i] << ")";
    EXPECT_EQ(ld[i], kd[i]) << "log2(2^" << kd[i] << ")";
  }
}

TEST(VectorMath, SaturatingFunctionsHitTheirLimitsExactly) {
  std::vector<float> xs = {30.0f, -30.0f, 1e30f, -1e30f};
  std::vector<float> t = eval(MathFn::Tanh, xs), e = eval(MathFn::Erf, xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    float one = xs[i] > 0 ? 1.0f : -1.0f;
    EXPECT_EQ(t[i], one) << "tanh(" << xs[i] << ")";
    EXPECT_EQ(e[i], one) << "erf(" << xs[i] << ")";
  }
  // sigmoid(-30) = 9.4e-14 is still representable; -200 underflows to +0.
  std::vector<float> s = eval(MathFn::Sigmoid, std::vector<float>{200.0f, -200.0f, 1e30f, -1e30f});
  EXPECT_EQ(s, (std::vector<float>{1.0f, 0.0f, 1.0f, 0.0f}));
}

// Past the documented accurate range sin/cos are not accurate, but stay finite in [-1, 1].
TEST(VectorMath, SinCosStayBoundedBeyondAccurateRange) {
  std::mt19937_64 rng(7);
  std::vector<float> xf;
  add_bit_sweep<float>(xf, std::numeric_limits<float>::max(), 100000, true, rng);
  std::vector<double> xd;
  add_bit_sweep<double>(xd, std::numeric_limits<double>::max(), 100000, true, rng);
  for (MathFn fn : {MathFn::Sin, MathFn::Cos}) {
    for (float y : eval(fn, xf, 16)) ASSERT_TRUE(std::isfinite(y) && std::fabs(y) <= 1.0f) << y;
    for (double y : eval(fn, xd, 16)) ASSERT_TRUE(std::isfinite(y) && std::fabs(y) <= 1.0) << y;
  }
}

// The point of emitting polynomials: 8-wide f32 exp must be call-free vector FMA code.
TEST(VectorMath, Exp8xF32IsCallFreeVectorCode) {
  CpuJit jit("haswell", /*vectorize=*/false);
  llvm::LLVMContext ctx;
  auto m = jit.new_module(ctx);
  add_kernel(*m, "exp8", MathFn::Exp, llvm::Type::getFloatTy(ctx), 8);
  std::string text = jit.assembly(*m);
  if (std::getenv("TESSERA_PRINT_ASM")) std::printf("%s\n", text.c_str());
  EXPECT_NE(text.find("vfmadd"), std::string::npos);
  EXPECT_NE(text.find("ymm"), std::string::npos);
  EXPECT_EQ(text.find("call"), std::string::npos);
}

TEST(VectorMath, HalfAndBFloatAreComputedInF32) {
  for (llvm::Type* (*get)(llvm::LLVMContext&) :
       {&llvm::Type::getHalfTy, &llvm::Type::getBFloatTy}) {
    CpuJit jit("", /*vectorize=*/false);
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto m = jit.new_module(*ctx);
    add_kernel(*m, "exp_half", MathFn::Exp, get(*ctx), 8);
    add_kernel(*m, "tanh_half", MathFn::Tanh, get(*ctx), 8);
    jit.add(std::move(m), std::move(ctx));
    // 16-bit values, passed as raw bits: 1.0 and 0.5 in each format.
    bool half = get == &llvm::Type::getHalfTy;
    uint16_t in[8] = {uint16_t(half ? 0x3c00 : 0x3f80), uint16_t(half ? 0x3800 : 0x3f00)};
    uint16_t out[8];
    jit.lookup<void(const uint16_t*, uint16_t*, int64_t)>("exp_half")(in, out, 8);
    // e = 2.71875 (half 0x4170) / 2.71875 (bf16 0x402e); e^0.5 = 1.6484 (0x3e98 / 0x3fd3).
    EXPECT_EQ(out[0], half ? 0x4170 : 0x402e);
    EXPECT_EQ(out[1], half ? 0x3e98 : 0x3fd3);
    jit.lookup<void(const uint16_t*, uint16_t*, int64_t)>("tanh_half")(in, out, 8);
    EXPECT_EQ(out[2], 0);  // tanh(+0) = +0
  }
}

}  // namespace
