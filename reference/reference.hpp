// The float64 Eigen reference (gold) and the low-precision emulation (lp) of
// DESIGN.md section 2, with exactly the semantics of section 1.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/problem.hpp"
#include "harness/tensors.hpp"

namespace attnbench::reference {

/// Which (batch, kv-head) slices to compute. A slice (b, g) covers kv head g and
/// all its query heads g * (Hq/Hkv) .. (g+1) * (Hq/Hkv) - 1, so dK and dV of the
/// slice are exact. Outputs of unselected slices are left NaN.
struct SliceSet {
  bool all = true;
  std::vector<uint8_t> selected;  ///< [B * Hkv] when !all
  bool contains(int64_t b, int64_t g, int64_t heads_kv) const {
    return all || selected[static_cast<size_t>(b * heads_kv + g)] != 0;
  }
  /// Every slice.
  static SliceSet every() { return {}; }
};

/// Gold forward (and backward if `grads`), float64, inputs used as given.
/// O = 0 and LSE = -inf on fully masked rows; gradients of those rows are 0.
/// dBias is computed only when every slice is selected (it sums over all b, h);
/// otherwise it is left empty. Parallel over (b, kv head) on all cores; memory
/// O(threads * Sq_block * Sk). Work proportional to allowed pairs: tiles the mask
/// excludes are skipped.
AttentionOutputs gold(const Problem& p, const ProblemData& in, bool grads,
                      const SliceSet& slices = SliceSet::every());

/// The lp emulation: the same maths in the problem dtype "the plain way": float32
/// accumulation, rounding to the dtype after S, P and O (and after each backward
/// product: dP, dS, dQ, dK, dV). LSE in float32. Same slice semantics as gold().
AttentionOutputs lp(const Problem& p, const ProblemData& in, bool grads,
                    const SliceSet& slices = SliceSet::every());

/// Estimated reference cost in floating-point operations (forward + backward when
/// `grads`), from the exact allowed-pair count: used to pick --check full/sample.
double estimated_flops(const Problem& p, bool grads);

}  // namespace attnbench::reference
