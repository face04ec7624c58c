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

#include <llvm/ADT/DenseMap.h>
#include <llvm/IR/Constants.h>
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

// Two lanes' values that one paired conversion can produce: both rounded from f32, or two
// constants (the other edge of a phi below).
bool both_rounded(llvm::Value* lo, llvm::Value* hi) { return rounded_float(lo) && rounded_float(hi); }
bool both_constant(llvm::Value* lo, llvm::Value* hi) {
  return llvm::isa<llvm::Constant>(lo) && llvm::isa<llvm::Constant>(hi);
}

// The conversions may sit in another block than the store: a persistent matmul rounds its
// accumulator in the K loop's drain and reaches the store through phis (phi [%c.rounded,
// %drain], [0, %no_steps]). Two such phis of one block pair when every edge brings two
// rounded values or two constants, at least one edge the former.
bool pairable_phis(llvm::PHINode* lo, llvm::PHINode* hi) {
  if (lo->getParent() != hi->getParent()) return false;
  bool any_rounded = false;
  for (unsigned i = 0; i < lo->getNumIncomingValues(); ++i) {
    llvm::BasicBlock* from = lo->getIncomingBlock(i);
    if (hi->getBasicBlockIndex(from) < 0) return false;
    llvm::Value *l = lo->getIncomingValue(i), *h = hi->getIncomingValueForBlock(from);
    if (!both_rounded(l, h) && !both_constant(l, h)) return false;
    any_rounded |= both_rounded(l, h);
  }
  return any_rounded;
}

// <2 x T> of (lo, hi) from one paired conversion placed before `at`, or null where the lanes
// are not two roundings from f32 (directly or through pairable phis).
llvm::Value* paired_lanes(llvm::Instruction* at, llvm::Value* lo, llvm::Value* hi, llvm::Type* elem) {
  llvm::IRBuilder<> b(at);
  if (both_rounded(lo, hi)) return b.CreateIntrinsic(paired_conversion(elem), {}, {rounded_float(hi), rounded_float(lo)});
  auto *plo = llvm::dyn_cast<llvm::PHINode>(lo), *phi_hi = llvm::dyn_cast<llvm::PHINode>(hi);
  if (!plo || !phi_hi || !pairable_phis(plo, phi_hi)) return nullptr;
  auto* pair_ty = llvm::FixedVectorType::get(elem, 2);
  b.SetInsertPoint(plo->getParent()->getFirstNonPHI());
  llvm::PHINode* phi = b.CreatePHI(pair_ty, plo->getNumIncomingValues());
  llvm::DenseMap<llvm::BasicBlock*, llvm::Value*> per_edge;  // a block listed twice brings one value
  for (unsigned i = 0; i < plo->getNumIncomingValues(); ++i) {
    llvm::BasicBlock* from = plo->getIncomingBlock(i);
    llvm::Value*& v = per_edge[from];
    if (!v) {
      llvm::Value *l = plo->getIncomingValue(i), *h = phi_hi->getIncomingValueForBlock(from);
      if (both_constant(l, h)) {
        v = llvm::ConstantVector::get({llvm::cast<llvm::Constant>(l), llvm::cast<llvm::Constant>(h)});
      } else {
        llvm::IRBuilder<> e(from->getTerminator());
        v = e.CreateIntrinsic(paired_conversion(elem), {}, {rounded_float(h), rounded_float(l)});
      }
    }
    phi->addIncoming(v, from);
  }
  return phi;
}

// Erases v if nothing uses it any more, and then the conversions a dead phi brought.
void erase_if_dead(llvm::Value* v) {
  auto* i = llvm::dyn_cast<llvm::Instruction>(v);
  if (!i || !i->use_empty()) return;
  std::vector<llvm::Value*> incoming;
  if (auto* phi = llvm::dyn_cast<llvm::PHINode>(i)) incoming.assign(phi->incoming_values().begin(), phi->incoming_values().end());
  i->eraseFromParent();
  for (llvm::Value* in : incoming)
    if (auto* t = llvm::dyn_cast<llvm::FPTruncInst>(in); t && t->use_empty()) t->eraseFromParent();
}

// Lane 2k+1 inserted at ins, lane 2k earlier in the same chain, both rounded from f32 to
// the same 16-bit type: re-insert both lanes from one paired conversion at ins.
bool pair_insertions(llvm::InsertElementInst* ins) {
  auto* idx = llvm::dyn_cast<llvm::ConstantInt>(ins->getOperand(2));
  if (!idx || idx->getZExtValue() % 2 != 1) return false;
  llvm::InsertElementInst* low_ins = insertion_of_lane(ins, idx->getZExtValue() - 1);
  llvm::Type* elem = ins->getOperand(1)->getType();
  if (!low_ins || (!elem->isHalfTy() && !elem->isBFloatTy())) return false;
  llvm::Value* old_lo = low_ins->getOperand(1);
  llvm::Value* old_hi = ins->getOperand(1);
  llvm::Value* pair = paired_lanes(ins, old_lo, old_hi, elem);
  if (!pair) return false;
  llvm::IRBuilder<> b(ins);
  uint64_t lane = idx->getZExtValue() - 1;
  llvm::Value* v = b.CreateInsertElement(ins->getOperand(0), b.CreateExtractElement(pair, uint64_t{0}), lane);
  v = b.CreateInsertElement(v, b.CreateExtractElement(pair, uint64_t{1}), lane + 1);
  ins->replaceAllUsesWith(v);
  ins->eraseFromParent();
  // Every link from lane 2k's insertion to ins had one use (insertion_of_lane), so no one
  // saw lane 2k's old value but the chain, where it is now overwritten.
  low_ins->setOperand(1, llvm::PoisonValue::get(elem));
  erase_if_dead(old_hi);
  if (old_lo != old_hi) erase_if_dead(old_lo);
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
