// Axis analysis: per-dimension contiguity, divisibility and constancy of integer
// and pointer values — the fact that makes loads and stores wide on both targets.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/ir.h"

namespace tessera::analysis {

// For a tile value and each dimension d:
//  contiguity[d]  = the largest power of two c such that along d the values form
//                   runs of c consecutive integers (pointers: elements) starting at
//                   indices that are multiples of c;
//  divisibility[d]= the largest power of two dividing the first value of each run
//                   (for pointers: in bytes);
//  constancy[d]   = the largest power of two k such that runs of k values along d
//                   are equal.
// Scalars use dimension 0 only (contiguity = constancy = 1). Like Triton's, the facts
// assume integer arithmetic does not wrap (offsets stay inside their type); casts,
// which wrap by definition, are modelled exactly. A contiguity that shrinks shrinks
// the divisibility with it: the new run starts lie inside the old runs.
struct AxisInfo {
  std::vector<int64_t> contiguity, divisibility, constancy;
  std::optional<int64_t> constant;  // every element equals this integer
  bool nonnegative = false;         // every element is >= 0 (what keeps `(pid * B + arange(B)) % N` contiguous)
  std::string str() const;
};

class AxisAnalysis {
 public:
  explicit AxisAnalysis(const ir::Kernel& k);
  const AxisInfo& get(const ir::Value* v) const;

 private:
  void visit_block(const ir::Block& b);
  void visit_op(const ir::Op& op);
  void transfer(const ir::Op& op);  // the op's rule, before the type-wide facts
  std::unordered_map<const ir::Value*, AxisInfo> info_;
  AxisInfo unknown_;
};

}  // namespace tessera::analysis
