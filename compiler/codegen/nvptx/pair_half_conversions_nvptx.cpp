// Two f32 -> f16/bf16 roundings in one instruction where both results go into one vector:
// LLVM 19's NVPTX backend selects one cvt.rn.f16.f32 per element even for a <2 x half>
// store, while sm_80+ has cvt.rn.f16x2.f32 d, a, b (a rounded into the upper half of d,
// b into the lower; bf16x2 likewise). Each is round-to-nearest-even, the same rounding as
// the single conversion (overflow to inf, denormals, ties, NaN stay NaN), so pairing
// changes no result bit; it halves the conversions of every 16-bit epilogue.
//
// Worked example: the fp16 epilogue of a 128x256 wgmma tile on 8 warps stores each
// thread's accumulator run two columns at a time (store_through_smem_nvptx.cpp), after
// the optimizer as
//     %lo = fptrunc float %c0 to half
//     %hi = fptrunc float %c1 to half
//     %v0 = insertelement <2 x half> poison, half %lo, i32 0
//     %v1 = insertelement <2 x half> %v0, half %hi, i32 1
//     store <2 x half> %v1, ptr addrspace(3) %p
// which printed two cvt.rn.f16.f32 and a mov.b32 {lo, hi} (128 conversions per thread
// per tile). Paired, lanes 0 and 1 come from one call:
//     %pair = call <2 x half> @llvm.nvvm.ff2f16x2.rn(float %c1, float %c0)
// (upper lane first) and the store takes the register cvt.rn.f16x2.f32 wrote: 64
// conversions, no packing moves. Run after LLVM's middle-end optimizations (which would
// not look through the intrinsic) and before instruction selection.
#include "codegen/nvptx/pair_half_conversions_nvptx.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <vector>

namespace tessera::codegen::nvptx {
namespace {

// The float a scalar f32 -> f16/bf16 conversion rounds, or null if v is not one.
llvm::Value* rounded_float(llvm::Value* v) {
  auto* t = llvm::dyn_cast<llvm::FPTruncInst>(v);
  if (!t || !t->getSrcTy()->isFloatTy()) return nullptr;
  llvm::Type* d = t->getDestTy();
  return d->isHalfTy() || d->isBFloatTy() ? t->getOperand(0) : nullptr;
}

llvm::Intrinsic::ID paired_conversion(llvm::Type* half_or_bfloat) {
  return half_or_bfloat->isHalfTy() ? llvm::Intrinsic::nvvm_ff2f16x2_rn : llvm::Intrinsic::nvvm_ff2bf16x2_rn;
}

// The insertelement of lane `lane` further up the chain that builds ins's vector (each link
// used only by the next), or null.
llvm::InsertElementInst* insertion_of_lane(llvm::InsertElementInst* ins, uint64_t lane) {
  for (auto* up = llvm::dyn_cast<llvm::InsertElementInst>(ins->getOperand(0)); up && up->hasOneUse();
       up = llvm::dyn_cast<llvm::InsertElementInst>(up->getOperand(0))) {
    auto* idx = llvm::dyn_cast<llvm::ConstantInt>(up->getOperand(2));
    if (!idx) return nullptr;
    if (idx->getZExtValue() == lane) return up;
  }
  return nullptr;
}

// Lane 2k+1 inserted at ins, lane 2k earlier in the same chain, both rounded from f32 to
// the same 16-bit type: re-insert both lanes from one paired conversion at ins.
bool pair_insertions(llvm::InsertElementInst* ins) {
  auto* idx = llvm::dyn_cast<llvm::ConstantInt>(ins->getOperand(2));
  llvm::Value* hi = rounded_float(ins->getOperand(1));
  if (!idx || idx->getZExtValue() % 2 != 1 || !hi) return false;
  llvm::InsertElementInst* low_ins = insertion_of_lane(ins, idx->getZExtValue() - 1);
  llvm::Value* lo = low_ins ? rounded_float(low_ins->getOperand(1)) : nullptr;
  llvm::Type* elem = ins->getOperand(1)->getType();
  if (!lo || low_ins->getOperand(1)->getType() != elem) return false;
  llvm::IRBuilder<> b(ins);
  llvm::Value* pair = b.CreateIntrinsic(paired_conversion(elem), {}, {hi, lo});
  uint64_t lane = idx->getZExtValue() - 1;
  // The earlier insertion of lane 2k stays (now overwritten); instruction selection folds it away.
  llvm::Value* v = b.CreateInsertElement(ins->getOperand(0), b.CreateExtractElement(pair, uint64_t{0}), lane);
  v = b.CreateInsertElement(v, b.CreateExtractElement(pair, uint64_t{1}), lane + 1);
  llvm::Value* old_lo = low_ins->getOperand(1);
  llvm::Value* old_hi = ins->getOperand(1);
  ins->replaceAllUsesWith(v);
  ins->eraseFromParent();
  // The chain link of lane 2k is used by the rest of the chain only; its conversion may die.
  for (llvm::Value* t : {old_hi, old_lo})
    if (auto* i = llvm::dyn_cast<llvm::Instruction>(t); i && i->use_empty()) i->eraseFromParent();
  return true;
}

// fptrunc <2n x float> to <2n x half/bfloat>: n paired conversions.
int pair_vector_conversion(llvm::FPTruncInst* t) {
  auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(t->getDestTy());
  if (!vt || vt->getNumElements() % 2 != 0 || !t->getSrcTy()->getScalarType()->isFloatTy()) return 0;
  llvm::Type* elem = vt->getElementType();
  if (!elem->isHalfTy() && !elem->isBFloatTy()) return 0;
  llvm::IRBuilder<> b(t);
  llvm::Value* src = t->getOperand(0);
  llvm::Value* v = llvm::PoisonValue::get(vt);
  for (uint64_t lane = 0; lane < vt->getNumElements(); lane += 2) {
    llvm::Value* pair = b.CreateIntrinsic(paired_conversion(elem), {},
                                          {b.CreateExtractElement(src, lane + 1), b.CreateExtractElement(src, lane)});
    v = b.CreateInsertElement(v, b.CreateExtractElement(pair, uint64_t{0}), lane);
    v = b.CreateInsertElement(v, b.CreateExtractElement(pair, uint64_t{1}), lane + 1);
  }
  t->replaceAllUsesWith(v);
  t->eraseFromParent();
  return static_cast<int>(vt->getNumElements() / 2);
}

}  // namespace

int pair_half_conversions(llvm::Module& m, int cc) {
  if (cc < 80) return 0;  // cvt.rn.{f16,bf16}x2.f32 needs sm_80
  int paired = 0;
  for (llvm::Function& f : m) {
    std::vector<llvm::InsertElementInst*> insertions;
    std::vector<llvm::FPTruncInst*> vector_truncs;
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& i : bb) {
        if (auto* ins = llvm::dyn_cast<llvm::InsertElementInst>(&i)) insertions.push_back(ins);
        if (auto* t = llvm::dyn_cast<llvm::FPTruncInst>(&i); t && t->getType()->isVectorTy()) vector_truncs.push_back(t);
      }
    for (llvm::InsertElementInst* ins : insertions) paired += pair_insertions(ins);
    for (llvm::FPTruncInst* t : vector_truncs) paired += pair_vector_conversion(t);
  }
  return paired;
}

}  // namespace tessera::codegen::nvptx
