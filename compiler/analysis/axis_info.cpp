// Axis analysis (see axis_info.h). Worked example, vector add with BLOCK=1024:
//   offs = splat(pid*1024) + arange(0,1024)   contiguity [1024], divisibility [1024]
//   ptrs = addptr(splat(x), offs)            contiguity [1024] (x: divisibility 16)
// so every 16-lane chunk of ptrs is 16 consecutive elements: one vector load.
#include "analysis/axis_info.h"

#include <algorithm>
#include <numeric>

namespace tessera::analysis {

using namespace ir;

namespace {

constexpr int64_t kMaxDiv = int64_t(1) << 30;

int64_t pow2_divisor(int64_t v) {
  if (v == 0) return kMaxDiv;
  uint64_t u = static_cast<uint64_t>(v);  // lowest set bit; sign does not matter
  uint64_t low = u & (~u + 1);
  return low >= static_cast<uint64_t>(kMaxDiv) ? kMaxDiv : static_cast<int64_t>(low);
}
int64_t gcd2(int64_t a, int64_t b) { return std::gcd(a, b); }

AxisInfo make(int rank, int64_t contig, int64_t div, int64_t constancy) {
  int r = std::max(rank, 1);
  return AxisInfo{std::vector<int64_t>(r, contig), std::vector<int64_t>(r, div), std::vector<int64_t>(r, constancy), {}};
}

AxisInfo fully_constant(const Type& t, int64_t div) {
  AxisInfo a = make(t.rank(), 1, div, 1);
  for (int d = 0; d < t.rank(); ++d) a.constancy[d] = t.shape[d];
  return a;
}

// The divisibility of the elements at multiples of `runs` along a dim whose runs of
// `contig` start divisible by `div`. When runs is shorter, the new run starts lie inside
// the old runs, at start + m * runs (times `unit` bytes for pointers), so only
// gcd(div, runs * unit) divides them all: arange(0, 4) * 2 = [0, 2, 4, 6] has run
// starts divisible by 2^30 but, as runs of one, elements divisible by 2 only.
int64_t div_at_runs(int64_t div, int64_t contig, int64_t runs, int64_t unit = 1) {
  return runs % contig == 0 ? div : gcd2(div, std::min(kMaxDiv, runs * unit));
}

// bytes per contiguity step: the pointee's size for pointers, 1 for integers.
int64_t unit_of(const Type& t) { return t.elem.is_ptr() ? t.elem.pointee_type().bytes() : 1; }

// v as a value of integer type e (two's complement; to i1 means != 0).
int64_t wrap_to(uint64_t v, const ElemType& e) {
  if (e.is_bool()) return v != 0;
  int b = e.bits();
  if (b >= 64) return static_cast<int64_t>(v);
  uint64_t mask = (uint64_t(1) << b) - 1;
  v &= mask;
  if (!e.is_unsigned() && ((v >> (b - 1)) & 1)) v |= ~mask;
  return static_cast<int64_t>(v);
}

// What holds for a value that is either a or b (a loop-carried value at some trip).
AxisInfo join(const AxisInfo& a, const AxisInfo& b, int64_t unit) {
  AxisInfo r = a;
  for (size_t d = 0; d < r.contiguity.size() && d < b.contiguity.size(); ++d) {
    r.contiguity[d] = gcd2(a.contiguity[d], b.contiguity[d]);
    r.divisibility[d] = gcd2(div_at_runs(a.divisibility[d], a.contiguity[d], r.contiguity[d], unit),
                             div_at_runs(b.divisibility[d], b.contiguity[d], r.contiguity[d], unit));
    r.constancy[d] = gcd2(a.constancy[d], b.constancy[d]);
  }
  if (a.constant != b.constant) r.constant.reset();
  r.nonnegative = a.nonnegative && b.nonnegative;
  return r;
}

// Whether every value of integer type `from` (non-negative ones only, if `nonneg`)
// keeps its value in integer type `to`: then the cast keeps every fact.
bool cast_keeps_values(const ElemType& from, const ElemType& to, bool nonneg) {
  if (from.is_bool() || to.is_bool()) return false;
  if (from.is_unsigned() || nonneg)  // values in [0, 2^bits) (2^(bits-1) if signed)
    return to.bits() > from.bits() || (to.bits() == from.bits() && (to.is_unsigned() || !from.is_unsigned()));
  return !to.is_unsigned() && to.bits() >= from.bits();
}

}  // namespace

std::string AxisInfo::str() const {
  auto list = [](const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  return "contiguity = " + list(contiguity) + ", divisibility = " + list(divisibility) +
         ", constancy = " + list(constancy) + (constant ? ", constant = " + std::to_string(*constant) : "") +
         (nonnegative ? ", nonnegative" : "");
}

AxisAnalysis::AxisAnalysis(const Kernel& k) {
  unknown_ = make(1, 1, 1, 1);
  for (auto& a : k.args) {
    int64_t div = 1;
    auto it = a.attrs.find("divisibility");
    if (it != a.attrs.end()) div = std::max<int64_t>(1, attr_ints(it->second).empty() ? 1 : attr_ints(it->second)[0]);
    info_[a.value] = make(0, 1, div, 1);
    info_[a.value].nonnegative = a.value->type.elem.is_unsigned();
  }
  visit_block(*k.body());
}

const AxisInfo& AxisAnalysis::get(const Value* v) const {
  auto it = info_.find(v);
  return it == info_.end() ? unknown_ : it->second;
}

void AxisAnalysis::visit_block(const Block& b) {
  for (auto& op : b.ops) visit_op(*op);
}

void AxisAnalysis::visit_op(const Op& op) {
  transfer(op);
  // Values of unsigned types are never negative, whatever the rule above knew.
  for (auto& res : op.results)
    if (res->type.elem.is_unsigned()) info_[res.get()].nonnegative = true;
}

void AxisAnalysis::transfer(const Op& op) {
  const Type* rt = op.results.empty() ? nullptr : &op.result()->type;
  auto in = [&](int i) -> const AxisInfo& { return get(op.operands[i]); };
  auto set = [&](AxisInfo a) { info_[op.result()] = std::move(a); };
  int rank = rt ? rt->rank() : 0;

  switch (op.kind) {
    case OpKind::Const: {
      int64_t c = op.const_is_float() ? 0 : op.int_attr("value");
      AxisInfo a = fully_constant(*rt, op.const_is_float() ? 1 : pow2_divisor(c));
      if (!op.const_is_float()) a.constant = c, a.nonnegative = c >= 0;
      return set(a);
    }
    case OpKind::Arange: {
      AxisInfo a = make(1, rt->shape[0], pow2_divisor(op.int_attr("start")), 1);
      a.nonnegative = op.int_attr("start") >= 0;
      return set(a);
    }
    case OpKind::ProgramId:
    case OpKind::NumPrograms: {
      AxisInfo a = make(0, 1, 1, 1);
      a.nonnegative = true;
      return set(a);
    }
    case OpKind::Splat: {
      AxisInfo a = fully_constant(*rt, in(0).divisibility[0]);
      a.constant = in(0).constant;
      a.nonnegative = in(0).nonnegative;
      return set(a);
    }
    case OpKind::Broadcast: {
      AxisInfo a = in(0);
      const Type& ot = op.operands[0]->type;
      for (int d = 0; d < rank; ++d)
        if (ot.shape[d] == 1 && rt->shape[d] != 1) a.contiguity[d] = 1, a.constancy[d] = rt->shape[d];
      return set(a);
    }
    case OpKind::ExpandDims: {
      AxisInfo a = in(0);
      int64_t ax = op.int_attr("axis");
      // Along the new axis every element starts a run of one, so its divisibility is
      // what divides ALL elements: 1 if the input is contiguous along some dim (its runs
      // hold start + 1), else the least of its dims' (each element a run start). Not
      // the run starts' divisibility: offs_m[:, None] (pid * 32 + arange(32)) is not
      // divisible by 32 along axis 1, and offs_m[:, None] * stride with an odd stride
      // is not 16-byte aligned there (a 16-byte cp.async of such rows faulted).
      int64_t div = kMaxDiv;
      for (size_t d = 0; d < a.divisibility.size(); ++d)
        div = std::min(div, a.contiguity[d] > 1 ? int64_t{1} : a.divisibility[d]);
      if (a.constant) div = pow2_divisor(*a.constant);
      if (op.operands[0]->type.is_scalar()) {
        bool nonneg = a.nonnegative;
        a = make(0, 1, div, 1);
        a.nonnegative = nonneg;
      }
      a.contiguity.insert(a.contiguity.begin() + ax, 1);
      a.divisibility.insert(a.divisibility.begin() + ax, div);
      a.constancy.insert(a.constancy.begin() + ax, 1);
      a.contiguity.resize(rank), a.divisibility.resize(rank), a.constancy.resize(rank);
      return set(a);
    }
    case OpKind::Permute: {
      // Facts along a dim do not depend on the other dims' order: result dim d is
      // operand dim order[d] (tl.trans of a pointer tile keeps its contiguous dim).
      const AxisInfo& x = in(0);
      auto order = op.ints_attr("order");
      AxisInfo a = make(rank, 1, 1, 1);
      for (int d = 0; d < rank; ++d) {
        a.contiguity[d] = x.contiguity[order[d]];
        a.divisibility[d] = x.divisibility[order[d]];
        a.constancy[d] = x.constancy[order[d]];
      }
      a.constant = x.constant;
      a.nonnegative = x.nonnegative;
      return set(a);
    }
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::AddPtr: {
      const AxisInfo &x = in(0), &y = in(1);
      int64_t scale = op.kind == OpKind::AddPtr ? op.result()->type.elem.pointee_type().bytes() : 1;
      AxisInfo a = make(rank, 1, 1, 1);
      for (size_t d = 0; d < a.contiguity.size(); ++d) {
        int64_t c1 = gcd2(x.contiguity[d], y.constancy[d]);
        int64_t c2 = op.kind == OpKind::Sub ? 1 : gcd2(y.contiguity[d], x.constancy[d]);
        int64_t c = a.contiguity[d] = std::max(c1, c2);
        // Divisibility at the result's run starts, which may lie inside x's or y's runs.
        a.divisibility[d] = gcd2(div_at_runs(x.divisibility[d], x.contiguity[d], c, scale),
                                 std::min(kMaxDiv, div_at_runs(y.divisibility[d], y.contiguity[d], c) * scale));
        a.constancy[d] = gcd2(x.constancy[d], y.constancy[d]);
      }
      if (x.constant && y.constant && op.kind != OpKind::AddPtr) {
        uint64_t xc = static_cast<uint64_t>(*x.constant), yc = static_cast<uint64_t>(*y.constant);
        a.constant = wrap_to(op.kind == OpKind::Sub ? xc - yc : xc + yc, rt->elem);
      }
      a.nonnegative = op.kind == OpKind::Add ? x.nonnegative && y.nonnegative : a.constant && *a.constant >= 0;
      return set(a);
    }
    case OpKind::Mul: {
      const AxisInfo &x = in(0), &y = in(1);
      AxisInfo a = make(rank, 1, 1, 1);
      for (size_t d = 0; d < a.contiguity.size(); ++d) {
        int64_t c = a.contiguity[d] = y.constant == 1 ? x.contiguity[d] : x.constant == 1 ? y.contiguity[d] : 1;
        // Each factor's divisibility at the product's run starts (every element when
        // c = 1): offs * stride with offs = pid * 32 + arange(32) is divisible by
        // div(stride) only, not 32 * div(stride).
        a.divisibility[d] = std::min(kMaxDiv, div_at_runs(x.divisibility[d], x.contiguity[d], c) *
                                                  div_at_runs(y.divisibility[d], y.contiguity[d], c));
        a.constancy[d] = gcd2(x.constancy[d], y.constancy[d]);
      }
      if (x.constant && y.constant)
        a.constant = wrap_to(static_cast<uint64_t>(*x.constant) * static_cast<uint64_t>(*y.constant), rt->elem);
      a.nonnegative = x.nonnegative && y.nonnegative;
      return set(a);
    }
    case OpKind::Shl: {
      // x << k for k constant is x * 2^k.
      const AxisInfo &x = in(0), &y = in(1);
      if (!y.constant || *y.constant < 0 || *y.constant >= std::min(rt->elem.bits(), 31)) break;
      int64_t k = *y.constant;
      AxisInfo a = make(rank, 1, 1, 1);
      for (size_t d = 0; d < a.contiguity.size(); ++d) {
        int64_t c = a.contiguity[d] = k == 0 ? x.contiguity[d] : 1;
        a.divisibility[d] = std::min(kMaxDiv, div_at_runs(x.divisibility[d], x.contiguity[d], c) << k);
        a.constancy[d] = x.constancy[d];
      }
      if (x.constant) a.constant = wrap_to(static_cast<uint64_t>(*x.constant) << k, rt->elem);
      a.nonnegative = x.nonnegative;
      return set(a);
    }
    case OpKind::Div: {
      // (a + i) / m with m constant over the tile, a >= 0 and a, m multiples of g is
      // the same for i < g = min(contig(a), div(a), div(m)) (a % m + g - 1 < m, as for
      // rem): offs // GROUP is constant over GROUP-long runs. Not for a < 0 (truncation:
      // -4 / 4 = -1 but -3 / 4 = 0).
      const AxisInfo &x = in(0), &y = in(1);
      if (!rt->elem.is_int() || rt->is_scalar()) break;
      AxisInfo a = make(rank, 1, 1, 1);
      for (int d = 0; d < rank; ++d) {
        a.constancy[d] = gcd2(x.constancy[d], y.constancy[d]);
        if (y.constancy[d] == rt->shape[d] && x.nonnegative)
          a.constancy[d] = std::max(a.constancy[d], std::min({x.contiguity[d], x.divisibility[d], y.divisibility[d], rt->shape[d]}));
      }
      a.nonnegative = x.nonnegative && y.nonnegative;
      return set(a);
    }
    case OpKind::Rem: {
      // (a + i) % m with m constant over the tile and a >= 0 keeps runs of
      // g = gcd(contig(a), div(a), div(m)): a and m are multiples of g, so a % m is
      // too and a % m + g - 1 < m. E.g. (pid*64 + arange(64)) % M with M divisible by
      // 16 is contiguous in 16s. Not for a < 0 (the remainder takes the dividend's
      // sign: -8 % 8 = 0 but -7 % 8 = -7), nor for runs not starting at multiples of
      // m's divisor ([1, 2, 3, 4] % 4 = [1, 2, 3, 0]).
      const AxisInfo &x = in(0), &y = in(1);
      if (!rt->elem.is_int()) break;
      AxisInfo a = make(rank, 1, 1, 1);
      for (size_t d = 0; d < a.contiguity.size(); ++d) {
        bool y_const = rt->is_scalar() || y.constancy[d] == rt->shape[d];
        int64_t c = a.contiguity[d] =
            y_const && x.nonnegative ? gcd2(gcd2(x.contiguity[d], x.divisibility[d]), y.divisibility[d]) : 1;
        // a % m = a - q * m: divisible by what divides both, at the result's run starts.
        a.divisibility[d] = gcd2(div_at_runs(x.divisibility[d], x.contiguity[d], c),
                                 div_at_runs(y.divisibility[d], y.contiguity[d], c));
        a.constancy[d] = gcd2(x.constancy[d], y.constancy[d]);
      }
      a.nonnegative = x.nonnegative;
      return set(a);
    }
    case OpKind::Cmp: {
      // A mask `offs < n` (or offs >= n, n > offs, n <= offs) with offs in runs of c
      // consecutive values starting at multiples of g and n constant along the dim and
      // a multiple of g: a0 + i < n == a0 < n for i < g = min(c, div(offs), div(n)),
      // since a0 < n means a0 <= n - g. So a K-edge mask is constant over 16-byte runs
      // when K is a multiple of 8 f16 (what lets loads under it be vector loads).
      // Not for offs <= n: offs < n + 1, and n + 1 is odd.
      std::string p = op.str_attr("pred");
      const Value *x = op.operands[0], *n = op.operands[1];
      if (p == "gt" || p == "le") std::swap(x, n), p = p == "gt" ? "lt" : "ge";
      if (!rt->is_tile() || (p != "lt" && p != "ge") || !x->type.elem.is_int()) break;
      const AxisInfo &xi = get(x), &ni = get(n);
      AxisInfo a = make(rank, 1, 1, 1);
      for (int d = 0; d < rank; ++d) {
        a.constancy[d] = gcd2(xi.constancy[d], ni.constancy[d]);
        if (ni.constancy[d] == rt->shape[d])
          a.constancy[d] = std::max(a.constancy[d], std::min({xi.contiguity[d], xi.divisibility[d], ni.divisibility[d], rt->shape[d]}));
      }
      return set(a);
    }
    case OpKind::Cast:
    case OpKind::Hint: {
      AxisInfo a = in(0);
      const ElemType& from = op.operands[0]->type.elem;
      if (op.kind == OpKind::Cast && !(from.is_int() && rt->elem.is_int() && cast_keeps_values(from, rt->elem, a.nonnegative))) {
        // Values change: i32 -> u32 maps -1, 0 to 4294967295, 0 (no longer a run), i32 ->
        // i16 wraps. Truncation keeps the low bits, so the divisibility of every element
        // survives (an i1 result, != 0, keeps nothing but constancy).
        bool ints = from.is_int() && !from.is_bool() && rt->elem.is_int() && !rt->elem.is_bool();
        a = make(rank, 1, 1, 1);
        for (size_t d = 0; d < a.constancy.size(); ++d) {
          a.constancy[d] = in(0).constancy[d];
          if (ints) a.divisibility[d] = div_at_runs(in(0).divisibility[d], in(0).contiguity[d], 1);
        }
        if (ints && in(0).constant) a.constant = wrap_to(static_cast<uint64_t>(*in(0).constant), rt->elem);
      }
      if (op.kind == OpKind::Hint) {
        auto apply = [&](const char* key, std::vector<int64_t>& dst) {
          auto v = op.ints_attr(key);
          for (size_t d = 0; d < v.size() && d < dst.size(); ++d) dst[d] = std::max(dst[d], v[d]);
        };
        apply("contiguity", a.contiguity);
        apply("divisibility", a.divisibility);
        apply("constancy", a.constancy);
      }
      return set(a);
    }
    case OpKind::For: {
      const Block& body = *op.regions[0]->block;
      // The induction variable is lb + j * step: divisible by what divides both (a
      // K loop `range(0, K, 64)` gives 64, which makes a mask `rk < K - k` constant
      // over 16-byte runs when K is divisible by 16).
      AxisInfo iv = make(0, 1, gcd2(get(op.operands[0]).divisibility[0], get(op.operands[2]).divisibility[0]), 1);
      iv.nonnegative = get(op.operands[0]).nonnegative;  // lb >= 0 and a positive step
      info_[body.args[0].get()] = iv;
      std::vector<AxisInfo> carried;
      for (size_t i = 3; i < op.operands.size(); ++i) carried.push_back(get(op.operands[i]));
      for (int iter = 0; iter < 4; ++iter) {
        for (size_t i = 0; i < carried.size(); ++i) info_[body.args[i + 1].get()] = carried[i];
        visit_block(body);
        const Op* y = body.terminator();
        bool changed = false;
        for (size_t i = 0; i < carried.size(); ++i) {
          AxisInfo j = join(carried[i], get(y->operands[i]), unit_of(op.result(i)->type));
          if (j.contiguity != carried[i].contiguity || j.divisibility != carried[i].divisibility ||
              j.constancy != carried[i].constancy || j.constant != carried[i].constant ||
              j.nonnegative != carried[i].nonnegative)
            changed = true;
          carried[i] = j;
        }
        if (!changed) break;
        if (iter == 3)
          for (size_t i = 0; i < carried.size(); ++i) carried[i] = make(op.result(i)->type.rank(), 1, 1, 1);
      }
      for (size_t i = 0; i < carried.size(); ++i) info_[body.args[i + 1].get()] = carried[i];
      visit_block(body);
      for (size_t i = 0; i < carried.size(); ++i) info_[op.result(i)] = carried[i];
      return;
    }
    default:
      break;
  }
  // Everything else: nothing known beyond constancy shared by all operands.
  for (auto& r : op.regions) {
    for (auto& a : r->block->args) info_[a.get()] = make(a->type.rank(), 1, 1, 1);
    visit_block(*r->block);
  }
  for (auto& res : op.results) {
    AxisInfo a = make(res->type.rank(), 1, 1, 1);
    bool elementwise = op_has_trait(op.kind, 'E') || op.kind == OpKind::Load;
    if (elementwise && res->type.is_tile()) {
      for (size_t d = 0; d < a.constancy.size(); ++d) {
        int64_t c = res->type.shape[d];
        for (Value* v : op.operands)
          if (v->type.is_tile()) c = gcd2(c, get(v).constancy[d]);
        a.constancy[d] = c;
      }
    }
    info_[res.get()] = a;
  }
}

}  // namespace tessera::analysis
