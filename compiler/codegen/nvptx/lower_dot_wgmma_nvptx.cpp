// NVPTX lowering, part 4c: `dot` as Hopper warpgroup MMA (wgmma.mma_async, sm_90a)
// for f16/bf16 operands, or fp32 ones with tf32 inputs, that a ring (pipeline_nvptx.cpp,
// tma_nvptx.cpp) holds.
//
// tf32 (wgmma.mma_async...m64nNk8.f32.tf32.tf32): the ring holds the fp32 bits as
// loaded and the tensor core uses their tf32 part (no cvt.rna as on mma.sync's path).
// The PTX ISA gives the transpose immediates to 16-bit types only, so both operands
// must be K-major -- x @ W^T with W's rows along K (the nn.Linear layout); a dot with
// an N-major B runs swapped (lower_dot_wgmma_swapped_nvptx.cpp). A k8 step is 8 x 4 =
// 32 bytes along the rows, as a k16 step of 16-bit elements, so the K-major descriptors
// and per-step offsets are the same; the instruction just ends after imm-scale-b.
// Worked example, x @ W^T at 128x128x32 tf32, 8 warps: A and W stages of [128][128 B]
// (TMA boxes of 32 x 128 fp32); each warpgroup issues 4 wgmma.m64n128k8, A (its 64
// rows) and B at +0, +32, +64, +96 bytes.
//
// Each warpgroup (4 consecutive warps) computes 64 rows of C with
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16|bf16}.{f16|bf16}
// reading A and B straight from shared memory through 64-bit matrix descriptors:
//   bits 0-13 start address >> 4, 16-29 leading byte offset >> 4 (LBO), 32-45
//   stride byte offset >> 4 (SBO), 62-63 swizzle (1: 128 B, 2: 64 B, 3: 32 B).
// The ring's staging format already is wgmma's swizzled canonical layout: a
// K-major operand with R-byte rows (R = 32, 64, 128) stores 16-byte chunk c of row r
// at chunk c ^ f(r) (mma_swizzle_chunk), exactly the R-byte swizzle applied to
// address bits, given 1024-byte aligned stages; SBO = 8 R (the next 8 rows), and
// k-step kk starts 32 kk bytes into the rows. An N-major B (row-major K x N in
// memory) is stored as N/64 column blocks of [K][128 B], 128-byte swizzled; there
// LBO = the block size (the next 64 columns), SBO = 1024 (the next 8 rows of K) and
// k-step kk starts 16 kk rows = 2048 kk bytes in (imm-trans-b = 1).
// The accumulator layout is the mma.sync one with warps on whole rows (16 rows per
// warp; register 4j + i is n8-chunk j of the m16n8 fragment): mma_acc_layout of a
// rows-only tiling, so epilogues, loop carries and stores read it unchanged.
// Worked example, 128x128x64 f16, 8 warps: warpgroup g = warp >> 2 issues 4
// wgmma.m64n128k16 (A rows 64g.., k-steps at +0, +32, +64, +96 bytes; B at +0,
// +2048, +4096, +6144 with LBO 8192), after wgmma.fence; commit_group; wait_group 0
// before the registers are read -- or, in a loop of 4+ stages whose accumulator only
// goes round the loop, wait_group 1 (the previous group), the last one retired on the
// loop's way out (lower_for). The ring's barrier at the top of each iteration follows a
// fence.proxy.async, so the cp.async data is visible to the async proxy.
#include <llvm/IR/InlineAsm.h>

#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

// K per wgmma instruction: 32 bytes of operand rows (k16 for 16-bit types, k8 for tf32).
int64_t wgmma_k(MmaKind kind) { return kind == MmaKind::TF32 ? 8 : 16; }

}  // namespace

bool GpuLowering::wgmma_shape_ok(const Op& dot) const {
  if (!wgmma_ || num_warps_ % 4 != 0) return false;
  auto kind = mma_kind(dot);
  // tf32x3 splits each operand into big and small halves in registers: mma.sync.
  if (!kind || (*kind != MmaKind::F16 && *kind != MmaKind::BF16 && *kind != MmaKind::TF32)) return false;
  if (dot.result()->type.elem.kind != ScalarKind::F32) return false;
  const int64_t M = dot.operands[0]->type.shape[0], K = dot.operands[0]->type.shape[1];
  const int64_t N = dot.operands[1]->type.shape[1];
  return M == 16 * num_warps_ && N >= 16 && N <= 256 && K % wgmma_k(*kind) == 0;
}

bool GpuLowering::wgmma_operand_ok(const StagedOperand& st, int kdim) const {
  if (st.elem_bytes != 2 && st.elem_bytes != 4) return false;
  // tf32 operands must be K-major: the PTX ISA gives imm-trans-a/b to 16-bit types only.
  if (st.elem_bytes == 4 && st.contig_dim != kdim) return false;
  if (st.contig_dim == kdim) return st.row_bytes == 32 || st.row_bytes == 64 || st.row_bytes == 128;
  return st.row_bytes % 128 == 0;  // N-major B or M-major A, in 64-element blocks
}

void GpuLowering::plan_wgmma(const Block& b) {
  for (auto& op : b.ops) {
    for (auto& r : op->regions) plan_wgmma(*r->block);
    if (op->kind != OpKind::For) continue;
    const Block& body = *op->regions[0]->block;
    planning_ = true;
    auto p = plan_pipeline(body);
    planning_ = false;
    if (!p) continue;
    for (auto& d : body.ops) {
      if (d->kind != OpKind::Dot || !wgmma_shape_ok(*d)) continue;
      const StagedOperand* g[2] = {nullptr, nullptr};
      for (auto& pl : p->loads)
        for (int i = 0; i < 2; ++i)
          if (pl.operand == d->operands[i]) g[i] = &pl.geom;
      if (g[0] && g[1] && wgmma_operand_ok(*g[0], 1) && wgmma_operand_ok(*g[1], 0)) {
        wgmma_dots_.insert(d.get());
        dot_rows_only_.insert(d.get());
      }
    }
    // tf32 with an N-major B (the NN layout): C^T = B^T A^T (lower_dot_wgmma_swapped_nvptx.cpp).
    for (auto& d : body.ops) {
      if (d->kind != OpKind::Dot || wgmma_dots_.count(d.get()) || !wgmma_swapped_shape_ok(*d)) continue;
      const StagedOperand* g[2] = {nullptr, nullptr};
      for (auto& pl : p->loads)
        for (int i = 0; i < 2; ++i)
          if (pl.operand == d->operands[i]) g[i] = &pl.geom;
      if (g[0] && g[1] && wgmma_swapped_operands_ok(*g[0], *g[1])) {
        wgmma_dots_.insert(d.get());
        wgmma_swapped_dots_.insert(d.get());
      }
    }
    if (tma_) {
      planning_ = true;
      plan_tma(body);
      planning_ = false;
    }
  }
}


std::vector<llvm::Value*> GpuLowering::wgmma_wait_tied(const std::vector<llvm::Value*>& acc) {
  const int n = static_cast<int>(acc.size());
  std::string cons;
  for (int i = 0; i < n; ++i) cons += "=f,";
  for (int i = 0; i < n; ++i) cons += std::to_string(i) + ",";
  cons += "~{memory}";
  auto* rty = llvm::StructType::get(ctx_, std::vector<llvm::Type*>(n, b_.getFloatTy()));
  auto* fty = llvm::FunctionType::get(rty, std::vector<llvm::Type*>(n, b_.getFloatTy()), false);
  llvm::CallInst* w = b_.CreateCall(
      fty, llvm::InlineAsm::get(fty, "wgmma.wait_group.sync.aligned 0;", cons, /*hasSideEffects=*/true), acc);
  w->addFnAttr(llvm::Attribute::Convergent);
  std::vector<llvm::Value*> out(n);
  for (int i = 0; i < n; ++i) out[i] = b_.CreateExtractValue(w, {static_cast<unsigned>(i)});
  return out;
}

BlockedLayout GpuLowering::dot_acc_layout(const Op& dot) const {
  if (wgmma_swapped_dots_.count(&dot))
    return wgmma_swapped_acc_layout(dot.operands[0]->type.shape[0], dot.operands[1]->type.shape[1]);
  return mma_acc_layout(mma_tiling(dot));
}

void GpuLowering::lower_dot_wgmma(const Op& op, MmaKind kind, const StagedOperand& sa, const StagedOperand& sb) {
  const Value* acc = op.operands[2];
  const int64_t K = op.operands[0]->type.shape[1], N = op.operands[1]->type.shape[1];
  const MmaTiling t = mma_tiling(op);
  const BlockedLayout lc = mma_acc_layout(t);
  const int nacc = static_cast<int>(N / 2);  // f32 accumulators per thread
  std::vector<llvm::Value*> c(lc.num_regs());
  for (int r = 0; r < lc.num_regs(); ++r) c[r] = at(acc, lc.index_of(r));

  auto* i64 = b_.getInt64Ty();
  auto smem_addr = [&](llvm::Value* p) { return b_.CreateAnd(b_.CreatePtrToInt(p, i64), b_.getInt64(0x3FFFF)); };
  // Descriptor bits other than the start address.
  auto fixed_bits = [&](uint64_t lbo, uint64_t sbo, uint64_t mode) {
    return ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | mode << 62;
  };
  // A: warpgroup g's 64 rows. K-major: 64 buffer rows; M-major (dz^T in dW = dz^T x,
  // a transposed [K][M] tile): column block g, laid out as an N-major B's blocks.
  llvm::Value* warpgroup = b_.CreateLShr(tid_, 7);
  const bool a_m_major = sa.contig_dim != 1;
  llvm::Value* a_base = b_.CreateInBoundsGEP(
      b_.getInt8Ty(), sa.buf,
      b_.CreateMul(warpgroup, b_.getInt32(static_cast<uint32_t>(a_m_major ? sa.block_bytes : 64 * sa.row_bytes))));
  const uint64_t a_bits = a_m_major ? fixed_bits(static_cast<uint64_t>(sa.block_bytes), 1024, 1)
                                    : fixed_bits(16, 8 * sa.row_bytes, wgmma_swizzle_mode(sa.row_bytes));
  const bool b_n_major = sb.contig_dim != 0;
  const uint64_t b_bits = b_n_major ? fixed_bits(static_cast<uint64_t>(sb.block_bytes), 1024, 1)
                                    : fixed_bits(16, 8 * sb.row_bytes, wgmma_swizzle_mode(sb.row_bytes));
  llvm::Value* a_start = smem_addr(a_base);
  llvm::Value* b_start = smem_addr(sb.buf);

  // tf32 has no transpose immediates (both operands K-major, wgmma_operand_ok): the
  // instruction ends after imm-scale-b.
  const bool tf32 = kind == MmaKind::TF32;
  const char* ty = tf32 ? "tf32" : kind == MmaKind::BF16 ? "bf16" : "f16";
  const int64_t kstep = wgmma_k(kind);
  std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $" + std::to_string(2 * nacc + 2) + ", 0;\n" +
                     "wgmma.mma_async.sync.aligned.m64n" + std::to_string(N) + "k" + std::to_string(kstep) + ".f32." +
                     ty + "." + ty + " {";
  for (int i = 0; i < nacc; ++i) text += (i ? ", $" : "$") + std::to_string(i);
  text += "}, $" + std::to_string(2 * nacc) + ", $" + std::to_string(2 * nacc + 1) + ", p, 1, 1";
  if (!tf32) text += std::string(", ") + (a_m_major ? "1, " : "0, ") + (b_n_major ? "1" : "0");
  text += ";\n}";
  std::string cons;
  for (int i = 0; i < nacc; ++i) cons += "=f,";
  for (int i = 0; i < nacc; ++i) cons += std::to_string(i) + ",";
  cons += "l,l,r";
  std::vector<llvm::Type*> params(nacc, b_.getFloatTy());
  params.push_back(i64);
  params.push_back(i64);
  params.push_back(b_.getInt32Ty());
  auto* rty = llvm::StructType::get(ctx_, std::vector<llvm::Type*>(nacc, b_.getFloatTy()));
  auto* fty = llvm::FunctionType::get(rty, params, false);
  auto* wgmma = llvm::InlineAsm::get(fty, text, cons, /*hasSideEffects=*/true);

  emit_ptx(b_, "wgmma.fence.sync.aligned;");
  // A K-major k-step is 32 bytes further along the rows (16 f16 or 8 tf32 elements);
  // an MN-major one (16-bit only) 16 rows of 128 bytes further down.
  for (int64_t kk = 0; kk < K / kstep; ++kk) {
    uint64_t a_off = a_m_major ? static_cast<uint64_t>(16 * kk * 128) : static_cast<uint64_t>(32 * kk);
    uint64_t b_off = b_n_major ? static_cast<uint64_t>(16 * kk * 128) : static_cast<uint64_t>(32 * kk);
    llvm::Value* da = b_.CreateOr(b_.CreateLShr(b_.CreateAdd(a_start, b_.getInt64(a_off)), 4), b_.getInt64(a_bits));
    llvm::Value* db = b_.CreateOr(b_.CreateLShr(b_.CreateAdd(b_start, b_.getInt64(b_off)), 4), b_.getInt64(b_bits));
    std::vector<llvm::Value*> args(c.begin(), c.end());
    args.push_back(da);
    args.push_back(db);
    args.push_back(b_.getInt32(1));  // scale-d: accumulate into d
    llvm::CallInst* call = b_.CreateCall(fty, wgmma, args);
    call->addFnAttr(llvm::Attribute::Convergent);
    for (int i = 0; i < nacc; ++i) c[i] = b_.CreateExtractValue(call, {static_cast<unsigned>(i)});
  }
  emit_ptx(b_, "wgmma.commit_group.sync.aligned;");
  if (wgmma_async_dots_.count(&op)) {
    // The result only feeds the next iteration's wgmma (and, after the loop, the wait 0
    // on the loop's way out, lower_for): keep this group in flight, retire the previous
    // one, whose ring stage the next iteration's copies overwrite after their barrier.
    emit_ptx(b_, "wgmma.wait_group.sync.aligned 1;");
    TileVal res;
    res.kind = TileVal::Regs;
    res.layout = lc;
    res.regs = std::move(c);
    tiles_[op.result()] = std::move(res);
    return;
  }
  // The accumulators are read next (and the ring stage is rewritten after the next
  // barrier): wait for this group.
  c = wgmma_wait_tied(c);

  TileVal res;
  res.kind = TileVal::Regs;
  res.layout = lc;
  res.regs = std::move(c);
  tiles_[op.result()] = std::move(res);
}

}  // namespace tessera::codegen::nvptx
