// cluster_reduce_scatter on the CPU: the programs of a cluster run at the same time on
// threads of their own (runtime/cpu/cluster.cpp) and exchange tiles through slots the
// runtime keeps: each program writes its tile into its slot row-major, a barrier, then
// sums its part (rows rank * R ..) of every slot in rank order (the GPU's order, so the
// same bits), and a second barrier before any slot may be written again.
#include "codegen/common/elementwise.h"
#include "codegen/x86/kernel_lowering.h"

namespace tessera::codegen::x86 {

using namespace ir;

void KernelLowering::lower_cluster_reduce_scatter(const Op& op) {
  const Value* x = op.operands[0];
  const Type& xt = x->type;
  const Type& rt = op.result()->type;
  const int cluster = static_cast<int>(op.int_attr("cluster", 0));
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  auto* i32 = b_.getInt32Ty();
  auto* i64 = b_.getInt64Ty();
  auto* f32 = b_.getFloatTy();
  llvm::FunctionCallee rank_fn =
      m_.getOrInsertFunction("tessera_cpu_cluster_rank", llvm::FunctionType::get(i32, false));
  llvm::FunctionCallee slot_fn =
      m_.getOrInsertFunction("tessera_cpu_cluster_slot", llvm::FunctionType::get(ptr, {i32, i64}, false));
  llvm::FunctionCallee barrier_fn =
      m_.getOrInsertFunction("tessera_cpu_cluster_barrier", llvm::FunctionType::get(b_.getVoidTy(), false));

  llvm::Value* rank = b_.CreateCall(rank_fn);
  TileRef own;
  own.kind = TileRef::View;
  own.base = b_.CreateCall(slot_fn, {rank, b_.getInt64(xt.numel() * 4)});
  own.strides = row_major_strides(xt.shape);
  write_into(own, x);
  b_.CreateCall(barrier_fn);

  TileRef out = new_buffer(rt);
  llvm::Value* part = b_.CreateMul(b_.CreateZExt(rank, i64), b_.getInt64(rt.numel()));
  for (int c = 0; c < cluster; ++c) {
    TileRef peer;
    peer.kind = TileRef::View;
    peer.base = b_.CreateGEP(f32, b_.CreateCall(slot_fn, {b_.getInt32(c), b_.getInt64(xt.numel() * 4)}), part);
    peer.strides = row_major_strides(rt.shape);
    loop_nest(rt.shape, chunk_width(rt), -1, [&](Chunk& ch) {
      llvm::Value* v = view_chunk(peer, rt, ch);
      if (c > 0) v = b_.CreateFAdd(view_chunk(out, rt, ch), v);
      b_.CreateAlignedStore(v, view_address(out, rt, ch), llvm::Align(4));
    });
  }
  b_.CreateCall(barrier_fn);  // every program has read every slot: they may be written again
  tiles_[op.result()] = out;
}

}  // namespace tessera::codegen::x86
