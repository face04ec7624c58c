// Exact float remainder (C fmod) for the NVPTX lowering: shift-and-subtract long
// division on the significands, one quotient bit per step (as in musl's fmod).
//
// Worked example, f32 fmod(7.5, 2): 7.5 = 0xF00000 * 2^-21 and 2 = 0x800000 * 2^-22
// (24-bit significands m, exponents e with the top significand bit at bit 23).
// Loop while ex > ey (once here): m = 0xF00000 - 0x800000 = 0x700000 (not negative,
// kept), then m <<= 1 -> 0xE00000, ex = -22. Last step: 0xE00000 - 0x800000 =
// 0x600000. Renormalize (top bit back to bit 23): 0xC00000 * 2^-23 = 1.5. The sign
// is x's. Every step is exact integer arithmetic, so the result is the exact
// remainder (which is always representable).
#include "codegen/nvptx/float_remainder_nvptx.h"

#include <llvm/IR/Intrinsics.h>

namespace tessera::codegen::nvptx {

llvm::Value* emit_exact_fmod(llvm::IRBuilderBase& b, llvm::Value* x, llvm::Value* y) {
  llvm::Type* fty = x->getType();
  const bool f64 = fty->isDoubleTy();
  const unsigned W = f64 ? 64 : 32, M = f64 ? 52 : 23;  // bits, stored significand bits
  llvm::IntegerType* ity = b.getIntNTy(W);
  auto C = [&](uint64_t v) { return llvm::ConstantInt::get(ity, v); };
  const uint64_t sign_bit = uint64_t(1) << (W - 1), inf_bits = ((uint64_t(1) << (W - 1 - M)) - 1) << M;
  const uint64_t implicit = uint64_t(1) << M, mant_mask = implicit - 1;

  llvm::Value* ux = b.CreateBitCast(x, ity);
  llvm::Value* uy = b.CreateBitCast(y, ity);
  llvm::Value* sx = b.CreateAnd(ux, C(sign_bit));
  llvm::Value* ax = b.CreateAnd(ux, C(~sign_bit));
  llvm::Value* ay = b.CreateAnd(uy, C(~sign_bit));
  // NaN: y == 0, x inf or NaN, y NaN. x itself: |x| < |y| (y = inf included).
  llvm::Value* nan_result = b.CreateOr(b.CreateOr(b.CreateICmpEQ(ay, C(0)), b.CreateICmpUGE(ax, C(inf_bits))),
                                       b.CreateICmpUGT(ay, C(inf_bits)));
  llvm::Value* x_result = b.CreateICmpULT(ax, ay);
  llvm::Value* skip = b.CreateOr(nan_result, x_result);

  // Significand with its top bit at bit M, and the matching exponent (subnormals
  // normalized with a count of leading zeros, so one subtraction per step suffices).
  auto normalize = [&](llvm::Value* a, llvm::Value** m, llvm::Value** e) {
    llvm::Value* biased = b.CreateLShr(a, C(M));
    llvm::Value* lz = b.CreateIntrinsic(llvm::Intrinsic::ctlz, {ity}, {a, b.getFalse()});
    llvm::Value* shift = b.CreateSub(lz, C(W - 1 - M));
    llvm::Value* sub = b.CreateICmpEQ(biased, C(0));
    *m = b.CreateSelect(sub, b.CreateShl(a, shift), b.CreateOr(b.CreateAnd(a, C(mant_mask)), C(implicit)));
    *e = b.CreateSelect(sub, b.CreateSub(C(1), shift), biased);  // signed values in ity
  };
  llvm::Value *mx, *ex, *my, *ey;
  normalize(ax, &mx, &ex);
  normalize(ay, &my, &ey);
  ex = b.CreateSelect(skip, ey, ex);  // no steps for the special cases

  llvm::Function* fn = b.GetInsertBlock()->getParent();
  llvm::LLVMContext& ctx = b.getContext();
  llvm::BasicBlock* pre = b.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx, "fmod.step", fn);
  auto* body = llvm::BasicBlock::Create(ctx, "fmod.body", fn);
  auto* done = llvm::BasicBlock::Create(ctx, "fmod.done", fn);
  b.CreateBr(header);
  b.SetInsertPoint(header);
  llvm::PHINode* m = b.CreatePHI(ity, 2, "fmod.m");
  llvm::PHINode* e = b.CreatePHI(ity, 2, "fmod.e");
  m->addIncoming(mx, pre);
  e->addIncoming(ex, pre);
  b.CreateCondBr(b.CreateICmpSGT(e, ey), body, done);
  b.SetInsertPoint(body);
  llvm::Value* diff = b.CreateSub(m, my);
  llvm::Value* kept = b.CreateSelect(b.CreateICmpSLT(diff, C(0)), m, diff);
  m->addIncoming(b.CreateShl(kept, C(1)), body);
  e->addIncoming(b.CreateSub(e, C(1)), body);
  b.CreateBr(header);

  b.SetInsertPoint(done);
  llvm::Value* diff_last = b.CreateSub(m, my);
  llvm::Value* r = b.CreateSelect(b.CreateICmpSLT(diff_last, C(0)), m, diff_last);
  // Renormalize: top bit back to bit M; a result below the normal range is subnormal.
  llvm::Value* lz = b.CreateIntrinsic(llvm::Intrinsic::ctlz, {ity}, {r, b.getFalse()});
  llvm::Value* shift = b.CreateSub(lz, C(W - 1 - M));
  llvm::Value* rn = b.CreateShl(r, shift);
  llvm::Value* er = b.CreateSub(e, shift);
  llvm::Value* normal = b.CreateOr(b.CreateSub(rn, C(implicit)), b.CreateShl(er, C(M)));
  llvm::Value* subnormal = b.CreateLShr(rn, b.CreateSub(C(1), er));
  llvm::Value* bits = b.CreateSelect(b.CreateICmpEQ(r, C(0)), C(0),
                                     b.CreateSelect(b.CreateICmpSGT(er, C(0)), normal, subnormal));
  llvm::Value* result = b.CreateBitCast(b.CreateOr(bits, sx), fty);  // the sign of x, also for 0
  result = b.CreateSelect(x_result, x, result);
  return b.CreateSelect(nan_result, llvm::ConstantFP::getNaN(fty), result);
}

}  // namespace tessera::codegen::nvptx
