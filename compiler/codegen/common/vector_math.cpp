// exp/exp2/log/log2/sin/cos/erf/tanh/sigmoid as LLVM IR (range reduction plus minimax
// polynomials, selects instead of branches, no libm) for f32/f64 vectors.
// Measured max error (tests/cpp/test_vector_math.cpp, f32 and f64 alike): < 1 ulp for
// exp, exp2, log, log2, sin, cos, erf; < 1.9 ulp for tanh and sigmoid. Each computes the
// same bits at every vector width and for scalars: results never depend on a tile's shape.
// sin/cos beyond |x| = 2^18 (f32) / 2^40 (f64) branch to a Payne–Hanek reduction
// (trig_reduction.cpp).
#include "codegen/common/vector_math.h"

#include "codegen/common/trig_reduction.h"

#include <llvm/IR/IntrinsicsX86.h>

#include <llvm/IR/Intrinsics.h>
#include <llvm/Support/ErrorHandling.h>

#include <cstdint>
#include <iterator>
#include <tuple>
#include <vector>
#include <utility>

namespace tessera::codegen {
namespace {

using llvm::ArrayRef;
using llvm::Value;

// Polynomial coefficients, lowest order first. Each was fitted by Remez exchange in
// 45-digit arithmetic over the stated interval and then rounded to the target type;
// "err" is the fit's worst error (after rounding) relative to the final result, so it
// stays far below half an ulp and the rounding of the evaluation dominates.

// clang-format off
// exp(r) = 1 + r + r^2 P(r), |r| <= 1.01 ln2/2.  err 2^-27.6 (f32), 2^-56.1 (f64).
const double kExpPolyF32[] = {0x1.fffffcp-2, 0x1.55548ap-3, 0x1.555916p-5, 0x1.123fc6p-7,
                              0x1.6a1a70p-10};
const double kExpPolyF64[] = {0x1.000000000000bp-1,  0x1.55555555554f0p-3, 0x1.555555555024bp-5,
                              0x1.111111112998ap-7,  0x1.6c16c1859c638p-10, 0x1.a01a01232fd89p-13,
                              0x1.a01995ee0f348p-16, 0x1.71df2ec473797p-19, 0x1.28b16728b5a4bp-22,
                              0x1.ad7ad67adcd52p-26};

// log(1+f) = 2s + s R(z), s = f/(2+f), z = s^2, R(z) = z P(z), z <= (1.01 (√2-1)/(√2+1))^2.
// err 2^-28.8 (f32), 2^-57.8 (f64).
const double kLogPolyF32[] = {0x1.55557cp-1, 0x1.995c48p-2, 0x1.3229e2p-2};
const double kLogPolyF64[] = {0x1.555555555559cp-1, 0x1.999999997c86bp-2, 0x1.2492494516187p-2,
                              0x1.c71c4f5592a21p-3, 0x1.7466d3fa20ee6p-3, 0x1.3992093e96337p-3,
                              0x1.2fa9cbe47d1a4p-3};

// sin(r) = r + r z P(z) and cos(r) = 1 - z/2 + z^2 Q(z), z = r^2, |r| <= 0.82 (a little
// over π/4, because q = rint(x·2/π) is computed in the input precision).
// err sin 2^-27.1 / cos 2^-30.1 (f32), sin 2^-57.0 / cos 2^-59.0 (f64).
const double kSinPolyF32[] = {-0x1.55554p-3, 0x1.11056p-7, -0x1.98a68ap-13};
const double kCosPolyF32[] = {0x1.555546p-5, -0x1.6c0a3p-10, 0x1.995ba6p-16};
const double kSinPolyF64[] = {-0x1.5555555555555p-3, 0x1.1111111111107p-7, -0x1.a01a01a017eb1p-13,
                              0x1.71de3a5244497p-19, -0x1.ae645162c6e51p-26, 0x1.611fd3824ae76p-33,
                              -0x1.aa4950de49ad4p-41};
const double kCosPolyF64[] = {0x1.5555555555543p-5,  -0x1.6c16c16c13fe9p-10, 0x1.a01a019b04673p-16,
                              -0x1.27e4f6daf32bcp-22, 0x1.1ee922c1daa57p-29,  -0x1.8f48e620ab3d9p-37};

// erf(x) = x + x P(x^2) for |x| < 1.  err 2^-28.6 (f32), 2^-56.3 (f64).
const double kErfSmallPolyF32[] = {0x1.06eba8p-3, -0x1.81273ep-2, 0x1.ce2cf8p-4, -0x1.b7f90ep-6,
                                   0x1.5405b2p-8, -0x1.a3f7p-11,  0x1.496a32p-14};
const double kErfSmallPolyF64[] = {
    0x1.06eba8214db69p-3,  -0x1.812746b0379e6p-2, 0x1.ce2f21a042b20p-4,  -0x1.b82ce3128499cp-6,
    0x1.565bcd0db02dep-8,  -0x1.c02db3d8ed154p-11, 0x1.f9a321a11c4b2p-14, -0x1.f4d1df3931042p-17,
    0x1.b9def19cc15bfp-20, -0x1.5f1d36b90d8b8p-23, 0x1.f7a411d3c5a62p-27, -0x1.386abfc4da8a6p-30,
    0x1.0579a83aae97cp-34};
// erfc(x) = exp(-x^2) P(t), t = (x-2)/(x+2), for 1 <= x <= 4 (f32) / 6 (f64). The change of
// variable makes erfc·exp(x^2) nearly linear, so 6 (13) terms replace the 9 (22) a
// polynomial in x needs. err 2^-28.7 (f32), 2^-57.4 (f64), absolute on erf.
const double kErfLargePolyF32[] = {0x1.058672p-2,  -0x1.b57036p-2, 0x1.eeea02p-3,
                                   -0x1.4387c6p-4, 0x1.e8dd44p-9,  0x1.d8ae84p-8};
const double kErfLargePolyF64[] = {
    0x1.058671b52c776p-2,  -0x1.b57034efd3f56p-2, 0x1.eeea7dc8a790cp-3,  -0x1.437f0b68ccc3ap-4,
    0x1.e947158adc648p-9,  0x1.ca95ed863e892p-8,  -0x1.bc258dc57814cp-11, -0x1.016b537493e4cp-10,
    0x1.6d353215ff377p-15, 0x1.6d82696de0643p-13, 0x1.cf70a1e396b33p-16,  -0x1.be77a41cef433p-16,
    -0x1.a844595e9daf2p-17};

// clang-format on

// Everything that differs between f32 and f64. "hi/lo" pairs: hi is the constant rounded
// to the type, lo the rounded remainder, so hi + lo carries about twice the precision.
struct FloatConsts {
  int mantissa_bits;
  int exponent_bias;
  uint64_t sqrt_half_bits;  // bit pattern of √½ rounded
  double min_normal;
  double ln2_hi, ln2_lo, log2e, log2e_lo;
  double two_over_pi;
  double pio2[3];  // π/2 = pio2[0] + pio2[1] + pio2[2] (+ 2^-76 / 2^-163)
  // Inputs are clamped to these before reduction: beyond them exp/exp2 are inf or 0
  // already, and the clamp keeps the integer tricks below in range.
  double exp_lo, exp_hi, exp2_lo, exp2_hi;
  double trig_limit;      // |x| above this: sin/cos stay in [-1, 1] but are not accurate
  double erf_one_above;   // erf(x) rounds to ±1 above this
  double tanh_one_above;  // tanh(x) rounds to ±1 above this
  ArrayRef<double> exp_poly, log_poly, sin_poly, cos_poly, erf_small_poly, erf_large_poly;
};

// clang-format off
const FloatConsts kF32 = {
    /*mantissa_bits, exponent_bias, sqrt_half_bits, min_normal=*/ 23, 127, 0x3f3504f3, 0x1p-126,
    /*ln2_hi, ln2_lo=*/ 0x1.62e43p-1, -0x1.05c61p-29,
    /*log2e, log2e_lo=*/ 0x1.715476p+0, 0x1.4ae0cp-26,
    /*two_over_pi=*/ 0x1.45f306p-1,
    /*pio2=*/ {0x1.921fb6p+0, -0x1.777a5cp-25, -0x1.ee59dap-50},
    /*exp_lo, exp_hi, exp2_lo, exp2_hi=*/ -104.0, 89.0, -151.0, 129.0,
    /*trig_limit, erf_one_above, tanh_one_above=*/ 0x1p18, 4.0, 10.0,
    kExpPolyF32, kLogPolyF32, kSinPolyF32, kCosPolyF32, kErfSmallPolyF32, kErfLargePolyF32,
};

const FloatConsts kF64 = {
    /*mantissa_bits, exponent_bias, sqrt_half_bits, min_normal=*/
    52, 1023, 0x3fe6a09e667f3bcdull, 0x1p-1022,
    /*ln2_hi, ln2_lo=*/ 0x1.62e42fefa39efp-1, 0x1.abc9e3b39803fp-56,
    /*log2e, log2e_lo=*/ 0x1.71547652b82fep+0, 0x1.777d0ffda0d24p-56,
    /*two_over_pi=*/ 0x1.45f306dc9c883p-1,
    /*pio2=*/ {0x1.921fb54442d18p+0, 0x1.1a62633145c07p-54, -0x1.f1976b7ed8fbcp-110},
    /*exp_lo, exp_hi, exp2_lo, exp2_hi=*/ -746.0, 710.0, -1076.0, 1025.0,
    /*trig_limit, erf_one_above, tanh_one_above=*/ 0x1p40, 6.0, 20.0,
    kExpPolyF64, kLogPolyF64, kSinPolyF64, kCosPolyF64, kErfSmallPolyF64, kErfLargePolyF64,
};
// clang-format on

// Emits the math for one f32/f64 scalar or vector type. No fast-math flags are used: the
// compensated sums below (TwoSum, hi/lo splits) rely on every operation being rounded
// as written, so the caller must not enable fp-contraction of separate fmul/fadd.
class MathEmitter {
 public:
  MathEmitter(llvm::IRBuilderBase& b, llvm::Type* ty)
      : b_(b), ty_(ty), k_(ty->getScalarType()->isDoubleTy() ? kF64 : kF32) {
    llvm::Type* int_scalar = b.getIntNTy(ty->getScalarSizeInBits());
    int_ty_ = int_scalar;
    if (auto* vec = llvm::dyn_cast<llvm::VectorType>(ty))
      int_ty_ = llvm::VectorType::get(int_scalar, vec->getElementCount());
  }

  Value* emit(MathFn fn, Value* x) {
    switch (fn) {
      case MathFn::Exp: return exp(x);
      case MathFn::Exp2: return exp2(x);
      case MathFn::Log: return log(x);
      case MathFn::Log2: return log2(x);
      case MathFn::Sin: return sin_or_cos(x, /*is_cos=*/false);
      case MathFn::Cos: return sin_or_cos(x, /*is_cos=*/true);
      case MathFn::Erf: return erf(x);
      case MathFn::Tanh: return tanh(x);
      case MathFn::Sigmoid: return sigmoid(x);
    }
    llvm::report_fatal_error("Tessera bug: emit_math got an unknown MathFn");
  }

 private:
  // ---- exp family --------------------------------------------------------------
  // Worked example, exp(1) in f32: n = rint(1·log2e) = 1, r = 1 - 1·ln2 = 0.30685 (hi)
  // and the ln2_lo part (lo), e^r = 1.3591409, times 2^1 = 2.7182817.
  Value* exp(Value* x) {
    if (ty_->getScalarType()->isFloatTy()) return exp_f32(x);
    return propagate_nan(x, exp_no_nan_check(x));
  }

  // f32 exp, one algorithm for every vector width and for scalars, so a value's exp
  // does not depend on the shape of the tile holding it (a [G, 8] tile's 256-bit rows
  // and a 1-D row's 512-bit vectors once took different algorithms and differed by an
  // ulp, which a cancellation downstream, softmax - smoothing / n, magnified to 3e-4).
  // A plain Horner evaluation of 1 + r + r^2 P(r) replaces the compensated sum of
  // exp_reduced (its last fma rounds once; the rest of the error is 0.35·ulp(q): under
  // 0.87 ulp measured, the bound is 2): 12 instructions per 16 lanes on AVX-512 (softmax's inner
  // loop) instead of 22. scale_by_pow2 is vscalefps on 512-bit vectors and two
  // multiplies elsewhere, which round identically (once, denormals included).
  // NaN needs no final select: the clamp keeps it (select(x > hi, hi, x) returns x on
  // NaN; vminps hi, x does the same), and fma, the multiplies and vscalefps propagate it.
  Value* exp_f32(Value* x) {
    Value* hi_c = c(k_.exp_hi);
    Value* lo_c = c(k_.exp_lo);
    Value* below = select(b_.CreateFCmpOGT(x, hi_c), hi_c, x);
    Value* xc = select(b_.CreateFCmpOLT(below, lo_c), lo_c, below);
    // n = rint(xc·log2e), rounded by adding 1.5·2^23 inside one fma (the sum's ulp is 1
    // for |xc·log2e| < 2^22) and recovered exactly by subtracting it again: an fma and an
    // add-pipe subtraction instead of a multiply and vrndscaleps, both on the FMA pipes
    // that bound this loop (Zen 4: 11 -> 10 of them per 16 lanes, llvm-mca).
    Value* shifter = c(0x1.8p23);
    Value* n = sub(fma(xc, c(k_.log2e), shifter), shifter);
    Value* r = fma(fneg(n), c(k_.ln2_lo), fma(fneg(n), c(k_.ln2_hi), xc));
    std::vector<double> full = {1.0, 1.0};
    full.insert(full.end(), std::begin(kExpPolyF32), std::end(kExpPolyF32));
    return scale_by_pow2(horner(r, full), n);
  }

  Value* exp_no_nan_check(Value* x) {
    Value* xc = clamp(x, k_.exp_lo, k_.exp_hi);
    Value* n = rint(mul(xc, c(k_.log2e)));
    // x - n·ln2_hi is exact: both are multiples of ulp(ln2_hi) and the result is < 1.
    Value* hi = fma(fneg(n), c(k_.ln2_hi), xc);
    Value* lo = mul(n, c(-k_.ln2_lo));
    return scale_by_pow2(exp_reduced(hi, lo), n);
  }

  Value* exp2(Value* x) {
    Value* xc = clamp(x, k_.exp2_lo, k_.exp2_hi);
    Value* n = rint(xc);
    Value* r = sub(xc, n);  // exact
    // 2^r = e^(r·ln2), with r·ln2 split exactly into hi + lo so exp2 is as good as exp
    // (and exact at integers, where r = 0).
    Value* hi = mul(r, c(k_.ln2_hi));
    Value* lo = fma(r, c(k_.ln2_lo), fma(r, c(k_.ln2_hi), fneg(hi)));
    return propagate_nan(x, scale_by_pow2(exp_reduced(hi, lo), n));
  }

  // e^(hi+lo) for |hi| <= ln2/2 (slightly more is fine) and |lo| << |hi|, as
  // (1 + hi) + small with 1 + hi summed exactly (Fast2Sum), so the result is rounded once:
  // for results below 1 (ulp 2^-24) a rounded e^hi - 1 alone would cost another ulp/2.
  Value* exp_reduced(Value* hi, Value* lo) {
    Value* one_plus_hi = add(c(1), hi);
    Value* err = add(sub(c(1), one_plus_hi), hi);
    return add(one_plus_hi, add(err, exp_small_part(hi, lo, one_plus_hi)));
  }

  Value* expm1_reduced(Value* hi, Value* lo) {
    return add(hi, exp_small_part(hi, lo, add(c(1), hi)));
  }

  // e^(hi+lo) - 1 - hi = q + lo·e^hi with q = hi²·P(hi) and e^hi ≈ (1 + hi) + q. The lo·q
  // term matters: for f64 exp(700), lo is 400 ulps of hi.
  Value* exp_small_part(Value* hi, Value* lo, Value* one_plus_hi) {
    Value* q = mul(mul(hi, hi), horner(hi, k_.exp_poly));
    return fma(lo, add(one_plus_hi, q), q);
  }

  // y·2^n for integral n in [2·(1 - bias) - mantissa_bits, 2·bias]: two multiplies by
  // normal powers of two, the first exact, so overflow to inf, gradual underflow into
  // denormals and underflow to 0 each come out of a single correctly rounded multiply.
  Value* scale_by_pow2(Value* y, Value* n) {
    // AVX-512's vscalefps/pd computes y·2^floor(n) rounded once, denormals and
    // overflow included: the same result in one instruction instead of eight.
    if (llvm::Value* r = avx512_scalef(y, n)) return r;
    Value* n1 = floor(mul(n, c(0.5)));
    Value* n2 = sub(n, n1);
    return mul(mul(y, pow2(n1)), pow2(n2));
  }

  // 2^k for integral k in the normal exponent range, without a float->int conversion
  // (which AVX2 lacks for i64): k + 1.5·2^m + bias is exact and holds k + bias in its low
  // mantissa bits; shifting left by m moves them into the exponent field and pushes the
  // rest out. E.g. f32, k = 3: bits(3 + 12583039) = 0x4b400082, << 23 = 0x41000000 = 8.
  Value* pow2(Value* k) {
    double magic = 1.5 * static_cast<double>(uint64_t{1} << k_.mantissa_bits) + k_.exponent_bias;
    Value* bits = to_bits(add(k, c(magic)));
    return from_bits(b_.CreateShl(bits, ci(k_.mantissa_bits)));
  }

  // ---- log family --------------------------------------------------------------
  // x = 2^k·m with m in [√½, √2), f = m - 1 (exact); then fdlibm's
  // log(1+f) = f - (hfsq - s·(hfsq + R)), hfsq = f²/2, keeps f exact in the sum.
  // Worked example, log(10): k = 3, m = 1.25, f = 0.25, s = 1/9,
  // log(1.25) = 0.2231436, + 3·ln2 = 2.3025851.
  struct LogParts {
    Value* k;     // exponent, as a float
    Value* f;     // m - 1
    Value* s;     // f / (2 + f)
    Value* hfsq;  // f²/2
    Value* r;     // R(s²)
  };

  LogParts log_reduce(Value* x) {
    // Denormals are scaled into the normal range first, the exponent adjusted after.
    double to_normal = static_cast<double>(uint64_t{1} << k_.mantissa_bits);
    Value* denormal = b_.CreateFCmpOLT(x, c(k_.min_normal));
    Value* xs = select(denormal, mul(x, c(to_normal)), x);
    Value* k_adjust = select(denormal, c(-k_.mantissa_bits), c(0));
    // Adding (1.0 - √½) to the bits carries into the exponent exactly when m >= √2
    // (musl's trick); the mantissa is then rebuilt around √½.
    uint64_t one_bits = uint64_t(k_.exponent_bias) << k_.mantissa_bits;
    Value* ix = b_.CreateAdd(to_bits(xs), ci(one_bits - k_.sqrt_half_bits));
    Value* biased_k = b_.CreateLShr(ix, ci(k_.mantissa_bits));
    // int -> float without a conversion instruction: OR the integer into the mantissa
    // of 2^m, giving the float 2^m + int.
    uint64_t two_m_bits = uint64_t(k_.exponent_bias + k_.mantissa_bits) << k_.mantissa_bits;
    double two_m = static_cast<double>(uint64_t{1} << k_.mantissa_bits);
    Value* k = sub(from_bits(b_.CreateOr(biased_k, ci(two_m_bits))), c(two_m + k_.exponent_bias));
    uint64_t mantissa_mask = (uint64_t{1} << k_.mantissa_bits) - 1;
    Value* m = from_bits(b_.CreateAdd(b_.CreateAnd(ix, ci(mantissa_mask)), ci(k_.sqrt_half_bits)));
    LogParts p;
    p.k = add(k, k_adjust);
    p.f = sub(m, c(1));
    p.s = div(p.f, add(c(2), p.f));
    Value* z = mul(p.s, p.s);
    p.r = mul(z, horner(z, k_.log_poly));
    p.hfsq = mul(c(0.5), mul(p.f, p.f));
    return p;
  }

  Value* log(Value* x) {
    LogParts p = log_reduce(x);
    // k·ln2_hi + log(1+f) + k·ln2_lo, the large product kept exact inside the fma.
    Value* tail = fma(p.s, add(p.hfsq, p.r), mul(p.k, c(k_.ln2_lo)));
    Value* y = fma(p.k, c(k_.ln2_hi), sub(p.f, sub(p.hfsq, tail)));
    return log_special_cases(x, y);
  }

  Value* log2(Value* x) {
    LogParts p = log_reduce(x);
    // log(1+f) = hi + lo exactly-ish (f - hi is exact by Sterbenz, and (f - hi) - hfsq
    // is the rounding error of hi), then times log2e in double-word arithmetic, then
    // k + y with Fast2Sum (|k| >= 1 > |y| or k = 0), so log2 of powers of 2 is exact.
    Value* hi = sub(p.f, p.hfsq);
    Value* lo = add(sub(sub(p.f, hi), p.hfsq), mul(p.s, add(p.hfsq, p.r)));
    Value* y_hi = mul(hi, c(k_.log2e));
    Value* y_lo =
        add(fma(hi, c(k_.log2e), fneg(y_hi)), fma(lo, c(k_.log2e), mul(hi, c(k_.log2e_lo))));
    Value* sum = add(p.k, y_hi);
    Value* sum_err = add(sub(p.k, sum), y_hi);
    return log_special_cases(x, add(sum, add(sum_err, y_lo)));
  }

  // log(+inf) = +inf, log(±0) = -inf, log(x < 0) = nan, log(nan) = nan.
  Value* log_special_cases(Value* x, Value* y) {
    y = select(b_.CreateFCmpOEQ(x, inf()), inf(), y);
    y = select(b_.CreateFCmpOEQ(x, c(0)), fneg(inf()), y);
    y = select(b_.CreateFCmpOLT(x, c(0)), nan(), y);
    return propagate_nan(x, y);
  }

  // ---- sin / cos ---------------------------------------------------------------
  // x = q·π/2 + r with r kept as hi + lo (Cody-Waite with π/2 in three parts, in
  // double-word arithmetic), then sin or cos of r by quadrant q mod 4.
  // Worked example, sin(100): q = rint(63.66) = 64, r = 100 - 64·π/2 = -0.5309649,
  // q mod 4 = 0 so sin(100) = sin(r) = -0.5063656.
  // Accurate while q is computed well enough that |r| <= 0.82 (the polynomials' range)
  // and x - q·pio2[0] is exact: |x| <= 2^18 for f32, 2^40 for f64. Beyond that r is
  // set to 0, so results are finite and in [-1, 1] but not accurate.
  // Lanes beyond trig_limit take the Payne–Hanek reduction (trig_reduction.cpp), in a
  // block entered only when some lane needs it: the common case pays one test.
  std::tuple<Value*, Value*, Value*> reduce_large_lanes(Value* xs, Value* in_range, Value* q, Value* hi,
                                                        Value* lo) {
    llvm::BasicBlock* cur = b_.GetInsertBlock();
    llvm::Function* f = cur ? cur->getParent() : nullptr;
    if (!f) return {q, select(in_range, hi, c(0)), select(in_range, lo, c(0))};
    Value* large = b_.CreateNot(in_range);
    Value* any = large->getType()->isVectorTy() ? b_.CreateOrReduce(large) : large;
    llvm::LLVMContext& ctx = b_.getContext();
    auto* slow = llvm::BasicBlock::Create(ctx, "trig.huge", f);
    auto* join = llvm::BasicBlock::Create(ctx, "trig.join", f);
    b_.CreateCondBr(any, slow, join);
    b_.SetInsertPoint(slow);
    TrigReduction t = reduce_huge_trig_argument(b_, xs);
    Value* q2 = select(large, t.quadrant, q);
    Value* hi2 = select(large, t.hi, hi);
    Value* lo2 = select(large, t.lo, lo);
    llvm::BasicBlock* slow_end = b_.GetInsertBlock();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    auto phi = [&](Value* fast, Value* huge) {
      llvm::PHINode* p = b_.CreatePHI(fast->getType(), 2);
      p->addIncoming(fast, cur);
      p->addIncoming(huge, slow_end);
      return p;
    };
    return {phi(q, q2), phi(hi, hi2), phi(lo, lo2)};
  }

  Value* sin_or_cos(Value* x, bool is_cos) {
    Value* finite = b_.CreateFCmpOLT(fabs(x), inf());
    Value* xs = select(finite, x, c(0));  // inf/nan take no part in the arithmetic
    Value* q = rint(mul(xs, c(k_.two_over_pi)));
    // r1 = x - q·pio2[0] is exact: both are multiples of ulp(pio2[0]) when |x| >= 1
    // (for |x| < 1, q is 0 or ±1 and Sterbenz applies), and |r1| < 1.
    Value* r1 = fma(fneg(q), c(k_.pio2[0]), xs);
    Value* p_hi = mul(q, c(k_.pio2[1]));
    Value* p_lo = fma(q, c(k_.pio2[1]), fneg(p_hi));  // q·pio2[1] = p_hi + p_lo exactly
    auto [s, s_err] = two_sum(r1, fneg(p_hi));
    Value* t = sub(sub(s_err, p_lo), mul(q, c(k_.pio2[2])));
    Value* hi = add(s, t);
    Value* lo = sub(t, sub(hi, s));
    Value* in_range = b_.CreateFCmpOLE(fabs(xs), c(k_.trig_limit));
    std::tie(q, hi, lo) = reduce_large_lanes(xs, in_range, q, hi, lo);

    Value* z = mul(hi, hi);
    // sin(hi + lo) ≈ hi + hi·z·P(z) + lo·(1 - z/2)
    Value* lo_times_cos = fma(mul(lo, c(-0.5)), z, lo);
    Value* sin_r = add(hi, fma(mul(hi, z), horner(z, k_.sin_poly), lo_times_cos));
    // cos(hi + lo) ≈ 1 - (z + z_err)/2 + z²·Q(z) - hi·lo, with the rounding errors of
    // z = hi² and of w = 1 - z/2 carried separately (cos(π/4) would lose 1 ulp otherwise).
    Value* z_err = fma(hi, hi, fneg(z));
    Value* half_z = mul(z, c(0.5));
    Value* w = sub(c(1), half_z);
    Value* w_err = sub(sub(c(1), w), half_z);
    Value* tail = sub(w_err, fma(hi, lo, mul(z_err, c(0.5))));
    Value* cos_r = add(w, fma(mul(z, z), horner(z, k_.cos_poly), tail));

    // Quadrant in floating point (exact for any integral q): q mod 4 in {0, 1, 2, 3}.
    Value* quadrant = sub(q, mul(c(4), floor(mul(q, c(0.25)))));
    Value* is_1 = b_.CreateFCmpOEQ(quadrant, c(1));
    Value* is_2 = b_.CreateFCmpOEQ(quadrant, c(2));
    Value* odd = b_.CreateOr(is_1, b_.CreateFCmpOEQ(quadrant, c(3)));
    // sin(x): +sin r, +cos r, -sin r, -cos r;  cos(x): +cos r, -sin r, -cos r, +sin r.
    Value* y;
    Value* negate;
    if (is_cos) {
      y = select(odd, sin_r, cos_r);
      negate = b_.CreateOr(is_1, is_2);
    } else {
      y = select(odd, cos_r, sin_r);
      negate = b_.CreateFCmpOGE(quadrant, c(2));
    }
    y = select(negate, fneg(y), y);
    if (!is_cos) y = select(b_.CreateFCmpOEQ(x, c(0)), x, y);  // sin(-0) = -0
    return select(finite, y, nan());
  }

  std::pair<Value*, Value*> two_sum(Value* a, Value* b) {
    Value* s = add(a, b);
    Value* bb = sub(s, a);
    Value* err = add(sub(a, sub(s, bb)), sub(b, bb));
    return {s, err};
  }

  // ---- erf, tanh, sigmoid ------------------------------------------------------
  // |x| < 1: x + x·P(x²).  1 <= |x|: 1 - exp(-x²)·P((|x|-2)/(|x|+2)), |x| clamped where
  // erf rounds to 1. Worked example, erf(2.5): t = 1/9, P(t) = 0.2108064,
  // exp(-6.25) = 0.0019305, 1 - 0.0004070 = 0.9995930.
  Value* erf(Value* x) {
    Value* ax = fabs(x);
    Value* small = fma(x, horner(mul(x, x), k_.erf_small_poly), x);
    Value* axc = clamp_above(ax, k_.erf_one_above);
    Value* t = div(sub(axc, c(2)), add(axc, c(2)));
    // exp(-(x² as hi + lo)): the lo part matters for f64 near |x| = 1.
    Value* sq_hi = mul(axc, axc);
    Value* sq_lo = fma(axc, axc, fneg(sq_hi));
    Value* e = exp_no_nan_check(fneg(sq_hi));
    e = fma(e, fneg(sq_lo), e);
    Value* large = copysign(sub(c(1), mul(e, horner(t, k_.erf_large_poly))), x);
    return propagate_nan(x, select(b_.CreateFCmpOLT(ax, c(1)), small, large));
  }

  // tanh(x) = sign(x)·t/(t + 2), t = expm1(2|x|): no cancellation near 0 (t ≈ 2|x|), and
  // |x| is clamped where tanh rounds to 1 so t stays finite. The quotient gets one
  // Newton correction (with t + 2 as an exact hi + lo pair), so only t's error remains.
  Value* tanh(Value* x) {
    Value* axc = clamp_above(fabs(x), k_.tanh_one_above);
    Value* t = expm1_nonnegative(add(axc, axc));
    auto [d, d_err] = two_sum(t, c(2));
    Value* recip = div(c(1), d);
    Value* q = mul(t, recip);
    Value* residual = sub(fma(fneg(q), d, t), mul(q, d_err));  // t - q·(t + 2), nearly exact
    Value* y = copysign(fma(residual, recip, q), x);
    return propagate_nan(x, y);
  }

  // e^y - 1 for 0 <= y <= 2·tanh_one_above: 2^n·(e^r - 1) + (2^n - 1), with e^r - 1
  // straight from the exp polynomial so nothing cancels for small y (n = 0, r = y).
  Value* expm1_nonnegative(Value* y) {
    Value* n = rint(mul(y, c(k_.log2e)));
    Value* hi = fma(fneg(n), c(k_.ln2_hi), y);
    Value* lo = mul(n, c(-k_.ln2_lo));
    Value* scale = pow2(n);
    return fma(scale, expm1_reduced(hi, lo), sub(scale, c(1)));
  }

  // sigmoid(x) = 1/(1 + e) for x >= 0 and e/(1 + e) for x < 0, e = exp(-|x|) <= 1: no
  // overflow, and for very negative x the result is e itself (down into denormals).
  // 1/(1 + e) gets one Newton correction against the exact 1 + e = d + d_err.
  Value* sigmoid(Value* x) {
    Value* e = exp_no_nan_check(fneg(fabs(x)));
    Value* d = add(c(1), e);
    Value* d_err = add(sub(c(1), d), e);  // exact (Fast2Sum, 1 >= e)
    Value* recip = div(c(1), d);
    Value* residual = sub(fma(fneg(d), recip, c(1)), mul(d_err, recip));
    recip = fma(recip, residual, recip);
    Value* y = select(b_.CreateFCmpOLT(x, c(0)), mul(e, recip), recip);
    return propagate_nan(x, y);
  }

  // ---- small helpers -----------------------------------------------------------
  Value* c(double v) { return llvm::ConstantFP::get(ty_, v); }
  Value* ci(uint64_t v) { return llvm::ConstantInt::get(int_ty_, v); }
  Value* inf() { return llvm::ConstantFP::getInfinity(ty_); }
  Value* nan() { return llvm::ConstantFP::getQNaN(ty_); }
  Value* add(Value* a, Value* b) { return b_.CreateFAdd(a, b); }
  Value* sub(Value* a, Value* b) { return b_.CreateFSub(a, b); }
  Value* mul(Value* a, Value* b) { return b_.CreateFMul(a, b); }
  Value* div(Value* a, Value* b) { return b_.CreateFDiv(a, b); }
  Value* fneg(Value* a) { return b_.CreateFNeg(a); }
  Value* fma(Value* a, Value* b, Value* c) {
    return b_.CreateIntrinsic(llvm::Intrinsic::fma, {ty_}, {a, b, c});
  }
  Value* fabs(Value* a) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a); }
  Value* floor(Value* a) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, a); }
  Value* rint(Value* a) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::rint, a); }
  Value* copysign(Value* mag, Value* sign) {
    return b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, mag, sign);
  }
  Value* select(Value* cond, Value* a, Value* b) { return b_.CreateSelect(cond, a, b); }
  Value* to_bits(Value* a) { return b_.CreateBitCast(a, int_ty_); }
  Value* from_bits(Value* a) { return b_.CreateBitCast(a, ty_); }

  Value* propagate_nan(Value* x, Value* y) { return select(b_.CreateFCmpUNO(x, x), x, y); }

  // Clamps into [lo, hi]; nan becomes hi, so later integer tricks never see a nan (the
  // callers put the nan back at the end).
  Value* clamp(Value* x, double lo, double hi) {
    Value* below_hi = select(b_.CreateFCmpOLT(x, c(hi)), x, c(hi));
    return select(b_.CreateFCmpOGT(below_hi, c(lo)), below_hi, c(lo));
  }
  Value* clamp_above(Value* x, double hi) { return select(b_.CreateFCmpOLT(x, c(hi)), x, c(hi)); }

  // vscalef for full 512-bit vectors when the function being emitted targets
  // AVX-512 (its "target-features" attribute says so); nullptr otherwise.
  bool can_avx512_scalef(llvm::Type* t) {
    auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(t);
    if (!vt || vt->getPrimitiveSizeInBits() != 512) return false;
    llvm::BasicBlock* bb = b_.GetInsertBlock();
    llvm::Function* f = bb ? bb->getParent() : nullptr;
    if (!f || !f->hasFnAttribute("target-features")) return false;
    return f->getFnAttribute("target-features").getValueAsString().find("+avx512f") != llvm::StringRef::npos;
  }

  Value* avx512_scalef(Value* y, Value* n) {
    if (!can_avx512_scalef(y->getType())) return nullptr;
    auto* vt = llvm::cast<llvm::FixedVectorType>(y->getType());
    bool dbl = vt->getElementType()->isDoubleTy();
    auto id = dbl ? llvm::Intrinsic::x86_avx512_mask_scalef_pd_512 : llvm::Intrinsic::x86_avx512_mask_scalef_ps_512;
    llvm::Value* all = dbl ? static_cast<llvm::Value*>(b_.getInt8(0xFF)) : static_cast<llvm::Value*>(b_.getInt16(0xFFFF));
    // Operands: a, b, passthru, mask, rounding (4 = current direction).
    return b_.CreateIntrinsic(id, {}, {y, n, llvm::UndefValue::get(vt), all, b_.getInt32(4)});
  }

  Value* horner(Value* t, ArrayRef<double> coeffs) {
    Value* acc = c(coeffs.back());
    for (size_t i = coeffs.size() - 1; i-- > 0;) acc = fma(acc, t, c(coeffs[i]));
    return acc;
  }

  llvm::IRBuilderBase& b_;
  llvm::Type* ty_;
  llvm::Type* int_ty_;
  const FloatConsts& k_;
};

}  // namespace

llvm::Value* emit_math(llvm::IRBuilderBase& b, MathFn fn, llvm::Value* x) {
  // The compensated arithmetic must not be reassociated or contracted.
  llvm::IRBuilderBase::FastMathFlagGuard keep_callers_flags(b);
  b.clearFastMathFlags();
  llvm::Type* ty = x->getType();
  llvm::Type* scalar = ty->getScalarType();
  if (scalar->isFloatTy() || scalar->isDoubleTy()) return MathEmitter(b, ty).emit(fn, x);
  if (scalar->isHalfTy() || scalar->isBFloatTy()) {
    // Computed in f32 and rounded once more; well within the f32 bounds at 16 bits.
    llvm::Type* f32 = b.getFloatTy();
    if (auto* vec = llvm::dyn_cast<llvm::VectorType>(ty))
      f32 = llvm::VectorType::get(f32, vec->getElementCount());
    Value* wide = MathEmitter(b, f32).emit(fn, b.CreateFPExt(x, f32));
    return b.CreateFPTrunc(wide, ty);
  }
  llvm::report_fatal_error("Tessera bug: emit_math needs f16/bf16/f32/f64 scalars or vectors");
}

}  // namespace tessera::codegen
