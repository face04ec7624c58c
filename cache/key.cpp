// Cache keys: XXH3-128 over named, length-framed fields, and their hex spelling.
#include <xxhash.h>

#include <new>

#include "tessera/cache.h"

namespace tessera::cache {
namespace {

XXH3_state_t* as_state(void* state) { return static_cast<XXH3_state_t*>(state); }

// Lengths are hashed as 8 little-endian bytes so a key is the same on every host.
void hash_u64(XXH3_state_t* state, uint64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
  XXH3_128bits_update(state, bytes, sizeof(bytes));
}

// One field: type tag, name length, name, value length, value. The tag keeps
// add("n", 7) apart from add("n", <the 8 bytes of 7>).
void hash_field(XXH3_state_t* state, char type_tag, std::string_view field,
                std::string_view value) {
  XXH3_128bits_update(state, &type_tag, 1);
  hash_u64(state, field.size());
  XXH3_128bits_update(state, field.data(), field.size());
  hash_u64(state, value.size());
  XXH3_128bits_update(state, value.data(), value.size());
}

Key128 from_xxh(XXH128_hash_t hash) { return Key128{hash.low64, hash.high64}; }

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string Key128::hex() const {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(hi >> (4 * i)) & 0xf];
    out[31 - i] = kDigits[(lo >> (4 * i)) & 0xf];
  }
  return out;
}

std::optional<Key128> Key128::from_hex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  Key128 key;
  for (size_t i = 0; i < 32; ++i) {
    int digit = hex_digit_value(hex[i]);
    if (digit < 0) return std::nullopt;
    uint64_t& half = i < 16 ? key.hi : key.lo;
    half = (half << 4) | static_cast<uint64_t>(digit);
  }
  return key;
}

KeyBuilder::KeyBuilder() : state_(XXH3_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH3_128bits_reset(as_state(state_));
}

KeyBuilder::~KeyBuilder() { XXH3_freeState(as_state(state_)); }

KeyBuilder& KeyBuilder::add(std::string_view field, std::string_view value) {
  hash_field(as_state(state_), 's', field, value);
  return *this;
}

KeyBuilder& KeyBuilder::add(std::string_view field, int64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(uint64_t(value) >> (8 * i));
  hash_field(as_state(state_), 'i', field,
             std::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  return *this;
}

Key128 KeyBuilder::finish() const { return from_xxh(XXH3_128bits_digest(as_state(state_))); }

Key128 hash_bytes(std::string_view bytes) {
  return from_xxh(XXH3_128bits(bytes.data(), bytes.size()));
}

}  // namespace tessera::cache
