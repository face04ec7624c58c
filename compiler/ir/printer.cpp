// Prints Tile IR in the textual form of docs/tile_ir.md; values are renumbered
// %0, %1, ... in order of definition so that printing is canonical.
#include "ir/printer.h"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <unordered_map>

namespace tessera::ir {

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out + "\"";
}

std::string format_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The fewest digits that read back as d; a mantissa without a '.' gets ".0"
  // (`2.0`, `1.0e-30`), as docs/tile_ir.md and the frontend's printer spell floats.
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  size_t e = s.find('e');
  std::string mantissa = s.substr(0, e);
  if (mantissa.find('.') == std::string::npos) s.insert(mantissa.size(), ".0");
  return s;
}

class Printer {
 public:
  std::string print(const Kernel& k) {
    out_ << "kernel @" << k.name << "(";
    for (size_t i = 0; i < k.args.size(); ++i) {
      Value* v = k.args[i].value;
      names_[v] = "%" + v->name;
      out_ << (i ? ", " : "") << "%" << v->name << ": " << v->type.str();
      print_attrs(k.args[i].attrs);
    }
    out_ << ")";
    if (!k.attrs.empty()) {
      out_ << " attributes";
      print_attrs(k.attrs);
    }
    out_ << " {\n";
    print_block_ops(*k.body(), 1);
    out_ << "}\n";
    return out_.str();
  }

 private:
  std::ostringstream out_;
  std::unordered_map<const Value*, std::string> names_;
  int next_ = 0;

  std::string name_of(const Value* v) {
    auto it = names_.find(v);
    return it == names_.end() ? "%<undefined>" : it->second;
  }
  std::string define(const Value* v) { return names_[v] = "%" + std::to_string(next_++); }

  void print_attrs(const std::map<std::string, Attr>& attrs) {
    if (attrs.empty()) return;
    out_ << " {";
    bool first = true;
    for (auto& [k, v] : attrs) {
      out_ << (first ? "" : ", ") << k << " = " << print_attr(v);
      first = false;
    }
    out_ << "}";
  }

  void indent(int n) {
    for (int i = 0; i < n; ++i) out_ << "  ";
  }

  void print_block_ops(const Block& b, int depth) {
    for (auto& op : b.ops) print_op(*op, depth);
  }

  void print_op(const Op& op, int depth) {
    indent(depth);
    for (size_t i = 0; i < op.results.size(); ++i) out_ << (i ? ", " : "") << define(op.results[i].get());
    if (!op.results.empty()) out_ << " = ";
    out_ << op.name();
    for (size_t i = 0; i < op.operands.size(); ++i) out_ << (i ? ", " : " ") << name_of(op.operands[i]);
    print_attrs(op.attrs);
    if (!op.results.empty()) {
      out_ << " :";
      for (size_t i = 0; i < op.results.size(); ++i) out_ << (i ? ", " : " ") << op.results[i]->type.str();
    }
    for (auto& r : op.regions) {
      out_ << " {\n";
      const Block& b = *r->block;
      if (!b.args.empty()) {
        indent(depth + 1);
        out_ << "^(";
        for (size_t i = 0; i < b.args.size(); ++i)
          out_ << (i ? ", " : "") << define(b.args[i].get()) << ": " << b.args[i]->type.str();
        out_ << "):\n";
      }
      print_block_ops(b, depth + 1);
      indent(depth);
      out_ << "}";
    }
    if (op.loc.line > 0) out_ << " loc(" << op.loc.line << ":" << op.loc.col << ")";
    out_ << "\n";
  }
};

}  // namespace

std::string print_attr(const Attr& a) {
  if (auto* i = std::get_if<int64_t>(&a)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&a)) return format_double(*d);
  if (auto* s = std::get_if<std::string>(&a)) return quote(*s);
  if (auto* b = std::get_if<bool>(&a)) return *b ? "true" : "false";
  auto& v = std::get<std::vector<int64_t>>(a);
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string print_kernel(const Kernel& k) { return Printer().print(k); }

}  // namespace tessera::ir
