// NVPTX lowering, part 4b: `dot` on tensor cores with mma.sync (sm_80 and newer).
//
//   f16 / bf16 x f16 / bf16 -> f32   mma.m16n8k16   (ldmatrix .x4, .trans where
//                                                    the operand is MN-contiguous)
//   f32 "tf32" / "tf32x3"  -> f32    mma.m16n8k8.tf32 after cvt.rna.tf32.f32
//                                    (tf32x3: a_big*b_small + a_small*b_big + a_big*b_big)
//   i8 x i8 -> i32                   mma.m16n8k32.s32.s8.s8.s32
// The accumulator lives in the MMA layout (mma_layout.h), a BlockedLayout, so
// loop-carried accumulators, elementwise epilogues, reductions and stores read
// its registers where they are: nothing is converted per iteration.
//
// Operands go through shared memory: barrier; every thread stores its elements
// into a row-major staging buffer whose 16-byte chunks are XOR-swizzled
// (mma_swizzle_chunk), as 16-byte vectors where the operand's layout holds 8
// contiguous f16 along the buffer's rows; barrier; each warp loads its fragments
// with ldmatrix. 16-bit operands keep whichever dim their layout has contiguous
// (A: K-contiguous -> ldmatrix, M-contiguous -> ldmatrix.trans; B the other way
// round); tf32 and i8 fragments need K-contiguous rows (ldmatrix has no 32/8-bit
// transpose), so those operands are stored K-contiguous.
// Worked example, ldmatrix.x4 of A fragment (mi, kk), f16, K-contiguous buffer:
//   lane l gives the address of row  m0 + 16mi + 8(q&1) + (l&7),  k = 16kk + 8(q>>1)
//   (q = l>>3 selects matrix q); matrix q lands in register q of every lane as the
//   pair (row groupID, cols 2*threadID_in_group + {0,1}): registers 0-3 are
//   exactly {a0,a1}, {a2,a3}, {a4,a5}, {a6,a7} of the PTX ISA's fragment.
// An A operand already in registers in the A-fragment layout (mma_a_layout: a
// previous dot's result, cast to f16, in an attention kernel) skips shared memory.
#include <llvm/IR/InlineAsm.h>

#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"
#include "codegen/nvptx/mma_layout.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

// Bytes of one element of the mma's operand type and K per mma instruction.
int mma_elem_bytes(MmaKind k) { return k == MmaKind::I8 ? 1 : (k == MmaKind::F16 || k == MmaKind::BF16) ? 2 : 4; }
int64_t mma_k(MmaKind k) { return 32 / mma_elem_bytes(k); }  // k16, k8, k32

bool is_pow2_at_least(int64_t v, int64_t lo) { return v >= lo && (v & (v - 1)) == 0; }

// Values an elementwise chain of `v` is computed from (same shape, no data movement).
const Op* elementwise_def(const Value* v) {
  const Op* op = v->def();
  if (op && (op_has_trait(op->kind, 'E') || op->kind == OpKind::Hint) && op->kind != OpKind::Load) return op;
  return nullptr;
}

void collect_dots(const Block& b, std::vector<const Op*>& out) {
  for (auto& op : b.ops) {
    if (op->kind == OpKind::Dot) out.push_back(op.get());
    for (auto& r : op->regions) collect_dots(*r->block, out);
  }
}

// The dot `v` is an elementwise function of, if any.
const Op* feeding_dot(const Value* v, int depth = 0) {
  if (depth > 16 || v->type.is_scalar()) return nullptr;
  const Op* op = v->def();
  if (!op) return nullptr;
  if (op->kind == OpKind::Dot) return op;
  if (!elementwise_def(v)) return nullptr;
  for (const Value* a : op->operands)
    if (a->type.shape == v->type.shape)
      if (const Op* d = feeding_dot(a, depth + 1)) return d;
  return nullptr;
}

}  // namespace

std::optional<MmaKind> GpuLowering::mma_kind(const Op& op) const {
  if (cc_ < 80) return std::nullopt;
  const Value* a = op.operands[0];
  const Value* bm = op.operands[1];
  if (a->type.rank() != 2 || bm->type.rank() != 2) return std::nullopt;
  std::optional<MmaKind> k;
  switch (a->type.elem.kind) {
    case ScalarKind::F16: k = MmaKind::F16; break;
    case ScalarKind::BF16: k = MmaKind::BF16; break;
    case ScalarKind::I8: k = MmaKind::I8; break;
    case ScalarKind::F32: {
      std::string p = op.str_attr("input_precision");
      if (p == "tf32") k = MmaKind::TF32;
      else if (p == "tf32x3") k = MmaKind::TF32x3;
      break;
    }
    default: break;
  }
  if (!k) return std::nullopt;
  const int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
  if (!is_pow2_at_least(M, 16) || !is_pow2_at_least(N, 16) || !is_pow2_at_least(K, mma_k(*k))) return std::nullopt;
  return k;
}

void GpuLowering::plan_dots() {
  std::vector<const Op*> dots;
  collect_dots(*k_.body(), dots);
  for (const Op* d2 : dots)
    if (const Op* d1 = feeding_dot(d2->operands[0])) {
      dot_rows_only_.insert(d1);
      dot_rows_only_.insert(d2);
    }
  // A 16-bit A operand loaded outside the dot's loop (attention's Q) is loaded once
  // straight into the A-fragment layout, so no iteration stages it again.
  for (const Op* d : dots) {
    auto kind = mma_kind(*d);
    const Value* a = d->operands[0];
    if (!kind || mma_elem_bytes(*kind) != 2 || !a->def() || a->def()->kind != OpKind::Load ||
        a->def()->parent == d->parent)
      continue;
    load_layout_.emplace(a, mma_a_layout(mma_tiling(*d), a->type.shape[1]));
  }
}

MmaTiling GpuLowering::mma_tiling(const Op& op) const {
  return choose_mma_tiling(op.operands[0]->type.shape[0], op.operands[1]->type.shape[1], num_warps_,
                           dot_rows_only_.count(&op) > 0);
}

std::optional<BlockedLayout> GpuLowering::planned_layout(const Value* v, int depth) {
  if (depth > 16 || v->type.is_scalar()) return std::nullopt;
  const Op* op = v->def();
  if (!op) return std::nullopt;
  if (op->kind == OpKind::Dot) {
    if (!mma_kind(*op)) return std::nullopt;
    return dot_acc_layout(*op);
  }
  if (op->kind == OpKind::If) {  // lower_if gives a result the layout planned for either branch's value
    for (size_t i = 0; i < op->results.size(); ++i) {
      if (op->result(i) != v) continue;
      for (auto& r : op->regions) {
        const Op* y = r->block->terminator();
        if (y && y->kind == OpKind::Yield && i < y->operands.size())
          if (auto l = planned_layout(y->operands[i], depth + 1)) return l;
      }
    }
    return std::nullopt;
  }
  if (op->kind == OpKind::For) {  // lower_for carries a value in the layout planned for its yield
    const Op* y = op->regions[0]->block->terminator();
    for (size_t i = 0; i < op->results.size(); ++i)
      if (op->result(i) == v && y && y->kind == OpKind::Yield && i < y->operands.size())
        return planned_layout(y->operands[i], depth + 1);
    return std::nullopt;
  }
  if (op->kind == OpKind::Reduce) {  // lower_reduce slices its operand's layout
    auto l = planned_layout(op->operands[0], depth + 1);
    if (!l) return std::nullopt;
    return l->slice(static_cast<int>(op->int_attr("axis")));
  }
  if (!elementwise_def(v)) return std::nullopt;
  for (const Value* a : op->operands)
    if (a->type.shape == v->type.shape)
      if (auto l = planned_layout(a, depth + 1)) return l;
  return std::nullopt;
}

bool GpuLowering::reachable_in_regs(const Value* v, const BlockedLayout& l, int depth) {
  if (v->type.is_scalar()) return true;
  if (depth > 16) return false;
  auto it = tiles_.find(v);
  if (it == tiles_.end()) return false;
  if (it->second.kind == TileVal::Regs) {
    for (int r = 0; r < l.num_regs(); ++r)
      if (!it->second.layout.find(l.index_of(r))) return false;
    return true;
  }
  const Op* op = v->def();
  if (op->kind == OpKind::Const || op->kind == OpKind::Splat) return true;
  if (!elementwise_def(v)) return false;
  for (const Value* a : op->operands)
    if (!reachable_in_regs(a, l, depth + 1)) return false;
  return true;
}

// The layout to stage `x` from: its registers' layout, seen through permutes.
BlockedLayout GpuLowering::source_layout(const Value* x) {
  auto it = tiles_.find(x);
  if (it != tiles_.end() && it->second.kind == TileVal::Regs) return it->second.layout;
  const Op* op = x->def();
  if (op && op->kind == OpKind::Permute) {
    BlockedLayout src = source_layout(op->operands[0]);
    auto order = op->ints_attr("order");
    BlockedLayout l = src;
    for (size_t i = 0; i < order.size(); ++i) {
      l.shape[i] = src.shape[order[i]];
      l.bits[i] = src.bits[order[i]];
    }
    return l;
  }
  return preferred_layout(x);
}

namespace {

// Registers 0..n-1 hold consecutive elements along `dim`: the largest such n.
int contiguous_regs_along(const BlockedLayout& l, int dim) {
  const auto& bits = l.bits[dim];
  int n = 0;
  while (n < static_cast<int>(bits.size()) && bits[n].reg && bits[n].bit == n) ++n;
  return 1 << n;
}

}  // namespace

// Byte offset of element (row, col) of a staging buffer (row-major, `row_bytes`
// per row, swizzled 16-byte chunks; see mma_swizzle_chunk).
llvm::Value* GpuLowering::staged_offset(const StagedOperand& st, llvm::Value* row, llvm::Value* col) {
  if (st.block_bytes) {  // column block col / (128 / elem_bytes), 128-byte rows inside it
    const int64_t per_block = 128 / st.elem_bytes;
    StagedOperand in = st;
    in.block_bytes = 0;
    in.row_bytes = 128;
    llvm::Value* block = b_.CreateLShr(col, log2_exact(per_block));
    llvm::Value* c = b_.CreateAnd(col, b_.getInt32(static_cast<uint32_t>(per_block - 1)));
    return b_.CreateAdd(b_.CreateMul(block, b_.getInt32(static_cast<uint32_t>(st.block_bytes))),
                        staged_offset(in, row, c));
  }
  const int64_t cpr = std::max<int64_t>(1, st.row_bytes / 16);
  llvm::Value* byte = b_.CreateMul(col, b_.getInt32(st.elem_bytes));
  llvm::Value* chunk = b_.CreateLShr(byte, 4);
  llvm::Value* within = b_.CreateAnd(byte, b_.getInt32(15));
  llvm::Value* key;
  if (cpr >= 8) key = b_.CreateAnd(row, b_.getInt32(7));
  else key = b_.CreateAnd(b_.CreateLShr(row, log2_exact(8 / cpr)), b_.getInt32(static_cast<uint32_t>(cpr - 1)));
  llvm::Value* phys = b_.CreateXor(chunk, key);
  llvm::Value* off = b_.CreateMul(row, b_.getInt32(static_cast<uint32_t>(st.row_bytes)));
  return b_.CreateAdd(b_.CreateAdd(off, b_.CreateShl(phys, 4)), within);
}

GpuLowering::StagedOperand GpuLowering::stage_operand(const Value* x, llvm::Value* buf, int kdim, int elem_bytes) {
  const ElemType& e = x->type.elem;
  BlockedLayout l = source_layout(x);
  StagedOperand st;
  st.buf = buf;
  st.elem_bytes = elem_bytes;
  int run0 = contiguous_regs_along(l, 0), run1 = contiguous_regs_along(l, 1);
  if (elem_bytes == 2) st.contig_dim = run0 > run1 ? 0 : 1;
  else st.contig_dim = kdim;  // ldmatrix transposes 16-bit elements only
  st.row_bytes = x->type.shape[st.contig_dim] * elem_bytes;
  int run = st.contig_dim == 0 ? run0 : run1;
  run = std::min<int>(run, 16 / elem_bytes);
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  for (int r = 0; r < l.num_regs(); r += run) {
    SymIndex s = l.index_of(r);
    llvm::Value* row = runtime_index(s[1 - st.contig_dim]);
    llvm::Value* col = runtime_index(s[st.contig_dim]);
    llvm::Value* ptr = b_.CreateInBoundsGEP(b_.getInt8Ty(), buf, staged_offset(st, row, col));
    if (run == 1) {
      b_.CreateStore(to_mem(b_, at(x, s), e), ptr);
      continue;
    }
    auto* vt = llvm::FixedVectorType::get(mt, run);
    llvm::Value* vec = llvm::PoisonValue::get(vt);
    for (int i = 0; i < run; ++i) vec = b_.CreateInsertElement(vec, to_mem(b_, at(x, l.index_of(r + i)), e), i);
    b_.CreateAlignedStore(vec, ptr, llvm::Align(run * elem_bytes));
  }
  return st;
}

// ldmatrix.x4: four 8x8 b16 matrices, each 8 buffer rows of 16 bytes; matrix q
// lands in register q of every lane. Matrix q's first element sits at operand
// coordinates base + (q&1)*step0 + (q>>1)*step1, and lane 8q + r gives the address
// of its row r. A lane receives 32 bits of row (lane>>2): K-adjacent elements when
// the buffer is K-contiguous; otherwise .trans hands it a K-adjacent pair from two
// rows (16-bit elements only).
std::vector<llvm::Value*> GpuLowering::ldmatrix_x4(const StagedOperand& st, int kdim, llvm::Value* base0,
                                                   llvm::Value* base1, const int64_t step0[2],
                                                   const int64_t step1[2]) {
  llvm::Value* lane = b_.CreateAnd(tid_, b_.getInt32(31));
  llvm::Value* q = b_.CreateLShr(lane, 3);
  llvm::Value* r = b_.CreateAnd(lane, b_.getInt32(7));
  llvm::Value* q0 = b_.CreateAnd(q, b_.getInt32(1));
  llvm::Value* q1 = b_.CreateLShr(q, 1);
  auto coord = [&](llvm::Value* base, int d) {
    llvm::Value* v = base;
    if (step0[d]) v = b_.CreateAdd(v, b_.CreateMul(q0, b_.getInt32(static_cast<uint32_t>(step0[d]))));
    if (step1[d]) v = b_.CreateAdd(v, b_.CreateMul(q1, b_.getInt32(static_cast<uint32_t>(step1[d]))));
    return v;
  };
  llvm::Value* i0 = coord(base0, 0);
  llvm::Value* i1 = coord(base1, 1);
  // Each lane addresses one row of one matrix: row r of the matrix runs along the
  // buffer's row dim.
  llvm::Value* row = st.contig_dim == 1 ? b_.CreateAdd(i0, r) : b_.CreateAdd(i1, r);
  llvm::Value* col = st.contig_dim == 1 ? i1 : i0;
  llvm::Value* ptr = b_.CreateInBoundsGEP(b_.getInt8Ty(), st.buf, staged_offset(st, row, col));
  llvm::Value* addr = b_.CreateTrunc(b_.CreatePtrToInt(ptr, b_.getInt64Ty()), b_.getInt32Ty());
  bool trans = st.contig_dim != kdim;
  auto* i32 = b_.getInt32Ty();
  auto* rty = llvm::StructType::get(ctx_, {i32, i32, i32, i32});
  auto* fty = llvm::FunctionType::get(rty, {i32}, false);
  std::string text = std::string("ldmatrix.sync.aligned.m8n8.x4") + (trans ? ".trans" : "") +
                     ".shared.b16 {$0, $1, $2, $3}, [$4];";
  auto* asm_ = llvm::InlineAsm::get(fty, text, "=r,=r,=r,=r,r,~{memory}", /*hasSideEffects=*/true);
  llvm::CallInst* call = b_.CreateCall(asm_, {addr});
  call->addFnAttr(llvm::Attribute::Convergent);
  std::vector<llvm::Value*> out;
  for (unsigned i = 0; i < 4; ++i) out.push_back(b_.CreateExtractValue(call, {i}));
  return out;
}

namespace {

llvm::Value* cvt_tf32(llvm::IRBuilderBase& b, llvm::Value* f32) {
  auto* fty = llvm::FunctionType::get(b.getInt32Ty(), {b.getFloatTy()}, false);
  return b.CreateCall(llvm::InlineAsm::get(fty, "cvt.rna.tf32.f32 $0, $1;", "=r,f", false), {f32});
}

// d = a*b + c for one m16n8kK tile; a: 4 b32, b: 2 b32, c: 4 accumulators.
std::vector<llvm::Value*> emit_mma(llvm::IRBuilderBase& b, MmaKind kind, const std::vector<llvm::Value*>& a,
                                   const std::vector<llvm::Value*>& bf, const std::vector<llvm::Value*>& c) {
  const char* shape_types = nullptr;
  switch (kind) {
    case MmaKind::F16: shape_types = "m16n8k16.row.col.f32.f16.f16.f32"; break;
    case MmaKind::BF16: shape_types = "m16n8k16.row.col.f32.bf16.bf16.f32"; break;
    case MmaKind::TF32:
    case MmaKind::TF32x3: shape_types = "m16n8k8.row.col.f32.tf32.tf32.f32"; break;
    case MmaKind::I8: shape_types = "m16n8k32.row.col.s32.s8.s8.s32"; break;
  }
  bool is_int = kind == MmaKind::I8;
  llvm::Type* ct = is_int ? b.getInt32Ty() : b.getFloatTy();
  const char* cc = is_int ? "r" : "f";
  std::string cons;
  for (int i = 0; i < 4; ++i) cons += std::string("=") + cc + ",";
  for (int i = 0; i < 6; ++i) cons += "r,";
  for (int i = 0; i < 4; ++i) cons += std::to_string(i) + (i < 3 ? "," : "");  // c tied to d
  std::vector<llvm::Type*> params(6, b.getInt32Ty());
  for (int i = 0; i < 4; ++i) params.push_back(ct);
  auto* rty = llvm::StructType::get(b.getContext(), {ct, ct, ct, ct});
  auto* fty = llvm::FunctionType::get(rty, params, false);
  std::string text = std::string("mma.sync.aligned.") + shape_types +
                     " {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$0, $1, $2, $3};";
  std::vector<llvm::Value*> args = a;
  args.insert(args.end(), bf.begin(), bf.end());
  args.insert(args.end(), c.begin(), c.end());
  llvm::CallInst* call = b.CreateCall(llvm::InlineAsm::get(fty, text, cons, false), args);
  call->addFnAttr(llvm::Attribute::Convergent);
  std::vector<llvm::Value*> d;
  for (unsigned i = 0; i < 4; ++i) d.push_back(b.CreateExtractValue(call, {i}));
  return d;
}

// tf32 big/small parts of fragment registers holding f32 bits.
void split_tf32(llvm::IRBuilderBase& b, const std::vector<llvm::Value*>& bits, std::vector<llvm::Value*>& big,
                std::vector<llvm::Value*>* small) {
  big.clear();
  if (small) small->clear();
  for (llvm::Value* x : bits) {
    llvm::Value* f = b.CreateBitCast(x, b.getFloatTy());
    llvm::Value* hi = cvt_tf32(b, f);
    big.push_back(hi);
    if (small) small->push_back(cvt_tf32(b, b.CreateFSub(f, b.CreateBitCast(hi, b.getFloatTy()))));
  }
}

}  // namespace

void GpuLowering::lower_dot_mma(const Op& op, MmaKind kind) {
  const Value* a = op.operands[0];
  const Value* bm = op.operands[1];
  const Value* acc = op.operands[2];
  const int64_t K = a->type.shape[1];
  const int eb = mma_elem_bytes(kind);
  const int64_t kstep = mma_k(kind);
  const MmaTiling t = mma_tiling(op);
  const BlockedLayout lc = mma_acc_layout(t);
  const int mt = t.m_tiles(), nt = t.n_tiles(), kt = static_cast<int>(K / kstep);
  const int nt_bits = log2_exact(nt);

  // The A operand straight from registers when it is already in fragment layout.
  std::vector<llvm::Value*> a_regs;
  BlockedLayout la;
  bool a_in_regs = false;
  if (eb == 2) {
    la = mma_a_layout(t, K);
    a_in_regs = reachable_in_regs(a, la);
  }

  // Operands a cp.async pipeline already put into a ring stage (pipeline_nvptx.cpp),
  // made visible by the pipeline's barrier at the top of the iteration.
  auto pa = pipelined_.find(a), pb = pipelined_.find(bm);
  const bool a_ready = pa != pipelined_.end(), b_ready = pb != pipelined_.end();
  StagedOperand sa, sb;
  if (a_ready) sa = pa->second;
  if (b_ready) sb = pb->second;
  if (a_ready && b_ready && wgmma_swapped_dots_.count(&op)) return lower_dot_wgmma_swapped(op, sa, sb);
  if (a_ready && b_ready && wgmma_dots_.count(&op)) return lower_dot_wgmma(op, kind, sa, sb);
  const bool stage_a = !a_in_regs && !a_ready, stage_b = !b_ready;
  llvm::Value* a_buf = nullptr;
  llvm::Value* b_buf = nullptr;
  if (stage_a || stage_b) {
    ensure_dot_smem();
    a_buf = dot_smem_[0];
    b_buf = dot_smem_[1];
  }
  if (!stage_a && !stage_b) {
    // nothing to stage
  } else if (dot_double_buffered_) {
    // Execution j writes copy j%2. Before execution j+2 overwrites a copy, every
    // thread has passed execution j+1's barrier, so it is done reading execution j.
    llvm::Value* phase = b_.CreateLoad(b_.getInt32Ty(), dot_phase_);
    b_.CreateStore(b_.CreateXor(phase, b_.getInt32(1)), dot_phase_);
    a_buf = b_.CreateInBoundsGEP(b_.getInt8Ty(), a_buf,
                                 b_.CreateMul(phase, b_.getInt32(static_cast<uint32_t>(dot_stage_bytes_[0]))));
    b_buf = b_.CreateInBoundsGEP(b_.getInt8Ty(), b_buf,
                                 b_.CreateMul(phase, b_.getInt32(static_cast<uint32_t>(dot_stage_bytes_[1]))));
  } else {
    barrier();  // an earlier dot (or the previous iteration) may still read the buffers
  }
  if (stage_a) sa = stage_operand(a, a_buf, /*kdim=*/1, eb);
  if (stage_b) sb = stage_operand(bm, b_buf, /*kdim=*/0, eb);
  if (stage_a || stage_b) barrier();
  if (a_in_regs) a_regs = materialize(a, la);

  std::vector<llvm::Value*> c(lc.num_regs());
  for (int r = 0; r < lc.num_regs(); ++r) c[r] = at(acc, lc.index_of(r));

  // Warp origin of this thread's warp tile.
  llvm::Value* warp = b_.CreateLShr(tid_, 5);
  llvm::Value* wn = b_.CreateAnd(warp, b_.getInt32(static_cast<uint32_t>(t.warps_n - 1)));
  llvm::Value* wm = b_.CreateAnd(b_.CreateLShr(warp, log2_exact(t.warps_n)), b_.getInt32(static_cast<uint32_t>(t.warps_m - 1)));
  llvm::Value* m0 = b_.CreateMul(wm, b_.getInt32(static_cast<uint32_t>(t.warp_m())));
  llvm::Value* n0 = b_.CreateMul(wn, b_.getInt32(static_cast<uint32_t>(t.warp_n())));
  const int64_t half_k = kstep / 2;

  for (int kk = 0; kk < kt; ++kk) {
    std::vector<std::vector<llvm::Value*>> af(mt), bfr(nt);
    for (int mi = 0; mi < mt; ++mi) {
      if (a_in_regs) {
        // Fragment (mi, kk): registers 8(mi*kt+kk)+2q, +1 are the pair of a-register q.
        for (int q = 0; q < 4; ++q) {
          int base = (mi * kt + kk) * 8 + 2 * q;
          llvm::Type* et = a_regs[base]->getType();
          llvm::Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(et, 2));
          v = b_.CreateInsertElement(v, a_regs[base], uint64_t(0));
          v = b_.CreateInsertElement(v, a_regs[base + 1], uint64_t(1));
          af[mi].push_back(b_.CreateBitCast(v, b_.getInt32Ty()));
        }
        continue;
      }
      const int64_t s0[2] = {8, 0}, s1[2] = {0, half_k};
      af[mi] = ldmatrix_x4(sa, 1, b_.CreateAdd(m0, b_.getInt32(16 * mi)),
                           b_.getInt32(static_cast<uint32_t>(kk * kstep)), s0, s1);
    }
    for (int np = 0; np < nt / 2; ++np) {
      const int64_t s0[2] = {half_k, 0}, s1[2] = {0, 8};
      auto r = ldmatrix_x4(sb, 0, b_.getInt32(static_cast<uint32_t>(kk * kstep)),
                           b_.CreateAdd(n0, b_.getInt32(16 * np)), s0, s1);
      bfr[2 * np] = {r[0], r[1]};
      bfr[2 * np + 1] = {r[2], r[3]};
    }
    // tf32: round to nearest (ties away), as cuBLAS and Triton do; tf32x3 also
    // keeps the rounding error as a second tf32 term.
    std::vector<std::vector<llvm::Value*>> a_small(mt), b_small(nt);
    if (kind == MmaKind::TF32 || kind == MmaKind::TF32x3) {
      bool x3 = kind == MmaKind::TF32x3;
      for (int mi = 0; mi < mt; ++mi) {
        std::vector<llvm::Value*> big;
        split_tf32(b_, af[mi], big, x3 ? &a_small[mi] : nullptr);
        af[mi] = big;
      }
      for (int ni = 0; ni < nt; ++ni) {
        std::vector<llvm::Value*> big;
        split_tf32(b_, bfr[ni], big, x3 ? &b_small[ni] : nullptr);
        bfr[ni] = big;
      }
    }
    for (int mi = 0; mi < mt; ++mi)
      for (int ni = 0; ni < nt; ++ni) {
        int base = (mi << (nt_bits)) * 4 + ni * 4;  // j | half<<1 | ni<<2 | mi<<(2+nt_bits)
        std::vector<llvm::Value*> cc(c.begin() + base, c.begin() + base + 4);
        if (kind == MmaKind::TF32x3) {  // small terms first, so the big product rounds last
          cc = emit_mma(b_, kind, a_small[mi], bfr[ni], cc);
          cc = emit_mma(b_, kind, af[mi], b_small[ni], cc);
        }
        cc = emit_mma(b_, kind, af[mi], bfr[ni], cc);
        std::copy(cc.begin(), cc.end(), c.begin() + base);
      }
  }

  TileVal res;
  res.kind = TileVal::Regs;
  res.layout = lc;
  res.regs = std::move(c);
  tiles_[op.result()] = std::move(res);
}

}  // namespace tessera::codegen::nvptx
