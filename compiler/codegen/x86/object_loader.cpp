// Links CPU kernel objects into the process with LLVM ORC (JITLink): one
// JITDylib per object, so every kernel may export the same entry symbol name.
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>

#include <cmath>
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
