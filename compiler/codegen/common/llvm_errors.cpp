// LLVM reports fatal errors through a handler that must not return; throwing a
// CompileError turns them into a Python exception (InternalCompilerError).
#include "codegen/common/llvm_errors.h"

#include <llvm/Support/ErrorHandling.h>

#include <mutex>
#include <string>

#include "tessera/compiler.h"

namespace tessera::codegen {

namespace {
void throw_on_llvm_fatal_error(void*, const char* reason, bool) {
  throw CompileError(std::string("LLVM fatal error: ") + reason + " (this is a Tessera bug)", false);
}
}  // namespace

void install_llvm_error_handler() {
  static std::once_flag once;
  std::call_once(once, [] { llvm::install_fatal_error_handler(throw_on_llvm_fatal_error, nullptr); });
}

}  // namespace tessera::codegen
