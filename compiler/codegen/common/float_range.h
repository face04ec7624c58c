// The interval a floating-point LLVM value lies in, where the IR in front of it shows one:
// constants, fabs, minnum/maxnum (and minimum/maximum) with a bounded side, fma, fmul,
// fadd, fsub and fneg of bounded operands. A lowering asks it before choosing a cheaper
// instruction that is exact only on part of the range (the GPU's ex2.approx.ftz: see
// codegen/nvptx/gpu_lowering.cpp).
#pragma once

#include <optional>

namespace llvm {
class Value;
}

namespace tessera::codegen {

struct FloatRange {
  double lo, hi;  // lo <= every non-NaN value <= hi (infinities allowed)
};

// The interval of `v`, or nullopt where the IR does not bound it. NaN is not tracked: a
// bound says that every value that is not NaN lies in it. The interval is computed in
// double from the IR's operations as if exact; callers that compare against a threshold
// keep a margin for the rounding of the real (f32) evaluation.
std::optional<FloatRange> float_range(const llvm::Value* v);

}  // namespace tessera::codegen
