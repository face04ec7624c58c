// tile-opt: runs Tile IR passes on a file and prints the result.
#include <fstream>
#include <iostream>
#include <sstream>

#include "tessera/compiler.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tile-opt FILE.tir [--pass NAME]...\n";
    return 2;
  }
  std::ifstream f(argv[1]);
  if (!f) {
    std::cerr << "tile-opt: cannot open " << argv[1] << "\n";
    return 2;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<std::string> passes;
  for (int i = 2; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--pass") passes.push_back(argv[i + 1]);
  try {
    std::cout << tessera::run_passes(ss.str(), passes);
  } catch (const std::exception& e) {
    std::cerr << "tile-opt: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
