// report.json rows (docs/semantics.md section 12; schema v1 in reports/report.schema.json,
// documented in docs/report-format.md). The writer rewrites the file after
// every row, so results already computed survive a later crash or Ctrl-C.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/problem.hpp"

namespace attnbench {

/// The schema version this build writes and reads (report.json "schema_version").
constexpr int kReportSchemaVersion = 1;

/// Status of one (case, backend) row. Appended statuses (after crashed) go at the
/// end, each with to_string() and parse_row_status() in report.cpp:
///   unchecked: the backend ran but its outputs were not checked (--check off):
///              correctness unknown, never counted as pass (compare: unknown).
enum class RowStatus { pass, fail, unsupported, error, oom, timeout, crashed, unchecked };
const char* to_string(RowStatus s);
/// Every status, in enum order (for messages and counts).
const std::vector<RowStatus>& all_row_statuses();
/// Inverse of to_string(RowStatus); std::nullopt for an unknown name.
std::optional<RowStatus> parse_row_status(const std::string& s);

/// One result row. Optional parts are null in the JSON when absent.
struct ReportRow {
  std::string case_id;
  std::string backend;
  RowStatus status = RowStatus::error;
  std::string reason;    ///< unsupported: why
  std::string message;   ///< error/oom/timeout/crashed: what happened
  nlohmann::json problem;     ///< compact problem (to_json(p, true))
  nlohmann::json work;        ///< useful/executed pairs and FLOPs, tile efficiency
  nlohmann::json packing;     ///< packing stats, if any
  nlohmann::json check;       ///< CheckResult::to_json()
  nlohmann::json timing;      ///< {"fwd": TimingStats, "bwd": ..., "fwd_bwd": ...}
  nlohmann::json memory;      ///< {"peak_bytes", "workspace_bytes", "allocated_bytes"}
  nlohmann::json extra;       ///< backend-specific: setup_ms, determinism, ...
  /// GPU clocks around the case: {"start": env::ClockSample, "end": ...}; written
  /// only when set.
  nlohmann::json clocks;
  /// Small mask rendering for the HTML report (mask_thumbnail()); written only when set.
  nlohmann::json mask_thumbnail;
  nlohmann::json to_json() const;
};

/// Accumulates rows and the run header, writing DIR/report.json atomically
/// (write to a temp file, rename) after each add_row().
class ReportWriter {
 public:
  /// `header` holds schema version, environment, command line, scenario. Missing
  /// "schema_version", "tool" and "started" (now, UTC) are filled in; "finished"
  /// is null until finish(). Writes the file at once.
  ReportWriter(std::string path, nlohmann::json header);
  void add_row(const ReportRow& row);
  /// Merge extra top-level fields (e.g. ceilings measured during the run).
  void set_field(const std::string& key, nlohmann::json value);
  /// Mark the run complete: "finished" = now (ISO 8601 UTC), and write.
  void finish();
  const nlohmann::json& document() const { return doc_; }
  const std::string& path() const { return path_; }
  /// Write now (also called by add_row). Throws std::runtime_error on I/O failure.
  void flush() const;

 private:
  std::string path_;
  nlohmann::json doc_;
};

/// The standard header of a run (docs/report-format.md): schema_version, tool,
/// git_revision, command, started (now), finished (null), scenario, measurement
/// (the timing policy as JSON), environment, ceilings (null until measured).
nlohmann::json make_report_header(const std::string& command_line, nlohmann::json scenario,
                                  nlohmann::json measurement, nlohmann::json environment);

/// Write `doc` to `path` atomically (temp file in the same folder, then rename).
/// Throws std::runtime_error naming the file on failure.
void write_json_atomic(const std::string& path, const nlohmann::json& doc);

/// Read and structurally check a report: valid JSON, schema_version ==
/// kReportSchemaVersion, "results" an array of rows, each with string case_id and
/// backend, no two rows with the same (case_id, backend), a known status, and
/// timing entries (when present) that TimingStats::from_json accepts. The file is
/// parsed by jsonu::load_file (depth limit, no infinite numbers, no duplicate
/// keys). Throws InputError naming the file, the JSON pointer and the value
/// (exit code 2); compare, merge and report all read through here. This is the reader's guard, not the full
/// schema (tests validate against reports/report.schema.json).
nlohmann::json load_report(const std::string& file);
/// The checks of load_report() on an already-parsed document (parse it with
/// jsonu::parse_text); `file` labels errors. Returns `doc`. Throws InputError.
nlohmann::json report_from_json(nlohmann::json doc, const std::string& file);

/// "<case_id>|<backend>", the identity of a row across runs.
std::string row_key(const nlohmann::json& row);

/// Options of merge_reports().
struct MergeOptions {
  bool allow_env_mismatch = false;  ///< merge runs of different GPUs / drivers
  bool replace_duplicates = false;  ///< a later file's row replaces an earlier one
};

/// Merge reports (e.g. shards) into one: rows concatenated in input order, header
/// from the first input with "merged_from" listing every input, "started" the
/// earliest, "finished" the latest (null if any is null), ceilings from the first
/// that has them. Throws InputError when environments differ (env::comparable_identity)
/// unless allowed, or when a (case_id, backend) row repeats unless replace_duplicates.
/// `inputs` are (file name, loaded document) pairs; at least one.
nlohmann::json merge_reports(const std::vector<std::pair<std::string, nlohmann::json>>& inputs,
                             const MergeOptions& opts = {});

/// A small mask picture for the HTML report from render_block_mask() text (one
/// line per q-block, one character per kv-block: '#' full, '+' partial, '.'
/// empty), downsampled to at most `max_cells` per side (a cell is '#' if all its
/// blocks are full, '.' if all are empty, else '+'):
/// {"rows": [...], "q_block", "kv_block", "cell_q_blocks", "cell_kv_blocks"}.
/// Returns null for an empty rendering. Throws std::invalid_argument for other
/// characters or ragged lines.
nlohmann::json mask_thumbnail(const std::string& rendering, int64_t q_block, int64_t kv_block,
                              int max_cells = 48);

/// The mask thumbnail of problem `p` (batch row 0, head 0) at 128 x 128 tiles:
/// build_block_mask() on a one-row copy of `p`, render_block_mask(), then
/// mask_thumbnail(). What the runner stores in ReportRow::mask_thumbnail.
/// Cost: O(nQ * nKV * 128) for interval masks. Throws what build_block_mask throws.
nlohmann::json mask_thumbnail_for(const Problem& p, int max_cells = 48);

}  // namespace attnbench
