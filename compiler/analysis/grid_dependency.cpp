// Finds gdc_wait ops (see grid_dependency.h): the pipeline marks kernels holding one
// for a PDL launch, and the NVPTX loop rings keep their loads behind one.
#include "analysis/grid_dependency.h"

namespace tessera::analysis {

using namespace ir;

bool waits_on_prior_grid(const Block& b) {
  for (auto& op : b.ops) {
    if (op->kind == OpKind::GdcWait) return true;
    for (auto& r : op->regions)
      if (waits_on_prior_grid(*r->block)) return true;
  }
  return false;
}

}  // namespace tessera::analysis
