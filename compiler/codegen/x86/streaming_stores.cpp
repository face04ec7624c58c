// x86 lowering: stores that write around the cache (non-temporal) when a launch
// moves more data than the last-level cache holds.
//
// A normal store to a line not in cache first reads the line from DRAM (the
// read-for-ownership), so writing a 64 MB result moves 128 MB. A non-temporal
// store (movntps) sends whole lines straight to memory: no read, and the inputs
// keep the cache. It is a loss when the result would have been read back from
// cache, so a store streams only when, at run time,
//   programs x (bytes each program loads and stores, counting only tiles whose
//   address depends on the program id) > half the last-level cache,
// its tile is one contiguous run that is 16-byte aligned, no load follows it in
// the kernel, and the kernel has no atomics. Why half: a launch re-run on the same
// data (a benchmark loop, the next layer) found its data in a 32 MB L3 up to a
// 16 MB footprint (there streaming made add/copy 2-3x slower), and not at 24-32 MB,
// where streaming made add and copy 12-18% faster, softmax 20%, layernorm 44%
// (2 cores, Zen 4); the cache is also shared with other processes.
// The chunk goes out as 16-byte pieces (movntps xmm, which needs only 16-byte
// alignment; a numpy array larger than a page is 16-byte aligned, not 64).
// Non-temporal stores are weakly ordered: tessera_entry ends with an sfence, so
// they are visible before the launch reports the programs done.
#include <llvm/IR/IntrinsicsX86.h>

#include "codegen/common/elementwise.h"
#include "codegen/x86/kernel_lowering.h"

namespace tessera::codegen::x86 {

using namespace ir;

namespace {

bool contains(const Op& op, const std::function<bool(const Op&)>& pred) {
  if (pred(op)) return true;
  for (auto& r : op.regions)
    for (auto& inner : r->block->ops)
      if (contains(*inner, pred)) return true;
  return false;
}

int64_t tile_bytes(const Type& t) {
  return t.numel() * std::max(1, t.elem.is_bool() ? 8 : t.elem.bits()) / 8;
}

}  // namespace

bool varies_by_program(const Value* v, const Block* kernel_body, std::unordered_map<const Value*, bool>& memo) {
  auto it = memo.find(v);
  if (it != memo.end()) return it->second;
  const Op* d = v->def();
  bool r = false;
  if (!d) r = v->arg_owner() != kernel_body;  // a kernel argument does not; a loop-carried value may
  else if (d->kind == OpKind::ProgramId) r = true;
  else
    for (const Value* o : d->operands) r = r || varies_by_program(o, kernel_body, memo);
  memo[v] = r;
  return r;
}

llvm::Value* KernelLowering::streaming_condition(const Op& store) {
  const Value* ptrs = store.operands[0];
  const Type& t = ptrs->type;
  const ElemType& e = store.operands[1]->type.elem;
  if (store.parent != k_.body() || !t.is_tile() || t.numel() != t.shape.back()) return nullptr;
  const auto& ai = axis_.get(ptrs);
  if (ai.contiguity.empty() || ai.contiguity.back() < t.shape.back()) return nullptr;
  int64_t chunk_bytes = chunk_width(t) * (e.is_bool() ? 1 : e.bits() / 8);
  if (chunk_bytes < 16 || chunk_bytes % 16 != 0) return nullptr;

  // Nothing may read what the store writes within the launch: no later load (the
  // same thread would read it back from memory) and no atomics (another program
  // could be told the data is there before it is visible).
  int64_t program_bytes = 0;
  std::unordered_map<const Value*, bool> seen;
  bool after = false, ok = true;
  for (auto& op : k_.body()->ops) {
    ok = ok && !contains(*op, [](const Op& o) { return o.kind == OpKind::AtomicRmw || o.kind == OpKind::AtomicCas; });
    if (after) ok = ok && !contains(*op, [](const Op& o) { return o.kind == OpKind::Load; });
    if (op.get() == &store) after = true;
    if ((op->kind == OpKind::Load || op->kind == OpKind::Store) && op->operands[0]->type.is_tile() &&
        varies_by_program(op->operands[0], k_.body(), seen))
      program_bytes += tile_bytes(op->kind == OpKind::Load ? op->result()->type : op->operands[1]->type);
  }
  if (!ok) return nullptr;

  llvm::Type* i64 = b_.getInt64Ty();
  llvm::Value* programs = b_.CreateMul(b_.CreateMul(b_.CreateZExt(nprog_[0], i64), b_.CreateZExt(nprog_[1], i64)),
                                       b_.CreateZExt(nprog_[2], i64));
  llvm::Value* big = b_.CreateICmpUGT(b_.CreateMul(programs, b_.getInt64(program_bytes)),
                                      b_.getInt64(target_.last_level_cache_bytes / 2));
  Chunk first;
  first.idx.assign(t.rank(), b_.getInt64(0));
  first.width = 1;
  llvm::Value* p = b_.CreatePtrToInt(emit_chunk(ptrs, first), i64);
  llvm::Value* aligned = b_.CreateICmpEQ(b_.CreateAnd(p, b_.getInt64(15)), b_.getInt64(0));
  return b_.CreateAnd(big, aligned);
}

void KernelLowering::store_streaming(llvm::Value* v, llvm::Value* p) {
  const llvm::DataLayout& dl = m_.getDataLayout();
  int64_t bytes = static_cast<int64_t>(dl.getTypeStoreSize(v->getType()));
  auto* words = llvm::FixedVectorType::get(b_.getInt32Ty(), bytes / 4);
  llvm::Value* w = b_.CreateBitCast(v, words);
  llvm::MDNode* nt = llvm::MDNode::get(ctx_, {llvm::ConstantAsMetadata::get(b_.getInt32(1))});
  for (int64_t k = 0; k < bytes / 16; ++k) {
    int base = static_cast<int>(4 * k);
    llvm::Value* piece = b_.CreateShuffleVector(w, {base, base + 1, base + 2, base + 3});
    llvm::Value* at = b_.CreateConstGEP1_64(b_.getInt8Ty(), p, 16 * k);
    auto* st = b_.CreateAlignedStore(piece, at, llvm::Align(16));
    st->setMetadata(llvm::LLVMContext::MD_nontemporal, nt);
  }
  emitted_streaming_ = true;
}

}  // namespace tessera::codegen::x86
