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

AxisInfo join(const AxisInfo& a, const AxisInfo& b) {
  AxisInfo r = a;
  for (size_t d = 0; d < r.contiguity.size() && d < b.contiguity.size(); ++d) {
    r.contiguity[d] = gcd2(a.contiguity[d], b.contiguity[d]);
    r.divisibility[d] = gcd2(a.divisibility[d], b.divisibility[d]);
    r.constancy[d] = gcd2(a.constancy[d], b.constancy[d]);
  }
  if (a.constant != b.constant) r.constant.reset();
  return r;
}

}  // namespace

std::string AxisInfo::str() const {
  auto list = [](const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  return "contiguity = " + list(contiguity) + ", divisibility = " + list(divisibility) +
         ", constancy = " + list(constancy);
}

AxisAnalysis::AxisAnalysis(const Kernel& k) {
  unknown_ = make(1, 1, 1, 1);
  for (auto& a : k.args) {
    int64_t div = 1;
    auto it = a.attrs.find("divisibility");
    if (it != a.attrs.end()) div = std::max<int64_t>(1, attr_ints(it->second).empty() ? 1 : attr_ints(it->second)[0]);
    info_[a.value] = make(0, 1, div, 1);
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
  const Type* rt = op.results.empty() ? nullptr : &op.result()->type;
  auto in = [&](int i) -> const AxisInfo& { return get(op.operands[i]); };
  auto set = [&](AxisInfo a) { info_[op.result()] = std::move(a); };
  int rank = rt ? rt->rank() : 0;

  switch (op.kind) {
    case OpKind::Const: {
      int64_t c = op.const_is_float() ? 0 : op.int_attr("value");
      AxisInfo a = fully_constant(*rt, op.const_is_float() ? 1 : pow2_divisor(c));
      if (!op.const_is_float()) a.constant = c;
      return set(a);
    }
    case OpKind::Arange: {
      AxisInfo a = make(1, rt->shape[0], pow2_divisor(op.int_attr("start")), 1);
      return set(a);
    }
    case OpKind::Splat: {
      AxisInfo a = fully_constant(*rt, in(0).divisibility[0]);
      a.constant = in(0).constant;
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
      if (op.operands[0]->type.is_scalar()) a = make(0, 1, div, 1);
      a.contiguity.insert(a.contiguity.begin() + ax, 1);
      a.divisibility.insert(a.divisibility.begin() + ax, div);
      a.constancy.insert(a.constancy.begin() + ax, 1);
      a.contiguity.resize(rank), a.divisibility.resize(rank), a.constancy.resize(rank);
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
        a.contiguity[d] = std::max(c1, c2);
        a.divisibility[d] = gcd2(x.divisibility[d], std::min(kMaxDiv, y.divisibility[d] * scale));
        a.constancy[d] = gcd2(x.constancy[d], y.constancy[d]);
      }
      if (x.constant && y.constant && op.kind != OpKind::AddPtr)
        a.constant = op.kind == OpKind::Sub ? *x.constant - *y.constant : *x.constant + *y.constant;
      return set(a);
    }
    case OpKind::Mul: {
      const AxisInfo &x = in(0), &y = in(1);
      AxisInfo a = make(rank, 1, 1, 1);
      for (size_t d = 0; d < a.contiguity.size(); ++d) {
        a.contiguity[d] = y.constant == 1 ? x.contiguity[d] : x.constant == 1 ? y.contiguity[d] : 1;
        a.divisibility[d] = std::min(kMaxDiv, x.divisibility[d] * y.divisibility[d]);
        a.constancy[d] = gcd2(x.constancy[d], y.constancy[d]);
      }
      if (x.constant && y.constant) a.constant = *x.constant * *y.constant;
      return set(a);
    }
    case OpKind::Rem: {
      // (a + i) % m with m constant over the tile keeps runs of gcd(contig(a), div(m)):
      // e.g. (pid*64 + arange(64)) % M with M divisible by 16 is contiguous in 16s.
      const AxisInfo &x = in(0), &y = in(1);
      if (!rt->elem.is_int()) break;
      AxisInfo a = make(rank, 1, 1, 1);
      for (size_t d = 0; d < a.contiguity.size(); ++d) {
        bool y_const = rt->is_scalar() || y.constancy[d] == rt->shape[d];
        a.contiguity[d] = y_const ? gcd2(x.contiguity[d], y.divisibility[d]) : 1;
        a.divisibility[d] = gcd2(x.divisibility[d], y.divisibility[d]);
        a.constancy[d] = gcd2(x.constancy[d], y.constancy[d]);
      }
      return set(a);
    }
    case OpKind::Cast:
    case OpKind::Hint: {
      AxisInfo a = in(0);
      if (op.kind == OpKind::Cast && !(op.operands[0]->type.elem.is_int() && rt->elem.is_int() &&
                                       rt->elem.bits() >= op.operands[0]->type.elem.bits())) {
        a = make(rank, 1, 1, 1);
        for (size_t d = 0; d < a.constancy.size(); ++d) a.constancy[d] = in(0).constancy[d];
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
      info_[body.args[0].get()] = make(0, 1, gcd2(get(op.operands[0]).divisibility[0], get(op.operands[2]).divisibility[0]), 1);
      std::vector<AxisInfo> carried;
      for (size_t i = 3; i < op.operands.size(); ++i) carried.push_back(get(op.operands[i]));
      for (int iter = 0; iter < 4; ++iter) {
        for (size_t i = 0; i < carried.size(); ++i) info_[body.args[i + 1].get()] = carried[i];
        visit_block(body);
        const Op* y = body.terminator();
        bool changed = false;
        for (size_t i = 0; i < carried.size(); ++i) {
          AxisInfo j = join(carried[i], get(y->operands[i]));
          if (j.contiguity != carried[i].contiguity || j.divisibility != carried[i].divisibility ||
              j.constancy != carried[i].constancy || j.constant != carried[i].constant)
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
