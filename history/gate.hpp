// The regression gate against history behind `attnbench compare --history DB
// NEW.json` (docs/history.md).
//
// For every (case, backend, variant, pass) of NEW, on NEW's machine (machine_of()),
// the medians of that pass in the last `window` accepted runs of the database
// (status pass or unchecked, the run itself excluded) form the history. With at
// least `min_runs` of them, the new median m is judged against their median c and
// median absolute deviation MAD (robust to outlying runs):
//   threshold = max(k * 1.4826 * MAD, min_rel * c)
//   SLOWER  m > c + threshold   (a regression)
//   FASTER  m < c - threshold
//   SAME    otherwise
// 1.4826 * MAD estimates the standard deviation of normal data; k = 3.5 is the
// modified z-score cut-off of Iglewicz and Hoaglin ("How to Detect and Handle
// Outliers", 1993), whose modified z = 0.6745 (m - c) / MAD is reported. min_rel
// is compare's --max-slowdown (default 5%), so a series with almost no noise does
// not gate on tiny changes.
// Besides, NEW is compared with `compare`'s two-report test against, per row, the
// latest accepted run holding that row (same machine): status changes,
// determinism and NaN/Inf guards gate exactly as in `compare`; its timing verdict
// decides only where the history is shorter than `min_runs` (NO_HISTORY).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "history/store.hpp"
#include "reports/compare.hpp"

namespace attnbench::history {

/// Options of the history gate.
struct HistoryGateOptions {
  CompareOptions compare;  ///< the two-report test; compare.max_slowdown is also min_rel
  int window = 10;         ///< last N accepted runs
  int min_runs = 3;        ///< fewer: NO_HISTORY, the two-report verdict decides
  double k = 3.5;          ///< threshold in robust standard deviations (1.4826 MAD)
};

/// Median and median absolute deviation of `x` (non-empty; even sizes take the
/// mean of the two middle values).
struct RobustStats {
  double median = 0, mad = 0;
  int64_t n = 0;
};
/// Throws std::invalid_argument for an empty `x`.
RobustStats robust_stats(std::vector<double> x);

/// Verdict against history.
enum class HistoryVerdict { same, faster, slower, no_history };
/// "SAME", "FASTER", "SLOWER", "NO_HISTORY".
const char* to_string(HistoryVerdict v);

/// One judged (case, backend, variant, pass).
struct HistoryTiming {
  std::string case_id, backend, variant, pass;
  HistoryVerdict verdict = HistoryVerdict::no_history;
  int64_t history_runs = 0;
  double center_ms = 0, mad_ms = 0, threshold_ms = 0;  ///< c, MAD, threshold (0 without history)
  double new_median_ms = 0;
  double ratio = 1;     ///< m / c (1 without history)
  double modified_z = 0;  ///< 0.6745 (m - c) / MAD; 0 when MAD is 0
  bool regression = false;
};

/// snprintf of one number with `format` (e.g. "%.4g"), for tables and markdown.
std::string fmt(const char* format, double v);

/// Judge `new_median` against `history` medians (the rule above); `history` may be
/// shorter than options.min_runs (then NO_HISTORY).
HistoryTiming judge_against(const std::vector<double>& history, double new_median, const HistoryGateOptions& options);

/// The whole gate.
struct HistoryGate {
  std::string database, new_file, machine_label;
  HistoryGateOptions options;
  std::vector<HistoryTiming> timings;
  Comparison two_report;  ///< against the latest accepted rows; timings decided by history do not gate here
  int64_t rows_with_history = 0;  ///< rows of NEW with a stored accepted row on this machine

  /// Timings with verdict `v`.
  int64_t count(HistoryVerdict v) const;
  /// SLOWER history verdicts plus the two-report comparison's regressions.
  int64_t regressions() const;
  /// 0 nothing regressed, 1 otherwise (as `compare`).
  int exit_code() const { return regressions() > 0 ? 1 : 0; }
  /// Markdown for CI logs: verdict, rule, counts, history regressions first, then
  /// the two-report comparison.
  std::string markdown() const;
  nlohmann::json to_json() const;
};

/// Judge loaded report `neu` (load_report()) read from `new_file` against `store`.
/// Throws InputError as compare_reports() does (options out of range, duplicate rows)
/// and for window < 1 or min_runs < 1.
HistoryGate compare_with_history(HistoryStore& store, const nlohmann::json& neu, const std::string& new_file,
                                 const HistoryGateOptions& options);

}  // namespace attnbench::history
