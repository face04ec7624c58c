// GoogleTests for the cache: key framing and hex, and the disk store's handling of
// round trips, corrupt files and concurrent writers (threads and processes).
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "tessera/cache.h"

namespace tessera::cache {
namespace {

namespace fs = std::filesystem;

Key128 key_of(std::string_view text) { return KeyBuilder().add("test", text).finish(); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Builds entry-file bytes by hand (see the format in disk_store.cpp), with a
// correct checksum, so the parser behind the checksum gets exercised.
struct EntryBytes {
  std::string bytes = std::string("TSRCACHE", 8);
  EntryBytes& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  EntryBytes& u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>(v >> (8 * i)));
    return *this;
  }
  EntryBytes& raw(std::string_view text) {
    bytes += text;
    return *this;
  }
  std::string with_checksum() const {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits(bytes.data(), bytes.size()));
    return bytes + std::string(reinterpret_cast<const char*>(canonical.digest), 16);
  }
};

TEST(CacheKeyTest, FramingKeepsFieldBoundaries) {
  EXPECT_NE(KeyBuilder().add("ab", "c").finish(), KeyBuilder().add("a", "bc").finish());
  EXPECT_NE(KeyBuilder().add("a", "b").add("c", "d").finish(),
            KeyBuilder().add("a", "bcd").finish());
  EXPECT_NE(KeyBuilder().add("a", "1").add("b", "2").finish(),
            KeyBuilder().add("b", "2").add("a", "1").finish());
  EXPECT_NE(KeyBuilder().add("", "").finish(), KeyBuilder().finish());
  int64_t seven = 7;
  std::string seven_bytes("\x07\0\0\0\0\0\0\0", 8);
  EXPECT_NE(KeyBuilder().add("n", seven).finish(), KeyBuilder().add("n", seven_bytes).finish());
  EXPECT_NE(KeyBuilder().add("n", int64_t{1}).finish(), KeyBuilder().add("n", int64_t{-1}).finish());
}

TEST(CacheKeyTest, SameFieldsGiveSameKey) {
  auto build = [] {
    return KeyBuilder().add("source", std::string("x\0y", 3)).add("opt", int64_t{3}).finish();
  };
  EXPECT_EQ(build(), build());
  KeyBuilder builder;
  builder.add("a", "b");
  EXPECT_EQ(builder.finish(), builder.finish());  // finish() does not consume
}

// Keys name files that outlive a build: a change here silently empties every
// user's cache, so it must be deliberate.
TEST(CacheKeyTest, KeysAreStable) {
  EXPECT_EQ(KeyBuilder().add("kernel", "add").add("num_warps", int64_t{4}).finish().hex(),
            "82ac505f50dbed3aab4ea0f204bd4c7f");
  EXPECT_EQ(hash_bytes("tessera").hex(), "157800c744fd9a1904c1a9b49517cd58");
}

TEST(CacheKeyTest, HashBytesIsXxh3_128) {
  XXH128_hash_t expected = XXH3_128bits("abc", 3);
  Key128 key = hash_bytes("abc");
  EXPECT_EQ(key.lo, expected.low64);
  EXPECT_EQ(key.hi, expected.high64);
  EXPECT_NE(hash_bytes(""), hash_bytes(std::string_view("\0", 1)));
}

TEST(CacheKeyTest, HexIsHighThenLowLowercase) {
  EXPECT_EQ((Key128{1, 0}).hex(), "00000000000000000000000000000001");
  EXPECT_EQ((Key128{0, 0xABCDEF0123456789ull}).hex(), "abcdef01234567890000000000000000");
  EXPECT_EQ((Key128{~0ull, ~0ull}).hex(), std::string(32, 'f'));
}

TEST(CacheKeyTest, HexRoundTrips) {
  std::mt19937_64 random(42);
  for (int i = 0; i < 1000; ++i) {
    Key128 key{random(), random()};
    std::string hex = key.hex();
    ASSERT_EQ(hex.size(), 32u);
    ASSERT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);
    std::optional<Key128> parsed = Key128::from_hex(hex);
    ASSERT_TRUE(parsed.has_value());
    ASSERT_EQ(*parsed, key);
  }
  EXPECT_EQ(Key128::from_hex("ABCDEF01234567890000000000000001")->hex(),
            "abcdef01234567890000000000000001");
}

TEST(CacheKeyTest, FromHexRejectsMalformed) {
  EXPECT_FALSE(Key128::from_hex(""));
  EXPECT_FALSE(Key128::from_hex(std::string(31, '0')));
  EXPECT_FALSE(Key128::from_hex(std::string(33, '0')));
  EXPECT_FALSE(Key128::from_hex(std::string(31, '0') + "g"));
  EXPECT_FALSE(Key128::from_hex(std::string(31, '0') + " "));
  EXPECT_FALSE(Key128::from_hex(std::string(31, '0') + std::string(1, '\0')));
}

class DiskStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tessera_cache_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string store_dir() const { return root_ + "/store"; }
  std::vector<std::string> files_under(const std::string& dir) const {
    std::vector<std::string> found;
    std::error_code error;
    for (auto it = fs::recursive_directory_iterator(dir, error); !error && it != fs::end(it);
         it.increment(error))
      if (it->is_regular_file()) found.push_back(it->path().filename().string());
    return found;
  }

  std::string root_;
};

Entry sample_entry() {
  Entry entry;
  entry.blobs["name"] = "vector_add";
  entry.blobs["ir.tile"] = "func @add(...) {}\n";
  entry.blobs["binary"] = std::string("\x7f" "ELF\0\0\x01\xff\0", 9);
  entry.blobs["empty"] = "";
  entry.blobs[std::string("nul\0name", 8)] = std::string(3, '\0');
  return entry;
}

TEST_F(DiskStoreTest, PathIsShardedByFirstTwoHexDigits) {
  DiskStore store(store_dir() + "/");
  Key128 key{0x1, 0xab00000000000000ull};
  EXPECT_EQ(store.dir(), store_dir());
  EXPECT_EQ(store.path_for(key), store_dir() + "/ab/" + key.hex() + ".tcache");
}

TEST_F(DiskStoreTest, RoundTripsBinaryBlobs) {
  DiskStore store(store_dir());
  Entry entry = sample_entry();
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  entry.blobs["every_byte"] = every_byte;
  entry.blobs["large"] = std::string(3 << 20, 'x') + every_byte;
  Key128 key = key_of("round trip");
  ASSERT_TRUE(store.put(key, entry));
  std::optional<Entry> loaded = store.get(key);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->blobs, entry.blobs);
  EXPECT_TRUE(fs::exists(store.path_for(key)));
}

TEST_F(DiskStoreTest, RoundTripsEntryWithNoBlobs) {
  DiskStore store(store_dir());
  ASSERT_TRUE(store.put(key_of("empty"), Entry{}));
  std::optional<Entry> loaded = store.get(key_of("empty"));
  ASSERT_TRUE(loaded.has_value());
  EXPECT_TRUE(loaded->blobs.empty());
}

TEST_F(DiskStoreTest, PutReplacesEntry) {
  DiskStore store(store_dir());
  Key128 key = key_of("replace");
  Entry first, second;
  first.blobs["v"] = "1";
  second.blobs["v"] = "two";
  ASSERT_TRUE(store.put(key, first));
  ASSERT_TRUE(store.put(key, second));
  EXPECT_EQ(store.get(key)->blobs, second.blobs);
  EXPECT_EQ(files_under(store_dir()).size(), 1u);
}

TEST_F(DiskStoreTest, MissingKeyIsMiss) {
  DiskStore store(store_dir());
  EXPECT_FALSE(store.get(key_of("absent")));
  EXPECT_FALSE(store.remove(key_of("absent")));
  ASSERT_TRUE(store.put(key_of("present"), sample_entry()));
  EXPECT_FALSE(store.get(key_of("absent")));
}

TEST_F(DiskStoreTest, RemoveDeletesEntry) {
  DiskStore store(store_dir());
  ASSERT_TRUE(store.put(key_of("x"), sample_entry()));
  EXPECT_TRUE(store.remove(key_of("x")));
  EXPECT_FALSE(store.get(key_of("x")));
}

TEST_F(DiskStoreTest, AnyFlippedByteIsMissAndDeleted) {
  DiskStore store(store_dir());
  Key128 key = key_of("flip");
  ASSERT_TRUE(store.put(key, sample_entry()));
  const std::string path = store.path_for(key);
  const std::string good = read_file(path);
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x20;
    write_file(path, bad);
    ASSERT_FALSE(store.get(key)) << "flipped byte " << i;
    ASSERT_FALSE(fs::exists(path)) << "corrupt entry left behind, byte " << i;
  }
  write_file(path, good);
  EXPECT_EQ(store.get(key)->blobs, sample_entry().blobs);
}

TEST_F(DiskStoreTest, EveryTruncationIsMissAndDeleted) {
  DiskStore store(store_dir());
  Key128 key = key_of("truncate");
  ASSERT_TRUE(store.put(key, sample_entry()));
  const std::string path = store.path_for(key);
  const std::string good = read_file(path);
  for (size_t length = 0; length < good.size(); ++length) {
    write_file(path, std::string_view(good).substr(0, length));
    ASSERT_FALSE(store.get(key)) << "truncated to " << length;
    ASSERT_FALSE(fs::exists(path)) << "truncated entry left behind, length " << length;
  }
  write_file(path, good + "x");  // trailing byte breaks the checksum too
  EXPECT_FALSE(store.get(key));
}

TEST_F(DiskStoreTest, GarbageFilesAreMisses) {
  DiskStore store(store_dir());
  Key128 key = key_of("garbage");
  const std::string path = store.path_for(key);
  ASSERT_TRUE(store.put(key, Entry{}));  // creates the shard directory
  std::mt19937 random(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bytes(random() % 200, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    if (trial % 2) bytes.replace(0, std::min<size_t>(8, bytes.size()), "TSRCACHE");
    write_file(path, bytes);
    ASSERT_FALSE(store.get(key)) << "trial " << trial;
  }
}

// Checksums that match but lengths that lie: the parser must bounds-check.
TEST_F(DiskStoreTest, LyingLengthsBehindAValidChecksumAreMisses) {
  DiskStore store(store_dir());
  Key128 key = key_of("lying");
  const std::string path = store.path_for(key);
  ASSERT_TRUE(store.put(key, Entry{}));
  const std::vector<std::string> bad_files = {
      EntryBytes().u32(1).u32(1).u32(0xffffffffu).with_checksum(),
      EntryBytes().u32(1).u32(1).u32(1).raw("a").u64(~0ull).with_checksum(),
      EntryBytes().u32(1).u32(1).u32(1).raw("a").u64(1ull << 63).raw("xy").with_checksum(),
      EntryBytes().u32(1).u32(1).u32(1).raw("a").u64(3).raw("xy").with_checksum(),
      EntryBytes().u32(1).u32(0xffffffffu).with_checksum(),
      EntryBytes().u32(1).u32(2).u32(1).raw("a").u64(0).u32(1).raw("a").u64(0).with_checksum(),
      EntryBytes().u32(1).u32(0).raw("trailing").with_checksum(),
      EntryBytes().u32(2).u32(0).with_checksum(),
      EntryBytes().u32(1).with_checksum(),
  };
  for (size_t i = 0; i < bad_files.size(); ++i) {
    write_file(path, bad_files[i]);
    ASSERT_FALSE(store.get(key)) << "bad file " << i;
    ASSERT_FALSE(fs::exists(path)) << "bad file " << i;
  }
  // The same builder makes a good file, so the cases above fail for their lie.
  write_file(path, EntryBytes().u32(1).u32(1).u32(1).raw("a").u64(2).raw("xy").with_checksum());
  std::optional<Entry> good = store.get(key);
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->blobs.at("a"), "xy");

  std::mt19937 random(11);
  for (int trial = 0; trial < 2000; ++trial) {
    EntryBytes file;
    file.u32(1).u32(random() % 4);
    int fields = random() % 8;
    for (int f = 0; f < fields; ++f) {
      if (random() % 2) file.u32(random() % 2 ? random() % 8 : random());
      else file.u64(random() % 2 ? random() % 8 : (uint64_t{random()} << 32 | random()));
      file.raw(std::string(random() % 6, 'z'));
    }
    write_file(path, file.with_checksum());
    store.get(key);  // hit or miss; it must only not crash or read out of bounds
  }
}

// A huge file is damage, not an entry: it must not be read into memory whole.
TEST_F(DiskStoreTest, OversizedFileIsMissAndDeleted) {
  DiskStore store(store_dir());
  Key128 key = key_of("huge");
  ASSERT_TRUE(store.put(key, sample_entry()));
  fs::resize_file(store.path_for(key), (uintmax_t{1} << 30) + 1);  // sparse: no disk used
  EXPECT_FALSE(store.get(key));
  EXPECT_FALSE(fs::exists(store.path_for(key)));
}

TEST_F(DiskStoreTest, EmptyDirectoryNameMeansCurrentDirectory) {
  EXPECT_EQ(DiskStore("").dir(), ".");
}

TEST_F(DiskStoreTest, DirectoryAtEntryPathIsMiss) {
  DiskStore store(store_dir());
  Key128 key = key_of("dir");
  fs::create_directories(store.path_for(key));
  EXPECT_FALSE(store.get(key));
  EXPECT_FALSE(store.put(key, sample_entry()));
  EXPECT_EQ(files_under(store_dir()).size(), 0u) << "temp file left behind";
}

TEST_F(DiskStoreTest, ListAndClear) {
  DiskStore store(store_dir());
  EXPECT_TRUE(store.list().empty());  // the directory does not even exist yet
  EXPECT_EQ(store.clear(), 0u);
  std::vector<Key128> keys = {key_of("a"), key_of("b"), key_of("c")};
  Entry named = sample_entry();
  Entry unnamed;
  unnamed.blobs["binary"] = "1234";
  ASSERT_TRUE(store.put(keys[0], named));
  ASSERT_TRUE(store.put(keys[1], unnamed));
  ASSERT_TRUE(store.put(keys[2], named));
  const std::string shard = store_dir() + "/" + keys[0].hex().substr(0, 2);
  write_file(shard + "/" + keys[0].hex() + ".123.abc.tmp", "half a write");
  write_file(shard + "/README", "not ours");
  write_file(store_dir() + "/notes.tcache", "not in a shard");

  std::vector<EntryInfo> listed = store.list();
  ASSERT_EQ(listed.size(), 3u);
  std::set<std::string> listed_hex;
  for (size_t i = 0; i < listed.size(); ++i) {
    const EntryInfo& info = listed[i];
    if (i > 0) {
      EXPECT_LT(listed[i - 1].key_hex, info.key_hex);
    }
    listed_hex.insert(info.key_hex);
    EXPECT_EQ(info.path, store.path_for(*Key128::from_hex(info.key_hex)));
    EXPECT_EQ(info.size_bytes, fs::file_size(info.path));
    EXPECT_GT(info.mtime_unix, 0);
    EXPECT_EQ(info.kernel_name, info.key_hex == keys[1].hex() ? "" : "vector_add");
  }
  EXPECT_EQ(listed_hex, (std::set<std::string>{keys[0].hex(), keys[1].hex(), keys[2].hex()}));

  EXPECT_EQ(store.clear(), 3u);
  EXPECT_TRUE(store.list().empty());
  for (const Key128& key : keys) EXPECT_FALSE(store.get(key));
  std::vector<std::string> left = files_under(store_dir());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"README", "notes.tcache"}));
  ASSERT_TRUE(store.put(keys[0], named));  // the store still works after a clear
  EXPECT_TRUE(store.get(keys[0]));
}

TEST_F(DiskStoreTest, PutIntoUnwritableDirectoryFails) {
  write_file(root_ + "/a_file", "");
  DiskStore under_a_file(root_ + "/a_file/store");
  EXPECT_FALSE(under_a_file.put(key_of("x"), sample_entry()));
  EXPECT_FALSE(under_a_file.get(key_of("x")));
  EXPECT_TRUE(under_a_file.list().empty());

  if (geteuid() != 0) {  // root ignores permission bits
    fs::create_directories(root_ + "/read_only");
    chmod((root_ + "/read_only").c_str(), 0555);
    DiskStore read_only(root_ + "/read_only/store");
    EXPECT_FALSE(read_only.put(key_of("x"), sample_entry()));
    chmod((root_ + "/read_only").c_str(), 0755);
  }
}

// A write that fails halfway (here: the file size limit) leaves no temp file.
TEST_F(DiskStoreTest, FailedWriteLeavesNoTempFile) {
  DiskStore store(store_dir());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit limit{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    Entry big;
    big.blobs["data"] = std::string(1 << 20, 'q');
    _exit(store.put(key_of("big"), big) ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "put() reported success past the size limit";
  EXPECT_EQ(files_under(store_dir()).size(), 0u) << "temp file left behind";
  EXPECT_FALSE(store.get(key_of("big")));
}

// Writer `id` always writes the same entry, whose payload size and bytes depend
// on id: a torn or interleaved file shows up as a mismatch, not just a miss.
Entry writer_entry(int id) {
  Entry entry;
  entry.blobs["name"] = "writer" + std::to_string(id);
  entry.blobs["payload"] = std::string(20000 + 7919 * id, static_cast<char>('a' + id));
  return entry;
}

// True if `entry` is exactly some writer's entry.
bool is_whole_writer_entry(const Entry& entry) {
  auto name = entry.blobs.find("name");
  if (name == entry.blobs.end() || name->second.rfind("writer", 0) != 0) return false;
  int id = std::atoi(name->second.c_str() + 6);
  return entry.blobs == writer_entry(id).blobs;
}

// Writes and reads `key` `rounds` times; returns how many reads were torn.
int write_and_read(const DiskStore& store, const Key128& key, int id, int rounds) {
  int torn = 0;
  for (int i = 0; i < rounds; ++i) {
    if (!store.put(key, writer_entry(id))) ++torn;
    std::optional<Entry> read = store.get(key);
    // A miss is impossible too: nobody deletes the entry once it is written.
    if (!read || !is_whole_writer_entry(*read)) ++torn;
  }
  return torn;
}

TEST_F(DiskStoreTest, ConcurrentWriterThreadsNeverTear) {
  DiskStore store(store_dir());
  Key128 key = key_of("contended");
  std::atomic<int> torn{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < 6; ++id)
    threads.emplace_back([&, id] { torn += write_and_read(store, key, id, 150); });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(files_under(store_dir()).size(), 1u) << "temp files left behind";
}

TEST_F(DiskStoreTest, ConcurrentWriterProcessesNeverTear) {
  DiskStore store(store_dir());
  Key128 key = key_of("contended across processes");
  std::vector<pid_t> children;
  for (int id = 0; id < 4; ++id) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) _exit(std::min(write_and_read(store, key, id, 150), 100));
    children.push_back(child);
  }
  int torn_in_parent = write_and_read(store, key, 9, 150);
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "torn reads in a child";
  }
  EXPECT_EQ(torn_in_parent, 0);
  EXPECT_EQ(files_under(store_dir()).size(), 1u) << "temp files left behind";
}

// Restores an environment variable when the test ends.
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* name) : name_(name) {
    if (const char* value = getenv(name)) saved_ = value;
  }
  ~ScopedEnv() {
    if (saved_) setenv(name_, saved_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

TEST(DiskStoreDefaultDirTest, HonoursEnvironment) {
  ScopedEnv cache_dir("TESSERA_CACHE_DIR"), home("HOME");
  setenv("TESSERA_CACHE_DIR", "/some/where", 1);
  EXPECT_EQ(DiskStore::default_dir(), "/some/where");
  unsetenv("TESSERA_CACHE_DIR");
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(DiskStore::default_dir(), "/home/someone/.cache/tessera");
  setenv("TESSERA_CACHE_DIR", "", 1);  // empty means unset
  EXPECT_EQ(DiskStore::default_dir(), "/home/someone/.cache/tessera");
}

}  // namespace
}  // namespace tessera::cache
