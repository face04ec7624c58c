// Runs every tests/ir/**/*.tir file: the kernel above `// CHECK-OUTPUT:` goes
// through the passes and must print as the commented text below it.
//
// File format:
//   // RUN: --pass canonicalize --pass dce     (optional; default: --pass <dir name>;
//   kernel @k(...) { ... }                       a bare `// RUN:` runs no pass)
//   // CHECK-OUTPUT:
//   // kernel @k(...) {                          (expected output, each line behind
//   // ...                                        "// ", blank lines as "//")
// TESSERA_UPDATE_IR_TESTS=1 rewrites the expected part from the actual output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tessera/compiler.h"

namespace {

namespace fs = std::filesystem;

const char kCheckMarker[] = "// CHECK-OUTPUT:";
const char kRunPrefix[] = "// RUN:";

fs::path ir_test_root() { return fs::path(TESSERA_SOURCE_DIR) / "tests" / "ir"; }

std::vector<std::string> find_ir_test_files() {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(ir_test_root(), ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->is_regular_file() && it->path().extension() == ".tir")
      files.push_back(fs::relative(it->path(), ir_test_root()).generic_string());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct IrTestCase {
  std::string input;                  // everything above the marker (comments included)
  std::vector<std::string> passes;
  bool has_expected = false;
  std::vector<std::string> expected;  // uncommented expected lines
  std::string error;                  // malformed test file
};

IrTestCase parse_test_file(const std::string& text, const std::string& default_pass) {
  IrTestCase tc;
  auto lines = split_lines(text);
  size_t i = 0;
  bool has_run = false;
  for (; i < lines.size() && lines[i] != kCheckMarker; ++i) {
    tc.input += lines[i] + "\n";
    if (lines[i].rfind(kRunPrefix, 0) == 0) {
      has_run = true;
      std::istringstream args(lines[i].substr(sizeof(kRunPrefix) - 1));
      for (std::string flag, name; args >> flag;) {
        if (flag != "--pass" || !(args >> name)) {
          tc.error = "bad RUN line (expected '--pass NAME'...): " + lines[i];
          return tc;
        }
        tc.passes.push_back(name);
      }
    }
  }
  if (!has_run) tc.passes.push_back(default_pass);
  tc.has_expected = i < lines.size();
  for (++i; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l == "//") tc.expected.push_back("");
    else if (l.rfind("// ", 0) == 0) tc.expected.push_back(l.substr(3));
    else if (!l.empty() || i + 1 < lines.size()) {
      tc.error = "line " + std::to_string(i + 1) + " of the expected output does not start with '// '";
      return tc;
    }
  }
  return tc;
}

// A line diff (longest common subsequence): "-" expected only, "+" actual only.
std::string line_diff(const std::vector<std::string>& want, const std::vector<std::string>& got) {
  size_t n = want.size(), m = got.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;)
      lcs[i][j] = want[i] == got[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::string out;
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && want[i] == got[j]) out += "   " + want[i++] + "\n", j++;
    else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) out += " - " + want[i++] + "\n";
    else out += " + " + got[j++] + "\n";
  }
  return out;
}

std::string commented(const std::vector<std::string>& lines) {
  std::string out;
  for (auto& l : lines) out += l.empty() ? "//\n" : "// " + l + "\n";
  return out;
}

class IrFileTest : public testing::TestWithParam<std::string> {};

TEST_P(IrFileTest, MatchesExpectedOutput) {
  fs::path path = ir_test_root() / GetParam();
  std::string dir = fs::path(GetParam()).parent_path().filename().string();
  IrTestCase tc = parse_test_file(read_file(path), dir);
  ASSERT_TRUE(tc.error.empty()) << path.string() << ": " << tc.error;

  std::string actual;
  try {
    actual = tessera::run_passes(tc.input, tc.passes);
  } catch (const std::exception& e) {
    FAIL() << path.string() << ": the passes threw: " << e.what();
  }
  std::vector<std::string> got = split_lines(actual);

  const char* update = std::getenv("TESSERA_UPDATE_IR_TESTS");
  if (update && std::string(update) == "1") {
    if (!tc.has_expected || got != tc.expected) {
      std::ofstream(path) << tc.input << kCheckMarker << "\n" << commented(got);
      std::printf("updated %s\n", path.string().c_str());
    }
    return;
  }
  ASSERT_TRUE(tc.has_expected) << path.string() << ": no '" << kCheckMarker
                               << "' line (run with TESSERA_UPDATE_IR_TESTS=1 to add one)";
  EXPECT_TRUE(got == tc.expected) << path.string() << ": output differs from the expected text (- expected, + actual;"
                                  << " TESSERA_UPDATE_IR_TESTS=1 accepts the actual output):\n"
                                  << line_diff(tc.expected, got);
}

std::string test_name(const testing::TestParamInfo<std::string>& info) {
  std::string name = info.param.substr(0, info.param.size() - 4);  // drop ".tir"
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(IrFiles, IrFileTest, testing::ValuesIn(find_ir_test_files()), test_name);

// The runner itself: the diff and the file format.
TEST(IrFileRunner, DiffMarksChangedLines) {
  std::string d = line_diff({"a", "b", "c"}, {"a", "x", "c"});
  EXPECT_EQ(d, "   a\n - b\n + x\n   c\n");
}

TEST(IrFileRunner, ParsesRunLineAndExpectedOutput) {
  IrTestCase tc = parse_test_file("// RUN: --pass cse --pass dce\nkernel @k() {\n}\n// CHECK-OUTPUT:\n// x\n//\n// y\n",
                                  "ignored");
  EXPECT_TRUE(tc.error.empty()) << tc.error;
  EXPECT_EQ(tc.passes, (std::vector<std::string>{"cse", "dce"}));
  EXPECT_EQ(tc.expected, (std::vector<std::string>{"x", "", "y"}));
  EXPECT_EQ(parse_test_file("kernel @k() {\n}\n", "licm").passes, std::vector<std::string>{"licm"});
  EXPECT_TRUE(parse_test_file("// RUN:\nkernel @k() {\n}\n", "licm").passes.empty());
  EXPECT_FALSE(parse_test_file("// RUN: --pas cse\n", "x").error.empty());
  EXPECT_FALSE(parse_test_file("// CHECK-OUTPUT:\nkernel\n", "x").error.empty());
}

TEST(IrFileRunner, EveryPassDirectoryHasSixTests) {
  std::map<std::string, int> per_dir;
  for (auto& f : find_ir_test_files()) per_dir[fs::path(f).parent_path().string()]++;
  for (const char* dir : {"canonicalize", "cse", "licm", "dce"}) EXPECT_GE(per_dir[dir], 6) << dir;
}

}  // namespace
