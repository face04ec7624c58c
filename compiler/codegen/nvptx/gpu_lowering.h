// Lowers one Tile IR kernel to an NVPTX kernel function (internal to codegen/nvptx).
//
// One program instance is one CTA of num_warps*32 threads; tiles are spread over
// the threads by blocked layouts (blocked_layout.h). A tile value is either
//   * Regs: materialized, each thread holding its elements of the layout in
//     LLVM scalars (loads, reductions, math, loop-carried and if results); or
//   * Lazy: a cheap op (const, arange, splat, broadcast, expand_dims, reshape,
//     permute, join/split, cheap elementwise) recomputed wherever an element is
//     needed: `at(v, index)` evaluates element `index` (a function of the thread
//     id) of v in the calling thread.
// When a thread asks a Regs value for an element another thread holds, the value
// goes through shared memory (every thread stores its elements, barrier, loads).
// All control flow is uniform across the CTA (conditions are scalars, identical in
// every thread), so barriers may appear anywhere.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "analysis/axis_info.h"
#include "codegen/nvptx/blocked_layout.h"
#include "codegen/nvptx/mma_layout.h"
#include "ir/ir.h"
#include "tessera/compiler.h"

namespace tessera::codegen::nvptx {

struct TileVal {
  enum Kind { Lazy, Regs } kind = Lazy;
  BlockedLayout layout;             // Regs
  std::vector<llvm::Value*> regs;   // Regs: one scalar per register
};

// The most dynamic shared memory a CTA may opt into on compute capability cc.
int max_dynamic_shared_bytes(int cc);

// A constant zero (+0.0, 0, false), seen through splats and broadcasts
// (pipeline_nvptx.cpp): a load's `other` that a zero-filled copy already gives.
bool is_zero_const(const ir::Value* v);

// Whether the kernel's float a * b + c may contract to FMAs: its fp_fusion attribute
// (the frontend writes it from TESSERA_GPU_FP_FUSION), else the default.
bool kernel_fp_fusion(const ir::Kernel& k);

// Emits PTX `text` as an inline-asm statement with side effects that clobbers memory
// (barriers, fences, async copies). convergent: LLVM may not make it depend on more
// control flow than it has (what every CTA-wide or warpgroup-wide instruction needs).
void emit_ptx(llvm::IRBuilderBase& b, const std::string& text, bool convergent = true);

// The swizzle field of a wgmma shared-memory matrix descriptor (bits 62-63) for rows of
// row_bytes: 1 for 128 bytes, 2 for 64, 3 for 32.
uint64_t wgmma_swizzle_mode(int64_t row_bytes);

// The loop's warp_specialize attribute is set (tl.range's hint; warp_specialize_nvptx.cpp).
bool asks_warp_specialize(const ir::Op& loop);
// ... and its ping_pong attribute: two consumer warpgroups take its tiles in turn (ping_pong_nvptx.cpp).
bool asks_ping_pong(const ir::Op& loop);

// The tensor-core instruction a dot lowers to (lower_dot_mma_nvptx.cpp).
enum class MmaKind { F16, BF16, TF32, TF32x3, I8 };

class GpuLowering {
 public:
  // cc: the target's compute capability (80 for sm_80, 90 for sm_90a).
  // wgmma: the target is sm_90a (warpgroup MMA for f16/bf16 dots whose operands a
  // cp.async ring holds). tma: rings of wgmma operands whose loads are 2-D tiles
  // the host can describe are filled by the TMA instead (tma_nvptx.cpp).
  // tma: 0 off; 1 stages released through "empty" mbarriers; 2 released by a CTA
  // barrier per iteration (the simpler scheme, kept to measure against); 3 as 1, but a
  // warp-specialized loop keeps wgmma groups in flight only from 4 stages (to measure).
  GpuLowering(const ir::Kernel& k, llvm::Module& m, int num_warps, bool debug, int cc = 90, int num_stages = 3,
              bool wgmma = false, int tma = 0);
  // Emits the kernel function (named after the kernel) and returns it.
  llvm::Function* run();
  int shared_bytes() const { return shared_bytes_; }
  int cluster_size() const { return cluster_; }  // programs per thread-block cluster (cluster_nvptx.cpp), 0: none
  // Threads per block to launch: num_warps*32 per consumer warpgroup (two for a
  // ping-pong loop), plus a warp-specialized loop's producer warpgroup.
  int block_threads() const {
    return std::max(launch_threads_, num_threads_ * consumer_groups_ + producer_threads_);
  }
  // The tensor maps the kernel takes after its own parameters, for the runtime
  // (runtime/include/tessera/tensor_map_spec.h); "" when none.
  std::string tensor_map_spec() const;

 private:
  // --- gpu_lowering.cpp: kernel, scalars, control flow, tile values ---------
  // Loads that feed broadcasts (through expand_dims) take the broadcast's layout
  // with the broadcast dims collapsed, so broadcasting them moves no data.
  void plan_load_layouts(const ir::Block& b);
  void lower_block(const ir::Block& b);
  void lower_op(const ir::Op& op);
  void lower_tile_op(const ir::Op& op);
  void lower_for(const ir::Op& op);
  bool branches_share_smem(const ir::Op& op, int start, bool dot_staging_before);
  void forget_smem_from(int start);
  void lower_while(const ir::Op& op);
  void lower_if(const ir::Op& op);
  bool only_return_after(const ir::Op& op) const;
  bool asks_warp_specialize_in(const ir::Block& b) const;
  llvm::Value* scalar(const ir::Value* v);
  TileVal& tile(const ir::Value* v);
  [[noreturn]] void unsupported(const ir::Op& op, const std::string& what);

  // Element `s` of v, evaluated in the current thread (scalars: the scalar).
  llvm::Value* at(const ir::Value* v, const SymIndex& s);
  llvm::Value* at_uncached(const ir::Value* v, const SymIndex& s);
  std::vector<llvm::Value*> materialize(const ir::Value* v, const BlockedLayout& l);
  // lower_if: `op` may run before the branch waits for its in-flight wgmma accumulators.
  bool runs_before_wgmma_wait(const ir::Op& op,
                              const std::vector<std::pair<const ir::Value*, TileVal>>& in_flight) const;
  BlockedLayout canonical_layout(const std::vector<int64_t>& shape) const;
  // The layout of a Regs value this lazy value is computed from, else canonical.
  BlockedLayout preferred_layout(const ir::Value* v);
  const BlockedLayout* layout_hint(const ir::Value* v);
  llvm::Value* read_through_smem(const ir::Value* v, const SymIndex& s);
  // v's Regs tile in shared memory (row-major; written once per basic block, between
  // barriers), for reads at indices other threads hold.
  llvm::Value* smem_copy_of(const ir::Value* v);
  // gather(src, index, axis) at `s` (lower_gather_nvptx.cpp).
  llvm::Value* gather_at(const ir::Op& op, const SymIndex& s);
  // A region of the kernel's dynamic shared memory (one extern array; the launch
  // passes shared_bytes()). Points at the region's first byte, 16-byte aligned.
  llvm::Value* new_smem(llvm::Type* elem, int64_t count, const std::string& name, int64_t align = 16);
  llvm::Value* runtime_index(const std::vector<IndexBit>& bits);  // i32
  llvm::Value* thread_bit(int b);                                 // i1
  // Threads that hold a replica (unused thread bits set) must not store.
  llvm::Value* is_first_replica(const BlockedLayout& l);
  void barrier();
  // griddepcontrol.wait / .launch_dependents (gdc_wait, gdc_launch_dependents) from sm_90.
  void grid_dependency_control(const char* instruction);
  llvm::Value* alloca_in_entry(llvm::Type* t);
  std::vector<llvm::Value*> carry_slots(const ir::Type& t, const BlockedLayout& l);

  // --- lower_memory_nvptx.cpp: global loads and stores ----------------------
  void lower_load(const ir::Op& op);
  void lower_store(const ir::Op& op);
  llvm::Value* lower_scalar_load(const ir::Op& op);
  void lower_scalar_store(const ir::Op& op);
  // Elements per access for a run of registers: pointer contiguity, alignment,
  // mask constancy and 16 bytes per access bound it.
  int access_width(const ir::Op& op, const BlockedLayout& l);
  int64_t mask_constancy(const ir::Value* m, int dim);
  std::vector<llvm::Value*> emit_global_load(llvm::Value* ptr, const ir::ElemType& e, int n, llvm::Value* pred,
                                             const std::vector<llvm::Value*>& others);
  // cache: a store's cache_modifier attribute (".cs": st.global.cs, evict-first), or "".
  void emit_global_store(llvm::Value* ptr, const ir::ElemType& e, const std::vector<llvm::Value*>& vals,
                         llvm::Value* pred, const std::string& cache = "");

  // --- store_through_smem_nvptx.cpp: wide stores of narrow-run layouts -------
  // A 2-D tile store whose value's layout gives short runs (an MMA accumulator)
  // converted through shared memory to 16-byte stores; false: not worth it.
  bool store_through_smem(const ir::Op& op);
  // The column chunk (of 2^k equal ones over `col_bits` column bits) register `reg` of `l`
  // holds, or -1 where a thread bit decides it.
  static int register_chunk(const BlockedLayout& l, int reg, int col_bits, int k);

  // --- tma_store_nvptx.cpp: a warp-specialized loop's tile stores by the TMA ----
  void plan_tma_stores();  // constructor, after plan_wgmma: the stores' tensor maps
  // Stores `op`'s tile (its value in `src`) through shared memory with TMA copies; false:
  // not here (no map planned, not past a specialized loop's split, no room), store as before.
  bool tma_store(const ir::Op& op, const BlockedLayout& src);
  void finish_tma_stores();  // run(): before each return, wait for the stores issued

  // --- cluster_nvptx.cpp: cluster_reduce_scatter through distributed shared memory ---
  void plan_cluster();    // run(), first: the exchange buffer and the first barrier phase
  void lower_cluster_reduce_scatter(const ir::Op& op);
  void finish_cluster();  // run(): each return waits until the cluster is done reading

  // --- lower_reduce_nvptx.cpp ------------------------------------------------
  void lower_reduce(const ir::Op& op);
  std::vector<llvm::Value*> emit_combine(const ir::Op& op, const std::vector<llvm::Value*>& lhs,
                                         const std::vector<llvm::Value*>& rhs);
  std::vector<llvm::Value*> combine_all(const ir::Op& op, std::vector<std::vector<llvm::Value*>> parts);
  llvm::Value* shuffle_xor(llvm::Value* v, int lane_mask);

  // --- lower_dot_nvptx.cpp: dot with FMA, operands staged in shared memory ---
  void lower_dot(const ir::Op& op);
  void ensure_dot_smem();  // the staging buffers, sized for the kernel's largest dot
  int64_t dot_staging_bytes() const;  // what ensure_dot_smem allocates

  // --- lower_dot_mma_nvptx.cpp: dot on tensor cores (mma.sync) --------------
  struct StagedOperand {
    llvm::Value* buf = nullptr;  // i8 buffer in shared memory
    int contig_dim = 1;          // the operand dim that runs along the buffer's rows
    int64_t row_bytes = 0;
    int elem_bytes = 2;
    // wgmma's MN-major layout: the rows split into column blocks of 128 bytes, each
    // block a [rows][128 B] buffer of its own (block_bytes apart); 0: plain rows.
    int64_t block_bytes = 0;
  };
  std::optional<MmaKind> mma_kind(const ir::Op& dot) const;  // none: FMA path
  void plan_dots();  // dots that feed another dot's A operand keep warps on whole rows
  MmaTiling mma_tiling(const ir::Op& dot) const;
  // The layout `v` will have if it is (an elementwise function of) a tensor-core
  // dot's result or a reduction of one: loop-carried values take it, so the MMA
  // accumulator and attention's running max/sum stay in place across iterations.
  std::optional<BlockedLayout> planned_layout(const ir::Value* v, int depth = 0);
  bool reachable_in_regs(const ir::Value* v, const BlockedLayout& l, int depth = 0);
  BlockedLayout source_layout(const ir::Value* x);
  llvm::Value* staged_offset(const StagedOperand& st, llvm::Value* row, llvm::Value* col);
  StagedOperand stage_operand(const ir::Value* x, llvm::Value* buf, int kdim, int elem_bytes);
  std::vector<llvm::Value*> ldmatrix_x4(const StagedOperand& st, int kdim, llvm::Value* base0, llvm::Value* base1,
                                        const int64_t step0[2], const int64_t step1[2]);
  void lower_dot_mma(const ir::Op& op, MmaKind kind);

  // --- lower_dot_wgmma_nvptx.cpp: warpgroup MMA from ring stages (sm_90a) -----
  // Whether `dot` can run as wgmma when both its operands come from ring stages of
  // the given geometries (K-major A; B K-major or N-major), and that geometry.
  bool wgmma_shape_ok(const ir::Op& dot) const;
  bool wgmma_operand_ok(const StagedOperand& st, int kdim) const;
  void plan_wgmma(const ir::Block& b);  // fills wgmma_dots_ (constructor)
  void lower_dot_wgmma(const ir::Op& op, MmaKind kind, const StagedOperand& sa, const StagedOperand& sb);
  // The accumulator layout a tensor-core dot produces (transposed for swapped dots).
  BlockedLayout dot_acc_layout(const ir::Op& dot) const;
  // wgmma.wait_group 0 with f32 accumulators passed through it (tied), so no read of
  // them is scheduled above the wait; returns the values to read.
  std::vector<llvm::Value*> wgmma_wait_tied(const std::vector<llvm::Value*>& acc);

  // --- lower_dot_wgmma_swapped_nvptx.cpp: tf32 with an N-major B, as C^T = B^T A^T ---
  // Whether a tf32 `dot` whose B is N-major can run swapped (B^T from registers as
  // wgmma's A, A's K-major stage as its B); with the stages' geometries when known.
  bool wgmma_swapped_shape_ok(const ir::Op& dot) const;
  bool wgmma_swapped_operands_ok(const StagedOperand& sa, const StagedOperand& sb) const;
  void lower_dot_wgmma_swapped(const ir::Op& op, const StagedOperand& sa, const StagedOperand& sb);

  // --- lower_scan_nvptx.cpp: inclusive scans through shared memory ---------
  void lower_scan(const ir::Op& op);
  // Emits `for (iv = 0; iv < n; ++iv) body(iv)` (iv i32); n a runtime i32.
  void emit_loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body);

  // --- prefetch_nvptx.cpp: next-iteration loads of a K loop's dot operands ---
  struct Prefetch {
    const ir::Op* load = nullptr;
    std::vector<const ir::Op*> slice;  // body ops its operands depend on, in order
    BlockedLayout layout;
    std::vector<llvm::Value*> slots;   // carried registers (allocas)
  };
  bool collect_slice(const ir::Block& body, const ir::Value* v, std::set<const ir::Op*>& slice);
  std::vector<Prefetch> plan_prefetch(const ir::Block& body);
  void emit_prefetch(const ir::Block& body, std::vector<Prefetch>& pf, llvm::Value* iv,
                     const std::vector<TileVal>& carried, const std::vector<llvm::Value*>& carried_scalars,
                     llvm::Value* active);

  // --- pipeline_nvptx.cpp: a num_stages ring of cp.async copies for dot operands ---
  struct PipelinedLoad {
    const ir::Op* load = nullptr;
    const ir::Value* operand = nullptr;  // the dot operand: the load, or its transpose
    BlockedLayout layout;        // which thread copies which elements
    int width = 1;               // elements per cp.async
    StagedOperand geom;          // the stage's buffer format (buf unset)
    int64_t stage_bytes = 0;
    llvm::Value* ring = nullptr;  // stages * stage_bytes of shared memory
    bool needs_tma = false;       // no cp.async can copy it (e.g. a block pointer's mask): TMA or nothing
  };
  // A load a stream ring keeps (stream_ring_nvptx.cpp): each thread copies its own
  // elements, in runs of `width`, to its own slots of a stage.
  struct StreamLoad {
    const ir::Op* load = nullptr;
    BlockedLayout layout;     // the load's own layout (a tile); unused for a scalar
    int width = 1;            // elements per cp.async (4, 8 or 16 bytes)
    int64_t thread_bytes = 0;  // one thread's slots in a stage
    int64_t stage_bytes = 0;   // thread_bytes for every thread
    llvm::Value* ring = nullptr;
  };
  struct Pipeline {
    int stages = 0;
    // A stream ring (stream_ring_nvptx.cpp): the loop's plain loads, not dot operands,
    // in per-thread slots; `loads` is empty then.
    bool stream = false;
    std::vector<StreamLoad> stream_loads;
    bool async_proxy = false;  // a wgmma reads the ring: fence.proxy.async before the barrier
    // Every wgmma of the body keeps one group in flight across iterations (its result
    // only feeds the next iteration's wgmma; num_stages >= 4): the ring then runs
    // num_stages-2 ahead, so the stage a copy overwrites was read two iterations ago,
    // by a finished group.
    bool wgmma_async = false;
    std::vector<size_t> async_results;  // carried indices of those accumulators
    std::vector<PipelinedLoad> loads;
    std::vector<const ir::Op*> ops;  // body ops the addresses, masks and ahead yields need, in order
    std::vector<size_t> ahead_args;  // carried values the addresses read (indices into the carried list)
    std::vector<BlockedLayout> ahead_layouts;
    std::vector<std::vector<llvm::Value*>> ahead_slots;  // their values num_stages-1 iterations ahead
    llvm::Value* ahead_iv = nullptr;                     // allocas
    llvm::Value* read_stage = nullptr;
    llvm::Value* write_stage = nullptr;
    // The stages are filled by the TMA (tma_nvptx.cpp): one mbarrier per stage,
    // waited on with the parity in `phase` (i32 alloca), instead of cp.async groups.
    bool tma = false;
    llvm::Value* full_bars = nullptr;
    llvm::Value* phase = nullptr;
    // Stage reuse without a CTA barrier: per stage an "empty" mbarrier every warp
    // arrives on once its wgmma retired the stage; thread 0 waits on it before a copy
    // overwrites the stage. `issued` (i32 alloca) counts the stages issued so far.
    llvm::Value* empty_bars = nullptr;
    llvm::Value* issued = nullptr;
    llvm::Value* lb = nullptr;               // the loop's first induction value
    llvm::Value* current_stage = nullptr;    // this iteration's read stage
    llvm::Value* first_iteration = nullptr;  // i1
    // A producer warp issues the copies, the consumers only wait (warp_specialize_nvptx.cpp);
    // issuer: the i1 that picks the issuing thread (nullptr: thread 0).
    bool warp_specialized = false;
    llvm::Value* issuer = nullptr;
    // Two consumer warpgroups take the loop's runs of iterations (tiles) in turn
    // (ping_pong_nvptx.cpp): a run ends where `reset_if` takes its branch `reset_branch`,
    // which resets every carried tile; `scalar_ops` (in order) compute the carried
    // scalars' yields and that condition, which the warpgroup not running the iteration
    // computes too; `turn` (i32 alloca): the warpgroup whose run it is.
    bool ping_pong = false;
    const ir::Op* reset_if = nullptr;
    int reset_branch = 0;
    std::vector<const ir::Op*> scalar_ops;
    llvm::Value* turn = nullptr;
    // Per warpgroup an mbarrier (turn_bars[g]) the other one arrives on once it has
    // waited for its run's last stage: g may then start its run (no earlier, or its
    // parity waits on the full barriers could see a phase two behind); `runs` (i32
    // alloca) counts g's runs, `run_start` (i1 alloca) marks an iteration that starts one.
    llvm::Value* turn_bars = nullptr;
    llvm::Value* runs = nullptr;
    llvm::Value* run_start = nullptr;
    // i1: the stage of this iteration was released early (its run's last: ping_pong_hand_over).
    llvm::Value* released = nullptr;
    // tl.range(..., l2_prefetch=P) on a TMA ring (l2_prefetch_nvptx.cpp): with each
    // iteration's copies the issuer asks the L2 for iteration + P's boxes; the loop's
    // step and bounds test (pipeline_prologue) to compute and check that iteration.
    int l2_prefetch = 0;
    llvm::Value* step = nullptr;
    std::function<llvm::Value*(llvm::Value*)> in_range;
  };
  // Re-lowering part of a loop body with other bindings (the values of a later
  // iteration: prefetch_nvptx.cpp, pipeline_nvptx.cpp): forget_bindings saves and
  // drops what `values` are bound to (and the memoized addresses and staging
  // state); restore_bindings drops what the re-lowering bound and puts them back.
  struct SavedBindings {
    std::vector<const ir::Value*> values;
    std::unordered_map<const ir::Value*, TileVal> tiles;
    std::unordered_map<const ir::Value*, llvm::Value*> scalars;
  };
  SavedBindings forget_bindings(std::vector<const ir::Value*> values);
  void restore_bindings(const SavedBindings& saved);
  std::optional<Pipeline> plan_pipeline(const ir::Block& body);
  // The carried values the copies' addresses read (`slice`: the body ops they need),
  // closed under their yields, into p.ahead_args and p.ops; false if a yield cannot be
  // evaluated ahead.
  bool plan_ahead_values(const ir::Block& body, const std::set<const ir::Op*>& slice,
                         const std::vector<const ir::Op*>& loads, Pipeline& p);
  // --- stream_ring_nvptx.cpp: a num_stages ring of a dot-free loop's loads ---------
  std::optional<Pipeline> plan_stream_ring(const ir::Block& body);
  void stream_issue(Pipeline& p, llvm::Value* stage, llvm::Value* active);
  void stream_iteration(const ir::Block& body, Pipeline& p, llvm::Value* step,
                        const std::function<llvm::Value*(llvm::Value*)>& in_range);
  // The registers of `load` read back from this iteration's stage, or {} when the load
  // is not in a stream ring.
  std::vector<llvm::Value*> streamed_load(const ir::Op& load);
  void issue_stage(const ir::Block& body, Pipeline& p, llvm::Value* iv, llvm::Value* stage, llvm::Value* active);
  void pipeline_prologue(const ir::Block& body, Pipeline& p, llvm::Value* lb, llvm::Value* step,
                         const std::vector<BlockedLayout>& layouts, const std::vector<std::vector<llvm::Value*>>& slots,
                         const std::function<llvm::Value*(llvm::Value*)>& in_range);
  void pipeline_iteration(const ir::Block& body, Pipeline& p, llvm::Value* step,
                          const std::function<llvm::Value*(llvm::Value*)>& in_range);
  void pipeline_end_iteration(Pipeline& p);
  void pipeline_epilogue(Pipeline& p);  // after the loop

  // --- tma_nvptx.cpp: ring stages filled by cp.async.bulk.tensor (sm_90a) ----
  struct TmaIndex {  // x + i along tile dim `dim` (i the index there)
    int dim = 0;
    const ir::Value* start = nullptr;  // x; nullptr: 0
  };
  struct TmaExtent {  // what the host reads: a constant or a kernel parameter
    char kind = 'c';  // 'c' constant; 'i' i32, 'u' u32, 'l' 64-bit parameter
    int64_t value = 1;  // the constant, or the parameter's index
    int64_t divisibility = 1;
  };
  struct TmaMap {  // one CUtensorMap kernel parameter, for one pipelined load or one tile store
    const ir::Op* op = nullptr;  // the load, or the store (tma_store_nvptx.cpp)
    bool store = false;
    int base_arg = 0;
    int elem_bytes = 2;
    int swizzle_bytes = 128;
    int64_t box_inner = 0, box_outer = 0;
    int copies = 1;            // boxes per stage (column blocks of an N-major B)
    int64_t copy_stride = 0;   // bytes between those boxes in the stage
    TmaExtent dim_inner, dim_outer, stride_outer;
    const ir::Value* start[2] = {nullptr, nullptr};  // coordinates of element [0, 0]
    int param = 0;             // its LLVM parameter
  };
  std::optional<TmaIndex> tma_index(const ir::Value* v, int dim_hint) const;
  std::optional<TmaExtent> tma_extent(const ir::Value* s) const;
  // A load's or store's address and mask as a tensor map's tile; geom: the ring stage's
  // format (nullptr: check the address and mask only, as for a store).
  std::optional<TmaMap> match_tma_access(const ir::Op& access, const StagedOperand* geom) const;
  void plan_tma(const ir::Block& body);  // fills tma_maps_ (constructor, after plan_wgmma's dots)
  const TmaMap* tma_map_of(const ir::Op* access) const;
  llvm::Value* bar_of(Pipeline& p, llvm::Value* stage);    // the stage's "full" mbarrier
  llvm::Value* empty_of(Pipeline& p, llvm::Value* stage);  // its "empty" mbarrier
  llvm::Value* smem32(llvm::Value* ptr);
  void tma_prologue(Pipeline& p);
  void tma_issue(Pipeline& p, llvm::Value* stage, llvm::Value* active);
  void tma_wait(Pipeline& p, llvm::Value* stage);
  void tma_advance_phase(Pipeline& p, llvm::Value* next_read_stage);
  void tma_epilogue(Pipeline& p);
  void tma_release_stage(Pipeline& p);  // end of an iteration: arrive on the retired stage's empty barrier
  // Spins (this thread) until `bar` (shared address) completed the phase of `parity`.
  void emit_mbarrier_wait(llvm::Value* bar, llvm::Value* parity);
  llvm::Value* tma_coord(const ir::Value* x);  // a box coordinate as i32 (nullptr: 0)
  // --- l2_prefetch_nvptx.cpp: the L2 asked for a TMA ring's boxes P iterations ahead ---
  // After issuing iteration `iv`'s copies (issue_stage): iteration iv + P's boxes as
  // cp.async.bulk.prefetch.tensor, where p.l2_prefetch = P > 0 and the boxes' coordinates
  // depend on no carried value.
  void tma_prefetch_l2(const ir::Block& body, Pipeline& p, llvm::Value* iv);

  // --- warp_specialize_nvptx.cpp: a producer warp for a loop's TMA ring ---------
  // Whether `loop` is specialized: asked for (its warp_specialize attribute) on sm_90a
  // with TMA rings; a CompilationError where asked for but impossible.
  bool warp_specialize_loop(const ir::Op& loop, const std::optional<Pipeline>& pipe);
  // Splits the CTA: the producer warp's loop of copies (then it returns); leaves the
  // builder in the consumers' block, where barriers are named ones from then on.
  void emit_producer(const ir::Block& body, Pipeline& p, llvm::Value* lb, llvm::Value* step,
                     const std::function<llvm::Value*(llvm::Value*)>& in_range);

  // --- ping_pong_nvptx.cpp: two consumer warpgroups taking a specialized loop's tiles in turn ---
  // Checks the loop (a CompilationError where asked but impossible) and fills p's
  // ping-pong fields.
  void plan_ping_pong(const ir::Op& loop, Pipeline& p);
  // One iteration of the consumers' loop: the body where it is this warpgroup's turn,
  // else only the ring's stage count and the carried scalars. load_args binds the body's
  // arguments to the carried slots; store_yields(values, scalars_only) stores them back.
  void ping_pong_iteration(const ir::Block& body, Pipeline& p, llvm::Value* step,
                           const std::function<llvm::Value*(llvm::Value*)>& in_range,
                           const std::function<void()>& load_args,
                           const std::function<void(const std::vector<const ir::Value*>&, bool)>& store_yields);
  // After the loop: both warpgroups are out of it; warpgroup 1 returns, 0 goes on alone.
  void ping_pong_exit(Pipeline& p);
  // Entering the branch that ends a run: release its stage, let the other warpgroup's run start.
  void ping_pong_hand_over(Pipeline& p);
  void emit_ping_pong_barriers(Pipeline& p);  // before the split: the turn mbarriers
  // Shared memory at `offset` of `bytes` per consumer warpgroup: in the ping-pong loop's
  // body each warpgroup's own copy (the region holds two), elsewhere the region itself.
  llvm::Value* group_smem(int64_t offset, int64_t bytes);

  // --- lower_atomic_nvptx.cpp: atomic_rmw / atomic_cas ---------------------
  void lower_atomic(const ir::Op& op);
  bool has_uses(const ir::Value* v);

  // --- lower_debug_nvptx.cpp: print (vprintf) and assert (__assertfail) -----
  void lower_print(const ir::Op& op);
  void lower_assert(const ir::Op& op);
  llvm::Value* global_cstring(const std::string& text);  // generic pointer

  const ir::Kernel& k_;
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  int num_warps_, num_threads_;
  bool debug_;
  // float +, -, * of the kernel may contract to FMAs (the kernel's fp_fusion attribute,
  // kernel_fp_fusion: on unless TESSERA_GPU_FP_FUSION=0).
  bool fp_fusion_ = true;
  int cc_;
  int num_stages_;
  bool wgmma_;
  bool tma_;
  bool tma_cta_barrier_;          // tma mode 2
  bool tma_store_enabled_;        // not tma mode 4 (TMA rings, stores as before)
  // A warp-specialized loop keeps a wgmma group in flight from 3 stages (tma mode 3, to
  // measure against: from 4, as unspecialized loops).
  bool ws_inflight_from_3_;
  bool planning_ = false;         // plan_wgmma is running: keep loads that only the TMA can copy
  std::vector<TmaMap> tma_maps_;  // from plan_tma
  std::set<const ir::Op*> wgmma_dots_;  // from plan_wgmma
  std::set<const ir::Op*> wgmma_swapped_dots_;  // from plan_wgmma: computed as C^T = B^T A^T
  std::set<const ir::Op*> wgmma_async_dots_;  // wgmma dots that wait_group 1 (pipeline_nvptx.cpp)
  // (if op, region) -> in-flight wgmma results that region reads: lower_if waits for
  // them (wait_group 0) on entering it (a persistent matmul's epilogue, pipeline_nvptx.cpp).
  std::map<std::pair<const ir::Op*, int>, std::set<const ir::Value*>> wgmma_wait_in_branch_;
  // Dot operands read from a pipeline's ring stage this iteration (pipeline_nvptx.cpp).
  std::unordered_map<const ir::Value*, StagedOperand> pipelined_;
  std::set<const ir::Op*> dot_rows_only_;  // from plan_dots
  // Loads of the stream ring of the loop being lowered -> (their plan, this iteration's stage).
  std::unordered_map<const ir::Op*, std::pair<const StreamLoad*, llvm::Value*>> streamed_;
  std::set<const ir::Value*> prefetched_;  // loads whose value a loop carries in (prefetch)
  llvm::Value* extra_load_pred_ = nullptr; // ANDed into tile loads' masks (prefetch)
  llvm::GlobalVariable* dyn_smem_ = nullptr;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  analysis::AxisAnalysis axis_;
  llvm::Value* tid_ = nullptr;
  llvm::Value* pid_[3] = {};
  llvm::Value* nprog_[3] = {};
  std::map<std::vector<int64_t>, int> shape_vec_;  // per tile shape: elements per thread run
  std::unordered_map<const ir::Value*, BlockedLayout> load_layout_;  // from plan_load_layouts
  std::unordered_map<const ir::Value*, llvm::Value*> scalars_;
  std::unordered_map<const ir::Value*, TileVal> tiles_;
  // at() results, valid in the basic block they were emitted in.
  std::unordered_map<std::string, llvm::Value*> memo_;
  std::unordered_map<const ir::Value*, BlockedLayout> hint_memo_;
  std::set<const ir::Value*> hint_none_;
  std::unordered_map<const ir::Value*, llvm::Value*> smem_of_;
  std::set<std::pair<const ir::Value*, llvm::BasicBlock*>> smem_written_;
  int shared_bytes_ = 0;
  std::unordered_map<const llvm::Value*, int64_t> smem_offset_;  // new_smem's regions: byte offsets
  // (offset, bytes) of pipelined loops' rings once their loop is done: scratch for
  // store_through_smem (every use of that memory is fenced by barriers).
  std::vector<std::pair<int64_t, int64_t>> dead_smem_;
  std::vector<std::pair<int64_t, int64_t>> store_smem_;  // store_through_smem's own buffers (offset, bytes)
  // tma_store's chunk buffers (allocated by the first such store, shared by the later ones):
  // tma_store_bufs_ of tma_store_chunk_bytes_ each from tma_store_smem_.
  llvm::Value* tma_store_smem_ = nullptr;
  int tma_store_bufs_ = 0;
  int64_t tma_store_chunk_bytes_ = 0;
  int smem_count_ = 0;
  int cluster_ = 0;                      // the kernel's cluster size (cluster_nvptx.cpp), 0: none
  llvm::Value* cluster_buf_ = nullptr;   // its exchange buffer (f32)
  // Staging buffers for dot operands, shared by every dot (lower_dot_nvptx.cpp).
  llvm::Value* dot_smem_[2] = {};
  int64_t dot_stage_bytes_[2] = {};   // one copy of each staging buffer
  bool dot_double_buffered_ = false;  // two copies, alternated by dot_phase_
  llvm::Value* dot_phase_ = nullptr;  // i32 alloca: the copy the next dot writes
  std::set<const ir::Value*> used_;  // values some op uses (for has_uses)
  bool used_ready_ = false;
  // Warp specialization (warp_specialize_nvptx.cpp): the producer's threads past the
  // consumers' num_threads_; lowering the producer's loop; past the split (barriers
  // are bar.sync 1 over the consumers).
  int producer_threads_ = 0;
  bool in_producer_ = false;
  bool consumer_barriers_ = false;
  int consumer_threads_ = 0;  // threads a consumers' barrier waits for
  // Ping-pong (ping_pong_nvptx.cpp): consumer warpgroups launched (1 or 2); this thread's
  // (i32 0/1, past the split); the instruction before which values of group_ are
  // computed (it dominates every consumer block); lowering the loop's body (barriers and
  // new shared memory are the warpgroup's own).
  int consumer_groups_ = 1;
  // The split state above (and the thread id ping-pong renumbers), per path: lower_if
  // lowers each branch of an if from the state before it, so that each branch of a
  // kernel-level if may specialize its own loop (a program runs one branch).
  struct SplitState {
    int producer_threads, consumer_threads, consumer_groups;
    bool consumer_barriers;
    llvm::Value* tid;
    llvm::Value* group;
    llvm::Instruction* group_anchor;
    // The same threads go on, with the same barriers.
    bool same_threads(const SplitState& o) const {
      return consumer_barriers == o.consumer_barriers && consumer_threads == o.consumer_threads &&
             consumer_groups == o.consumer_groups && tid == o.tid;
    }
    bool operator==(const SplitState& o) const { return same_threads(o) && producer_threads == o.producer_threads; }
  };
  SplitState split_state() const {
    return {producer_threads_, consumer_threads_, consumer_groups_, consumer_barriers_, tid_, group_, group_anchor_};
  }
  void restore_split_state(const SplitState& s);
  void leave_extra_threads();
  void count_specialize_asks(const ir::Block& b);
  int launch_threads_ = 0;     // the largest block a split asked for (the launch's)
  int specialize_asks_ = 0;    // loops of the kernel that ask for warp specialization
  llvm::Value* group_ = nullptr;
  llvm::Instruction* group_anchor_ = nullptr;
  bool in_ping_pong_ = false;
  Pipeline* ping_pong_ = nullptr;  // the ping-pong loop's pipeline while it is lowered
};

}  // namespace tessera::codegen::nvptx
