// x86 lowering: masked vector loads, stores, gathers and scatters. On AVX-512 they
// are LLVM's masked-memory intrinsics (k-masks); on AVX2 they avoid LLVM's generic
// masked load/store nodes.
//
// Why: LLVM 19's X86 back end miscompiles a generic masked load on AVX2 whose mask
// has lanes that fold to constant false (e.g. `rn < N` with N specialized to 1) when
// the same mask also has a movmsk-style use in the block (a bitcast to an integer, a
// vector.reduce, or the scalarization of an 8/16-bit masked load next to it): the
// all-false half became an unmasked load — wrong values and a read past the array
// (tests/python/test_cpu_avx2.py has the kernel). The x86 intrinsics do not go
// through that combine, so on AVX2:
//   * 32/64-bit elements: vmaskmov / vpmaskmov intrinsics in 256/128-bit pieces
//     (masked-off lanes read as zero, then select(mask, v, other));
//   * 8/16-bit elements and scatters (no instruction): lane by lane, for lane i
//       p_i  = select(mask[i], base + i, &dummy)    ; a masked-off lane never reads
//       v[i] = select(mask[i], load p_i, other[i])  ; or stores into the dummy slot
//   * gathers of 32/64-bit elements: vpgather (LLVM's masked gather is native there).
// Masks are usually all true inside a tile (mask_versioning.cpp emits the loop twice),
// so the lane form runs on boundary chunks only.
#include <llvm/IR/IntrinsicsX86.h>

#include "codegen/x86/kernel_lowering.h"

namespace tessera::codegen::x86 {

namespace {

// The AVX maskload/maskstore intrinsic for `bits`-wide pieces of `elem`, if any.
llvm::Intrinsic::ID avx_mask_intrinsic(llvm::Type* elem, unsigned bits, bool store) {
  bool f32 = elem->isFloatTy(), f64 = elem->isDoubleTy();
  unsigned w = elem->getScalarSizeInBits();
  using namespace llvm::Intrinsic;
  if (bits == 256) {
    if (f32) return store ? x86_avx_maskstore_ps_256 : x86_avx_maskload_ps_256;
    if (f64) return store ? x86_avx_maskstore_pd_256 : x86_avx_maskload_pd_256;
    if (w == 32) return store ? x86_avx2_maskstore_d_256 : x86_avx2_maskload_d_256;
    if (w == 64) return store ? x86_avx2_maskstore_q_256 : x86_avx2_maskload_q_256;
  } else if (bits == 128) {
    if (f32) return store ? x86_avx_maskstore_ps : x86_avx_maskload_ps;
    if (f64) return store ? x86_avx_maskstore_pd : x86_avx_maskload_pd;
    if (w == 32) return store ? x86_avx2_maskstore_d : x86_avx2_maskload_d;
    if (w == 64) return store ? x86_avx2_maskstore_q : x86_avx2_maskload_q;
  }
  return not_intrinsic;
}

// Lanes per AVX piece (256 bits, or 128 for short vectors), 0 if the vector has no
// AVX masked form.
unsigned avx_piece_lanes(llvm::FixedVectorType* vt) {
  unsigned w = vt->getScalarSizeInBits(), n = vt->getNumElements();
  if (w != 32 && w != 64) return 0;
  if (n * w >= 256 && (n * w) % 256 == 0) return 256 / w;
  if (n * w == 128) return 128 / w;
  return 0;
}

}  // namespace

llvm::Value* KernelLowering::lane_pointer(llvm::Value* base_or_ptrs, llvm::Type* elem, int lane, bool contiguous) {
  if (contiguous) return b_.CreateConstGEP1_64(elem, base_or_ptrs, lane);
  return b_.CreateExtractElement(base_or_ptrs, b_.getInt64(lane));
}

llvm::Value* KernelLowering::lanewise_load(llvm::FixedVectorType* vt, llvm::Value* base_or_ptrs, bool contiguous,
                                           llvm::Align align, llvm::Value* mask, llvm::Value* other) {
  llvm::Type* et = vt->getElementType();
  llvm::Value* dummy = alloca_in_entry(et, 1);
  llvm::Value* v = llvm::PoisonValue::get(vt);
  for (unsigned l = 0; l < vt->getNumElements(); ++l) {
    llvm::Value* on = b_.CreateExtractElement(mask, b_.getInt64(l));
    llvm::Value* p = b_.CreateSelect(on, lane_pointer(base_or_ptrs, et, l, contiguous), dummy);
    llvm::Value* x = b_.CreateAlignedLoad(et, p, align);
    x = b_.CreateSelect(on, x, b_.CreateExtractElement(other, b_.getInt64(l)));
    v = b_.CreateInsertElement(v, x, b_.getInt64(l));
  }
  return v;
}

void KernelLowering::lanewise_store(llvm::Value* v, llvm::Value* base_or_ptrs, bool contiguous, llvm::Align align,
                                    llvm::Value* mask) {
  auto* vt = llvm::cast<llvm::FixedVectorType>(v->getType());
  llvm::Type* et = vt->getElementType();
  llvm::Value* dummy = alloca_in_entry(et, 1);
  for (unsigned l = 0; l < vt->getNumElements(); ++l) {
    llvm::Value* on = b_.CreateExtractElement(mask, b_.getInt64(l));
    llvm::Value* p = b_.CreateSelect(on, lane_pointer(base_or_ptrs, et, l, contiguous), dummy);
    b_.CreateAlignedStore(b_.CreateExtractElement(v, b_.getInt64(l)), p, align);
  }
}

// Piece `i` (of `lanes` lanes) of vector v.
llvm::Value* KernelLowering::vector_piece(llvm::Value* v, unsigned i, unsigned lanes) {
  std::vector<int> idx;
  for (unsigned l = 0; l < lanes; ++l) idx.push_back(static_cast<int>(i * lanes + l));
  return b_.CreateShuffleVector(v, idx);
}

llvm::Value* KernelLowering::avx_mask_load(llvm::FixedVectorType* vt, llvm::Value* p0, llvm::Value* mask,
                                           llvm::Value* other) {
  unsigned lanes = avx_piece_lanes(vt), n = vt->getNumElements();
  llvm::Type* et = vt->getElementType();
  auto* piece_t = llvm::FixedVectorType::get(et, lanes);
  auto* imask_t = llvm::FixedVectorType::get(b_.getIntNTy(et->getScalarSizeInBits()), n);
  llvm::Value* imask = b_.CreateSExt(mask, imask_t);
  llvm::Function* f = llvm::Intrinsic::getDeclaration(&m_, avx_mask_intrinsic(et, lanes * et->getScalarSizeInBits(), false));
  std::vector<llvm::Value*> pieces;
  for (unsigned i = 0; i < n / lanes; ++i) {
    llvm::Value* p = b_.CreateConstGEP1_64(et, p0, i * lanes);
    llvm::Value* x = b_.CreateCall(f, {p, vector_piece(imask, i, lanes)});
    pieces.push_back(b_.CreateBitCast(x, piece_t));
  }
  while (pieces.size() > 1) {  // concatenate pairwise
    std::vector<llvm::Value*> next;
    for (size_t i = 0; i < pieces.size(); i += 2) {
      unsigned w = llvm::cast<llvm::FixedVectorType>(pieces[i]->getType())->getNumElements();
      std::vector<int> idx;
      for (unsigned l = 0; l < 2 * w; ++l) idx.push_back(static_cast<int>(l));
      next.push_back(b_.CreateShuffleVector(pieces[i], pieces[i + 1], idx));
    }
    pieces = next;
  }
  return b_.CreateSelect(mask, pieces[0], other);
}

void KernelLowering::avx_mask_store(llvm::Value* v, llvm::Value* p0, llvm::Value* mask) {
  auto* vt = llvm::cast<llvm::FixedVectorType>(v->getType());
  unsigned lanes = avx_piece_lanes(vt), n = vt->getNumElements();
  llvm::Type* et = vt->getElementType();
  auto* imask_t = llvm::FixedVectorType::get(b_.getIntNTy(et->getScalarSizeInBits()), n);
  llvm::Value* imask = b_.CreateSExt(mask, imask_t);
  llvm::Function* f = llvm::Intrinsic::getDeclaration(&m_, avx_mask_intrinsic(et, lanes * et->getScalarSizeInBits(), true));
  for (unsigned i = 0; i < n / lanes; ++i) {
    llvm::Value* p = b_.CreateConstGEP1_64(et, p0, i * lanes);
    b_.CreateCall(f, {p, vector_piece(imask, i, lanes), vector_piece(v, i, lanes)});
  }
}

llvm::Value* KernelLowering::masked_load(llvm::FixedVectorType* vt, llvm::Value* p0, llvm::Align align,
                                         llvm::Value* mask, llvm::Value* other) {
  if (target_.has_avx512 && (vt->getScalarSizeInBits() >= 32 || target_.has_avx512bw))
    return b_.CreateMaskedLoad(vt, p0, align, mask, other);
  if (!target_.has_avx512 && avx_piece_lanes(vt)) return avx_mask_load(vt, p0, mask, other);
  return lanewise_load(vt, p0, true, align, mask, other);
}

llvm::Value* KernelLowering::masked_gather(llvm::FixedVectorType* vt, llvm::Value* ptrs, llvm::Align align,
                                           llvm::Value* mask, llvm::Value* other) {
  if (!mask || target_.has_avx512 || vt->getScalarSizeInBits() >= 32)
    return b_.CreateMaskedGather(vt, ptrs, align, mask, other);
  return lanewise_load(vt, ptrs, false, align, mask, other);
}

void KernelLowering::masked_store(llvm::Value* v, llvm::Value* p0, llvm::Align align, llvm::Value* mask) {
  auto* vt = llvm::cast<llvm::FixedVectorType>(v->getType());
  if (target_.has_avx512 && (vt->getScalarSizeInBits() >= 32 || target_.has_avx512bw))
    b_.CreateMaskedStore(v, p0, align, mask);
  else if (!target_.has_avx512 && avx_piece_lanes(vt))
    avx_mask_store(v, p0, mask);
  else
    lanewise_store(v, p0, true, align, mask);
}

void KernelLowering::masked_scatter(llvm::Value* v, llvm::Value* ptrs, llvm::Align align, llvm::Value* mask) {
  if (target_.has_avx512) b_.CreateMaskedScatter(v, ptrs, align, mask);
  else lanewise_store(v, ptrs, false, align, mask);
}

}  // namespace tessera::codegen::x86
