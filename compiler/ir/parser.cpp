// Parses the textual Tile IR of docs/tile_ir.md with a character-level
// recursive-descent reader (types such as tile<64x32xf16> do not tokenize well).
#include "ir/parser.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "tessera/compiler.h"

namespace tessera::ir {

namespace {

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  std::unique_ptr<Kernel> parse() {
    auto k = std::make_unique<Kernel>();
    kernel_ = k.get();
    expect_word("kernel");
    skip();
    expect('@');
    k->name = ident();
    expect('(');
    skip();
    if (!peek_is(')')) {
      do {
        skip();
        expect('%');
        std::string name = ident();
        expect(':');
        Type t = type();
        Value* v = k->body()->add_arg(t, name);
        define(name, v);
        KernelArg arg{v, {}};
        skip();
        if (peek_is('{')) arg.attrs = attr_dict();
        k->args.push_back(std::move(arg));
        skip();
      } while (accept(','));
    }
    expect(')');
    skip();
    if (accept_word("attributes")) k->attrs = attr_dict();
    expect('{');
    parse_block_body(k->body());
    expect('}');
    skip();
    if (pos_ != s_.size()) fail("unexpected text after the kernel");
    return k;
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
  Kernel* kernel_ = nullptr;
  std::vector<std::unordered_map<std::string, Value*>> scopes_{1};

  [[noreturn]] void fail(const std::string& what) {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') line++, col = 1;
      else col++;
    }
    throw CompileError("Tile IR parse error at " + std::to_string(line) + ":" + std::to_string(col) +
                           ": " + what + " (this is a Tessera bug if the IR came from the frontend)",
                       false);
  }

  void skip() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) pos_++;
      else if (s_.compare(pos_, 2, "//") == 0) {
        while (pos_ < s_.size() && s_[pos_] != '\n') pos_++;
      } else break;
    }
  }
  bool peek_is(char c) {
    skip();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool accept(char c) {
    if (peek_is(c)) {
      pos_++;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!accept(c)) fail(std::string("expected '") + c + "'");
  }
  static bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }
  std::string ident() {
    skip();
    size_t b = pos_;
    while (pos_ < s_.size() && ident_char(s_[pos_])) pos_++;
    if (b == pos_) fail("expected a name");
    return s_.substr(b, pos_ - b);
  }
  bool accept_word(const std::string& w) {
    skip();
    if (s_.compare(pos_, w.size(), w) == 0 && (pos_ + w.size() == s_.size() || !ident_char(s_[pos_ + w.size()]))) {
      pos_ += w.size();
      return true;
    }
    return false;
  }
  void expect_word(const std::string& w) {
    if (!accept_word(w)) fail("expected '" + w + "'");
  }

  void define(const std::string& name, Value* v) {
    if (scopes_.back().count(name)) fail("value %" + name + " defined twice");
    scopes_.back()[name] = v;
  }
  Value* lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    fail("use of undefined value %" + name);
  }

  ElemType elem_type() {
    skip();
    if (accept_word("ptr")) {
      expect('<');
      std::string n = ident();
      auto k = scalar_kind_from_name(n);
      if (!k) fail("unknown pointee type '" + n + "'");
      expect('>');
      return ElemType{ScalarKind::Ptr, *k};
    }
    std::string n = ident();
    auto k = scalar_kind_from_name(n);
    if (!k) fail("unknown type '" + n + "'");
    return ElemType{*k, ScalarKind::I32};
  }

  Type type() {
    skip();
    if (accept_word("tile")) {
      expect('<');
      std::vector<int64_t> shape;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        size_t b = pos_;
        while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) pos_++;
        shape.push_back(std::stoll(s_.substr(b, pos_ - b)));
        if (pos_ >= s_.size() || s_[pos_] != 'x') fail("expected 'x' in tile shape");
        pos_++;
      }
      if (shape.empty()) fail("a tile type needs at least one dimension");
      ElemType e = elem_type();
      expect('>');
      return Type(e, shape);
    }
    return Type(elem_type());
  }

  Attr attr_value() {
    skip();
    if (pos_ >= s_.size()) fail("expected an attribute value");
    char c = s_[pos_];
    if (c == '"') {
      pos_++;
      std::string v;
      while (pos_ < s_.size() && s_[pos_] != '"') {
        char ch = s_[pos_++];
        if (ch == '\\' && pos_ < s_.size()) {
          char e = s_[pos_++];
          ch = e == 'n' ? '\n' : e == 't' ? '\t' : e;
        }
        v += ch;
      }
      if (pos_ >= s_.size()) fail("unterminated string");
      pos_++;
      return v;
    }
    if (c == '[') {
      pos_++;
      std::vector<int64_t> v;
      skip();
      if (!accept(']')) {
        do {
          Attr a = attr_value();
          if (!std::holds_alternative<int64_t>(a)) fail("only integer lists are supported");
          v.push_back(std::get<int64_t>(a));
        } while (accept(','));
        expect(']');
      }
      return v;
    }
    if (accept_word("true")) return true;
    if (accept_word("false")) return false;
    if (accept_word("inf")) return HUGE_VAL;
    if (accept_word("nan")) return std::nan("");
    if (c == '-' && s_.compare(pos_, 4, "-inf") == 0) {
      pos_ += 4;
      return -HUGE_VAL;
    }
    size_t b = pos_;
    if (c == '-' || c == '+') pos_++;
    bool is_float = false;
    while (pos_ < s_.size()) {
      char d = s_[pos_];
      if (std::isdigit(static_cast<unsigned char>(d))) pos_++;
      else if (d == '.' || d == 'e' || d == 'E') is_float = true, pos_++;
      else if ((d == '-' || d == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')) pos_++;
      else break;
    }
    std::string num = s_.substr(b, pos_ - b);
    if (num.empty() || num == "-" || num == "+") fail("expected an attribute value");
    char* end = nullptr;
    errno = 0;
    Attr value;
    if (is_float) value = std::strtod(num.c_str(), &end);
    else if (num[0] == '-') value = static_cast<int64_t>(std::strtoll(num.c_str(), &end, 10));
    else value = static_cast<int64_t>(std::strtoull(num.c_str(), &end, 10));  // u64 values keep their bits
    if (*end != '\0') {
      pos_ = b;
      fail("malformed number '" + num + "'");
    }
    if (errno == ERANGE && !is_float) {
      pos_ = b;
      fail("integer '" + num + "' does not fit in 64 bits");
    }
    return value;
  }

  std::map<std::string, Attr> attr_dict() {
    std::map<std::string, Attr> attrs;
    expect('{');
    if (accept('}')) return attrs;
    do {
      skip();
      size_t key_pos = pos_;
      std::string k = ident();
      if (!std::isalpha(static_cast<unsigned char>(k[0])) && k[0] != '_') {
        pos_ = key_pos;  // brace_starts_attrs relies on this: keys start like identifiers
        fail("attribute name '" + k + "' must start with a letter or '_'");
      }
      if (attrs.count(k)) {
        pos_ = key_pos;
        fail("attribute '" + k + "' given twice");
      }
      expect('=');
      attrs[k] = attr_value();
    } while (accept(','));
    expect('}');
    return attrs;
  }

  // At '%': does a result list `%a, %b =` start here? Then it is the next statement
  // (after an op with no operands, such as a bare `print`), not an operand list.
  bool at_result_list() {
    size_t save = pos_;
    bool results = false;
    while (accept('%')) {
      while (pos_ < s_.size() && ident_char(s_[pos_])) pos_++;
      if (accept('=')) {
        results = true;
        break;
      }
      if (!accept(',')) break;
    }
    pos_ = save;
    return results;
  }

  // '{' already seen by the caller's lookahead: is it an attribute dictionary?
  bool brace_starts_attrs() {
    size_t save = pos_;
    pos_++;  // '{'
    skip();
    bool attrs = false;
    if (pos_ < s_.size() && (std::isalpha(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) {
      while (pos_ < s_.size() && ident_char(s_[pos_])) pos_++;
      skip();
      attrs = pos_ < s_.size() && s_[pos_] == '=';
    }
    pos_ = save;
    return attrs;
  }

  void parse_block_body(Block* b) {
    while (true) {
      skip();
      if (pos_ >= s_.size()) fail("unexpected end of input (missing '}')");
      if (s_[pos_] == '}') return;
      parse_op(b);
    }
  }

  void parse_op(Block* b) {
    std::vector<std::string> result_names;
    std::vector<size_t> result_pos;
    if (peek_is('%')) {
      do {
        expect('%');
        result_pos.push_back(pos_);
        result_names.push_back(ident());
      } while (accept(','));
      expect('=');
    }
    skip();
    size_t name_pos = pos_;
    std::string name = ident();
    OpKind kind;
    if (!op_kind_from_name(name, &kind)) {
      pos_ = name_pos;
      fail("unknown op '" + name + "'");
    }
    Op* op = create_op(b, b->ops.end(), kind, Loc{});
    if (peek_is('%') && !at_result_list()) {
      do {
        expect('%');
        op->operands.push_back(lookup(ident()));
      } while (accept(','));
    }
    if (peek_is('{') && brace_starts_attrs()) op->attrs = attr_dict();
    if (accept(':')) {
      do op->add_result(type());
      while (accept(','));
    }
    if (op->results.size() != result_names.size()) {
      pos_ = name_pos;
      fail("op '" + name + "' names " + std::to_string(result_names.size()) + " results but lists " +
           std::to_string(op->results.size()) + " result types");
    }
    while (peek_is('{')) {
      Region* r = op->add_region();
      expect('{');
      scopes_.emplace_back();
      if (accept('^')) {
        expect('(');
        if (!peek_is(')')) {
          do {
            expect('%');
            std::string an = ident();
            expect(':');
            define(an, r->block->add_arg(type()));
          } while (accept(','));
        }
        expect(')');
        expect(':');
      }
      parse_block_body(r->block.get());
      expect('}');
      scopes_.pop_back();
    }
    if (accept_word("loc")) {
      expect('(');
      Attr l = attr_value();
      expect(':');
      Attr c = attr_value();
      expect(')');
      if (!std::holds_alternative<int64_t>(l) || !std::holds_alternative<int64_t>(c)) fail("bad loc");
      op->loc = Loc{static_cast<int>(std::get<int64_t>(l)), static_cast<int>(std::get<int64_t>(c))};
    }
    for (size_t i = 0; i < result_names.size(); ++i) {
      if (scopes_.back().count(result_names[i])) pos_ = result_pos[i];  // point the error at the name
      define(result_names[i], op->result(i));
    }
  }
};

}  // namespace

std::unique_ptr<Kernel> parse_kernel(const std::string& text) { return Parser(text).parse(); }

}  // namespace tessera::ir
