// NVPTX lowering, part 4: `dot` with FMA on CUDA cores: f64, f32 "ieee", sm_70/75,
// and shapes the tensor-core path (lower_dot_mma_nvptx.cpp) does not take.
//
// The result C[M,N] takes the accumulator's layout (the default blocked layout for
// a fresh accumulator); a thread owning C[m,n] needs row m of A and column n of B,
// which other threads hold, so both operands go through shared memory:
//   1. barrier (an earlier dot, or the previous loop iteration, may still read the
//      staging buffers), every thread stores its elements of A transposed (A_s[k][m])
//      and of B as is (B_s[k][n]), barrier;
//   2. a loop over k: per distinct m of the thread, a = A_s[k][m]; per distinct n,
//      b = B_s[k][n]; c[m,n] = fma(a, b, c[m,n]).
// Worked example, 64x64x32 f32, 4 warps: C's layout is [t4,t5,t6,r2,r3,r4; r0,r1,
// t0,t1,t2,t3], so thread t owns 8 rows (m = (t>>4)&7 + 8i) and 4 columns
// (n = 4(t&15) + j): per k it loads 8 A values and one float4 of B for 32 fma.rn.f32.
// A is stored k-major so that lanes 0-15 and 16-31 (rows m and m+1) read adjacent
// words. Staging takes A 8 KB + B 8 KB; every dot of the kernel reuses the same two
// buffers, sized for the largest dot (both paths stage through them).
#include <llvm/IR/Intrinsics.h>

#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

int64_t operand_bytes(const Value* v) { return v->type.numel() * v->type.elem.bytes(); }

void collect_dot_ops(const Block& b, std::vector<const Op*>& out) {
  for (auto& op : b.ops) {
    if (op->kind == OpKind::Dot) out.push_back(op.get());
    for (auto& r : op->regions) collect_dot_ops(*r->block, out);
  }
}

// Two copies of the staging buffers when every dot is a tensor-core dot and they
// stay small: consecutive dot executions alternate copies, so a dot's stores need
// no barrier to wait for readers of the previous execution.
constexpr int64_t kMaxDoubleBufferedBytes = 64 * 1024;

// The type the products are summed in: the accumulator's, except that f16/bf16
// accumulators sum in f32 and round once at the end.
ElemType compute_type(const ElemType& acc) {
  if (acc.kind == ScalarKind::F16 || acc.kind == ScalarKind::BF16) return ElemType{ScalarKind::F32, ScalarKind::I32};
  return acc;
}

}  // namespace

int64_t GpuLowering::dot_staging_bytes() const {
  std::vector<const Op*> dots;
  collect_dot_ops(*k_.body(), dots);
  int64_t a_bytes = 0, b_bytes = 0;
  bool all_mma = true;
  for (const Op* d : dots) {
    a_bytes = std::max(a_bytes, (operand_bytes(d->operands[0]) + 15) / 16 * 16);
    b_bytes = std::max(b_bytes, (operand_bytes(d->operands[1]) + 15) / 16 * 16);
    all_mma = all_mma && mma_kind(*d).has_value();
  }
  bool twice = all_mma && 2 * (a_bytes + b_bytes) <= kMaxDoubleBufferedBytes;
  return (twice ? 2 : 1) * (a_bytes + b_bytes);
}

void GpuLowering::ensure_dot_smem() {
  if (dot_smem_[0]) return;
  std::vector<const Op*> dots;
  collect_dot_ops(*k_.body(), dots);
  int64_t a_bytes = 0, b_bytes = 0;
  bool all_mma = true;
  for (const Op* d : dots) {
    a_bytes = std::max(a_bytes, operand_bytes(d->operands[0]));
    b_bytes = std::max(b_bytes, operand_bytes(d->operands[1]));
    all_mma = all_mma && mma_kind(*d).has_value();
  }
  dot_stage_bytes_[0] = (a_bytes + 15) / 16 * 16;
  dot_stage_bytes_[1] = (b_bytes + 15) / 16 * 16;
  dot_double_buffered_ = all_mma && 2 * (dot_stage_bytes_[0] + dot_stage_bytes_[1]) <= kMaxDoubleBufferedBytes;
  int copies = dot_double_buffered_ ? 2 : 1;
  dot_smem_[0] = new_smem(b_.getInt8Ty(), copies * dot_stage_bytes_[0], "dot_a");
  dot_smem_[1] = new_smem(b_.getInt8Ty(), copies * dot_stage_bytes_[1], "dot_b");
  if (dot_double_buffered_) {  // which copy the next dot execution writes: 0, 1, 0, ...
    dot_phase_ = alloca_in_entry(b_.getInt32Ty());
    llvm::IRBuilder<> eb(entry_, std::next(llvm::cast<llvm::Instruction>(dot_phase_)->getIterator()));
    eb.CreateStore(eb.getInt32(0), dot_phase_);
  }
}

void GpuLowering::lower_dot(const Op& op) {
  const Value* a = op.operands[0];
  const Value* bm = op.operands[1];
  const Value* acc = op.operands[2];
  if (a->type.rank() != 2 || bm->type.rank() != 2)
    unsupported(op, "'dot' on the GPU takes 2-D operands (got rank " + std::to_string(a->type.rank()) + ")");
  const int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
  const ElemType& ea = a->type.elem;
  const ElemType& eb = bm->type.elem;
  const ElemType& ec = op.result()->type.elem;
  const ElemType ct = compute_type(ec);
  int64_t need = operand_bytes(a) + operand_bytes(bm);
  const int64_t limit = max_dynamic_shared_bytes(cc_);
  if (need > limit)
    unsupported(op, "'dot' of " + std::to_string(M) + "x" + std::to_string(K) + " by " + std::to_string(K) + "x" +
                        std::to_string(N) + " " + ea.str() + " stages its operands in " + std::to_string(need) +
                        " bytes of shared memory; sm_" + std::to_string(cc_) + " allows at most " +
                        std::to_string(limit / 1024) + " KB per block (use smaller block sizes)");
  if (auto kind = mma_kind(op)) return lower_dot_mma(op, *kind);

  llvm::Type* mta = llvm_mem_type(ctx_, ea);
  llvm::Type* mtb = llvm_mem_type(ctx_, eb);
  ensure_dot_smem();
  llvm::Value* a_s = dot_smem_[0];
  llvm::Value* b_s = dot_smem_[1];

  // 1. Stage the operands.
  barrier();
  BlockedLayout la = preferred_layout(a);
  for (int r = 0; r < la.num_regs(); ++r) {
    SymIndex s = la.index_of(r);
    std::vector<IndexBit> km = s[0];  // flat index k*M + m: m bits low, k bits high
    km.insert(km.end(), s[1].begin(), s[1].end());
    b_.CreateStore(to_mem(b_, at(a, s), ea), b_.CreateInBoundsGEP(mta, a_s, runtime_index(km)));
  }
  BlockedLayout lb = preferred_layout(bm);
  for (int r = 0; r < lb.num_regs(); ++r) {
    SymIndex s = lb.index_of(r);
    b_.CreateStore(to_mem(b_, at(bm, s), eb), b_.CreateInBoundsGEP(mtb, b_s, runtime_index(flat_bits(s))));
  }
  barrier();

  // 2. Accumulate over k. Offsets of the thread's rows and columns are computed
  // once, before the loop.
  BlockedLayout lc = preferred_layout(acc);
  const int nregs = lc.num_regs();
  std::vector<llvm::Value*> init(nregs);
  std::vector<int> row_of(nregs), col_of(nregs);
  std::vector<llvm::Value*> rows, cols;
  std::map<std::string, int> row_ids, col_ids;
  for (int r = 0; r < nregs; ++r) {
    SymIndex s = lc.index_of(r);
    init[r] = emit_cast(b_, at(acc, s), ec, ct);
    auto [ri, rnew] = row_ids.emplace(sym_index_key({s[0]}), static_cast<int>(rows.size()));
    if (rnew) rows.push_back(runtime_index(s[0]));
    auto [ci, cnew] = col_ids.emplace(sym_index_key({s[1]}), static_cast<int>(cols.size()));
    if (cnew) cols.push_back(runtime_index(s[1]));
    row_of[r] = ri->second;
    col_of[r] = ci->second;
  }
  llvm::Type* cty = llvm_elem_type(ctx_, ct);
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* body = llvm::BasicBlock::Create(ctx_, "dot.k", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "dot.exit", fn_);
  b_.CreateBr(body);
  b_.SetInsertPoint(body);
  llvm::PHINode* k = b_.CreatePHI(b_.getInt32Ty(), 2, "k");
  k->addIncoming(b_.getInt32(0), pre);
  std::vector<llvm::PHINode*> c(nregs);
  for (int r = 0; r < nregs; ++r) {
    c[r] = b_.CreatePHI(cty, 2);
    c[r]->addIncoming(init[r], pre);
  }
  llvm::Value* kM = b_.CreateMul(k, b_.getInt32(static_cast<uint32_t>(M)));
  llvm::Value* kN = b_.CreateMul(k, b_.getInt32(static_cast<uint32_t>(N)));
  std::vector<llvm::Value*> av(rows.size()), bv(cols.size());
  for (size_t i = 0; i < rows.size(); ++i)
    av[i] = emit_cast(b_, from_mem(b_, b_.CreateLoad(mta, b_.CreateInBoundsGEP(mta, a_s, b_.CreateAdd(kM, rows[i]))), ea),
                      ea, ct);
  for (size_t i = 0; i < cols.size(); ++i)
    bv[i] = emit_cast(b_, from_mem(b_, b_.CreateLoad(mtb, b_.CreateInBoundsGEP(mtb, b_s, b_.CreateAdd(kN, cols[i]))), eb),
                      eb, ct);
  std::vector<llvm::Value*> next(nregs);
  for (int r = 0; r < nregs; ++r) {
    llvm::Value* x = av[row_of[r]];
    llvm::Value* y = bv[col_of[r]];
    next[r] = ct.is_float() ? b_.CreateIntrinsic(llvm::Intrinsic::fma, {cty}, {x, y, c[r]})
                            : b_.CreateAdd(b_.CreateMul(x, y), c[r]);
  }
  llvm::Value* k1 = b_.CreateAdd(k, b_.getInt32(1));
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  k->addIncoming(k1, latch);
  for (int r = 0; r < nregs; ++r) c[r]->addIncoming(next[r], latch);
  b_.CreateCondBr(b_.CreateICmpULT(k1, b_.getInt32(static_cast<uint32_t>(K))), body, exit);
  b_.SetInsertPoint(exit);

  TileVal t;
  t.kind = TileVal::Regs;
  t.layout = lc;
  for (int r = 0; r < nregs; ++r) t.regs.push_back(emit_cast(b_, next[r], ct, ec));
  tiles_[op.result()] = std::move(t);
}

}  // namespace tessera::codegen::nvptx
