// Constant folding arithmetic (see constant_fold.h). Ints are computed on uint64_t
// and wrapped to their width; floats in the op's arithmetic type (f32 for f16,
// bf16 and f32; f64 for f64 — as the compiled code and the interpreter compute)
// and rounded once to the result type; conversions round once, exactly.
#include "transforms/constant_fold.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tessera::transforms {

using namespace ir;

namespace {

bool unsigned_like(const ElemType& t) { return t.is_unsigned() || t.is_bool(); }

// Significand bits (with the implicit one) of a float type.
int precision(const ElemType& t) {
  switch (t.kind) {
    case ScalarKind::F16: return 11;
    case ScalarKind::BF16: return 8;
    case ScalarKind::F32: return 24;
    default: return 53;
  }
}

// x rounded to nearest even in a binary format with p significand bits, minimum
// normal exponent emin and largest finite value max_finite.
double round_to_format(double x, int p, int emin, double max_finite) {
  if (!std::isfinite(x) || x == 0) return x;
  int e;
  std::frexp(x, &e);                  // |x| in [2^(e-1), 2^e)
  int lead = std::max(e - 1, emin);   // subnormals all have emin's quantum
  double quantum = std::ldexp(1.0, lead - (p - 1));
  double r = std::nearbyint(x / quantum) * quantum;  // x / quantum is exact; default mode rounds to even
  return std::fabs(r) > max_finite ? std::copysign(HUGE_VAL, x) : r;
}

int64_t min_signed(const ElemType& t) { return wrap_int(t, uint64_t(1) << (t.bits() - 1)); }

ConstantValue int_value(int64_t v) { return ConstantValue{false, v, 0}; }
ConstantValue float_value(double f) { return ConstantValue{true, 0, f}; }

// An integer converted to float type `to` with one rounding (via double only when
// that is exact: 64-bit integers would otherwise round twice).
double int_to_float(const ElemType& to, int64_t v, bool is_unsigned) {
  bool neg = !is_unsigned && v < 0;
  uint64_t mag = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  if (mag == 0) return 0.0;
  int width = 64 - __builtin_clzll(mag), p = precision(to);
  double d;
  if (width <= p) {
    d = static_cast<double>(mag);
  } else {
    int shift = width - p;
    uint64_t q = mag >> shift, rest = mag & ((uint64_t(1) << shift) - 1), half = uint64_t(1) << (shift - 1);
    if (rest > half || (rest == half && (q & 1))) q++;
    d = std::ldexp(static_cast<double>(q), shift);
  }
  return round_float(to, neg ? -d : d);  // only overflow (f16) is left to round
}

// Truncation toward zero, saturating; NaN -> 0; to i1 means != 0 (NaN -> 1).
int64_t float_to_int(const ElemType& to, double x) {
  if (to.is_bool()) return x != 0;
  if (std::isnan(x)) return 0;
  double t = std::trunc(x);
  int bits = to.bits();
  if (to.is_unsigned()) {
    if (t <= 0) return 0;
    if (t >= std::ldexp(1.0, bits)) return wrap_int(to, ~uint64_t(0));
    return wrap_int(to, static_cast<uint64_t>(t));
  }
  double limit = std::ldexp(1.0, bits - 1);
  if (t >= limit) return wrap_int(to, (uint64_t(1) << (bits - 1)) - 1);
  if (t < -limit) return min_signed(to);
  return static_cast<int64_t>(t);
}

std::optional<ConstantValue> fold_cast(const ConstantValue& a, const ElemType& from, const ElemType& to) {
  if (from.is_ptr() || to.is_ptr()) return std::nullopt;
  if (from == to) return a;
  if (from.is_int() && to.is_int()) return int_value(to.is_bool() ? a.i != 0 : wrap_int(to, static_cast<uint64_t>(a.i)));
  if (from.is_int()) return float_value(int_to_float(to, a.i, unsigned_like(from)));
  if (to.is_int()) return int_value(float_to_int(to, a.f));
  return float_value(round_float(to, a.f));
}

std::optional<ConstantValue> fold_bitcast(const ConstantValue& a, const ElemType& from, const ElemType& to) {
  if (from.is_ptr() || to.is_ptr() || from.bits() != to.bits()) return std::nullopt;
  uint64_t raw;
  if (from.is_int()) {
    raw = static_cast<uint64_t>(a.i);
  } else if (std::isnan(a.f)) {
    return std::nullopt;  // the IR does not spell NaN payloads
  } else if (from.kind == ScalarKind::F32) {
    float f = static_cast<float>(a.f);
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    raw = u;
  } else if (from.kind == ScalarKind::F64) {
    std::memcpy(&raw, &a.f, sizeof raw);
  } else {
    return std::nullopt;  // f16/bf16 bit patterns: not worth a second implementation
  }
  if (to.is_int()) return int_value(wrap_int(to, raw));
  double d;
  if (to.kind == ScalarKind::F32) {
    uint32_t u = static_cast<uint32_t>(raw);
    float f;
    std::memcpy(&f, &u, sizeof f);
    d = f;
  } else if (to.kind == ScalarKind::F64) {
    std::memcpy(&d, &raw, sizeof d);
  } else {
    return std::nullopt;
  }
  if (std::isnan(d)) return std::nullopt;
  return float_value(d);
}

// Number of operands of the foldable elementwise ops (0: not folded here).
size_t fold_arity(OpKind k) {
  switch (k) {
    case OpKind::Neg: case OpKind::Not: case OpKind::Abs: case OpKind::Floor: case OpKind::Ceil:
    case OpKind::Sqrt: case OpKind::Rsqrt:
      return 1;
    case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div: case OpKind::Rem:
    case OpKind::And: case OpKind::Or: case OpKind::Xor: case OpKind::Shl: case OpKind::Shr:
    case OpKind::Min: case OpKind::Max: case OpKind::MinimumNan: case OpKind::MaximumNan:
    case OpKind::Cmp: case OpKind::Umulhi:
      return 2;
    case OpKind::Fma:
      return 3;
    default:
      return 0;
  }
}

template <class T>
bool compare(const std::string& pred, T x, T y) {
  // Float: ordered except ne (C++ comparisons have exactly these NaN rules).
  if (pred == "eq") return x == y;
  if (pred == "ne") return x != y;
  if (pred == "lt") return x < y;
  if (pred == "le") return x <= y;
  if (pred == "gt") return x > y;
  return x >= y;
}

// T is the arithmetic type: float (f16, bf16, f32) or double (f64).
template <class T>
std::optional<ConstantValue> fold_float(const Op& op, const std::vector<ConstantValue>& a, const ElemType& out) {
  T x = static_cast<T>(a[0].f), y = a.size() > 1 ? static_cast<T>(a[1].f) : T(0);  // exact
  bool is_min = op.kind == OpKind::Min || op.kind == OpKind::MinimumNan;
  T r;
  switch (op.kind) {
    case OpKind::Add: r = x + y; break;
    case OpKind::Sub: r = x - y; break;
    case OpKind::Mul: r = x * y; break;
    case OpKind::Div: r = x / y; break;  // IEEE: x/0 is +-inf or NaN, folded like any other value
    case OpKind::Rem: r = std::fmod(x, y); break;
    case OpKind::Min:
    case OpKind::Max:  // minNum/maxNum: a NaN operand yields the other one
      if (std::isnan(x) || std::isnan(y)) {
        r = std::isnan(x) ? y : x;
        break;
      }
      if (x == y && std::signbit(x) != std::signbit(y)) return std::nullopt;  // either zero may come out at run time
      r = is_min ? std::min(x, y) : std::max(x, y);
      break;
    case OpKind::MinimumNan:
    case OpKind::MaximumNan:  // NaN propagates; -0 < +0
      if (std::isnan(x) || std::isnan(y)) r = std::isnan(x) ? x : y;
      else if (x == y) r = (std::signbit(x) == is_min) ? x : y;
      else r = is_min ? std::min(x, y) : std::max(x, y);
      break;
    case OpKind::Cmp: return int_value(compare(op.str_attr("pred"), x, y));
    case OpKind::Neg: r = -x; break;
    case OpKind::Abs: r = std::fabs(x); break;
    case OpKind::Floor: r = std::floor(x); break;
    case OpKind::Ceil: r = std::ceil(x); break;
    case OpKind::Sqrt: r = std::sqrt(x); break;
    case OpKind::Rsqrt: r = T(1) / std::sqrt(x); break;  // two roundings, as compiled
    case OpKind::Fma: r = std::fma(x, y, static_cast<T>(a[2].f)); break;
    default: return std::nullopt;
  }
  return float_value(round_float(out, static_cast<double>(r)));
}

std::optional<ConstantValue> fold_int(const Op& op, const std::vector<ConstantValue>& a, const ElemType& t) {
  bool uns = unsigned_like(t);
  int bits = t.bits();
  int64_t x = a[0].i, y = a.size() > 1 ? a[1].i : 0;
  uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
  auto wrap = [&](uint64_t v) { return int_value(wrap_int(t, v)); };
  switch (op.kind) {
    case OpKind::Add: return wrap(ux + uy);
    case OpKind::Sub: return wrap(ux - uy);
    case OpKind::Mul: return wrap(ux * uy);
    case OpKind::Div:
    case OpKind::Rem:
      if (y == 0 || (!uns && x == min_signed(t) && y == -1)) return std::nullopt;
      if (uns) return wrap(op.kind == OpKind::Div ? ux / uy : ux % uy);
      return wrap(static_cast<uint64_t>(op.kind == OpKind::Div ? x / y : x % y));
    case OpKind::And: return wrap(ux & uy);
    case OpKind::Or: return wrap(ux | uy);
    case OpKind::Xor: return wrap(ux ^ uy);
    case OpKind::Shl:
    case OpKind::Shr:
      if ((!uns && y < 0) || uy >= static_cast<uint64_t>(bits)) return std::nullopt;
      if (op.kind == OpKind::Shl) return wrap(ux << uy);
      return wrap(uns ? ux >> uy : static_cast<uint64_t>(x >> uy));
    case OpKind::Min: return int_value(uns ? static_cast<int64_t>(std::min(ux, uy)) : std::min(x, y));
    case OpKind::Max: return int_value(uns ? static_cast<int64_t>(std::max(ux, uy)) : std::max(x, y));
    case OpKind::Cmp: {
      std::string p = op.str_attr("pred");
      return int_value(uns ? compare(p, ux, uy) : compare(p, x, y));
    }
    case OpKind::Neg: return wrap(0 - ux);
    case OpKind::Not: return wrap(~ux);
    case OpKind::Abs: return uns ? a[0] : wrap(x < 0 ? 0 - ux : ux);
    case OpKind::Umulhi:
      if (uns) return wrap(static_cast<uint64_t>((static_cast<unsigned __int128>(ux) * uy) >> bits));
      return wrap(static_cast<uint64_t>((static_cast<__int128>(x) * y) >> bits));
    default: return std::nullopt;
  }
}

}  // namespace

int64_t wrap_int(const ElemType& t, uint64_t raw) {
  int bits = t.bits();
  if (bits >= 64) return static_cast<int64_t>(raw);
  uint64_t mask = (uint64_t(1) << bits) - 1, v = raw & mask;
  if (!unsigned_like(t) && ((v >> (bits - 1)) & 1)) v |= ~mask;
  return static_cast<int64_t>(v);
}

double round_float(const ElemType& t, double x) {
  switch (t.kind) {
    case ScalarKind::F16: return round_to_format(x, 11, -14, 65504.0);
    case ScalarKind::BF16: return round_to_format(x, 8, -126, std::ldexp(255.0, 120));
    case ScalarKind::F32: return round_to_format(x, 24, -126, std::ldexp(16777215.0, 104));
    default: return x;
  }
}

std::optional<ConstantValue> constant_of(const Value* v) {
  const Op* d = v->def();
  if (!d) return std::nullopt;
  const ElemType& t = v->type.elem;
  if (d->kind == OpKind::Splat && d->operands.size() == 1 && d->operands[0]->type.elem == t)
    return constant_of(d->operands[0]);
  auto it = d->attrs.find("value");
  if (d->kind != OpKind::Const || it == d->attrs.end() || t.is_ptr()) return std::nullopt;
  const Attr& a = it->second;
  if (t.is_float()) {
    if (auto* f = std::get_if<double>(&a)) return float_value(round_float(t, *f));
    if (auto* i = std::get_if<int64_t>(&a)) return float_value(round_float(t, static_cast<double>(*i)));
    if (auto* b = std::get_if<bool>(&a)) return float_value(*b ? 1.0 : 0.0);
    return std::nullopt;
  }
  if (auto* i = std::get_if<int64_t>(&a)) return int_value(wrap_int(t, static_cast<uint64_t>(*i)));
  if (auto* b = std::get_if<bool>(&a)) return int_value(*b);
  return std::nullopt;  // a float value on an int type is malformed: the frontend converts it
}

std::optional<ConstantValue> fold_elementwise(const Op& op, const std::vector<ConstantValue>& args) {
  if (op.results.size() != 1 || args.size() != op.operands.size() || args.empty()) return std::nullopt;
  const ElemType& in = op.operands[0]->type.elem;
  const ElemType& out = op.result()->type.elem;
  if (op.kind == OpKind::Cast) {
    if (op.str_attr("rounding", "rtne") != "rtne") return std::nullopt;  // folds round to nearest only
    return args.size() == 1 ? fold_cast(args[0], in, out) : std::nullopt;
  }
  if (op.kind == OpKind::Bitcast) return args.size() == 1 ? fold_bitcast(args[0], in, out) : std::nullopt;
  if (fold_arity(op.kind) != args.size()) return std::nullopt;
  for (Value* v : op.operands)
    if (v->type.elem != in) return std::nullopt;
  if (op.kind == OpKind::Cmp ? !out.is_bool() : out != in) return std::nullopt;
  if (in.is_float())
    return in.kind == ScalarKind::F64 ? fold_float<double>(op, args, out) : fold_float<float>(op, args, out);
  if (in.is_int()) return fold_int(op, args, in);
  return std::nullopt;
}

}  // namespace tessera::transforms
