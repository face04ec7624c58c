// Tile IR types: scalars, pointers and static-shaped tiles of either.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::ir {

enum class ScalarKind : uint8_t { I1, I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64, Ptr };

// An element type: a scalar kind, or a pointer to a (non-pointer) scalar kind.
struct ElemType {
  ScalarKind kind = ScalarKind::I32;
  ScalarKind pointee = ScalarKind::I32;  // meaningful only when kind == Ptr

  bool operator==(const ElemType& o) const {
    return kind == o.kind && (kind != ScalarKind::Ptr || pointee == o.pointee);
  }
  bool operator!=(const ElemType& o) const { return !(*this == o); }
  bool is_ptr() const { return kind == ScalarKind::Ptr; }
  bool is_float() const;
  bool is_int() const;  // including i1 and unsigned
  bool is_unsigned() const;
  bool is_bool() const { return kind == ScalarKind::I1; }
  int bits() const;  // 1 for i1, 64 for pointers
  int bytes() const { return bits() <= 8 ? 1 : bits() / 8; }
  ElemType pointee_type() const { return ElemType{pointee, ScalarKind::I32}; }
  std::string str() const;
};

// A value's type: an element type and a shape (empty shape = scalar).
struct Type {
  ElemType elem;
  std::vector<int64_t> shape;

  Type() = default;
  Type(ElemType e, std::vector<int64_t> s = {}) : elem(e), shape(std::move(s)) {}
  static Type scalar(ScalarKind k) { return Type(ElemType{k, ScalarKind::I32}); }
  static Type pointer(ScalarKind pointee) { return Type(ElemType{ScalarKind::Ptr, pointee}); }

  bool is_tile() const { return !shape.empty(); }
  bool is_scalar() const { return shape.empty(); }
  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const;
  Type with_shape(std::vector<int64_t> s) const { return Type(elem, std::move(s)); }
  Type with_elem(ElemType e) const { return Type(e, shape); }
  Type scalar_type() const { return Type(elem); }
  bool operator==(const Type& o) const { return elem == o.elem && shape == o.shape; }
  bool operator!=(const Type& o) const { return !(*this == o); }
  std::string str() const;
};

std::optional<ScalarKind> scalar_kind_from_name(std::string_view name);
const char* scalar_kind_name(ScalarKind k);

}  // namespace tessera::ir
