// NVPTX lowering: a 2-D tile store whose value sits in a layout of short per-thread
// runs (a tensor-core accumulator: 2 consecutive elements, 4 bytes of f16) goes
// through shared memory first, so that the global stores are 16 bytes per thread.
//
// Worked example, the 128x128 f16 output tile of kernels/linear.py (8 warps, the
// wgmma accumulator layout: lane l of a warp holds row l/4 (+8), columns 2(l%4)+8j):
//   direct:  32 st.global.b32 per thread; one warp instruction writes 8 rows x 16
//            bytes, half of each 32-byte sector it touches;
//   here:    barrier; every thread writes its 2-element runs (st.shared.b32) into a
//            [128][128 + 8] buffer (8 elements of padding per row: the 8 rows one
//            warp instruction writes start 272 bytes apart, so they fall in banks
//            4r..4r+3, no conflicts); barrier; every thread reads 8 consecutive
//            elements of one row (ld.shared.v4.b32, the canonical layout) and stores
//            them with one st.global.v4.b32: 8 stores per thread, each warp
//            instruction writing 2 whole rows of 256 bytes.
// On an H100 this took attention_score's store-bound q @ k^T (8 x 2048 x 2048 f16
// out) from 0.077 to 0.037 ms and linear_relu 4096x1024 @ 1024x2048 from 0.048 to
// 0.037 ms (bench/results/kernels_cuda_float16_linear.md).
// The buffer reuses a finished pipelined loop's ring when one is large enough
// (lower_for notes the rings in dead_smem_), or an earlier conversion's buffer, and
// where neither exists and a new one would not fit, the tile goes through in column
// chunks (128x256 f16 beside a 4-stage ring in a warp-specialized loop with TESSERA_TMA=4,
// where tma_store_nvptx.cpp does not take it: two 128x128 passes through one 34 KB buffer),
// so the kernel's shared memory, and with
// it how many CTAs fit on an SM, does not grow. Reuse is safe because every use of
// that memory is fenced by barriers on both sides: the ring's prologue starts with
// one, and this conversion starts with one and ends with the readers' loads done
// before any later writer's barrier.
#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

int GpuLowering::register_chunk(const BlockedLayout& l, int reg, int col_bits, int k) {
  const SymIndex ix = l.index_of(reg);
  const std::vector<IndexBit>& cb = ix[1];
  int c = 0;
  for (int i = 0; i < k; ++i) {
    const IndexBit& bit = cb[static_cast<size_t>(col_bits - k + i)];
    if (bit.kind == IndexBit::Thread) return -1;
    c |= (bit.kind == IndexBit::One) << i;
  }
  return c;
}

bool GpuLowering::store_through_smem(const Op& op) {
  const Value* val = op.operands[1];
  const Type& t = val->type;
  if (t.rank() != 2 || t.elem.is_ptr() || t.elem.is_bool() || !layout_hint(val)) return false;
  const ElemType& e = t.elem;
  const int eb = e.bytes();
  const int64_t rows = t.shape[0], cols = t.shape[1];
  // Small tiles: a round trip costs more than narrow stores.
  if (rows * cols * eb < 4096) return false;
  const BlockedLayout src = preferred_layout(val);
  if (tma_store(op, src)) return true;  // (a warp-specialized loop's store on sm_90a: tma_store_nvptx.cpp)
  const int direct = access_width(op, src);
  const int64_t vec = std::min<int64_t>({16 / eb, cols, rows * cols / num_threads_});
  if (vec < 1) return false;
  const BlockedLayout dst = make_blocked_layout(t.shape, static_cast<int>(vec), num_threads_);
  const int wide = access_width(op, dst);
  // Only for runs of at most 4 bytes (4 lanes then fill half of a 32-byte sector
  // per row: 8-byte runs of f32 already fill whole sectors) that become 16 bytes.
  if (direct * eb > 4 || wide * eb < 16) return false;

  // A padded row-major buffer: rows stay 16-byte aligned. Where the whole tile's does not
  // fit beside what is allocated (a warp-specialized loop's ring, which the producer keeps
  // filling, cannot lend its memory), the tile goes through in column chunks, one after the
  // other through one chunk-sized buffer: 2, 4, ... chunks, as long as the chunk a register
  // belongs to is fixed by the register (its top column bits are no thread bits).
  int col_bits = 0;
  while ((int64_t{1} << col_bits) < cols) ++col_bits;
  auto chunk_of = [&](int r, int k) { return register_chunk(src, r, col_bits, k); };  // -1: a thread bit decides
  const int64_t pad = 16 / eb;
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  // (In a ping-pong loop's body each consumer warpgroup needs its own copy: group_smem.)
  const int64_t copies = in_ping_pong_ ? consumer_groups_ : 1;
  auto fits_somewhere = [&](int64_t bytes) {
    for (auto& [offset, size] : dead_smem_)
      if (size >= copies * bytes && offset % 16 == 0) return true;
    for (auto& [offset, size] : store_smem_)
      if (size >= copies * bytes) return true;
    return shared_bytes_ + copies * bytes + 16 <= max_dynamic_shared_bytes(cc_);
  };
  int k = 0;  // log2 of the chunks
  while (!fits_somewhere(rows * (cols / (int64_t{1} << k) + pad) * eb) && k < col_bits &&
         cols / (int64_t{1} << (k + 1)) >= wide) {
    bool fixed = true;
    for (int r = 0; r < src.num_regs() && fixed; ++r) fixed = chunk_of(r, k + 1) >= 0;
    if (!fixed) break;
    ++k;
  }
  const int64_t chunk_cols = cols >> k;
  const int64_t stride = chunk_cols + pad;
  const int64_t bytes = rows * stride * eb;
  llvm::Value* buf = nullptr;
  for (auto& [offset, size] : dead_smem_)
    if (size >= copies * bytes && offset % 16 == 0) {
      buf = group_smem(offset, bytes);
      break;
    }
  // Or an earlier conversion's buffer (the same fences: a fused epilogue storing both Z
  // and C, which a warp-specialized loop's ring cannot lend its memory to).
  for (auto& [offset, size] : store_smem_)
    if (!buf && size >= copies * bytes) buf = group_smem(offset, bytes);
  if (!buf) {
    buf = new_smem(b_.getInt8Ty(), bytes, "store_cvt");
    store_smem_.emplace_back(smem_offset_.at(buf), copies * bytes);
  }
  // s's element within its chunk (a whole-tile index loses the chunk's column bits).
  auto element_ptr = [&](SymIndex s) {
    if (s[1].size() > static_cast<size_t>(col_bits - k)) s[1].resize(static_cast<size_t>(col_bits - k));
    llvm::Value* idx = b_.CreateAdd(b_.CreateMul(runtime_index(s[0]), b_.getInt32(static_cast<uint32_t>(stride))),
                                    runtime_index(s[1]));
    return b_.CreateInBoundsGEP(mt, buf, idx);
  };

  std::vector<llvm::Value*> regs = materialize(val, src);
  int run = src.contiguous_regs();
  while (run > 1 && run * eb > 16) run /= 2;
  const int64_t chunk_vec = std::min<int64_t>({vec, chunk_cols, std::max<int64_t>(1, rows * chunk_cols / num_threads_)});
  const BlockedLayout chunk_dst = make_blocked_layout({rows, chunk_cols}, static_cast<int>(chunk_vec), num_threads_);
  const int chunk_wide = std::min<int>(wide, static_cast<int>(chunk_vec));
  const Value* mask = op.operands.size() >= 3 ? op.operands[2] : nullptr;
  llvm::Value* first = is_first_replica(chunk_dst);
  for (int c = 0; c < (1 << k); ++c) {
    // Write the value's own runs of this chunk (replicas write the same bits).
    barrier();
    for (int r0 = 0; r0 < src.num_regs(); r0 += run) {
      if (k && chunk_of(r0, k) != c) continue;
      llvm::Value* p = element_ptr(src.index_of(r0));
      if (run == 1) {
        b_.CreateAlignedStore(to_mem(b_, regs[r0], e), p, llvm::Align(eb));
        continue;
      }
      llvm::Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(mt, run));
      for (int i = 0; i < run; ++i) v = b_.CreateInsertElement(v, to_mem(b_, regs[r0 + i], e), b_.getInt32(i));
      b_.CreateAlignedStore(v, p, llvm::Align(run * eb));
    }
    barrier();
    // Read `chunk_wide` consecutive elements per access in the chunk's canonical layout and
    // store them at the chunk's columns.
    for (int r0 = 0; r0 < chunk_dst.num_regs(); r0 += chunk_wide) {
      SymIndex s0 = chunk_dst.index_of(r0);
      auto* vt = llvm::FixedVectorType::get(mt, chunk_wide);
      llvm::Value* v = b_.CreateAlignedLoad(vt, element_ptr(s0), llvm::Align(chunk_wide * eb));
      for (int i = 0; i < k; ++i) s0[1].push_back(IndexBit{(c >> i) & 1 ? IndexBit::One : IndexBit::Zero, 0});
      std::vector<llvm::Value*> vals;
      for (int i = 0; i < chunk_wide; ++i) vals.push_back(from_mem(b_, b_.CreateExtractElement(v, b_.getInt32(i)), e));
      llvm::Value* pred = mask ? at(mask, s0) : nullptr;
      if (first) pred = pred ? b_.CreateAnd(pred, first) : first;
      emit_global_store(at(op.operands[0], s0), e, vals, pred, op.str_attr("cache_modifier"));
    }
  }
  return true;
}

}  // namespace tessera::codegen::nvptx
