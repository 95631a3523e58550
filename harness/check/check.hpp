// The correctness rule of docs/semantics.md section 7 (NORMATIVE).
//
// For each tensor X in {O, LSE, dQ, dK, dV, dBias}: e(X) = max |X - gold|.
// Pass iff e(X_backend) <= r * e(X_lp) + ulp(X_gold), r = 2 for O and LSE and
// r = 3 for gradients (FlashAttention's test rule, tests/test_flash_attn.py),
// ulp = one unit in the last place of the dtype at max(max |X_gold|, 2^-6) (float32
// for LSE and dBias, which are float32 in every backend; the 2^-6 floor is
// kUlpFloorMagnitude below). The NaN/Inf pattern must equal
// gold's (LSE = -inf on fully masked rows); fully masked rows must be exactly 0 in O
// and dQ; an element left NaN (outputs are poisoned before every run) where gold is
// finite fails as unwritten.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/backend/backend.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"
#include "reference/reference.hpp"

namespace attnbench {

/// How much of a case is checked: everything, a deterministic subset of
/// (batch, kv-head) slices, nothing, or chosen from the estimated reference cost.
enum class CheckMode { automatic, full, sample, off };
/// "auto" (or "automatic"), "full", "sample", "off". Throws InputError (no file,
/// path "--check") naming the value and the accepted ones.
CheckMode parse_check_mode(const std::string& s);
/// "auto", "full", "sample", "off".
const char* to_string(CheckMode m);

/// Automatic mode checks the whole case when reference::estimated_flops(p, grads)
/// (useful forward+backward FLOPs, docs/semantics.md section 8 convention) is below this:
/// 2 GFLOP, i.e. gold (float64, ~9/7 of that executed) plus lp (float32) in about
/// a second on a few cores. Above it, automatic means sample.
constexpr double kAutoFullMaxFlops = 2e9;
/// Slices checked in sample mode: first, last and 2 hashed others.
constexpr int64_t kSampleSlices = 4;

/// Smallest magnitude at which the rule's ulp term is taken: ulp(max(max |gold|,
/// 2^-6)). Where gold is identically 0 (dQ and dK of rows that attend a single key,
/// where dP - D cancels exactly in float64 and in lp's identical dot products) a
/// kernel's float32 reduction order leaves ~1e-6, and ulp(0) would demand exact
/// zeros. FlashAttention's tests take their absolute floor at 0.3 (the rounding of
/// x + 0.3 - 0.3); 2^-6 is about 20x stricter.
constexpr double kUlpFloorMagnitude = 1.0 / 64.0;

/// Verdict for one tensor. Errors are taken over the compared elements where both
/// gold and the backend are finite; the pattern counters cover the others.
struct TensorCheck {
  std::string name;            ///< "O", "LSE", "dQ", "dK", "dV", "dBias"
  double max_abs_err = 0;      ///< e(X_backend) = max |X - gold|
  double mean_abs_err = 0;     ///< mean |X - gold|
  double rel_l2_err = 0;       ///< ||X - gold|| / ||gold|| (||X - gold|| when gold is all 0)
  double lp_max_abs_err = 0;   ///< e(X_lp) = max |X_lp - gold|
  double ulp = 0;              ///< ulp of the dtype at max(max |gold|, 2^-6) (float32 for LSE, dBias)
  double r = 0;                ///< rule constant used
  double tolerance = 0;        ///< r * e_lp + ulp
  double ratio = 0;            ///< e / max(e_lp, ulp): comparable across tensors
  int64_t nan_mismatch = 0;    ///< elements whose NaN/+inf/-inf/finite class differs from gold (unwritten excluded)
  int64_t unwritten = 0;       ///< NaN where gold is finite (poisoned, never written)
  int64_t masked_nonzero = 0;  ///< elements of fully masked rows (O, dQ) that are not exactly 0
  int64_t checked = 0;         ///< elements compared
  bool pass = false;           ///< e <= tolerance and all three counters 0
  // Fully masked query rows (gold LSE -inf) apart from the rest, so that a
  // convention difference there is told from wrong numbers (classify_failure).
  int64_t masked_checked = 0;        ///< elements compared on fully masked rows (LSE: rows)
  int64_t masked_rows_mismatch = 0;  ///< of those, elements not 0 (O, dQ) / not -inf (LSE)
  double rest_max_abs_err = 0;       ///< e over the elements of the other rows
  bool rest_pass = false;            ///< the rule over the other rows only (same tolerance)
};

/// Verdict for one case on one backend.
struct CheckResult {
  bool pass = false;
  std::string mode;     ///< "full", "sample", "off"
  std::string scope;    ///< what was checked, e.g. "all 16 (b, kv-head) slices" or "4 of 64 slices: ..."
  std::vector<TensorCheck> tensors;
  double worst_ratio = 0;  ///< max ratio over the tensors
  std::string rule;     ///< the constants and any override reason
  /// Why a failing check failed (classify_failure): "fully_masked_rows" when every
  /// tensor passes on the rows that attend keys and only fully masked rows break
  /// the convention (O/dQ != 0, LSE not -inf): numerics fine, convention differs;
  /// "numerics" otherwise (wrong numbers). "" when the check passed.
  std::string failure_class;
  std::string failure_detail;   ///< one line: the counts, per tensor
  int64_t fully_masked_rows = 0;  ///< fully masked query rows checked (gold LSE -inf)
  /// {"pass", "mode", "scope", "rule", "worst_ratio", "tensors": [{"name",
  /// "pass", "max_abs_err", "mean_abs_err", "rel_l2_err", "lp_max_abs_err", "ulp",
  /// "r", "tolerance", "ratio", "checked", "nan_mismatch", "unwritten",
  /// "masked_nonzero", "masked_checked", "masked_rows_mismatch", "rest_max_abs_err",
  /// "rest_pass"}], "fully_masked_rows", and for a failing check "failure_class" and
  /// "failure_detail"}; non-finite numbers are written as strings ("inf", "nan").
  nlohmann::json to_json() const;
};

/// Deterministic subset of (b, kv-head) slices for sample mode: at most `max_slices`
/// (at least 2; always including the first slice (0, 0) and the last (B-1, Hkv-1)),
/// the others being those with the smallest splitmix64(seed, index) hash. Returns
/// SliceSet::every() when max_slices >= B * Hkv.
reference::SliceSet sample_slices(const Problem& p, int64_t max_slices, uint64_t seed);

/// The reference outputs `full` (logical tensors [B, H, ...], H = Hq for o, lse, dq
/// and Hkv for dk, dv, as reference::gold / lp return them) kept for the selected
/// slices only, the form check_outputs reads without touching the rest: each of o,
/// lse, dq, dk, dv becomes [n, H / Hkv, ...] with n = slices.count(B, Hkv), entry k
/// holding the heads g * H/Hkv .. (g + 1) * H/Hkv - 1 of batch row b for the k-th
/// selected (b, g) in (b, g) order (each one contiguous block of `full`, copied in
/// order: no value changes). dbias and empty tensors (forward only) are kept as
/// they are. With every slice selected the data are moved unchanged, only the shapes
/// become [B * Hkv, H / Hkv, ...] (the same memory order).
/// Throws std::invalid_argument when a tensor is not [B, H, ...] for `p`.
AttentionOutputs slice_outputs(AttentionOutputs full, const Problem& p, const reference::SliceSet& slices);

/// The shape of a tensor of logical shape `full` ([B, H, ...]) after slice_outputs:
/// [slices.count(B, Hkv), H / Hkv, ...]; `full` itself when it is empty.
std::vector<int64_t> sliced_shape(const std::vector<int64_t>& full, const Problem& p,
                                  const reference::SliceSet& slices);

/// Apply the rule (above, with the ulp floor kUlpFloorMagnitude) to a backend's
/// outputs. `gold` and `lp` come from reference::gold / reference::lp over
/// `slices`, either in their logical shapes or both sliced (slice_outputs: only the
/// selected slices held); only those slices are compared, in the same order either
/// way, so the verdict and every figure are bit-identical.
/// Gradients are checked when `got.has_grads()` (gold and lp must have them then).
/// dBias is checked only when all slices were computed and the problem has a
/// learnable bias; a missing dBias then fails as unwritten. Sets mode ("full" or
/// "sample" from `slices`), scope (describe_scope) and rule ("r_fwd=2 r_bwd=3
/// (docs/semantics.md section 7 default)" or the override with its reason).
/// Throws std::invalid_argument when a tensor's shape differs from gold's (for
/// sliced gold: from sliced_shape of the backend's), or gold and lp differ in form.
CheckResult check_outputs(const Problem& p, const AttentionOutputs& got,
                          const AttentionOutputs& gold, const AttentionOutputs& lp,
                          const RuleConstants& rule, const reference::SliceSet& slices);

/// Set res.failure_class / failure_detail / fully_masked_rows from res.tensors
/// (called by check_outputs): nothing when res.pass; "fully_masked_rows" when
/// every tensor's rest_pass holds and some masked_rows_mismatch is > 0; else
/// "numerics". The status of the row stays `fail` either way.
void classify_failure(CheckResult& res);

/// One unit in the last place of dtype `t` at magnitude |x| (float32 for LSE/dBias):
/// 2^(max(floor(log2 |x|), emin) - mantissa bits), with (mantissa bits, emin) =
/// (23, -126) fp32, (10, -14) fp16, (7, -126) bf16; at x = 0 the smallest subnormal
/// spacing; +inf for non-finite x.
double ulp_of(DType t, double x);

/// Non-finite elements of each output tensor, what a row records when its outputs
/// are not checked (--check off), so that `compare` can still see NaN/Inf appear:
/// {"O": n, "LSE": n, "dQ": n, "dK": n, "dV": n, "dBias": n} (tensors that are
/// empty are left out). NaN and +-inf count, except LSE -inf (the fully masked
/// row convention).
nlohmann::json count_nonfinite(const AttentionOutputs& out);

/// True when two output sets are bitwise identical (determinism check): same
/// shapes and the same bytes in every tensor (NaNs compare by bit pattern).
bool bitwise_equal(const AttentionOutputs& a, const AttentionOutputs& b);

/// What a check covers, decided before running the reference.
struct CheckPlan {
  CheckMode mode = CheckMode::full;  ///< full, sample or off (never automatic)
  reference::SliceSet slices;        ///< slices to compute and compare
  double estimated_flops = 0;        ///< reference::estimated_flops(p, grads)
  std::string description;           ///< exactly what is checked and why, for reports
};

/// Resolve `requested` for problem p: automatic -> full when estimated_flops <
/// kAutoFullMaxFlops, else sample; sample -> sample_slices(p, max_slices, p.seed)
/// (reported as full when that covers every slice); off -> nothing. The
/// description names the mode, the tensors and the slices, e.g.
/// "sample (auto: 5.1 GFLOP >= 2 GFLOP): O, LSE, dQ, dK, dV on 4 of 64 (b, kv-head)
/// slices (0,0) (1,3) (5,2) (7,7); dBias not checked (needs every slice)".
CheckPlan plan_check(const Problem& p, CheckMode requested, bool grads,
                     int64_t max_slices = kSampleSlices);

/// The scope text of a check over `slices`: tensors compared and slices, e.g.
/// "O, LSE, dQ, dK, dV, dBias on all 16 (b, kv-head) slices".
std::string describe_scope(const Problem& p, const reference::SliceSet& slices, bool grads);

}  // namespace attnbench
