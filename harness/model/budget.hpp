// The total-size budget of a problem: overflow-safe size arithmetic and the limits
// every problem (and every expanded case of a scenario) is checked against before
// anything is allocated or counted (docs/semantics.md section 10).
//
// All sizes are computed with checked_mul / checked_add (the compiler's
// __builtin_*_overflow), so a value near INT64_MAX can never wrap into a small,
// plausible size: an overflow is itself a budget violation.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "harness/model/errors.hpp"

namespace attnbench {

struct Problem;

/// a * b, or std::nullopt when the exact product does not fit in int64.
std::optional<int64_t> checked_mul(int64_t a, int64_t b);
/// a + b, or std::nullopt when the exact sum does not fit in int64.
std::optional<int64_t> checked_add(int64_t a, int64_t b);
/// The product of `factors`, or std::nullopt on overflow at any step.
std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors);

/// The limits of the budget. They exclude what no machine attnbench targets can
/// hold (a current GPU has at most 192 GiB; a host that runs the float64 reference
/// rarely more than 2 TiB), not what is merely slow.
struct BudgetLimits {
  /// Elements of any one logical tensor (Q, K, V, O, dO, LSE, bias, doc ids): 2^34.
  int64_t max_tensor_elements = INT64_C(1) << 34;
  /// (i, j) pairs B * Hq * Sq * Sk, masked or not: 2^50 (~1e15).
  int64_t max_pairs = INT64_C(1) << 50;
  /// Documents of a document mask, all rows together: 2^24.
  int64_t max_documents = INT64_C(1) << 24;
  /// Host bytes the harness would hold (float64 inputs, a backend's outputs, the
  /// gold and lp reference outputs): 2^41 = 2 TiB.
  int64_t max_host_bytes = INT64_C(1) << 41;
  /// Device bytes a backend would need (inputs, outputs and gradients in the
  /// dtype, LSE and the float32 dQ accumulator): 2^38 = 256 GiB.
  int64_t max_device_bytes = INT64_C(1) << 38;
};
/// The limits every problem is checked against.
const BudgetLimits& budget_limits();

/// A problem (or expanded case) larger than the budget allows. An InputError
/// (exit code 2) naming file, JSON pointer and value; in a scenario matrix such a
/// case becomes an `error` row and the sweep goes on (scenario.hpp, Case::invalid).
class BudgetError : public InputError {
 public:
  using InputError::InputError;
};

/// Sizes of a problem, each std::nullopt when it does not fit in int64.
struct ProblemSizes {
  std::optional<int64_t> q, k, v, o, lse, bias, pairs, host_bytes, device_bytes;
};
/// Compute the sizes of `p` with checked arithmetic (sizes must be >= 1; callers
/// validate that first). host_bytes = 8 * (Q + K + V + dO + bias) inputs plus 3 *
/// 8 * (O + LSE + dQ + dK + dV + dBias) outputs (a backend's, gold's and lp's);
/// device_bytes = dtype bytes * (Q + K + V + O + dO + dQ + dK + dV) + 4 * (2 LSE +
/// dQ accumulator) + 4 * (bias + dBias).
ProblemSizes problem_sizes(const Problem& p);

/// Check `p` against budget_limits(): every tensor's elements, the (i, j) pairs,
/// the documents of a document mask (doc_lengths, or the ids' rows), the host and
/// device bytes. Assumes the sizes are >= 1 (validate() checks that first).
/// Throws BudgetError naming `file`, the JSON pointer of the offending field under
/// `path` and the value (e.g. "/seq_q: Q would hold 2^46 elements ...").
void check_budget(const Problem& p, const std::string& file = "", const std::string& path = "");

/// Sum of document lengths with overflow detection: the sum, or std::nullopt when
/// it does not fit in int64 (negative lengths are the caller's to reject).
std::optional<int64_t> checked_sum(const std::vector<int64_t>& values);

}  // namespace attnbench
