// bf16 -> f32 widening of vector lanes taken from the vector's 32-bit words.
//
// A bf16 is the upper half of an f32, so widening is a shift (compiler/codegen/common/
// elementwise.cpp's bf16_to_f32: zext to i32, shl 16). Loads bring 16-bit elements in
// vectors of 32-bit registers (ld.global.v4.b32), and after LLVM's optimizations lane k
// is widened as
//     %bc = bitcast <4 x i32> %v to <8 x i16>
//     %e  = extractelement <8 x i16> %bc, i64 k
//     %z  = zext i16 %e to i32
//     %f  = shl nuw i32 %z, 16
// which the NVPTX back end prints as an unpack (mov.b32 {%rs1, %rs2}, %r1), a cvt.u32.u16
// and a shl per lane, and ptxas turns into PRMT + IMAD.U32 for an odd lane and IMAD.U32 or
// SHF for an even one: 12 SASS instructions for 8 lanes on sm_90a (fp16's widening is one
// HADD2.F32 a lane). Both halves come out of the word in one instruction each:
//     lane 2j:     shl i32 %w_j, 16          (SHF / IMAD.U32)
//     lane 2j + 1: and i32 %w_j, 0xffff0000  (LOP3)
// with %w_j = extractelement <4 x i32> %v, j (NVPTX is little-endian: lane 2j is the word's
// low half). The same bits, so no result changes; 8 instructions for 8 lanes. Run after
// LLVM's middle-end optimizations (whose canonical form this matches) and before
// instruction selection.
#include "codegen/nvptx/widen_bf16_words_nvptx.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/PatternMatch.h>

#include <vector>

namespace tessera::codegen::nvptx {
namespace {

// The 16-bit lane `x` is, as (vector, lane), through a bitcast from bfloat/half; or nulls.
std::pair<llvm::Value*, uint64_t> lane_of(llvm::Value* x) {
  if (auto* bc = llvm::dyn_cast<llvm::BitCastInst>(x); bc && bc->getSrcTy()->getPrimitiveSizeInBits() == 16)
    x = bc->getOperand(0);
  auto* ext = llvm::dyn_cast<llvm::ExtractElementInst>(x);
  if (!ext) return {nullptr, 0};
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(ext->getVectorOperandType());
  auto* idx = llvm::dyn_cast<llvm::ConstantInt>(ext->getIndexOperand());
  if (!vt || !idx || vt->getNumElements() % 2 || vt->getElementType()->getPrimitiveSizeInBits() != 16)
    return {nullptr, 0};
  return {ext->getVectorOperand(), idx->getZExtValue()};
}

// `shl` is shl (zext i16 lane to i32), 16 of a vector lane: rewritten from the lane's word.
bool widen_from_word(llvm::BinaryOperator* shl) {
  using namespace llvm::PatternMatch;
  llvm::Value* narrow = nullptr;
  if (!match(shl, m_Shl(m_ZExt(m_Value(narrow)), m_SpecificInt(16))) || !shl->getType()->isIntegerTy(32) ||
      !narrow->getType()->isIntegerTy(16))
    return false;
  auto [vec, lane] = lane_of(narrow);
  if (!vec) return false;
  auto* vt = llvm::cast<llvm::FixedVectorType>(vec->getType());
  llvm::IRBuilder<> b(shl);
  auto* words_ty = llvm::FixedVectorType::get(b.getInt32Ty(), vt->getNumElements() / 2);
  llvm::Value* word = b.CreateExtractElement(b.CreateBitCast(vec, words_ty), lane / 2);
  llvm::Value* wide = lane % 2 ? b.CreateAnd(word, b.getInt32(0xffff0000u)) : b.CreateShl(word, 16);
  shl->replaceAllUsesWith(wide);
  shl->eraseFromParent();
  return true;
}

}  // namespace

int widen_bf16_words(llvm::Module& m) {
  int rewritten = 0;
  for (llvm::Function& f : m) {
    std::vector<llvm::BinaryOperator*> shifts;
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& i : bb)
        if (auto* s = llvm::dyn_cast<llvm::BinaryOperator>(&i); s && s->getOpcode() == llvm::Instruction::Shl)
          shifts.push_back(s);
    for (llvm::BinaryOperator* s : shifts) rewritten += widen_from_word(s);
  }
  return rewritten;
}

}  // namespace tessera::codegen::nvptx
