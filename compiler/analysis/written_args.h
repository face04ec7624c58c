// Which pointer arguments of a kernel it may write through (store, atomics): the
// launch refuses read-only arrays passed for them.
#pragma once

#include <vector>

#include "ir/ir.h"

namespace tessera::analysis {

// Indices (into Kernel::args) of the pointer arguments some store or atomic may
// write through, ascending. A store whose pointer comes from memory or an integer
// cast has no known argument and is not attributed to any (the launch then checks
// nothing for it).
std::vector<int> written_pointer_args(const ir::Kernel& k);

}  // namespace tessera::analysis
