// erf, tanh and sigmoid of f32 on NVIDIA GPUs: a short odd polynomial near 0, and past
// it a form built on ex2.approx (one SFU instruction, relative error about 2^-22) that
// needs no division (sigmoid: ex2 and rcp.approx everywhere). Both sides are computed and one is selected (a warp's lanes
// take both sides anyway), so the code is straight-line.
//
// Why not the shared lowering (vector_math.cpp): it is written for exact CPU results
// (< 1 ulp) with a correctly rounded division, a compensated exp and a scale by 2^n,
// about 80 instructions per erf; GELU over fp16 then ran at half the memory bandwidth.
// Here the error budget is the one docs/language.md gives the GPU: a few ulp.
//
// Coefficients: lowest order first, fitted in 40-digit arithmetic (Lawson-weighted
// least squares, i.e. near-minimax, on Chebyshev nodes) and rounded to f32; "fit" is
// the fit's worst error after that rounding, so the f32 evaluation and the SFU
// dominate the measured bounds (math_nvptx.h).
#include "codegen/nvptx/math_nvptx.h"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

namespace tessera::codegen::nvptx {
namespace {

using llvm::ArrayRef;
using llvm::Value;

// clang-format off
// erf(x) = x + x·P(x²) for |x| < 1: the shared lowering's f32 fit (err 2^-28.6).
const double kErfSmall[] = {0x1.06eba8p-3, -0x1.81273ep-2, 0x1.ce2cf8p-4, -0x1.b7f90ep-6,
                            0x1.5405b2p-8, -0x1.a3f7p-11,  0x1.496a32p-14};
// log2(erfc(t)) = Q(t) for 1 <= t <= 3.92, weighted by erfc(t) (the error that reaches
// erf = 1 - 2^Q): fit 2^-29.9 absolute on erf.
const double kLog2Erfc[] = {-0x1.0b83bap-11, -0x1.a03fecp+0, -0x1.d76e74p-1, -0x1.30706ep-3,
                            0x1.01b58ep-5,   -0x1.15f064p-8, 0x1.18bceep-12};
// tanh(x) = x + x³·P(x²) for |x| < 0.6: fit 2^-28.4 relative.
const double kTanhSmall[] = {-0x1.55553ep-2, 0x1.1109aep-3, -0x1.b898dap-5, 0x1.54b882p-6,
                             -0x1.8257d0p-8};
// clang-format on

constexpr double kErfSplit = 1.0;     // |x| below: the polynomial; above: 1 - 2^Q
constexpr double kErfOneAbove = 3.92;  // erfc < 2^-25 above: erf rounds to ±1
constexpr double kTanhSplit = 0.6;
constexpr double kTanhOneAbove = 10.0;  // 2/(1 + e^2x) < 2^-25 above: tanh rounds to ±1
constexpr double kTwoLog2e = 2.8853900817779268;
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;
constexpr double kSigmoidZeroAbove = 104.0;  // e^-104 < 2^-150: sigmoid(-|x|) rounds to 0

class F32Math {
 public:
  explicit F32Math(llvm::IRBuilderBase& b) : b_(b) {}

  Value* c(double v) { return llvm::ConstantFP::get(b_.getFloatTy(), v); }
  Value* add(Value* a, Value* x) { return b_.CreateFAdd(a, x); }
  Value* sub(Value* a, Value* x) { return b_.CreateFSub(a, x); }
  Value* mul(Value* a, Value* x) { return b_.CreateFMul(a, x); }
  Value* fma(Value* a, Value* x, Value* y) {
    return b_.CreateIntrinsic(llvm::Intrinsic::fma, {b_.getFloatTy()}, {a, x, y});
  }
  Value* fabs(Value* a) { return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, a); }
  Value* min(Value* a, Value* x) { return b_.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, a, x); }
  // mag with the sign of `sign`, for a mag >= 0 or nan: one OR of the sign bit (a
  // lop3), where llvm.copysign becomes five instructions on NVPTX.
  Value* with_sign_of(Value* mag, Value* sign) {
    llvm::Type* i32 = b_.getInt32Ty();
    Value* sign_bit = b_.CreateAnd(b_.CreateBitCast(sign, i32), b_.getInt32(0x80000000u));
    return b_.CreateBitCast(b_.CreateOr(b_.CreateBitCast(mag, i32), sign_bit), b_.getFloatTy());
  }
  // 2^a; flushes denormal results to 0, which no caller here produces.
  Value* ex2(Value* a) { return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_ex2_approx_ftz_f, {}, {a}); }
  // 2^a with denormal results kept (ex2.approx.f32: ptxas adds a scaling around the SFU).
  Value* ex2_denormal(Value* a) { return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_ex2_approx_f, {}, {a}); }
  Value* rcp(Value* a) { return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_rcp_approx_ftz_f, {}, {a}); }
  // The side chosen for |x| >= split (ordered: a nan input takes the polynomial side,
  // which propagates it).
  Value* pick(Value* ax, double split, Value* above, Value* below) {
    return b_.CreateSelect(b_.CreateFCmpOGE(ax, c(split)), above, below);
  }
  Value* horner(Value* t, ArrayRef<double> coeffs) {
    Value* acc = c(coeffs.back());
    for (size_t i = coeffs.size() - 1; i-- > 0;) acc = fma(acc, t, c(coeffs[i]));
    return acc;
  }

 private:
  llvm::IRBuilderBase& b_;
};

}  // namespace

// Worked example, erf(2): Q(2) = -7.7400, 2^Q = 0.0046777 (= erfc(2)), 1 - that =
// 0.9953223. Past |x| = 1 erfc <= 0.16, so the SFU's 2^-22 relative error costs at most
// 0.16·2^-22 = 0.6 ulp of a result in [0.84, 1).
llvm::Value* emit_erf_f32_nvptx(llvm::IRBuilderBase& b, llvm::Value* x) {
  llvm::IRBuilderBase::FastMathFlagGuard keep_callers_flags(b);
  b.clearFastMathFlags();
  F32Math m(b);
  // erf|x| on both sides, then x's sign (so erf(-0) = -0 and the sign costs one OR).
  Value* ax = m.fabs(x);
  Value* small = m.fma(ax, m.horner(m.mul(x, x), kErfSmall), ax);
  Value* erfc = m.ex2(m.horner(m.min(ax, m.c(kErfOneAbove)), kLog2Erfc));
  return m.with_sign_of(m.pick(ax, kErfSplit, m.sub(m.c(1), erfc), small), x);
}

// Past |x| = 0.6: tanh|x| = 1 - 2r, r = 1/d, d = 1 + e, e = 2^(2|x|·log2 e). rcp.approx
// gets one Newton step against d's exact value d + d_err (Fast2Sum: e >= 3 > 1), so r
// is nearly exact and e's SFU error, damped by 2e/(1 + e)² <= 0.36, dominates.
// Worked example, tanh(1): e = 7.389056, d = 8.389056, r = 0.1192029, 1 - 2r = 0.7615942.
llvm::Value* emit_tanh_f32_nvptx(llvm::IRBuilderBase& b, llvm::Value* x) {
  llvm::IRBuilderBase::FastMathFlagGuard keep_callers_flags(b);
  b.clearFastMathFlags();
  F32Math m(b);
  // tanh|x| on both sides, then x's sign, as erf.
  Value* ax = m.fabs(x);
  Value* z = m.mul(x, x);
  Value* small = m.fma(m.mul(ax, z), m.horner(z, kTanhSmall), ax);
  Value* e = m.ex2(m.mul(m.min(ax, m.c(kTanhOneAbove)), m.c(kTwoLog2e)));
  Value* d = m.add(m.c(1), e);
  Value* d_err = m.add(m.sub(e, d), m.c(1));
  Value* r = m.rcp(d);
  Value* residual = m.sub(m.fma(b.CreateFNeg(d), r, m.c(1)), m.mul(d_err, r));  // 1 - r·(d + d_err)
  r = m.fma(r, residual, r);
  return m.with_sign_of(m.pick(ax, kTanhSplit, m.fma(m.c(-2), r, m.c(1)), small), x);
}

// sigmoid(x) = r = 1/(1 + e) for x >= 0 and e·r for x < 0, with e = e^-|x| in (0, 1].
// e^-|x| = 2^(hi + lo) where hi + lo = -|x|·log2 e to about 2^-40 (hi rounded, lo by an
// FMA and log2 e's tail), so e = 2^hi·(1 + lo·ln 2): on the x < 0 side the result is
// e itself (times r in (1/2, 1]) and an error in the exponent would reach it undamped
// (the plain |x|·log2 e product's rounding costs up to |x|·2^-24 relative: 80 ulp at
// x = -80). r is rcp.approx with one Newton step against d = 1 + e's exact value
// d + d_err (Fast2Sum: 1 >= e), as tanh. Results below 2^-126 stay denormal
// (ex2.approx without ftz), down to 0 past |x| = 104.
// Worked example, sigmoid(-2): e = 0.1353353, d = 1.1353353, r = 0.8807971, e·r = 0.1192029.
llvm::Value* emit_sigmoid_f32_nvptx(llvm::IRBuilderBase& b, llvm::Value* x) {
  llvm::IRBuilderBase::FastMathFlagGuard keep_callers_flags(b);
  b.clearFastMathFlags();
  F32Math m(b);
  const float log2e_hi = static_cast<float>(kLog2e);
  const double log2e_lo = kLog2e - static_cast<double>(log2e_hi);
  Value* t = b.CreateFNeg(m.min(m.fabs(x), m.c(kSigmoidZeroAbove)));  // -|x|, finite (nan -> 104)
  Value* hi = m.mul(t, m.c(log2e_hi));
  Value* lo = m.fma(t, m.c(log2e_lo), m.fma(t, m.c(log2e_hi), b.CreateFNeg(hi)));
  Value* p = m.ex2_denormal(hi);
  Value* e = m.fma(p, m.mul(lo, m.c(kLn2)), p);
  Value* d = m.add(m.c(1), e);
  Value* d_err = m.add(m.sub(m.c(1), d), e);
  Value* r = m.rcp(d);
  Value* residual = m.sub(m.fma(b.CreateFNeg(d), r, m.c(1)), m.mul(d_err, r));  // 1 - r·(d + d_err)
  r = m.fma(r, residual, r);
  Value* y = b.CreateSelect(b.CreateFCmpOLT(x, m.c(0)), m.mul(e, r), r);
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, y);  // nan in, nan out
}

}  // namespace tessera::codegen::nvptx
