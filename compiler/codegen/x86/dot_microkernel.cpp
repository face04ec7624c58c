// The CPU dot C += A·B as LLVM IR: BLIS-style register-blocked micro-tiles (accumulators
// in vector registers across the k loop, B row-vectors loaded, A broadcast, fused mul-add),
// with f16/bf16/i8 operands widened once into packed panels when they are reused.
#include "codegen/x86/dot_microkernel.h"

#include <llvm/ADT/STLFunctionalExtras.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/ErrorHandling.h>

#include <algorithm>
#include <vector>

namespace tessera::codegen::x86 {
namespace {

using llvm::Value;

// How C is cut into micro-tiles of rows × (vectors · lanes) elements.
//
// Worked example, f32 on AVX-512 (32 zmm registers, 16 lanes), M = N = 128, K = 64:
// micro-tiles are 8 rows × 2 vectors = 8×32 elements: 16 accumulators + 2 B vectors + 1
// broadcast = 19 registers. Per k step: load B[k][j0 .. j0+32) as 2 zmm, then for each of
// the 8 rows broadcast A[i0+r][k] and issue 2 vfmadd231ps: 16 FMAs for 10 loads; the k
// loop is unrolled by 2. N = 128 gives 4 column blocks, M = 128 gives 16 row blocks.
// Column blocks form the outer loop so the K×32 panel of B stays in L1 while all row
// blocks stream A past it. (3 vectors would leave a remainder block for every power-of-two
// N, and on Zen 4 measured no faster: both are FMA-bound at ~113 GFLOP/s.)
// On AVX2 (16 ymm, 8 lanes) the tile is 6 rows × 2 vectors (BLIS's Haswell 6×16): 12
// accumulators + 2 B vectors + 1 broadcast (+1 product for i32) = 15-16 registers, k
// unrolled by 4. 8 accumulators (4×2) are too few to hide FMA latency (~60% of peak).
// M = 128 leaves 2 rows, run as a 2-row tile.
struct Blocking {
  int lanes;     // accumulator elements per vector register
  int rows;      // MR
  int vectors;   // NR, in vector registers
  int k_unroll;  // k steps per iteration of the k loop
};

Blocking choose_blocking(int vector_bits, llvm::Type* acc_ty) {
  Blocking blk;
  blk.lanes = std::max(1, vector_bits / static_cast<int>(acc_ty->getScalarSizeInBits()));
  blk.rows = vector_bits >= 512 ? 8 : 6;  // 32 vector registers, or 16
  blk.vectors = 2;
  // Enough unrolling that an iteration issues at least 32 FMAs of the full tile.
  blk.k_unroll = 1;
  while (blk.rows * blk.vectors * blk.k_unroll < 32) blk.k_unroll *= 2;
  return blk;
}

// Packing: when a micro-panel is read often enough that a copy pays.
//
// A is a dense row-major M×K tile, so the MR×K micro-panel of A that a row block reads
// is already one contiguous run of MR·K elements: it needs no copy, only a widening to
// the accumulator type for f16/bf16/i8 inputs (else every broadcast converts again, once
// per column block). B's K×NR panel for a column block has rows N elements apart; it is
// copied, widened, into one contiguous K×NR buffer (8 KiB for f32, K = 64, NR = 32: it
// stays in L1 while every row block of the column block reads it, with aligned loads).
//
// When it pays, measured on the 2-core Zen 4 (AVX-512) of bench/matmul.py, best of N on
// a shared machine, 1024³, tiles 128×128×64 and 128×256×64:
//   f16 inputs: 74-157 GFLOP/s unpacked, 180-191 packed (the conversion, vcvtph2ps, runs
//               once per element instead of once per row block or column block);
//   bf16:       146-157 unpacked, 167-173 packed (bf16 -> f32 is a 16-bit shift);
//   f32:        packing B was 0-5% slower at tiles 64..256 wide and K = 32..128: the
//               copy costs K·NR loads and stores per column block and Zen 4's L1
//               prefetchers already stream the strided rows, so f32/f64 (and anything
//               else that needs no widening) are not copied.
// A copy only pays where it is read by at least two row blocks (B) or two column
// blocks (A); below that the unpacked path converts each element once anyway.
DotPacking choose_packing(DotShape s, llvm::Type* a_ty, llvm::Type* c_ty, const Blocking& blk,
                          DotLayout layout) {
  DotPacking p;
  int width = std::min(blk.lanes, s.N);
  int cols_per_block = blk.vectors * width;
  bool widens = a_ty != c_ty;  // a_ty == b_ty (checked by emit_dot)
  p.pack_b = layout.b_transposed || (widens && s.N >= cols_per_block && s.M >= 2 * blk.rows);
  p.convert_a = widens && s.N >= 2 * cols_per_block;
  return p;
}

// One matrix operand as the micro-tiles read it: element (row, col) is at
// base + row * row_stride + col * col_stride, of type elem. B operands (read as row
// vectors) always have col_stride 1; A may be transposed (row_stride 1).
struct Operand {
  Value* base;
  llvm::Type* elem;
  int64_t row_stride;
  llvm::Align align;  // of every vector load from it
  int64_t col_stride = 1;
};

class DotEmitter {
 public:
  DotEmitter(llvm::IRBuilderBase& b, Value* a, Value* bm, Value* c, DotShape shape,
             llvm::Type* a_ty, llvm::Type* b_ty, llvm::Type* c_ty, int vector_bits, DotStart start,
             bool c_first, DotLayout layout, const MicroTileHook& each_micro_tile)
      : each_micro_tile_(each_micro_tile),
        start_(start),
        layout_(layout),
        c_first_(c_first),
        b_(b),
        a_(a),
        b_mat_(bm),
        c_(c),
        s_(shape),
        a_ty_(a_ty),
        b_ty_(b_ty),
        c_ty_(c_ty),
        blk_(choose_blocking(vector_bits, c_ty)),
        packing_(choose_packing(shape, a_ty, c_ty, blk_, layout)),
        fn_(b.GetInsertBlock()->getParent()) {}

  void emit() {
    llvm::BasicBlock* after = split_off_callers_code();
    // A row of N < lanes elements is a single narrower vector (N is a power of two).
    int width = std::min(blk_.lanes, s_.N);
    int n_vectors = s_.N / width;
    int col_blocks = n_vectors / blk_.vectors;
    int rem_vectors = n_vectors % blk_.vectors;
    int cols_per_block = blk_.vectors * width;
    Operand a = layout_.a_transposed ? Operand{a_, a_ty_, 1, elem_align(a_ty_), s_.M}
                                     : Operand{a_, a_ty_, s_.K, elem_align(a_ty_)};
    if (packing_.convert_a) a = widen_a(a);
    Value* b_panel = nullptr;
    if (packing_.pack_b) b_panel = scratch(c_ty_, int64_t(s_.K) * cols_per_block);
    // The columns [j0, j0 + cols) of B as the micro-tiles read them.
    auto b_columns = [&](Value* j0, int cols) {
      if (layout_.b_transposed) return pack_transposed_b_panel(j0, b_panel, cols, width);
      Operand bcols{b_.CreateGEP(b_ty_, b_mat_, j0), b_ty_, s_.N, elem_align(b_ty_)};
      return b_panel ? pack_b_panel(bcols, b_panel, cols, width) : bcols;
    };
    if (col_blocks > 0) {
      emit_loop(col_blocks, "dot.cols", [&](Value* jb) {
        Value* j0 = b_.CreateMul(jb, i64(cols_per_block));
        col_block_ = jb;
        col_blocks_ = col_blocks;
        emit_row_blocks(a, b_columns(j0, cols_per_block), j0, blk_.vectors, width);
        col_block_ = nullptr;
      });
    }
    if (rem_vectors > 0) {
      Value* j0 = i64(col_blocks * cols_per_block);
      Operand bcols = layout_.b_transposed ? b_columns(j0, rem_vectors * width)
                                           : Operand{b_.CreateGEP(b_ty_, b_mat_, j0), b_ty_, s_.N, elem_align(b_ty_)};
      emit_row_blocks(a, bcols, j0, rem_vectors, width);
    }
    b_.CreateBr(after);
    b_.SetInsertPoint(after, after->begin());
  }

 private:
  // A widened to the accumulator type into a scratch buffer, `lanes` elements a step
  // (A is dense either way round, so the copy keeps its layout).
  Operand widen_a(const Operand& a) {
    int64_t count = int64_t(s_.M) * s_.K;
    int width = static_cast<int>(std::min<int64_t>(blk_.lanes, count));
    Value* out = scratch(c_ty_, count);
    auto* in_ty = llvm::FixedVectorType::get(a_ty_, width);
    auto* out_ty = llvm::FixedVectorType::get(c_ty_, width);
    int64_t steps = count / width;
    int unroll = static_cast<int>(std::min<int64_t>(4, steps));
    emit_loop(steps / unroll, "dot.widen_a", [&](Value* it) {
      for (int u = 0; u < unroll; ++u) {
        Value* at = b_.CreateMul(b_.CreateAdd(b_.CreateMul(it, i64(unroll)), i64(u)), i64(width));
        Value* v = b_.CreateAlignedLoad(in_ty, b_.CreateGEP(a_ty_, a_, at), elem_align(a_ty_));
        b_.CreateAlignedStore(widen(v, out_ty), b_.CreateGEP(c_ty_, out, at), vector_align(width));
      }
    });
    return Operand{out, c_ty_, a.row_stride, vector_align(width), a.col_stride};
  }

  // The K×cols panel of B at `bcols`, copied (and widened) row by row into `panel`.
  Operand pack_b_panel(const Operand& bcols, Value* panel, int cols, int width) {
    auto* in_ty = llvm::FixedVectorType::get(b_ty_, width);
    auto* out_ty = llvm::FixedVectorType::get(c_ty_, width);
    int unroll = std::min(4, s_.K);
    emit_loop(s_.K / unroll, "dot.pack_b", [&](Value* it) {
      for (int u = 0; u < unroll; ++u) {
        Value* k = b_.CreateAdd(b_.CreateMul(it, i64(unroll)), i64(u));
        Value* src = b_.CreateGEP(b_ty_, bcols.base, b_.CreateMul(k, i64(bcols.row_stride)));
        Value* dst = b_.CreateGEP(c_ty_, panel, b_.CreateMul(k, i64(cols)));
        for (int v = 0; v < cols / width; ++v) {
          Value* raw = b_.CreateAlignedLoad(in_ty, b_.CreateGEP(b_ty_, src, i64(v * width)), bcols.align);
          b_.CreateAlignedStore(widen(raw, out_ty), b_.CreateGEP(c_ty_, dst, i64(v * width)),
                                vector_align(width));
        }
      }
    });
    return Operand{panel, c_ty_, cols, vector_align(width)};
  }

  // The K×cols panel of B from columns j0.. of a transposed B (buffer B^T, N×K row-major:
  // column n of B is the K contiguous elements of row n of B^T), widened, into `panel`.
  //
  // Worked example, f32 on AVX-512, K = 64, cols = 32: for each of the 4 k blocks and 2
  // column blocks, load 16 rows of B^T as 16 zmm (row c holds B[k0 .. k0+16)[j0+c]),
  // transpose them in registers (4 rounds of 16 two-source shuffles: round h swaps
  // h×h blocks between pairs of registers h apart), and store register i as panel row
  // k0+i. 64 shuffles per 256 elements, against a 16-lane gather per 16 elements when the
  // transposed tile is copied element by element. K or N below the vector width (tiny
  // tiles) copy one element at a time.
  Operand pack_transposed_b_panel(Value* j0, Value* panel, int cols, int width) {
    Value* src = b_.CreateGEP(b_ty_, b_mat_, b_.CreateMul(j0, i64(s_.K)));
    if (s_.K % width != 0) {
      emit_loop(s_.K, "dot.pack_bt", [&](Value* k) {
        for (int c = 0; c < cols; ++c) {
          Value* at = b_.CreateAdd(k, i64(int64_t(c) * s_.K));
          Value* v = load(b_ty_, b_.CreateGEP(b_ty_, src, at), b_ty_);
          store(widen(v, c_ty_), b_.CreateGEP(c_ty_, panel, b_.CreateAdd(b_.CreateMul(k, i64(cols)), i64(c))),
                c_ty_);
        }
      });
      return Operand{panel, c_ty_, cols, elem_align(c_ty_)};
    }
    auto* in_ty = llvm::FixedVectorType::get(b_ty_, width);
    auto* out_ty = llvm::FixedVectorType::get(c_ty_, width);
    emit_loop(s_.K / width, "dot.pack_bt", [&](Value* kb) {
      Value* k0 = b_.CreateMul(kb, i64(width));
      for (int cb = 0; cb < cols / width; ++cb) {
        std::vector<Value*> rows(width);
        for (int c = 0; c < width; ++c) {
          Value* at = b_.CreateAdd(k0, i64(int64_t(cb * width + c) * s_.K));
          rows[c] = widen(load(in_ty, b_.CreateGEP(b_ty_, src, at), b_ty_), out_ty);
        }
        transpose_in_registers(rows);
        for (int i = 0; i < width; ++i) {
          Value* row = b_.CreateMul(b_.CreateAdd(k0, i64(i)), i64(cols));
          b_.CreateAlignedStore(rows[i], b_.CreateGEP(c_ty_, panel, b_.CreateAdd(row, i64(cb * width))),
                                vector_align(width));
        }
      }
    });
    return Operand{panel, c_ty_, cols, vector_align(width)};
  }

  // rows[i][j] = M[i][j] becomes rows[i][j] = M[j][i] (W = rows.size() vectors of W lanes,
  // a power of two). Round h exchanges bit h of the row index with bit h of the lane
  // index: for rows r and r + h (bit h of r clear), lanes with bit h clear stay, and
  // lanes with bit h set come from the other row h lanes away.
  void transpose_in_registers(std::vector<Value*>& rows) {
    int w = static_cast<int>(rows.size());
    for (int h = 1; h < w; h *= 2) {
      std::vector<int> lo_mask(w), hi_mask(w);
      for (int j = 0; j < w; ++j) {
        bool set = (j & h) != 0;
        lo_mask[j] = set ? w + j - h : j;  // row r:     a[j], or b[j - h]
        hi_mask[j] = set ? w + j : j + h;  // row r + h: a[j + h], or b[j]
      }
      for (int r = 0; r < w; ++r) {
        if (r & h) continue;
        Value* a = rows[r];
        Value* b = rows[r + h];
        rows[r] = b_.CreateShuffleVector(a, b, lo_mask);
        rows[r + h] = b_.CreateShuffleVector(a, b, hi_mask);
      }
    }
  }

  // All row blocks of one column block starting at column j0 of C.
  void emit_row_blocks(const Operand& a, const Operand& bcols, Value* j0, int vectors, int width) {
    int row_blocks = s_.M / blk_.rows;
    int rem_rows = s_.M % blk_.rows;
    if (row_blocks > 0) {
      emit_loop(row_blocks, "dot.rows", [&](Value* ib) {
        if (each_micro_tile_ && col_block_)
          each_micro_tile_(b_.CreateAdd(b_.CreateMul(col_block_, i64(row_blocks)), ib), col_blocks_ * row_blocks);
        emit_micro_tile(a, bcols, b_.CreateMul(ib, i64(blk_.rows)), j0, blk_.rows, vectors, width);
      });
    }
    if (rem_rows > 0)
      emit_micro_tile(a, bcols, i64(row_blocks * blk_.rows), j0, rem_rows, vectors, width);
  }

  // C[i0 .. i0+rows)[j0 .. j0+vectors·width) += A[i0 .. i0+rows)[:] · B[:][j0 .. ), with B's
  // columns from j0 on at `bcols`: accumulators live in registers across the k loop,
  // and C is read (LoadC, ZeroThenAdd) and stored once.
  void emit_micro_tile(const Operand& a, const Operand& bcols, Value* i0, Value* j0, int rows,
                       int vectors, int width) {
    auto* acc_vec_ty = llvm::FixedVectorType::get(c_ty_, width);
    auto* b_vec_ty = llvm::FixedVectorType::get(bcols.elem, width);
    std::vector<Value*> a_rows(rows), c_ptrs(rows * vectors);
    for (int r = 0; r < rows; ++r) {
      Value* i = b_.CreateAdd(i0, i64(r));
      a_rows[r] = b_.CreateGEP(a.elem, a.base, b_.CreateMul(i, i64(a.row_stride)));
      Value* c_row = b_.CreateGEP(c_ty_, c_, b_.CreateAdd(b_.CreateMul(i, i64(s_.N)), j0));
      for (int v = 0; v < vectors; ++v)
        c_ptrs[r * vectors + v] = b_.CreateGEP(c_ty_, c_row, i64(v * width));
    }
    std::vector<Value*> acc(rows * vectors);
    for (size_t t = 0; t < acc.size(); ++t)
      acc[t] = start_ == DotStart::LoadC ? load(acc_vec_ty, c_ptrs[t], c_ty_)
                                         : llvm::Constant::getNullValue(acc_vec_ty);

    auto k_step = [&](Value* k, std::vector<Value*>& acc) {
      std::vector<Value*> b_vecs(vectors);
      Value* b_row = b_.CreateGEP(bcols.elem, bcols.base, b_.CreateMul(k, i64(bcols.row_stride)));
      for (int v = 0; v < vectors; ++v) {
        Value* raw = b_.CreateAlignedLoad(b_vec_ty, b_.CreateGEP(bcols.elem, b_row, i64(v * width)),
                                          bcols.align);
        b_vecs[v] = widen(raw, acc_vec_ty);
      }
      for (int r = 0; r < rows; ++r) {
        Value* a_elem = load(a.elem, b_.CreateGEP(a.elem, a_rows[r], b_.CreateMul(k, i64(a.col_stride))), a.elem);
        Value* a_splat = b_.CreateVectorSplat(width, widen(a_elem, c_ty_));
        for (int v = 0; v < vectors; ++v)
          acc[r * vectors + v] = mul_add(a_splat, b_vecs[v], acc[r * vectors + v]);
      }
    };

    int unroll = std::min(blk_.k_unroll, s_.K);  // both powers of two: divides K
    if (s_.K == unroll) {
      for (int k = 0; k < s_.K; ++k) k_step(i64(k), acc);
    } else {
      emit_loop_carrying(s_.K / unroll, "dot.k", acc, [&](Value* kb, std::vector<Value*>& acc) {
        Value* k0 = b_.CreateMul(kb, i64(unroll));
        for (int u = 0; u < unroll; ++u) k_step(b_.CreateAdd(k0, i64(u)), acc);
      });
    }
    for (size_t t = 0; t < acc.size(); ++t) {
      Value* out = acc[t];
      if (start_ == DotStart::ZeroThenAdd) {
        Value* c = load(acc_vec_ty, c_ptrs[t], c_ty_);
        Value* lhs = c_first_ ? c : out;
        Value* rhs = c_first_ ? out : c;
        out = c_ty_->isIntegerTy() ? b_.CreateAdd(lhs, rhs) : b_.CreateFAdd(lhs, rhs);
      }
      store(out, c_ptrs[t], c_ty_);
    }
  }

  // A 64-byte aligned buffer of `count` elements in the entry block (the dot may sit in
  // a loop; an alloca there would grow the stack every iteration).
  Value* scratch(llvm::Type* elem, int64_t count) {
    llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    auto* a = eb.CreateAlloca(elem, eb.getInt64(count));
    a->setAlignment(llvm::Align(64));
    return a;
  }
  // Vectors of `width` accumulator elements in a scratch buffer: rows of the buffers
  // are whole vectors, so every vector is aligned to its size (at most the 64 bytes of
  // the buffer).
  llvm::Align vector_align(int width) {
    uint64_t bytes = uint64_t(width) * c_ty_->getScalarSizeInBits() / 8;
    return llvm::Align(std::min<uint64_t>(64, llvm::PowerOf2Ceil(bytes)));
  }

  // f16 -> f32 (fpext: vcvtph2ps), bf16 -> f32 (the bits shifted up 16: bf16 is the top
  // half of an f32, and LLVM's generic bf16 fpext is slower), i8 -> i32 (sext);
  // f32/f64 unchanged.
  Value* widen(Value* v, llvm::Type* to) {
    if (v->getType() == to) return v;
    if (to->isIntOrIntVectorTy()) return b_.CreateSExt(v, to);
    if (v->getType()->getScalarType()->isBFloatTy()) {
      llvm::Type* i16 = b_.getInt16Ty();
      llvm::Type* i32 = b_.getInt32Ty();
      if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(v->getType())) {
        i16 = llvm::FixedVectorType::get(i16, vt->getNumElements());
        i32 = llvm::FixedVectorType::get(i32, vt->getNumElements());
      }
      Value* bits = b_.CreateZExt(b_.CreateBitCast(v, i16), i32);
      return b_.CreateBitCast(b_.CreateShl(bits, 16), to);
    }
    return b_.CreateFPExt(v, to);
  }

  Value* mul_add(Value* x, Value* y, Value* acc) {
    if (acc->getType()->isIntOrIntVectorTy()) return b_.CreateAdd(acc, b_.CreateMul(x, y));
    // fmuladd: vfmadd on FMA targets, mul + add (never a libm call) elsewhere.
    return b_.CreateIntrinsic(llvm::Intrinsic::fmuladd, {acc->getType()}, {x, y, acc});
  }

  Value* load(llvm::Type* ty, Value* ptr, llvm::Type* elem) {
    return b_.CreateAlignedLoad(ty, ptr, elem_align(elem));
  }
  void store(Value* v, Value* ptr, llvm::Type* elem) {
    b_.CreateAlignedStore(v, ptr, elem_align(elem));
  }
  // Tile buffers are only known to be element-aligned.
  llvm::Align elem_align(llvm::Type* elem) {
    return fn_->getParent()->getDataLayout().getABITypeAlign(elem);
  }

  Value* i64(int64_t v) { return b_.getInt64(v); }

  // `for (iv = 0; iv < count; ++iv) body(iv)` as a do-while loop (count >= 1 is known),
  // or just body(0) when count == 1. body may emit nested loops.
  void emit_loop(int64_t count, const char* name, llvm::function_ref<void(Value*)> body) {
    std::vector<Value*> none;
    emit_loop_carrying(count, name, none, [&](Value* iv, std::vector<Value*>&) { body(iv); });
  }

  // Same, with loop-carried values (the accumulators): each becomes a phi in the loop
  // header, body updates them in place, and on exit they hold the final values.
  void emit_loop_carrying(int64_t count, const char* name, std::vector<Value*>& carried,
                          llvm::function_ref<void(Value*, std::vector<Value*>&)> body) {
    if (count == 1) {
      body(i64(0), carried);
      return;
    }
    llvm::LLVMContext& ctx = b_.getContext();
    llvm::BasicBlock* preheader = b_.GetInsertBlock();
    llvm::BasicBlock* before = preheader->getNextNode();
    auto* header = llvm::BasicBlock::Create(ctx, name, fn_, before);
    auto* exit = llvm::BasicBlock::Create(ctx, llvm::Twine(name) + ".end", fn_, before);
    b_.CreateBr(header);
    b_.SetInsertPoint(header);
    llvm::PHINode* iv = b_.CreatePHI(b_.getInt64Ty(), 2, llvm::Twine(name) + ".iv");
    iv->addIncoming(i64(0), preheader);
    std::vector<llvm::PHINode*> phis;
    for (Value*& v : carried) {
      llvm::PHINode* phi = b_.CreatePHI(v->getType(), 2);
      phi->addIncoming(v, preheader);
      phis.push_back(phi);
      v = phi;
    }
    body(iv, carried);
    llvm::BasicBlock* latch = b_.GetInsertBlock();
    Value* next = b_.CreateAdd(iv, i64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
    iv->addIncoming(next, latch);
    for (size_t t = 0; t < phis.size(); ++t) phis[t]->addIncoming(carried[t], latch);
    b_.CreateCondBr(b_.CreateICmpEQ(next, i64(count)), exit, header);
    b_.SetInsertPoint(exit);
  }

  // The caller's instructions after the insertion point (if any, e.g. its terminator)
  // move to a new block that our code branches to at the end.
  llvm::BasicBlock* split_off_callers_code() {
    llvm::BasicBlock* cur = b_.GetInsertBlock();
    auto* after = llvm::BasicBlock::Create(b_.getContext(), "dot.end", fn_, cur->getNextNode());
    after->splice(after->end(), cur, b_.GetInsertPoint(), cur->end());
    if (after->getTerminator()) after->replaceSuccessorsPhiUsesWith(cur, after);
    b_.SetInsertPoint(cur);
    return after;
  }

  const MicroTileHook& each_micro_tile_;
  Value* col_block_ = nullptr;  // the column block's index while its row blocks are emitted
  int64_t col_blocks_ = 0;
  DotStart start_;
  DotLayout layout_;
  bool c_first_;
  llvm::IRBuilderBase& b_;
  Value* a_;
  Value* b_mat_;
  Value* c_;
  DotShape s_;
  llvm::Type* a_ty_;
  llvm::Type* b_ty_;
  llvm::Type* c_ty_;
  Blocking blk_;
  DotPacking packing_;
  llvm::Function* fn_;
};

bool is_power_of_two(int v) { return v >= 1 && (v & (v - 1)) == 0; }

bool supported_types(llvm::Type* a_ty, llvm::Type* b_ty, llvm::Type* c_ty) {
  if (a_ty != b_ty) return false;
  if (c_ty->isFloatTy()) return a_ty->isFloatTy() || a_ty->isHalfTy() || a_ty->isBFloatTy();
  if (c_ty->isDoubleTy()) return a_ty->isDoubleTy();
  if (c_ty->isIntegerTy(32)) return a_ty->isIntegerTy(8);
  return false;
}

}  // namespace

DotPacking choose_dot_packing(DotShape shape, llvm::Type* a_ty, llvm::Type* c_ty, int vector_bits,
                              DotLayout layout) {
  return choose_packing(shape, a_ty, c_ty, choose_blocking(vector_bits, c_ty), layout);
}

void emit_dot(llvm::IRBuilderBase& b, llvm::Value* a, llvm::Value* bm, llvm::Value* c,
              DotShape shape, llvm::Type* a_ty, llvm::Type* b_ty, llvm::Type* c_ty,
              int vector_bits, DotStart start, bool c_first, DotLayout layout,
              const MicroTileHook& each_micro_tile) {
  if (!supported_types(a_ty, b_ty, c_ty))
    llvm::report_fatal_error(
        "Tessera bug: emit_dot supports f32/f16/bf16 -> f32, f64 -> f64 "
        "and i8 -> i32 only");
  if (!is_power_of_two(shape.M) || !is_power_of_two(shape.N) || !is_power_of_two(shape.K))
    llvm::report_fatal_error("Tessera bug: emit_dot needs power-of-two M, N, K");
  llvm::IRBuilderBase::FastMathFlagGuard keep_callers_flags(b);
  b.clearFastMathFlags();
  DotEmitter(b, a, bm, c, shape, a_ty, b_ty, c_ty, vector_bits, start, c_first, layout, each_micro_tile).emit();
}

}  // namespace tessera::codegen::x86
