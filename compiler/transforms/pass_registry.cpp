// Maps pass names to pass functions, and lists the default pipeline.
#include <map>
#include <functional>

#include "tessera/compiler.h"
#include "transforms/passes.h"

namespace tessera::transforms {

namespace {
const std::map<std::string, std::function<void(ir::Kernel&)>>& registry() {
  static const std::map<std::string, std::function<void(ir::Kernel&)>> r = {
      {"dce", eliminate_dead_code},
  };
  return r;
}
}  // namespace

const char* const kDefaultPipeline[] = {"dce", nullptr};

void run_pass(ir::Kernel& k, const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) throw CompileError("unknown pass '" + name + "'", true);
  it->second(k);
}

}  // namespace tessera::transforms
