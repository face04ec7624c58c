// Blocked layouts: which GPU thread owns which elements of a tile, as a map from
// the bits of an element's index to register bits and thread-id bits.
//
// Tile shapes are powers of two, so an element's index along each dim is a bit
// string. A layout says, for every index bit, whether it comes from the register
// number r (0 .. regs-1, the element's slot in the owning thread) or from a bit of
// the thread id. Thread-id bits that no index bit uses replicate the tile: those
// threads hold the same elements. Worked example, tile<1024xf32>, 4 warps, vec 4:
//   index bits 0-1 <- register bits 0-1   (4 contiguous elements: one ld.v4)
//   index bits 2-8 <- thread bits 0-6     (128 threads, fastest after the vector)
//   index bit  9   <- register bit 2      (the pattern repeats once)
// so thread t owns elements 4t..4t+3 (registers 0-3) and 512+4t..512+4t+3 (4-7).
// Reduction results slice a dim off (its register bits vanish, its thread bits
// become replication), so a row maximum lands in exactly the threads that own the
// row: broadcasting it back needs no data movement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera::codegen::nvptx {

// One bit of an element index, as seen by one thread: a constant, or a bit of
// the thread id (tid.x).
struct IndexBit {
  enum Kind : uint8_t { Zero, One, Thread };
  Kind kind = Zero;
  int thread_bit = 0;  // Thread only
  bool operator==(const IndexBit& o) const { return kind == o.kind && (kind != Thread || thread_bit == o.thread_bit); }
};

// An element's index as a function of the thread id: per dim, its bits, least
// significant first. Dims of size 1 have no bits.
using SymIndex = std::vector<std::vector<IndexBit>>;
std::string sym_index_key(const SymIndex& s);
// The row-major flat index's bits (minor dim lowest).
std::vector<IndexBit> flat_bits(const SymIndex& s);
// Splits flat bits back into dims of `shape`.
SymIndex split_flat_bits(const std::vector<IndexBit>& flat, const std::vector<int64_t>& shape);

int log2_exact(int64_t v);

struct BlockedLayout {
  struct Src {
    bool reg = true;  // register bit, else thread-id bit
    int bit = 0;
    bool operator==(const Src& o) const { return reg == o.reg && bit == o.bit; }
  };
  std::vector<int64_t> shape;
  std::vector<std::vector<Src>> bits;  // per dim, per index bit (lsb first)
  int reg_bits = 0;                    // registers per thread = 1 << reg_bits
  uint32_t thread_mask = 0;            // thread-id bits some index bit uses

  int num_regs() const { return 1 << reg_bits; }
  // The index of the element this thread holds in register `reg`.
  SymIndex index_of(int reg) const;
  // The register holding element `s` in every thread that evaluates s, if this
  // layout puts it there (same thread bits, constant register bits).
  std::optional<int> find(const SymIndex& s) const;
  // Registers 0..n-1 hold consecutive elements along the minor dim: the largest
  // such n (a power of two); runs of n registers starting at multiples of n.
  int contiguous_regs() const;
  // This layout with dim `axis` removed (what a reduction along axis leaves).
  BlockedLayout slice(int axis) const;
  // This layout with dim `dim` shrunk to size 1: the layout of a broadcast's
  // operand that puts each element in every thread that uses it.
  BlockedLayout collapse(int dim) const;
  bool operator==(const BlockedLayout& o) const { return shape == o.shape && bits == o.bits && reg_bits == o.reg_bits; }
  std::string str() const;
};

// The default layout: `vec` contiguous elements per thread along the minor dim,
// threads next (lanes, then warps), then repeats. Tiles smaller than one
// `num_threads * vec` block leave the high thread bits unused (replicated).
// vec must divide the minor dim and numel.
BlockedLayout make_blocked_layout(const std::vector<int64_t>& shape, int vec, int num_threads);

}  // namespace tessera::codegen::nvptx
