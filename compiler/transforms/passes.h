// Target-independent Tile IR passes: one per file, each exposing one function.
#pragma once

#include <string>

#include "ir/ir.h"

namespace tessera::transforms {

void canonicalize(ir::Kernel& k);                     // canonicalize.cpp
void eliminate_common_subexpressions(ir::Kernel& k);  // cse.cpp
void hoist_loop_invariants(ir::Kernel& k);            // licm.cpp
void eliminate_dead_code(ir::Kernel& k);              // dce.cpp
void issue_loads_early(ir::Kernel& k);                // early_loads.cpp

// Runs a pass by its name (tile-opt, tests). Throws CompileError for unknown names.
void run_pass(ir::Kernel& k, const std::string& name);

// The passes compile_tile_ir runs, in order; null-terminated.
extern const char* const kDefaultPipeline[];

}  // namespace tessera::transforms
