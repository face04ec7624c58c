// NVPTX lowering, part 5: inclusive scans (tl.cumsum, tl.associative_scan) through
// shared memory, chunked so that every thread works.
//
// The tile is split into lines (all elements that share the non-axis index) and
// each line into P chunks, one per thread: P = min(L, threads / lines).
//   1. barrier; every thread stores its elements of each operand (row-major), barrier;
//   2. each thread scans its chunk sequentially in place and stores the chunk's
//      total in partial[line][p]; barrier;
//   3. each thread combines the totals of the chunks before its own (in scan
//      order) into a prefix and applies combine(prefix, x) to its chunk; barrier;
//   4. every thread loads its elements of the results in its own layout.
// Worked example, tl.cumsum of tile<1024xf32> on 128 threads: one line, P = 128
// chunks of 8; thread t scans x[8t..8t+7], then adds the sum of chunks 0..t-1.
// A 2-D tile<128x64> scanned along axis 1 has 128 lines: P = 1, one line a thread.
// The combiner is associative (as for reduce), so the chunked order gives the
// sequential result (up to floating-point rounding). A reverse scan runs the same
// steps over the reversed positions, with the carry on the left as on the CPU.
#include "codegen/common/elementwise.h"
#include "codegen/nvptx/gpu_lowering.h"

namespace tessera::codegen::nvptx {

using namespace ir;

void GpuLowering::emit_loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body) {
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* header = llvm::BasicBlock::Create(ctx_, "loop.header", fn_);
  auto* bodybb = llvm::BasicBlock::Create(ctx_, "loop.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "loop.exit", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(b_.getInt32Ty(), 2, "i");
  iv->addIncoming(b_.getInt32(0), pre);
  b_.CreateCondBr(b_.CreateICmpSLT(iv, n), bodybb, exit);
  b_.SetInsertPoint(bodybb);
  body(iv);
  iv->addIncoming(b_.CreateAdd(iv, b_.getInt32(1)), b_.GetInsertBlock());
  b_.CreateBr(header);
  b_.SetInsertPoint(exit);
}

void GpuLowering::lower_scan(const Op& op) {
  const size_t n = op.operands.size();
  const auto& shape = op.operands[0]->type.shape;
  const int axis = static_cast<int>(op.int_attr("axis"));
  const bool reverse = op.bool_attr("reverse");
  const int64_t L = shape[axis];
  int64_t inner = 1, numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    numel *= shape[d];
    if (static_cast<int>(d) > axis) inner *= shape[d];
  }
  const int64_t lines = numel / L;
  const int64_t P = std::max<int64_t>(1, std::min<int64_t>(L, num_threads_ / lines));
  const int64_t chunk = L / P, items = lines * P;
  const int64_t iters = std::max<int64_t>(1, items / num_threads_);

  std::vector<llvm::Type*> mt(n);
  std::vector<const ElemType*> et(n);
  std::vector<llvm::Value*> buf(n), part(n);
  for (size_t i = 0; i < n; ++i) {
    et[i] = &op.result(i)->type.elem;
    mt[i] = llvm_mem_type(ctx_, *et[i]);
    buf[i] = new_smem(mt[i], numel, "scan");
    if (P > 1) part[i] = new_smem(mt[i], items, "scan_part");
  }
  auto load_tuple = [&](const std::vector<llvm::Value*>& from, llvm::Value* idx) {
    std::vector<llvm::Value*> v;
    for (size_t i = 0; i < n; ++i)
      v.push_back(from_mem(b_, b_.CreateLoad(mt[i], b_.CreateInBoundsGEP(mt[i], from[i], idx)), *et[i]));
    return v;
  };
  auto store_tuple = [&](const std::vector<llvm::Value*>& to, llvm::Value* idx,
                         const std::vector<llvm::Value*>& v) {
    for (size_t i = 0; i < n; ++i) b_.CreateStore(to_mem(b_, v[i], *et[i]), b_.CreateInBoundsGEP(mt[i], to[i], idx));
  };
  // Carries live in allocas across the emitted loops (SROA makes them registers).
  auto make_slots = [&]() {
    std::vector<llvm::Value*> s;
    for (size_t i = 0; i < n; ++i) s.push_back(alloca_in_entry(llvm_elem_type(ctx_, *et[i])));
    return s;
  };
  auto read_slots = [&](const std::vector<llvm::Value*>& s) {
    std::vector<llvm::Value*> v;
    for (size_t i = 0; i < n; ++i) v.push_back(b_.CreateLoad(llvm_elem_type(ctx_, *et[i]), s[i]));
    return v;
  };
  auto write_slots = [&](const std::vector<llvm::Value*>& s, const std::vector<llvm::Value*>& v) {
    for (size_t i = 0; i < n; ++i) b_.CreateStore(v[i], s[i]);
  };
  // Runs body(line, p, item) for each work item of this thread.
  auto for_each_item = [&](const std::function<void(llvm::Value*, llvm::Value*, llvm::Value*)>& body) {
    auto one = [&](llvm::Value* it) {
      llvm::Value* item = b_.CreateAdd(tid_, b_.CreateMul(it, b_.getInt32(num_threads_)));
      auto run = [&] {
        body(b_.CreateLShr(item, log2_exact(P)), b_.CreateAnd(item, b_.getInt32(static_cast<uint32_t>(P - 1))), item);
      };
      if (items >= num_threads_) return run();
      auto* yes = llvm::BasicBlock::Create(ctx_, "scan.item", fn_);
      auto* cont = llvm::BasicBlock::Create(ctx_, "scan.item.end", fn_);
      b_.CreateCondBr(b_.CreateICmpULT(item, b_.getInt32(static_cast<uint32_t>(items))), yes, cont);
      b_.SetInsertPoint(yes);
      run();
      b_.CreateBr(cont);
      b_.SetInsertPoint(cont);
    };
    if (iters == 1) one(b_.getInt32(0));
    else emit_loop(b_.getInt32(static_cast<uint32_t>(iters)), one);
  };
  // Flat index of scan-order position `pos` of `line`.
  auto flat_index = [&](llvm::Value* line, llvm::Value* pos) {
    llvm::Value* idx = reverse ? b_.CreateSub(b_.getInt32(static_cast<uint32_t>(L - 1)), pos) : pos;
    llvm::Value* outer = b_.CreateLShr(line, log2_exact(inner));
    llvm::Value* in = b_.CreateAnd(line, b_.getInt32(static_cast<uint32_t>(inner - 1)));
    llvm::Value* f = b_.CreateMul(outer, b_.getInt32(static_cast<uint32_t>(L * inner)));
    f = b_.CreateAdd(f, b_.CreateMul(idx, b_.getInt32(static_cast<uint32_t>(inner))));
    return b_.CreateAdd(f, in);
  };
  llvm::Value* chunk_c = b_.getInt32(static_cast<uint32_t>(chunk));

  // 1. Stage the operands.
  barrier();
  for (size_t i = 0; i < n; ++i) {
    BlockedLayout l = preferred_layout(op.operands[i]);
    for (int r = 0; r < l.num_regs(); ++r) {
      SymIndex s = l.index_of(r);
      b_.CreateStore(to_mem(b_, at(op.operands[i], s), *et[i]),
                     b_.CreateInBoundsGEP(mt[i], buf[i], runtime_index(flat_bits(s))));
    }
  }
  barrier();

  // 2. Scan each chunk in place.
  for_each_item([&](llvm::Value* line, llvm::Value* p, llvm::Value* item) {
    llvm::Value* start = b_.CreateMul(p, chunk_c);
    auto carry = make_slots();
    write_slots(carry, load_tuple(buf, flat_index(line, start)));
    if (chunk > 1)
      emit_loop(b_.getInt32(static_cast<uint32_t>(chunk - 1)), [&](llvm::Value* j) {
        llvm::Value* idx = flat_index(line, b_.CreateAdd(start, b_.CreateAdd(j, b_.getInt32(1))));
        auto next = emit_combine(op, read_slots(carry), load_tuple(buf, idx));
        store_tuple(buf, idx, next);
        write_slots(carry, next);
      });
    if (P > 1) store_tuple(part, item, read_slots(carry));
  });

  // 3. Add the totals of the earlier chunks.
  if (P > 1) {
    barrier();
    for_each_item([&](llvm::Value* line, llvm::Value* p, llvm::Value*) {
      auto* yes = llvm::BasicBlock::Create(ctx_, "scan.prefix", fn_);
      auto* cont = llvm::BasicBlock::Create(ctx_, "scan.prefix.end", fn_);
      b_.CreateCondBr(b_.CreateICmpNE(p, b_.getInt32(0)), yes, cont);
      b_.SetInsertPoint(yes);
      llvm::Value* first = b_.CreateMul(line, b_.getInt32(static_cast<uint32_t>(P)));
      auto prefix = make_slots();
      write_slots(prefix, load_tuple(part, first));
      emit_loop(b_.CreateSub(p, b_.getInt32(1)), [&](llvm::Value* q) {
        llvm::Value* idx = b_.CreateAdd(first, b_.CreateAdd(q, b_.getInt32(1)));
        write_slots(prefix, emit_combine(op, read_slots(prefix), load_tuple(part, idx)));
      });
      llvm::Value* start = b_.CreateMul(p, chunk_c);
      emit_loop(chunk_c, [&](llvm::Value* j) {
        llvm::Value* idx = flat_index(line, b_.CreateAdd(start, j));
        store_tuple(buf, idx, emit_combine(op, read_slots(prefix), load_tuple(buf, idx)));
      });
      b_.CreateBr(cont);
      b_.SetInsertPoint(cont);
    });
  }
  barrier();

  // 4. Read the results back in the first operand's layout.
  BlockedLayout l = preferred_layout(op.operands[0]);
  std::vector<TileVal> res(n, TileVal{TileVal::Regs, l, {}});
  for (int r = 0; r < l.num_regs(); ++r) {
    auto v = load_tuple(buf, runtime_index(flat_bits(l.index_of(r))));
    for (size_t i = 0; i < n; ++i) res[i].regs.push_back(v[i]);
  }
  for (size_t i = 0; i < n; ++i) tiles_[op.result(i)] = std::move(res[i]);
}

}  // namespace tessera::codegen::nvptx
