// float_range (codegen/common/float_range.h): the interval of a float value from the IR in
// front of it, which the NVPTX lowering asks before taking ex2.approx.ftz.
#include <gtest/gtest.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <cmath>
#include <memory>

#include "codegen/common/float_range.h"

namespace {

using tessera::codegen::float_range;

struct FloatRangeTest : ::testing::Test {
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> mod = std::make_unique<llvm::Module>("m", ctx);
  llvm::IRBuilder<> b{ctx};
  llvm::Value* x = nullptr;  // an f32 parameter: unbounded

  void SetUp() override {
    auto* fty = llvm::FunctionType::get(b.getVoidTy(), {b.getFloatTy()}, false);
    auto* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, "f", mod.get());
    b.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
    x = fn->getArg(0);
  }
  llvm::Value* c(double v) { return llvm::ConstantFP::get(b.getFloatTy(), v); }
  llvm::Value* call(llvm::Intrinsic::ID id, std::initializer_list<llvm::Value*> args) {
    return b.CreateIntrinsic(id, {b.getFloatTy()}, args);
  }
  llvm::Value* fma(llvm::Value* a, llvm::Value* m, llvm::Value* add) {
    return call(llvm::Intrinsic::fma, {a, m, add});
  }
};

TEST_F(FloatRangeTest, ParametersAreUnboundedConstantsExact) {
  EXPECT_FALSE(float_range(x));
  auto r = float_range(c(-2.5));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, -2.5);
  EXPECT_EQ(r->hi, -2.5);
  EXPECT_FALSE(float_range(c(NAN)));
}

TEST_F(FloatRangeTest, AbsAndClampsBoundOneSide) {
  auto abs = call(llvm::Intrinsic::fabs, {x});
  auto r = float_range(abs);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, 0.0);
  EXPECT_TRUE(std::isinf(r->hi));
  auto a = call(llvm::Intrinsic::minnum, {abs, c(6.0)});  // min(|x|, 6)
  r = float_range(a);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, 0.0);
  EXPECT_EQ(r->hi, 6.0);
  r = float_range(call(llvm::Intrinsic::maxnum, {x, c(-126.0)}));  // max(x, -126): bounded below only
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, -126.0);
  EXPECT_TRUE(std::isinf(r->hi));
  r = float_range(call(llvm::Intrinsic::minimum, {x, c(3.0)}));
  ASSERT_TRUE(r);
  EXPECT_TRUE(std::isinf(r->lo) && r->lo < 0);
  EXPECT_EQ(r->hi, 3.0);
  r = float_range(call(llvm::Intrinsic::fabs, {b.CreateFNeg(a)}));  // |-(min(|x|, 6))|
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, 0.0);
  EXPECT_EQ(r->hi, 6.0);
}

TEST_F(FloatRangeTest, HornerChainOfTheNormalTail) {
  // kernels/activation.py _normal_tail: q(a), a = min(|x|, 6), degree 7.
  auto a = call(llvm::Intrinsic::minnum, {call(llvm::Intrinsic::fabs, {x}), c(6.0)});
  const double coef[] = {-5.390323349274695e-05, -0.0004212376952636987, 0.00738927535712719, -0.05269111320376396,
                         -0.4591531455516815,    -1.1511108875274658,    -0.9999998807907104};
  llvm::Value* q = c(8.470112334180158e-06);
  for (double k : coef) q = fma(q, a, c(k));
  auto r = float_range(q);
  ASSERT_TRUE(r);
  EXPECT_NEAR(r->lo, -35.8, 0.1);
  EXPECT_NEAR(r->hi, -1.0, 1e-6);
  // The same chain in an unbounded x: no interval.
  llvm::Value* u = c(8.470112334180158e-06);
  for (double k : coef) u = fma(u, x, c(k));
  EXPECT_FALSE(float_range(u));
}

TEST_F(FloatRangeTest, ArithmeticOfBoundedOperands) {
  auto a = call(llvm::Intrinsic::minnum, {call(llvm::Intrinsic::fabs, {x}), c(6.0)});  // [0, 6]
  auto r = float_range(b.CreateFSub(b.CreateFMul(a, c(-30.0)), c(100.0)));          // [-280, -100]
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, -280.0);
  EXPECT_EQ(r->hi, -100.0);
  r = float_range(b.CreateFAdd(a, a));  // (the same value twice: still [0, 12])
  ASSERT_TRUE(r);
  EXPECT_EQ(r->hi, 12.0);
  // A 0 * inf corner: unknown; [0, inf] - [0, inf]: [-inf, inf].
  auto abs = call(llvm::Intrinsic::fabs, {x});  // [0, inf]
  EXPECT_FALSE(float_range(b.CreateFMul(abs, c(0.0))));
  r = float_range(b.CreateFSub(abs, abs));
  ASSERT_TRUE(r);
  EXPECT_TRUE(std::isinf(r->lo) && r->lo < 0 && std::isinf(r->hi) && r->hi > 0);
  EXPECT_FALSE(float_range(b.CreateFDiv(a, c(2.0))));  // (division is not tracked)
}

}  // namespace
