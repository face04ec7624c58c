// Tessera's compilation cache: content keys (XXH3-128) and the on-disk store.
// Depends on nothing else in Tessera: keys in, bytes out.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::cache {

// A 128-bit content hash; hex() is its 32-character lowercase spelling.
struct Key128 {
  uint64_t lo = 0, hi = 0;
  std::string hex() const;
  static std::optional<Key128> from_hex(std::string_view hex);
  bool operator==(const Key128& o) const { return lo == o.lo && hi == o.hi; }
  bool operator!=(const Key128& o) const { return !(*this == o); }
};

// Accumulates named fields into one XXH3-128 key. Each field is framed by its
// name and length, so ("ab","c") and ("a","bc") give different keys.
class KeyBuilder {
 public:
  KeyBuilder();
  ~KeyBuilder();
  KeyBuilder(const KeyBuilder&) = delete;
  KeyBuilder& operator=(const KeyBuilder&) = delete;
  KeyBuilder& add(std::string_view field, std::string_view value);
  KeyBuilder& add(std::string_view field, int64_t value);
  Key128 finish() const;

 private:
  void* state_;  // XXH3_state_t
};

// One-shot hash of a byte string.
Key128 hash_bytes(std::string_view bytes);

// One cache entry: named blobs (each stage's IR text, the binary, metadata).
struct Entry {
  std::map<std::string, std::string> blobs;
};

struct EntryInfo {
  std::string key_hex;
  std::string path;
  uint64_t size_bytes = 0;
  int64_t mtime_unix = 0;
  std::string kernel_name;  // blobs["name"] when present
};

// On-disk store: one file per key under `dir`. Writes go to a unique temporary
// name and are renamed into place (atomic on POSIX), so concurrent processes and
// killed writers never leave a half-written entry under a key's name. Every read
// verifies a checksum over the whole entry; a corrupt or truncated entry is
// deleted and reported as a miss, never returned.
class DiskStore {
 public:
  explicit DiskStore(std::string dir);
  // $TESSERA_CACHE_DIR if set, else $HOME/.cache/tessera.
  static std::string default_dir();
  const std::string& dir() const { return dir_; }

  std::optional<Entry> get(const Key128& key) const;
  // Returns false (and leaves no file behind) when the write fails.
  bool put(const Key128& key, const Entry& entry) const;
  bool remove(const Key128& key) const;
  // Every entry file, sorted by key. Never deletes: a corrupt entry is listed
  // with no kernel_name until a get() drops it.
  std::vector<EntryInfo> list() const;
  // Removes every entry (and stray temporaries); returns how many entries. A put()
  // running at the same time may lose its temporary and return false.
  size_t clear() const;
  std::string path_for(const Key128& key) const;

 private:
  std::string dir_;
};

}  // namespace tessera::cache
