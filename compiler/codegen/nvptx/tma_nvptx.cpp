// NVPTX lowering: ring stages filled by the tensor memory accelerator (TMA,
// cp.async.bulk.tensor) and completed on mbarriers, for wgmma dots on sm_90a.
//
// A pipelined load (pipeline_nvptx.cpp) qualifies when its address is a 2-D affine
// tile of a pointer parameter and its mask the tile's bounds, both in terms the
// host knows at launch -- what tl.make_block_ptr with boundary_check expands to,
// and the classic `a_ptr + rm[:, None] * s_am + rk[None, :]` with
// `mask=(rm[:, None] < M) & (rk[None, :] < K)`:
//   ptr[i, j]  = base + (x0 + i) * s0 + (x1 + j)        (inner stride the constant 1)
//   mask[i, j] = (x0 + i < b0) & (x1 + j < b1)           (`>= 0` terms are implied)
// with base, s0, b0, b1 kernel parameters or constants (base and s0 divisible by 16,
// which the launch's specialization guarantees) and x0, x1 any scalars; 2-byte elements,
// or 4-byte ones (tf32 wgmma: K-major rows, or a swapped dot's N-major B). The host
// encodes one CUtensorMap per such load (runtime/cuda/driver.cpp: dims {b1, b0},
// row stride s0, box = the tile, the ring's swizzle) and passes it as a 128-byte
// __grid_constant__ parameter after the kernel's own; out-of-bounds boxes read as
// zeros, as the mask's `other=0` asks.
// Worked example, the bench matmul at 128x128x64 f16, 8 warps, 3 stages:
//   prologue:  barrier; thread 0: mbarrier.init full[0..2], 1; empty[0..2], 8; fence; barrier
//              for s in 0, 1: thread 0: mbarrier.arrive.expect_tx full[s], 32768
//                                      cp.async.bulk.tensor A box {64,128} at {k0, m0} -> stage s
//                                      cp.async.bulk.tensor B 2 boxes {64,64} at {n0 + 64 b, k0}
//   iteration j (the w = j+2-th issue, into stage w%3, which iteration j-1 read):
//              thread 0: if w >= 3: mbarrier.try_wait.parity empty[w%3], (w/3 - 1)&1
//                        expect_tx + copies of iteration j+2 into stage w%3
//              mbarrier.try_wait.parity full[j%3], (j/3)&1   (until the bytes landed)
//              wgmma from stage j%3; wait_group 0
//              lane 0 of each warp: mbarrier.arrive empty[j%3]   (this warp is done with it)
//   after:     barrier; thread 0: mbarrier.inval full[*], empty[*]
// With 4+ stages and one wgmma group kept in flight (wait_group 1) the ring runs two
// ahead and an iteration releases the previous iteration's stage. TESSERA_TMA=2
// releases stages with a CTA barrier at the top of each iteration instead of the
// empty barriers (bench/results/gpu_matmul_tma.md compares the two).
// One thread issues every copy; no thread computes per-element addresses.
#include <llvm/IR/InlineAsm.h>

#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

// A scalar that is the same in every element of tile `v` (splat of it, through
// broadcasts), or nullptr.
const Value* splatted(const Value* v) {
  while (v->def() && (v->def()->kind == OpKind::Broadcast || v->def()->kind == OpKind::ExpandDims))
    v = v->def()->operands[0];
  if (v->def() && v->def()->kind == OpKind::Splat) return v->def()->operands[0];
  if (v->def() && v->def()->kind == OpKind::Const) return v;  // a constant tile
  return nullptr;
}

// Integer widening casts keep a parameter's value (sign- or zero-extended as its type says).
const Value* through_widening(const Value* v) {
  while (v->def() && v->def()->kind == OpKind::Cast && v->def()->operands[0]->type.elem.is_int() &&
         v->type.elem.is_int() && v->def()->operands[0]->type.elem.bytes() <= v->type.elem.bytes())
    v = v->def()->operands[0];
  return v;
}

}  // namespace

// The index term of one dim: `v` (an integer tile) is x + i along dim `dim` of the
// 2-D tile (i the index there), x a scalar (nullptr: 0). Accepts
// broadcast(expand_dims(add(splat(x), arange(0, n)))) and its variants (arange
// alone, operands swapped, integer widening casts); `dim` is known from an
// enclosing expand_dims (dim_hint) or found here.
std::optional<GpuLowering::TmaIndex> GpuLowering::tma_index(const Value* v, int dim_hint) const {
  int dim = dim_hint;
  while (v->def()) {
    const Op* d = v->def();
    if (d->kind == OpKind::Broadcast) {
      v = d->operands[0];
    } else if (d->kind == OpKind::Cast && through_widening(v) != v) {
      v = d->operands[0];
    } else if (d->kind == OpKind::ExpandDims && v->type.rank() == 2 && d->operands[0]->type.rank() == 1) {
      dim = 1 - static_cast<int>(d->int_attr("axis"));
      v = d->operands[0];
    } else {
      break;
    }
  }
  if (dim < 0 || v->type.rank() != 1) return std::nullopt;
  auto arange0 = [](const Value* a) {
    const Op* d = a->def();
    return d && d->kind == OpKind::Arange && d->int_attr("start") == 0;
  };
  TmaIndex r;
  r.dim = dim;
  if (arange0(v)) return r;
  const Op* add = v->def();
  if (!add || add->kind != OpKind::Add) return std::nullopt;
  for (int i = 0; i < 2; ++i)
    if (arange0(add->operands[i]) && add->operands[1 - i]->def() && add->operands[1 - i]->def()->kind == OpKind::Splat) {
      r.start = add->operands[1 - i]->def()->operands[0];
      return r;
    }
  return std::nullopt;
}

// A kernel parameter or an integer constant, as the host reads it.
std::optional<GpuLowering::TmaExtent> GpuLowering::tma_extent(const Value* s) const {
  if (!s) return std::nullopt;
  s = through_widening(s);
  TmaExtent e;
  if (s->def() && s->def()->kind == OpKind::Const) {
    const Attr& a = s->def()->attrs.at("value");
    if (auto* i = std::get_if<int64_t>(&a)) {
      e.kind = 'c';
      e.value = *i;
      return e;
    }
    return std::nullopt;
  }
  if (s->type.is_tile()) return std::nullopt;
  for (size_t i = 0; i < k_.args.size(); ++i) {
    if (k_.args[i].value != s) continue;
    const ElemType& t = s->type.elem;
    if (!t.is_ptr() && (!t.is_int() || t.kind == ScalarKind::I1)) return std::nullopt;
    e.kind = t.is_ptr() || t.bytes() == 8 ? 'l' : t.bytes() == 4 ? (t.is_unsigned() ? 'u' : 'i') : 0;
    if (!e.kind) return std::nullopt;
    e.value = static_cast<int64_t>(i);
    auto div = k_.args[i].attrs.find("divisibility");
    e.divisibility = div != k_.args[i].attrs.end() && std::holds_alternative<int64_t>(div->second)
                         ? std::get<int64_t>(div->second)
                         : 1;
    return e;
  }
  return std::nullopt;
}

std::optional<GpuLowering::TmaMap> GpuLowering::match_tma_access(const Op& access, const StagedOperand* geom) const {
  // A load (ptr, mask, other) or a store (ptr, value, mask): the bounds come from the mask.
  const bool store = access.kind == OpKind::Store;
  if (access.operands.size() < (store ? 3u : 2u)) return std::nullopt;
  const Value* res = store ? access.operands[1] : access.result();
  const Value* mask = access.operands[store ? 2 : 1];
  if (res->type.rank() != 2) return std::nullopt;
  const int eb = res->type.elem.bytes();
  if (eb != 2 && eb != 4) return std::nullopt;  // f16/bf16, or fp32 bits for tf32 (K-major rows only)
  TmaMap m;
  m.op = &access;
  m.store = store;
  m.elem_bytes = eb;
  // Address: addptr chains over splat(base), collecting (index, stride) terms.
  std::vector<std::pair<TmaIndex, const Value*>> terms;  // stride nullptr: 1
  std::function<bool(const Value*, int)> offsets = [&](const Value* v, int dim) -> bool {
    while (v->def() && v->def()->kind == OpKind::Broadcast) v = v->def()->operands[0];
    const Op* d = v->def();
    if (d && d->kind == OpKind::ExpandDims && v->type.rank() == 2 && d->operands[0]->type.rank() == 1)
      return offsets(d->operands[0], 1 - static_cast<int>(d->int_attr("axis")));
    if (d && d->kind == OpKind::Add && !tma_index(v, dim))
      return offsets(d->operands[0], dim) && offsets(d->operands[1], dim);
    if (d && d->kind == OpKind::Mul)
      for (int i = 0; i < 2; ++i)
        if (const Value* s = splatted(d->operands[1 - i]))
          if (auto ix = tma_index(d->operands[i], dim)) {
            terms.push_back({*ix, s});
            return true;
          }
    if (auto ix = tma_index(v, dim)) {
      terms.push_back({*ix, nullptr});
      return true;
    }
    return false;
  };
  const Value* p = access.operands[0];
  const Value* base = nullptr;
  while (!base) {
    while (p->def() && (p->def()->kind == OpKind::Broadcast || p->def()->kind == OpKind::ExpandDims))
      p = p->def()->operands[0];
    const Op* d = p->def();
    if (!d) return std::nullopt;
    if (d->kind == OpKind::Splat) {
      base = d->operands[0];
    } else if (d->kind == OpKind::AddPtr) {
      if (!offsets(d->operands[1], -1)) return std::nullopt;
      p = d->operands[0];
    } else {
      return std::nullopt;
    }
  }
  auto b = tma_extent(base);
  if (!b || b->kind == 'c' || !base->type.elem.is_ptr() || b->divisibility % 16 != 0) return std::nullopt;
  m.base_arg = static_cast<int>(b->value);
  bool seen[2] = {false, false};
  for (auto& [ix, stride] : terms) {
    if (seen[ix.dim]) return std::nullopt;
    seen[ix.dim] = true;
    m.start[ix.dim] = ix.start;
    if (ix.dim == 1) {
      if (stride) {
        auto s = tma_extent(stride);
        if (!s || s->kind != 'c' || s->value != 1) return std::nullopt;
      }
    } else {
      if (!stride) return std::nullopt;  // rows one element apart: not a 2-D tensor
      auto s = tma_extent(stride);
      if (!s) return std::nullopt;
      if (s->kind == 'c' ? (s->value * eb) % 16 != 0 || s->value <= 0 : (s->divisibility * eb) % 16 != 0)
        return std::nullopt;
      m.stride_outer = *s;
    }
  }
  if (!seen[0] || !seen[1]) return std::nullopt;
  // Mask: a conjunction of `index < bound` (and `index >= 0`, which TMA implies).
  bool bounded[2] = {false, false};
  std::function<bool(const Value*, int)> conj = [&](const Value* v, int dim) -> bool {
    while (v->def() && v->def()->kind == OpKind::Broadcast) v = v->def()->operands[0];
    const Op* d = v->def();
    if (!d) return false;
    if (d->kind == OpKind::ExpandDims && v->type.rank() == 2 && d->operands[0]->type.rank() == 1)
      return conj(d->operands[0], 1 - static_cast<int>(d->int_attr("axis")));
    if (d->kind == OpKind::And) return conj(d->operands[0], dim) && conj(d->operands[1], dim);
    if (d->kind != OpKind::Cmp) return false;
    const std::string pred = d->str_attr("pred");
    auto ix = tma_index(d->operands[0], dim);
    if (!ix || ix->start != m.start[ix->dim]) return false;
    const Value* bound = splatted(d->operands[1]);
    if (!bound) return false;
    if (pred == "ge") {
      auto z = tma_extent(bound);
      return z && z->kind == 'c' && z->value == 0;
    }
    if (pred != "lt" || bounded[ix->dim]) return false;
    auto e = tma_extent(bound);
    if (!e) return false;
    (ix->dim == 0 ? m.dim_outer : m.dim_inner) = *e;
    bounded[ix->dim] = true;
    return true;
  };
  if (!conj(mask, -1) || !bounded[0] || !bounded[1]) return std::nullopt;

  // The box and the ring stage's format: plain rows of 32/64/128 bytes swizzled as
  // wide, or (N-major B) column blocks of 64 elements, 128-byte swizzled.
  const int64_t rows = res->type.shape[0], cols = res->type.shape[1];
  if (rows > 256) return std::nullopt;  // TMA boxes are at most 256 per dim
  m.box_outer = rows;
  if (!geom) return m;  // the address and mask qualify; the ring's format is not known yet
  if (geom->block_bytes) {  // 64 16-bit elements per block, or 32 fp32 (a swapped tf32 dot's B)
    m.box_inner = 128 / eb;
    m.swizzle_bytes = 128;
    m.copies = static_cast<int>(cols * eb / 128);
    m.copy_stride = geom->block_bytes;
  } else {
    if (geom->row_bytes != 32 && geom->row_bytes != 64 && geom->row_bytes != 128) return std::nullopt;
    m.box_inner = cols;
    m.swizzle_bytes = static_cast<int>(geom->row_bytes);
  }
  return m;
}

void GpuLowering::plan_tma(const Block& body) {
  std::optional<Pipeline> p = plan_pipeline(body);
  if (!p || !p->async_proxy) return;
  std::set<const Value*> wgmma_operands;
  for (auto& op : body.ops)
    if (wgmma_dots_.count(op.get())) wgmma_operands.insert({op->operands[0], op->operands[1]});
  std::vector<TmaMap> maps;
  for (auto& pl : p->loads) {
    if (!wgmma_operands.count(pl.operand)) return;  // every stage of the ring in one scheme
    auto m = match_tma_access(*pl.load, &pl.geom);
    if (!m) return;
    maps.push_back(*m);
  }
  for (auto& m : maps) {
    m.param = static_cast<int>(k_.args.size() + tma_maps_.size());
    tma_maps_.push_back(m);
  }
}

std::string GpuLowering::tensor_map_spec() const {
  if (tma_maps_.empty()) return "";
  auto ext = [](const TmaExtent& e) { return std::string(1, e.kind) + std::to_string(e.value); };
  std::string s = std::to_string(k_.args.size());
  for (auto& m : tma_maps_)
    s += "|" + std::to_string(m.base_arg) + ":" + std::to_string(m.elem_bytes) + ":" + std::to_string(m.swizzle_bytes) +
         ":" + std::to_string(m.box_inner) + ":" + std::to_string(m.box_outer) + ":" + ext(m.dim_inner) + ":" +
         ext(m.dim_outer) + ":" + ext(m.stride_outer);
  return s;
}

const GpuLowering::TmaMap* GpuLowering::tma_map_of(const Op* access) const {
  for (auto& m : tma_maps_)
    if (m.op == access) return &m;
  return nullptr;
}

void GpuLowering::tma_prologue(Pipeline& p) {
  p.full_bars = new_smem(b_.getInt64Ty(), p.stages, "tma_full", 8);
  p.phase = alloca_in_entry(b_.getInt32Ty());
  b_.CreateStore(b_.getInt32(0), p.phase);
  // The barrier before this (pipeline_prologue) let every thread leave an earlier
  // run of the loop; the one after makes the initialized barriers visible.
  llvm::Value* leader = b_.CreateICmpEQ(tid_, b_.getInt32(0));
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt1Ty()}, false);
  auto* init = llvm::InlineAsm::get(fty, "@$1 mbarrier.init.shared::cta.b64 [$0], 1;", "r,b,~{memory}", true);
  for (int s = 0; s < p.stages; ++s) b_.CreateCall(fty, init, {smem32(bar_of(p, b_.getInt32(s))), leader});
  p.issued = alloca_in_entry(b_.getInt32Ty());
  b_.CreateStore(b_.getInt32(0), p.issued);
  if (!tma_cta_barrier_) {  // one arrival per warp retires a stage
    p.empty_bars = new_smem(b_.getInt64Ty(), p.stages, "tma_empty", 8);
    auto* init_n = llvm::InlineAsm::get(
        fty, "@$1 mbarrier.init.shared::cta.b64 [$0], " + std::to_string(num_warps_) + ";", "r,b,~{memory}", true);
    for (int s = 0; s < p.stages; ++s)
      b_.CreateCall(fty, init_n, {smem32(empty_of(p, b_.getInt32(s))), leader});
  }
  if (p.ping_pong) emit_ping_pong_barriers(p);  // (after the ring: its 1024-byte alignment wastes nothing)
  // The copy engine (async proxy) completes transactions on them.
  emit_ptx(b_, "fence.mbarrier_init.release.cluster;");
  emit_ptx(b_, "fence.proxy.async.shared::cta;");
  barrier();
}

llvm::Value* GpuLowering::bar_of(Pipeline& p, llvm::Value* stage) {
  return b_.CreateInBoundsGEP(b_.getInt8Ty(), p.full_bars, b_.CreateMul(stage, b_.getInt32(8)));
}

llvm::Value* GpuLowering::empty_of(Pipeline& p, llvm::Value* stage) {
  return b_.CreateInBoundsGEP(b_.getInt8Ty(), p.empty_bars, b_.CreateMul(stage, b_.getInt32(8)));
}

llvm::Value* GpuLowering::smem32(llvm::Value* ptr) {
  return b_.CreateTrunc(b_.CreatePtrToInt(ptr, b_.getInt64Ty()), b_.getInt32Ty());
}

void GpuLowering::tma_issue(Pipeline& p, llvm::Value* stage, llvm::Value* active) {
  auto* i32 = b_.getInt32Ty();
  llvm::Value* pred = b_.CreateAnd(p.issuer ? p.issuer : b_.CreateICmpEQ(tid_, b_.getInt32(0)), active);
  // The w-th issue (w counted from 0) fills stage w % S, which iteration w - S read:
  // from w >= S on, thread 0 first waits for that read's release (the (w/S - 1)-th
  // completion of the stage's empty barrier).
  llvm::Value* w = b_.CreateLoad(i32, p.issued);
  b_.CreateStore(b_.CreateAdd(w, b_.getInt32(1)), p.issued);
  if (p.empty_bars) {
    llvm::Value* must_wait = b_.CreateAnd(pred, b_.CreateICmpUGE(w, b_.getInt32(static_cast<uint32_t>(p.stages))));
    llvm::BasicBlock* wait = llvm::BasicBlock::Create(ctx_, "tma.empty", fn_);
    llvm::BasicBlock* go = llvm::BasicBlock::Create(ctx_, "tma.issue", fn_);
    b_.CreateCondBr(must_wait, wait, go);
    b_.SetInsertPoint(wait);
    llvm::Value* uses = b_.CreateUDiv(w, b_.getInt32(static_cast<uint32_t>(p.stages)));
    emit_mbarrier_wait(smem32(empty_of(p, stage)), b_.CreateAnd(b_.CreateSub(uses, b_.getInt32(1)), b_.getInt32(1)));
    b_.CreateBr(go);
    b_.SetInsertPoint(go);
    memo_.clear();
  }
  llvm::Value* bar = smem32(bar_of(p, stage));
  int64_t bytes = 0;
  for (auto& pl : p.loads) bytes += pl.load->result()->type.numel() * pl.load->result()->type.elem.bytes();
  struct Box {
    const TmaMap* map;
    llvm::Value *desc, *buf, *inner, *outer;
  };
  std::vector<Box> boxes;  // every operand computed before the branch below
  for (auto& pl : p.loads) {
    const TmaMap& m = *tma_map_of(pl.load);
    boxes.push_back({&m, b_.CreatePtrToInt(fn_->getArg(m.param), b_.getInt64Ty()),
                     b_.CreateInBoundsGEP(b_.getInt8Ty(), pl.ring,
                                          b_.CreateMul(stage, b_.getInt32(static_cast<uint32_t>(pl.stage_bytes)))),
                     tma_coord(m.start[1]), tma_coord(m.start[0])});
  }
  // Thread 0 alone issues, behind a branch rather than a predicate: ptxas makes each
  // copy's operands uniform with an ELECT / R2UR / BRA.U.ANY loop, which every warp
  // would otherwise run every iteration (about 80 instructions of dependent uniform
  // moves; on an H100 they kept the NN tf32 matmul's warps from feeding the tensor
  // cores: bench/results/gpu_matmul_tf32.md).
  llvm::BasicBlock* copy_bb = llvm::BasicBlock::Create(ctx_, "tma.copy", fn_);
  llvm::BasicBlock* copied_bb = llvm::BasicBlock::Create(ctx_, "tma.copied", fn_);
  b_.CreateCondBr(pred, copy_bb, copied_bb);
  b_.SetInsertPoint(copy_bb);
  {
    auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {i32, b_.getInt1Ty()}, false);
    auto* expect = llvm::InlineAsm::get(
        fty, "@$1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], " + std::to_string(bytes) + ";", "r,b,~{memory}",
        true);
    b_.CreateCall(fty, expect, {bar, pred});
  }
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {i32, b_.getInt64Ty(), i32, i32, i32, b_.getInt1Ty()}, false);
  auto* copy = llvm::InlineAsm::get(
      fty,
      "@$5 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3}], [$4];",
      "r,l,r,r,r,b,~{memory}", true);
  for (const Box& box : boxes) {
    const TmaMap& m = *box.map;
    for (int c = 0; c < m.copies; ++c) {
      llvm::Value* dst =
          b_.CreateInBoundsGEP(b_.getInt8Ty(), box.buf, b_.getInt32(static_cast<uint32_t>(c * m.copy_stride)));
      llvm::Value* x = c ? b_.CreateAdd(box.inner, b_.getInt32(static_cast<uint32_t>(c * m.box_inner))) : box.inner;
      b_.CreateCall(fty, copy, {smem32(dst), box.desc, x, box.outer, bar, pred});
    }
  }
  b_.CreateBr(copied_bb);
  b_.SetInsertPoint(copied_bb);
  memo_.clear();  // at() results are valid in the block they were emitted in
}

llvm::Value* GpuLowering::tma_coord(const Value* x) {
  if (!x) return b_.getInt32(0);
  llvm::Value* v = scalar(x);
  return v->getType() == b_.getInt32Ty() ? v : b_.CreateTrunc(v, b_.getInt32Ty());
}

void GpuLowering::emit_mbarrier_wait(llvm::Value* bar, llvm::Value* parity) {
  // Spin on try_wait (which itself suspends the thread for a while) in LLVM IR, so
  // no asm labels are duplicated when the loop is unrolled.
  auto* fty = llvm::FunctionType::get(b_.getInt32Ty(), {b_.getInt32Ty(), b_.getInt32Ty()}, false);
  auto* try_wait = llvm::InlineAsm::get(
      fty, "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\nselp.u32 $0, 1, 0, p;\n}",
      "=r,r,r,~{memory}", true);
  llvm::BasicBlock* spin = llvm::BasicBlock::Create(ctx_, "mbarrier.wait", fn_);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx_, "mbarrier.done", fn_);
  b_.CreateBr(spin);
  b_.SetInsertPoint(spin);
  llvm::CallInst* ok = b_.CreateCall(fty, try_wait, {bar, parity});
  ok->addFnAttr(llvm::Attribute::Convergent);
  b_.CreateCondBr(b_.CreateICmpNE(ok, b_.getInt32(0)), done, spin);
  b_.SetInsertPoint(done);
  memo_.clear();  // at() results are valid in the block they were emitted in
}

void GpuLowering::tma_wait(Pipeline& p, llvm::Value* stage) {
  emit_mbarrier_wait(smem32(bar_of(p, stage)), b_.CreateLoad(b_.getInt32Ty(), p.phase));
}

void GpuLowering::tma_release_stage(Pipeline& p) {
  // wait_group 0 retired this iteration's stage; with a group in flight (wait_group 1)
  // the previous iteration's, which does not exist in the first.
  llvm::Value* stage = p.current_stage;
  llvm::Value* pred = b_.CreateICmpEQ(b_.CreateAnd(tid_, b_.getInt32(31)), b_.getInt32(0));
  if (p.wgmma_async) {
    llvm::Value* prev = b_.CreateSub(stage, b_.getInt32(1));
    stage = b_.CreateSelect(b_.CreateICmpEQ(stage, b_.getInt32(0)), b_.getInt32(static_cast<uint32_t>(p.stages - 1)),
                            prev);
    pred = b_.CreateAnd(pred, b_.CreateNot(p.first_iteration));
  }
  // (A ping-pong run's last stage was released before its epilogue: ping_pong_nvptx.cpp.)
  if (p.released) pred = b_.CreateAnd(pred, b_.CreateNot(b_.CreateLoad(b_.getInt1Ty(), p.released)));
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt1Ty()}, false);
  auto* arrive = llvm::InlineAsm::get(fty, "@$1 mbarrier.arrive.shared::cta.b64 _, [$0];", "r,b,~{memory}", true);
  b_.CreateCall(fty, arrive, {smem32(empty_of(p, stage)), pred});
}

void GpuLowering::tma_advance_phase(Pipeline& p, llvm::Value* next_read_stage) {
  llvm::Value* ph = b_.CreateLoad(b_.getInt32Ty(), p.phase);
  llvm::Value* wrapped = b_.CreateICmpEQ(next_read_stage, b_.getInt32(0));
  b_.CreateStore(b_.CreateSelect(wrapped, b_.CreateXor(ph, b_.getInt32(1)), ph), p.phase);
}

void GpuLowering::tma_epilogue(Pipeline& p) {
  // Every copy issued was waited for (only iterations that run are issued); make
  // the barriers plain memory again once no thread can still be polling them.
  barrier();
  llvm::Value* leader = b_.CreateICmpEQ(tid_, b_.getInt32(0));
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt32Ty(), b_.getInt1Ty()}, false);
  auto* inval = llvm::InlineAsm::get(fty, "@$1 mbarrier.inval.shared::cta.b64 [$0];", "r,b,~{memory}", true);
  for (int s = 0; s < p.stages; ++s) {
    b_.CreateCall(fty, inval, {smem32(bar_of(p, b_.getInt32(s))), leader});
    if (p.empty_bars) b_.CreateCall(fty, inval, {smem32(empty_of(p, b_.getInt32(s))), leader});
  }
}

}  // namespace tessera::codegen::nvptx
