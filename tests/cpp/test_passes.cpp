// GoogleTests for the pass layer: the registry and default pipeline, the float
// rounding constant folding relies on (against hardware/bit-level references),
// and robustness (every pass on every test kernel and on mutated kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "tessera/compiler.h"
#include "transforms/constant_fold.h"
#include "transforms/passes.h"

namespace tessera::transforms {
namespace {

namespace fs = std::filesystem;
using ir::ElemType;
using ir::ScalarKind;

const std::vector<std::string> kPasses = {"canonicalize", "cse", "licm", "dce", "early-loads"};

TEST(PassRegistry, RunsKnownPassesAndNamesThemForUnknownOnes) {
  auto k = ir::parse_kernel("kernel @k() {\n}\n");
  for (auto& p : kPasses) EXPECT_NO_THROW(run_pass(*k, p));
  try {
    run_pass(*k, "licm2");
    ADD_FAILURE() << "no error";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown pass 'licm2' (known passes: canonicalize, cse, dce, early-loads, licm)"),
              std::string::npos)
        << e.what();
  }
}

TEST(PassRegistry, DefaultPipeline) {
  std::vector<std::string> names;
  for (const char* const* p = kDefaultPipeline; *p; ++p) names.push_back(*p);
  EXPECT_EQ(names, (std::vector<std::string>{"canonicalize", "licm", "cse", "canonicalize", "dce", "early-loads"}));
}

// ------------------------------------------------------- float rounding helpers

ElemType elem(ScalarKind k) { return ElemType{k, ScalarKind::I32}; }

double random_double(std::mt19937_64& rng, int min_exp, int max_exp) {
  double mant = std::uniform_real_distribution<double>(1.0, 2.0)(rng);
  int e = std::uniform_int_distribution<int>(min_exp, max_exp)(rng);
  return (rng() & 1 ? -1 : 1) * std::ldexp(mant, e);
}

TEST(PassConstantFold, RoundsToF32LikeTheHardware) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    double d = random_double(rng, -160, 130);  // subnormals and overflow included
    ASSERT_EQ(round_float(elem(ScalarKind::F32), d), static_cast<double>(static_cast<float>(d))) << d;
  }
}

#ifdef __FLT16_MAX__
TEST(PassConstantFold, RoundsToF16LikeTheHardware) {
  std::mt19937_64 rng(8);
  for (int i = 0; i < 100000; ++i) {
    double d = random_double(rng, -30, 17);
    double want = static_cast<double>(static_cast<_Float16>(d));
    ASSERT_EQ(round_float(elem(ScalarKind::F16), d), want) << d;
  }
  EXPECT_EQ(round_float(elem(ScalarKind::F16), 65519.0), 65504.0);
  EXPECT_TRUE(std::isinf(round_float(elem(ScalarKind::F16), 65520.0)));
  EXPECT_EQ(round_float(elem(ScalarKind::F16), std::ldexp(1.0, -25)), 0.0);  // tie to even (zero)
  EXPECT_EQ(round_float(elem(ScalarKind::F16), std::ldexp(1.5, -25)), std::ldexp(1.0, -24));
}
#endif

// bf16 from f32 by the bit trick the compiled code and the interpreter use.
double bf16_reference(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000u;
  float r;
  std::memcpy(&r, &b, sizeof r);
  return r;
}

TEST(PassConstantFold, RoundsToBf16LikeTheCompiledCode) {
  std::mt19937 rng(9);
  for (int i = 0; i < 100000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (std::isnan(f)) continue;
    ASSERT_EQ(round_float(elem(ScalarKind::BF16), f), bf16_reference(f)) << f;
  }
}

TEST(PassConstantFold, WrapsIntsBySignedness) {
  EXPECT_EQ(wrap_int(elem(ScalarKind::I8), 200), -56);
  EXPECT_EQ(wrap_int(elem(ScalarKind::U8), 0xFFFF), 255);
  EXPECT_EQ(wrap_int(elem(ScalarKind::I1), 3), 1);
  EXPECT_EQ(wrap_int(elem(ScalarKind::I32), 0x80000000u), INT32_MIN);
  EXPECT_EQ(wrap_int(elem(ScalarKind::U32), ~uint64_t(0)), 4294967295);
  EXPECT_EQ(wrap_int(elem(ScalarKind::U64), ~uint64_t(0)), -1);
}

// Conversions of 64-bit ints round once (through double they would round twice).
TEST(PassConstantFold, WideIntToFloatRoundsOnce) {
  // 2^60 + 2^36 + 1 is just above halfway between two f32 values: it rounds up
  // to 2^60 + 2^37. Through double the +1 is lost first, the value lands exactly
  // halfway and rounds to even: 2^60.
  std::string out = run_passes(
      "kernel @k() {\n  %0 = const {value = 1152921573326323713} : i64\n  %1 = cast %0 : f32\n  print %1\n}\n",
      {"canonicalize", "dce"});
  auto k = ir::parse_kernel(out);
  const ir::Op& folded = *k->body()->ops.front();
  ASSERT_EQ(folded.kind, ir::OpKind::Const) << out;
  EXPECT_EQ(std::get<double>(folded.attrs.at("value")), std::ldexp(1.0, 60) + std::ldexp(1.0, 37)) << out;
}

// ------------------------------------------------------------------ robustness

std::vector<std::string> test_kernel_inputs() {
  std::vector<std::string> inputs;
  for (auto& e : fs::recursive_directory_iterator(fs::path(TESSERA_SOURCE_DIR) / "tests" / "ir")) {
    if (e.path().extension() != ".tir") continue;
    std::ifstream f(e.path());
    std::string text, line;
    while (std::getline(f, line) && line != "// CHECK-OUTPUT:") text += line + "\n";
    inputs.push_back(text);
  }
  return inputs;
}

// Each pass verifies after itself (run_passes) and reaches its fixed point in one
// application.
TEST(PassRobustness, EveryPassIsIdempotentOnEveryTestKernel) {
  auto inputs = test_kernel_inputs();
  ASSERT_GT(inputs.size(), 30u);
  for (auto& in : inputs) {
    for (auto& p : kPasses) {
      std::string once = run_passes(in, {p});
      EXPECT_EQ(run_passes(once, {p}), once) << p << " on\n" << in;
    }
  }
}

// Digit edits keep most kernels valid while changing constants, bounds, value
// references and shapes: the kernels that still verify must go through every
// pass and the default pipeline, verifying after each, without any error.
TEST(PassRobustness, MutatedKernelsSurviveEveryPass) {
  auto inputs = test_kernel_inputs();
  std::vector<std::string> pipeline;
  for (const char* const* p = kDefaultPipeline; *p; ++p) pipeline.push_back(*p);
  std::mt19937 rng(99);
  int survivors = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string s = inputs[rng() % inputs.size()];
    for (int edits = 1 + rng() % 3; edits > 0;) {
      size_t pos = rng() % s.size();
      if (!std::isdigit(static_cast<unsigned char>(s[pos]))) continue;
      s[pos] = static_cast<char>('0' + rng() % 10);
      --edits;
    }
    try {
      ir::verify_kernel(*ir::parse_kernel(s));
    } catch (const CompileError&) {
      continue;
    }
    survivors++;
    for (auto& p : kPasses) EXPECT_NO_THROW(run_passes(s, {p})) << p << " on\n" << s;
    EXPECT_NO_THROW(run_passes(s, pipeline)) << "default pipeline on\n" << s;
  }
  EXPECT_GT(survivors, 500);
}

}  // namespace
}  // namespace tessera::transforms
