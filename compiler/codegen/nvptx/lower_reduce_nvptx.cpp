// NVPTX lowering, part 3: reductions with a combine region, in three steps.
//
// Worked example, tl.max(x, axis=0) for x: tile<1024xf32>, 4 warps (layout
// [r0,r1,t0..t6,r2]: thread t holds x[4t..4t+3] and x[512+4t..512+4t+3]):
//   1. within the thread: combine the 8 registers (a pairwise tree);
//   2. within the warp: the index bits from lane bits t0..t4 are reduced by
//      butterfly shuffles `shfl.sync.bfly` with lane masks 1, 2, 4, 8, 16 — every
//      lane ends with its warp's result;
//   3. across warps (bits t5, t6): each thread writes its warp's partial to shared
//      memory slot [warp], a barrier, and every thread combines slots 0..3 in order.
// The result's layout is x's with the axis removed, so every thread holds the
// values of the rows it owns (here: the scalar) and a later broadcast is free.
// For a commutative combiner all lanes compute bitwise-identical results, which
// keeps scalars uniform across the CTA.
#include <llvm/IR/IntrinsicsNVPTX.h>

#include "codegen/common/combine_region.h"
#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

std::vector<llvm::Value*> GpuLowering::emit_combine(const Op& op, const std::vector<llvm::Value*>& lhs,
                                                   const std::vector<llvm::Value*>& rhs) {
  return emit_combine_region(
      b_, op, lhs, rhs, scalars_, [&](const Op& inner) { lower_op(inner); },
      [&](const Op& inner, const std::string& what) { unsupported(inner, what); });
}

// Pairwise tree over the parts (each a tuple of operand values), in order.
std::vector<llvm::Value*> GpuLowering::combine_all(const Op& op, std::vector<std::vector<llvm::Value*>> parts) {
  while (parts.size() > 1) {
    std::vector<std::vector<llvm::Value*>> next;
    for (size_t i = 0; i + 1 < parts.size(); i += 2) next.push_back(emit_combine(op, parts[i], parts[i + 1]));
    if (parts.size() % 2) next.push_back(parts.back());
    parts = std::move(next);
  }
  return parts[0];
}

// Butterfly exchange with lane (lane ^ lane_mask), any element type: values
// travel as one or two i32 words.
llvm::Value* GpuLowering::shuffle_xor(llvm::Value* v, int lane_mask) {
  llvm::Type* t = v->getType();
  auto shfl_i32 = [&](llvm::Value* x) {
    return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, {},
                              {b_.getInt32(0xFFFFFFFFu), x, b_.getInt32(lane_mask), b_.getInt32(0x1F)});
  };
  if (t->isFloatTy())
    return b_.CreateIntrinsic(llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, {},
                              {b_.getInt32(0xFFFFFFFFu), v, b_.getInt32(lane_mask), b_.getInt32(0x1F)});
  if (t->isPointerTy()) return b_.CreateIntToPtr(shuffle_xor(b_.CreatePtrToInt(v, b_.getInt64Ty()), lane_mask), t);
  unsigned bits = static_cast<unsigned>(t->getPrimitiveSizeInBits());
  llvm::Type* it = b_.getIntNTy(bits);
  llvm::Value* x = t->isIntegerTy() ? v : b_.CreateBitCast(v, it);
  llvm::Value* r;
  if (bits <= 32) {
    r = b_.CreateTrunc(shfl_i32(b_.CreateZExt(x, b_.getInt32Ty())), it);
  } else {
    llvm::Value* lo = shfl_i32(b_.CreateTrunc(x, b_.getInt32Ty()));
    llvm::Value* hi = shfl_i32(b_.CreateTrunc(b_.CreateLShr(x, 32), b_.getInt32Ty()));
    r = b_.CreateOr(b_.CreateZExt(lo, it), b_.CreateShl(b_.CreateZExt(hi, it), 32));
  }
  return t->isIntegerTy() ? r : b_.CreateBitCast(r, t);
}

void GpuLowering::lower_reduce(const Op& op) {
  size_t n = op.operands.size();
  int axis = static_cast<int>(op.int_attr("axis"));
  BlockedLayout l = preferred_layout(op.operands[0]);
  BlockedLayout rl = l.slice(axis);

  // Which bits of the axis index come from registers, lanes and warps.
  std::vector<int> axis_regs, lane_bits, warp_bits;
  for (const auto& src : l.bits[axis]) {
    if (src.reg) axis_regs.push_back(src.bit);
    else (src.bit < 5 ? lane_bits : warp_bits).push_back(src.bit);
  }
  std::vector<int> kept_regs;  // parent register bit of each result register bit
  for (int r = 0; r < l.reg_bits; ++r)
    if (std::find(axis_regs.begin(), axis_regs.end(), r) == axis_regs.end()) kept_regs.push_back(r);

  // 1. Within the thread.
  std::vector<std::vector<llvm::Value*>> acc(rl.num_regs());
  for (int j = 0; j < rl.num_regs(); ++j) {
    int base = 0;
    for (size_t k = 0; k < kept_regs.size(); ++k)
      if ((j >> k) & 1) base |= 1 << kept_regs[k];
    std::vector<std::vector<llvm::Value*>> parts;
    for (int c = 0; c < (1 << axis_regs.size()); ++c) {
      int reg = base;
      for (size_t a = 0; a < axis_regs.size(); ++a)
        if ((c >> a) & 1) reg |= 1 << axis_regs[a];
      SymIndex s = l.index_of(reg);
      std::vector<llvm::Value*> tuple;
      for (size_t i = 0; i < n; ++i) tuple.push_back(at(op.operands[i], s));
      parts.push_back(std::move(tuple));
    }
    acc[j] = combine_all(op, std::move(parts));
  }

  // 2. Within the warp.
  for (int lb : lane_bits)
    for (auto& a : acc) {
      std::vector<llvm::Value*> other;
      for (llvm::Value* v : a) other.push_back(shuffle_xor(v, 1 << lb));
      a = emit_combine(op, a, other);
    }

  // 3. Across warps, through shared memory: slot [result element][warp along axis].
  if (!warp_bits.empty()) {
    int w = 1 << warp_bits.size();
    int64_t rnumel = 1;
    for (int64_t d : rl.shape) rnumel *= d;
    std::vector<llvm::Value*> bufs;
    for (size_t i = 0; i < n; ++i)
      bufs.push_back(new_smem(llvm_mem_type(ctx_, op.result(i)->type.elem), rnumel * w, "reduce"));
    llvm::Value* slot = b_.getInt32(0);
    for (size_t k = 0; k < warp_bits.size(); ++k) {
      llvm::Value* bit = b_.CreateAnd(b_.CreateLShr(tid_, warp_bits[k]), b_.getInt32(1));
      slot = b_.CreateOr(slot, b_.CreateShl(bit, static_cast<uint64_t>(k)));
    }
    barrier();
    std::vector<llvm::Value*> rows;
    for (int j = 0; j < rl.num_regs(); ++j) {
      llvm::Value* row = b_.CreateMul(runtime_index(flat_bits(rl.index_of(j))), b_.getInt32(w));
      rows.push_back(row);
      for (size_t i = 0; i < n; ++i) {
        const ElemType& e = op.result(i)->type.elem;
        llvm::Type* mt = llvm_mem_type(ctx_, e);
        b_.CreateStore(to_mem(b_, acc[j][i], e), b_.CreateInBoundsGEP(mt, bufs[i], b_.CreateAdd(row, slot)));
      }
    }
    barrier();
    for (int j = 0; j < rl.num_regs(); ++j) {
      std::vector<std::vector<llvm::Value*>> parts;
      for (int s = 0; s < w; ++s) {
        std::vector<llvm::Value*> tuple;
        for (size_t i = 0; i < n; ++i) {
          const ElemType& e = op.result(i)->type.elem;
          llvm::Type* mt = llvm_mem_type(ctx_, e);
          llvm::Value* p = b_.CreateInBoundsGEP(mt, bufs[i], b_.CreateAdd(rows[j], b_.getInt32(s)));
          tuple.push_back(from_mem(b_, b_.CreateLoad(mt, p), e));
        }
        parts.push_back(std::move(tuple));
      }
      acc[j] = combine_all(op, std::move(parts));
    }
  }

  for (size_t i = 0; i < n; ++i) {
    if (op.result(i)->type.is_scalar()) {
      scalars_[op.result(i)] = acc[0][i];
      continue;
    }
    TileVal t;
    t.kind = TileVal::Regs;
    t.layout = rl;
    for (auto& a : acc) t.regs.push_back(a[i]);
    tiles_[op.result(i)] = std::move(t);
  }
}

}  // namespace tessera::codegen::nvptx
