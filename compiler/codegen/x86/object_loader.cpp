// Links CPU kernel objects into the process with LLVM ORC (JITLink): one
// JITDylib per object, so every kernel may export the same entry symbol name.
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "tessera/cpu_loader.h"

namespace tessera {

namespace {

std::mutex g_mutex;
llvm::orc::LLJIT* g_jit = nullptr;
int g_counter = 0;

llvm::orc::LLJIT& jit() {
  if (!g_jit) {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
    auto j = llvm::orc::LLJITBuilder().create();
    if (!j) throw std::runtime_error("cannot create the CPU code loader: " + llvm::toString(j.takeError()));
    g_jit = j->release();  // lives until exit; never destroyed (kernels may run at exit)
  }
  return *g_jit;
}

// Conversions LLVM may call on x86 targets without native bf16/f16 instructions: a
// bfloat value kept in a register is promoted to f32 and rounded back by
// __truncsfbf2 when stored (an AVX2 CPU such as TESSERA_CPU=haswell; an AVX-512 BF16
// host converts inline). LLVM passes and returns bf16/f16 in the low 16 bits of xmm0,
// so the bf16 results are returned as the bits of a float (g++ 12 has no __bf16 type).
float as_float_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// f32 -> bf16, round to nearest even; a NaN stays a (quiet) NaN of its sign.
float truncsfbf2(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  uint32_t h = std::isnan(x) ? (bits >> 16) | 0x40 : (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16;
  return as_float_bits(h & 0xFFFF);
}

// f64 -> bf16 with one rounding: to f32 rounded to odd (inexact results keep their
// last bit set), then to bf16 rounded to nearest even.
float truncdfbf2(double x) {
  float f = static_cast<float>(x);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (!std::isnan(x) && static_cast<double>(f) != x && (bits & 1) == 0)
    bits += std::fabs(x) > std::fabs(static_cast<double>(f)) ? 1 : -1;
  std::memcpy(&f, &bits, sizeof f);
  return truncsfbf2(f);
}

// f16 conversions for CPUs without F16C (TESSERA_CPU=x86-64): g++'s own (libgcc).
_Float16 truncsfhf2(float x) { return static_cast<_Float16>(x); }
_Float16 truncdfhf2(double x) { return static_cast<_Float16>(x); }
float extendhfsf2(_Float16 x) { return static_cast<float>(x); }

}  // namespace

void* load_cpu_object(const std::string& object, const std::string& symbol,
                      const std::map<std::string, void*>& extra_symbols) {
  std::lock_guard<std::mutex> lock(g_mutex);
  llvm::orc::LLJIT& j = jit();
  auto jd = j.getExecutionSession().createJITDylib("tessera_kernel_" + std::to_string(g_counter++));
  if (!jd) throw std::runtime_error("cannot load kernel object: " + llvm::toString(jd.takeError()));
  llvm::orc::SymbolMap syms;
  auto add = [&](const std::string& name, void* addr) {
    syms[j.mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(addr), llvm::JITSymbolFlags::Exported};
  };
  add("memcpy", reinterpret_cast<void*>(&::memcpy));
  add("memset", reinterpret_cast<void*>(&::memset));
  add("memmove", reinterpret_cast<void*>(&::memmove));
  // libm functions LLVM may call on x86: fmod for `frem` (the `rem` op on floats),
  // fmax/fmin for scalar llvm.maxnum/minnum (min/max, reductions).
  using F32Fn = float (*)(float, float);
  using F64Fn = double (*)(double, double);
  add("fmodf", reinterpret_cast<void*>(static_cast<F32Fn>(&::fmodf)));
  add("fmod", reinterpret_cast<void*>(static_cast<F64Fn>(&::fmod)));
  add("fmaxf", reinterpret_cast<void*>(static_cast<F32Fn>(&::fmaxf)));
  add("fmax", reinterpret_cast<void*>(static_cast<F64Fn>(&::fmax)));
  add("fminf", reinterpret_cast<void*>(static_cast<F32Fn>(&::fminf)));
  add("fmin", reinterpret_cast<void*>(static_cast<F64Fn>(&::fmin)));
  add("__truncsfbf2", reinterpret_cast<void*>(&truncsfbf2));
  add("__truncdfbf2", reinterpret_cast<void*>(&truncdfbf2));
  add("__truncsfhf2", reinterpret_cast<void*>(&truncsfhf2));
  add("__truncdfhf2", reinterpret_cast<void*>(&truncdfhf2));
  add("__extendhfsf2", reinterpret_cast<void*>(&extendhfsf2));
  for (auto& [name, addr] : extra_symbols) add(name, addr);
  if (auto e = jd->define(llvm::orc::absoluteSymbols(std::move(syms))))
    throw std::runtime_error("cannot load kernel object: " + llvm::toString(std::move(e)));
  auto buf = llvm::MemoryBuffer::getMemBufferCopy(object, "tessera_kernel.o");
  if (auto e = j.addObjectFile(*jd, std::move(buf)))
    throw std::runtime_error("cannot load kernel object: " + llvm::toString(std::move(e)));
  auto addr = j.lookup(*jd, symbol);
  if (!addr) throw std::runtime_error("cannot load kernel object: " + llvm::toString(addr.takeError()));
  return addr->toPtr<void*>();
}

}  // namespace tessera
