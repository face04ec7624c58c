// Tile IR in memory: op registry lookups and small helpers.
#include "ir/ir.h"

#include <cstring>

namespace tessera::ir {

namespace {
struct OpInfo {
  const char* name;
  const char* traits;
  const char* summary;
};
constexpr OpInfo kOps[] = {
#define TESSERA_OP(E, NAME, TRAITS, SUMMARY) {NAME, TRAITS, SUMMARY},
#include "ir/ops.def"
#undef TESSERA_OP
};
}  // namespace

const char* op_name(OpKind k) { return kOps[static_cast<int>(k)].name; }
const char* op_summary(OpKind k) { return kOps[static_cast<int>(k)].summary; }
bool op_has_trait(OpKind k, char t) { return std::strchr(kOps[static_cast<int>(k)].traits, t) != nullptr; }

bool op_kind_from_name(const std::string& name, OpKind* out) {
  for (size_t i = 0; i < sizeof(kOps) / sizeof(kOps[0]); ++i)
    if (name == kOps[i].name) {
      *out = static_cast<OpKind>(i);
      return true;
    }
  return false;
}

Value* Block::add_arg(Type t, std::string name) {
  args.push_back(std::make_unique<Value>(std::move(t), nullptr, this, static_cast<int>(args.size())));
  args.back()->name = std::move(name);
  return args.back().get();
}

Value* Op::add_result(Type t) {
  results.push_back(std::make_unique<Value>(std::move(t), this, nullptr, static_cast<int>(results.size())));
  return results.back().get();
}

Region* Op::add_region() {
  regions.push_back(std::make_unique<Region>(this));
  return regions.back().get();
}

int64_t Op::int_attr(const std::string& k, int64_t dflt) const {
  auto it = attrs.find(k);
  if (it == attrs.end()) return dflt;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  if (auto* b = std::get_if<bool>(&it->second)) return *b;
  if (auto* d = std::get_if<double>(&it->second)) return static_cast<int64_t>(*d);
  return dflt;
}

double Op::float_attr(const std::string& k, double dflt) const {
  auto it = attrs.find(k);
  if (it == attrs.end()) return dflt;
  if (auto* d = std::get_if<double>(&it->second)) return *d;
  if (auto* v = std::get_if<int64_t>(&it->second)) return static_cast<double>(*v);
  return dflt;
}

std::string Op::str_attr(const std::string& k, const std::string& dflt) const {
  auto it = attrs.find(k);
  if (it == attrs.end()) return dflt;
  if (auto* s = std::get_if<std::string>(&it->second)) return *s;
  return dflt;
}

bool Op::bool_attr(const std::string& k, bool dflt) const {
  auto it = attrs.find(k);
  if (it == attrs.end()) return dflt;
  if (auto* b = std::get_if<bool>(&it->second)) return *b;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v != 0;
  return dflt;
}

std::vector<int64_t> attr_ints(const Attr& a) {
  if (auto* v = std::get_if<std::vector<int64_t>>(&a)) return *v;
  if (auto* i = std::get_if<int64_t>(&a)) return {*i};
  return {};
}

std::vector<int64_t> Op::ints_attr(const std::string& k) const {
  auto it = attrs.find(k);
  return it == attrs.end() ? std::vector<int64_t>{} : attr_ints(it->second);
}

bool Op::const_is_float() const {
  auto it = attrs.find("value");
  return it != attrs.end() && std::holds_alternative<double>(it->second);
}

std::string Kernel::file() const {
  auto it = attrs.find("file");
  if (it == attrs.end()) return "<unknown>";
  if (auto* s = std::get_if<std::string>(&it->second)) return *s;
  return "<unknown>";
}

void for_each_op(Block* b, const std::function<void(Op*)>& f) {
  for (auto& op : b->ops) {
    f(op.get());
    for (auto& r : op->regions) for_each_op(r->block.get(), f);
  }
}

bool holds_op(const Block& b, OpKind kind) {
  for (auto& op : b.ops) {
    if (op->kind == kind) return true;
    for (auto& r : op->regions)
      if (holds_op(*r->block, kind)) return true;
  }
  return false;
}

Op* create_op(Block* b, std::list<std::unique_ptr<Op>>::iterator pos, OpKind k, Loc loc) {
  auto it = b->ops.insert(pos, std::make_unique<Op>(k, loc));
  (*it)->parent = b;
  return it->get();
}

}  // namespace tessera::ir
