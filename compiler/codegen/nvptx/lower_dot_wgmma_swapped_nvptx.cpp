// NVPTX lowering, part 4d: an fp32 `dot` with tf32 inputs whose B is N-major (the NN
// layout, torch.matmul's: B row-major K x N) as wgmma on sm_90a, computed transposed.
//
// wgmma's .tf32 shared-memory operands must both be K-major (the transpose immediates
// are for 16-bit types), and a TMA box cannot transpose. But wgmma's A operand may come
// from registers, loaded from any layout. So C^T = B^T A^T:
//   wgmma A (m64 x k8, registers)   = B^T: 64 columns of N per warpgroup, read from B's
//                                     N-major stage with ld.shared;
//   wgmma B (k8 x nM, descriptor)   = A^T: A's K-major stage [M][BK] is exactly a
//                                     K-major wgmma B (as W's stage in x @ W^T);
//   accumulator (64 x M per group) = C^T: the warps own columns of C (N = 16 x warps),
//                                     M runs across the registers (wgmma_swapped_acc_layout).
// Fragment registers (PTX ISA, m64nNk8 tf32 A; per warp w of the CTA, lane = 4g + t):
//   a0 = A'[16w + g][t],      a1 = A'[16w + g + 8][t],
//   a2 = A'[16w + g][t + 4],  a3 = A'[16w + g + 8][t + 4]
// Fragment row g + 8h may stand for any column of C as long as the accumulator layout
// says the same; taking column n = 16w + 2g + h makes a0, a1 (and a2, a3) two adjacent
// floats of one B row: one ld.shared.v2 each. B's stage is N/32 column blocks of
// [BK][128 B] with chunk c of row k at c ^ (k % 8) (the TMA's 128-byte swizzle); a
// half-warp (g in 0-3 or 4-7, t in 0-3) then reads chunks {c0, c0 + 1} ^ (row % 8) of 4
// rows, conflict-free when the 4 rows' xors differ in bits 1-2: one load takes row
// t + 4 (t & 1) (xors 0, 5, 2, 7), the other row t + 4 (1 - (t & 1)) (4, 1, 6, 3), and
// a select per register puts each in its fragment slot.
// Worked example, NN 256x128x32 (BM x BN x BK), 8 warps: per k8 step kk each thread
// loads 2 x v2 from B's stage at rows 8kk + {t, t+4}, columns 16w + 2g (+1); each
// warpgroup issues wgmma.m64n256k8 with A's stage (256 rows of 128 B) at +32 kk bytes.
// In a loop whose accumulator only goes round (wgmma_async_dots_) an iteration's group
// stays in flight into the next iteration, whose dot first waits for it (wait_group 0)
// and only then loads its own fragments: the PTX ISA forbids rewriting an in-flight
// wgmma's A registers (ptxas neither warns nor waits for it), and doing so (wait_group 1
// after the commit, as the descriptor form does) made 3 of the 26 GPU tests of
// test_gpu_tf32_wgmma.py fail on an H100. The wait still comes after the next stage's
// TMA issue and full-barrier wait, which overlap the group. Finer groups (one per k-step,
// K/8 - 1 in flight, each retired just before its registers are reloaded) measured
// slower: 316 vs 339-345 TFLOP/s at 4096^3, 256x128x32 tiles
// (bench/results/gpu_matmul_tf32.md).
#include <llvm/IR/InlineAsm.h>

#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

bool GpuLowering::wgmma_swapped_shape_ok(const Op& dot) const {
  if (!wgmma_ || num_warps_ % 4 != 0) return false;
  auto kind = mma_kind(dot);
  if (!kind || *kind != MmaKind::TF32 || dot.result()->type.elem.kind != ScalarKind::F32) return false;
  const int64_t M = dot.operands[0]->type.shape[0], K = dot.operands[0]->type.shape[1];
  const int64_t N = dot.operands[1]->type.shape[1];
  return N == 16 * num_warps_ && M >= 16 && M <= 256 && K % 8 == 0;
}

bool GpuLowering::wgmma_swapped_operands_ok(const StagedOperand& sa, const StagedOperand& sb) const {
  const bool a_k_major = sa.elem_bytes == 4 && sa.contig_dim == 1 &&
                         (sa.row_bytes == 32 || sa.row_bytes == 64 || sa.row_bytes == 128);
  const bool b_n_major = sb.elem_bytes == 4 && sb.contig_dim == 1 && sb.row_bytes % 128 == 0;
  return a_k_major && b_n_major;
}


void GpuLowering::lower_dot_wgmma_swapped(const Op& op, const StagedOperand& sa, const StagedOperand& sb) {
  const Value* acc = op.operands[2];
  const int64_t M = op.operands[0]->type.shape[0], K = op.operands[0]->type.shape[1];
  const int64_t N = op.operands[1]->type.shape[1];
  const BlockedLayout lc = wgmma_swapped_acc_layout(M, N);
  const int nacc = static_cast<int>(M / 2);  // m64nM: f32 accumulators per thread
  std::vector<llvm::Value*> c(lc.num_regs());
  for (int r = 0; r < lc.num_regs(); ++r) c[r] = at(acc, lc.index_of(r));

  auto* i32 = b_.getInt32Ty();
  auto* i64 = b_.getInt64Ty();
  // wgmma's B: A's K-major stage, all M rows; k-step kk starts 32 kk bytes into the rows.
  llvm::Value* desc_start = b_.CreateAnd(b_.CreatePtrToInt(sa.buf, i64), b_.getInt64(0x3FFFF));
  const uint64_t desc_bits = (16ull >> 4) << 16 | ((8ull * static_cast<uint64_t>(sa.row_bytes)) >> 4) << 32 |
                             wgmma_swizzle_mode(sa.row_bytes) << 62;

  // The fragment's two rows of B (k = t and t + 4, in the conflict-free order above) at
  // columns n, n + 1; k-step kk is 8 rows (1024 bytes of a column block) further.
  llvm::Value* lane = b_.CreateAnd(tid_, b_.getInt32(31));
  llvm::Value* t = b_.CreateAnd(lane, b_.getInt32(3));
  llvm::Value* odd = b_.CreateICmpNE(b_.CreateAnd(t, b_.getInt32(1)), b_.getInt32(0));
  llvm::Value* n = b_.CreateAdd(b_.CreateMul(b_.CreateLShr(tid_, 5), b_.getInt32(16)),
                                b_.CreateMul(b_.CreateLShr(lane, 2), b_.getInt32(2)));
  llvm::Value* x_row = b_.CreateOr(t, b_.CreateSelect(odd, b_.getInt32(4), b_.getInt32(0)));
  llvm::Value* y_row = b_.CreateXor(x_row, b_.getInt32(4));
  llvm::Value* x_off = staged_offset(sb, x_row, n);
  llvm::Value* y_off = staged_offset(sb, y_row, n);
  auto* v2 = llvm::FixedVectorType::get(i32, 2);
  auto fragment = [&](int64_t kk) {
    llvm::Value* step = b_.getInt32(static_cast<uint32_t>(kk * 8 * 128));
    auto load = [&](llvm::Value* off) {
      llvm::Value* p = b_.CreateInBoundsGEP(b_.getInt8Ty(), sb.buf, b_.CreateAdd(off, step));
      return b_.CreateAlignedLoad(v2, p, llvm::Align(8));
    };
    llvm::Value* x = load(x_off);
    llvm::Value* y = load(y_off);
    llvm::Value* lo = b_.CreateSelect(odd, y, x);  // row t: a0, a1
    llvm::Value* hi = b_.CreateSelect(odd, x, y);  // row t + 4: a2, a3
    return std::vector<llvm::Value*>{b_.CreateExtractElement(lo, uint64_t(0)),
                                     b_.CreateExtractElement(lo, uint64_t(1)),
                                     b_.CreateExtractElement(hi, uint64_t(0)),
                                     b_.CreateExtractElement(hi, uint64_t(1))};
  };

  // wgmma.mma_async.sync.aligned.m64nMk8.f32.tf32.tf32 {d}, {a0..a3}, desc-b, p, 1, 1
  std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $" + std::to_string(2 * nacc + 5) + ", 0;\n" +
                     "wgmma.mma_async.sync.aligned.m64n" + std::to_string(M) + "k8.f32.tf32.tf32 {";
  for (int i = 0; i < nacc; ++i) text += (i ? ", $" : "$") + std::to_string(i);
  text += "}, {";
  for (int i = 0; i < 4; ++i) text += (i ? ", $" : "$") + std::to_string(2 * nacc + i);
  text += "}, $" + std::to_string(2 * nacc + 4) + ", p, 1, 1;\n}";
  std::string cons;
  for (int i = 0; i < nacc; ++i) cons += "=f,";
  for (int i = 0; i < nacc; ++i) cons += std::to_string(i) + ",";
  cons += "r,r,r,r,l,r";
  std::vector<llvm::Type*> params(nacc, b_.getFloatTy());
  for (int i = 0; i < 4; ++i) params.push_back(i32);
  params.push_back(i64);
  params.push_back(i32);
  auto* rty = llvm::StructType::get(ctx_, std::vector<llvm::Type*>(nacc, b_.getFloatTy()));
  auto* fty = llvm::FunctionType::get(rty, params, false);
  auto* wgmma = llvm::InlineAsm::get(fty, text, cons, /*hasSideEffects=*/true);
  auto issue = [&](int64_t kk, const std::vector<llvm::Value*>& a) {
    llvm::Value* desc =
        b_.CreateOr(b_.CreateLShr(b_.CreateAdd(desc_start, b_.getInt64(static_cast<uint64_t>(32 * kk))), 4),
                    b_.getInt64(desc_bits));
    std::vector<llvm::Value*> args(nacc);
    for (int d = 0; d < nacc; ++d) args[d] = c[swapped_acc_register(d)];
    args.insert(args.end(), a.begin(), a.end());
    args.push_back(desc);
    args.push_back(b_.getInt32(1));  // scale-d: accumulate into d
    llvm::CallInst* call = b_.CreateCall(fty, wgmma, args);
    call->addFnAttr(llvm::Attribute::Convergent);
    for (int d = 0; d < nacc; ++d)
      c[swapped_acc_register(d)] = b_.CreateExtractValue(call, {static_cast<unsigned>(d)});
  };

  const int64_t steps = K / 8;
  const bool in_flight = wgmma_async_dots_.count(&op) > 0;
  // The previous iteration's group still reads its fragment registers, which the loads
  // below rewrite: retire it first (see the top of the file).
  if (in_flight) emit_ptx(b_, "wgmma.wait_group.sync.aligned 0;");
  std::vector<std::vector<llvm::Value*>> frags;
  for (int64_t kk = 0; kk < steps; ++kk) frags.push_back(fragment(kk));
  emit_ptx(b_, "wgmma.fence.sync.aligned;");
  for (int64_t kk = 0; kk < steps; ++kk) issue(kk, frags[kk]);
  emit_ptx(b_, "wgmma.commit_group.sync.aligned;");
  // In flight: lower_for retires the last group on the loop's way out. Otherwise the
  // accumulators are read next.
  if (!in_flight) c = wgmma_wait_tied(c);
  TileVal res;
  res.kind = TileVal::Regs;
  res.layout = lc;
  res.regs = std::move(c);
  tiles_[op.result()] = std::move(res);
}

}  // namespace tessera::codegen::nvptx
