// Checks Tile IR invariants: one function per op family, called from one switch.
#include "ir/verifier.h"

#include <algorithm>
#include <unordered_set>

#include "tessera/compiler.h"

namespace tessera::ir {

namespace {

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

class Verifier {
 public:
  explicit Verifier(const Kernel& k) : k_(k) {}

  void run() {
    for (auto& a : k_.args) {
      if (a.value->type.is_tile()) fail(nullptr, "kernel argument %" + a.value->name + " must be a scalar or pointer");
      defined_.insert(a.value);
    }
    verify_block(*k_.body(), /*is_kernel_body=*/true);
  }

 private:
  const Kernel& k_;
  std::unordered_set<const Value*> defined_;
  int64_t cluster_ = 0;  // the cluster size the kernel's cluster ops name

  [[noreturn]] void fail(const Op* op, const std::string& what) {
    std::string where = op ? std::string(" at '") + op->name() + "' (" + k_.file() + ":" +
                                 std::to_string(op->loc.line) + ":" + std::to_string(op->loc.col) + ")"
                           : "";
    throw CompileError("invalid Tile IR in kernel " + k_.name + where + ": " + what +
                           " (this is a Tessera bug)",
                       false, op ? op->loc.line : 0, op ? op->loc.col : 0);
  }

  // Values defined in a block are visible in it and in regions nested in it, and
  // no longer once the block ends.
  void verify_block(const Block& b, bool is_kernel_body) {
    std::vector<const Value*> scope;
    for (auto& a : b.args) defined_.insert(a.get()), scope.push_back(a.get());
    for (auto it = b.ops.begin(); it != b.ops.end(); ++it) {
      const Op& op = **it;
      for (Value* v : op.operands)
        if (!defined_.count(v)) fail(&op, "operand used before its definition or outside its region");
      bool last = std::next(it) == b.ops.end();
      if (op_has_trait(op.kind, 'T') && !last) fail(&op, "terminator is not the last op of its region");
      if (op.kind == OpKind::Return && !is_kernel_body) fail(&op, "return inside a region");
      for (auto& t : op.results) check_type(&op, t->type);
      verify_op(op);
      for (auto& r : op.regions) verify_block(*r->block, false);
      for (auto& r : op.results) defined_.insert(r.get()), scope.push_back(r.get());
    }
    for (const Value* v : scope) defined_.erase(v);
  }

  void check_type(const Op* op, const Type& t) {
    for (int64_t d : t.shape)
      if (!is_pow2(d)) fail(op, "tile dimension " + std::to_string(d) + " is not a power of two");
  }

  void n_operands(const Op& op, size_t lo, size_t hi) {
    if (op.operands.size() < lo || op.operands.size() > hi)
      fail(&op, "expected " + std::to_string(lo) + (hi != lo ? ".." + std::to_string(hi) : "") + " operands, got " +
                    std::to_string(op.operands.size()));
  }
  void n_results(const Op& op, size_t n) {
    if (op.results.size() != n) fail(&op, "expected " + std::to_string(n) + " results");
  }
  void same_shape(const Op& op, const Type& a, const Type& b) {
    if (a.shape != b.shape) fail(&op, "shape mismatch: " + a.str() + " vs " + b.str());
  }

  // Operand and result counts of the ops verify_op has no case of its own for
  // (passes and the lowering index operands without checking).
  void check_arity(const Op& op) {
    constexpr size_t kAny = ~size_t(0);
    size_t lo = 1, hi = 1, results = 1;
    switch (op.kind) {
      case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div: case OpKind::Rem:
      case OpKind::And: case OpKind::Or: case OpKind::Xor: case OpKind::Shl: case OpKind::Shr:
      case OpKind::Min: case OpKind::Max: case OpKind::MinimumNan: case OpKind::MaximumNan:
      case OpKind::Umulhi: case OpKind::AddPtr:
        lo = hi = 2;
        break;
      case OpKind::Fma: lo = hi = 3; break;
      case OpKind::Assert: case OpKind::Assume: results = 0; break;
      case OpKind::Barrier: case OpKind::GdcWait: case OpKind::GdcLaunchDependents:
        lo = hi = 0, results = 0;
        break;
      case OpKind::Return: lo = hi = results = 0; break;
      case OpKind::Yield: case OpKind::Print: lo = 0, hi = kAny, results = 0; break;
      case OpKind::Condition: hi = kAny, results = 0; break;
      default: break;  // unary elementwise ops, casts, hint
    }
    n_operands(op, lo, hi == kAny ? std::max(lo, op.operands.size()) : hi);
    n_results(op, results);
  }

  void n_yielded(const Op& op, const Block& b, size_t n) {
    if (b.terminator()->operands.size() != n)
      fail(&op, "region yields " + std::to_string(b.terminator()->operands.size()) + " values, expected " +
                    std::to_string(n));
  }

  const Block* terminated_region(const Op& op, size_t i, OpKind term) {
    if (op.regions.size() <= i) fail(&op, "missing region");
    const Block* b = op.regions[i]->block.get();
    if (!b->terminator() || b->terminator()->kind != term)
      fail(&op, std::string("region must end with '") + op_name(term) + "'");
    return b;
  }

  void verify_op(const Op& op) {
    switch (op.kind) {
      case OpKind::Const:
        n_operands(op, 0, 0), n_results(op, 1);
        if (!op.has_attr("value")) fail(&op, "missing value attribute");
        if (op.result()->type.elem.is_ptr()) fail(&op, "pointer constants are not allowed");
        break;
      case OpKind::ProgramId:
      case OpKind::NumPrograms: {
        n_operands(op, 0, 0), n_results(op, 1);
        int64_t a = op.int_attr("axis", -1);
        if (a < 0 || a > 2) fail(&op, "axis must be 0, 1 or 2");
        break;
      }
      case OpKind::Arange: {
        n_operands(op, 0, 0), n_results(op, 1);
        int64_t s = op.int_attr("start"), e = op.int_attr("end");
        const Type& t = op.result()->type;
        if (t.rank() != 1 || t.shape[0] != e - s) fail(&op, "result must be tile<(end-start)xi32>");
        break;
      }
      case OpKind::Splat:
        n_operands(op, 1, 1), n_results(op, 1);
        if (op.operands[0]->type.is_tile() || !op.result()->type.is_tile()) fail(&op, "splat takes a scalar to a tile");
        if (op.operands[0]->type.elem != op.result()->type.elem) fail(&op, "element type mismatch");
        break;
      case OpKind::Broadcast: {
        n_operands(op, 1, 1), n_results(op, 1);
        const Type &a = op.operands[0]->type, &r = op.result()->type;
        if (a.rank() != r.rank() || a.elem != r.elem) fail(&op, "broadcast keeps rank and element type");
        for (int i = 0; i < a.rank(); ++i)
          if (a.shape[i] != r.shape[i] && a.shape[i] != 1) fail(&op, "only size-1 dims can be broadcast");
        break;
      }
      case OpKind::ExpandDims: {
        n_operands(op, 1, 1), n_results(op, 1);
        const Type &a = op.operands[0]->type, &r = op.result()->type;
        int64_t ax = op.int_attr("axis", -1);
        if (ax < 0 || ax > a.rank() || r.rank() != a.rank() + 1 || r.shape[ax] != 1) fail(&op, "bad expand_dims");
        break;
      }
      case OpKind::Reshape:
        n_operands(op, 1, 1), n_results(op, 1);
        if (op.operands[0]->type.numel() != op.result()->type.numel()) fail(&op, "reshape changes the element count");
        break;
      case OpKind::Permute: {
        n_operands(op, 1, 1), n_results(op, 1);
        auto order = op.ints_attr("order");
        const Type &a = op.operands[0]->type, &r = op.result()->type;
        if (static_cast<int>(order.size()) != a.rank() || r.rank() != a.rank()) fail(&op, "order must list every dim");
        for (int i = 0; i < a.rank(); ++i)
          if (order[i] < 0 || order[i] >= a.rank() || r.shape[i] != a.shape[order[i]]) fail(&op, "bad permute");
        break;
      }
      case OpKind::Join:
        n_operands(op, 2, 2), n_results(op, 1);
        same_shape(op, op.operands[0]->type, op.operands[1]->type);
        break;
      case OpKind::Gather: {
        // out[i] = src[i with i[axis] replaced by index[i]]: index has src's rank and
        // its shape off the axis, the result index's shape and src's type
        n_operands(op, 2, 2), n_results(op, 1);
        const Type &src = op.operands[0]->type, &idx = op.operands[1]->type, &r = op.result()->type;
        int64_t ax = op.int_attr("axis", -1);
        if (!src.is_tile() || idx.rank() != src.rank() || ax < 0 || ax >= src.rank()) fail(&op, "bad gather axis or ranks");
        for (int d = 0; d < src.rank(); ++d)
          if (d != ax && idx.shape[d] != src.shape[d]) fail(&op, "gather index shape differs off the axis");
        if (!idx.elem.is_int() || r.shape != idx.shape || r.elem != src.elem || src.elem.is_ptr())
          fail(&op, "bad gather types");
        break;
      }
      case OpKind::ClusterReduceScatter: {
        // The f32 tile summed over the cluster's programs; the result is this program's
        // rows: dim 0 split into `cluster` equal parts, the other dims kept.
        n_operands(op, 1, 1), n_results(op, 1);
        const Type &x = op.operands[0]->type, &r = op.result()->type;
        int64_t c = op.int_attr("cluster", 0);
        if (!is_pow2(c) || c < 2 || c > 16) fail(&op, "cluster must be a power of two from 2 to 16");
        if (cluster_ && cluster_ != c) fail(&op, "the kernel's cluster ops name different cluster sizes");
        cluster_ = c;
        if (!x.is_tile() || x.elem.kind != ScalarKind::F32 || r.elem != x.elem || r.rank() != x.rank() ||
            x.shape[0] % c || r.shape[0] != x.shape[0] / c)
          fail(&op, "cluster_reduce_scatter takes an f32 tile whose dim 0 the cluster divides, and returns its part");
        for (int d = 1; d < x.rank(); ++d)
          if (r.shape[d] != x.shape[d]) fail(&op, "cluster_reduce_scatter keeps the dims after the first");
        break;
      }
      case OpKind::Split:
        n_operands(op, 1, 1), n_results(op, 2);
        if (op.operands[0]->type.shape.empty() || op.operands[0]->type.shape.back() != 2)
          fail(&op, "split needs a minor dim of size 2");
        break;
      case OpKind::Load:
        n_operands(op, 1, 3), n_results(op, 1);
        if (!op.operands[0]->type.elem.is_ptr()) fail(&op, "load needs pointers");
        if (op.result()->type.elem != op.operands[0]->type.elem.pointee_type()) fail(&op, "load result type");
        break;
      case OpKind::Store:
        n_operands(op, 2, 3), n_results(op, 0);
        if (!op.operands[0]->type.elem.is_ptr()) fail(&op, "store needs pointers");
        same_shape(op, op.operands[0]->type, op.operands[1]->type);
        if (op.has_attr("cache_modifier")) {
          const std::string c = op.str_attr("cache_modifier");
          if (c != ".wb" && c != ".cg" && c != ".cs" && c != ".wt")
            fail(&op, "store cache_modifier must be .wb, .cg, .cs or .wt, got \"" + c + "\"");
        }
        break;
      case OpKind::AtomicRmw:
        n_operands(op, 2, 3), n_results(op, 1);
        break;
      case OpKind::AtomicCas:
        n_operands(op, 3, 3), n_results(op, 1);
        break;
      case OpKind::Reduce:
      case OpKind::Scan: {
        size_t n = op.operands.size();
        if (n == 0) fail(&op, "needs operands");
        n_results(op, n);
        if (op.regions.size() != 1) fail(&op, "needs one combine region");
        const Block* b = terminated_region(op, 0, OpKind::Yield);
        if (b->args.size() != 2 * n) fail(&op, "combine region needs 2 arguments per operand");
        int64_t ax = op.int_attr("axis", -1);
        if (ax < 0 || ax >= op.operands[0]->type.rank()) fail(&op, "axis out of range");
        break;
      }
      case OpKind::Dot: {
        n_operands(op, 3, 3), n_results(op, 1);
        const Type &a = op.operands[0]->type, &b = op.operands[1]->type, &c = op.operands[2]->type;
        if (a.rank() != 2 || b.rank() != 2 || c.rank() != 2 || a.shape[1] != b.shape[0] || c.shape[0] != a.shape[0] ||
            c.shape[1] != b.shape[1])
          fail(&op, "dot shapes: " + a.str() + " x " + b.str() + " + " + c.str());
        break;
      }
      case OpKind::For: {
        if (op.operands.size() < 3) fail(&op, "for needs lb, ub, step");
        n_results(op, op.operands.size() - 3);
        const Block* b = terminated_region(op, 0, OpKind::Yield);
        if (b->args.size() != op.operands.size() - 2) fail(&op, "for region needs iv + one arg per carried value");
        n_yielded(op, *b, op.results.size());
        break;
      }
      case OpKind::While: {
        if (op.regions.size() != 2) fail(&op, "while needs two regions");
        const Block* before = terminated_region(op, 0, OpKind::Condition);
        const Block* after = terminated_region(op, 1, OpKind::Yield);
        if (before->args.size() != op.operands.size()) fail(&op, "before region needs one arg per carried value");
        if (before->terminator()->operands.size() != op.results.size() + 1 || after->args.size() != op.results.size())
          fail(&op, "condition must pass one value per result and per after-region arg");
        n_yielded(op, *after, op.operands.size());
        break;
      }
      case OpKind::If:
        n_operands(op, 1, 1);
        if (op.regions.size() != 2) fail(&op, "if needs two regions");
        if (!op.results.empty()) {
          n_yielded(op, *terminated_region(op, 0, OpKind::Yield), op.results.size());
          n_yielded(op, *terminated_region(op, 1, OpKind::Yield), op.results.size());
        }
        break;
      case OpKind::Cmp: {
        n_operands(op, 2, 2), n_results(op, 1);
        static const char* preds[] = {"eq", "ne", "lt", "le", "gt", "ge"};
        std::string p = op.str_attr("pred");
        bool ok = false;
        for (auto* q : preds) ok |= p == q;
        if (!ok) fail(&op, "unknown predicate '" + p + "'");
        if (!op.result()->type.elem.is_bool()) fail(&op, "cmp yields i1");
        break;
      }
      case OpKind::Select:
        n_operands(op, 3, 3), n_results(op, 1);
        break;
      default:
        check_arity(op);
        if (op_has_trait(op.kind, 'E') && !op.results.empty()) {
          for (Value* v : op.operands)
            if (v->type.shape != op.result()->type.shape)
              fail(&op, "elementwise operand " + v->type.str() + " does not match result " + op.result()->type.str());
        }
        break;
    }
  }
};

}  // namespace

void verify_kernel(const Kernel& k) { Verifier(k).run(); }

}  // namespace tessera::ir
