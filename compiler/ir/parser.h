// Parses the textual Tile IR of docs/tile_ir.md.
#pragma once

#include <memory>
#include <string>

#include "ir/ir.h"

namespace tessera::ir {

// Throws tessera::CompileError (user_error = false: IR comes from the frontend,
// so malformed IR is a Tessera bug) naming the IR line:col and what is wrong.
std::unique_ptr<Kernel> parse_kernel(const std::string& text);

}  // namespace tessera::ir
