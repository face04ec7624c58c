// Finds gdc_wait ops (see grid_dependency.h): the pipeline marks kernels holding one
// for a PDL launch, and the NVPTX loop rings keep their loads behind one. Finds the
// cluster size of cluster_reduce_scatter ops: the pipeline records it for the launch.
#include "analysis/grid_dependency.h"

namespace tessera::analysis {

using namespace ir;

bool waits_on_prior_grid(const Block& b) { return holds_op(b, OpKind::GdcWait); }

int cluster_size(const Block& b) {
  for (auto& op : b.ops) {
    if (op->kind == OpKind::ClusterReduceScatter) return static_cast<int>(op->int_attr("cluster", 0));
    for (auto& r : op->regions)
      if (int c = cluster_size(*r->block)) return c;
  }
  return 0;
}

}  // namespace tessera::analysis
