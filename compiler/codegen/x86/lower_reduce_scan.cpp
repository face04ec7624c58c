// x86 lowering, part 3: reductions and scans with a combine region, and dot.
//
// Worked example, tl.sum(x, axis=1) for x: tile<4x1024xf32> (reduce along the
// minor dim): for each of the 4 rows, acc = x[r, 0:16]; acc = acc + x[r, 16j:16j+16]
// for j = 1..63 (one vector add per chunk, x possibly a fused lazy chain); then a
// halving tree of shuffles+adds turns the 16 lanes into one scalar.
// Along a major axis (axis=0) the lanes stay vectors: acc = x[0, c:c+16];
// acc += x[i, c:c+16] for i = 1..3; store acc to the result chunk.
#include <llvm/IR/Intrinsics.h>

#include <cmath>

#include "codegen/common/combine_region.h"
#include "codegen/common/elementwise.h"
#include "codegen/x86/dot_microkernel.h"
#include "codegen/x86/kernel_lowering.h"

namespace tessera::codegen::x86 {

using namespace ir;

std::vector<llvm::Value*> KernelLowering::emit_combine(const Op& op, const std::vector<llvm::Value*>& lhs,
                                                      const std::vector<llvm::Value*>& rhs) {
  return emit_combine_region(
      b_, op, lhs, rhs, scalars_, [&](const Op& inner) { lower_op(inner); },
      [&](const Op& inner, const std::string& what) { unsupported(inner, what); });
}

namespace {
std::vector<int64_t> drop_dim(const std::vector<int64_t>& v, int d) {
  std::vector<int64_t> r = v;
  r.erase(r.begin() + d);
  return r;
}
}  // namespace

void KernelLowering::lower_reduce(const Op& op) {
  // max(max(x, axis=1), axis=0) of a [G, 4] tile: both at the outer reduce, over x whole
  if (op.results.size() == 1) {
    auto users = uses_.find(op.result());
    if (users != uses_.end() && users->second.size() == 1 && fusable_inner_reduce(*users->second[0]) == &op) {
      fused_inner_reduces_.insert(&op);
      return;
    }
  }
  if (const Op* inner = fusable_inner_reduce(op); inner && fused_inner_reduces_.count(inner))
    return lower_reduce_whole(op, *inner);
  size_t n = op.operands.size();
  const Type& st = op.operands[0]->type;
  int axis = static_cast<int>(op.int_attr("axis"));
  int rank = st.rank();
  std::vector<int64_t> rshape = drop_dim(st.shape, axis);
  bool scalar_result = rshape.empty();
  std::vector<TileRef> out(n);
  if (!scalar_result)
    for (size_t i = 0; i < n; ++i) out[i] = new_buffer(op.result(i)->type);

  // A pending operand (deferred materialization) is stored as it is read.
  const Value* pending_v = pending_.count(op.operands[0]) ? op.operands[0] : nullptr;
  auto load_all = [&](const Chunk& c) {
    std::vector<llvm::Value*> v;
    for (size_t i = 0; i < n; ++i) v.push_back(emit_chunk(op.operands[i], c));
    if (pending_v) {
      const TileRef& buf = pending_[pending_v];
      b_.CreateStore(to_mem(b_, v[0], pending_v->type.elem), view_address(buf, pending_v->type, c));
    }
    return v;
  };
  auto make_slots = [&](const std::vector<llvm::Value*>& init) {
    std::vector<llvm::Value*> slots;
    for (llvm::Value* v : init) {
      llvm::Value* s = alloca_in_entry(v->getType(), 1);
      b_.CreateStore(v, s);
      slots.push_back(s);
    }
    return slots;
  };
  auto read_slots = [&](const std::vector<llvm::Value*>& slots, const std::vector<llvm::Value*>& like) {
    std::vector<llvm::Value*> v;
    for (size_t i = 0; i < slots.size(); ++i) v.push_back(b_.CreateLoad(like[i]->getType(), slots[i]));
    return v;
  };
  auto store_result = [&](const Chunk& c, const std::vector<llvm::Value*>& vals) {
    Chunk rc;
    rc.width = c.width;
    rc.rows = c.rows;
    for (int d = 0; d < rank; ++d)
      if (d != axis) rc.idx.push_back(c.idx[d]);
    for (size_t i = 0; i < n; ++i) {
      const ElemType& e = op.result(i)->type.elem;
      b_.CreateStore(to_mem(b_, vals[i], e), view_address(out[i], op.result(i)->type, rc));
    }
  };

  std::vector<const Value*> roots(op.operands.begin(), op.operands.end());
  if (int rows = axis == rank - 1 ? chunk_rows(st) : 1; rows > 1) {
    // Rows shorter than a vector (multi_row_chunks.cpp): `rows` of them per chunk,
    // combined within each row's lanes, one result lane per row.
    int minor = static_cast<int>(st.shape.back());
    versioned_loop_nest(roots, st.shape, rows * minor, -1, [&](Chunk& c) {
      std::vector<llvm::Value*> acc = combine_within_rows(op, load_all(c), rows, minor);
      Chunk rc = c;
      rc.rows = 1;
      rc.width = rows;
      store_result(rc, acc);
    }, nullptr, rows);
  } else if (axis == rank - 1) {
    int w = chunk_width(st);
    versioned_loop_nest(roots, st.shape, 1, axis, [&](Chunk& c) {
      // U independent accumulators (chunks j mod U) hide the combine latency;
      // they are merged pairwise at the end (the combiner is associative).
      Chunk cc = c;
      cc.width = w;
      int64_t chunks = st.shape[axis] / w;
      int u_count = static_cast<int>(std::min<int64_t>(4, chunks));
      std::vector<std::vector<llvm::Value*>> accs;
      for (int u = 0; u < u_count; ++u) {
        cc.idx[axis] = b_.getInt64(u * w);
        accs.push_back(load_all(cc));
      }
      if (chunks > u_count) {
        std::vector<std::vector<llvm::Value*>> slots;
        for (auto& a : accs) slots.push_back(make_slots(a));
        counted_loop(st.shape[axis] - u_count * w, u_count * w, [&](llvm::Value* iv) {
          for (int u = 0; u < u_count; ++u) {
            cc.idx[axis] = b_.CreateAdd(iv, b_.getInt64((u_count + u) * w));
            auto cur = read_slots(slots[u], accs[u]);
            auto nxt = emit_combine(op, cur, load_all(cc));
            for (size_t i = 0; i < n; ++i) b_.CreateStore(nxt[i], slots[u][i]);
          }
        });
        for (int u = 0; u < u_count; ++u) accs[u] = read_slots(slots[u], accs[u]);
      }
      while (accs.size() > 1) {
        std::vector<std::vector<llvm::Value*>> next;
        for (size_t u = 0; u + 1 < accs.size(); u += 2) next.push_back(emit_combine(op, accs[u], accs[u + 1]));
        accs = next;
      }
      std::vector<llvm::Value*> acc = accs[0];
      // Halving tree across lanes.
      for (int width = w; width > 1; width /= 2) {
        int h = width / 2;
        std::vector<llvm::Value*> lo, hi;
        for (llvm::Value* v : acc) {
          if (h == 1) {
            lo.push_back(b_.CreateExtractElement(v, uint64_t(0)));
            hi.push_back(b_.CreateExtractElement(v, uint64_t(1)));
          } else {
            std::vector<int> l, r;
            for (int i = 0; i < h; ++i) l.push_back(i), r.push_back(h + i);
            lo.push_back(b_.CreateShuffleVector(v, l));
            hi.push_back(b_.CreateShuffleVector(v, r));
          }
        }
        acc = emit_combine(op, lo, hi);
      }
      if (scalar_result) {
        for (size_t i = 0; i < n; ++i) scalars_[op.result(i)] = acc[i];
      } else {
        Chunk one = c;
        one.width = 1;
        store_result(one, acc);
      }
    });
  } else {
    int w = chunk_width(st);
    versioned_loop_nest(roots, st.shape, w, axis, [&](Chunk& c) {
      Chunk cc = c;
      cc.idx[axis] = b_.getInt64(0);
      std::vector<llvm::Value*> acc = load_all(cc);
      auto slots = make_slots(acc);
      counted_loop(st.shape[axis] - 1, 1, [&](llvm::Value* iv) {
        cc.idx[axis] = b_.CreateAdd(iv, b_.getInt64(1));
        auto nxt = emit_combine(op, read_slots(slots, acc), load_all(cc));
        for (size_t i = 0; i < n; ++i) b_.CreateStore(nxt[i], slots[i]);
      });
      store_result(c, read_slots(slots, acc));
    });
  }
  if (!scalar_result)
    for (size_t i = 0; i < n; ++i) tiles_[op.result(i)] = out[i];
  if (pending_v) {
    tiles_[pending_v] = pending_[pending_v];
    pending_.erase(pending_v);
  }
}

// reduce(reduce(x, axis=1), axis=0) for x: tile<G x L> (fusable_inner_reduce): x in
// multi-row chunks of R = 16 / L rows, U independent vector accumulators (chunks k mod
// U) as the 1-D reduce along the minor dim, then one halving tree to a scalar. The
// combine is associative and commutative, so the order of the lanes does not matter.
void KernelLowering::lower_reduce_whole(const Op& op, const Op& inner) {
  const Value* x = inner.operands[0];
  const Type& st = x->type;
  int rows = chunk_rows(st);
  int w = static_cast<int>(rows * st.shape.back());
  const Value* pending_v = pending_.count(x) ? x : nullptr;
  auto load = [&](const Chunk& c) {
    llvm::Value* v = emit_chunk(x, c);
    if (pending_v) {
      const TileRef& buf = pending_[pending_v];
      b_.CreateStore(to_mem(b_, v, x->type.elem), view_address(buf, x->type, c));
    }
    return std::vector<llvm::Value*>{v};
  };
  versioned_loop_nest({x}, st.shape, w, /*skip_dim=*/0, [&](Chunk& c) {
    Chunk cc = c;
    cc.rows = rows;
    cc.width = w;
    int64_t chunks = st.shape[0] / rows;
    int u_count = static_cast<int>(std::min<int64_t>(4, chunks));
    std::vector<std::vector<llvm::Value*>> accs;
    for (int u = 0; u < u_count; ++u) {
      cc.idx[0] = b_.getInt64(u * rows);
      accs.push_back(load(cc));
    }
    if (chunks > u_count) {
      std::vector<llvm::Value*> slots;
      for (auto& a : accs) {
        slots.push_back(alloca_in_entry(a[0]->getType(), 1));
        b_.CreateStore(a[0], slots.back());
      }
      llvm::Type* vt = accs[0][0]->getType();
      counted_loop(st.shape[0] - u_count * rows, u_count * rows, [&](llvm::Value* iv) {
        for (int u = 0; u < u_count; ++u) {
          cc.idx[0] = b_.CreateAdd(iv, b_.getInt64((u_count + u) * rows));
          auto nxt = emit_combine(op, {b_.CreateLoad(vt, slots[u])}, load(cc));
          b_.CreateStore(nxt[0], slots[u]);
        }
      });
      for (int u = 0; u < u_count; ++u) accs[u] = {b_.CreateLoad(vt, slots[u])};
    }
    while (accs.size() > 1) {
      std::vector<std::vector<llvm::Value*>> next;
      for (size_t u = 0; u + 1 < accs.size(); u += 2) next.push_back(emit_combine(op, accs[u], accs[u + 1]));
      accs = next;
    }
    // all w lanes as one row: a halving tree to one lane
    std::vector<llvm::Value*> acc = combine_within_rows(op, accs[0], 1, w);
    scalars_[op.result()] = b_.CreateExtractElement(acc[0], uint64_t(0));
  });
  if (pending_v) {
    tiles_[pending_v] = pending_[pending_v];
    pending_.erase(pending_v);
  }
}

void KernelLowering::lower_scan(const Op& op) {
  size_t n = op.operands.size();
  const Type& st = op.operands[0]->type;
  int axis = static_cast<int>(op.int_attr("axis"));
  int rank = st.rank();
  bool reverse = op.bool_attr("reverse");
  std::vector<TileRef> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = new_buffer(op.result(i)->type);
  int w = axis == rank - 1 ? 1 : chunk_width(st);
  int64_t len = st.shape[axis];
  loop_nest(st.shape, w, axis, [&](Chunk& c) {
    Chunk cc = c;
    auto at = [&](llvm::Value* i) {
      cc.idx[axis] = i;
      std::vector<llvm::Value*> v;
      for (size_t k = 0; k < n; ++k) v.push_back(emit_chunk(op.operands[k], cc));
      return v;
    };
    auto store_at = [&](const std::vector<llvm::Value*>& vals) {
      for (size_t k = 0; k < n; ++k)
        b_.CreateStore(to_mem(b_, vals[k], op.result(k)->type.elem), view_address(out[k], op.result(k)->type, cc));
    };
    llvm::Value* first = b_.getInt64(reverse ? len - 1 : 0);
    std::vector<llvm::Value*> acc = at(first);
    store_at(acc);
    if (len == 1) return;
    std::vector<llvm::Value*> slots;
    for (llvm::Value* v : acc) {
      llvm::Value* s = alloca_in_entry(v->getType(), 1);
      b_.CreateStore(v, s);
      slots.push_back(s);
    }
    auto body = [&](llvm::Value* iv) {
      llvm::Value* i = reverse ? b_.CreateSub(b_.getInt64(len - 2), iv) : b_.CreateAdd(iv, b_.getInt64(1));
      std::vector<llvm::Value*> cur;
      for (size_t k = 0; k < n; ++k) cur.push_back(b_.CreateLoad(acc[k]->getType(), slots[k]));
      auto x = at(i);
      // combine(carry, element) in both directions: a reverse scan is the forward scan
      // of the flipped sequence (as the interpreter and Triton define it).
      auto nxt = emit_combine(op, cur, x);
      for (size_t k = 0; k < n; ++k) b_.CreateStore(nxt[k], slots[k]);
      store_at(nxt);
    };
    if (len - 1 == 1) body(b_.getInt64(0));
    else counted_loop(len - 1, 1, body);
  });
  for (size_t i = 0; i < n; ++i) tiles_[op.result(i)] = out[i];
}

namespace {

bool is_zero_constant(const Value* v) {
  const Op* d = v->def();
  if (!d || d->kind != OpKind::Const) return false;
  const Attr& a = d->attrs.at("value");
  if (std::holds_alternative<double>(a)) return std::get<double>(a) == 0.0 && !std::signbit(std::get<double>(a));
  if (std::holds_alternative<int64_t>(a)) return std::get<int64_t>(a) == 0;
  return false;
}

}  // namespace

// The K loop of a matmul, `acc += tl.dot(a, b)`, is dot(a, b, 0) then add(acc, that)
// yielded as the new acc. When the add is the carried acc's only use and the
// dot's only use, the dot sums from zero in registers and adds the carried value
// in its store (one rounded add, as written), in place: no buffer for the dot, no
// zero-fill, no separate add pass and no copy back at the yield.
const Op* KernelLowering::fusable_dot_add(const Op& dot, const Value*& carried) {
  if (!is_zero_constant(dot.operands[2])) return nullptr;
  const Value* r = dot.result();
  if (uses_[r].size() != 1) return nullptr;
  const Op* add = uses_[r][0];
  if (add->kind != OpKind::Add || add->parent != dot.parent || add->operands[0] == add->operands[1]) return nullptr;
  const Value* x = add->operands[0] == r ? add->operands[1] : add->operands[0];
  const Block* body = dot.parent;
  if (x->arg_owner() != body || x->index() < 1 || !body->parent() || !body->parent()->parent() ||
      body->parent()->parent()->kind != OpKind::For || x->type != r->type || uses_[x].size() != 1)
    return nullptr;
  const Op* y = body->terminator();
  const Value* sum = add->result();
  if (uses_[sum].size() != 1 || uses_[sum][0] != y || y->operands[x->index() - 1] != sum) return nullptr;
  auto it = tiles_.find(x);
  if (it == tiles_.end() || !is_contiguous(it->second, x->type)) return nullptr;
  carried = x;
  return add;
}

// A dot operand's buffer, and whether it holds the operand transposed: a permuted view
// of a dense buffer (`tl.trans(tl.load(...))`, strides (1, rows)) goes to emit_dot as
// it is, which reads or packs it transposed, instead of being copied element by
// element (a gather per vector) into a row-major buffer first.
TileRef KernelLowering::dot_operand(const Value* v, bool& transposed) {
  const TileRef& r = tile(v);
  const auto& shape = v->type.shape;
  transposed = !is_contiguous(r, v->type) && r.kind == TileRef::View && r.offset == 0 && shape.size() == 2 &&
               r.strides[0] == 1 && r.strides[1] == shape[0];
  return transposed ? r : materialize(v);
}

// The K loop of a matmul reads, next iteration, the tiles that follow the ones its dot
// reads now along K: for an operand loaded with K as the loaded tile's minor dimension
// (A as [BM, BK]; B^T as [BN, BK], then transposed) the continuation of each row; with
// K as the major one (B as [BK, BN]; A^T as [BK, BM]) the next BK rows. The dot
// prefetches those rows into L2, a few cache lines per micro-tile so that the requests
// spread over its run, and the next iteration's loads find them in L2 instead of
// waiting on L3 row by row (rows lie in different pages, which the hardware
// prefetchers do not follow). Measured on the 2-core Zen 4 (one thread, CPU time, best
// of 7, the two builds side by side in one process, four runs): x @ W^T at
// 512x1024x1024 2-4% faster (11.70 -> 11.21 ms), dz @ W 1-3%, dz^T @ x 0-1%, q @ k^T
// at 8x512x512x64 5%. prefetcht1 never faults: past the end of an array (the last K
// step) it is harmless.
MicroTileHook KernelLowering::next_k_step_prefetches(const Op& dot) {
  const Block* body = dot.parent;
  if (!body || !body->parent() || !body->parent()->parent() || body->parent()->parent()->kind != OpKind::For)
    return {};
  struct Rows {
    llvm::Value* pointers;  // alloca: one pointer per row, a row length ahead
    int64_t rows, lines_per_row;
  };
  std::vector<Rows> operands;
  for (int i = 0; i < 2; ++i) {
    const Value* v = dot.operands[i];
    const Op* d = v->def();
    bool transposed = d && d->kind == OpKind::Permute;
    if (transposed) {
      v = d->operands[0];
      d = v->def();
    }
    if (!d || d->kind != OpKind::Load || d->parent != body || v->type.shape.size() != 2) continue;
    bool k_is_minor = (i == 0) != transposed;  // A [M, K] as loaded, or B^T [N, K]
    const Value* ptrs = d->operands[0];
    int64_t rows = v->type.shape[0], row_bytes = v->type.shape[1] * v->type.elem.bytes();
    const auto& ai = axis_.get(ptrs);
    if (ai.contiguity.size() != 2 || ai.contiguity[1] < v->type.shape[1] || row_bytes < 64 || rows < 2) continue;
    auto row_start = [&](llvm::Value* r) {
      Chunk c;
      c.idx = {r, b_.getInt64(0)};
      c.width = 1;
      return emit_chunk(ptrs, c);
    };
    // Bytes from a row to its next tile's: a row length along K, or `rows` rows down.
    llvm::Value* ahead = b_.getInt64(row_bytes);
    if (!k_is_minor) {
      llvm::Value* row0 = b_.CreatePtrToInt(row_start(b_.getInt64(0)), b_.getInt64Ty());
      llvm::Value* row1 = b_.CreatePtrToInt(row_start(b_.getInt64(1)), b_.getInt64Ty());
      ahead = b_.CreateMul(b_.CreateSub(row1, row0), b_.getInt64(rows));
    }
    llvm::Value* table = alloca_in_entry(b_.getPtrTy(), rows);
    counted_loop(rows, 1, [&](llvm::Value* r) {
      b_.CreateStore(b_.CreateGEP(b_.getInt8Ty(), row_start(r), ahead), b_.CreateGEP(b_.getPtrTy(), table, r));
    });
    operands.push_back({table, rows, row_bytes / 64});
  }
  if (operands.empty()) return {};
  return [this, operands](llvm::Value* tile, int64_t tiles) {
    for (const Rows& o : operands) {
      int64_t lines = o.rows * o.lines_per_row;
      int64_t per_tile = (lines + tiles - 1) / tiles;
      for (int64_t l = 0; l < per_tile; ++l) {
        llvm::Value* line = b_.CreateAdd(b_.CreateMul(tile, b_.getInt64(per_tile)), b_.getInt64(l));
        line = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, line, b_.getInt64(lines - 1));
        llvm::Value* row = b_.CreateUDiv(line, b_.getInt64(o.lines_per_row));
        llvm::Value* off = b_.CreateMul(b_.CreateURem(line, b_.getInt64(o.lines_per_row)), b_.getInt64(64));
        llvm::Value* base = b_.CreateLoad(b_.getPtrTy(), b_.CreateGEP(b_.getPtrTy(), o.pointers, row));
        b_.CreateIntrinsic(llvm::Intrinsic::prefetch, {base->getType()},
                           {b_.CreateGEP(b_.getInt8Ty(), base, off), /*rw=*/b_.getInt32(0),
                            /*locality: L2=*/b_.getInt32(2), /*data=*/b_.getInt32(1)});
      }
    }
  };
}

void KernelLowering::lower_dot(const Op& op) {
  const Type& at = op.operands[0]->type;
  const Type& bt = op.operands[1]->type;
  const Type& ct = op.result()->type;
  DotLayout layout;
  TileRef a = dot_operand(op.operands[0], layout.a_transposed);
  TileRef bm = dot_operand(op.operands[1], layout.b_transposed);
  MicroTileHook prefetch = next_k_step_prefetches(op);
  DotShape shape{static_cast<int>(at.shape[0]), static_cast<int>(bt.shape[1]), static_cast<int>(at.shape[1])};
  auto dot_into = [&](const TileRef& c, DotStart start, bool c_first) {
    emit_dot(b_, a.base, bm.base, c.base, shape, llvm_mem_type(ctx_, at.elem), llvm_mem_type(ctx_, bt.elem),
             llvm_mem_type(ctx_, ct.elem), target_.vector_bits, start, c_first, layout, prefetch);
  };
  const Value* carried = nullptr;
  if (const Op* add = fusable_dot_add(op, carried)) {
    const TileRef& c = tiles_.at(carried);
    dot_into(c, DotStart::ZeroThenAdd, add->operands[0] == carried);
    fused_dot_adds_[add] = c;
    return;
  }
  if (is_zero_constant(op.operands[2])) {
    TileRef c = new_buffer(ct);
    dot_into(c, DotStart::Zero, true);
    tiles_[op.result()] = c;
    return;
  }
  // Accumulate in place when the accumulator is a loop-carried tile used only by
  // this dot: the carried buffer becomes the result, and a `yield` of it copies
  // nothing (the matmul K loop then moves no accumulator bytes at all).
  const Value* acc = op.operands[2];
  auto acc_it = tiles_.find(acc);
  bool in_place = acc->arg_owner() && acc->arg_owner()->parent() && acc->arg_owner()->parent()->parent() &&
                  acc->arg_owner()->parent()->parent()->kind == OpKind::For && uses_[acc].size() == 1 &&
                  acc_it != tiles_.end() && is_contiguous(acc_it->second, acc->type) &&
                  acc->type.elem == ct.elem;
  TileRef c;
  if (in_place) {
    c = acc_it->second;
  } else {
    c = new_buffer(ct);
    write_into(c, acc);
  }
  dot_into(c, DotStart::LoadC, true);
  tiles_[op.result()] = c;
}

}  // namespace tessera::codegen::x86
