// Prints Tile IR in the textual form of docs/tile_ir.md.
#pragma once

#include <string>

#include "ir/ir.h"

namespace tessera::ir {

std::string print_kernel(const Kernel& k);
std::string print_attr(const Attr& a);

}  // namespace tessera::ir
