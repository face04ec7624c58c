// Tile IR types: names, sizes and printing.
#include "ir/types.h"

namespace tessera::ir {

namespace {
struct KindInfo {
  ScalarKind kind;
  const char* name;
  int bits;
};
constexpr KindInfo kKinds[] = {
    {ScalarKind::I1, "i1", 1},     {ScalarKind::I8, "i8", 8},     {ScalarKind::I16, "i16", 16},
    {ScalarKind::I32, "i32", 32},  {ScalarKind::I64, "i64", 64},  {ScalarKind::U8, "u8", 8},
    {ScalarKind::U16, "u16", 16},  {ScalarKind::U32, "u32", 32},  {ScalarKind::U64, "u64", 64},
    {ScalarKind::F16, "f16", 16},  {ScalarKind::BF16, "bf16", 16}, {ScalarKind::F32, "f32", 32},
    {ScalarKind::F64, "f64", 64},  {ScalarKind::Ptr, "ptr", 64},
};
}  // namespace

const char* scalar_kind_name(ScalarKind k) { return kKinds[static_cast<int>(k)].name; }

std::optional<ScalarKind> scalar_kind_from_name(std::string_view name) {
  for (const auto& k : kKinds)
    if (name == k.name && k.kind != ScalarKind::Ptr) return k.kind;
  return std::nullopt;
}

bool ElemType::is_float() const {
  return kind == ScalarKind::F16 || kind == ScalarKind::BF16 || kind == ScalarKind::F32 ||
         kind == ScalarKind::F64;
}
bool ElemType::is_int() const { return !is_float() && !is_ptr(); }
bool ElemType::is_unsigned() const {
  return kind == ScalarKind::U8 || kind == ScalarKind::U16 || kind == ScalarKind::U32 ||
         kind == ScalarKind::U64;
}
int ElemType::bits() const { return kKinds[static_cast<int>(kind)].bits; }

std::string ElemType::str() const {
  if (is_ptr()) return std::string("ptr<") + scalar_kind_name(pointee) + ">";
  return scalar_kind_name(kind);
}

int64_t Type::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Type::str() const {
  if (shape.empty()) return elem.str();
  std::string s = "tile<";
  for (int64_t d : shape) s += std::to_string(d) + "x";
  return s + elem.str() + ">";
}

}  // namespace tessera::ir
