// The on-disk cache store: one checksummed file per key, written atomically
// (temp file + rename) and verified on every read.
#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "tessera/cache.h"

// Entry file format, version 1. Integers are little-endian.
//
//   "TSRCACHE"                       8 bytes, magic
//   version                          u32 (kFormatVersion)
//   blob count                       u32
//   per blob, in name order:
//     name length, name              u32, bytes
//     data length, data              u64, bytes
//   checksum                         16 bytes: XXH3-128 of everything above,
//                                    in xxHash's canonical (big-endian) form
//
// Bump kFormatVersion on any change: readers delete entries of other versions.

namespace tessera::cache {
namespace {

constexpr char kMagic[8] = {'T', 'S', 'R', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kChecksumBytes = sizeof(XXH128_canonical_t);
constexpr size_t kHeaderBytes = sizeof(kMagic) + 4 + 4;
constexpr const char* kEntrySuffix = ".tcache";
constexpr const char* kTempSuffix = ".tmp";
// Far above any real entry (IR text and a binary); a bigger file is damage, and
// reading it whole could exhaust memory.
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 30;

void append_u32(std::string& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

void append_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

std::string checksum_of(std::string_view bytes) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes.data(), bytes.size()));
  return std::string(reinterpret_cast<const char*>(canonical.digest), kChecksumBytes);
}

std::string serialize_entry(const Entry& entry) {
  std::string out(kMagic, sizeof(kMagic));
  append_u32(out, kFormatVersion);
  append_u32(out, static_cast<uint32_t>(entry.blobs.size()));
  for (const auto& [name, data] : entry.blobs) {
    append_u32(out, static_cast<uint32_t>(name.size()));
    out += name;
    append_u64(out, data.size());
    out += data;
  }
  out += checksum_of(out);
  return out;
}

// Reads the body of an entry file. Every length is checked against the bytes
// that remain before it is used, so arbitrary input cannot read out of bounds.
class BoundedReader {
 public:
  explicit BoundedReader(std::string_view bytes) : rest_(bytes) {}
  bool at_end() const { return rest_.empty(); }

  bool read_u32(uint32_t& value) {
    std::string_view bytes;
    if (!read_bytes(4, bytes)) return false;
    value = 0;
    for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
    return true;
  }
  bool read_u64(uint64_t& value) {
    std::string_view bytes;
    if (!read_bytes(8, bytes)) return false;
    value = 0;
    for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
    return true;
  }
  bool read_bytes(uint64_t count, std::string_view& bytes) {
    if (count > rest_.size()) return false;
    bytes = rest_.substr(0, count);
    rest_.remove_prefix(count);
    return true;
  }

 private:
  std::string_view rest_;
};

// nullopt for anything but a complete, checksummed entry of our version.
std::optional<Entry> parse_entry(std::string_view file) {
  if (file.size() < kHeaderBytes + kChecksumBytes) return std::nullopt;
  std::string_view body = file.substr(0, file.size() - kChecksumBytes);
  if (checksum_of(body) != file.substr(body.size())) return std::nullopt;

  BoundedReader reader(body);
  std::string_view magic;
  uint32_t version = 0, blob_count = 0;
  if (!reader.read_bytes(sizeof(kMagic), magic) || magic != std::string_view(kMagic, 8) ||
      !reader.read_u32(version) || version != kFormatVersion || !reader.read_u32(blob_count))
    return std::nullopt;
  Entry entry;
  for (uint32_t i = 0; i < blob_count; ++i) {
    uint32_t name_size = 0;
    uint64_t data_size = 0;
    std::string_view name, data;
    if (!reader.read_u32(name_size) || !reader.read_bytes(name_size, name) ||
        !reader.read_u64(data_size) || !reader.read_bytes(data_size, data))
      return std::nullopt;
    if (!entry.blobs.emplace(std::string(name), std::string(data)).second) return std::nullopt;
  }
  if (!reader.at_end()) return std::nullopt;
  return entry;
}

bool is_hex_name(std::string_view text, size_t length) {
  return text.size() == length &&
         std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// mkdir -p. Another process creating the same directory at the same time is fine.
bool make_directories(const std::string& path) {
  if (path.empty()) return false;
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    std::string prefix = path.substr(0, slash);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
    if (slash == std::string::npos) break;
  }
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

enum class ReadResult { kOk, kMissing, kFailed, kTooLarge };

ReadResult read_whole_file(const std::string& path, std::string& contents, struct stat& info) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? ReadResult::kMissing : ReadResult::kFailed;
  ReadResult result = ReadResult::kFailed;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    result = ReadResult::kFailed;
  } else if (static_cast<uint64_t>(info.st_size) > kMaxEntryBytes) {
    result = ReadResult::kTooLarge;
  } else {
    contents.clear();
    contents.reserve(static_cast<size_t>(info.st_size));
    char buffer[1 << 16];
    for (;;) {
      ssize_t got = read(fd, buffer, sizeof(buffer));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) break;
      if (got == 0) {
        result = ReadResult::kOk;
        break;
      }
      contents.append(buffer, static_cast<size_t>(got));
    }
  }
  close(fd);
  return result;
}

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t wrote = write(fd, bytes.data(), bytes.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(wrote));
  }
  return true;
}

// Unique among threads (own generator) and processes (pid in the name, and a
// child of fork() that shares the generator's state has another pid).
std::string temp_name_suffix() {
  thread_local std::mt19937_64 generator([] {
    std::random_device device;
    uint64_t seed = (uint64_t{device()} << 32) ^ device();
    seed ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    seed ^= std::hash<std::thread::id>()(std::this_thread::get_id());
    return seed;
  }());
  char text[64];
  snprintf(text, sizeof(text), ".%ld.%016llx%s", static_cast<long>(getpid()),
           static_cast<unsigned long long>(generator()), kTempSuffix);
  return text;
}

// Removes `path` only if it is still the file we read: a writer may have renamed
// a good entry over the corrupt one since, and that one must stay.
void remove_if_same_file(const std::string& path, const struct stat& read_info) {
  struct stat now;
  if (stat(path.c_str(), &now) == 0 && now.st_dev == read_info.st_dev &&
      now.st_ino == read_info.st_ino)
    unlink(path.c_str());
}

// Calls visit(shard_dir, file_name) for each file in each "<2 hex>" directory.
template <typename Visit>
void for_each_shard_file(const std::string& root, Visit visit) {
  DIR* top = opendir(root.c_str());
  if (!top) return;
  while (dirent* shard = readdir(top)) {
    if (!is_hex_name(shard->d_name, 2)) continue;
    std::string shard_dir = root + "/" + shard->d_name;
    DIR* files = opendir(shard_dir.c_str());
    if (!files) continue;
    while (dirent* file = readdir(files)) visit(shard_dir, std::string_view(file->d_name));
    closedir(files);
  }
  closedir(top);
}

// "<32 hex>.tcache" inside the shard named by its first two digits.
bool is_entry_file(std::string_view shard_dir, std::string_view name) {
  if (!ends_with(name, kEntrySuffix)) return false;
  std::string_view stem = name.substr(0, name.size() - std::strlen(kEntrySuffix));
  return is_hex_name(stem, 32) && ends_with(shard_dir, "/" + std::string(stem.substr(0, 2)));
}

}  // namespace

DiskStore::DiskStore(std::string dir) : dir_(std::move(dir)) {
  if (dir_.empty()) dir_ = ".";  // not "", which would put entries under "/"
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
}

std::string DiskStore::default_dir() {
  const char* from_env = std::getenv("TESSERA_CACHE_DIR");
  if (from_env && *from_env) return from_env;
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/tessera";
  if (const passwd* user = getpwuid(getuid()); user && user->pw_dir && *user->pw_dir)
    return std::string(user->pw_dir) + "/.cache/tessera";
  return "/tmp/tessera-cache-" + std::to_string(getuid());
}

std::string DiskStore::path_for(const Key128& key) const {
  std::string hex = key.hex();
  return dir_ + "/" + hex.substr(0, 2) + "/" + hex + kEntrySuffix;
}

std::optional<Entry> DiskStore::get(const Key128& key) const {
  std::string path = path_for(key);
  std::string contents;
  struct stat info;
  ReadResult read = read_whole_file(path, contents, info);
  if (read != ReadResult::kOk && read != ReadResult::kTooLarge) return std::nullopt;
  std::optional<Entry> entry;
  if (read == ReadResult::kOk) entry = parse_entry(contents);
  if (!entry) remove_if_same_file(path, info);
  return entry;
}

bool DiskStore::put(const Key128& key, const Entry& entry) const {
  const std::string bytes = serialize_entry(entry);
  if (bytes.size() > kMaxEntryBytes) return false;
  const std::string final_path = path_for(key);
  const std::string shard_dir = final_path.substr(0, final_path.rfind('/'));
  if (!make_directories(shard_dir)) return false;

  const std::string stem = shard_dir + "/" + key.hex();
  std::string temp_path;
  int fd = -1;
  for (int attempt = 0; attempt < 4 && fd < 0; ++attempt) {
    temp_path = stem + temp_name_suffix();
    fd = open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) break;
    const int open_error = errno;
    // The shard directory was removed under us (by hand, or a cache wipe): remake it.
    if (open_error == ENOENT && !make_directories(shard_dir)) return false;
    if (open_error != ENOENT && open_error != EEXIST) return false;
  }
  if (fd < 0) return false;
  // No fsync: a crash can leave a torn entry, which the checksum turns into a miss.
  bool written = write_all(fd, bytes);
  written = (close(fd) == 0) && written;
  if (!written || rename(temp_path.c_str(), final_path.c_str()) != 0) {
    unlink(temp_path.c_str());
    return false;
  }
  return true;
}

bool DiskStore::remove(const Key128& key) const { return unlink(path_for(key).c_str()) == 0; }

std::vector<EntryInfo> DiskStore::list() const {
  std::vector<EntryInfo> entries;
  for_each_shard_file(dir_, [&](const std::string& shard_dir, std::string_view name) {
    if (!is_entry_file(shard_dir, name)) return;
    EntryInfo info;
    info.path = shard_dir + "/" + std::string(name);
    info.key_hex = std::string(name.substr(0, 32));
    std::string contents;
    struct stat file_info;
    // Gone since readdir (a concurrent remove or clear): not an entry any more.
    if (read_whole_file(info.path, contents, file_info) != ReadResult::kOk) return;
    info.size_bytes = static_cast<uint64_t>(file_info.st_size);
    info.mtime_unix = static_cast<int64_t>(file_info.st_mtime);
    // Listing never deletes: a corrupt entry shows with no name until get() drops it.
    if (std::optional<Entry> entry = parse_entry(contents)) {
      auto name_blob = entry->blobs.find("name");
      if (name_blob != entry->blobs.end()) info.kernel_name = name_blob->second;
    }
    entries.push_back(std::move(info));
  });
  std::sort(entries.begin(), entries.end(),
            [](const EntryInfo& a, const EntryInfo& b) { return a.key_hex < b.key_hex; });
  return entries;
}

size_t DiskStore::clear() const {
  size_t removed_entries = 0;
  for_each_shard_file(dir_, [&](const std::string& shard_dir, std::string_view name) {
    bool is_entry = is_entry_file(shard_dir, name);
    // A temp file of a put() running right now goes too; that put() then fails.
    if (!is_entry && !ends_with(name, kTempSuffix)) return;
    std::string path = shard_dir + "/" + std::string(name);
    if (unlink(path.c_str()) == 0 && is_entry) ++removed_entries;
  });
  return removed_entries;
}

}  // namespace tessera::cache
