// Maps pass names to pass functions, and lists the default pipeline.
#include <functional>
#include <map>

#include "tessera/compiler.h"
#include "transforms/passes.h"

namespace tessera::transforms {

namespace {
const std::map<std::string, std::function<void(ir::Kernel&)>>& registry() {
  static const std::map<std::string, std::function<void(ir::Kernel&)>> r = {
      {"canonicalize", canonicalize},
      {"cse", eliminate_common_subexpressions},
      {"licm", hoist_loop_invariants},
      {"dce", eliminate_dead_code},
      {"early-loads", issue_loads_early},
  };
  return r;
}
}  // namespace

// Fold first so that cse compares canonical ops; licm then moves what is left;
// the second canonicalize catches identities cse exposed (select(c, x, y) with x
// and y merged into one value); dce sweeps every op the others orphaned; early-loads
// runs last, on the final op order.
const char* const kDefaultPipeline[] = {"canonicalize", "licm", "cse", "canonicalize", "dce", "early-loads", nullptr};

void run_pass(ir::Kernel& k, const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (auto& [n, f] : registry()) known += (known.empty() ? "" : ", ") + n;
    throw CompileError("unknown pass '" + name + "' (known passes: " + known + ")", true);
  }
  it->second(k);
}

}  // namespace tessera::transforms
