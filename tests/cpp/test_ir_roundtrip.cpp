// Printer/parser round trips over tests/ir/roundtrip/*.tir and generated values,
// parser errors (message names line:col and the problem; never a crash), and
// verifier errors (message names the broken rule).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tessera/compiler.h"

namespace tessera::ir {
namespace {

namespace fs = std::filesystem;

struct RoundtripFile {
  std::string name, input, expected;
};

// Each file: a kernel, then `// CHECK-OUTPUT:` and its canonical text commented.
std::vector<RoundtripFile> roundtrip_files() {
  std::vector<RoundtripFile> files;
  fs::path dir = fs::path(TESSERA_SOURCE_DIR) / "tests" / "ir" / "roundtrip";
  for (auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".tir") continue;
    std::ifstream f(entry.path());
    RoundtripFile rf{entry.path().filename().string(), "", ""};
    bool expected = false;
    for (std::string line; std::getline(f, line);) {
      if (line == "// CHECK-OUTPUT:") expected = true;
      else if (!expected) rf.input += line + "\n";
      else rf.expected += (line.size() > 3 ? line.substr(3) : "") + "\n";
    }
    files.push_back(rf);
  }
  std::sort(files.begin(), files.end(), [](auto& a, auto& b) { return a.name < b.name; });
  return files;
}

std::string reprint(const std::string& text) {
  auto k = parse_kernel(text);
  verify_kernel(*k);
  return print_kernel(*k);
}

TEST(IrRoundtrip, FilesPrintCanonicallyAndStably) {
  auto files = roundtrip_files();
  ASSERT_GE(files.size(), 5u);
  for (auto& f : files) {
    SCOPED_TRACE(f.name);
    std::string once = reprint(f.input);
    EXPECT_EQ(once, f.expected);
    std::string twice = reprint(once);
    EXPECT_EQ(twice, once) << "print(parse(print(parse(x)))) differs from print(parse(x))";
  }
}

TEST(IrRoundtrip, FilesCoverEveryOpKind) {
  std::set<OpKind> seen;
  for (auto& f : roundtrip_files()) for_each_op(parse_kernel(f.input)->body(), [&](Op* op) { seen.insert(op->kind); });
  for (int i = 0; i <= static_cast<int>(OpKind::Hint); ++i)
    EXPECT_TRUE(seen.count(static_cast<OpKind>(i))) << "no roundtrip test uses '" << op_name(static_cast<OpKind>(i)) << "'";
}

// Parses `const {value = <printed d>} : f64` and returns the value read back.
double reparse_double(double d) {
  std::string text = "kernel @k() {\n  %0 = const {value = " + print_attr(d) + "} : f64\n}\n";
  auto k = parse_kernel(text);
  return std::get<double>(k->body()->ops.front()->attrs.at("value"));
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(IrRoundtrip, DoublesReadBackBitExactly) {
  std::vector<double> values = {0.0, -0.0, 1.0, -1.0, 0.1, 1e-30, 1e300, 5e-324, -2.2250738585072014e-308,
                                1.7976931348623157e308, 16777217.0, 9007199254740993.0, 123456789.125, 1e16, 1e15,
                                HUGE_VAL, -HUGE_VAL};
  std::mt19937_64 rng(42);
  for (int i = 0; i < 20000; ++i) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (!std::isnan(d)) values.push_back(d);
  }
  for (double d : values) {
    double back = reparse_double(d);
    ASSERT_TRUE(same_bits(d, back)) << print_attr(d) << " read back as " << print_attr(back);
    std::string s = print_attr(d);
    if (std::isfinite(d)) {
      EXPECT_NE(s.substr(0, s.find('e')).find('.'), std::string::npos) << s;
    }
  }
  EXPECT_TRUE(std::isnan(reparse_double(std::nan(""))));
  EXPECT_EQ(print_attr(1e-30), "1.0e-30");
  EXPECT_EQ(print_attr(2.0), "2.0");
  EXPECT_EQ(print_attr(0.1), "0.1");
  EXPECT_EQ(print_attr(-0.0), "-0.0");
}

TEST(IrRoundtrip, StringsWithEveryByteReadBack) {
  std::string all;
  for (int c = 1; c < 256; ++c) all += static_cast<char>(c);
  for (const std::string& s : {std::string(), std::string("a\"b\\c\nd\te"), all}) {
    std::string text = "kernel @k() attributes {s = " + print_attr(s) + "} {\n}\n";
    auto k = parse_kernel(text);
    EXPECT_EQ(std::get<std::string>(k->attrs.at("s")), s);
    EXPECT_EQ(print_kernel(*parse_kernel(print_kernel(*k))), print_kernel(*k));
  }
}

TEST(IrRoundtrip, IntegerAttributesKeepTheirBits) {
  auto k = parse_kernel(
      "kernel @k() attributes {a = -9223372036854775808, b = 18446744073709551615, c = [-1, 0, 7], d = []} {\n}\n");
  EXPECT_EQ(std::get<int64_t>(k->attrs.at("a")), INT64_MIN);
  EXPECT_EQ(std::get<int64_t>(k->attrs.at("b")), -1);
  EXPECT_EQ(std::get<std::vector<int64_t>>(k->attrs.at("c")), (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_TRUE(std::get<std::vector<int64_t>>(k->attrs.at("d")).empty());
}

// ----------------------------------------------------------------- parser errors

struct ParseErrorCase {
  const char* text;
  const char* where;  // "line:col"
  const char* what;   // a fragment of the message
};

TEST(IrParserErrors, NameTheLineColumnAndProblem) {
  const ParseErrorCase cases[] = {
      {"", "1:1", "expected 'kernel'"},
      {"kernel @k() {\n  %0 = frobnicate : i32\n}\n", "2:8", "unknown op 'frobnicate'"},
      {"kernel @k() {\n  %0 = add %x, %x : i32\n}\n", "2:14", "use of undefined value %x"},
      {"kernel @k(%a: i32) {\n  %0 = add %a, %a : i32\n  %0 = add %a, %a : i32\n}\n", "3:4", "value %0 defined twice"},
      {"kernel @k(%a: f31) {\n}\n", "1:18", "unknown type 'f31'"},
      {"kernel @k(%a: ptr<ptr>) {\n}\n", "1:22", "unknown pointee type 'ptr'"},
      {"kernel @k() {\n  %0 = arange {start = 0, end = 4} : tile<4f32>\n}\n", "2:44", "expected 'x' in tile shape"},
      {"kernel @k() {\n  %0 = arange {start = 0, end = 4} : tile<xi32>\n}\n", "2:43", "at least one dimension"},
      {"kernel @k(%a: i32) {\n  %0 = add %a, %a : i32\n", "3:1", "unexpected end of input"},
      {"kernel @k() attributes {s = \"abc} {\n}\n", "3:1", "unterminated string"},
      {"kernel @k(%a: i32) {\n  %0, %1 = add %a, %a : i32\n}\n", "2:12", "op 'add' names 2 results but lists 1 result types"},
      {"kernel @k() {\n  %0 = const {value = 1.2.3} : f32\n}\n", "2:23", "malformed number '1.2.3'"},
      {"kernel @k() {\n  %0 = const {value = 1e} : f32\n}\n", "2:23", "malformed number '1e'"},
      {"kernel @k() {\n  %0 = const {value = 99999999999999999999} : i64\n}\n", "2:23", "does not fit in 64 bits"},
      {"kernel @k() {\n  %0 = const {value = -9223372036854775809} : i64\n}\n", "2:23", "does not fit in 64 bits"},
      {"kernel @k() {\n}\nkernel @k2() {\n}\n", "3:1", "unexpected text after the kernel"},
      {"kernel @k() {\n  return loc(1.5:2)\n}\n", "2:20", "bad loc"},
      {"kernel @k() attributes {l = [1, 2.5]} {\n}\n", "1:36", "only integer lists"},
      {"kernel @k() attributes {l = } {\n}\n", "1:29", "expected an attribute value"},
      {"kernel @k() attributes {a = 1, 4b = 2} {\n}\n", "1:32", "attribute name '4b' must start with a letter"},
      {"kernel @k() attributes {a = 1, a = 2} {\n}\n", "1:32", "attribute 'a' given twice"},
      {"kernel @k(%n: i32) {\n  for %n, %n, %n {\n  ^(%i: i32):\n    yield\n  }\n  print %i\n}\n", "6:11",
       "use of undefined value %i"},
      {"kernel @k() {\n  %0 = const {value = 1} i32\n}\n", "2:8", "op 'const' names 1 results but lists 0 result types"},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.text);
    try {
      parse_kernel(c.text);
      ADD_FAILURE() << "parsed without error";
    } catch (const CompileError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(std::string("at ") + c.where + ":"), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.what), std::string::npos) << msg;
      EXPECT_FALSE(e.user_error) << "malformed IR is a Tessera bug, not a user error";
    }
  }
}

// Random edits of valid kernels: parsing, verifying and printing either succeed
// or throw CompileError; nothing else (no crash, no other exception type).
TEST(IrParserErrors, MutatedKernelsNeverCrash) {
  std::vector<std::string> seeds;
  for (auto& f : roundtrip_files()) seeds.push_back(f.input);
  ASSERT_FALSE(seeds.empty());
  const std::string alphabet = "%{}()[]<>:,=^@\"x0123456789-.e \n";
  std::mt19937 rng(1234);
  int parsed = 0, rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    for (int edits = 1 + rng() % 3; edits > 0; --edits) {
      size_t pos = rng() % (s.size() + 1);
      switch (rng() % 4) {
        case 0: if (pos < s.size()) s.erase(pos, 1 + rng() % 8); break;
        case 1: s.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        case 2: s.resize(pos); break;
        default: if (pos < s.size()) s[pos] = alphabet[rng() % alphabet.size()]; break;
      }
    }
    try {
      auto k = parse_kernel(s);
      verify_kernel(*k);
      print_kernel(*k);
      parsed++;
    } catch (const CompileError&) {
      rejected++;
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(parsed, 0);
}

// --------------------------------------------------------------- verifier errors

struct VerifyErrorCase {
  const char* body;  // ops of `kernel @bad(%a: i32, %f: f32, %p: ptr<f32>)`
  const char* rule;  // a fragment of the message
};

TEST(IrVerifier, RejectsBrokenRulesWithOpAndLoc) {
  const VerifyErrorCase cases[] = {
      {"%0 = arange {start = 0, end = 3} : tile<3xi32> loc(4:2)", "tile dimension 3 is not a power of two"},
      {"%0 = splat %a : tile<4xi32> loc(4:2)\n  %1 = splat %a : tile<8xi32>\n  %2 = add %0, %1 : tile<4xi32> loc(4:2)",
       "elementwise operand tile<8xi32> does not match result tile<4xi32>"},
      {"%0 = cmp %a, %a {pred = \"lte\"} : i1 loc(4:2)", "unknown predicate 'lte'"},
      {"%0 = load %a : i32 loc(4:2)", "load needs pointers"},
      {"store %p, %f {cache_modifier = \".ca\"} loc(4:2)", "store cache_modifier must be .wb, .cg, .cs or .wt"},
      {"%0 = program_id {axis = 3} : i32 loc(4:2)", "axis must be 0, 1 or 2"},
      {"%0 = const {value = 0} : ptr<f32> loc(4:2)", "pointer constants are not allowed"},
      {"%0 = splat %a : tile<4xi32>\n  %1 = broadcast %0 : tile<8xi32> loc(4:2)", "only size-1 dims can be broadcast"},
      {"%0 = splat %f : tile<4x8xf32>\n  %1 = dot %0, %0, %0 : tile<4x8xf32> loc(4:2)", "dot shapes"},
      {"%0 = for %a, %a, %a, %a : i32 {\n  ^(%i: i32, %c: i32):\n    yield\n  } loc(4:2)",
       "region yields 0 values, expected 1"},
      {"%0 = if %a : i32 {\n    yield %a\n  } {\n  } loc(4:2)", "region must end with 'yield'"},
      {"if %a {\n    return loc(4:2)\n  } {\n  }", "return inside a region"},
      {"yield loc(4:2)\n  %0 = add %a, %a : i32", "terminator is not the last op of its region"},
      {"%0 = add %a : i32 loc(4:2)", "expected 2 operands, got 1"},
      {"%0 = fma %f, %f : f32 loc(4:2)", "expected 3 operands, got 2"},
      {"neg %a loc(4:2)", "expected 1 results"},
      {"gdc_wait %a loc(4:2)", "expected 0 operands, got 1"},
      {"%0 = gdc_launch_dependents : i32 loc(4:2)", "expected 0 results"},
      {"%0 = while %a : i32 {\n  ^(%v: i32):\n    condition %v\n  } {\n  ^(%w: i32):\n    yield %w\n  } loc(4:2)",
       "condition must pass one value per result"},
      {"%0 = if %a : i32 {\n    yield %a, %a\n  } {\n    yield %a\n  } loc(4:2)", "region yields 2 values, expected 1"},
      {"%0 = splat %a : tile<4x2xi32>\n  %1 = permute %0 {order = [1, 0]} : tile<2xi32> loc(4:2)", "order must list every dim"},
      {"%0 = splat %a : tile<8xi32>\n  %1 = reduce %0 {axis = 1} : i32 {\n  ^(%x: i32, %y: i32):\n    yield %x\n  } "
       "loc(4:2)",
       "axis out of range"},
      {"%0 = splat %f : tile<8x4xf32>\n  %1 = cluster_reduce_scatter %0 {cluster = 3} : tile<2x4xf32> loc(4:2)",
       "cluster must be a power of two from 2 to 16"},
      {"%0 = splat %f : tile<8x4xf32>\n  %1 = cluster_reduce_scatter %0 {cluster = 2} : tile<2x4xf32> loc(4:2)",
       "returns its part"},
      {"%0 = splat %a : tile<8xi32>\n  %1 = cluster_reduce_scatter %0 {cluster = 2} : tile<4xi32> loc(4:2)",
       "takes an f32 tile"},
      {"%0 = splat %f : tile<8x4xf32>\n  %1 = cluster_reduce_scatter %0 {cluster = 2} : tile<4x4xf32>\n"
       "  %2 = cluster_reduce_scatter %0 {cluster = 4} : tile<2x4xf32> loc(4:2)",
       "different cluster sizes"},
  };
  for (auto& c : cases) {
    std::string text = std::string("kernel @bad(%a: i32, %f: f32, %p: ptr<f32>) attributes {file = \"/t/bad.py\"} {\n  ") +
                       c.body + "\n  return\n}\n";
    SCOPED_TRACE(text);
    auto k = parse_kernel(text);
    try {
      verify_kernel(*k);
      ADD_FAILURE() << "verified without error";
    } catch (const CompileError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(c.rule), std::string::npos) << msg;
      EXPECT_NE(msg.find("/t/bad.py:4:2"), std::string::npos) << msg;
      EXPECT_EQ(e.line, 4);
      EXPECT_FALSE(e.user_error);
    }
  }
}

TEST(IrVerifier, RejectsTileKernelArguments) {
  auto k = parse_kernel("kernel @bad(%t: tile<4xf32>) {\n}\n");
  EXPECT_THROW(verify_kernel(*k), CompileError);
}

// The parser cannot produce this, but a buggy pass can: a value used after the
// region that defines it (e.g. hoisting the wrong way).
TEST(IrVerifier, RejectsValueUsedOutsideItsRegion) {
  auto k = parse_kernel(
      "kernel @k(%n: i32) {\n  for %n, %n, %n {\n  ^(%i: i32):\n    %x = add %i, %i : i32\n    yield\n  }\n"
      "  print %n loc(7:3)\n}\n");
  verify_kernel(*k);
  Op* loop = k->body()->ops.front().get();
  Op* print = k->body()->ops.back().get();
  print->operands[0] = loop->regions[0]->block->ops.front()->result();
  try {
    verify_kernel(*k);
    ADD_FAILURE() << "verified without error";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("outside its region"), std::string::npos) << e.what();
    EXPECT_EQ(e.line, 7);
  }
}

}  // namespace
}  // namespace tessera::ir
