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

const Op* first_cluster_op(const Block& b) {
  for (auto& op : b.ops) {
    if (op->kind == OpKind::ClusterReduceScatter) return op.get();
    for (auto& r : op->regions)
      if (const Op* found = first_cluster_op(*r->block)) return found;
  }
  return nullptr;
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
  if (cc_ < 90)
    unsupported(*first_cluster_op(*k_.body()),
                "tl.cluster_reduce_scatter needs thread-block clusters (sm_90 or newer); this target is sm_" +
                    std::to_string(cc_));
  cluster_buf_ = new_smem(b_.getFloatTy(), largest_operand(*k_.body()), "cluster");
  emit_ptx(b_, "barrier.cluster.arrive.relaxed;");  // the phase the first op waits on
}

void GpuLowering::lower_cluster_reduce_scatter(const Op& op) {
  const Value* x = op.operands[0];
  const Value* res = op.result();
  auto* f32 = b_.getFloatTy();
  auto* i32 = b_.getInt32Ty();
  BlockedLayout src = preferred_layout(x);
  std::vector<llvm::Value*> regs = materialize(x, src);
  emit_ptx(b_, "barrier.cluster.wait.acquire;");  // everyone is done reading the previous op's buffers
  for (int r = 0; r < src.num_regs(); ++r) {
    llvm::Value* idx = runtime_index(flat_bits(src.index_of(r)));
    b_.CreateStore(regs[r], b_.CreateInBoundsGEP(f32, cluster_buf_, idx));
  }
  emit_ptx(b_, "barrier.cluster.arrive.release;");
  emit_ptx(b_, "barrier.cluster.wait.acquire;");
  auto* rank_ty = llvm::FunctionType::get(i32, {}, false);
  llvm::Value* rank =
      b_.CreateCall(rank_ty, llvm::InlineAsm::get(rank_ty, "mov.u32 $0, %cluster_ctarank;", "=r", false));
  // This CTA's part: rows rank * R .. of the row-major tile, res->numel() elements from rank * numel.
  llvm::Value* part = b_.CreateMul(rank, b_.getInt32(static_cast<int32_t>(res->type.numel())));
  llvm::Value* base = b_.CreateAdd(smem32(cluster_buf_), b_.CreateShl(part, 2));
  auto* mapa_ty = llvm::FunctionType::get(i32, {i32, i32}, false);
  auto* mapa = llvm::InlineAsm::get(mapa_ty, "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r", false);
  // Each thread reads runs of `width` consecutive elements (ld.v4 where its registers
  // hold runs of 4: 16-byte aligned, as the buffer and every part are), every rank's
  // loads of a group of runs issued before their sums, so their latencies overlap.
  BlockedLayout out = canonical_layout(res->type.shape);
  const int width = out.contiguous_regs() >= 4 ? 4 : 1;
  llvm::Type* vec_ty = width == 1 ? static_cast<llvm::Type*>(f32)
                                  : llvm::StructType::get(ctx_, std::vector<llvm::Type*>(width, f32));
  auto* ld_ty = llvm::FunctionType::get(vec_ty, {i32}, false);
  std::string text =
      width == 4 ? "ld.shared::cluster.v4.f32 {$0, $1, $2, $3}, [$4];" : "ld.shared::cluster.f32 $0, [$1];";
  std::string cons = width == 4 ? "=f,=f,=f,=f,r,~{memory}" : "=f,r,~{memory}";
  auto* ld = llvm::InlineAsm::get(ld_ty, text, cons, /*hasSideEffects=*/true);
  const int runs = out.num_regs() / width;
  const int group = std::max(1, 64 / (width * cluster_));  // runs in flight at once: at most 64 values
  TileVal t{TileVal::Regs, out, std::vector<llvm::Value*>(out.num_regs(), nullptr)};
  for (int g0 = 0; g0 < runs; g0 += group) {
    const int g1 = std::min(runs, g0 + group);
    std::vector<std::vector<llvm::Value*>> got(cluster_);
    for (int c = 0; c < cluster_; ++c)
      for (int run = g0; run < g1; ++run) {
        llvm::Value* at = b_.CreateAdd(base, b_.CreateShl(runtime_index(flat_bits(out.index_of(run * width))), 2));
        llvm::Value* v = b_.CreateCall(ld_ty, ld, {b_.CreateCall(mapa_ty, mapa, {at, b_.getInt32(c)})});
        for (int e = 0; e < width; ++e) got[c].push_back(width == 1 ? v : b_.CreateExtractValue(v, {unsigned(e)}));
      }
    for (int k = 0; k < (g1 - g0) * width; ++k) {
      llvm::Value* sum = got[0][k];
      for (int c = 1; c < cluster_; ++c) sum = b_.CreateFAdd(sum, got[c][k]);  // rank order: the CPU's bits
      t.regs[g0 * width + k] = sum;
    }
  }
  emit_ptx(b_, "barrier.cluster.arrive.release;");  // this CTA's reads are done
  tiles_[res] = std::move(t);
}

void GpuLowering::finish_cluster() {
  if (!cluster_) return;
  for (llvm::BasicBlock& bb : *fn_)
    if (auto* ret = llvm::dyn_cast_or_null<llvm::ReturnInst>(bb.getTerminator())) {
      b_.SetInsertPoint(ret);
      emit_ptx(b_, "barrier.cluster.wait.acquire;");  // no CTA leaves while another may read its buffer
    }
}

}  // namespace tessera::codegen::nvptx
