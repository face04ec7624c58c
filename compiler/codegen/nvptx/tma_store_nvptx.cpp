// NVPTX lowering: a warp-specialized loop's 2-D tile stores (a matmul epilogue's C)
// written to global memory by the tensor memory accelerator on sm_90a.
//
// A store qualifies where its address and mask are the affine tile that tma_nvptx.cpp
// recognizes for loads (base + (x0 + i) * s0 + (x1 + j), mask the tile's bounds; base and
// s0 16-byte aligned by the launch's specialization), it sits in the body of a
// warp-specialized loop with a TMA ring or after it (past the split only the consumers run
// it, and a thread of theirs issues the copies), and its value's layout is one that
// store_through_smem would convert anyway (a tensor-core accumulator). The host encodes
// one more CUtensorMap (runtime/cuda/driver.cpp, the same list as the loads': dims
// {b1, b0}, row stride s0, box {128 bytes of columns, the tile's rows}, 128-byte swizzle);
// rows and columns of a box past the bounds are not written (the mask, for free).
// Worked example, the 128x256 f16 C tile of kernels/linear.py (8 consumer warps: warpgroup w
// holds rows 64w..64w+63 of the wgmma accumulator; a 4-stage ring of 192 KB, so two 16 KB
// chunk buffers fit beside it; four 128x64 column chunks, each two 64x64 boxes):
//   thread 0 of each warpgroup (the issuer): cp.async.bulk.wait_group.read 1 (at most one
//             earlier chunk of its own still being read: not the buffer chunk 0 takes);
//             bar.sync 2 + w, 128 (the warpgroup only)
//   chunk c:  every thread: st.shared.b32 of its 2-element runs of columns 64c..64c+63
//             into buffer c % 2, row r at 128 r, its 16-byte unit u at (u ^ (r % 8)) * 16
//             (the 128-byte swizzle, which also spreads a warp's 8 rows over all banks);
//             fence.proxy.async.shared::cta (the copy engine reads what they wrote);
//             issuer: cp.async.bulk.wait_group.read 0 (chunk c+1's buffer, which chunk c-1
//             used, is read out); bar.sync 2 + w, 128;
//             issuer: cp.async.bulk.tensor.2d.global.shared::cta.bulk_group
//                     [C's map, {x1 + 64c, x0 + 64w}], [buffer c % 2 + 8 KB w];
//                     cp.async.bulk.commit_group
//   then each warpgroup goes on to the next tile's wgmma at once (store_through_smem's path:
//   two CTA-wide barriers, 8 ld.shared.v4 and 8 st.global.v4 per thread per 128-column half).
//   Before the kernel returns: cp.async.bulk.wait_group 0 (the copies' reads of shared
//   memory and writes are complete).
// Where the rows are not split by warpgroup that way, the consumers' barrier (1) orders the
// chunk and thread 0 issues every box. On an H100 (bench/results/
// kernels_cuda_float16_linear_tmastore*.md) this took x @ W^T + b, relu, 4096x1024x2048 from
// about 0.0283 to 0.0278 ms GPU-queued; writing the whole tile first (3 stages, four buffers)
// and then issuing its copies with one barrier was slower (0.0298): the copies of early
// chunks overlap the writes of later ones.
// Chunks take the buffers in turn, and every store's chunk count is a multiple of the
// buffer count, so chunk c's buffer was last read by the copy issued `buffers` chunks
// before, whichever store issued it: waiting until at most buffers - 1 groups are unread
// (buffers - 2 before the previous chunk's group is committed) frees it.
#include <llvm/IR/InlineAsm.h>

#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

// One box row: the span of the 128-byte swizzle (the widest), which keeps a warp's
// st.shared of an accumulator free of bank conflicts.
constexpr int64_t kBoxRowBytes = 128;

// Stores of `b` and of the branches of its ifs (not of inner loops: a store there would
// run a different number of times than the loop's tiles, which is fine, but no such
// kernel exists to test it on).
void collect_stores(const Block& b, std::vector<const Op*>& out) {
  for (auto& op : b.ops) {
    if (op->kind == OpKind::Store) out.push_back(op.get());
    if (op->kind == OpKind::If)
      for (auto& r : op->regions) collect_stores(*r->block, out);
  }
}

void emit_predicated_asm(llvm::IRBuilderBase& b, const std::string& text, llvm::Value* pred) {
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), {b.getInt1Ty()}, false);
  b.CreateCall(fty, llvm::InlineAsm::get(fty, "@$0 " + text, "b,~{memory}", /*hasSideEffects=*/true), {pred})
      ->addFnAttr(llvm::Attribute::Convergent);
}

}  // namespace

void GpuLowering::plan_tma_stores() {
  if (!tma_ || !tma_store_enabled_ || tma_cta_barrier_) return;
  const auto& top = k_.body()->ops;
  for (auto it = top.begin(); it != top.end(); ++it) {
    const Op& loop = **it;
    if (loop.kind != OpKind::For || !asks_warp_specialize(loop)) continue;
    const Block& body = *loop.regions[0]->block;
    bool ring = false;
    for (auto& m : tma_maps_) ring = ring || (!m.store && m.op->parent == &body);
    if (!ring) continue;  // no TMA ring: the loop will not be specialized
    // The consumers run the loop's stores and the kernel's after it (the producer has
    // returned by then).
    std::vector<const Op*> stores;
    collect_stores(body, stores);
    for (auto after = std::next(it); after != top.end(); ++after) {
      if ((*after)->kind == OpKind::Store) stores.push_back(after->get());
      if ((*after)->kind == OpKind::If)
        for (auto& r : (*after)->regions) collect_stores(*r->block, stores);
    }
    for (const Op* st : stores) {
      if (!st->str_attr("cache_modifier").empty()) continue;  // (a bulk copy takes no cache operator)
      std::optional<TmaMap> m = match_tma_access(*st, nullptr);
      // 16-bit elements (what store_through_smem converts too: an accumulator's 8-byte f32
      // runs already fill whole sectors, and no GPU test covers f32 tiles here).
      if (!m || m->elem_bytes != 2) continue;
      const Type& t = st->operands[1]->type;
      const int64_t row_bytes = t.shape[1] * m->elem_bytes;
      if (row_bytes < kBoxRowBytes || row_bytes % kBoxRowBytes) continue;
      // A box per consumer warpgroup's rows (a wgmma accumulator's warpgroup w holds rows
      // 64w..64w+63 of each 64 * warpgroups): tma_store lets each warpgroup store its own.
      const int64_t groups = num_warps_ % 4 == 0 && t.shape[0] % (num_warps_ / 4 * 8) == 0 ? num_warps_ / 4 : 1;
      m->box_inner = kBoxRowBytes / m->elem_bytes;
      m->box_outer = t.shape[0] / groups;
      m->swizzle_bytes = static_cast<int>(kBoxRowBytes);
      m->param = static_cast<int>(k_.args.size() + tma_maps_.size());
      tma_maps_.push_back(*m);
    }
  }
}

bool GpuLowering::tma_store(const Op& op, const BlockedLayout& src) {
  const TmaMap* m = tma_map_of(&op);
  // Past a specialized loop's split, in the consumers' code (the buffers are not per
  // ping-pong warpgroup).
  if (!m || !m->store || !consumer_barriers_ || in_producer_ || in_ping_pong_ || consumer_groups_ != 1) return false;
  const Value* val = op.operands[1];
  const ElemType& e = val->type.elem;
  const int eb = e.bytes();
  const int64_t rows = val->type.shape[0], cols = val->type.shape[1];
  const int64_t chunks = cols / m->box_inner, boxes = rows / m->box_outer;  // boxes: per chunk
  const int col_bits = log2_exact(cols), k = log2_exact(chunks);
  for (int r = 0; r < src.num_regs(); ++r)
    if (register_chunk(src, r, col_bits, k) < 0) return false;  // a chunk's elements are in fixed registers
  // Warpgroup w holds box w's rows (the top row bits are the thread id's warpgroup bits),
  // as every thread of it does of every register: then each warpgroup stores its own
  // boxes, synchronizing its 128 threads only. Else the consumers store together.
  const int row_bits = log2_exact(rows), box_bits = log2_exact(boxes);
  bool per_group = boxes > 1 && boxes * 128 == num_threads_ && num_threads_ == consumer_threads_;
  for (int r = 0; r < src.num_regs() && per_group; ++r) {
    const SymIndex ix = src.index_of(r);
    const std::vector<IndexBit>& rb = ix[0];
    for (int i = 0; i < box_bits; ++i) {
      const IndexBit& bit = rb[static_cast<size_t>(row_bits - box_bits + i)];
      per_group = per_group && bit.kind == IndexBit::Thread && bit.thread_bit == 7 + i;
    }
  }
  const int64_t chunk_bytes = rows * kBoxRowBytes;  // its boxes one after the other: row r at 128 r
  if (!tma_store_smem_) {
    // As many chunk buffers as fit (a power of two: it divides the chunk count), at most
    // the whole tile's; 1024-byte aligned, as the 128-byte swizzle's pattern repeats.
    const int64_t offset = (shared_bytes_ + 1023) / 1024 * 1024;
    int64_t bufs = chunks;
    while (bufs && offset + bufs * chunk_bytes > max_dynamic_shared_bytes(cc_)) bufs /= 2;
    if (!bufs) return false;
    tma_store_smem_ = new_smem(b_.getInt8Ty(), bufs * chunk_bytes, "tma_store", 1024);
    tma_store_bufs_ = static_cast<int>(bufs);
    tma_store_chunk_bytes_ = chunk_bytes;
  } else if (chunk_bytes > tma_store_chunk_bytes_ || chunks % tma_store_bufs_) {
    return false;
  }
  const int bufs = tma_store_bufs_;

  llvm::Type* mt = llvm_mem_type(ctx_, e);
  std::vector<llvm::Value*> regs = materialize(val, src);
  int run = src.contiguous_regs();
  while (run > 1 && run * eb > 16) run /= 2;
  auto* i32 = b_.getInt32Ty();
  auto coord = [&](const Value* x) -> llvm::Value* {
    if (!x) return b_.getInt32(0);
    llvm::Value* v = scalar(x);
    return v->getType() == i32 ? v : b_.CreateTrunc(v, i32);
  };
  llvm::Value* desc = b_.CreatePtrToInt(fn_->getArg(m->param), b_.getInt64Ty());
  llvm::Value* col0 = coord(m->start[1]);
  llvm::Value* row0 = coord(m->start[0]);
  llvm::Value* group = per_group ? b_.CreateLShr(tid_, b_.getInt32(7)) : nullptr;
  auto issuer = [&] {
    return b_.CreateICmpEQ(per_group ? b_.CreateAnd(tid_, b_.getInt32(127)) : tid_, b_.getInt32(0));
  };
  // Named barriers 2, 3, ... over one warpgroup (0: the CTA, 1: the consumers), their ids
  // immediates (a register id makes ptxas reserve all 16).
  std::string group_barrier = "{\n.reg .pred p;\n";
  for (int64_t g = 0; g < boxes; ++g)
    group_barrier += "setp.eq.u32 p, $0, " + std::to_string(g) + ";\n@p barrier.sync.aligned " +
                     std::to_string(2 + g) + ", 128;\n";
  group_barrier += "}";
  auto* sync_ty = llvm::FunctionType::get(b_.getVoidTy(), {i32}, false);
  auto sync = [&] {
    if (!per_group) return barrier();
    b_.CreateCall(sync_ty, llvm::InlineAsm::get(sync_ty, group_barrier, "r,~{memory}", true), {group})
        ->addFnAttr(llvm::Attribute::Convergent);
  };
  auto wait_read = [&](int pending) {
    emit_predicated_asm(b_, "cp.async.bulk.wait_group.read " + std::to_string(pending) + ";", issuer());
  };
  auto* copy_ty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt64Ty(), i32, i32, i32}, false);
  auto* copy = llvm::InlineAsm::get(
      copy_ty, "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [$0, {$1, $2}], [$3];", "l,r,r,r,~{memory}", true);
  auto* void_ty = llvm::FunctionType::get(b_.getVoidTy(), {}, false);
  auto* commit = llvm::InlineAsm::get(void_ty, "cp.async.bulk.commit_group;", "~{memory}", true);
  auto* fence = llvm::InlineAsm::get(void_ty, "fence.proxy.async.shared::cta;", "~{memory}", true);
  const uint32_t box_bytes = static_cast<uint32_t>(m->box_outer * kBoxRowBytes);
  auto* opaque_ty = llvm::FunctionType::get(i32, {i32}, false);
  auto* opaque = llvm::InlineAsm::get(opaque_ty, "mov.u32 $0, $1;", "=r,r", /*hasSideEffects=*/true);
  for (int64_t c = 0; c < chunks; ++c) {
    llvm::Value* buf = b_.CreateInBoundsGEP(b_.getInt8Ty(), tma_store_smem_,
                                            b_.getInt32(static_cast<uint32_t>((c % bufs) * chunk_bytes)));
    if (c == 0 || bufs == 1) {  // this chunk's buffer read out by the copy engine, as every thread sees
      wait_read(bufs - 1);
      sync();
    }
    // The addresses from an opaque copy of the thread id, so that they are computed here:
    // derived from tid itself, LLVM hoisted them out of the persistent loop, and the 16
    // distinct swizzled addresses (64-bit) stayed live across the main loop.
    llvm::Value* thread_id = tid_;
    tid_ = b_.CreateCall(opaque_ty, opaque, {thread_id});
    llvm::Value* buf32 = smem32(buf);
    for (int r0 = 0; r0 < src.num_regs(); r0 += run) {
      if (register_chunk(src, r0, col_bits, k) != c) continue;
      SymIndex s = src.index_of(r0);
      s[1].resize(static_cast<size_t>(col_bits - k));  // the column within the chunk
      llvm::Value* row = runtime_index(s[0]);
      llvm::Value* byte = b_.CreateMul(runtime_index(s[1]), b_.getInt32(static_cast<uint32_t>(eb)));
      llvm::Value* unit = b_.CreateXor(b_.CreateLShr(byte, b_.getInt32(4)), b_.CreateAnd(row, b_.getInt32(7)));
      llvm::Value* off = b_.CreateAdd(b_.CreateMul(row, b_.getInt32(static_cast<uint32_t>(kBoxRowBytes))),
                                      b_.CreateOr(b_.CreateShl(unit, b_.getInt32(4)), b_.CreateAnd(byte, b_.getInt32(15))));
      const int bytes = run * eb;
      if (bytes % 4) {  // (2-byte runs: a plain store)
        b_.CreateAlignedStore(to_mem(b_, regs[r0], e), b_.CreateInBoundsGEP(b_.getInt8Ty(), buf, off), llvm::Align(eb));
        continue;
      }
      llvm::Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(mt, run));
      for (int i = 0; i < run; ++i) v = b_.CreateInsertElement(v, to_mem(b_, regs[r0 + i], e), b_.getInt32(i));
      // As 32-bit words, by a 32-bit shared address (st.shared.b32 / .v2 / .v4).
      const int words = bytes / 4;
      v = b_.CreateBitCast(v, llvm::FixedVectorType::get(i32, words));
      std::vector<llvm::Value*> args{b_.CreateAdd(buf32, off)};
      std::string text = words == 1 ? "st.shared.b32 [$0], $1;" : words == 2 ? "st.shared.v2.b32 [$0], {$1, $2};"
                                                                          : "st.shared.v4.b32 [$0], {$1, $2, $3, $4};";
      std::string cons = "r";
      for (int w = 0; w < words; ++w) {
        args.push_back(b_.CreateExtractElement(v, b_.getInt32(w)));
        cons += ",r";
      }
      auto* st_ty = llvm::FunctionType::get(b_.getVoidTy(), std::vector<llvm::Type*>(args.size(), i32), false);
      b_.CreateCall(st_ty, llvm::InlineAsm::get(st_ty, text, cons + ",~{memory}", true), args);
    }
    tid_ = thread_id;
    // The generic proxy's writes, visible to the copy engine's (async proxy) reads.
    b_.CreateCall(void_ty, fence, {})->addFnAttr(llvm::Attribute::Convergent);
    if (c + 1 < chunks && bufs >= 2) wait_read(bufs - 2);  // the next chunk's buffer (see above)
    sync();
    // This warpgroup's box, or every box; operands computed before the branch.
    llvm::Value* col = c ? b_.CreateAdd(col0, b_.getInt32(static_cast<uint32_t>(c * m->box_inner))) : col0;
    std::vector<std::pair<llvm::Value*, llvm::Value*>> row_and_smem;
    for (int64_t bx = 0; bx < (per_group ? 1 : boxes); ++bx) {
      llvm::Value* which = per_group ? group : b_.getInt32(static_cast<uint32_t>(bx));
      row_and_smem.push_back(
          {b_.CreateAdd(row0, b_.CreateMul(which, b_.getInt32(static_cast<uint32_t>(m->box_outer)))),
           smem32(b_.CreateInBoundsGEP(b_.getInt8Ty(), buf, b_.CreateMul(which, b_.getInt32(box_bytes))))});
    }
    // One thread issues, behind a branch (tma_issue says why not a predicate).
    llvm::BasicBlock* copy_bb = llvm::BasicBlock::Create(ctx_, "tma.store", fn_);
    llvm::BasicBlock* done_bb = llvm::BasicBlock::Create(ctx_, "tma.stored", fn_);
    b_.CreateCondBr(issuer(), copy_bb, done_bb);
    b_.SetInsertPoint(copy_bb);
    for (auto& [row, smem] : row_and_smem)
      b_.CreateCall(copy_ty, copy, {desc, col, row, smem})->addFnAttr(llvm::Attribute::Convergent);
    b_.CreateCall(void_ty, commit, {})->addFnAttr(llvm::Attribute::Convergent);
    b_.CreateBr(done_bb);
    b_.SetInsertPoint(done_bb);
    memo_.clear();  // at() results are valid in the block they were emitted in
  }
  return true;
}

void GpuLowering::finish_tma_stores() {
  if (!tma_store_smem_) return;
  // Shared memory must stay until the copies have read it, and their writes be done
  // before the grid is: the issuing thread waits at its return (the others have none).
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {}, false);
  auto* wait = llvm::InlineAsm::get(fty, "cp.async.bulk.wait_group 0;", "~{memory}", true);
  for (llvm::BasicBlock& bb : *fn_)
    if (auto* ret = llvm::dyn_cast_or_null<llvm::ReturnInst>(bb.getTerminator())) {
      b_.SetInsertPoint(ret);
      b_.CreateCall(fty, wait, {})->addFnAttr(llvm::Attribute::Convergent);
    }
}

}  // namespace tessera::codegen::nvptx
