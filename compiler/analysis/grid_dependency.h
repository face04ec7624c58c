// How a kernel's programs depend on other programs and grids.
//
// Whether a kernel waits on the previous grid in its stream (gdc_wait): such a
// kernel is launched with programmatic dependent launch (PDL) on sm_90+, and no
// load of its may be issued ahead of that wait.
#pragma once

#include "ir/ir.h"

namespace tessera::analysis {

// True when `b` or a region nested in it holds a gdc_wait.
bool waits_on_prior_grid(const ir::Block& b);

// The cluster size a kernel's cluster_reduce_scatter ops name (the verifier makes them
// agree), or 0 when it has none: such a kernel is launched in clusters of that many
// programs along grid axis 0, which its grid's x extent must be a multiple of.
int cluster_size(const ir::Block& b);

}  // namespace tessera::analysis
