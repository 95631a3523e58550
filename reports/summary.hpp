// The verdict of a report in a few lines (`attnbench summary REPORT`, printed by
// ci/quickstart.sh): per backend the row counts by status, the fastest passing
// backend of every case, and where each failing row's failure comes from.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnbench {

/// Row counts of one backend by status.
struct BackendTally {
  int64_t pass = 0, fail = 0, unsupported = 0, error = 0;
  int64_t other = 0;  ///< oom, timeout, crashed
};

/// The fastest passing backend of one case.
struct CaseWinner {
  std::string case_id;
  std::string backend;       ///< "" when no row of the case passed with a timing
  std::string pass_name;     ///< the timing compared: "fwd_bwd", else "fwd"
  double median_ms = 0.0;    ///< the winner's median of that pass
  std::string runner_up;     ///< second fastest passing backend, "" if none
  double runner_up_ms = 0.0;
};

/// One row that did not pass or was not run for a reason other than unsupported.
struct FailureNote {
  std::string case_id, backend, status;
  std::string where;  ///< e.g. "LSE: 12 NaN/inf class mismatches; dQ: error 3.1x the tolerance", or the message
};

/// The verdict of a report.
struct ReportSummary {
  std::map<std::string, BackendTally> backends;  ///< by backend name
  std::vector<CaseWinner> winners;                ///< one per case, in report order
  std::vector<FailureNote> failures;              ///< fail, error, oom, timeout, crashed rows, report order
  /// Rows whose backend claims bitwise determinism and whose two runs differed
  /// (determinism_note()), report order; `where` holds the note.
  std::vector<FailureNote> determinism;
  /// Per backend, each distinct `unsupported` reason (first line, at most 200
  /// characters) with its row count.
  std::map<std::string, std::map<std::string, int64_t>> unsupported_reasons;
  int64_t cases = 0, rows = 0;
  /// Plain-text rendering: a per-backend table, the fastest backend per case,
  /// the failures (at most `max_failures`, the rest counted), the determinism
  /// mismatches, then per backend its most frequent unsupported reason (and how
  /// many other reasons it gave). Every name, message and reason taken from the
  /// report is printed with control characters escaped (printable()).
  std::string text(size_t max_failures = 40) const;
};

/// Summarise a loaded report (`results[]` of docs/report-format.md). Fastest:
/// the smallest median of `timing.fwd_bwd` among the case's passing rows, or of
/// `timing.fwd` when no passing row has fwd_bwd; rows without timing are not
/// ranked. Failure origins: for `fail` rows the failing tensors of `check` with
/// their cause (NaN/inf class mismatches, unwritten elements, nonzero output on
/// fully masked rows, else the error as a multiple of the tolerance); for the
/// other statuses the row's message (first line, at most 200 characters).
/// Throws std::invalid_argument when `results` is missing or not an array.
ReportSummary summarize_report(const nlohmann::json& report);

/// summarize_report() of a report file read one row at a time (stream_report():
/// the rows checked as load_report() checks them): memory is one row plus, per
/// case, its passing rows' variants and medians and the failure notes, never
/// the whole report; the same summary as load_report() + summarize_report().
/// Throws InputError as load_report() does.
ReportSummary summarize_report_file(const std::string& file);

/// The row note of a determinism mismatch: "NOT DETERMINISTIC: the backend claims
/// bitwise determinism but two runs differed" when extra.expected_deterministic
/// is true and extra.deterministic false; "" otherwise (shown by the run's
/// terminal line, `attnbench summary` and the HTML report).
std::string determinism_note(const nlohmann::json& row);

}  // namespace attnbench
