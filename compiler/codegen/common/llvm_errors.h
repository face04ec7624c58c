// Turns LLVM fatal errors into tessera::CompileError instead of an abort.
#pragma once

namespace tessera::codegen {

// Installs the handler once per process; every back end calls it before using LLVM.
void install_llvm_error_handler();

}  // namespace tessera::codegen
