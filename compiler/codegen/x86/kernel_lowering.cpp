// x86 lowering, part 1: the kernel's LLVM functions, scalar ops and control flow.
//
// Functions emitted for kernel `k`:
//   internal void body(<kernel args>, i32 pid0, pid1, pid2, i32 n0, n1, n2)
//   void tessera_entry(ptr argv, i64 begin, i64 end, i32 n0, i32 n1, i32 n2)
// The entry runs the programs begin..end-1 of the grid (axis 0 fastest); argv
// holds one 8-byte slot per kernel argument (values in the low bytes).
#include "codegen/x86/kernel_lowering.h"

#include <algorithm>

#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Verifier.h>

#include <set>

#include "codegen/common/elementwise.h"
#include "codegen/common/loop_hints.h"

namespace tessera::codegen::x86 {

using namespace ir;

KernelLowering::KernelLowering(const Kernel& k, llvm::Module& m, const TargetDesc& t, const CompileOptions& opts)
    : k_(k), m_(m), ctx_(m.getContext()), target_(t), opts_(opts), b_(m.getContext()), axis_(k) {}

void KernelLowering::unsupported(const Op& op, const std::string& what) {
  throw CompileError(what + " (in kernel " + k_.name + " at " + k_.file() + ":" + std::to_string(op.loc.line) + ":" +
                         std::to_string(op.loc.col) + ")",
                     /*user_error=*/true, op.loc.line, op.loc.col);
}

std::string KernelLowering::run() {
  std::vector<llvm::Type*> params;
  for (auto& a : k_.args) params.push_back(llvm_elem_type(ctx_, a.value->type.elem));
  for (int i = 0; i < 6; ++i) params.push_back(b_.getInt32Ty());
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
  fn_ = llvm::Function::Create(fty, llvm::Function::InternalLinkage, "tessera_kernel_" + k_.name, m_);
  // Known before lowering so that emitters (vector math) can pick target instructions.
  fn_->addFnAttr("target-features", target_.cpu_features);
  for (size_t i = 0; i < k_.args.size(); ++i) {
    llvm::Argument* a = fn_->getArg(i);
    a->setName(k_.args[i].value->name);
    if (k_.args[i].value->type.elem.is_ptr()) a->addAttr(llvm::Attribute::NoUndef);
    scalars_[k_.args[i].value] = a;
  }
  for (int i = 0; i < 3; ++i) {
    pid_[i] = fn_->getArg(k_.args.size() + i);
    nprog_[i] = fn_->getArg(k_.args.size() + 3 + i);
  }
  entry_ = llvm::BasicBlock::Create(ctx_, "entry", fn_);
  auto* start = llvm::BasicBlock::Create(ctx_, "start", fn_);
  b_.SetInsertPoint(start);
  lower_block(*k_.body());
  drop_prefetches_outside_last_nest();
  if (!b_.GetInsertBlock()->getTerminator()) b_.CreateRetVoid();
  b_.SetInsertPoint(entry_);
  b_.CreateBr(start);
  emit_entry(fn_);
  return "tessera_entry";
}

void KernelLowering::emit_entry(llvm::Function* body) {
  auto* i64 = b_.getInt64Ty();
  auto* i32 = b_.getInt32Ty();
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, i64, i64, i32, i32, i32}, false);
  auto* entry = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, "tessera_entry", m_);
  auto* bb = llvm::BasicBlock::Create(ctx_, "entry", entry);
  b_.SetInsertPoint(bb);
  llvm::Value* argv = entry->getArg(0);
  std::vector<llvm::Value*> args;
  for (size_t i = 0; i < k_.args.size(); ++i) {
    const ElemType& e = k_.args[i].value->type.elem;
    llvm::Value* slot = b_.CreateConstGEP1_64(b_.getInt8Ty(), argv, 8 * i);
    llvm::Value* v = b_.CreateLoad(llvm_mem_type(ctx_, e), slot);
    args.push_back(from_mem(b_, v, e));
  }
  llvm::Value* n0 = entry->getArg(3);
  llvm::Value* n1 = entry->getArg(4);
  llvm::Value* n2 = entry->getArg(5);
  llvm::Value* n0w = b_.CreateZExt(n0, i64);
  llvm::Value* n01w = b_.CreateMul(n0w, b_.CreateZExt(n1, i64));
  auto* loop = llvm::BasicBlock::Create(ctx_, "loop", entry);
  auto* exit = llvm::BasicBlock::Create(ctx_, "exit", entry);
  b_.CreateCondBr(b_.CreateICmpSLT(entry->getArg(1), entry->getArg(2)), loop, exit);
  b_.SetInsertPoint(loop);
  llvm::PHINode* lin = b_.CreatePHI(i64, 2);
  lin->addIncoming(entry->getArg(1), bb);
  llvm::Value* p0 = b_.CreateTrunc(b_.CreateURem(lin, n0w), i32);
  llvm::Value* p1 = b_.CreateTrunc(b_.CreateURem(b_.CreateUDiv(lin, n0w), b_.CreateZExt(n1, i64)), i32);
  llvm::Value* p2 = b_.CreateTrunc(b_.CreateUDiv(lin, n01w), i32);
  std::vector<llvm::Value*> call_args = args;
  for (llvm::Value* v : {p0, p1, p2, n0, n1, n2}) call_args.push_back(v);
  b_.CreateCall(body, call_args);
  llvm::Value* next = b_.CreateAdd(lin, b_.getInt64(1));
  lin->addIncoming(next, loop);
  b_.CreateCondBr(b_.CreateICmpSLT(next, entry->getArg(2)), loop, exit);
  b_.SetInsertPoint(exit);
  // Non-temporal stores are weakly ordered: make them visible before the pool
  // reports these programs done (see streaming_stores.cpp).
  if (emitted_streaming_) b_.CreateIntrinsic(llvm::Intrinsic::x86_sse_sfence, {}, {});
  b_.CreateRetVoid();
}

llvm::Value* KernelLowering::scalar(const Value* v) {
  auto it = scalars_.find(v);
  if (it == scalars_.end())
    throw CompileError("scalar value used before it was lowered (this is a Tessera bug)", false);
  return it->second;
}

void KernelLowering::lower_block(const Block& b) {
  plan_fusion(b);
  for (auto& op : b.ops) {
    if (b_.GetInsertBlock()->getTerminator()) break;  // after a return
    lower_op(*op);
  }
}

void KernelLowering::lower_op(const Op& op) {
  bool tile_result = !op.results.empty() && op.result()->type.is_tile();
  switch (op.kind) {
    case OpKind::For: return lower_for(op);
    case OpKind::While: return lower_while(op);
    case OpKind::If: return lower_if(op);
    case OpKind::Return: b_.CreateRetVoid(); return;
    case OpKind::Yield:
    case OpKind::Condition: return;  // handled by the parent op
    case OpKind::Print: return lower_print(op);
    case OpKind::Assert: return lower_assert(op);
    case OpKind::Assume: return;
    case OpKind::Barrier: return;  // a program is one thread on the CPU
    case OpKind::GdcWait:
    case OpKind::GdcLaunchDependents: return;  // CPU launches never overlap: nothing to wait for
    case OpKind::Store: return lower_store(op);
    case OpKind::AtomicRmw:
    case OpKind::AtomicCas: return lower_atomic(op);
    case OpKind::Reduce: return lower_reduce(op);
    case OpKind::Scan: return lower_scan(op);
    case OpKind::Dot: return lower_dot(op);
    case OpKind::ClusterReduceScatter: return lower_cluster_reduce_scatter(op);
    default: break;
  }
  if (tile_result) return lower_tile_op(op);

  // Scalar ops.
  switch (op.kind) {
    case OpKind::Const:
      scalars_[op.result()] = emit_constant(b_, op.result()->type.elem, 1, op.attrs.at("value"));
      return;
    case OpKind::ProgramId: scalars_[op.result()] = pid_[op.int_attr("axis")]; return;
    case OpKind::NumPrograms: scalars_[op.result()] = nprog_[op.int_attr("axis")]; return;
    case OpKind::Load: {
      const ElemType& e = op.result()->type.elem;
      llvm::Type* mt = llvm_mem_type(ctx_, e);
      llvm::Value* p = scalar(op.operands[0]);
      llvm::Value* v;
      if (op.operands.size() >= 2) {
        // Masked scalar load: read a dummy slot when the mask is off.
        llvm::Value* m = scalar(op.operands[1]);
        llvm::Value* dummy = alloca_in_entry(mt, 1);
        v = from_mem(b_, b_.CreateLoad(mt, b_.CreateSelect(m, p, dummy)), e);
        llvm::Value* other = op.operands.size() == 3 ? scalar(op.operands[2]) : llvm::Constant::getNullValue(v->getType());
        v = b_.CreateSelect(m, v, other);
      } else {
        v = from_mem(b_, b_.CreateLoad(mt, p), e);
      }
      scalars_[op.result()] = v;
      return;
    }
    case OpKind::Split:
    case OpKind::Join:
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::Gather:
      unsupported(op, std::string("'") + op.name() + "' needs a tile operand");
    default: break;
  }
  if (op_has_trait(op.kind, 'E') || op.kind == OpKind::Hint) {
    std::vector<llvm::Value*> args;
    for (Value* v : op.operands) args.push_back(scalar(v));
    scalars_[op.result()] = emit_elementwise(b_, op, args);
    return;
  }
  unsupported(op, std::string("op '") + op.name() + "' is not supported on the CPU yet");
}

// Loop-carried values live in memory (slots for scalars, buffers for tiles);
// SROA/mem2reg turn the scalar slots back into registers.
void KernelLowering::lower_for(const Op& op) {
  const Block& body = *op.regions[0]->block;
  size_t n = op.operands.size() - 3;
  llvm::Value* lb = scalar(op.operands[0]);
  llvm::Value* ub = scalar(op.operands[1]);
  llvm::Value* step = scalar(op.operands[2]);
  const ElemType& ivt = op.operands[0]->type.elem;
  std::vector<llvm::Value*> slots(n);
  std::vector<TileRef> bufs(n);
  for (size_t i = 0; i < n; ++i) {
    const Value* init = op.operands[3 + i];
    if (init->type.is_tile()) {
      bufs[i] = new_buffer(init->type);
      write_into(bufs[i], init);
    } else {
      slots[i] = alloca_in_entry(llvm_elem_type(ctx_, init->type.elem), 1);
      b_.CreateStore(scalar(init), slots[i]);
    }
  }
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "for.header", fn_);
  auto* bodybb = llvm::BasicBlock::Create(ctx_, "for.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "for.exit", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(lb->getType(), 2);
  iv->addIncoming(lb, pre);
  llvm::Value* cond = ivt.is_unsigned() ? b_.CreateICmpULT(iv, ub) : b_.CreateICmpSLT(iv, ub);
  b_.CreateCondBr(cond, bodybb, exit);
  b_.SetInsertPoint(bodybb);
  scalars_[body.args[0].get()] = iv;
  for (size_t i = 0; i < n; ++i) {
    const Value* arg = body.args[1 + i].get();
    if (arg->type.is_tile()) tiles_[arg] = bufs[i];
    else scalars_[arg] = b_.CreateLoad(llvm_elem_type(ctx_, arg->type.elem), slots[i]);
  }
  lower_block(body);
  const Op* y = body.terminator();
  // A yielded tile may still read the carried buffers it replaces, so in general
  // it is evaluated into a temporary first and copied back. It is written in place
  // when it reads only its own buffer, each element only for the same element
  // (`ptrs += BLOCK`, `acc = acc * s + x`), and no other yielded tile reads that buffer.
  std::vector<std::vector<int>> reads(n);
  for (size_t i = 0; i < n; ++i)
    if (y->operands[i]->type.is_tile()) {
      reads[i].assign(n, 0);
      std::set<std::pair<const Value*, bool>> seen;
      carried_reads(y->operands[i], bufs, true, reads[i], seen);
    }
  std::vector<TileRef> tmp(n);
  std::vector<bool> in_place(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (!y->operands[i]->type.is_tile()) continue;
    const TileRef& src = tile(y->operands[i]);
    if (src.kind == TileRef::View && src.base == bufs[i].base && src.strides == bufs[i].strides && src.offset == 0)
      continue;  // yields the carried value itself
    bool alone = src.kind == TileRef::Lazy && reads[i][i] <= 1;
    for (size_t j = 0; j < n && alone; ++j)
      if (j != i) alone = reads[i][j] == 0 && (reads[j].empty() || reads[j][i] == 0);
    in_place[i] = alone;
    if (!alone) tmp[i] = materialize(y->operands[i]);
  }
  for (size_t i = 0; i < n; ++i) {
    if (y->operands[i]->type.is_tile()) {
      if (in_place[i]) write_into(bufs[i], y->operands[i]);
      else if (tmp[i].base) copy_view(bufs[i], tmp[i], y->operands[i]->type);
    } else {
      b_.CreateStore(scalar(y->operands[i]), slots[i]);
    }
  }
  llvm::Value* next = b_.CreateAdd(iv, step);
  iv->addIncoming(next, b_.GetInsertBlock());
  attach_loop_hints(op, b_.CreateBr(header));
  b_.SetInsertPoint(exit);
  for (size_t i = 0; i < n; ++i) {
    if (op.result(i)->type.is_tile()) tiles_[op.result(i)] = bufs[i];
    else scalars_[op.result(i)] = b_.CreateLoad(llvm_elem_type(ctx_, op.result(i)->type.elem), slots[i]);
  }
}

void KernelLowering::carried_reads(const Value* v, const std::vector<TileRef>& bufs, bool same_index,
                                   std::vector<int>& how, std::set<std::pair<const Value*, bool>>& seen) {
  if (v->type.is_scalar() || !seen.insert({v, same_index}).second) return;
  const TileRef& r = tile(v);
  if (r.kind == TileRef::View) {
    for (size_t j = 0; j < bufs.size(); ++j)
      if (bufs[j].base && r.base == bufs[j].base) {
        bool same = same_index && r.offset == 0 && r.strides == bufs[j].strides;
        how[j] = std::max(how[j], same ? 1 : 2);
      }
    return;
  }
  const Op& op = *r.op;
  bool elementwise = op_has_trait(op.kind, 'E') || op.kind == OpKind::Load || op.kind == OpKind::If;
  for (const Value* o : lazy_inputs(op, r.result_index))
    carried_reads(o, bufs, same_index && elementwise && o->type.shape == v->type.shape, how, seen);
}

void KernelLowering::lower_while(const Op& op) {
  const Block& before = *op.regions[0]->block;
  const Block& after = *op.regions[1]->block;
  size_t n = op.operands.size();
  std::vector<llvm::Value*> slots(n);
  std::vector<TileRef> bufs(n);
  for (size_t i = 0; i < n; ++i) {
    const Value* init = op.operands[i];
    if (init->type.is_tile()) {
      bufs[i] = new_buffer(init->type);
      write_into(bufs[i], init);
    } else {
      slots[i] = alloca_in_entry(llvm_elem_type(ctx_, init->type.elem), 1);
      b_.CreateStore(scalar(init), slots[i]);
    }
  }
  auto* header = llvm::BasicBlock::Create(ctx_, "while.before", fn_);
  auto* bodybb = llvm::BasicBlock::Create(ctx_, "while.after", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "while.exit", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  for (size_t i = 0; i < n; ++i) {
    const Value* arg = before.args[i].get();
    if (arg->type.is_tile()) tiles_[arg] = bufs[i];
    else scalars_[arg] = b_.CreateLoad(llvm_elem_type(ctx_, arg->type.elem), slots[i]);
  }
  lower_block(before);
  const Op* c = before.terminator();
  size_t m = c->operands.size() - 1;
  // Values passed on by `condition` must not depend on memory the body rewrites.
  std::vector<TileRef> passed(m);
  std::vector<llvm::Value*> passed_scalars(m);
  for (size_t i = 0; i < m; ++i) {
    const Value* v = c->operands[1 + i];
    if (v->type.is_tile()) {
      passed[i] = new_buffer(v->type);
      write_into(passed[i], v);
    } else {
      passed_scalars[i] = scalar(v);
    }
  }
  b_.CreateCondBr(scalar(c->operands[0]), bodybb, exit);
  b_.SetInsertPoint(bodybb);
  for (size_t i = 0; i < m; ++i) {
    const Value* arg = after.args[i].get();
    if (arg->type.is_tile()) tiles_[arg] = passed[i];
    else scalars_[arg] = passed_scalars[i];
  }
  lower_block(after);
  const Op* y = after.terminator();
  std::vector<TileRef> tmp(n);
  for (size_t i = 0; i < n; ++i)
    if (y->operands[i]->type.is_tile()) tmp[i] = materialize(y->operands[i]);
  for (size_t i = 0; i < n; ++i) {
    if (y->operands[i]->type.is_tile()) copy_view(bufs[i], tmp[i], y->operands[i]->type);
    else b_.CreateStore(scalar(y->operands[i]), slots[i]);
  }
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
  for (size_t i = 0; i < m; ++i) {
    if (op.result(i)->type.is_tile()) tiles_[op.result(i)] = passed[i];
    else scalars_[op.result(i)] = passed_scalars[i];
  }
}

// A tile result is a buffer each branch writes its yield into, except where a branch
// yields a value already in a dense buffer of its own (a materialized load or
// elementwise result, not a loop's carried buffer, which loops update in place): the
// result is then that buffer on that branch (a pointer phi), no copy. E.g.
// `x = load(...)` then `if edge: x = where(whole, x, load(partial))`: the else branch
// used to copy x's 16 KB into the result buffer.
void KernelLowering::lower_if(const Op& op) {
  if (lazy_ifs_.count(&op)) return lower_lazy_if(op);
  size_t n = op.results.size();
  std::vector<llvm::Value*> slots(n);
  std::vector<TileRef> bufs(n);
  for (size_t i = 0; i < n; ++i) {
    if (op.result(i)->type.is_tile()) bufs[i] = new_buffer(op.result(i)->type);
    else slots[i] = alloca_in_entry(llvm_elem_type(ctx_, op.result(i)->type.elem), 1);
  }
  auto own_dense_buffer = [&](const Value* v) -> llvm::Value* {
    if (!v->type.is_tile() || !v->def() || !v->def()->regions.empty()) return nullptr;
    const TileRef& r = tile(v);
    return r.kind == TileRef::View && is_contiguous(r, v->type) ? r.base : nullptr;
  };
  // per tile result: the buffer each branch that reaches the join leaves it in
  std::vector<std::vector<std::pair<llvm::BasicBlock*, llvm::Value*>>> arriving(n);
  auto* thenbb = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
  auto* elsebb = llvm::BasicBlock::Create(ctx_, "if.else", fn_);
  auto* join = llvm::BasicBlock::Create(ctx_, "if.join", fn_);
  b_.CreateCondBr(scalar(op.operands[0]), thenbb, elsebb);
  for (int r = 0; r < 2; ++r) {
    b_.SetInsertPoint(r == 0 ? thenbb : elsebb);
    const Block& blk = *op.regions[r]->block;
    lower_block(blk);
    if (b_.GetInsertBlock()->getTerminator()) continue;  // returned
    const Op* y = blk.terminator();
    std::vector<llvm::Value*> left_in(n, nullptr);
    if (y && y->kind == OpKind::Yield)
      for (size_t i = 0; i < n; ++i) {
        if (!op.result(i)->type.is_tile()) {
          b_.CreateStore(scalar(y->operands[i]), slots[i]);
        } else if (llvm::Value* own = own_dense_buffer(y->operands[i])) {
          left_in[i] = own;
        } else {
          write_into(bufs[i], y->operands[i]);
          left_in[i] = bufs[i].base;
        }
      }
    for (size_t i = 0; i < n; ++i)
      if (op.result(i)->type.is_tile()) arriving[i].push_back({b_.GetInsertBlock(), left_in[i] ? left_in[i] : bufs[i].base});
    b_.CreateBr(join);
  }
  b_.SetInsertPoint(join);
  for (size_t i = 0; i < n; ++i) {
    if (op.result(i)->type.is_tile()) {
      bool all_in_bufs = std::all_of(arriving[i].begin(), arriving[i].end(),
                                     [&](const auto& a) { return a.second == bufs[i].base; });
      if (!all_in_bufs) {
        llvm::PHINode* phi = b_.CreatePHI(bufs[i].base->getType(), static_cast<unsigned>(arriving[i].size()));
        for (auto& [bb, base] : arriving[i]) phi->addIncoming(base, bb);
        bufs[i].base = phi;
      }
      tiles_[op.result(i)] = bufs[i];
    } else {
      scalars_[op.result(i)] = b_.CreateLoad(llvm_elem_type(ctx_, op.result(i)->type.elem), slots[i]);
    }
  }
}

namespace {
llvm::Value* global_string(llvm::IRBuilderBase& b, llvm::Module& m, const std::string& s) {
  return b.CreateGlobalStringPtr(s, "", 0, &m);
}
}  // namespace

// print: one runtime call per element (debugging aid, not a fast path).
void KernelLowering::lower_print(const Op& op) {
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  auto* i32 = b_.getInt32Ty();
  auto* i64 = b_.getInt64Ty();
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, i32, i32, i32, i64, i32, i32, i64, b_.getDoubleTy()}, false);
  llvm::FunctionCallee fn = m_.getOrInsertFunction("tessera_cpu_print", fty);
  llvm::Value* prefix = global_string(b_, m_, op.str_attr("prefix"));
  int hex = op.bool_attr("hex") ? 1 : 0;
  for (size_t oi = 0; oi < op.operands.size(); ++oi) {
    const Value* v = op.operands[oi];
    const ElemType& e = v->type.elem;
    // kind: 0 signed int, 1 unsigned int, 2 float, 3 pointer
    int kind = e.is_float() ? 2 : e.is_ptr() ? 3 : (e.is_unsigned() || e.is_bool()) ? 1 : 0;
    auto emit_one = [&](llvm::Value* x, llvm::Value* flat) {
      llvm::Value* iv = b_.getInt64(0);
      llvm::Value* dv = llvm::ConstantFP::get(b_.getDoubleTy(), 0.0);
      int k = kind;
      if (hex && kind != 3) {
        // hex shows the element's own bits: i32 -1 is 0xffffffff, 1.0f is 0x3f800000
        llvm::Value* bits = e.is_float() ? b_.CreateBitCast(x, b_.getIntNTy(e.bits())) : x;
        iv = b_.CreateZExtOrBitCast(bits, i64);
        k = 1;
      } else if (kind == 2) {
        dv = emit_cast(b_, x, e, ElemType{ScalarKind::F64});
      } else if (kind == 3) {
        iv = b_.CreatePtrToInt(x, i64);
      } else {
        iv = emit_cast(b_, x, e, ElemType{kind == 1 ? ScalarKind::U64 : ScalarKind::I64});
      }
      b_.CreateCall(fn, {prefix, pid_[0], pid_[1], pid_[2], flat, b_.getInt32(static_cast<int>(oi)),
                         b_.getInt32(k | (hex << 4)), iv, dv});
    };
    if (v->type.is_scalar()) {
      emit_one(scalar(v), b_.getInt64(-1));
      continue;
    }
    const auto& shape = v->type.shape;
    loop_nest(shape, 1, -1, [&](Chunk& c) {
      llvm::Value* flat = b_.getInt64(0);
      for (size_t d = 0; d < shape.size(); ++d) flat = b_.CreateAdd(b_.CreateMul(flat, b_.getInt64(shape[d])), c.idx[d]);
      emit_one(emit_chunk(v, c), flat);
    });
  }
}

void KernelLowering::lower_assert(const Op& op) {
  if (!opts_.debug) return;
  const Value* c = op.operands[0];
  llvm::Value* ok;
  if (c->type.is_scalar()) {
    ok = scalar(c);
  } else {
    llvm::Value* slot = alloca_in_entry(b_.getInt1Ty(), 1);
    b_.CreateStore(b_.getTrue(), slot);
    loop_nest(c->type.shape, chunk_width(c->type), -1, [&](Chunk& ch) {
      llvm::Value* v = emit_chunk(c, ch);
      if (v->getType()->isVectorTy()) v = b_.CreateAndReduce(v);
      b_.CreateStore(b_.CreateAnd(b_.CreateLoad(b_.getInt1Ty(), slot), v), slot);
    });
    ok = b_.CreateLoad(b_.getInt1Ty(), slot);
  }
  auto* fail = llvm::BasicBlock::Create(ctx_, "assert.fail", fn_);
  auto* cont = llvm::BasicBlock::Create(ctx_, "assert.ok", fn_);
  b_.CreateCondBr(ok, cont, fail);
  b_.SetInsertPoint(fail);
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  auto* i32 = b_.getInt32Ty();
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, i32, i32, i32, i32, i32}, false);
  llvm::FunctionCallee fn = m_.getOrInsertFunction("tessera_cpu_assert_fail", fty);
  b_.CreateCall(fn, {global_string(b_, m_, op.str_attr("msg")), global_string(b_, m_, k_.file()),
                     b_.getInt32(op.loc.line), b_.getInt32(op.loc.col), pid_[0], pid_[1], pid_[2]});
  b_.CreateRetVoid();  // the program stops; the launcher raises after the grid ends
  b_.SetInsertPoint(cont);
}

}  // namespace tessera::codegen::x86
