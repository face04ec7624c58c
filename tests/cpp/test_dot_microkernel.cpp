// emit_dot against a naive reference over many power-of-two shapes, every supported type
// and both blockings (AVX-512, AVX2). The data are small integers scaled by 1/4, so every
// product and sum is exact in every type and results must match bit for bit.
#include <gtest/gtest.h>
#include <llvm/ADT/SmallString.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/x86/dot_microkernel.h"
#include "cpu_jit_test_util.h"

namespace {

using tessera::codegen::x86::DotShape;
using tessera::codegen::x86::emit_dot;

using tessera_test::CpuJit;
using Kernel = void(const void* a, const void* b, void* c);

enum class DType { F32, F16, BF16, F64, I8 };
const DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I8};

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
    case DType::I8: return "i8";
  }
  return "?";
}

llvm::Type* input_type(DType t, llvm::LLVMContext& ctx) {
  switch (t) {
    case DType::F32: return llvm::Type::getFloatTy(ctx);
    case DType::F16: return llvm::Type::getHalfTy(ctx);
    case DType::BF16: return llvm::Type::getBFloatTy(ctx);
    case DType::F64: return llvm::Type::getDoubleTy(ctx);
    case DType::I8: return llvm::Type::getInt8Ty(ctx);
  }
  return nullptr;
}

llvm::Type* acc_type(DType t, llvm::LLVMContext& ctx) {
  if (t == DType::F64) return llvm::Type::getDoubleTy(ctx);
  if (t == DType::I8) return llvm::Type::getInt32Ty(ctx);
  return llvm::Type::getFloatTy(ctx);
}

// void name(const In* a, const In* b, Acc* c) { C += A·B }. Odd-numbered kernels emit into
// an entry block that already ends in `ret` (the code after the insertion point must be
// moved past the dot); even-numbered ones into an unterminated block, adding `ret` after.
void add_dot_kernel(llvm::Module& m, const std::string& name, DotShape shape, DType t,
                    int vector_bits, bool insert_before_terminator,
                    tessera::codegen::x86::DotLayout layout = {}) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Type* ptr = llvm::PointerType::get(ctx, 0);
  auto* fn_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr, ptr, ptr}, false);
  auto* f = llvm::Function::Create(fn_ty, llvm::Function::ExternalLinkage, name, m);
  for (unsigned i = 0; i < 3; ++i) f->addParamAttr(i, llvm::Attribute::NoAlias);
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", f);
  llvm::IRBuilder<> b(entry);
  if (insert_before_terminator) b.SetInsertPoint(b.CreateRetVoid());
  emit_dot(b, f->getArg(0), f->getArg(1), f->getArg(2), shape, input_type(t, ctx),
           input_type(t, ctx), acc_type(t, ctx), vector_bits,
           tessera::codegen::x86::DotStart::LoadC, true, layout);
  if (!insert_before_terminator) b.CreateRetVoid();
}

// ---- test data: integers k/4, |k| <= 8 (exact in every type, bf16 included) ----------
uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return uint16_t(u >> 16);  // exact for values with <= 8 significant bits
}

uint16_t to_f16(float x) {
  if (x == 0) return 0;
  uint32_t u;
  std::memcpy(&u, &x, 4);
  uint32_t sign = (u >> 16) & 0x8000, exp = ((u >> 23) & 0xff) - 127 + 15;
  return uint16_t(sign | (exp << 10) | ((u >> 13) & 0x3ff));  // exact for normal halves
}

// Buffers of one element type, filled from small integers.
struct Buffer {
  std::vector<unsigned char> bytes;
  std::vector<double> values;  // what each element holds, for the reference
};

Buffer make_buffer(DType t, size_t n, bool accumulator, std::mt19937& rng) {
  Buffer buf;
  std::uniform_int_distribution<int> small(-8, 8), byte(-128, 127);
  size_t elem = accumulator ? (t == DType::F64 ? 8 : 4)
                            : (t == DType::F32   ? 4
                               : t == DType::F64 ? 8
                               : t == DType::I8  ? 1
                                                 : 2);
  buf.bytes.resize(n * elem);
  for (size_t i = 0; i < n; ++i) {
    double v = t == DType::I8 ? byte(rng) : small(rng) / 4.0;
    buf.values.push_back(v);
    unsigned char* p = &buf.bytes[i * elem];
    if (t == DType::F64) {
      std::memcpy(p, &v, 8);
    } else if (t == DType::I8) {
      if (accumulator) {
        int32_t x = int32_t(v);
        std::memcpy(p, &x, 4);
      } else {
        int8_t x = int8_t(v);
        std::memcpy(p, &x, 1);
      }
    } else if (accumulator || t == DType::F32) {
      float x = float(v);
      std::memcpy(p, &x, 4);
    } else {
      uint16_t x = t == DType::F16 ? to_f16(float(v)) : to_bf16(float(v));
      std::memcpy(p, &x, 2);
    }
  }
  return buf;
}

double read_acc(DType t, const Buffer& c, size_t i) {
  if (t == DType::F64) {
    double x;
    std::memcpy(&x, &c.bytes[i * 8], 8);
    return x;
  }
  if (t == DType::I8) {
    int32_t x;
    std::memcpy(&x, &c.bytes[i * 4], 4);
    return x;
  }
  float x;
  std::memcpy(&x, &c.bytes[i * 4], 4);
  return x;
}

// ---- shapes and kernels -------------------------------------------------------------------
// f32, f64 and i8 (whose lane counts differ) run every shape; f16 and bf16 differ from
// f32 only in the conversion on load, so they run the first half.
const DotShape kShapes[] = {
    {1, 1, 1},      {2, 4, 8},   {4, 16, 2},    {16, 64, 1},  {64, 64, 32}, {128, 2, 16},
    {128, 128, 64}, {8, 32, 4},  {1, 128, 128}, {32, 8, 128}, {16, 16, 16}, {128, 1, 64},
    {64, 16, 32},   {4, 4, 128}, {128, 32, 8},  {2, 128, 4},
};
constexpr int kShapeCount = sizeof(kShapes) / sizeof(kShapes[0]);

int shapes_for(DType t) {
  return t == DType::F16 || t == DType::BF16 ? kShapeCount / 2 : kShapeCount;
}

std::string kernel_name(DotShape s, DType t, int vector_bits) {
  return "dot_" + std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) +
         "_" + dtype_name(t) + "_v" + std::to_string(vector_bits);
}

// The AVX-512 blocking on the host CPU, the AVX2 one on an AVX2-only CPU.
struct Target {
  const char* cpu;
  int vector_bits;
};
const Target kTargets[] = {{"", 512}, {"haswell", 256}};

bool host_has_avx512() { return llvm::sys::getHostCPUFeatures().lookup("avx512f"); }

CpuJit& dot_jit(const std::string& cpu) {
  auto build = [](const std::string& cpu) {
    auto jit = std::make_unique<CpuJit>(cpu);
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto m = jit->new_module(*ctx);
    int count = 0;
    for (const Target& target : kTargets) {
      if (target.cpu != cpu) continue;
      for (DType t : kTypes)
        for (int i = 0; i < shapes_for(t); ++i)
          add_dot_kernel(*m, kernel_name(kShapes[i], t, target.vector_bits), kShapes[i], t,
                         target.vector_bits, count++ % 2 == 1);
    }
    jit->add(std::move(m), std::move(ctx));
    return jit;
  };
  // Both compiled at once, each on its own thread and LLVMContext.
  static std::future<std::unique_ptr<CpuJit>> haswell_future =
      std::async(std::launch::async, build, "haswell");
  static std::unique_ptr<CpuJit> host = build("");
  static std::unique_ptr<CpuJit> haswell = haswell_future.get();
  return cpu.empty() ? *host : *haswell;
}

class DotMatchesReference : public ::testing::TestWithParam<DType> {};

TEST_P(DotMatchesReference, AllShapesAndBlockings) {
  DType t = GetParam();
  for (const Target& target : kTargets) {
    if (target.vector_bits == 512 && !host_has_avx512()) continue;  // still correct, but slow
    CpuJit& jit = dot_jit(target.cpu);
    for (int shape = 0; shape < shapes_for(t); ++shape) {
      DotShape s = kShapes[shape];
      std::mt19937 rng(s.M * 10007 + s.N * 101 + s.K);
      Buffer a = make_buffer(t, size_t(s.M) * s.K, false, rng);
      Buffer b = make_buffer(t, size_t(s.K) * s.N, false, rng);
      Buffer c = make_buffer(t, size_t(s.M) * s.N, true, rng);
      std::string name = kernel_name(s, t, target.vector_bits);
      jit.lookup<Kernel>(name)(a.bytes.data(), b.bytes.data(), c.bytes.data());
      int mismatches = 0;
      for (int i = 0; i < s.M; ++i)
        for (int j = 0; j < s.N; ++j) {
          double want = c.values[size_t(i) * s.N + j];
          for (int k = 0; k < s.K; ++k)
            want += a.values[size_t(i) * s.K + k] * b.values[size_t(k) * s.N + j];
          double got = read_acc(t, c, size_t(i) * s.N + j);
          if (got != want && mismatches++ < 3)
            ADD_FAILURE() << name << " on " << (*target.cpu ? target.cpu : "host") << ": C[" << i
                          << "][" << j << "] = " << got << ", want " << want;
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DotMatchesReference, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Transposed operands (A given as A^T, B as B^T, or both), as `tl.trans` of a loaded tile
// hands them to the dot: every type, every shape (tiny ones take the element-by-element
// packing of B^T, the rest the in-register 16×16 / 8×8 transposes), both blockings.
const char* layout_name(int which) {
  static const char* names[] = {"", "_at", "_bt", "_atbt"};
  return names[which];
}

tessera::codegen::x86::DotLayout layout_of(int which) {
  tessera::codegen::x86::DotLayout l;
  l.a_transposed = which & 1;
  l.b_transposed = which & 2;
  return l;
}

CpuJit& transposed_dot_jit(const std::string& cpu) {
  auto build = [](const std::string& cpu) {
    auto jit = std::make_unique<CpuJit>(cpu);
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto m = jit->new_module(*ctx);
    for (const Target& target : kTargets) {
      if (target.cpu != cpu) continue;
      for (DType t : kTypes)
        for (int i = 0; i < shapes_for(t); ++i)
          for (int which = 1; which < 4; ++which)
            add_dot_kernel(*m, kernel_name(kShapes[i], t, target.vector_bits) + layout_name(which), kShapes[i], t,
                           target.vector_bits, which == 2, layout_of(which));
    }
    jit->add(std::move(m), std::move(ctx));
    return jit;
  };
  static std::future<std::unique_ptr<CpuJit>> haswell_future =
      std::async(std::launch::async, build, "haswell");
  static std::unique_ptr<CpuJit> host = build("");
  static std::unique_ptr<CpuJit> haswell = haswell_future.get();
  return cpu.empty() ? *host : *haswell;
}

class TransposedDotMatchesReference : public ::testing::TestWithParam<DType> {};

TEST_P(TransposedDotMatchesReference, AllShapesLayoutsAndBlockings) {
  DType t = GetParam();
  for (const Target& target : kTargets) {
    if (target.vector_bits == 512 && !host_has_avx512()) continue;
    CpuJit& jit = transposed_dot_jit(target.cpu);
    for (int shape = 0; shape < shapes_for(t); ++shape) {
      DotShape s = kShapes[shape];
      for (int which = 1; which < 4; ++which) {
        bool at = which & 1, bt = which & 2;
        std::mt19937 rng(s.M * 10007 + s.N * 101 + s.K + which);
        Buffer a = make_buffer(t, size_t(s.M) * s.K, false, rng);  // A, or A^T (K×M)
        Buffer b = make_buffer(t, size_t(s.K) * s.N, false, rng);  // B, or B^T (N×K)
        Buffer c = make_buffer(t, size_t(s.M) * s.N, true, rng);
        std::string name = kernel_name(s, t, target.vector_bits) + layout_name(which);
        jit.lookup<Kernel>(name)(a.bytes.data(), b.bytes.data(), c.bytes.data());
        int mismatches = 0;
        for (int i = 0; i < s.M; ++i)
          for (int j = 0; j < s.N; ++j) {
            double want = c.values[size_t(i) * s.N + j];
            for (int k = 0; k < s.K; ++k)
              want += a.values[at ? size_t(k) * s.M + i : size_t(i) * s.K + k] *
                      b.values[bt ? size_t(j) * s.K + k : size_t(k) * s.N + j];
            double got = read_acc(t, c, size_t(i) * s.N + j);
            if (got != want && mismatches++ < 3)
              ADD_FAILURE() << name << " on " << (*target.cpu ? target.cpu : "host") << ": C[" << i << "][" << j
                            << "] = " << got << ", want " << want;
          }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, TransposedDotMatchesReference, ::testing::ValuesIn(kTypes),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// A transposed B is transposed with shuffles, never gathered: no gather instruction,
// and the FMAs stay zmm vector code.
TEST(DotMicrokernel, TransposedBIsShuffledNotGathered) {
  if (!host_has_avx512()) GTEST_SKIP() << "host has no AVX-512";
  CpuJit jit("");
  llvm::LLVMContext ctx;
  auto m = jit.new_module(ctx);
  add_dot_kernel(*m, "dot128x256x64_bt", {128, 256, 64}, DType::F32, 512, false, layout_of(2));
  std::string text = jit.assembly(*m);
  if (std::getenv("TESSERA_PRINT_ASM")) std::printf("%s\n", text.c_str());
  EXPECT_EQ(text.find("gather"), std::string::npos);
  int zmm_fmas = 0;
  for (size_t pos = text.find("vfmadd"); pos != std::string::npos; pos = text.find("vfmadd", pos + 1))
    zmm_fmas += text.substr(pos, text.find('\n', pos) - pos).find("zmm") != std::string::npos;
  EXPECT_GE(zmm_fmas, 16) << "expected packed zmm FMAs";
  EXPECT_EQ(text.find("call"), std::string::npos);
}

// each_micro_tile runs once per full micro-tile, with every index in [0, count) once:
// the hook here adds 1 to counter[index] (a buffer of `count` i32), then the dot runs
// as usual (results checked too).
TEST(DotMicrokernel, MicroTileHookSeesEveryFullMicroTileOnce) {
  if (!host_has_avx512()) GTEST_SKIP() << "host has no AVX-512";
  CpuJit jit("");
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto m = jit.new_module(*ctx);
  llvm::Type* ptr = llvm::PointerType::get(*ctx, 0);
  auto* fn_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(*ctx), {ptr, ptr, ptr, ptr}, false);
  auto* f = llvm::Function::Create(fn_ty, llvm::Function::ExternalLinkage, "dot_hooked", *m);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(*ctx, "entry", f));
  llvm::Type* f32 = b.getFloatTy();
  int64_t seen_count = -1;
  tessera::codegen::x86::MicroTileHook hook = [&](llvm::Value* index, int64_t count) {
    seen_count = count;
    llvm::Value* slot = b.CreateGEP(b.getInt32Ty(), f->getArg(3), index);
    b.CreateStore(b.CreateAdd(b.CreateLoad(b.getInt32Ty(), slot), b.getInt32(1)), slot);
  };
  DotShape s{64, 128, 32};  // AVX-512 f32: 8 row blocks x 4 column blocks of 8x32
  emit_dot(b, f->getArg(0), f->getArg(1), f->getArg(2), s, f32, f32, f32, 512,
           tessera::codegen::x86::DotStart::LoadC, true, {}, hook);
  b.CreateRetVoid();
  EXPECT_EQ(seen_count, 32);
  jit.add(std::move(m), std::move(ctx));
  std::mt19937 rng(5);
  Buffer a = make_buffer(DType::F32, size_t(s.M) * s.K, false, rng);
  Buffer bm = make_buffer(DType::F32, size_t(s.K) * s.N, false, rng);
  Buffer c = make_buffer(DType::F32, size_t(s.M) * s.N, true, rng);
  std::vector<int32_t> counter(32, 0);
  using Hooked = void(const void*, const void*, void*, int32_t*);
  jit.lookup<Hooked>("dot_hooked")(a.bytes.data(), bm.bytes.data(), c.bytes.data(), counter.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(counter[i], 1) << "micro-tile " << i;
  for (int i = 0; i < s.M; ++i)
    for (int j = 0; j < s.N; ++j) {
      double want = c.values[size_t(i) * s.N + j];
      for (int k = 0; k < s.K; ++k) want += a.values[size_t(i) * s.K + k] * bm.values[size_t(k) * s.N + j];
      ASSERT_EQ(read_acc(DType::F32, c, size_t(i) * s.N + j), want) << i << "," << j;
    }
}

// The micro-kernel must be FMA vector code with no calls: zmm with the AVX-512 blocking,
// ymm with the AVX2 one. TESSERA_PRINT_ASM=1 prints the assembly.
void expect_fma_vector_code(const char* cpu, int vector_bits, const char* reg) {
  CpuJit jit(cpu);
  llvm::LLVMContext ctx;
  auto m = jit.new_module(ctx);
  add_dot_kernel(*m, "dot64x64x32", {64, 64, 32}, DType::F32, vector_bits, false);
  std::string text = jit.assembly(*m);
  if (std::getenv("TESSERA_PRINT_ASM")) std::printf("%s\n", text.c_str());
  int vector_fmas = 0;
  size_t pos = 0;
  while ((pos = text.find("vfmadd", pos)) != std::string::npos) {
    std::string line = text.substr(pos, text.find('\n', pos) - pos);
    if (line.find("ps") != std::string::npos && line.find(reg) != std::string::npos) ++vector_fmas;
    ++pos;
  }
  EXPECT_GE(vector_fmas, 8) << "expected packed FMAs on " << reg;
  EXPECT_EQ(text.find("call"), std::string::npos);
}

TEST(DotMicrokernel, F32IsFmaVectorCodeOnAvx512) {
  if (!host_has_avx512()) GTEST_SKIP() << "host has no AVX-512";
  expect_fma_vector_code("", 512, "zmm");
}
TEST(DotMicrokernel, F32IsFmaVectorCodeOnAvx2) { expect_fma_vector_code("haswell", 256, "ymm"); }

// ---- packing ------------------------------------------------------------------------------
using tessera::codegen::x86::choose_dot_packing;

TEST(DotPacking, SameTypeOperandsAreNeverCopied) {
  llvm::LLVMContext ctx;
  for (DType t : {DType::F32, DType::F64})
    for (int bits : {256, 512}) {
      auto p = choose_dot_packing({128, 256, 128}, input_type(t, ctx), acc_type(t, ctx), bits);
      EXPECT_FALSE(p.pack_b) << dtype_name(t);
      EXPECT_FALSE(p.convert_a) << dtype_name(t);
    }
}

TEST(DotPacking, TransposedBIsAlwaysPacked) {
  llvm::LLVMContext ctx;
  tessera::codegen::x86::DotLayout bt;
  bt.b_transposed = true;
  for (DType t : kTypes)
    for (int bits : {256, 512})
      for (DotShape s : {DotShape{128, 256, 64}, DotShape{1, 1, 1}, DotShape{8, 32, 4}})
        EXPECT_TRUE(choose_dot_packing(s, input_type(t, ctx), acc_type(t, ctx), bits, bt).pack_b) << dtype_name(t);
}

TEST(DotPacking, WideningOperandsAreCopiedWhenReused) {
  llvm::LLVMContext ctx;
  for (DType t : {DType::F16, DType::BF16, DType::I8}) {
    llvm::Type* in = input_type(t, ctx);
    llvm::Type* acc = acc_type(t, ctx);
    // AVX-512 f32: micro-tiles of 8 rows × 32 columns.
    auto big = choose_dot_packing({128, 128, 64}, in, acc, 512);
    EXPECT_TRUE(big.pack_b && big.convert_a) << dtype_name(t);
    // One row block reads each B panel once, one column block reads A once: no copies.
    auto one_row_block = choose_dot_packing({8, 128, 64}, in, acc, 512);
    EXPECT_FALSE(one_row_block.pack_b) << dtype_name(t);
    EXPECT_TRUE(one_row_block.convert_a) << dtype_name(t);
    auto one_col_block = choose_dot_packing({128, 32, 64}, in, acc, 512);
    EXPECT_TRUE(one_col_block.pack_b) << dtype_name(t);
    EXPECT_FALSE(one_col_block.convert_a) << dtype_name(t);
    // AVX2: 6 rows × 16 columns, so 12 rows and 32 columns are the thresholds.
    EXPECT_TRUE(choose_dot_packing({16, 32, 8}, in, acc, 256).pack_b) << dtype_name(t);
    EXPECT_FALSE(choose_dot_packing({8, 32, 8}, in, acc, 256).pack_b) << dtype_name(t);
  }
}

// With f16/bf16 operands the conversion (vcvtph2ps for f16, a 16-bit left shift for bf16)
// happens in the packing loops only: no block that issues FMAs converts anything.
void expect_conversion_outside_fma_blocks(const char* cpu, int vector_bits, DType t,
                                          const char* convert) {
  CpuJit jit(cpu);
  llvm::LLVMContext ctx;
  auto m = jit.new_module(ctx);
  add_dot_kernel(*m, "dot128x128x64", {128, 128, 64}, t, vector_bits, false);
  std::string text = jit.assembly(*m);
  if (std::getenv("TESSERA_PRINT_ASM")) std::printf("%s\n", text.c_str());
  EXPECT_NE(text.find(convert), std::string::npos) << "no " << convert << " at all";
  // Basic blocks: the text between labels (".LBB..." or the function's own).
  int fma_blocks = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t next = text.find("\n.LBB", start + 1);
    if (next == std::string::npos) next = text.size();
    std::string block = text.substr(start, next - start);
    if (block.find("vfmadd") != std::string::npos) {
      ++fma_blocks;
      EXPECT_EQ(block.find(convert), std::string::npos) << "a conversion among the FMAs:\n" << block;
    }
    start = next;
  }
  EXPECT_GE(fma_blocks, 1);
  EXPECT_EQ(text.find("call"), std::string::npos);
}

TEST(DotPacking, F16ConvertsInThePackingLoopsOnly) {
  if (host_has_avx512()) expect_conversion_outside_fma_blocks("", 512, DType::F16, "vcvtph2ps");
  expect_conversion_outside_fma_blocks("haswell", 256, DType::F16, "vcvtph2ps");
}

TEST(DotPacking, Bf16ConvertsInThePackingLoopsOnly) {
  if (host_has_avx512()) expect_conversion_outside_fma_blocks("", 512, DType::BF16, "vpslld");
  expect_conversion_outside_fma_blocks("haswell", 256, DType::BF16, "vpslld");
}

}  // namespace
