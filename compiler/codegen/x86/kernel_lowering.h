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
// for loads, when no store or atomic runs between the load and its consumer —
// except small contiguous loads, which are loaded again by each of a few uses (the
// row is still in L1/L2; a buffer would cost a store and a load).
// A value used several times whose first use is a reduce over all of it is written
// to its buffer by that reduce's loop (softmax: max over the loaded row in one pass,
// exp of the row reloaded + sum + the exp buffer written in the next, divide in a third).
//
// Each consumer's loop is specialized (mask_versioning.cpp): masks such as
// `pid*BLOCK + arange < n` are tested whole before the loop, and a copy of the loop
// with them known true has plain loads and stores (the masked copy is for the last
// block). Large launches store their results around the cache (streaming_stores.cpp).
// A row that several nests reread has the next program's row prefetched in the last
// of them (row_prefetch.cpp).
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "analysis/axis_info.h"
#include "codegen/x86/dot_microkernel.h"
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
// With rows > 1 (multi_row_chunks.cpp: tiles whose minor dim is narrower than a
// vector, as [G, 4] f32), the chunk is `rows` whole consecutive rows instead: rows
// idx[rank-2] .. idx[rank-2] + rows - 1 of dim rank-2, idx.back() = 0, W = rows x
// shape.back() lanes in row-major order.
struct Chunk {
  std::vector<llvm::Value*> idx;  // i64 per dimension
  int width = 1;
  int rows = 1;
};

// Whether `v` depends on the program id: a load or store through it touches
// different memory in each program (a weight vector every program reads does not).
bool varies_by_program(const ir::Value* v, const ir::Block* kernel_body,
                       std::unordered_map<const ir::Value*, bool>& memo);

// Whether op may stay lazy (an elementwise op, a load, a view-like op with a tile result).
bool lazy_eligible(const ir::Op& op);

// Element strides of a dense row-major buffer of `shape` (0 along size-1 dims).
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape);

// True when the view is a dense row-major buffer starting at its base.
bool is_contiguous(const TileRef& r, const ir::Type& t);

struct TargetDesc {
  std::string cpu_features;  // LLVM feature string, e.g. "+avx2,+avx512f,..."
  int vector_bits = 256;
  bool has_avx512 = false;    // AVX512F: k-masks, 512-bit vectors, scatters
  bool has_avx512bw = false;  // masked loads/stores of 8/16-bit elements
  int chunk_lanes = 16;
  int64_t last_level_cache_bytes = 32 << 20;  // decides streaming stores
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
  // How the evaluation of `v` reads the buffers `bufs` (a loop's carried tiles): per
  // buffer, 0 not at all, 1 each element only for the same element of v, 2 otherwise.
  void carried_reads(const ir::Value* v, const std::vector<TileRef>& bufs, bool same_index, std::vector<int>& how,
                     std::set<std::pair<const ir::Value*, bool>>& seen);
  void lower_while(const ir::Op& op);
  void lower_if(const ir::Op& op);
  void lower_print(const ir::Op& op);
  void lower_cluster_reduce_scatter(const ir::Op& op);  // cluster_exchange.cpp
  void lower_assert(const ir::Op& op);
  llvm::Value* scalar(const ir::Value* v);
  [[noreturn]] void unsupported(const ir::Op& op, const std::string& what);

  // --- tile_values.cpp: lazy evaluation, views, loop nests, memory ----------
  void plan_fusion(const ir::Block& b);
  bool is_lazy(const ir::Op& op) const { return lazy_.count(&op) != 0; }
  void lower_tile_op(const ir::Op& op);
  llvm::Value* emit_chunk(const ir::Value* v, const Chunk& c);
  llvm::Value* emit_lazy_chunk(const ir::Op& op, int result, const Chunk& c);
  llvm::Value* emit_gather_chunk(const ir::Op& op, const Chunk& c);
  llvm::Value* view_chunk(const TileRef& r, const ir::Type& t, const Chunk& c);
  llvm::Value* view_address(const TileRef& r, const ir::Type& t, const Chunk& c);
  TileRef materialize(const ir::Value* v);
  TileRef new_buffer(const ir::Type& t);
  void write_into(const TileRef& dst, const ir::Value* v);
  void copy_view(const TileRef& dst, const TileRef& src, const ir::Type& t);
  llvm::Value* alloca_in_entry(llvm::Type* t, int64_t count);
  int chunk_width(const ir::Type& t) const;
  // Calls body(chunk) for every chunk of `shape` (loops over all dims except
  // `skip_dim`, whose index is left as nullptr). Lanes run along the minor dim;
  // rows > 1: multi-row chunks of `rows` rows (width = rows x shape.back()).
  void loop_nest(const std::vector<int64_t>& shape, int width, int skip_dim,
                 const std::function<void(Chunk&)>& body, int rows = 1);

  // --- multi_row_chunks.cpp: chunks of several short rows ----------------------
  // Rows per chunk for a consumer's loop over `t` (1: one row's lanes at a time).
  int chunk_rows(const ir::Type& t, int skip_dim = -1) const;
  // The constant element step of an integer or pointer tile along each dim (pointers:
  // in elements), or nullopt when it is not affine with constant steps.
  std::optional<std::vector<int64_t>> element_steps(const ir::Value* v);
  // Whether the multi-row chunk c of pointer tile `ptrs` addresses consecutive elements.
  bool rows_are_contiguous(const ir::Value* ptrs, const Chunk& c);
  // c's lanes evaluated one row at a time and concatenated (ops without a multi-row form).
  llvm::Value* emit_row_by_row(const ir::Value* v, const Chunk& c);
  llvm::Value* multi_row_broadcast(const ir::Op& op, const Chunk& c);
  llvm::Value* multi_row_view_chunk(const TileRef& r, const ir::Type& t, const Chunk& c);
  // Combines each row's lanes of multi-row chunk values (rows x minor lanes) into one
  // lane per row: `rows` lanes.
  std::vector<llvm::Value*> combine_within_rows(const ir::Op& reduce, std::vector<llvm::Value*> vals, int rows,
                                                int minor);
  // reduce(reduce(x, axis=1), axis=0) of a [G, L] tile with the same single-op combine:
  // the inner reduce (returned; nullptr if none) is not lowered on its own, the outer
  // one reduces x whole in multi-row chunks.
  const ir::Op* fusable_inner_reduce(const ir::Op& outer);
  // A counted loop [0, n) step `step` around body(iv) (i64 iv).
  void counted_loop(int64_t n, int64_t step, const std::function<void(llvm::Value*)>& body, bool reverse = false);
  llvm::Value* emit_load_chunk(const ir::Op& op, const Chunk& c);
  bool reloadable(const ir::Op& load) const;
  void lower_store(const ir::Op& op);
  void lower_atomic(const ir::Op& op);
  llvm::Value* contiguous_pointer(const ir::Value* ptrs, const Chunk& c);

  // --- lane_masked_memory.cpp: masked memory access, native or lane by lane ---
  llvm::Value* masked_load(llvm::FixedVectorType* vt, llvm::Value* p0, llvm::Align align, llvm::Value* mask,
                           llvm::Value* other);
  llvm::Value* masked_gather(llvm::FixedVectorType* vt, llvm::Value* ptrs, llvm::Align align, llvm::Value* mask,
                             llvm::Value* other);
  void masked_store(llvm::Value* v, llvm::Value* p0, llvm::Align align, llvm::Value* mask);
  void masked_scatter(llvm::Value* v, llvm::Value* ptrs, llvm::Align align, llvm::Value* mask);
  llvm::Value* vector_piece(llvm::Value* v, unsigned i, unsigned lanes);
  llvm::Value* avx_mask_load(llvm::FixedVectorType* vt, llvm::Value* p0, llvm::Value* mask, llvm::Value* other);
  void avx_mask_store(llvm::Value* v, llvm::Value* p0, llvm::Value* mask);
  llvm::Value* lane_pointer(llvm::Value* base_or_ptrs, llvm::Type* elem, int lane, bool contiguous);
  llvm::Value* lanewise_load(llvm::FixedVectorType* vt, llvm::Value* base_or_ptrs, bool contiguous, llvm::Align align,
                             llvm::Value* mask, llvm::Value* other);
  void lanewise_store(llvm::Value* v, llvm::Value* base_or_ptrs, bool contiguous, llvm::Align align,
                      llvm::Value* mask);
  TileRef& tile(const ir::Value* v);

  // --- lazy_if.cpp: an if whose branches only compute tiles, evaluated per chunk --
  bool if_can_be_lazy(const ir::Op& op) const;
  void lower_lazy_if(const ir::Op& op);
  llvm::Value* emit_lazy_if_chunk(const ir::Op& op, int result, const Chunk& c);
  // A lazy if under `roots` whose branch this nest has not chosen yet (nullptr: none).
  const ir::Op* undecided_lazy_if(const std::vector<const ir::Value*>& roots);
  // Emits `emit` twice, under if (cond) and else, with the if's branch chosen in each.
  void split_on_lazy_if(const ir::Op& lazy_if, const std::function<void()>& emit);
  // The values a lazy op's chunk reads: its operands, or for a lazy if its yields'.
  std::vector<const ir::Value*> lazy_inputs(const ir::Op& op, int result) const;

  // --- mask_versioning.cpp ---------------------------------------------------
  // The lowest and highest value over a whole integer tile, as exact i128 scalars,
  // and whether no lane wrapped on the way (nullopt: not an analyzable form).
  struct IntRange {
    llvm::Value* lo;
    llvm::Value* hi;
    llvm::Value* ok;
  };
  std::optional<IntRange> tile_range(const ir::Value* v);
  // An i1 scalar that is true when every lane of mask `m` is true (nullptr: unknown).
  llvm::Value* all_true(const ir::Value* m);
  void collect_masks(const ir::Value* v, std::unordered_set<const ir::Value*>& seen,
                     std::vector<std::pair<const ir::Value*, llvm::Value*>>& masks);
  // loop_nest, emitted twice when the values `roots` evaluate masks that can be
  // tested whole before the loop: once with them known true, once as they are.
  // `stream` (a store's streaming_condition) splits the unmasked copy once more:
  // with streaming_ set (non-temporal stores) and without.
  void versioned_loop_nest(const std::vector<const ir::Value*>& roots, const std::vector<int64_t>& shape,
                           int width, int skip_dim, const std::function<void(Chunk&)>& body,
                           llvm::Value* stream = nullptr, int rows = 1);

  // --- row_prefetch.cpp ------------------------------------------------------
  // Whether chunks of `load` prefetch the next program's row, and that prefetch.
  bool prefetches_next_row(const ir::Op& load);
  int64_t contiguous_run(const ir::Op& load);
  void prefetch_next_row(const ir::Op& load, llvm::Value* p0, const Chunk& c);
  // Keeps each load's prefetches only in the last loop nest that emitted them.
  void drop_prefetches_outside_last_nest();

  // --- streaming_stores.cpp -------------------------------------------------
  // An i1 that is true when `store` should write around the cache (nullptr: never).
  llvm::Value* streaming_condition(const ir::Op& store);
  void store_streaming(llvm::Value* v, llvm::Value* p);

  // --- lower_reduce_scan.cpp ------------------------------------------------
  void lower_reduce(const ir::Op& op);
  void lower_reduce_whole(const ir::Op& op, const ir::Op& inner);
  void lower_scan(const ir::Op& op);
  std::vector<llvm::Value*> emit_combine(const ir::Op& op, const std::vector<llvm::Value*>& lhs,
                                         const std::vector<llvm::Value*>& rhs);
  void lower_dot(const ir::Op& op);
  TileRef dot_operand(const ir::Value* v, bool& transposed);
  MicroTileHook next_k_step_prefetches(const ir::Op& dot);
  // The add of `acc += dot(a, b)` when it can be fused into the dot (see lower_dot);
  // sets `carried` to the loop-carried acc.
  const ir::Op* fusable_dot_add(const ir::Op& dot, const ir::Value*& carried);

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
  std::unordered_set<const ir::Op*> lazy_ifs_;  // ifs evaluated per chunk (lazy_if.cpp)
  std::unordered_map<const ir::Op*, int> if_choice_;  // in a nest version: the branch taken
  // Multi-use values whose first use is a reduce over them: the reduce's loop
  // writes their buffer as it reads them (one pass instead of two).
  std::unordered_map<const ir::Op*, const ir::Op*> deferred_;  // value's op -> reduce
  std::unordered_map<const ir::Value*, TileRef> pending_;       // buffer to fill
  int nest_id_ = 0;  // counts versioned loop nests (one per consumer of lazy tiles)
  // Per load: the prefetches emitted so far, with the nest that emitted each.
  std::unordered_map<const ir::Op*, std::vector<std::pair<int, llvm::Instruction*>>> row_prefetches_;
  std::unordered_map<const ir::Value*, bool> varies_memo_;  // varies_by_program's memo
  std::unordered_map<const ir::Value*, std::vector<const ir::Op*>> uses_;
  bool uses_built_ = false;
  // Inner reduces of fusable_inner_reduce pairs: lowered by their outer reduce.
  std::unordered_set<const ir::Op*> fused_inner_reduces_;
  // Adds computed by a dot's store (fusable_dot_add): their value is this buffer.
  std::unordered_map<const ir::Op*, TileRef> fused_dot_adds_;
  // Masks known to be all true in the code being emitted (see versioned_loop_nest).
  std::unordered_set<const ir::Value*> known_true_;
  // Integer tile ops known not to wrap there (their values were range-checked).
  std::unordered_set<const ir::Value*> known_no_wrap_;
  std::vector<const ir::Value*> range_ops_;  // tile_range's arithmetic, for the above
  // Loops emitted now are not unrolled: the masked copy of a versioned loop (run by
  // a program or two) and streaming stores (bound by DRAM, not instructions).
  bool keep_loops_rolled_ = false;
  bool streaming_ = false;       // stores being emitted write around the cache
  bool emitted_streaming_ = false;  // some did: the entry ends with an sfence
};

}  // namespace tessera::codegen::x86
