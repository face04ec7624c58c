// NVPTX lowering, part 1: the kernel function, scalar ops, and tile values (lazy
// evaluation at an element index, materialization, shared memory); control flow is in
// control_flow_nvptx.cpp.
#include "codegen/nvptx/gpu_lowering.h"

#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include "codegen/common/elementwise.h"
#include "codegen/common/float_range.h"
#include "codegen/common/loop_hints.h"
#include "codegen/nvptx/float_remainder_nvptx.h"
#include "codegen/nvptx/math_nvptx.h"

namespace tessera::codegen::nvptx {

namespace {

// Whether ex2's argument is at or above `floor`: maxnum(y, c) or maximum(y, c) (tl.maximum
// with a constant, without or with propagate_nan) for a c at or above it, or a value whose
// interval (codegen/common/float_range.h) lies above it with a margin of 1 for the
// rounding of its f32 evaluation (kernels/activation.py _normal_tail's polynomial in
// min(|x|, 6): [-35.8, -1]). ex2.approx.f32 keeps denormal results, which ptxas implements
// as four instructions per call (a compare, a halving of the argument, the SFU, a squaring
// of the result); the .ftz form is the SFU alone, and differs only for results below
// 2^-126, which an argument at or above -126 never produces. Kernels summing exponentials
// (softmax_ce.py) clamp to get the short form: ex2(max(z, -126)).
bool ex2_argument_is_clamped_at(llvm::Value* v, double floor) {
  auto* call = llvm::dyn_cast<llvm::CallInst>(v);
  if (call && (call->getIntrinsicID() == llvm::Intrinsic::maxnum ||
               call->getIntrinsicID() == llvm::Intrinsic::maximum))
    for (llvm::Value* operand : call->args())
      if (auto* c = llvm::dyn_cast<llvm::ConstantFP>(operand))
        if (c->getValueAPF().convertToDouble() >= floor) return true;
  const std::optional<FloatRange> r = float_range(v);
  return r && r->lo >= floor + 1.0;
}

// exp/exp2 of f32 (and f16/bf16, computed in f32) with the SFU's ex2.approx, as
// Triton does: exp(x) = ex2(x·log2 e), relative error about 2^-22; erf and tanh from
// math_nvptx.cpp. Everything else goes to the shared elementwise lowering, where with
// fp_fusion (the default; TESSERA_GPU_FP_FUSION=0 turns it off) the kernel's own float +, - and * may
// contract (a * b + c -> one fma.rn, as Triton's enable_fp_fusion default): only the user's f32/f64 operations carry the flag,
// never the compensated sequences of the math library; f16/bf16 round after every op
// (an f16 fma.rn would not), so they never contract.
llvm::Value* emit_gpu_elementwise(llvm::IRBuilderBase& b, const ir::Op& op, llvm::ArrayRef<llvm::Value*> args,
                                  bool fp_fusion) {
  using ir::ElemType;
  using ir::OpKind;
  using ir::ScalarKind;
  if ((op.kind == OpKind::Exp || op.kind == OpKind::Exp2) && op.result()->type.elem.is_float() &&
      op.result()->type.elem.kind != ScalarKind::F64 && !args[0]->getType()->isVectorTy()) {
    const ElemType& e = op.result()->type.elem;
    ElemType f32{ScalarKind::F32, ScalarKind::I32};
    llvm::Value* x = emit_cast(b, args[0], e, f32);
    constexpr double kLog2e = 1.4426950408889634;
    // exp(max(y, c)): c * log2 e >= -126 needs c >= -87.34 (-87: a margin for its rounding).
    bool clamped = ex2_argument_is_clamped_at(x, op.kind == OpKind::Exp ? -87.0 : -126.0);
    if (op.kind == OpKind::Exp) x = b.CreateFMul(x, llvm::ConstantFP::get(b.getFloatTy(), kLog2e));
    llvm::Value* r = b.CreateIntrinsic(
        clamped ? llvm::Intrinsic::nvvm_ex2_approx_ftz_f : llvm::Intrinsic::nvvm_ex2_approx_f, {}, {x});
    return emit_cast(b, r, f32, e);
  }
  // erf/tanh/sigmoid of f32 (and f16/bf16, computed in f32) on the SFU (math_nvptx.cpp,
  // a few ulp); f64 keeps the shared polynomials.
  if ((op.kind == OpKind::Erf || op.kind == OpKind::Tanh || op.kind == OpKind::Sigmoid) &&
      op.result()->type.elem.is_float() &&
      op.result()->type.elem.kind != ScalarKind::F64 && !args[0]->getType()->isVectorTy()) {
    const ElemType& e = op.result()->type.elem;
    ElemType f32{ScalarKind::F32, ScalarKind::I32};
    llvm::Value* x = emit_cast(b, args[0], e, f32);
    llvm::Value* r = op.kind == OpKind::Erf    ? emit_erf_f32_nvptx(b, x)
                     : op.kind == OpKind::Tanh ? emit_tanh_f32_nvptx(b, x)
                                               : emit_sigmoid_f32_nvptx(b, x);
    return emit_cast(b, r, f32, e);
  }
  // fp32 `/` is div.full.f32 (max error 2 ulp), as in Triton; tl.div_rn and
  // tl.fdiv(ieee_rounding=True) mark the op rounding = "rn" and stay IEEE.
  if (op.kind == OpKind::Div && op.result()->type.elem.kind == ScalarKind::F32 && op.str_attr("rounding") != "rn" &&
      !args[0]->getType()->isVectorTy() && !args[1]->getType()->isVectorTy()) {
    auto* fty = llvm::FunctionType::get(b.getFloatTy(), {b.getFloatTy(), b.getFloatTy()}, false);
    auto* div_full = llvm::InlineAsm::get(fty, "div.full.f32 $0, $1, $2;", "=f,f,f", false);
    return b.CreateCall(div_full, {args[0], args[1]});
  }
  // Float % is C fmod, exact (float_remainder_nvptx.cpp; LLVM's frem expansion is
  // not); f16/bf16 are computed in f32, where their remainder is exact too.
  if (op.kind == OpKind::Rem && op.result()->type.elem.is_float() && !args[0]->getType()->isVectorTy() &&
      !args[1]->getType()->isVectorTy()) {
    const ElemType& e = op.result()->type.elem;
    ElemType wide = e.kind == ScalarKind::F64 ? e : ElemType{ScalarKind::F32, ScalarKind::I32};
    llvm::Value* r = emit_exact_fmod(b, emit_cast(b, args[0], e, wide), emit_cast(b, args[1], e, wide));
    return emit_cast(b, r, wide, e);
  }
  if (fp_fusion && (op.kind == OpKind::Add || op.kind == OpKind::Sub || op.kind == OpKind::Mul) &&
      (op.result()->type.elem.kind == ScalarKind::F32 || op.result()->type.elem.kind == ScalarKind::F64)) {
    llvm::IRBuilderBase::FastMathFlagGuard keep_callers_flags(b);
    llvm::FastMathFlags contract;
    contract.setAllowContract(true);
    b.setFastMathFlags(contract);
    return emit_elementwise(b, op, args);
  }
  return emit_elementwise(b, op, args);
}

}  // namespace

using namespace ir;

namespace {

constexpr unsigned kSharedAS = 3;
// FMA contraction when the kernel does not say (TESSERA_GPU_FP_FUSION unset): on, as
// Triton's enable_fp_fusion. The H100 GPU suite passed with it (581 tests) and no kernel
// library op got slower (bench/results/kernels_cuda_float16_gpuelem2.md). Triton 3.9
// warns that 3.10 turns its default off (TRITON_DEFAULT_FP_FUSION): revisit with it.
constexpr bool kFpFusionByDefault = true;

// Elements per thread run for each tile shape that global memory is accessed with:
// 16 bytes of the NARROWEST element type among those accesses, so 16-bit accesses are
// 16-byte vectors and 32-bit ones of the same shape two 16-byte vectors per run.
// (The narrowest vector instead made a norm backward's fp16 rows 8-byte accesses
// because it also stores fp32 partial sums of that shape: 104 registers and half-width
// loads; one run per shape keeps the elementwise ops between them free of conversions.)
void collect_shape_vecs(const Block& b, std::map<std::vector<int64_t>, int>& out) {
  for (auto& op : b.ops) {
    const Value* mem = nullptr;
    if (op->kind == OpKind::Load && op->result()->type.is_tile()) mem = op->result();
    if (op->kind == OpKind::Store && op->operands[1]->type.is_tile()) mem = op->operands[1];
    if (mem) {
      int v = std::max(1, 16 / mem->type.elem.bytes());
      auto it = out.find(mem->type.shape);
      out[mem->type.shape] = it == out.end() ? v : std::max(it->second, v);
    }
    for (auto& r : op->regions) collect_shape_vecs(*r->block, out);
  }
}

}  // namespace

bool kernel_fp_fusion(const Kernel& k) {
  auto fusion = k.attrs.find("fp_fusion");
  if (fusion == k.attrs.end() || !std::holds_alternative<int64_t>(fusion->second)) return kFpFusionByDefault;
  return std::get<int64_t>(fusion->second) != 0;
}

GpuLowering::GpuLowering(const Kernel& k, llvm::Module& m, int num_warps, bool debug, int cc, int num_stages,
                         bool wgmma, int tma)
    : k_(k), m_(m), ctx_(m.getContext()), b_(m.getContext()), num_warps_(num_warps),
      num_threads_(num_warps * 32), debug_(debug), cc_(cc), num_stages_(num_stages), wgmma_(wgmma),
      tma_(tma != 0 && wgmma), tma_cta_barrier_(tma == 2), tma_store_enabled_(tma != 4), ws_inflight_from_3_(tma != 3), axis_(k) {
  fp_fusion_ = kernel_fp_fusion(k);
  collect_shape_vecs(*k.body(), shape_vec_);
  plan_dots();
  if (wgmma_) plan_wgmma(*k.body());
  plan_tma_stores();
}

void emit_ptx(llvm::IRBuilderBase& b, const std::string& text, bool convergent) {
  auto* fty = llvm::FunctionType::get(b.getVoidTy(), {}, false);
  llvm::CallInst* call = b.CreateCall(llvm::InlineAsm::get(fty, text, "~{memory}", /*hasSideEffects=*/true), {});
  if (convergent) call->addFnAttr(llvm::Attribute::Convergent);
}

uint64_t wgmma_swizzle_mode(int64_t row_bytes) { return row_bytes == 128 ? 1 : row_bytes == 64 ? 2 : 3; }

int max_dynamic_shared_bytes(int cc) {
  if (cc >= 90) return 227 * 1024;
  if (cc == 80) return 163 * 1024;
  if (cc > 80) return 99 * 1024;  // sm_86, sm_87 (163 KB), sm_89: the smaller bound
  if (cc >= 75) return 64 * 1024;
  return 96 * 1024;               // sm_70
}

void GpuLowering::unsupported(const Op& op, const std::string& what) {
  throw CompileError(what + " (in kernel " + k_.name + " at " + k_.file() + ":" + std::to_string(op.loc.line) + ":" +
                         std::to_string(op.loc.col) + ")",
                     /*user_error=*/true, op.loc.line, op.loc.col);
}

llvm::Function* GpuLowering::run() {
  std::vector<llvm::Type*> params;
  for (auto& a : k_.args) params.push_back(llvm_elem_type(ctx_, a.value->type.elem));
  for (size_t i = 0; i < tma_maps_.size(); ++i) params.push_back(llvm::PointerType::get(ctx_, 0));
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
  fn_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, k_.name, m_);
  fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  for (size_t i = 0; i < k_.args.size(); ++i) {
    llvm::Argument* a = fn_->getArg(i);
    a->setName(k_.args[i].value->name);
    if (k_.args[i].value->type.elem.is_ptr()) a->addAttr(llvm::Attribute::NoUndef);
    scalars_[k_.args[i].value] = a;
  }
  entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  auto* start = llvm::BasicBlock::Create(ctx_, "start", fn_);
  b_.SetInsertPoint(entry_);
  using namespace llvm::Intrinsic;
  tid_ = b_.CreateIntrinsic(nvvm_read_ptx_sreg_tid_x, {}, {});
  const llvm::Intrinsic::ID ctaid[3] = {nvvm_read_ptx_sreg_ctaid_x, nvvm_read_ptx_sreg_ctaid_y, nvvm_read_ptx_sreg_ctaid_z};
  const llvm::Intrinsic::ID nctaid[3] = {nvvm_read_ptx_sreg_nctaid_x, nvvm_read_ptx_sreg_nctaid_y,
                                         nvvm_read_ptx_sreg_nctaid_z};
  for (int i = 0; i < 3; ++i) {
    pid_[i] = b_.CreateIntrinsic(ctaid[i], {}, {});
    nprog_[i] = b_.CreateIntrinsic(nctaid[i], {}, {});
  }
  b_.SetInsertPoint(start);
  plan_cluster();
  count_specialize_asks(*k_.body());
  plan_load_layouts(*k_.body());
  lower_block(*k_.body());
  if (!b_.GetInsertBlock()->getTerminator()) b_.CreateRetVoid();
  finish_tma_stores();
  finish_cluster();
  b_.SetInsertPoint(entry_);
  b_.CreateBr(start);

  // Kernel entry and its thread count for NVPTX.
  llvm::NamedMDNode* ann = m_.getOrInsertNamedMetadata("nvvm.annotations");
  auto md = [&](const char* key, int v) {
    ann->addOperand(llvm::MDNode::get(ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, key),
                                             llvm::ConstantAsMetadata::get(b_.getInt32(v))}));
  };
  md("kernel", 1);
  md("maxntidx", block_threads());
  // The maxnreg launch option (.maxnreg: ptxas keeps to it, spilling beyond).
  auto maxnreg = k_.attrs.find("maxnreg");
  if (maxnreg != k_.attrs.end() && std::holds_alternative<int64_t>(maxnreg->second))
    md("maxnreg", static_cast<int>(std::get<int64_t>(maxnreg->second)));
  if (!tma_maps_.empty()) {
    // The CUtensorMaps: 128-byte .param arrays, 64-byte aligned, whose addresses
    // (cvta.param) the TMA copies read in place -- __grid_constant__.
    std::vector<llvm::Metadata*> idx;
    auto* map_ty = llvm::ArrayType::get(b_.getInt8Ty(), 128);
    for (auto& t : tma_maps_) {
      llvm::Argument* a = fn_->getArg(t.param);
      a->setName("tensor_map" + std::to_string(t.param - k_.args.size()));
      a->addAttr(llvm::Attribute::getWithByValType(ctx_, map_ty));
      a->addAttr(llvm::Attribute::getWithAlignment(ctx_, llvm::Align(64)));
      idx.push_back(llvm::ConstantAsMetadata::get(b_.getInt32(t.param + 1)));  // 1-based
    }
    ann->addOperand(llvm::MDNode::get(ctx_, {llvm::ValueAsMetadata::get(fn_), llvm::MDString::get(ctx_, "grid_constant"),
                                             llvm::MDNode::get(ctx_, idx)}));
  }
  return fn_;
}

llvm::Value* GpuLowering::scalar(const Value* v) {
  auto it = scalars_.find(v);
  if (it == scalars_.end()) throw CompileError("scalar value used before it was lowered (this is a Tessera bug)", false);
  return it->second;
}

TileVal& GpuLowering::tile(const Value* v) {
  auto it = tiles_.find(v);
  if (it == tiles_.end()) throw CompileError("tile value used before it was lowered (this is a Tessera bug)", false);
  return it->second;
}

void GpuLowering::plan_load_layouts(const Block& b) {
  // Broadcasts that an elementwise op combines with a tensor-core accumulator take the
  // accumulator's layout (a matmul epilogue's `acc + bias[None, :]`: each thread loads
  // the bias of its own accumulator columns, where the canonical layout went through
  // shared memory with two barriers per tile).
  std::unordered_map<const Value*, BlockedLayout> beside_acc;
  for (auto& op : b.ops) {
    if (!op_has_trait(op->kind, 'E') || op->results.empty() || !op->result()->type.is_tile()) continue;
    for (const Value* a : op->operands) {
      if (!a->def() || a->def()->kind != OpKind::Broadcast || beside_acc.count(a)) continue;
      for (const Value* o : op->operands)
        if (o != a && o->type.shape == a->type.shape)
          if (auto l = planned_layout(o)) {
            beside_acc.emplace(a, *l);
            break;
          }
    }
  }
  for (auto& op : b.ops) {
    for (auto& r : op->regions) plan_load_layouts(*r->block);
    if (op->kind != OpKind::Broadcast) continue;
    const Value* v = op->operands[0];
    auto acc = beside_acc.find(op->result());
    BlockedLayout l = acc != beside_acc.end() ? acc->second : canonical_layout(op->result()->type.shape);
    for (int d = 0; d < v->type.rank(); ++d)
      if (v->type.shape[d] == 1 && l.shape[d] != 1) l = l.collapse(d);
    // Through expand_dims, and (beside an accumulator) the conversion of the loaded type
    // to the accumulator's (`.to(tl.float32)`), which keeps the layout.
    while (v->def() && v->def()->operands.size() == 1 && v->def()->operands[0]->type.is_tile() &&
           (v->def()->kind == OpKind::ExpandDims || (acc != beside_acc.end() && v->def()->kind == OpKind::Cast))) {
      if (v->def()->kind == OpKind::ExpandDims) l = l.slice(static_cast<int>(v->def()->int_attr("axis")));
      v = v->def()->operands[0];
    }
    if (v->def() && v->def()->kind == OpKind::Load && !load_layout_.count(v)) load_layout_.emplace(v, l);
  }
  // A 2-D load combined elementwise with a dot's accumulator (a split-K matmul adding
  // another program's fp32 partial, a residual added in an epilogue) is loaded in the
  // accumulator's layout: otherwise each element would move through shared memory
  // (a 128x256 fp32 tile: 128 KB next to the K loop's ring, more than fits).
  for (auto& op : b.ops) {
    if (op->kind == OpKind::Load || !op_has_trait(op->kind, 'E') || op->results.empty() ||
        op->result()->type.rank() != 2)
      continue;
    for (const Value* v : op->operands) {
      if (!v->def() || v->def()->kind != OpKind::Load || v->type.shape != op->result()->type.shape ||
          load_layout_.count(v))
        continue;
      for (const Value* other : op->operands)
        if (other != v && other->type.shape == v->type.shape)
          if (auto l = planned_layout(other)) {
            load_layout_.emplace(v, *l);
            break;
          }
    }
  }
}

void GpuLowering::lower_block(const Block& b) {
  for (auto& op : b.ops) {
    if (b_.GetInsertBlock()->getTerminator()) break;  // after a return
    lower_op(*op);
  }
}

void GpuLowering::lower_op(const Op& op) {
  if (!op.results.empty() && prefetched_.count(op.results[0].get())) return;  // loaded by the previous iteration
  switch (op.kind) {
    case OpKind::For: return lower_for(op);
    case OpKind::While: return lower_while(op);
    case OpKind::If: return lower_if(op);
    case OpKind::Return: b_.CreateRetVoid(); return;
    case OpKind::Yield:
    case OpKind::Condition:
    case OpKind::Assume: return;
    case OpKind::Barrier: return barrier();  // bar.sync: orders the CTA's memory accesses too
    case OpKind::GdcWait: return grid_dependency_control("griddepcontrol.wait;");
    case OpKind::GdcLaunchDependents: return grid_dependency_control("griddepcontrol.launch_dependents;");
    case OpKind::Assert: return lower_assert(op);  // a no-op unless debug (TESSERA_DEBUG=1)
    case OpKind::Print: return lower_print(op);
    case OpKind::Store:
      if (op.operands[1]->type.is_tile()) return lower_store(op);
      return lower_scalar_store(op);
    case OpKind::Reduce: return lower_reduce(op);
    case OpKind::Scan: return lower_scan(op);
    case OpKind::Dot: return lower_dot(op);
    case OpKind::AtomicRmw:
    case OpKind::AtomicCas: return lower_atomic(op);
    case OpKind::ClusterReduceScatter: return lower_cluster_reduce_scatter(op);
    default: break;
  }
  if (!op.results.empty() && op.result()->type.is_tile()) return lower_tile_op(op);

  switch (op.kind) {
    case OpKind::Const:
      scalars_[op.result()] = emit_constant(b_, op.result()->type.elem, 1, op.attrs.at("value"));
      return;
    case OpKind::ProgramId: scalars_[op.result()] = pid_[op.int_attr("axis")]; return;
    case OpKind::NumPrograms: scalars_[op.result()] = nprog_[op.int_attr("axis")]; return;
    case OpKind::Load: scalars_[op.result()] = lower_scalar_load(op); return;
    default: break;
  }
  if (op_has_trait(op.kind, 'E') || op.kind == OpKind::Hint) {
    std::vector<llvm::Value*> args;
    for (Value* v : op.operands) args.push_back(scalar(v));
    scalars_[op.result()] = emit_gpu_elementwise(b_, op, args, fp_fusion_);
    return;
  }
  unsupported(op, std::string("'") + op.name() + "' is not supported on the GPU yet");
}

// Cheap ops stay lazy; loads and expensive math are computed once, in the layout
// of the Regs values they are computed from.
void GpuLowering::lower_tile_op(const Op& op) {
  switch (op.kind) {
    case OpKind::Load: return lower_load(op);
    case OpKind::Const:
    case OpKind::Arange:
    case OpKind::Splat:
    case OpKind::Broadcast:
    case OpKind::ExpandDims:
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::Join:
    case OpKind::Split:
    case OpKind::Hint:
      for (auto& r : op.results) tiles_[r.get()] = TileVal{};
      return;
    case OpKind::Gather: {  // src's registers go through shared memory (gather_at)
      TileVal& src = tile(op.operands[0]);
      if (src.kind != TileVal::Regs) {
        BlockedLayout l = preferred_layout(op.operands[0]);
        std::vector<llvm::Value*> regs = materialize(op.operands[0], l);
        TileVal& t = tile(op.operands[0]);
        t.kind = TileVal::Regs;
        t.regs = std::move(regs);
        t.layout = std::move(l);
      }
      tiles_[op.result()] = TileVal{};
      return;
    }
    default: break;
  }
  if (!op_has_trait(op.kind, 'E')) unsupported(op, std::string("'") + op.name() + "' is not supported on the GPU yet");
  tiles_[op.result()] = TileVal{};
  if (op_has_trait(op.kind, 'X')) {
    BlockedLayout l = preferred_layout(op.result());
    TileVal t;
    t.kind = TileVal::Regs;
    t.regs = materialize(op.result(), l);
    t.layout = std::move(l);
    tiles_[op.result()] = std::move(t);
  }
}

// ---------------------------------------------------------------------------
// Tile values at an element index.

llvm::Value* GpuLowering::at(const Value* v, const SymIndex& s) {
  if (v->type.is_scalar()) return scalar(v);
  std::string key = std::to_string(reinterpret_cast<uintptr_t>(v)) + "@" +
                    std::to_string(reinterpret_cast<uintptr_t>(b_.GetInsertBlock())) + ":" + sym_index_key(s);
  auto it = memo_.find(key);
  if (it != memo_.end()) return it->second;
  llvm::Value* r = at_uncached(v, s);
  memo_[key] = r;
  return r;
}

llvm::Value* GpuLowering::at_uncached(const Value* v, const SymIndex& s) {
  TileVal& t = tile(v);
  if (t.kind == TileVal::Regs) {
    if (auto reg = t.layout.find(s)) return t.regs[*reg];
    return read_through_smem(v, s);
  }
  const Op& op = *v->def();
  switch (op.kind) {
    case OpKind::Const: return emit_constant(b_, v->type.elem, 1, op.attrs.at("value"));
    case OpKind::Arange:
      return b_.CreateAdd(runtime_index(s[0]), b_.getInt32(static_cast<uint32_t>(op.int_attr("start"))));
    case OpKind::Splat: return scalar(op.operands[0]);
    case OpKind::Broadcast: {
      SymIndex o = s;
      const auto& oshape = op.operands[0]->type.shape;
      for (size_t d = 0; d < o.size(); ++d)
        if (oshape[d] == 1) o[d].clear();
      return at(op.operands[0], o);
    }
    case OpKind::ExpandDims: {
      SymIndex o = s;
      o.erase(o.begin() + op.int_attr("axis"));
      return at(op.operands[0], o);
    }
    case OpKind::Reshape: return at(op.operands[0], split_flat_bits(flat_bits(s), op.operands[0]->type.shape));
    case OpKind::Permute: {
      auto order = op.ints_attr("order");
      SymIndex o(s.size());
      for (size_t i = 0; i < s.size(); ++i) o[order[i]] = s[i];
      return at(op.operands[0], o);
    }
    case OpKind::Join: {
      SymIndex o = s;
      IndexBit which = o.back()[0];
      o.pop_back();
      if (which.kind == IndexBit::Zero) return at(op.operands[0], o);
      if (which.kind == IndexBit::One) return at(op.operands[1], o);
      llvm::Value* a = at(op.operands[0], o);
      llvm::Value* c = at(op.operands[1], o);
      return b_.CreateSelect(thread_bit(which.thread_bit), c, a);
    }
    case OpKind::Split: {
      SymIndex o = s;
      o.push_back({IndexBit{v->index() ? IndexBit::One : IndexBit::Zero, 0}});
      return at(op.operands[0], o);
    }
    case OpKind::Gather: return gather_at(op, s);
    default: break;
  }
  std::vector<llvm::Value*> args;
  for (const Value* a : op.operands) args.push_back(at(a, s));
  return emit_gpu_elementwise(b_, op, args, fp_fusion_);
}

std::vector<llvm::Value*> GpuLowering::materialize(const Value* v, const BlockedLayout& l) {
  std::vector<llvm::Value*> regs;
  for (int r = 0; r < l.num_regs(); ++r) regs.push_back(at(v, l.index_of(r)));
  return regs;
}

BlockedLayout GpuLowering::canonical_layout(const std::vector<int64_t>& shape) const {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  auto it = shape_vec_.find(shape);
  int64_t vec = it == shape_vec_.end() ? 4 : it->second;
  vec = std::min<int64_t>(vec, shape.back());
  vec = std::min<int64_t>(vec, std::max<int64_t>(1, numel / num_threads_));
  return make_blocked_layout(shape, static_cast<int>(vec), num_threads_);
}

const BlockedLayout* GpuLowering::layout_hint(const Value* v) {
  if (v->type.is_scalar()) return nullptr;
  auto t = tiles_.find(v);
  if (t != tiles_.end() && t->second.kind == TileVal::Regs) return &t->second.layout;
  if (hint_none_.count(v)) return nullptr;
  auto h = hint_memo_.find(v);
  if (h != hint_memo_.end()) return &h->second;
  const Op* op = v->def();
  if (op && (op_has_trait(op->kind, 'E') || op->kind == OpKind::Hint))
    for (const Value* a : op->operands)
      if (a->type.shape == v->type.shape)
        if (const BlockedLayout* l = layout_hint(a)) return &(hint_memo_[v] = *l);
  hint_none_.insert(v);
  return nullptr;
}

BlockedLayout GpuLowering::preferred_layout(const Value* v) {
  if (const BlockedLayout* l = layout_hint(v)) return *l;
  return canonical_layout(v->type.shape);
}

llvm::Value* GpuLowering::thread_bit(int b) {
  return b_.CreateICmpNE(b_.CreateAnd(tid_, b_.getInt32(1u << b)), b_.getInt32(0));
}

// Sum of the index bits: constants, plus runs of consecutive thread bits moved in
// one shift-and-mask each.
llvm::Value* GpuLowering::runtime_index(const std::vector<IndexBit>& bits) {
  uint32_t c = 0;
  llvm::Value* r = nullptr;
  for (size_t p = 0; p < bits.size();) {
    if (bits[p].kind != IndexBit::Thread) {
      if (bits[p].kind == IndexBit::One) c |= 1u << p;
      ++p;
      continue;
    }
    size_t q = p + 1;
    while (q < bits.size() && bits[q].kind == IndexBit::Thread && bits[q].thread_bit == bits[p].thread_bit + int(q - p)) ++q;
    int tb = bits[p].thread_bit;
    uint32_t mask = ((1u << (q - p)) - 1) << tb;
    llvm::Value* part = b_.CreateAnd(tid_, b_.getInt32(mask));
    if (tb > static_cast<int>(p)) part = b_.CreateLShr(part, tb - p);
    else if (tb < static_cast<int>(p)) part = b_.CreateShl(part, p - tb);
    r = r ? b_.CreateOr(r, part) : part;
    p = q;
  }
  if (!r) return b_.getInt32(c);
  return c ? b_.CreateOr(r, b_.getInt32(c)) : r;
}

llvm::Value* GpuLowering::is_first_replica(const BlockedLayout& l) {
  uint32_t unused = static_cast<uint32_t>(num_threads_ - 1) & ~l.thread_mask;
  if (!unused) return nullptr;
  return b_.CreateICmpEQ(b_.CreateAnd(tid_, b_.getInt32(unused)), b_.getInt32(0));
}

void GpuLowering::barrier() {
  // Past a warp-specialized loop's split only the consumers are left to synchronize
  // (warp_specialize_nvptx.cpp): named barrier 1 over their threads.
  if (in_producer_)
    throw CompileError("warp_specialize: the producer's copies would need a CTA barrier (this is a Tessera bug)", false);
  if (consumer_barriers_) {
    // In a ping-pong loop's body (ping_pong_nvptx.cpp) each warpgroup has its own: 2 + group.
    llvm::Value* id = in_ping_pong_ ? b_.CreateAdd(group_, b_.getInt32(2)) : b_.getInt32(1);
    b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier_sync_cnt, {},
                       {id, b_.getInt32(in_ping_pong_ ? num_threads_ : consumer_threads_)});
    return;
  }
  b_.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
}

// Programmatic dependent launch (PDL, docs/language.md): griddepcontrol exists from
// sm_90; before that a kernel is never launched early, so both ops mean nothing
// there. The memory clobber keeps LLVM from moving loads and stores across the
// instruction: a load after gdc_wait must not read before the previous grid's
// writes are visible.
void GpuLowering::grid_dependency_control(const char* instruction) {
  if (cc_ < 90) return;
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {}, false);
  b_.CreateCall(llvm::InlineAsm::get(fty, instruction, "~{memory}", /*hasSideEffects=*/true), {});
}

// Every buffer is a fixed region of one extern dynamic shared array: static
// shared memory stops at 48 KB, dynamic goes to the device's opt-in maximum
// (the runtime sets CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES from the
// kernel's metadata and passes shared_bytes() at launch).
llvm::Value* GpuLowering::new_smem(llvm::Type* elem, int64_t count, const std::string& name, int64_t align) {
  if (!dyn_smem_) {
    auto* ty = llvm::ArrayType::get(b_.getInt8Ty(), 0);
    dyn_smem_ = new llvm::GlobalVariable(m_, ty, false, llvm::GlobalValue::ExternalLinkage, nullptr,
                                         "tessera_dyn_smem", nullptr, llvm::GlobalValue::NotThreadLocal, kSharedAS);
    dyn_smem_->setAlignment(llvm::Align(1024));  // wgmma's swizzle atoms are 1024-byte aligned
  }
  (void)name;
  auto* ty = llvm::ArrayType::get(elem, count);
  int64_t bytes = static_cast<int64_t>(m_.getDataLayout().getTypeAllocSize(ty));
  int64_t offset = ((shared_bytes_ + align - 1) / align) * align;
  // (a ping-pong loop's body: one copy per consumer warpgroup, `bytes` apart)
  const int64_t copies = in_ping_pong_ ? consumer_groups_ : 1;
  if (copies > 1) bytes = (bytes + align - 1) / align * align;
  shared_bytes_ = static_cast<int>(offset + copies * bytes);
  ++smem_count_;
  llvm::Value* p = group_smem(offset, bytes);
  smem_offset_[p] = offset;
  return p;
}

// A layout conversion through shared memory: the value's owners store every
// element (replicas store the same bits), a barrier, then any thread loads any
// element. The barrier before the stores keeps a loop's next iteration from
// overwriting elements a slower thread still reads.
llvm::Value* GpuLowering::read_through_smem(const Value* v, const SymIndex& s) {
  const ElemType& e = v->type.elem;
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  llvm::Value* buf = smem_copy_of(v);
  llvm::Value* idx = runtime_index(flat_bits(s));
  return from_mem(b_, b_.CreateLoad(mt, b_.CreateInBoundsGEP(mt, buf, idx)), e);
}

llvm::Value* GpuLowering::smem_copy_of(const Value* v) {
  const ElemType& e = v->type.elem;
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  auto& buf = smem_of_[v];
  if (!buf) buf = new_smem(mt, v->type.numel(), "cvt");
  if (!smem_written_.count({v, b_.GetInsertBlock()})) {
    TileVal& t = tile(v);
    barrier();
    for (int r = 0; r < t.layout.num_regs(); ++r) {
      llvm::Value* idx = runtime_index(flat_bits(t.layout.index_of(r)));
      b_.CreateStore(to_mem(b_, t.regs[r], e), b_.CreateInBoundsGEP(mt, buf, idx));
    }
    barrier();
    smem_written_.insert({v, b_.GetInsertBlock()});
  }
  return buf;
}

llvm::Value* GpuLowering::alloca_in_entry(llvm::Type* t) {
  llvm::IRBuilder<> eb(entry_, entry_->begin());
  return eb.CreateAlloca(t);
}

std::vector<llvm::Value*> GpuLowering::carry_slots(const Type& t, const BlockedLayout& l) {
  std::vector<llvm::Value*> slots;
  int n = t.is_tile() ? l.num_regs() : 1;
  for (int r = 0; r < n; ++r) slots.push_back(alloca_in_entry(llvm_elem_type(ctx_, t.elem)));
  return slots;
}

}  // namespace tessera::codegen::nvptx
