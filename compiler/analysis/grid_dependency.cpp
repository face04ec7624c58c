// Finds gdc_wait ops (see grid_dependency.h): the pipeline marks kernels holding one
// for a PDL launch, and the NVPTX loop rings keep their loads behind one.
#include "analysis/grid_dependency.h"

namespace tessera::analysis {

using namespace ir;

bool waits_on_prior_grid(const Block& b) { return holds_op(b, OpKind::GdcWait); }

}  // namespace tessera::analysis
