// Property-based soundness test of analysis::AxisAnalysis: random integer and pointer
// tile expressions in Tile IR text, evaluated concretely, every claimed fact checked.
//
// Why: the NVPTX lowering turns contiguity/divisibility into vector widths and 16-byte
// copies, so one over-claimed fact is a misaligned access on a GPU (an expand_dims rule
// once claimed 16-byte rows for `offs_m[:, None] * stride` with an odd stride).
//
// How: KernelGenerator writes a kernel of nested expressions (arange, splat, const,
// program_id, arguments with declared divisibility, add/sub/mul/div/rem/bitwise/shifts/
// min/max/select/cast, expand_dims/broadcast/permute/reshape, addptr, load, for loops
// carrying integers and pointers); Evaluator runs it for random concrete arguments that
// honour the declared divisibility and reports every value it computes (each loop trip
// included); violation() checks the analysis' facts against those values. Arithmetic
// overflow and division by zero are outside the analysis' contract (it assumes offsets
// do not wrap) and discard the run; casts wrap as the language defines.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "analysis/axis_info.h"
#include "ir/parser.h"
#include "ir/verifier.h"

namespace tessera::analysis {
namespace {

using namespace ir;
using Data = std::vector<int64_t>;  // a value's elements, row-major; pointers as byte addresses
using Shape = std::vector<int64_t>;

// Thrown when a run leaves the defined, non-wrapping arithmetic the analysis assumes.
struct Discard {};

bool fits(__int128 v, const ElemType& e) {
  if (e.is_bool()) return v == 0 || v == 1;
  int b = e.is_ptr() ? 64 : e.bits();
  if (e.is_unsigned()) return v >= 0 && v < (static_cast<__int128>(1) << b);
  return v >= -(static_cast<__int128>(1) << (b - 1)) && v < (static_cast<__int128>(1) << (b - 1));
}
int64_t exact(__int128 v, const ElemType& e) {
  if (!fits(v, e)) throw Discard{};
  return static_cast<int64_t>(v);
}
// Two's-complement truncation to e (a cast's semantics; to i1 means != 0).
int64_t wrap(__int128 v, const ElemType& e) {
  if (e.is_bool()) return v != 0;
  int b = e.bits();
  unsigned __int128 u = static_cast<unsigned __int128>(v) & ((static_cast<unsigned __int128>(1) << b) - 1);
  if (!e.is_unsigned() && ((u >> (b - 1)) & 1)) return static_cast<int64_t>(static_cast<__int128>(u) - (static_cast<__int128>(1) << b));
  return static_cast<int64_t>(u);
}

std::vector<int64_t> row_major_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

struct Concrete {
  std::vector<int64_t> args;  // per kernel argument: its integer value or byte address
  int64_t pid[3] = {0, 0, 0}, nprog[3] = {1, 1, 1};
};

// Runs the integer/pointer subset of Tile IR; observe() sees every value computed.
class Evaluator {
 public:
  using Observer = std::function<void(const Value*, const Data&)>;
  Evaluator(const Kernel& k, const Concrete& c, Observer observe) : k_(k), c_(c), observe_(std::move(observe)) {}

  void run() {
    for (size_t i = 0; i < k_.args.size(); ++i) bind(k_.args[i].value, {c_.args[i]});
    run_block(*k_.body());
  }

 private:
  void bind(const Value* v, Data d) {
    observe_(v, d);
    vals_[v] = std::move(d);
  }
  const Data& get(const Value* v) const { return vals_.at(v); }

  // The yield's operands' values (empty for return).
  std::vector<Data> run_block(const Block& b) {
    for (auto& op : b.ops) {
      if (op->kind == OpKind::Yield) {
        std::vector<Data> out;
        for (Value* v : op->operands) out.push_back(get(v));
        return out;
      }
      if (op->kind == OpKind::Return) return {};
      run_op(*op);
    }
    return {};
  }

  // Element i of operand v broadcast against a result of n elements (scalars repeat).
  int64_t lane(const Value* v, size_t i) const {
    const Data& d = get(v);
    return d.size() == 1 ? d[0] : d[i];
  }

  void run_op(const Op& op) {
    if (op.kind == OpKind::For) return run_for(op);
    const Type& t = op.result()->type;
    size_t n = static_cast<size_t>(t.numel());
    const ElemType& e = t.elem;
    Data r(n);
    auto binary = [&](auto f) {
      for (size_t i = 0; i < n; ++i) r[i] = f(static_cast<__int128>(lane(op.operands[0], i)), static_cast<__int128>(lane(op.operands[1], i)));
    };
    switch (op.kind) {
      case OpKind::Const: std::fill(r.begin(), r.end(), op.int_attr("value")); break;
      case OpKind::ProgramId: r[0] = c_.pid[op.int_attr("axis")]; break;
      case OpKind::NumPrograms: r[0] = c_.nprog[op.int_attr("axis")]; break;
      case OpKind::Arange:
        for (size_t i = 0; i < n; ++i) r[i] = op.int_attr("start") + static_cast<int64_t>(i);
        break;
      case OpKind::Splat: std::fill(r.begin(), r.end(), get(op.operands[0])[0]); break;
      case OpKind::ExpandDims:
      case OpKind::Reshape:
      case OpKind::Hint: r = get(op.operands[0]); break;
      case OpKind::Broadcast: {
        const Shape& src = op.operands[0]->type.shape;
        auto ss = row_major_strides(src), rs = row_major_strides(t.shape);
        for (size_t i = 0; i < n; ++i) {
          int64_t s = 0;
          for (size_t d = 0; d < src.size(); ++d) s += src[d] == 1 ? 0 : (static_cast<int64_t>(i) / rs[d] % t.shape[d]) * ss[d];
          r[i] = get(op.operands[0])[s];
        }
        break;
      }
      case OpKind::Permute: {
        auto order = op.ints_attr("order");
        auto ss = row_major_strides(op.operands[0]->type.shape), rs = row_major_strides(t.shape);
        for (size_t i = 0; i < n; ++i) {
          int64_t s = 0;  // result dim d is operand dim order[d]
          for (size_t d = 0; d < order.size(); ++d) s += (static_cast<int64_t>(i) / rs[d] % t.shape[d]) * ss[order[d]];
          r[i] = get(op.operands[0])[s];
        }
        break;
      }
      case OpKind::Add: binary([&](__int128 a, __int128 b) { return exact(a + b, e); }); break;
      case OpKind::Sub: binary([&](__int128 a, __int128 b) { return exact(a - b, e); }); break;
      case OpKind::Mul: binary([&](__int128 a, __int128 b) { return exact(a * b, e); }); break;
      case OpKind::Div:
      case OpKind::Rem:
        binary([&](__int128 a, __int128 b) -> int64_t {
          if (b == 0) throw Discard{};
          return exact(op.kind == OpKind::Div ? a / b : a % b, e);  // both truncate toward zero, like C
        });
        break;
      case OpKind::And: binary([&](__int128 a, __int128 b) { return wrap(a & b, e); }); break;
      case OpKind::Or: binary([&](__int128 a, __int128 b) { return wrap(a | b, e); }); break;
      case OpKind::Xor: binary([&](__int128 a, __int128 b) { return wrap(a ^ b, e); }); break;
      case OpKind::Shl:
      case OpKind::Shr:
        binary([&](__int128 a, __int128 b) -> int64_t {
          if (b < 0 || b >= e.bits()) throw Discard{};
          if (op.kind == OpKind::Shl) return exact(a * (static_cast<__int128>(1) << static_cast<int>(b)), e);
          return static_cast<int64_t>(a >> static_cast<int>(b));  // arithmetic; unsigned values are non-negative here
        });
        break;
      case OpKind::Min: binary([](__int128 a, __int128 b) { return static_cast<int64_t>(std::min(a, b)); }); break;
      case OpKind::Max: binary([](__int128 a, __int128 b) { return static_cast<int64_t>(std::max(a, b)); }); break;
      case OpKind::Neg:
        for (size_t i = 0; i < n; ++i) r[i] = exact(-static_cast<__int128>(lane(op.operands[0], i)), e);
        break;
      case OpKind::Abs:
        for (size_t i = 0; i < n; ++i) {
          __int128 a = lane(op.operands[0], i);
          r[i] = exact(a < 0 ? -a : a, e);
        }
        break;
      case OpKind::Not:
        for (size_t i = 0; i < n; ++i) r[i] = wrap(~static_cast<__int128>(lane(op.operands[0], i)), e);
        break;
      case OpKind::Cmp: {
        std::string p = op.str_attr("pred");
        binary([&](__int128 a, __int128 b) -> int64_t {
          return p == "eq" ? a == b : p == "ne" ? a != b : p == "lt" ? a < b : p == "le" ? a <= b : p == "gt" ? a > b : a >= b;
        });
        break;
      }
      case OpKind::Select:
        for (size_t i = 0; i < n; ++i) r[i] = lane(op.operands[0], i) ? lane(op.operands[1], i) : lane(op.operands[2], i);
        break;
      case OpKind::Cast:
        for (size_t i = 0; i < n; ++i) r[i] = wrap(lane(op.operands[0], i), e);
        break;
      case OpKind::AddPtr: {
        int64_t elem_bytes = e.pointee_type().bytes();
        binary([&](__int128 p, __int128 off) { return exact(p + off * elem_bytes, e); });
        break;
      }
      case OpKind::Load: {
        // Memory holds a small function of the address: equal addresses, equal values.
        for (size_t i = 0; i < n; ++i) {
          bool on = op.operands.size() < 2 || lane(op.operands[1], i);
          uint64_t a = static_cast<uint64_t>(lane(op.operands[0], i));
          int64_t mem = static_cast<int64_t>((a * 0x9E3779B97F4A7C15ull) >> 58);
          r[i] = on ? mem : op.operands.size() >= 3 ? lane(op.operands[2], i) : 0;
        }
        break;
      }
      default:
        ADD_FAILURE() << "the evaluator has no rule for " << op.name();
        throw Discard{};
    }
    bind(op.result(), std::move(r));
  }

  void run_for(const Op& op) {
    const Block& body = *op.regions[0]->block;
    int64_t lb = get(op.operands[0])[0], ub = get(op.operands[1])[0], step = get(op.operands[2])[0];
    if (step <= 0) throw Discard{};
    std::vector<Data> carried;
    for (size_t i = 3; i < op.operands.size(); ++i) carried.push_back(get(op.operands[i]));
    for (int64_t iv = lb; iv < ub; iv += step) {
      bind(body.args[0].get(), {iv});
      for (size_t i = 0; i < carried.size(); ++i) bind(body.args[i + 1].get(), carried[i]);
      carried = run_block(body);
    }
    for (size_t i = 0; i < carried.size(); ++i) bind(op.result(static_cast<int>(i)), carried[i]);
  }

  const Kernel& k_;
  const Concrete& c_;
  Observer observe_;
  std::unordered_map<const Value*, Data> vals_;
};

// The first fact of `a` the values `v` of type `t` contradict, or "" (see axis_info.h:
// runs start at indices that are multiples of the contiguity/constancy; pointers step
// by their element size and are divisible in bytes).
std::string violation(const AxisInfo& a, const Type& t, const Data& v) {
  size_t want = static_cast<size_t>(std::max(t.rank(), 1));
  if (a.contiguity.size() != want || a.divisibility.size() != want || a.constancy.size() != want)
    return "fact vectors of the wrong rank: " + a.str();
  std::ostringstream why;
  if (a.constant)
    for (int64_t x : v)
      if (x != *a.constant) return (why << "constant " << *a.constant << " but an element is " << x, why.str());
  if (a.nonnegative)
    for (int64_t x : v)
      if (x < 0) return (why << "nonnegative but an element is " << x, why.str());
  int64_t unit = t.elem.is_ptr() ? t.elem.pointee_type().bytes() : 1;
  if (t.is_scalar()) {
    if (v[0] % a.divisibility[0] != 0) return (why << "divisibility " << a.divisibility[0] << " of scalar " << v[0], why.str());
    return "";
  }
  auto strides = row_major_strides(t.shape);
  for (int d = 0; d < t.rank(); ++d) {
    int64_t c = a.contiguity[d], dv = a.divisibility[d], k = a.constancy[d], s = strides[d];
    if (c < 1 || dv < 1 || k < 1) return "non-positive fact: " + a.str();
    for (size_t f = 0; f < v.size(); ++f) {
      int64_t i = static_cast<int64_t>(f) / s % t.shape[d];
      if (v[f] != v[f - (i % c) * s] + (i % c) * unit)
        return (why << "contiguity " << c << " along dim " << d << ": element " << i << " is " << v[f] << ", its run starts with "
                    << v[f - (i % c) * s],
                why.str());
      if (i % c == 0 && v[f] % dv != 0)
        return (why << "divisibility " << dv << " along dim " << d << ": run start " << i << " is " << v[f], why.str());
      if (v[f] != v[f - (i % k) * s])
        return (why << "constancy " << k << " along dim " << d << ": element " << i << " is " << v[f] << ", its run starts with "
                    << v[f - (i % k) * s],
                why.str());
    }
  }
  return "";
}

std::string shape_str(const Shape& s) {
  std::string r;
  for (int64_t d : s) r += std::to_string(d) + "x";
  return r;
}
std::string type_str(const Shape& s, const std::string& elem) { return s.empty() ? elem : "tile<" + shape_str(s) + elem + ">"; }

// Writes a random kernel: nested expressions built top-down from the wanted shape and
// element type, so every operand is fresh (only arguments, loop variables and carried
// values are shared).
class KernelGenerator {
 public:
  explicit KernelGenerator(uint64_t seed) : rng_(seed) {}

  struct IntArg {
    std::string name;
    int64_t div;
    bool positive;  // a loop step: concrete values > 0
  };
  struct PtrArg {
    std::string name, pointee;
    int64_t div;
  };
  std::vector<IntArg> int_args;
  std::vector<PtrArg> ptr_args;

  std::string generate() {
    static const char* pointees[] = {"f16", "f32", "i32", "f64", "i8"};
    for (int i = 0; i < 3; ++i) int_args.push_back({"%n" + std::to_string(i), pick_pow2(6), false});
    int_args.push_back({"%step", pick_pow2(5), true});
    for (const char* p : pointees) ptr_args.push_back({std::string("%p_") + p, p, pick_pow2(6)});
    int roots = 1 + static_cast<int>(uniform(0, 2));
    for (int i = 0; i < roots; ++i) {
      Shape s = random_shape();
      if (chance(0.4)) gen_ptr(s, pointees[uniform(0, 4)], 3);
      else gen_int(s, chance(0.8) ? "i32" : "i64", 4);
    }
    std::string head = "kernel @fuzz(";
    for (size_t i = 0; i < int_args.size(); ++i)
      head += (i ? ", " : "") + int_args[i].name + ": i32 {divisibility = " + std::to_string(int_args[i].div) + "}";
    for (auto& p : ptr_args) head += ", " + p.name + ": ptr<" + p.pointee + "> {divisibility = " + std::to_string(p.div) + "}";
    return head + ") {\n" + body_ + "  return\n}\n";
  }

 private:
  std::mt19937_64 rng_;
  int next_ = 0, line_ = 0, loop_depth_ = 0;
  std::string body_, indent_ = "  ";
  struct Local {
    std::string name, type;
  };
  std::vector<Local> scope_;  // loop variables and carried values usable as leaves

  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int64_t pick_pow2(int max_log) { return int64_t(1) << uniform(0, max_log); }
  template <class T>
  const T& pick(const std::vector<T>& v) { return v[uniform(0, static_cast<int64_t>(v.size()) - 1)]; }

  Shape random_shape() {
    int rank = static_cast<int>(uniform(0, 9) < 1 ? 0 : uniform(0, 9) < 5 ? 1 : uniform(0, 9) < 8 ? 2 : 3);
    Shape s;
    int64_t budget = 256;
    for (int d = 0; d < rank; ++d) {
      int64_t n = pick_pow2(5);
      while (n > budget) n /= 2;
      budget /= n;
      s.push_back(n);
    }
    return s;
  }

  std::string emit(const std::string& rhs, const std::string& type) {
    std::string name = "%" + std::to_string(next_++);
    body_ += indent_ + name + " = " + rhs + " : " + type + " loc(" + std::to_string(++line_) + ":1)\n";
    return name;
  }
  std::string constant(int64_t v, const Shape& s, const std::string& elem) {
    return emit("const {value = " + std::to_string(v) + "}", type_str(s, elem));
  }
  int64_t interesting_constant() {
    static const std::vector<int64_t> cs = {0, 1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32, 48, 64, 100, 128, 1024, -1, -4, -16};
    return pick(cs);
  }

  // A leaf of the wanted shape and element type.
  std::string gen_leaf(const Shape& s, const std::string& elem) {
    std::vector<const Local*> locals;
    for (auto& l : scope_)
      if (l.type == type_str(s, elem)) locals.push_back(&l);
    if (!locals.empty() && chance(0.5)) return pick(locals)->name;
    if (elem != "i32") return emit("cast " + gen_leaf(s, "i32"), type_str(s, elem));
    if (s.empty()) {
      switch (uniform(0, 4)) {
        case 0: return constant(interesting_constant(), s, elem);
        case 1: return emit("program_id {axis = " + std::to_string(uniform(0, 1)) + "}", "i32");
        case 2: return emit("num_programs {axis = 0}", "i32");
        default: return pick(int_args).name;
      }
    }
    int64_t k = uniform(0, 9);
    if (s.size() == 1 && k < 5) {
      int64_t start = chance(0.5) ? s[0] * uniform(0, 3) : uniform(-8, 40);
      return emit("arange {start = " + std::to_string(start) + ", end = " + std::to_string(start + s[0]) + "}", type_str(s, elem));
    }
    if (k < 8) return emit("splat " + gen_int({}, elem, 1), type_str(s, elem));
    return constant(interesting_constant(), s, elem);
  }

  // A small operand for mul/div/rem: a splat of a constant or argument, or a leaf.
  std::string small(const Shape& s, const std::string& elem) {
    if (chance(0.3)) return gen_leaf(s, elem);
    std::string x = chance(0.5) ? constant(interesting_constant(), {}, "i32") : pick(int_args).name;
    if (elem != "i32") x = emit("cast " + x, elem);
    return s.empty() ? x : emit("splat " + x, type_str(s, elem));
  }

  std::string gen_int(const Shape& s, const std::string& elem, int depth) {
    if (depth <= 0 || chance(0.15)) return gen_leaf(s, elem);
    std::string ty = type_str(s, elem);
    auto sub = [&](const Shape& s2) { return gen_int(s2, elem, depth - 1); };
    switch (uniform(0, 23)) {
      case 0: case 1: case 2: return emit("add " + sub(s) + ", " + sub(s), ty);
      case 3: return emit("sub " + sub(s) + ", " + sub(s), ty);
      case 4: case 5: return emit(std::string(chance(0.5) ? "mul " : "mul ") + sub(s) + ", " + small(s, elem), ty);
      case 6: return emit(std::string(chance(0.5) ? "rem " : "div ") + sub(s) + ", " + small(s, elem), ty);
      case 7: {
        static const std::vector<std::string> ops = {"and", "or", "xor", "min", "max"};
        return emit(pick(ops) + " " + sub(s) + ", " + sub(s), ty);
      }
      case 8: {
        std::string amount = chance(0.5) ? small_const(s, elem, uniform(0, 3)) : emit("and " + sub(s) + ", " + small_const(s, elem, 3), ty);
        return emit(std::string(chance(0.5) ? "shl " : "shr ") + sub(s) + ", " + amount, ty);
      }
      case 9: {
        std::string c = gen_cmp(s.empty() || chance(0.8) ? s : Shape{}, elem, depth - 1);
        return emit("select " + c + ", " + sub(s) + ", " + sub(s), ty);
      }
      case 10: {
        static const std::vector<std::string> ops = {"neg", "abs", "not"};
        return emit(pick(ops) + " " + sub(s), ty);
      }
      case 11: {
        static const std::vector<std::string> elems = {"i32", "i64", "u32", "i16"};
        return emit("cast " + gen_int(s, pick(elems), depth - 1), ty);
      }
      case 12: case 13: {  // expand_dims at a size-1 dim
        std::vector<int> ones;
        for (size_t d = 0; d < s.size(); ++d)
          if (s[d] == 1) ones.push_back(static_cast<int>(d));
        if (ones.empty()) break;
        int ax = pick(ones);
        Shape src = s;
        src.erase(src.begin() + ax);
        return emit("expand_dims " + sub(src) + " {axis = " + std::to_string(ax) + "}", ty);
      }
      case 14: case 15: {  // broadcast of some dims from 1
        Shape src = s;
        bool any = false;
        for (auto& d : src)
          if (d > 1 && chance(0.6)) d = 1, any = true;
        if (!any) break;
        return emit("broadcast " + sub(src), ty);
      }
      case 16: {
        if (s.size() < 2) break;
        std::vector<int64_t> order(s.size());
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng_);
        Shape src(s.size());
        std::string o;
        for (size_t d = 0; d < s.size(); ++d) src[order[d]] = s[d], o += (d ? ", " : "") + std::to_string(order[d]);
        return emit("permute " + sub(src) + " {order = [" + o + "]}", ty);
      }
      case 17: {
        if (s.empty()) break;
        int64_t n = 1;
        for (int64_t d : s) n *= d;
        Shape src;
        while (n > 1 && src.size() < 2 && chance(0.7)) {
          int64_t d = int64_t(1) << uniform(0, 63 - __builtin_clzll(static_cast<uint64_t>(n)));
          src.push_back(d), n /= d;
        }
        src.push_back(n);
        return emit("reshape " + sub(src), ty);
      }
      case 18: {
        if (elem != "i32") break;
        std::string p = gen_ptr(s, "i32", depth - 1);
        if (s.empty() || chance(0.5)) return emit("load " + p, ty);
        return emit("load " + p + ", " + gen_cmp(s, elem, depth - 1) + ", " + gen_leaf(s, elem), ty);
      }
      case 19: {
        if (loop_depth_ >= 2) break;
        return gen_loop(ty, [&] { return sub(s); }, [&](const std::string& v) {
          return chance(0.5) ? emit("add " + v + ", " + sub(s), ty) : sub(s);
        });
      }
      // The shapes kernels write, more often than chance gives them: block offsets
      // splat(pid * B) + arange(B), and their remainder and masks.
      case 20: case 21: return offsets(s, elem, depth);
      case 22: return emit(std::string(chance(0.5) ? "rem " : "div ") + offsets(s, elem, depth) + ", " + small(s, elem), ty);
      case 23: return emit("select " + gen_cmp(s, elem, depth - 1) + ", " + sub(s) + ", " + sub(s), ty);
    }
    return emit("add " + sub(s) + ", " + sub(s), ty);
  }

  // splat(start) + arange(B) (or another leaf) for 1-D i32 tiles, else any expression.
  std::string offsets(const Shape& s, const std::string& elem, int depth) {
    if (s.size() != 1 || elem != "i32" || chance(0.3)) return gen_int(s, elem, depth - 1);
    std::string start = gen_int({}, elem, depth - 1);
    return emit("add " + emit("splat " + start, type_str(s, elem)) + ", " + gen_leaf(s, elem), type_str(s, elem));
  }

  // A comparison, often the mask form `offsets < splat(n)` (either way round).
  std::string gen_cmp(const Shape& s, const std::string& elem, int depth) {
    static const std::vector<std::string> preds = {"eq", "ne", "lt", "le", "gt", "ge"};
    std::string x = offsets(s, elem, depth);
    std::string bound = elem == "i32" && chance(0.5) ? pick(int_args).name : gen_int({}, elem, depth);
    std::string n = s.empty() || chance(0.3) ? gen_int(s, elem, depth) : emit("splat " + bound, type_str(s, elem));
    if (chance(0.5)) std::swap(x, n);
    return emit("cmp " + x + ", " + n + " {pred = \"" + pick(preds) + "\"}", type_str(s, "i1"));
  }

  std::string small_const(const Shape& s, const std::string& elem, int64_t v) {
    std::string c = constant(v, {}, elem);
    return s.empty() ? c : emit("splat " + c, type_str(s, elem));
  }

  // for lb, lb + step * trips, step carrying one value; body(v) computes its next value.
  std::string gen_loop(const std::string& ty, const std::function<std::string()>& init,
                       const std::function<std::string(const std::string&)>& body) {
    std::string lb = chance(0.5) ? constant(pick(std::vector<int64_t>{0, 1, 4, 16}), {}, "i32") : pick(int_args).name;
    std::string step = chance(0.5) ? constant(pick(std::vector<int64_t>{1, 2, 16, 64}), {}, "i32") : "%step";
    std::string span = emit("mul " + step + ", " + constant(uniform(0, 3), {}, "i32"), "i32");
    std::string ub = emit("add " + lb + ", " + span, "i32");
    std::string v0 = init();
    int id = next_++;
    std::string r = "%" + std::to_string(id), iv = "%iv" + std::to_string(id), v = "%v" + std::to_string(id);
    body_ += indent_ + r + " = for " + lb + ", " + ub + ", " + step + ", " + v0 + " : " + ty + " {\n" + indent_ + "^(" + iv +
             ": i32, " + v + ": " + ty + "):\n";
    std::string outer_indent = indent_;
    indent_ += "  ";
    ++loop_depth_;
    scope_.push_back({iv, "i32"});
    scope_.push_back({v, ty});
    std::string next = body(v);
    scope_.resize(scope_.size() - 2);
    --loop_depth_;
    body_ += indent_ + "yield " + next + " loc(" + std::to_string(++line_) + ":1)\n";
    indent_ = outer_indent;
    body_ += indent_ + "} loc(" + std::to_string(++line_) + ":1)\n";
    return r;
  }

  std::string gen_ptr(const Shape& s, const std::string& pointee, int depth) {
    std::string ty = type_str(s, "ptr<" + pointee + ">");
    std::string off_elem = chance(0.8) ? "i32" : "i64";
    if (depth > 1 && loop_depth_ < 2 && chance(0.2))
      return gen_loop(ty, [&] { return gen_ptr(s, pointee, depth - 1); },
                      [&](const std::string& v) { return emit("addptr " + v + ", " + gen_int(s, off_elem, depth - 1), ty); });
    std::string base;
    if (depth > 1 && chance(0.3)) {
      base = gen_ptr(s, pointee, depth - 1);
    } else {
      std::string arg;
      for (auto& p : ptr_args)
        if (p.pointee == pointee) arg = p.name;
      base = s.empty() ? arg : emit("splat " + arg, ty);
    }
    return emit("addptr " + base + ", " + gen_int(s, off_elem, depth), ty);
  }
};

// Concrete arguments honouring the declared divisibility, often by exactly that power
// of two (odd multiples), so an over-claimed fact shows.
Concrete random_concrete(const KernelGenerator& g, std::mt19937_64& rng) {
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  Concrete c;
  for (auto& a : g.int_args) {
    int64_t m = a.positive ? uniform(1, 4) : uniform(-3, 12);
    if (uniform(0, 2) != 0) m = 2 * m + 1;
    c.args.push_back(a.div * m);
  }
  static const std::map<std::string, int64_t> bytes = {{"f16", 2}, {"f32", 4}, {"i32", 4}, {"f64", 8}, {"i8", 1}};
  for (auto& p : g.ptr_args) c.args.push_back(std::max(p.div, bytes.at(p.pointee)) * (2 * uniform(1 << 10, 1 << 20) + 1));
  for (int a = 0; a < 3; ++a) c.pid[a] = uniform(0, 5), c.nprog[a] = c.pid[a] + uniform(1, 3);
  return c;
}

// Every fact the analysis claims about a random kernel holds for random arguments.
// TESSERA_AXIS_FUZZ_CASES raises the case count (the default keeps it under a few seconds).
TEST(AxisInfoFuzz, EveryClaimedFactHoldsOnConcreteValues) {
  int cases = 8000;
  if (const char* env = std::getenv("TESSERA_AXIS_FUZZ_CASES")) cases = std::atoi(env);
  const int runs_per_case = 6;
  int checked_runs = 0, discarded_runs = 0, failures = 0;
  std::map<std::string, std::string> smallest_failure;  // per op kind: the shortest failing kernel and why
  for (int seed = 0; seed < cases; ++seed) {
    KernelGenerator g(static_cast<uint64_t>(seed));
    std::string text = g.generate();
    std::unique_ptr<Kernel> k;
    try {
      k = parse_kernel(text);
      verify_kernel(*k);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the generator wrote invalid IR (seed " << seed << "): " << e.what() << "\n" << text;
      continue;
    }
    AxisAnalysis axis(*k);
    std::mt19937_64 rng(static_cast<uint64_t>(seed) * 7919 + 1);
    for (int run = 0; run < runs_per_case; ++run) {
      Concrete c = random_concrete(g, rng);
      std::string found;
      Evaluator ev(*k, c, [&](const Value* v, const Data& d) {
        if (!found.empty() || v->type.elem.is_float()) return;
        std::string why = violation(axis.get(v), v->type, d);
        if (why.empty()) return;
        std::string where = v->def() ? std::string(op_name(v->def()->kind)) + " at line " + std::to_string(v->def()->loc.line)
                                     : "block argument " + std::to_string(v->index());
        found = where + ": " + why + " (claimed " + axis.get(v).str() + ")";
        std::string key = v->def() ? op_name(v->def()->kind) : "block argument";
        auto& best = smallest_failure[key];
        if (best.empty() || best.size() > text.size() + found.size()) best = found + "\n" + text;
      });
      try {
        ev.run();
        ++checked_runs;
      } catch (const Discard&) {
        ++discarded_runs;
      }
      if (!found.empty()) {
        ++failures;
        break;
      }
    }
  }
  for (auto& [kind, report] : smallest_failure) ADD_FAILURE() << "unsound fact from " << kind << ":\n" << report;
  EXPECT_EQ(failures, 0) << failures << " of " << cases << " kernels had an unsound fact";
  // The generator must mostly stay inside the analysis' contract, or the test checks little.
  EXPECT_GT(checked_runs, 3 * discarded_runs) << checked_runs << " runs checked, " << discarded_runs << " discarded";
  std::printf("[axis fuzz] %d kernels, %d runs checked, %d discarded (overflow or division by zero)\n", cases, checked_runs,
              discarded_runs);
}

}  // namespace
}  // namespace tessera::analysis
