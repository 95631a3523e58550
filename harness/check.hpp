// The correctness rule of DESIGN.md section 2 (NORMATIVE).
//
// For each tensor X in {O, LSE, dQ, dK, dV, dBias}: e(X) = max |X - gold|.
// Pass iff e(X_backend) <= r * e(X_lp) + ulp(X_gold), r = 2 for O and LSE and
// r = 3 for gradients (FlashAttention's test rule, tests/test_flash_attn.py),
// ulp = one unit in the last place of the dtype at max |X_gold|. The NaN/Inf
// pattern must equal gold's; fully masked rows must be exactly 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/backend.hpp"
#include "harness/problem.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"

namespace attnbench {

/// How much of a case is checked: everything, a deterministic subset of
/// (batch, kv-head) slices, nothing, or chosen from the estimated reference cost.
enum class CheckMode { automatic, full, sample, off };
CheckMode parse_check_mode(const std::string& s);  ///< throws InputError
const char* to_string(CheckMode m);

/// Verdict for one tensor.
struct TensorCheck {
  std::string name;            ///< "O", "LSE", "dQ", "dK", "dV", "dBias"
  double max_abs_err = 0;      ///< e(X_backend)
  double mean_abs_err = 0;
  double rel_l2_err = 0;       ///< ||X - gold|| / ||gold||
  double lp_max_abs_err = 0;   ///< e(X_lp)
  double ulp = 0;              ///< ulp of the dtype at max |gold|
  double r = 0;                ///< rule constant used
  double tolerance = 0;        ///< r * e_lp + ulp
  double ratio = 0;            ///< e / max(e_lp, ulp): comparable across tensors
  int64_t nan_mismatch = 0;    ///< elements whose NaN/Inf pattern differs from gold
  int64_t unwritten = 0;       ///< NaN where gold is finite (poisoned, never written)
  int64_t masked_nonzero = 0;  ///< nonzero values on fully masked rows
  int64_t checked = 0;         ///< elements compared
  bool pass = false;
};

/// Verdict for one case on one backend.
struct CheckResult {
  bool pass = false;
  std::string mode;     ///< "full", "sample", "off"
  std::string scope;    ///< what was checked, e.g. "all 16 (b, kv-head) slices" or "4 of 64 slices: ..."
  std::vector<TensorCheck> tensors;
  double worst_ratio = 0;
  std::string rule;     ///< the constants and any override reason
  nlohmann::json to_json() const;
};

/// Deterministic subset of (b, kv-head) slices for sample mode: at most `max_slices`
/// (always including the first and last slice), chosen by a seeded hash.
reference::SliceSet sample_slices(const Problem& p, int64_t max_slices, uint64_t seed);

/// Apply the rule to a backend's outputs. `gold` and `lp` come from
/// reference::gold / reference::lp over `slices`; only those slices are compared.
/// Gradients are checked when `got.has_grads()`. dBias is checked only when all
/// slices were computed.
CheckResult check_outputs(const Problem& p, const AttentionOutputs& got,
                          const AttentionOutputs& gold, const AttentionOutputs& lp,
                          const RuleConstants& rule, const reference::SliceSet& slices);

/// One unit in the last place of dtype `t` at magnitude |x| (float32 for LSE/dBias).
double ulp_of(DType t, double x);

/// True when two output sets are bitwise identical (determinism check).
bool bitwise_equal(const AttentionOutputs& a, const AttentionOutputs& b);

}  // namespace attnbench
