// Trends of the results history: `attnbench history show` (a table of one
// figure over revisions) and `attnbench history report` (one self-contained
// page, a Vega-Lite chart per case and backend drawn by the HTML report's
// charting, reports/html_report.hpp), regressions marked with the gate's rule
// (history/gate.hpp) applied to each point against the accepted points before it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "history/gate.hpp"
#include "history/store.hpp"

namespace attnbench::history {

/// Which series to read.
struct SeriesFilter {
  std::string case_regex;     ///< ECMAScript regex searched in case_id ("" = all)
  std::string backend;        ///< exact backend name ("" = all)
  std::string machine_regex;  ///< regex searched in the machine label ("" = all)
  std::string pass;           ///< fwd, bwd, fwd_bwd ("" = all)
  std::string figure = "median_ms";  ///< a figures name: median_ms, q1_ms, ..., useful_tflops, x_floor, ...
};

/// One run's value of a series.
struct TrendPoint {
  int64_t run_id = 0;
  std::string git_revision, started, status;
  bool accepted = true;
  double value = 0;
  HistoryVerdict verdict = HistoryVerdict::no_history;  ///< against the accepted points before it
};

/// One (case, backend, variant, machine, pass) over runs, oldest first.
struct TrendSeries {
  std::string case_id, case_key, backend, variant, machine, machine_label, pass;
  std::vector<TrendPoint> points;
  /// Points judged SLOWER (for rates: smaller than the threshold allows).
  int64_t regressions() const;
};

/// Whether a larger value of `figure` is worse: times (names ending in "_ms",
/// "x_floor") are; rates (TFLOP/s, GB/s, % of a ceiling) are not.
bool larger_is_worse(const std::string& figure);

/// Read the series matching `filter`, ordered by case, backend, variant, machine,
/// pass; points oldest (started, then run id) first, each judged with
/// judge_against() on the last options.window accepted points before it (the
/// sign flipped for figures where larger is better). Throws InputError for a
/// bad regex.
std::vector<TrendSeries> load_series(HistoryStore& store, const SeriesFilter& filter,
                                      const HistoryGateOptions& options);

/// The `history show` table: one line per series, one column per revision (the
/// last `last_revisions` revisions, by their first run); a cell is the median of
/// that revision's values, marked "!" when a point of it is a regression
/// (SLOWER) and "+" when FASTER.
std::string trend_table(const std::vector<TrendSeries>& series, const std::string& figure, int last_revisions);

/// The series as JSON (`history show --json`): [{case_id, backend, variant,
/// machine, pass, points: [{run_id, git_revision, started, value, verdict}]}].
nlohmann::json series_json(const std::vector<TrendSeries>& series);

/// The `history report` page: a chart per (case, backend) with a line per
/// (variant, machine, pass) and regressions marked by black triangles, then a table of the
/// regressions. `node_modules` as HtmlOptions::node_modules; `inline_charts`
/// false gives the tables alone.
std::string render_trend_page(const std::vector<TrendSeries>& series, const std::string& figure,
                              const std::string& title, const std::string& database, bool inline_charts,
                              const std::string& node_modules = "");

}  // namespace attnbench::history
