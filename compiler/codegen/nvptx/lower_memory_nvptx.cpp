// NVPTX lowering, part 2: global loads and stores.
//
// Each thread accesses its registers in runs of up to 16 bytes: for tile<1024xf32>
// in the default layout (4 warps, 4 contiguous floats per thread, twice), thread t
// issues two `ld.global.v4.f32` at elements 4t and 512+4t when the pointers are
// contiguous and 16-byte aligned (axis analysis) and the mask is constant over each
// run of 4; otherwise narrower accesses, down to one element each. Masked accesses
// are predicated inline PTX (`@p ld.global...`), the destination registers first
// set to `other`; unmasked ones are plain LLVM loads/stores in addrspace(1).
#include <llvm/IR/InlineAsm.h>

#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

namespace {

constexpr unsigned kGlobalAS = 1;

// How a run of n elements travels through PTX registers: `count` words of one
// PTX type (f32/f64 stay floats, so fp32 code shows ld.global.v4.f32).
struct Words {
  llvm::Type* type;
  const char* constraint;
  const char* ptx;
  int count;
};

Words words_for(llvm::LLVMContext& c, const ElemType& e, int n) {
  int total = n * e.bytes();
  if (e.kind == ScalarKind::F32) return {llvm::Type::getFloatTy(c), "f", "f32", n};
  if (e.kind == ScalarKind::F64) return {llvm::Type::getDoubleTy(c), "d", "f64", n};
  if (total >= 4) return {llvm::Type::getInt32Ty(c), "r", "b32", total / 4};
  if (total == 2) return {llvm::Type::getInt16Ty(c), "h", "b16", 1};
  return {llvm::Type::getInt16Ty(c), "h", "u8", 1};  // one byte, in a 16-bit register
}

// Elements (register values) -> PTX words.
std::vector<llvm::Value*> pack_words(llvm::IRBuilderBase& b, const ElemType& e, const Words& w,
                                     const std::vector<llvm::Value*>& elems) {
  if (e.kind == ScalarKind::F32 || e.kind == ScalarKind::F64) return elems;
  llvm::Type* mt = llvm_mem_type(b.getContext(), e);
  int n = static_cast<int>(elems.size());
  if (n == 1 && e.bytes() == 1) return {b.CreateZExt(to_mem(b, elems[0], e), w.type)};
  llvm::Value* v = llvm::UndefValue::get(llvm::FixedVectorType::get(mt, n));
  for (int i = 0; i < n; ++i) v = b.CreateInsertElement(v, to_mem(b, elems[i], e), b.getInt32(i));
  llvm::Type* wt = w.count == 1 ? w.type : llvm::FixedVectorType::get(w.type, w.count);
  v = b.CreateBitCast(v, wt);
  if (w.count == 1) return {v};
  std::vector<llvm::Value*> out;
  for (int i = 0; i < w.count; ++i) out.push_back(b.CreateExtractElement(v, b.getInt32(i)));
  return out;
}

// PTX words -> elements (register values).
std::vector<llvm::Value*> unpack_words(llvm::IRBuilderBase& b, const ElemType& e, const Words& w, int n,
                                       const std::vector<llvm::Value*>& words) {
  if (e.kind == ScalarKind::F32 || e.kind == ScalarKind::F64) return words;
  llvm::Type* mt = llvm_mem_type(b.getContext(), e);
  if (n == 1 && e.bytes() == 1) return {from_mem(b, b.CreateTrunc(words[0], mt), e)};
  llvm::Value* v;
  if (w.count == 1) {
    v = words[0];
  } else {
    v = llvm::UndefValue::get(llvm::FixedVectorType::get(w.type, w.count));
    for (int i = 0; i < w.count; ++i) v = b.CreateInsertElement(v, words[i], b.getInt32(i));
  }
  v = b.CreateBitCast(v, llvm::FixedVectorType::get(mt, n));
  std::vector<llvm::Value*> out;
  for (int i = 0; i < n; ++i) out.push_back(from_mem(b, b.CreateExtractElement(v, b.getInt32(i)), e));
  return out;
}

std::string operand_list(int first, int count) {
  std::string s = count > 1 ? "{" : "";
  for (int i = 0; i < count; ++i) s += (i ? ", $" : "$") + std::to_string(first + i);
  return s + (count > 1 ? "}" : "");
}

bool is_true(llvm::Value* v) {
  auto* c = llvm::dyn_cast_or_null<llvm::ConstantInt>(v);
  return !v || (c && c->isOne());
}
bool is_false(llvm::Value* v) {
  auto* c = llvm::dyn_cast_or_null<llvm::ConstantInt>(v);
  return c && c->isZero();
}

}  // namespace

std::vector<llvm::Value*> GpuLowering::emit_global_load(llvm::Value* ptr, const ElemType& e, int n, llvm::Value* pred,
                                                        const std::vector<llvm::Value*>& others) {
  if (is_false(pred)) return others;
  llvm::Value* gptr = b_.CreateAddrSpaceCast(ptr, llvm::PointerType::get(ctx_, kGlobalAS));
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  if (is_true(pred)) {
    llvm::Type* t = n == 1 ? mt : llvm::FixedVectorType::get(mt, n);
    llvm::Value* v = b_.CreateAlignedLoad(t, gptr, llvm::Align(n * e.bytes()));
    if (n == 1) return {from_mem(b_, v, e)};
    std::vector<llvm::Value*> out;
    for (int i = 0; i < n; ++i) out.push_back(from_mem(b_, b_.CreateExtractElement(v, b_.getInt32(i)), e));
    return out;
  }
  Words w = words_for(ctx_, e, n);
  std::vector<llvm::Value*> init = pack_words(b_, e, w, others);
  // $0..: results; then the predicate, the address, the initial (other) words.
  std::string text = "{\n";
  int pred_op = w.count, addr_op = w.count + 1, init_op = w.count + 2;
  const char* mov = w.ptx[0] == 'f' ? w.ptx : w.count == 1 && w.ptx[0] == 'u' ? "b16" : w.ptx;
  for (int i = 0; i < w.count; ++i)
    text += "mov." + std::string(mov) + " $" + std::to_string(i) + ", $" + std::to_string(init_op + i) + ";\n";
  text += "@$" + std::to_string(pred_op) + " ld.global" + (w.count > 1 ? ".v" + std::to_string(w.count) : "") + "." +
          w.ptx + " " + operand_list(0, w.count) + ", [$" + std::to_string(addr_op) + "];\n}";
  std::string cons;
  for (int i = 0; i < w.count; ++i) cons += std::string("=") + w.constraint + ",";
  cons += "b,l";
  for (int i = 0; i < w.count; ++i) cons += std::string(",") + w.constraint;
  std::vector<llvm::Type*> rtys(w.count, w.type);
  llvm::Type* rty = w.count == 1 ? w.type : static_cast<llvm::Type*>(llvm::StructType::get(ctx_, rtys));
  std::vector<llvm::Type*> atys = {b_.getInt1Ty(), gptr->getType()};
  for (int i = 0; i < w.count; ++i) atys.push_back(w.type);
  auto* fty = llvm::FunctionType::get(rty, atys, false);
  // Only reads memory: LLVM may hoist or merge it but not move it across stores.
  auto* asm_fn = llvm::InlineAsm::get(fty, text, cons, /*hasSideEffects=*/false);
  std::vector<llvm::Value*> args = {pred, gptr};
  args.insert(args.end(), init.begin(), init.end());
  llvm::CallInst* call = b_.CreateCall(fty, asm_fn, args);
  call->setOnlyReadsMemory();
  call->setDoesNotThrow();
  std::vector<llvm::Value*> words;
  if (w.count == 1) words.push_back(call);
  else
    for (int i = 0; i < w.count; ++i) words.push_back(b_.CreateExtractValue(call, i));
  return unpack_words(b_, e, w, n, words);
}

void GpuLowering::emit_global_store(llvm::Value* ptr, const ElemType& e, const std::vector<llvm::Value*>& vals,
                                    llvm::Value* pred, const std::string& cache) {
  if (is_false(pred)) return;
  int n = static_cast<int>(vals.size());
  llvm::Value* gptr = b_.CreateAddrSpaceCast(ptr, llvm::PointerType::get(ctx_, kGlobalAS));
  llvm::Type* mt = llvm_mem_type(ctx_, e);
  // A cache operator (tl.store's cache_modifier) needs the inline form.
  if (!cache.empty() && is_true(pred)) pred = b_.getTrue();
  if (is_true(pred) && cache.empty()) {
    llvm::Value* v;
    if (n == 1) {
      v = to_mem(b_, vals[0], e);
    } else {
      v = llvm::UndefValue::get(llvm::FixedVectorType::get(mt, n));
      for (int i = 0; i < n; ++i) v = b_.CreateInsertElement(v, to_mem(b_, vals[i], e), b_.getInt32(i));
    }
    b_.CreateAlignedStore(v, gptr, llvm::Align(n * e.bytes()));
    return;
  }
  Words w = words_for(ctx_, e, n);
  std::vector<llvm::Value*> words = pack_words(b_, e, w, vals);
  // $0: address, $1..: words, then the predicate.
  int pred_op = 1 + w.count;
  std::string text = "@$" + std::to_string(pred_op) + " st.global" + cache +
                     (w.count > 1 ? ".v" + std::to_string(w.count) : "") + "." + w.ptx + " [$0], " +
                     operand_list(1, w.count) + ";";
  std::string cons = "l";
  for (int i = 0; i < w.count; ++i) cons += std::string(",") + w.constraint;
  cons += ",b";
  std::vector<llvm::Type*> atys = {gptr->getType()};
  for (int i = 0; i < w.count; ++i) atys.push_back(w.type);
  atys.push_back(b_.getInt1Ty());
  auto* fty = llvm::FunctionType::get(b_.getVoidTy(), atys, false);
  auto* asm_fn = llvm::InlineAsm::get(fty, text, cons, /*hasSideEffects=*/true);
  std::vector<llvm::Value*> args = {gptr};
  args.insert(args.end(), words.begin(), words.end());
  args.push_back(pred);
  b_.CreateCall(fty, asm_fn, args);
}

// Constancy of a mask along `dim`: the axis analysis' (its Cmp rule covers the
// `offsets < n` form, where the property test in test_axis_info_fuzz.cpp checks it).
int64_t GpuLowering::mask_constancy(const Value* m, int dim) {
  const analysis::AxisInfo& ai = axis_.get(m);
  return dim < static_cast<int>(ai.constancy.size()) ? ai.constancy[dim] : 1;
}

int GpuLowering::access_width(const Op& op, const BlockedLayout& l) {
  const Value* ptrs = op.operands[0];
  const ElemType pe = ptrs->type.elem.pointee_type();
  int rank = ptrs->type.rank();
  int minor = rank - 1;
  const analysis::AxisInfo& ai = axis_.get(ptrs);
  int64_t g = l.contiguous_regs();
  g = std::min<int64_t>(g, ai.contiguity[minor]);
  int64_t align = ai.divisibility[minor];
  while (g > 1 && (g * pe.bytes() > 16 || g * pe.bytes() > align)) g /= 2;
  const Value* mask = op.kind == OpKind::Load ? (op.operands.size() >= 2 ? op.operands[1] : nullptr)
                                              : (op.operands.size() >= 3 ? op.operands[2] : nullptr);
  if (mask && mask->type.is_tile()) {
    int64_t mc = mask_constancy(mask, minor);
    while (g > mc) g /= 2;
  }
  return static_cast<int>(std::max<int64_t>(g, 1));
}

void GpuLowering::lower_load(const Op& op) {
  const Value* res = op.result();
  const ElemType& e = res->type.elem;
  if (streamed_.count(&op)) {  // read back from a stream ring's stage (stream_ring_nvptx.cpp)
    const StreamLoad& sl = *streamed_.at(&op).first;
    tiles_[res] = TileVal{TileVal::Regs, sl.layout, streamed_load(op)};
    return;
  }
  auto planned = load_layout_.find(res);
  BlockedLayout l = planned != load_layout_.end() ? planned->second : canonical_layout(res->type.shape);
  int g = access_width(op, l);
  const Value* mask = op.operands.size() >= 2 ? op.operands[1] : nullptr;
  const Value* other = op.operands.size() >= 3 ? op.operands[2] : nullptr;
  std::vector<llvm::Value*> regs;
  for (int r0 = 0; r0 < l.num_regs(); r0 += g) {
    SymIndex s0 = l.index_of(r0);
    llvm::Value* ptr = at(op.operands[0], s0);
    llvm::Value* pred = mask ? at(mask, s0) : nullptr;
    if (extra_load_pred_) pred = pred ? b_.CreateAnd(pred, extra_load_pred_) : extra_load_pred_;
    std::vector<llvm::Value*> others;
    for (int i = 0; i < g; ++i)
      others.push_back(other ? at(other, l.index_of(r0 + i)) : llvm::Constant::getNullValue(llvm_elem_type(ctx_, e)));
    auto vals = emit_global_load(ptr, e, g, pred, others);
    regs.insert(regs.end(), vals.begin(), vals.end());
  }
  tiles_[res] = TileVal{TileVal::Regs, std::move(l), std::move(regs)};
}

void GpuLowering::lower_store(const Op& op) {
  if (store_through_smem(op)) return;
  const Value* val = op.operands[1];
  const ElemType& e = val->type.elem;
  BlockedLayout l = preferred_layout(val);
  int g = access_width(op, l);
  const Value* mask = op.operands.size() >= 3 ? op.operands[2] : nullptr;
  llvm::Value* first = is_first_replica(l);
  for (int r0 = 0; r0 < l.num_regs(); r0 += g) {
    SymIndex s0 = l.index_of(r0);
    llvm::Value* ptr = at(op.operands[0], s0);
    llvm::Value* pred = mask ? at(mask, s0) : nullptr;
    if (first) pred = pred ? b_.CreateAnd(pred, first) : first;
    std::vector<llvm::Value*> vals;
    for (int i = 0; i < g; ++i) vals.push_back(at(val, l.index_of(r0 + i)));
    emit_global_store(ptr, e, vals, pred, op.str_attr("cache_modifier"));
  }
}

// A scalar load: every thread reads the same element (uniform value).
llvm::Value* GpuLowering::lower_scalar_load(const Op& op) {
  if (streamed_.count(&op)) return streamed_load(op)[0];
  const ElemType& e = op.result()->type.elem;
  llvm::Value* pred = op.operands.size() >= 2 ? scalar(op.operands[1]) : nullptr;
  llvm::Value* other = op.operands.size() >= 3 ? scalar(op.operands[2]) : llvm::Constant::getNullValue(llvm_elem_type(ctx_, e));
  return emit_global_load(scalar(op.operands[0]), e, 1, pred, {other})[0];
}

// A scalar store: thread 0 writes.
void GpuLowering::lower_scalar_store(const Op& op) {
  llvm::Value* pred = b_.CreateICmpEQ(tid_, b_.getInt32(0));
  if (op.operands.size() >= 3) pred = b_.CreateAnd(pred, scalar(op.operands[2]));
  emit_global_store(scalar(op.operands[0]), op.operands[1]->type.elem, {scalar(op.operands[1])}, pred,
                    op.str_attr("cache_modifier"));
}

}  // namespace tessera::codegen::nvptx
