// Lowers one Tile IR kernel to an LLVM function for x86 (internal to codegen/x86).
//
// How tiles become code. A tile value is either
//   * a View: a buffer (an alloca of the tile's elements) with per-dimension
//     element strides — materialized values, loop-carried tiles, permute/split/
//     broadcast of views (those only change strides, never copy); or
//   * Lazy: an elementwise op not yet evaluated. Its consumer (a store, a reduce,
//     a materialization...) walks the tile in chunks of W lanes along the minor
//     dimension and asks each lazy op for the W values of a chunk, so a chain of
//     elementwise ops becomes one loop nest over vector registers.
// plan_fusion decides per block which ops stay lazy: cheap ops always (they are
// recomputed per use), expensive ones (loads, math) only when evaluated once and,
// for loads, when no store or atomic runs between the load and its consumer.
// A value used several times whose first use is a reduce over all of it is written
// to its buffer by that reduce's loop (softmax: load+max in one pass, exp+sum in one).
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <unordered_map>
#include <unordered_set>

#include "analysis/axis_info.h"
#include "ir/ir.h"
#include "tessera/compiler.h"

namespace tessera::codegen::x86 {

struct TileRef {
  enum Kind { Lazy, View } kind = Lazy;
  const ir::Op* op = nullptr;     // Lazy: the defining op (result index below)
  int result_index = 0;
  llvm::Value* base = nullptr;    // View: element 0 of the buffer
  int64_t offset = 0;             // View: element offset of index (0,...,0)
  std::vector<int64_t> strides;   // View: element stride per dim (0 = broadcast)
};

// A chunk: W consecutive lanes along the minor dimension starting at idx.back().
struct Chunk {
  std::vector<llvm::Value*> idx;  // i64 per dimension
  int width = 1;
};

// True when the view is a dense row-major buffer starting at its base.
bool is_contiguous(const TileRef& r, const ir::Type& t);

struct TargetDesc {
  std::string cpu_features;  // LLVM feature string, e.g. "+avx2,+avx512f,..."
  int vector_bits = 256;
  int chunk_lanes = 16;
};

class KernelLowering {
 public:
  KernelLowering(const ir::Kernel& k, llvm::Module& m, const TargetDesc& t, const CompileOptions& opts);
  // Emits the kernel body function and the launch entry point; returns the
  // entry's symbol name.
  std::string run();

 private:
  // --- kernel_lowering.cpp: functions, scalars and control flow -------------
  void emit_entry(llvm::Function* body);
  void lower_block(const ir::Block& b);
  void lower_op(const ir::Op& op);
  void lower_for(const ir::Op& op);
  void lower_while(const ir::Op& op);
  void lower_if(const ir::Op& op);
  void lower_print(const ir::Op& op);
  void lower_assert(const ir::Op& op);
  llvm::Value* scalar(const ir::Value* v);
  [[noreturn]] void unsupported(const ir::Op& op, const std::string& what);

  // --- tile_values.cpp: lazy evaluation, views, loop nests, memory ----------
  void plan_fusion(const ir::Block& b);
  bool is_lazy(const ir::Op& op) const { return lazy_.count(&op) != 0; }
  void lower_tile_op(const ir::Op& op);
  llvm::Value* emit_chunk(const ir::Value* v, const Chunk& c);
  llvm::Value* emit_lazy_chunk(const ir::Op& op, int result, const Chunk& c);
  llvm::Value* view_chunk(const TileRef& r, const ir::Type& t, const Chunk& c);
  llvm::Value* view_address(const TileRef& r, const ir::Type& t, const Chunk& c);
  TileRef materialize(const ir::Value* v);
  TileRef new_buffer(const ir::Type& t);
  void write_into(const TileRef& dst, const ir::Value* v);
  void copy_view(const TileRef& dst, const TileRef& src, const ir::Type& t);
  llvm::Value* alloca_in_entry(llvm::Type* t, int64_t count);
  int chunk_width(const ir::Type& t) const;
  // Calls body(chunk) for every chunk of `shape` (loops over all dims except
  // `skip_dim`, whose index is left as nullptr). Lanes run along the minor dim.
  void loop_nest(const std::vector<int64_t>& shape, int width, int skip_dim,
                 const std::function<void(Chunk&)>& body);
  // A counted loop [0, n) step `step` around body(iv) (i64 iv).
  void counted_loop(int64_t n, int64_t step, const std::function<void(llvm::Value*)>& body, bool reverse = false);
  llvm::Value* emit_load_chunk(const ir::Op& op, const Chunk& c);
  void lower_store(const ir::Op& op);
  void lower_atomic(const ir::Op& op);
  llvm::Value* contiguous_pointer(const ir::Value* ptrs, const Chunk& c);
  TileRef& tile(const ir::Value* v);

  // --- lower_reduce_scan.cpp ------------------------------------------------
  void lower_reduce(const ir::Op& op);
  void lower_scan(const ir::Op& op);
  std::vector<llvm::Value*> emit_combine(const ir::Op& op, const std::vector<llvm::Value*>& lhs,
                                         const std::vector<llvm::Value*>& rhs);
  void lower_dot(const ir::Op& op);

  const ir::Kernel& k_;
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  TargetDesc target_;
  CompileOptions opts_;
  llvm::IRBuilder<> b_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  analysis::AxisAnalysis axis_;
  llvm::Value* pid_[3] = {};
  llvm::Value* nprog_[3] = {};
  std::unordered_map<const ir::Value*, llvm::Value*> scalars_;
  std::unordered_map<const ir::Value*, TileRef> tiles_;
  std::unordered_set<const ir::Op*> lazy_;
  // Multi-use values whose first use is a reduce over them: the reduce's loop
  // writes their buffer as it reads them (one pass instead of two).
  std::unordered_map<const ir::Op*, const ir::Op*> deferred_;  // value's op -> reduce
  std::unordered_map<const ir::Value*, TileRef> pending_;       // buffer to fill
  std::unordered_map<const ir::Value*, std::vector<const ir::Op*>> uses_;
  bool uses_built_ = false;
};

}  // namespace tessera::codegen::x86
