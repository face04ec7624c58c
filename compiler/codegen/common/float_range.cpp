// Interval arithmetic over the LLVM IR in front of a float value (float_range.h).
//
// Worked example, kernels/activation.py _normal_tail's exp2 argument (a degree-7 Horner
// chain in a = min(|x|, 6)):
//   fabs(x)                      [0, inf]
//   minnum(fabs(x), 6.0)         [0, 6]          (minnum of NaN and 6 is 6)
//   fma(8.47e-6, a, -5.39e-5)    [-5.39e-5, -3.3e-6]
//   ... five more fmas ...
//   fma(q, a, -0.99999988)       [-35.8, -1.0]   (each step: the product's four corners)
// so ex2 of it never yields a denormal (-35.8 >= -126) and takes the .ftz form without a
// clamp instruction. Horner intervals are loose (each step forgets that q and a move
// together; the true range here is [-31, -1]), which only costs precision, not soundness.
#include "codegen/common/float_range.h"

#include <algorithm>
#include <cmath>

#include <llvm/IR/Constants.h>
#include <llvm/IR/InstrTypes.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>

namespace tessera::codegen {

namespace {

constexpr int kMaxDepth = 32;  // a Horner chain of degree 7 is 8 deep; anything this deep is unbounded

constexpr double kInf = HUGE_VAL;

std::optional<FloatRange> range_at(const llvm::Value* v, int depth);

// The product interval (the four corners); nullopt where a corner is 0 * inf.
std::optional<FloatRange> times(FloatRange a, FloatRange b) {
  const double c[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
  for (double x : c)
    if (std::isnan(x)) return std::nullopt;
  return FloatRange{*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}

std::optional<FloatRange> plus(FloatRange a, FloatRange b) {
  const double lo = a.lo + b.lo, hi = a.hi + b.hi;
  if (std::isnan(lo) || std::isnan(hi)) return std::nullopt;  // -inf + inf
  return FloatRange{lo, hi};
}

std::optional<FloatRange> intrinsic_range(const llvm::IntrinsicInst* call, int depth) {
  auto arg = [&](unsigned i) { return range_at(call->getArgOperand(i), depth + 1); };
  switch (call->getIntrinsicID()) {
    case llvm::Intrinsic::fabs: {
      auto r = arg(0);
      if (!r) return FloatRange{0.0, kInf};
      if (r->lo >= 0) return r;
      if (r->hi <= 0) return FloatRange{-r->hi, -r->lo};
      return FloatRange{0.0, std::max(-r->lo, r->hi)};
    }
    case llvm::Intrinsic::minnum:
    case llvm::Intrinsic::minimum: {
      // min(a, b) <= either bound; >= the smaller lower bound (an unbounded side: -inf).
      auto a = arg(0), b = arg(1);
      if (!a && !b) return std::nullopt;
      const double hi = std::min(a ? a->hi : kInf, b ? b->hi : kInf);
      const double lo = std::min(a ? a->lo : -kInf, b ? b->lo : -kInf);
      return FloatRange{lo, hi};
    }
    case llvm::Intrinsic::maxnum:
    case llvm::Intrinsic::maximum: {
      auto a = arg(0), b = arg(1);
      if (!a && !b) return std::nullopt;
      const double lo = std::max(a ? a->lo : -kInf, b ? b->lo : -kInf);
      const double hi = std::max(a ? a->hi : kInf, b ? b->hi : kInf);
      return FloatRange{lo, hi};
    }
    case llvm::Intrinsic::fma:
    case llvm::Intrinsic::fmuladd: {
      auto a = arg(0), b = arg(1), c = arg(2);
      if (!a || !b || !c) return std::nullopt;
      auto p = times(*a, *b);
      return p ? plus(*p, *c) : std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

std::optional<FloatRange> range_at(const llvm::Value* v, int depth) {
  if (depth > kMaxDepth) return std::nullopt;
  if (const auto* c = llvm::dyn_cast<llvm::ConstantFP>(v)) {
    const double d = c->getValueAPF().convertToDouble();
    if (std::isnan(d)) return std::nullopt;
    return FloatRange{d, d};
  }
  if (const auto* call = llvm::dyn_cast<llvm::IntrinsicInst>(v)) return intrinsic_range(call, depth);
  if (const auto* un = llvm::dyn_cast<llvm::UnaryOperator>(v)) {
    if (un->getOpcode() != llvm::Instruction::FNeg) return std::nullopt;
    auto r = range_at(un->getOperand(0), depth + 1);
    return r ? std::optional<FloatRange>(FloatRange{-r->hi, -r->lo}) : std::nullopt;
  }
  if (const auto* bin = llvm::dyn_cast<llvm::BinaryOperator>(v)) {
    const auto op = bin->getOpcode();
    if (op != llvm::Instruction::FMul && op != llvm::Instruction::FAdd && op != llvm::Instruction::FSub)
      return std::nullopt;
    auto a = range_at(bin->getOperand(0), depth + 1), b = range_at(bin->getOperand(1), depth + 1);
    if (!a || !b) return std::nullopt;
    if (op == llvm::Instruction::FMul) return times(*a, *b);
    if (op == llvm::Instruction::FSub) b = FloatRange{-b->hi, -b->lo};
    return plus(*a, *b);
  }
  return std::nullopt;
}

}  // namespace

std::optional<FloatRange> float_range(const llvm::Value* v) { return range_at(v, 0); }

}  // namespace tessera::codegen
