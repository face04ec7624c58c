// Payne–Hanek reduction: x·(2/π) mod 4 from the bits of 2/π that matter for x's exponent.
//
// x = m·2^e (m the integer significand, 24 or 53 bits). With 2/π = Σ b_i 2^-i, the
// terms of m·2^e·(2/π) with e - i >= 2 are multiples of 4 and drop out of "mod 4"; so
// only the window W of L bits starting at b_{e-1} is needed, and
//     x·(2/π) mod 4 = m·W / 2^(L-2) mod 4   (+ a truncation error below m·2^(1-L)).
// m·W is an exact big integer (32-bit digits multiplied in 64-bit lanes): its bits
// [L-2, L) are the quadrant, the bits below are the fraction f in [0, 1); rounding to
// the nearest quadrant makes f signed in [-1/2, 1/2), and r = f·π/2.
// How many bits: the f64 closest to a multiple of π/2 leaves |r| ~ 2^-61 (f32: ~2^-30),
// and r needs 53 (24) good bits after that cancellation, so L = 192 (96) and 128 (64)
// fraction bits are kept. Worked example (f32): x = 2^20·1.5 = 1572864, m = 0xC00000,
// e = -3, the window starts at b_{-4}: W's first bits are zeros then 101000101111…,
// and m·W/2^94 = 1001319.75…; mod 4 = 3.75…, so q = 0 after rounding (4 ≡ 0) and
// f = -0.247…, r = -0.388…: sin(1572864) = sin(r) = -0.378….
#include "codegen/common/trig_reduction.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/Module.h>

#include <iterator>
#include <vector>

namespace tessera::codegen {

namespace {

// Bits of 2/π, most significant first, after one word of zeros (b_1 is the top bit of
// word 1): 1216 bits, enough for the window of the largest f64 exponent. Computed with
// integer arithmetic from Machin's formula (floor(2^1184 · 2/π)); the first words are
// the well-known A2F9836E 4E441529 FC2757D1.
constexpr uint32_t kTwoOverPiWords[] = {
    0x00000000, 0xa2f9836e, 0x4e441529, 0xfc2757d1, 0xf534ddc0, 0xdb629599, 0x3c439041, 0xfe5163ab,
    0xdebbc561, 0xb7246e3a, 0x424dd2e0, 0x06492eea, 0x09d1921c, 0xfe1deb1c, 0xb129a73e, 0xe88235f5,
    0x2ebb4484, 0xe99c7026, 0xb45f7e41, 0x3991d639, 0x835339f4, 0x9c845f8b, 0xbdf9283b, 0x1ff897ff,
    0xde05980f, 0xef2f118b, 0x5a0a6d1f, 0x6d367ecf, 0x27cb09b7, 0x4f463f66, 0x9e5fea2d, 0x7527bac7,
    0xebe5f17b, 0x3d0739f7, 0x8a5292ea, 0x6bfb5fb1, 0x1f8d5d08, 0x56033046, 0xfc7b6bab, 0xf0cfbc20,
};
constexpr int kPadBits = 32;

class Reducer {
 public:
  Reducer(llvm::IRBuilderBase& b, llvm::Value* x) : b_(b), x_(x) {
    llvm::Type* t = x->getType();
    lanes_ = llvm::isa<llvm::FixedVectorType>(t) ? llvm::cast<llvm::FixedVectorType>(t)->getNumElements() : 0;
    dbl_ = t->getScalarType()->isDoubleTy();
    i64_ = like(b.getInt64Ty());
    f64_ = like(b.getDoubleTy());
  }

  TrigReduction run() {
    // |x| = m·2^e
    unsigned bits = dbl_ ? 64 : 32, mant_bits = dbl_ ? 52 : 23;
    int bias = dbl_ ? 1075 : 150;
    llvm::Value* ax = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x_);
    llvm::Value* xb = b_.CreateZExt(b_.CreateBitCast(ax, like(b_.getIntNTy(bits))), i64_);
    llvm::Value* m = b_.CreateOr(b_.CreateAnd(xb, k((uint64_t{1} << mant_bits) - 1)), k(uint64_t{1} << mant_bits));
    llvm::Value* e = b_.CreateSub(b_.CreateLShr(xb, k(mant_bits)), k(bias));
    // The window starts at bit index e - 2 + kPadBits of the table (0-based).
    // Clamped so that lanes the caller will not use (small, zero, denormal) index the
    // table in bounds.
    int n_words = dbl_ ? 6 : 3;
    int64_t k_max = (static_cast<int64_t>(std::size(kTwoOverPiWords)) - 1 - n_words) * 32 + 31;
    llvm::Value* k0 = b_.CreateAdd(e, k(kPadBits - 2));
    k0 = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, k0, k(0));
    k0 = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, k0, k(k_max));
    llvm::Value* w0 = b_.CreateLShr(k0, k(5));
    llvm::Value* sh = b_.CreateAnd(k0, k(31));
    std::vector<llvm::Value*> window;  // most significant first, 32-bit values in i64 lanes
    for (int j = 0; j < n_words; ++j) {
      llvm::Value* hi = table_word(b_.CreateAdd(w0, k(j)));
      llvm::Value* lo = table_word(b_.CreateAdd(w0, k(j + 1)));
      llvm::Value* both = b_.CreateOr(b_.CreateShl(hi, k(32)), lo);
      window.push_back(b_.CreateAnd(b_.CreateLShr(both, b_.CreateSub(k(32), sh)), k(0xffffffffu)));
    }
    // m·W in 32-bit digits, least significant first.
    std::vector<llvm::Value*> md = {b_.CreateAnd(m, k(0xffffffffu))};
    if (dbl_) md.push_back(b_.CreateLShr(m, k(32)));
    std::vector<llvm::Value*> wd(window.rbegin(), window.rend());
    std::vector<llvm::Value*> r(wd.size() + md.size(), k(0));
    for (size_t i = 0; i < md.size(); ++i) {
      llvm::Value* carry = k(0);
      for (size_t j = 0; j < wd.size(); ++j) {
        // < 2^64: (2^32-1)^2 + 2·(2^32-1) = 2^64 - 1
        llvm::Value* t = b_.CreateAdd(b_.CreateAdd(b_.CreateMul(md[i], wd[j]), r[i + j]), carry);
        r[i + j] = b_.CreateAnd(t, k(0xffffffffu));
        carry = b_.CreateLShr(t, k(32));
      }
      r[i + wd.size()] = carry;
    }
    // Bits [L-2, L) sit in the top two bits of digit n_words-1; the fraction below.
    int top = n_words - 1;
    llvm::Value* q = b_.CreateAnd(b_.CreateLShr(r[top], k(30)), k(3));
    llvm::Value* f_top = fraction64(r, top);  // bits [L-66, L-2) as a signed fraction of 2^64
    llvm::Value* neg_half = b_.CreateLShr(f_top, k(63));  // f >= 1/2: round up, f -= 1
    q = b_.CreateAnd(b_.CreateAdd(q, neg_half), k(3));
    // f = f_top·2^-64 (+ f_next·2^-128), each piece converted exactly.
    llvm::Value* fh = b_.CreateSIToFP(b_.CreateAShr(f_top, k(32)), f64_);
    llvm::Value* fl = b_.CreateUIToFP(b_.CreateAnd(f_top, k(0xffffffffu)), f64_);
    llvm::Value* a = b_.CreateFMul(fh, c64(0x1p-32));
    llvm::Value* bpart = b_.CreateFMul(fl, c64(0x1p-64));
    llvm::Value* s = b_.CreateFAdd(a, bpart);  // exact unless |a| < 2^-22: the error goes in err
    llvm::Value* err = b_.CreateFSub(bpart, b_.CreateFSub(s, a));
    if (dbl_) {
      llvm::Value* f_next = fraction64(r, top - 2);
      err = b_.CreateFAdd(err, b_.CreateFMul(b_.CreateUIToFP(f_next, f64_), c64(0x1p-128)));
    }
    // r = f·π/2 as hi + lo in f64 (π/2 = P1 + P2).
    const double p1 = 0x1.921fb54442d18p+0, p2 = 0x1.1a62633145c07p-54;
    llvm::Value* rh = b_.CreateFMul(s, c64(p1));
    llvm::Value* rl = fma(s, c64(p1), b_.CreateFNeg(rh));
    rl = b_.CreateFAdd(rl, b_.CreateFAdd(b_.CreateFMul(s, c64(p2)), b_.CreateFMul(err, c64(p1))));
    llvm::Value* hi = b_.CreateFAdd(rh, rl);
    llvm::Value* lo = b_.CreateFSub(rl, b_.CreateFSub(hi, rh));
    if (!dbl_) {  // to f32 hi + lo
      llvm::Type* f32 = like(b_.getFloatTy());
      llvm::Value* h32 = b_.CreateFPTrunc(hi, f32);
      lo = b_.CreateFPTrunc(b_.CreateFAdd(b_.CreateFSub(hi, b_.CreateFPExt(h32, f64_)), lo), f32);
      hi = h32;
    }
    // Negative x: x = (-q)·π/2 - r.
    llvm::Value* neg = b_.CreateFCmpOLT(x_, llvm::Constant::getNullValue(x_->getType()));
    q = b_.CreateSelect(neg, b_.CreateAnd(b_.CreateSub(k(4), q), k(3)), q);
    hi = b_.CreateSelect(neg, b_.CreateFNeg(hi), hi);
    lo = b_.CreateSelect(neg, b_.CreateFNeg(lo), lo);
    return {b_.CreateUIToFP(q, x_->getType()), hi, lo};
  }

 private:
  llvm::Type* like(llvm::Type* scalar) {
    return lanes_ ? static_cast<llvm::Type*>(llvm::FixedVectorType::get(scalar, lanes_)) : scalar;
  }
  llvm::Value* k(uint64_t v) { return llvm::ConstantInt::get(i64_, v); }
  llvm::Value* c64(double v) { return llvm::ConstantFP::get(f64_, v); }
  llvm::Value* fma(llvm::Value* a, llvm::Value* b, llvm::Value* c) {
    return b_.CreateIntrinsic(llvm::Intrinsic::fma, {a->getType()}, {a, b, c});
  }

  // The 64 bits below the top two bits of digit `top`: (r[top] & 2^30-1)·2^34 + r[top-1]·2^2
  // + r[top-2] >> 30.
  llvm::Value* fraction64(const std::vector<llvm::Value*>& r, int top) {
    llvm::Value* x = b_.CreateShl(b_.CreateAnd(r[top], k(0x3fffffffu)), k(34));
    x = b_.CreateOr(x, b_.CreateShl(r[top - 1], k(2)));
    return b_.CreateOr(x, b_.CreateLShr(r[top - 2], k(30)));
  }

  // kTwoOverPiWords[idx] (zero-extended to i64), idx an i64 scalar or vector.
  llvm::Value* table_word(llvm::Value* idx) {
    llvm::Module* mod = b_.GetInsertBlock()->getModule();
    const char* name = "tessera.two_over_pi_words";
    llvm::GlobalVariable* g = mod->getNamedGlobal(name);
    auto* arr_t = llvm::ArrayType::get(b_.getInt32Ty(), std::size(kTwoOverPiWords));
    if (!g) {
      std::vector<llvm::Constant*> words;
      for (uint32_t w : kTwoOverPiWords) words.push_back(b_.getInt32(w));
      g = new llvm::GlobalVariable(*mod, arr_t, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
                                   llvm::ConstantArray::get(arr_t, words), name);
      g->setAlignment(llvm::Align(16));
    }
    llvm::Value* p = b_.CreateInBoundsGEP(arr_t, g, {b_.getInt64(0), idx});
    llvm::Value* w;
    if (lanes_) {
      auto* vt = llvm::FixedVectorType::get(b_.getInt32Ty(), lanes_);
      w = b_.CreateMaskedGather(vt, p, llvm::Align(4));
    } else {
      w = b_.CreateLoad(b_.getInt32Ty(), p);
    }
    return b_.CreateZExt(w, i64_);
  }

  llvm::IRBuilderBase& b_;
  llvm::Value* x_;
  unsigned lanes_ = 0;
  bool dbl_ = false;
  llvm::Type* i64_;
  llvm::Type* f64_;
};

}  // namespace

TrigReduction reduce_huge_trig_argument(llvm::IRBuilderBase& b, llvm::Value* x) { return Reducer(b, x).run(); }

}  // namespace tessera::codegen
