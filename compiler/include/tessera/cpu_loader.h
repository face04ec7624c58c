// Loads CPU object code produced by the compiler into this process.
#pragma once

#include <map>
#include <string>

namespace tessera {

// Links the relocatable object `object` in memory and returns the address of
// `symbol`. `extra_symbols` resolve the object's references to runtime helpers;
// the C library's memcpy/memset/memmove resolve automatically. The code stays
// loaded until the process exits. Throws std::runtime_error on failure.
void* load_cpu_object(const std::string& object, const std::string& symbol,
                      const std::map<std::string, void*>& extra_symbols);

}  // namespace tessera
