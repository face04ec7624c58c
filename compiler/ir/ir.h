// Tile IR in memory: kernels, single-block regions, ops and SSA values.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "ir/types.h"

namespace tessera::ir {

enum class OpKind : uint16_t {
#define TESSERA_OP(E, NAME, TRAITS, SUMMARY) E,
#include "ir/ops.def"
#undef TESSERA_OP
};

const char* op_name(OpKind k);
const char* op_summary(OpKind k);
bool op_kind_from_name(const std::string& name, OpKind* out);
bool op_has_trait(OpKind k, char trait);  // see ops.def for the letters

// Source position (1-based; 0 = unknown) in the kernel's file.
struct Loc {
  int line = 0, col = 0;
};

using Attr = std::variant<int64_t, double, std::string, bool, std::vector<int64_t>>;

class Op;
class Block;
class Region;

class Value {
 public:
  Value(Type t, Op* def, Block* block, int index) : type(std::move(t)), def_(def), block_(block), index_(index) {}
  Type type;
  std::string name;  // printed name hint (kernel arguments keep theirs)
  Op* def() const { return def_; }            // null for block arguments
  Block* arg_owner() const { return block_; }  // non-null for block arguments
  int index() const { return index_; }         // result or argument index

 private:
  Op* def_;
  Block* block_;
  int index_;
};

class Block {
 public:
  explicit Block(Region* parent) : parent_(parent) {}
  Value* add_arg(Type t, std::string name = "");
  std::vector<std::unique_ptr<Value>> args;
  std::list<std::unique_ptr<Op>> ops;
  Region* parent() const { return parent_; }
  Op* terminator() const { return ops.empty() ? nullptr : ops.back().get(); }

 private:
  Region* parent_;
};

class Region {
 public:
  explicit Region(Op* parent) : parent_(parent), block(std::make_unique<Block>(this)) {}
  Op* parent() const { return parent_; }
  std::unique_ptr<Block> block_ptr() { return std::move(block); }
  Op* parent_;
  std::unique_ptr<Block> block;
};

class Op {
 public:
  Op(OpKind kind, Loc loc) : kind(kind), loc(loc) {}
  OpKind kind;
  Loc loc;
  std::vector<Value*> operands;
  std::vector<std::unique_ptr<Value>> results;
  std::map<std::string, Attr> attrs;
  std::vector<std::unique_ptr<Region>> regions;
  Block* parent = nullptr;

  Value* result(int i = 0) const { return results[i].get(); }
  Value* add_result(Type t);
  Region* add_region();
  const char* name() const { return op_name(kind); }

  bool has_attr(const std::string& k) const { return attrs.count(k) != 0; }
  int64_t int_attr(const std::string& k, int64_t dflt = 0) const;
  double float_attr(const std::string& k, double dflt = 0) const;  // ints convert
  std::string str_attr(const std::string& k, const std::string& dflt = "") const;
  bool bool_attr(const std::string& k, bool dflt = false) const;
  std::vector<int64_t> ints_attr(const std::string& k) const;
  bool const_is_float() const;  // Const only: value attribute is a double
};

struct KernelArg {
  Value* value;
  std::map<std::string, Attr> attrs;
};

class Kernel {
 public:
  Kernel() : body_region(std::make_unique<Region>(nullptr)) {}
  std::string name;
  std::map<std::string, Attr> attrs;  // file, num_warps, ...
  std::vector<KernelArg> args;
  std::unique_ptr<Region> body_region;
  Block* body() const { return body_region->block.get(); }
  std::string file() const;
};

// Helpers for passes.
void for_each_op(Block* b, const std::function<void(Op*)>& f);  // pre-order, nested
bool holds_op(const Block& b, OpKind kind);  // an op of `kind` in b or a region nested in it
Op* create_op(Block* b, std::list<std::unique_ptr<Op>>::iterator pos, OpKind k, Loc loc);
std::vector<int64_t> attr_ints(const Attr& a);

}  // namespace tessera::ir
