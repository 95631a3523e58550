// The regression gate behind `attnbench compare BASE.json NEW.json`.
//
// For every (case, backend, pass) present in both reports the two runs' timing
// distributions are compared with two independent tests of the noise:
//   1. interval overlap: do the interquartile ranges [q1, q3] of the two runs
//      overlap?
//   2. a two-sided Mann-Whitney U test on the raw samples (normal approximation
//      with tie correction and continuity correction).
// and the ratio of medians r = median_new / median_base against a tolerance t
// (--max-slowdown, default 5%):
//   SAME      1 / (1 + t) <= r <= 1 + t: any change is within the tolerance
//   SLOWER    r > 1 + t and both tests separate the runs        (a regression)
//   FASTER    r < 1 / (1 + t) and both tests separate the runs
//   AMBIGUOUS the medians differ by more than the tolerance but the noise does
//             not let both tests separate the runs (re-run with more samples)
// Without raw samples on either side the U test is skipped and the interval test
// decides alone (noted in the row).
// Correctness: a row's status is derived from its check data, not taken from its
// status string: a "pass" whose check holds a failing tensor (or check.pass
// false) is read as "fail", one whose check checked nothing (no check, no
// tensors, zero elements checked, mode off) as "unchecked". A row that passed in
// BASE and does not pass in NEW (fail, error, oom, timeout, crashed, unsupported)
// is a failure; so is a row that fails the correctness check in NEW and did not
// in BASE (NEW-only rows included). A row
// failing in both is listed as a known failure and does not gate. Rows only in
// one report are listed. An `unchecked` row (--check off; also a "pass" row whose
// check.mode is "off", as older reports wrote it) has unknown correctness: never
// a pass, so pass -> unchecked gates; unchecked rows in NEW are counted and listed.
// Gates by default (each allowed by its option):
//   missing           a BASE row absent from NEW (--allow-missing);
//   unfinished        NEW has no "finished" time or is marked "interrupted"
//                     (--allow-unfinished);
//   new errors        a NEW row crashed / error / timeout / oom where BASE's was
//                     none of these, NEW-only rows included (--allow-new-errors);
//   untimed           a NEW row that ran (pass, unchecked, fail) without any of
//                     the timed passes BASE's row has (--allow-no-timing).
// Guards beyond speed (each gates unless its option allows it):
//   nondeterministic  extra.deterministic true in BASE and false in NEW
//                     (--allow-nondeterminism);
//   nonfinite         NEW's outputs hold NaN/Inf where BASE's held none: the sum
//                     of check.tensors[].nan_mismatch + unwritten, or of
//                     check.nonfinite (unchecked rows) goes from 0 to > 0
//                     (--allow-nonfinite).
// Environments (GPU name, SM count, driver, CUDA runtime) must match unless
// allowed: otherwise compare_reports() throws InputError (exit code 2).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnbench {

/// Result of a two-sided Mann-Whitney U test.
struct MannWhitney {
  double u = 0;       ///< U statistic of the first sample (number of pairs a_i > b_j, ties count 1/2)
  double z = 0;       ///< standardised U (0 when the variance is 0)
  double p = 1;       ///< two-sided p-value from the normal approximation
  bool valid = false; ///< false when either sample is empty
};

/// Mann-Whitney U test of samples `a` and `b`, normal approximation with tie
/// correction (sigma^2 = n1 n2 / 12 * ((n + 1) - sum(t^3 - t) / (n (n - 1))),
/// n = n1 + n2, t = size of each group of ties) and a continuity correction of
/// 0.5, as in SciPy's scipy.stats.mannwhitneyu(method="asymptotic") and
/// Wikipedia's "Mann-Whitney U test" (normal approximation and tie correction).
MannWhitney mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b);

/// Verdict for one (case, backend, pass).
enum class Verdict { same, faster, slower, ambiguous };
/// "SAME", "FASTER", "SLOWER", "AMBIGUOUS".
const char* to_string(Verdict v);

/// Options of the gate.
struct CompareOptions {
  double max_slowdown = 0.05;       ///< tolerance t on the ratio of medians
  double alpha = 0.05;              ///< significance level of the U test (two-sided)
  bool allow_env_mismatch = false;  ///< compare runs of different GPUs / drivers
  bool fail_on_ambiguous = false;   ///< count AMBIGUOUS as a regression
  bool fail_on_missing = false;     ///< kept for old command lines: missing rows gate by default now
  bool allow_missing = false;       ///< do not gate on rows of BASE missing from NEW
  bool allow_unfinished = false;    ///< do not gate on a NEW report that did not finish
  bool allow_new_errors = false;    ///< do not gate on rows that became crashed / error / timeout / oom
  bool allow_no_timing = false;     ///< do not gate on NEW rows without the timings BASE's rows have
  bool allow_nondeterminism = false;  ///< do not gate on deterministic -> nondeterministic
  bool allow_nonfinite = false;       ///< do not gate on outputs gaining NaN/Inf
};

/// One compared timing.
struct PassComparison {
  std::string case_id, backend, pass;  ///< pass: "fwd", "bwd", "fwd_bwd"
  Verdict verdict = Verdict::same;
  double base_median_ms = 0, new_median_ms = 0;
  double ratio = 1;                   ///< new / base medians
  double base_q1_ms = 0, base_q3_ms = 0, new_q1_ms = 0, new_q3_ms = 0;
  int64_t base_n = 0, new_n = 0;
  /// extra.setup_ms of the rows (mask, plan or graph build, paid once per
  /// prepare(), not in the timed passes); NaN when the row has none.
  double base_setup_ms = 0, new_setup_ms = 0;
  bool intervals_overlap = true;
  MannWhitney test;
  bool regression = false;            ///< counts against the gate
  std::string note;                   ///< e.g. "no raw samples: interval test only"
};

/// A row whose status changed, or a failing row only in NEW.
struct StatusChange {
  std::string case_id, backend;
  std::string base_status;  ///< "" for a row only in NEW
  std::string new_status;
  std::string detail;       ///< NEW's reason / message, or the worst error ratio
  bool regression = false;
  bool new_errors = false;  ///< gates as a row newly crashed / error / timeout / oom (--allow-new-errors)
};

/// A guard beyond speed that NEW broke (see the rule above).
struct GuardFailure {
  std::string case_id, backend;
  std::string kind;         ///< "nondeterministic" or "nonfinite"
  std::string detail;
  bool regression = false;  ///< false when the matching --allow-* option is given
};

/// The whole comparison.
struct Comparison {
  std::string base_file, new_file;
  CompareOptions options;
  nlohmann::json base_identity, new_identity;  ///< env::comparable_identity of each
  bool env_mismatch = false;                   ///< allowed mismatch (else compare throws)
  std::vector<PassComparison> timings;
  std::vector<StatusChange> status_changes;
  std::vector<GuardFailure> guards;
  std::vector<std::string> unchecked;  ///< "case_id|backend" unchecked in NEW (correctness unknown)
  std::vector<std::string> added;    ///< "case_id|backend" only in NEW
  std::vector<std::string> missing;  ///< "case_id|backend" only in BASE
  std::vector<std::string> untimed;  ///< "case_id|backend" that ran in NEW without BASE's timed passes
  std::string new_unfinished;        ///< why NEW is not a finished run ("" when it is)
  int64_t rows_compared = 0;

  int64_t count(Verdict v) const;
  /// Regressions: SLOWER timings, failing status changes, guard failures,
  /// missing rows, an unfinished NEW and untimed rows, each unless its option
  /// allows it (and AMBIGUOUS timings with --fail-on-ambiguous).
  int64_t regressions() const;
  /// The gate failures by kind, each with the option that would allow it:
  /// "2 missing from NEW (--allow-missing), NEW unfinished (--allow-unfinished)";
  /// "" when none.
  std::string gate_breakdown() const;
  /// 0 when nothing regressed, 1 otherwise (docs/semantics.md section 12).
  int exit_code() const { return regressions() > 0 ? 1 : 0; }
  /// Markdown summary for CI logs: verdict line, counts, regressions first, then
  /// improvements, ambiguous timings, status changes, added and missing rows.
  std::string markdown() const;
  /// The comparison as JSON: options, identities, the regression count and
  /// every timing, status change, guard and row list (docs/report-format.md).
  nlohmann::json to_json() const;
  /// to_json()'s members other than its arrays (timings, status_changes,
  /// guards, unchecked, added, missing, untimed).
  nlohmann::json json_head() const;
  /// Write exactly `to_json().dump(1, ' ', false, replace) + "\n"` through
  /// `write`, piece by piece (jsonu::dump_streamed): one timing's JSON in
  /// memory at a time, never the whole document (`compare --json`).
  void write_json(const std::function<void(std::string_view)>& write) const;
};

/// Compare two loaded reports (load_report()). `base_file` and `new_file` label
/// messages. Throws InputError (naming NEW's /environment) when the environments
/// differ and options.allow_env_mismatch is false, or when an option is out of
/// range (max_slowdown < 0, alpha outside (0, 1)), or when either report holds two
/// rows with the same (case_id, backend) (naming that file and the later row).
Comparison compare_reports(const nlohmann::json& base, const nlohmann::json& neu, const std::string& base_file,
                           const std::string& new_file, const CompareOptions& options = {});

/// compare_reports() on two report files read one row at a time
/// (stream_report()): BASE's rows are kept as digests (status, guards, timing
/// statistics), NEW's are compared as they are read and dropped, so memory is
/// one row of JSON plus a digest per BASE row and the comparison itself, never
/// a whole report. The same verdicts as load_report() + compare_reports();
/// differences: rows get no "derived" figures (the gate reads none), and the
/// environments are compared after the rows are read (a malformed row is
/// reported before an environment mismatch). Throws InputError as
/// load_report() and compare_reports() do.
Comparison compare_report_files(const std::string& base_file, const std::string& new_file,
                                const CompareOptions& options = {});

/// Non-finite output elements a row records (the nonfinite guard): the sum of
/// check.tensors[].nan_mismatch + unwritten, else of check.nonfinite's counts
/// (each capped at 2^40, the sum saturating); nullopt when it records neither.
std::optional<int64_t> nonfinite_count(const nlohmann::json& row);
/// extra.deterministic of a row (the nondeterministic guard); nullopt when not recorded.
std::optional<bool> deterministic_of(const nlohmann::json& row);

/// `text` as one markdown table cell: printable() (control characters escaped),
/// '|' as "\\|", line breaks as spaces.
std::string md_cell(const std::string& text);

/// Parse a tolerance such as "5%", "0.05" or "12.5%" into a fraction. Plain numbers
/// must be fractions in [0, 1); percentages in [0, 100). Throws InputError naming
/// `option` ("--max-slowdown") and the value.
double parse_fraction(const std::string& text, const std::string& option);

}  // namespace attnbench
