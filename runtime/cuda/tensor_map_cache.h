// Encoded tensor maps (CUtensorMap, 128 bytes) kept per kernel and map, by the launch
// values they were encoded from, so that a launch with the same operands copies 128
// bytes instead of calling cuTensorMapEncodeTiled again (driver.cpp, encode_tensor_maps).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

namespace tessera::runtime::cuda {

// What a map's encoding depends on at a launch: its base address, the two extents and
// the row stride in bytes. The rest (element size, box, swizzle) is fixed per map by the
// compiler (TensorMapSpec), so a cache per (kernel, map) needs only these.
struct TensorMapFields {
  uint64_t base = 0, inner = 0, outer = 0, stride = 0;
  bool operator==(const TensorMapFields& o) const {
    return base == o.base && inner == o.inner && outer == o.outer && stride == o.stride;
  }
};

// kWays maps per map slot, least recently used replaced. Why a few and not one: a
// training step launches the same kernel on several operands in turn (the layers of a
// model share a specialization), and PyTorch's caching allocator hands the same
// addresses back step after step, so each layer's maps repeat. Correct whatever
// changes: any field differing is a miss and a fresh encode.
class TensorMapCache {
 public:
  static constexpr int kWays = 4;
  static constexpr size_t kMapBytes = 128;

  void resize(size_t maps) {
    std::lock_guard<std::mutex> lock(mutex_);
    slots_.assign(maps, {});
  }

  // Copies the map encoded from `f` for map `slot` into `out` (128 bytes): true on a hit.
  bool find(size_t slot, const TensorMapFields& f, unsigned char* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot >= slots_.size()) return false;
    for (Entry& e : slots_[slot]) {
      if (e.last_use && e.fields == f) {
        e.last_use = ++clock_;
        std::memcpy(out, e.bytes, kMapBytes);
        ++hits_;
        return true;
      }
    }
    return false;
  }

  // Keeps `bytes`, the map encoded from `f`, replacing the slot's least recently used.
  void store(size_t slot, const TensorMapFields& f, const unsigned char* bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (slot >= slots_.size()) return;
    Entry* victim = &slots_[slot][0];
    for (Entry& e : slots_[slot])
      if (e.last_use < victim->last_use) victim = &e;
    victim->fields = f;
    victim->last_use = ++clock_;
    std::memcpy(victim->bytes, bytes, kMapBytes);
    ++stores_;
  }

  uint64_t hits() const { return hits_; }
  uint64_t stores() const { return stores_; }

 private:
  struct Entry {
    TensorMapFields fields;
    uint64_t last_use = 0;  // 0: empty
    alignas(64) unsigned char bytes[kMapBytes] = {};
  };
  std::mutex mutex_;
  std::vector<std::array<Entry, kWays>> slots_;
  uint64_t clock_ = 0, hits_ = 0, stores_ = 0;
};

}  // namespace tessera::runtime::cuda
