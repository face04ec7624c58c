// Elementwise ops on LLVM scalars or vectors. f16/bf16 arithmetic is computed in
// f32 and rounded back after every op (as the interpreter does); bf16 conversions
// use integer bit manipulation so no soft-float library calls are ever emitted (on
// sm_80+ GPUs f32 -> bf16 is the hardware's cvt instead).
#include "codegen/common/elementwise.h"

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include "codegen/common/vector_math.h"
#include "tessera/compiler.h"

namespace tessera::codegen {

using ir::ElemType;
using ir::OpKind;
using ir::ScalarKind;

llvm::Type* llvm_elem_type(llvm::LLVMContext& c, const ElemType& e) {
  switch (e.kind) {
    case ScalarKind::I1: return llvm::Type::getInt1Ty(c);
    case ScalarKind::I8: case ScalarKind::U8: return llvm::Type::getInt8Ty(c);
    case ScalarKind::I16: case ScalarKind::U16: return llvm::Type::getInt16Ty(c);
    case ScalarKind::I32: case ScalarKind::U32: return llvm::Type::getInt32Ty(c);
    case ScalarKind::I64: case ScalarKind::U64: return llvm::Type::getInt64Ty(c);
    case ScalarKind::F16: return llvm::Type::getHalfTy(c);
    case ScalarKind::BF16: return llvm::Type::getBFloatTy(c);
    case ScalarKind::F32: return llvm::Type::getFloatTy(c);
    case ScalarKind::F64: return llvm::Type::getDoubleTy(c);
    case ScalarKind::Ptr: return llvm::PointerType::get(c, 0);
  }
  return nullptr;
}

llvm::Type* llvm_mem_type(llvm::LLVMContext& c, const ElemType& e) {
  return e.is_bool() ? llvm::Type::getInt8Ty(c) : llvm_elem_type(c, e);
}

llvm::Type* llvm_lanes_type(llvm::LLVMContext& c, const ElemType& e, int width) {
  llvm::Type* t = llvm_elem_type(c, e);
  return width == 1 ? t : llvm::FixedVectorType::get(t, width);
}

llvm::Value* to_mem(llvm::IRBuilderBase& b, llvm::Value* v, const ElemType& e) {
  if (!e.is_bool()) return v;
  llvm::Type* t = b.getInt8Ty();
  if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType())) t = llvm::FixedVectorType::get(t, vt->getNumElements());
  return b.CreateZExt(v, t);
}

llvm::Value* from_mem(llvm::IRBuilderBase& b, llvm::Value* v, const ElemType& e) {
  if (!e.is_bool()) return v;
  return b.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
}

llvm::Value* splat_lanes(llvm::IRBuilderBase& b, llvm::Value* v, int width) {
  if (width == 1 || v->getType()->isVectorTy()) return v;
  return b.CreateVectorSplat(width, v);
}

llvm::Value* emit_constant(llvm::IRBuilderBase& b, const ElemType& e, int width, const ir::Attr& value) {
  llvm::Type* t = llvm_elem_type(b.getContext(), e);
  llvm::Constant* c;
  if (e.is_float()) {
    double d = std::holds_alternative<double>(value) ? std::get<double>(value)
               : std::holds_alternative<int64_t>(value) ? static_cast<double>(std::get<int64_t>(value))
                                                         : (std::get<bool>(value) ? 1.0 : 0.0);
    c = llvm::ConstantFP::get(t, d);
  } else if (e.is_ptr()) {
    c = llvm::ConstantPointerNull::get(llvm::cast<llvm::PointerType>(t));
  } else {
    int64_t i = std::holds_alternative<int64_t>(value) ? std::get<int64_t>(value)
                : std::holds_alternative<double>(value) ? static_cast<int64_t>(std::get<double>(value))
                                                         : (std::get<bool>(value) ? 1 : 0);
    c = llvm::ConstantInt::get(t, static_cast<uint64_t>(i), /*signed*/ true);
  }
  return width == 1 ? static_cast<llvm::Value*>(c) : llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(width), c);
}

namespace {

llvm::Type* with_lanes(llvm::Type* scalar, llvm::Type* like) {
  if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(like)) return llvm::FixedVectorType::get(scalar, vt->getNumElements());
  return scalar;
}

llvm::Value* intrinsic(llvm::IRBuilderBase& b, llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Value*> args) {
  return b.CreateIntrinsic(id, {args[0]->getType()}, args);
}

// bf16 <-> f32 by bit manipulation (round to nearest even; NaN stays NaN).
llvm::Value* bf16_to_f32(llvm::IRBuilderBase& b, llvm::Value* v) {
  llvm::Value* bits = b.CreateBitCast(v, with_lanes(b.getInt16Ty(), v->getType()));
  llvm::Value* w = b.CreateShl(b.CreateZExt(bits, with_lanes(b.getInt32Ty(), v->getType())), 16);
  return b.CreateBitCast(w, with_lanes(b.getFloatTy(), v->getType()));
}

// True when the module is for a GPU that rounds f32 to bf16 in one instruction: sm_80+
// (cvt.rn.bf16.f32, round to nearest even, NaN stays NaN; compile_nvptx.cpp records the
// SM version as the module flag kNvptxSmFlag). There f32_to_bf16 is an fptrunc: the bit
// manipulation below is ~7 integer instructions per element, ~900 per thread in the
// epilogue of a 128x256 bf16 matmul tile on 8 warps (fp16's is one cvt.rn.f16.f32 each).
bool hardware_bf16_rounding(llvm::IRBuilderBase& b) {
  llvm::BasicBlock* block = b.GetInsertBlock();
  llvm::Module* m = block ? block->getModule() : nullptr;
  auto* sm = m ? llvm::mdconst::extract_or_null<llvm::ConstantInt>(m->getModuleFlag(kNvptxSmFlag)) : nullptr;
  return sm && sm->getZExtValue() >= 80;
}

llvm::Value* f32_to_bf16(llvm::IRBuilderBase& b, llvm::Value* f) {
  if (hardware_bf16_rounding(b)) return b.CreateFPTrunc(f, with_lanes(b.getBFloatTy(), f->getType()));
  llvm::Type* i32 = with_lanes(b.getInt32Ty(), f->getType());
  llvm::Value* bits = b.CreateBitCast(f, i32);
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(bits, 16), llvm::ConstantInt::get(i32, 1));
  llvm::Value* rounded = b.CreateAdd(bits, b.CreateAdd(lsb, llvm::ConstantInt::get(i32, 0x7FFF)));
  llvm::Value* is_nan = b.CreateFCmpUNO(f, f);
  llvm::Value* nan_bits = b.CreateOr(bits, llvm::ConstantInt::get(i32, 0x00400000));  // quiet
  llvm::Value* sel = b.CreateSelect(is_nan, nan_bits, rounded);
  llvm::Value* hi = b.CreateTrunc(b.CreateLShr(sel, 16), with_lanes(b.getInt16Ty(), f->getType()));
  return b.CreateBitCast(hi, with_lanes(b.getBFloatTy(), f->getType()));
}

// Adjusts `r`, the f32 rounded to nearest even of some wider value x, to x rounded to
// odd (truncated, with the last bit set when inexact): a later round to nearest even
// to f16 or bf16 (<= 22 significand bits) then equals one correct rounding of x,
// where rounding x to f32 first and then to f16/bf16 could round twice. When inexact
// and r's last bit is even, r moves one ulp toward x (its magnitude up when |x| > |r|).
// Example: x = 1 + 2^-8 + 2^-30 (f64) gives r = 1 + 2^-8, a bf16 tie that would round
// down to 1; rounded to odd it is 1 + 2^-8 + 2^-23, which rounds up to 1 + 2^-7.
llvm::Value* f32_round_to_odd(llvm::IRBuilderBase& b, llvm::Value* r, llvm::Value* inexact, llvm::Value* magnitude_up) {
  llvm::Type* i32 = with_lanes(b.getInt32Ty(), r->getType());
  llvm::Value* bits = b.CreateBitCast(r, i32);
  llvm::Value* even = b.CreateICmpEQ(b.CreateAnd(bits, llvm::ConstantInt::get(i32, 1)), llvm::Constant::getNullValue(i32));
  llvm::Value* step = b.CreateSelect(magnitude_up, llvm::ConstantInt::get(i32, 1), llvm::Constant::getAllOnesValue(i32));
  llvm::Value* fixed = b.CreateSelect(b.CreateAnd(inexact, even), b.CreateAdd(bits, step), bits);
  return b.CreateBitCast(fixed, r->getType());
}

// f64 -> f32 rounded to odd (NaN and inf pass through; overflow gives FLT_MAX).
llvm::Value* f64_to_f32_odd(llvm::IRBuilderBase& b, llvm::Value* x) {
  llvm::Value* r = b.CreateFPTrunc(x, with_lanes(b.getFloatTy(), x->getType()));
  llvm::Value* back = b.CreateFPExt(r, x->getType());
  llvm::Value* inexact = b.CreateFCmpONE(back, x);
  llvm::Value* up = b.CreateFCmpOGT(intrinsic(b, llvm::Intrinsic::fabs, {x}), intrinsic(b, llvm::Intrinsic::fabs, {back}));
  return f32_round_to_odd(b, r, inexact, up);
}

// Integer -> f32 rounded to odd. Integers of up to 32 bits are exact in f64; wider
// ones compare against the RNE result converted back (saturating, which can only
// misjudge exactness at 2^63 / 2^64, values a 16-bit float represents exactly).
llvm::Value* int_to_f32_odd(llvm::IRBuilderBase& b, llvm::Value* v, const ElemType& from) {
  bool uns = from.is_unsigned() || from.is_bool();
  if (from.bits() <= 32) {
    llvm::Type* f64 = with_lanes(b.getDoubleTy(), v->getType());
    return f64_to_f32_odd(b, uns ? b.CreateUIToFP(v, f64) : b.CreateSIToFP(v, f64));
  }
  llvm::Type* f32 = with_lanes(b.getFloatTy(), v->getType());
  llvm::Value* r = uns ? b.CreateUIToFP(v, f32) : b.CreateSIToFP(v, f32);
  auto id = uns ? llvm::Intrinsic::fptoui_sat : llvm::Intrinsic::fptosi_sat;
  llvm::Value* back = b.CreateIntrinsic(id, {v->getType(), f32}, {r});
  llvm::Value* inexact = b.CreateICmpNE(back, v);
  llvm::Value* up;
  if (uns) {
    up = b.CreateICmpUGT(v, back);
  } else {
    llvm::Value* neg = b.CreateICmpSLT(v, llvm::Constant::getNullValue(v->getType()));
    up = b.CreateSelect(neg, b.CreateICmpSLT(v, back), b.CreateICmpSGT(v, back));
  }
  return f32_round_to_odd(b, r, inexact, up);
}

// Widen a float value to the type arithmetic is done in (f16/bf16 -> f32).
llvm::Value* widen(llvm::IRBuilderBase& b, llvm::Value* v, const ElemType& e) {
  if (e.kind == ScalarKind::BF16) return bf16_to_f32(b, v);
  if (e.kind == ScalarKind::F16) return b.CreateFPExt(v, with_lanes(b.getFloatTy(), v->getType()));
  return v;
}
llvm::Value* narrow(llvm::IRBuilderBase& b, llvm::Value* v, const ElemType& e) {
  if (e.kind == ScalarKind::BF16) return f32_to_bf16(b, v);
  if (e.kind == ScalarKind::F16) return b.CreateFPTrunc(v, with_lanes(b.getHalfTy(), v->getType()));
  return v;
}

}  // namespace

// A float downcast rounded toward zero (fp_downcast_rounding="rtz"): the narrowing
// rounded to nearest, moved one ulp toward zero where it went past x in magnitude
// (inf from a finite x becomes the largest finite value). Truncation composes, so
// f64 -> f16 truncates to f32 first.
static llvm::Value* emit_cast_toward_zero(llvm::IRBuilderBase& b, llvm::Value* v, const ElemType& from, const ElemType& to) {
  ElemType f32{ScalarKind::F32};
  if (from.kind == ScalarKind::F64 && to.bits() == 16)
    return emit_cast_toward_zero(b, emit_cast_toward_zero(b, v, from, f32), f32, to);
  llvm::Value* x = widen(b, v, from);
  llvm::Value* r = emit_cast(b, v, from, to);
  llvm::Value* back = emit_cast(b, r, to, from);
  back = widen(b, back, from);
  llvm::Value* past = b.CreateFCmpOGT(intrinsic(b, llvm::Intrinsic::fabs, {back}), intrinsic(b, llvm::Intrinsic::fabs, {x}));
  llvm::Type* bits_t = with_lanes(b.getIntNTy(to.bits()), r->getType());
  llvm::Value* bits = b.CreateBitCast(r, bits_t);
  llvm::Value* toward_zero = b.CreateSub(bits, llvm::ConstantInt::get(bits_t, 1));  // sign-magnitude: |r| - 1 ulp
  return b.CreateBitCast(b.CreateSelect(past, toward_zero, bits), r->getType());
}

llvm::Value* emit_cast(llvm::IRBuilderBase& b, llvm::Value* v, const ElemType& from, const ElemType& to) {
  if (from == to) return v;
  llvm::LLVMContext& c = b.getContext();
  llvm::Type* dst = with_lanes(llvm_elem_type(c, to), v->getType());
  if (from.is_ptr() || to.is_ptr()) {
    if (from.is_ptr() && to.is_ptr()) return v;
    if (from.is_ptr()) return b.CreatePtrToInt(v, dst);
    return b.CreateIntToPtr(b.CreateZExtOrTrunc(v, with_lanes(b.getInt64Ty(), v->getType())), dst);
  }
  if (from.is_int() && to.is_int()) {
    if (to.is_bool()) return b.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
    if (from.is_unsigned() || from.is_bool()) return b.CreateZExtOrTrunc(v, dst);
    return b.CreateSExtOrTrunc(v, dst);
  }
  if (from.is_int() && to.is_float()) {
    if (to.bits() == 16) return narrow(b, int_to_f32_odd(b, v, from), to);
    return (from.is_unsigned() || from.is_bool()) ? b.CreateUIToFP(v, dst) : b.CreateSIToFP(v, dst);
  }
  if (from.is_float() && to.is_int()) {
    llvm::Value* w = widen(b, v, from);
    if (to.is_bool()) return b.CreateFCmpUNE(w, llvm::Constant::getNullValue(w->getType()));
    auto id = to.is_unsigned() ? llvm::Intrinsic::fptoui_sat : llvm::Intrinsic::fptosi_sat;
    return b.CreateIntrinsic(id, {dst, w->getType()}, {w});
  }
  // float -> float
  // f64 -> f16/bf16 goes through f32 rounded to odd: one correct rounding, and no
  // __truncdfhf2 libcall (which the kernel loader cannot resolve).
  llvm::Value* w = from.kind == ScalarKind::F64 && to.bits() == 16 ? f64_to_f32_odd(b, v) : widen(b, v, from);
  if (to.kind == ScalarKind::BF16) return f32_to_bf16(b, w);
  if (to.kind == ScalarKind::F16 && w->getType()->getScalarType()->isFloatTy()) return b.CreateFPTrunc(w, dst);
  return b.CreateFPCast(w, dst);
}

llvm::Value* emit_elementwise(llvm::IRBuilderBase& b, const ir::Op& op, llvm::ArrayRef<llvm::Value*> in_args) {
  // Bring scalars and vectors to one width.
  int width = 1;
  for (llvm::Value* a : in_args)
    if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(a->getType())) width = vt->getNumElements();
  std::vector<llvm::Value*> args;
  for (llvm::Value* a : in_args) args.push_back(splat_lanes(b, a, width));

  const ElemType& in = op.operands.empty() ? op.result()->type.elem : op.operands[0]->type.elem;
  const ElemType& out = op.result()->type.elem;
  switch (op.kind) {
    case OpKind::Cast:
      if (op.str_attr("rounding") == "rtz" && in.is_float() && out.is_float() && out.bits() < in.bits())
        return emit_cast_toward_zero(b, args[0], in, out);
      return emit_cast(b, args[0], in, out);
    case OpKind::Bitcast: {
      llvm::Type* dst = with_lanes(llvm_elem_type(b.getContext(), out), args[0]->getType());
      if (in.is_ptr() && !out.is_ptr()) return b.CreatePtrToInt(args[0], dst);
      if (!in.is_ptr() && out.is_ptr()) return b.CreateIntToPtr(args[0], dst);
      return b.CreateBitCast(args[0], dst);
    }
    case OpKind::AddPtr: {
      const ElemType& off_t = op.operands[1]->type.elem;
      llvm::Type* i64 = with_lanes(b.getInt64Ty(), args[1]->getType());
      bool uns = off_t.is_unsigned() || off_t.is_bool();
      auto widen_offset = [&](llvm::Value* o) { return uns ? b.CreateZExtOrTrunc(o, i64) : b.CreateSExtOrTrunc(o, i64); };
      llvm::Type* elem = llvm_mem_type(b.getContext(), out.pointee_type());
      // An offset a + b known not to wrap (a range-checked `pid*BLOCK + arange`) is
      // the same as two steps, p + a + b, each widened on its own: the step that is
      // the same in every chunk then leaves the loop instead of a sign extension of
      // the sum per chunk.
      auto* add = llvm::dyn_cast<llvm::BinaryOperator>(args[1]);
      if (add && add->getOpcode() == llvm::Instruction::Add && off_t.bits() < 64 &&
          (uns ? add->hasNoUnsignedWrap() : add->hasNoSignedWrap()))
        return b.CreateGEP(elem, b.CreateGEP(elem, args[0], widen_offset(add->getOperand(0))),
                           widen_offset(add->getOperand(1)));
      return b.CreateGEP(elem, args[0], widen_offset(args[1]));
    }
    case OpKind::Select: return b.CreateSelect(args[0], args[1], args[2]);
    case OpKind::Hint: return args[0];
    default: break;
  }

  if (in.is_float()) {
    // No contraction of a*b+c into FMA (GPU Triton contracts): every op rounds once,
    // so results match numpy and the interpreter bit for bit. Use tl.fma for FMA.
    std::vector<llvm::Value*> w;
    for (size_t i = 0; i < args.size(); ++i) w.push_back(widen(b, args[i], op.operands[i]->type.elem));
    llvm::Value* r = nullptr;
    switch (op.kind) {
      case OpKind::Add: r = b.CreateFAdd(w[0], w[1]); break;
      case OpKind::Sub: r = b.CreateFSub(w[0], w[1]); break;
      case OpKind::Mul: r = b.CreateFMul(w[0], w[1]); break;
      case OpKind::Div: r = b.CreateFDiv(w[0], w[1]); break;
      case OpKind::Rem: r = b.CreateFRem(w[0], w[1]); break;
      case OpKind::Min: r = intrinsic(b, llvm::Intrinsic::minnum, w); break;
      case OpKind::Max: r = intrinsic(b, llvm::Intrinsic::maxnum, w); break;
      case OpKind::MinimumNan: r = intrinsic(b, llvm::Intrinsic::minimum, w); break;
      case OpKind::MaximumNan: r = intrinsic(b, llvm::Intrinsic::maximum, w); break;
      case OpKind::Neg: r = b.CreateFNeg(w[0]); break;
      case OpKind::Abs: r = intrinsic(b, llvm::Intrinsic::fabs, {w[0]}); break;
      case OpKind::Floor: r = intrinsic(b, llvm::Intrinsic::floor, {w[0]}); break;
      case OpKind::Ceil: r = intrinsic(b, llvm::Intrinsic::ceil, {w[0]}); break;
      case OpKind::Sqrt: r = intrinsic(b, llvm::Intrinsic::sqrt, {w[0]}); break;
      case OpKind::Rsqrt:
        r = b.CreateFDiv(llvm::ConstantFP::get(w[0]->getType(), 1.0), intrinsic(b, llvm::Intrinsic::sqrt, {w[0]}));
        break;
      case OpKind::Fma: r = intrinsic(b, llvm::Intrinsic::fma, w); break;
      case OpKind::Exp: r = emit_math(b, MathFn::Exp, w[0]); break;
      case OpKind::Exp2: r = emit_math(b, MathFn::Exp2, w[0]); break;
      case OpKind::Log: r = emit_math(b, MathFn::Log, w[0]); break;
      case OpKind::Log2: r = emit_math(b, MathFn::Log2, w[0]); break;
      case OpKind::Sin: r = emit_math(b, MathFn::Sin, w[0]); break;
      case OpKind::Cos: r = emit_math(b, MathFn::Cos, w[0]); break;
      case OpKind::Erf: r = emit_math(b, MathFn::Erf, w[0]); break;
      case OpKind::Tanh: r = emit_math(b, MathFn::Tanh, w[0]); break;
      case OpKind::Sigmoid: r = emit_math(b, MathFn::Sigmoid, w[0]); break;
      case OpKind::Cmp: {
        std::string p = op.str_attr("pred");
        auto pred = p == "eq" ? llvm::CmpInst::FCMP_OEQ : p == "ne" ? llvm::CmpInst::FCMP_UNE
                  : p == "lt" ? llvm::CmpInst::FCMP_OLT : p == "le" ? llvm::CmpInst::FCMP_OLE
                  : p == "gt" ? llvm::CmpInst::FCMP_OGT : llvm::CmpInst::FCMP_OGE;
        return b.CreateFCmp(pred, w[0], w[1]);
      }
      default:
        throw CompileError(std::string("op '") + op.name() + "' is not defined on floats (this is a Tessera bug)", false,
                           op.loc.line, op.loc.col);
    }
    return narrow(b, r, out);
  }

  // Integers (and i1).
  bool uns = in.is_unsigned() || in.is_bool();
  llvm::Type* t = args[0]->getType();
  int bits = in.bits();
  switch (op.kind) {
    case OpKind::Add: return b.CreateAdd(args[0], args[1]);
    case OpKind::Sub: return b.CreateSub(args[0], args[1]);
    case OpKind::Mul: return b.CreateMul(args[0], args[1]);
    case OpKind::Div:
    case OpKind::Rem: {
      // x86 traps on x/0 and INT_MIN/-1: divide by 1 instead and fix the result.
      llvm::Value* zero = llvm::Constant::getNullValue(t);
      llvm::Value* one = llvm::ConstantInt::get(t, 1);
      llvm::Value* dzero = b.CreateICmpEQ(args[1], zero);
      llvm::Value* bad = dzero;
      if (!uns) {
        llvm::Value* minv = llvm::ConstantInt::get(t, llvm::APInt::getSignedMinValue(bits));
        llvm::Value* ovf = b.CreateAnd(b.CreateICmpEQ(args[0], minv), b.CreateICmpEQ(args[1], llvm::Constant::getAllOnesValue(t)));
        bad = b.CreateOr(bad, ovf);
      }
      llvm::Value* d = b.CreateSelect(bad, one, args[1]);
      llvm::Value* r = op.kind == OpKind::Div ? (uns ? b.CreateUDiv(args[0], d) : b.CreateSDiv(args[0], d))
                                              : (uns ? b.CreateURem(args[0], d) : b.CreateSRem(args[0], d));
      return b.CreateSelect(dzero, zero, r);
    }
    case OpKind::And: return b.CreateAnd(args[0], args[1]);
    case OpKind::Or: return b.CreateOr(args[0], args[1]);
    case OpKind::Xor: return b.CreateXor(args[0], args[1]);
    case OpKind::Shl:
    case OpKind::Shr: {
      llvm::Value* amt = b.CreateAnd(args[1], llvm::ConstantInt::get(t, bits - 1));
      if (op.kind == OpKind::Shl) return b.CreateShl(args[0], amt);
      return uns ? b.CreateLShr(args[0], amt) : b.CreateAShr(args[0], amt);
    }
    case OpKind::Min: return intrinsic(b, uns ? llvm::Intrinsic::umin : llvm::Intrinsic::smin, args);
    case OpKind::Max: return intrinsic(b, uns ? llvm::Intrinsic::umax : llvm::Intrinsic::smax, args);
    case OpKind::Neg: return b.CreateNeg(args[0]);
    case OpKind::Not: return b.CreateNot(args[0]);
    case OpKind::Abs:
      if (uns) return args[0];
      return b.CreateIntrinsic(llvm::Intrinsic::abs, {t}, {args[0], b.getFalse()});
    case OpKind::Umulhi: {
      llvm::Type* wide = with_lanes(b.getIntNTy(bits * 2), t);
      llvm::Value* x = uns ? b.CreateZExt(args[0], wide) : b.CreateSExt(args[0], wide);
      llvm::Value* y = uns ? b.CreateZExt(args[1], wide) : b.CreateSExt(args[1], wide);
      return b.CreateTrunc(b.CreateLShr(b.CreateMul(x, y), bits), t);
    }
    case OpKind::Cmp: {
      std::string p = op.str_attr("pred");
      llvm::CmpInst::Predicate pred =
          p == "eq" ? llvm::CmpInst::ICMP_EQ : p == "ne" ? llvm::CmpInst::ICMP_NE
        : p == "lt" ? (uns ? llvm::CmpInst::ICMP_ULT : llvm::CmpInst::ICMP_SLT)
        : p == "le" ? (uns ? llvm::CmpInst::ICMP_ULE : llvm::CmpInst::ICMP_SLE)
        : p == "gt" ? (uns ? llvm::CmpInst::ICMP_UGT : llvm::CmpInst::ICMP_SGT)
                    : (uns ? llvm::CmpInst::ICMP_UGE : llvm::CmpInst::ICMP_SGE);
      return b.CreateICmp(pred, args[0], args[1]);
    }
    default:
      throw CompileError(std::string("op '") + op.name() + "' is not defined on integers (this is a Tessera bug)",
                         false, op.loc.line, op.loc.col);
  }
}

}  // namespace tessera::codegen
