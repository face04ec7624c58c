// cluster_reduce_scatter on sm_90: the CTAs of a thread-block cluster sum their tiles
// through distributed shared memory.
//
// A kernel with cluster ops has one exchange buffer (f32, sized for its largest
// operand), planned before anything else so no later region shares its bytes. Each
// op: wait until every CTA of the cluster has finished reading the buffers of the
// previous op (the barrier phase opened at the kernel's start or at that op's end),
// store this CTA's tile into its buffer row-major, a cluster barrier (release /
// acquire: the stores are visible cluster-wide), then each thread adds its elements
// of this CTA's part from every CTA's buffer (mapa + ld.shared::cluster) in rank
// order, and opens the next phase (arrive). Every return waits on that phase, so no
// CTA leaves (and frees its shared memory) while another may still read it. One
// barrier round trip per op; the leading wait rarely waits.
// The PTX entry names the cluster shape (.reqnctapercluster, compile_nvptx.cpp), so
// an ordinary launch runs it in clusters.
#include <llvm/IR/InlineAsm.h>

#include "analysis/grid_dependency.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

void cluster_asm(llvm::IRBuilderBase& b, const char* text) {
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), {}, false);
  b.CreateCall(llvm::InlineAsm::get(fty, text, "~{memory}", /*hasSideEffects=*/true), {})
      ->addFnAttr(llvm::Attribute::Convergent);
}

int64_t largest_operand(const Block& b) {
  int64_t n = 0;
  for (auto& op : b.ops) {
    if (op->kind == OpKind::ClusterReduceScatter) n = std::max(n, op->operands[0]->type.numel());
    for (auto& r : op->regions) n = std::max(n, largest_operand(*r->block));
  }
  return n;
}

}  // namespace

void GpuLowering::plan_cluster() {
  cluster_ = analysis::cluster_size(*k_.body());
  if (!cluster_) return;
  if (cc_ < 90) {
    for (auto& op : k_.body()->ops)  // the first op names the place; any will do
      unsupported(*op, "tl.cluster_reduce_scatter needs thread-block clusters (sm_90 or newer); this target is sm_" +
                           std::to_string(cc_));
  }
  cluster_buf_ = new_smem(b_.getFloatTy(), largest_operand(*k_.body()), "cluster");
  cluster_asm(b_, "barrier.cluster.arrive.relaxed;");  // the phase the first op waits on
}

void GpuLowering::lower_cluster_reduce_scatter(const Op& op) {
  const Value* x = op.operands[0];
  const Value* res = op.result();
  auto* f32 = b_.getFloatTy();
  auto* i32 = b_.getInt32Ty();
  BlockedLayout src = preferred_layout(x);
  std::vector<llvm::Value*> regs = materialize(x, src);
  cluster_asm(b_, "barrier.cluster.wait.acquire;");  // everyone is done reading the previous op's buffers
  for (int r = 0; r < src.num_regs(); ++r) {
    llvm::Value* idx = runtime_index(flat_bits(src.index_of(r)));
    b_.CreateStore(regs[r], b_.CreateInBoundsGEP(f32, cluster_buf_, idx));
  }
  cluster_asm(b_, "barrier.cluster.arrive.release;");
  cluster_asm(b_, "barrier.cluster.wait.acquire;");
  auto* rank_ty = llvm::FunctionType::get(i32, {}, false);
  llvm::Value* rank = b_.CreateCall(rank_ty, llvm::InlineAsm::get(rank_ty, "mov.u32 $0, %cluster_ctarank;", "=r", false));
  // This CTA's part: rows rank * R .. of the row-major tile, res->numel() elements from rank * numel.
  llvm::Value* part = b_.CreateMul(rank, b_.getInt32(static_cast<int32_t>(res->type.numel())));
  llvm::Value* base = b_.CreateAdd(smem32(cluster_buf_), b_.CreateShl(part, 2));
  auto* mapa_ty = llvm::FunctionType::get(i32, {i32, i32}, false);
  auto* mapa = llvm::InlineAsm::get(mapa_ty, "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", false);
  auto* ld_ty = llvm::FunctionType::get(f32, {i32}, false);
  auto* ld = llvm::InlineAsm::get(ld_ty, "ld.shared::cluster.f32 $0, [$1];", "=f,r,~{memory}", true);
  BlockedLayout out = canonical_layout(res->type.shape);
  TileVal t{TileVal::Regs, out, {}};
  for (int r = 0; r < out.num_regs(); ++r) {
    llvm::Value* at = b_.CreateAdd(base, b_.CreateShl(runtime_index(flat_bits(out.index_of(r))), 2));
    llvm::Value* sum = nullptr;
    for (int c = 0; c < cluster_; ++c) {  // rank order: the same bits as the CPU and the interpreter
      llvm::Value* v = b_.CreateCall(ld_ty, ld, {b_.CreateCall(mapa_ty, mapa, {at, b_.getInt32(c)})});
      sum = sum ? b_.CreateFAdd(sum, v) : v;
    }
    t.regs.push_back(sum);
  }
  cluster_asm(b_, "barrier.cluster.arrive.release;");  // this CTA's reads are done
  tiles_[res] = std::move(t);
}

void GpuLowering::finish_cluster() {
  if (!cluster_) return;
  for (llvm::BasicBlock& bb : *fn_)
    if (auto* ret = llvm::dyn_cast_or_null<llvm::ReturnInst>(bb.getTerminator())) {
      b_.SetInsertPoint(ret);
      cluster_asm(b_, "barrier.cluster.wait.acquire;");  // no CTA leaves while another may read its buffer
    }
}

}  // namespace tessera::codegen::nvptx
