// report.json rows (docs/semantics.md section 12; schema v1 in reports/report.schema.json,
// documented in docs/report-format.md). Every finished row goes to the run
// journal first (reports/journal.hpp); the writer rebuilds report.json from the
// rows atomically, so results already computed survive a crash or Ctrl-C.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/problem.hpp"
#include "reports/derive.hpp"
#include "reports/row_types.hpp"

namespace attnbench {

/// The schema version this build writes (report.json "schema_version"). Version 2
/// added each row's "derived" figures (reports/derive.hpp); version 3 each row's
/// backend variant ("variant", "options": harness/backend/options.hpp).
/// load_report() reads versions 1 and 2 too: it derives the figures on load and
/// gives every row without a variant its backend's name and no options.
constexpr int kReportSchemaVersion = 3;
/// The oldest schema version load_report() reads.
constexpr int kOldestReportSchemaVersion = 1;

/// Status of one (case, backend) row. THE list of statuses: a new one goes here,
/// in kRowStatuses, to_string() and the schema (reports/report.schema.json).
///   timeout:   the unit ran past a limit and was stopped (--case-timeout under
///              isolation, a peer worker's timeout);
///   crashed:   its process died (signal under isolation, a device fault, a peer
///              worker killed by a signal). Both count against `run`'s exit code and
///              are regressions in `compare` where BASE passed.
///   unchecked: the backend ran but its outputs were not checked (--check off):
///              correctness unknown, never counted as pass (compare: unknown).
enum class RowStatus { pass, fail, unsupported, error, oom, timeout, crashed, unchecked };
/// Every status, in report order (parse_row_status, load_report's message).
inline constexpr RowStatus kRowStatuses[] = {RowStatus::pass,  RowStatus::fail,    RowStatus::unsupported,
                                             RowStatus::error, RowStatus::oom,     RowStatus::timeout,
                                             RowStatus::crashed, RowStatus::unchecked};
const char* to_string(RowStatus s);
/// Inverse of to_string(RowStatus); std::nullopt for an unknown name.
std::optional<RowStatus> parse_row_status(const std::string& s);

/// One result row. Optional parts are null in the JSON when absent. The typed
/// parts (work, check, timing, memory, derived) are written by their to_json
/// (reports/row_types.hpp, reports/derive.hpp).
struct ReportRow {
  std::string case_id;
  std::string backend;   ///< the registered backend's name
  /// The variant's label (variant_label(), harness/backend/options.hpp): `backend`
  /// plus its non-default options ("cpu[threads=1]"); the row's identity with
  /// case_id. Empty means `backend` (to_json writes `backend` then).
  std::string variant;
  /// Every option of the variant, defaults included (typed JSON object); null = {}.
  nlohmann::json options;
  RowStatus status = RowStatus::error;
  std::string reason;    ///< unsupported: why
  std::string message;   ///< error/oom/timeout/crashed: what happened
  nlohmann::json problem;     ///< compact problem (to_json(p, true))
  std::optional<WorkFigures> work;      ///< useful/executed pairs, FLOPs and bytes
  nlohmann::json packing;     ///< packing stats, if any
  std::optional<CheckFigures> check;    ///< the correctness verdict
  PassTimings timing;                   ///< per pass: TimingStats (null when nothing timed)
  std::optional<MemoryFigures> memory;  ///< bytes held, workspace, peak
  /// Throughput and roofline figures per timed pass (derive(); schema version 2).
  std::optional<DerivedFigures> derived;
  nlohmann::json extra;       ///< backend-specific: setup_ms, determinism, ...
  /// GPU clocks around the case: {"start": env::ClockSample, "end": ...}; written
  /// only when set.
  nlohmann::json clocks;
  /// Small mask rendering for the HTML report (mask_thumbnail()); written only when set.
  nlohmann::json mask_thumbnail;
  /// Set `derived` from work, timing and problem against the run's ceilings
  /// (derive_row()); what the runner does before a row is written.
  void derive(const CeilingRates& ceilings);
  nlohmann::json to_json() const;
  /// Parse a row that to_json() wrote (or a version 1 row). Throws
  /// nlohmann::json::exception or InputError (without a file) on a malformed one.
  static ReportRow from_json(const nlohmann::json& j);
};

/// Accumulates rows and the run header and writes DIR/report.json atomically
/// (write_file_atomic: exclusive temp file, fsync, rename). Rows are kept as
/// their serialised text, and add_row() rewrites the file only when the rows
/// added since the last write are at least 1/8 of those written then (every row
/// up to 8 rows; then rows 9, 10, 12, 13, ...), so a run of n rows costs O(n)
/// in writes, not O(n^2). The run journal (reports/journal.hpp) holds every row
/// at once; set_field(), finish() and flush() always write.
class ReportWriter {
 public:
  /// `header` holds schema version, environment, command line, scenario. Missing
  /// "schema_version", "tool" and "started" (now, UTC) are filled in; "finished"
  /// is null until finish(). Writes the file at once (with `rows` already in it:
  /// those of a resumed journal).
  ReportWriter(std::string path, nlohmann::json header, const std::vector<nlohmann::json>& rows = {});
  void add_row(const ReportRow& row);
  /// add_row() for a row already serialised by ReportRow::to_json().
  void add_row_json(const nlohmann::json& row);
  /// Merge extra top-level fields (e.g. ceilings measured during the run).
  void set_field(const std::string& key, nlohmann::json value);
  /// Mark the run complete: "finished" = now (ISO 8601 UTC), and write.
  void finish();
  /// The whole report (header + parsed rows); for tests and small reports.
  nlohmann::json document() const;
  const nlohmann::json& header() const { return header_; }
  size_t rows() const { return rows_.size(); }
  const std::string& path() const { return path_; }
  /// Stable-sort the rows by `less` (on their JSON) and write; O(n log n) plus
  /// one parse of every row. The runner orders a resumed run's rows as an
  /// uninterrupted run writes them.
  void sort_rows(const std::function<bool(const nlohmann::json&, const nlohmann::json&)>& less);
  /// Write now. Throws std::runtime_error on I/O failure.
  void flush();

 private:
  std::string path_;
  nlohmann::json header_;          ///< everything but "results"
  std::vector<std::string> rows_;  ///< each row's compact JSON text
  size_t written_rows_ = 0;        ///< rows in the file as last written
};

/// The standard header of a run (docs/report-format.md): schema_version, tool,
/// git_revision, command, started (now), finished (null), scenario, measurement
/// (the timing policy as JSON), environment, ceilings (null until measured).
nlohmann::json make_report_header(const std::string& command_line, nlohmann::json scenario,
                                  nlohmann::json measurement, nlohmann::json environment);

/// Write `doc` to `path` atomically with write_file_atomic() (exclusive temp
/// file in the same folder, no symlink following, fsync unless `sync` is false, rename).
/// Throws std::runtime_error naming the file on failure.
void write_json_atomic(const std::string& path, const nlohmann::json& doc, bool sync = true);

/// Read a report: parsed by jsonu::load_file (depth limit, no infinite numbers,
/// no duplicate keys), then report_from_json(). Throws InputError naming the
/// file, the JSON pointer and the value (exit code 2); compare, merge and report
/// all read through here.
nlohmann::json load_report(const std::string& file);
/// The checks of load_report() on an already-parsed document (parse it with
/// jsonu::parse_text); `file` labels errors: schema_version between
/// kOldestReportSchemaVersion and kReportSchemaVersion, the schema
/// (validate_report_schema(), reports/schema.hpp: valijson, when built with it),
/// and at most one row per (case_id, variant). Rows without "derived" (every row
/// of a version 1 report) get their figures on load (derive_row() against the
/// report's ceilings); rows without "variant" (versions 1 and 2) get their
/// backend's name as variant and "options": {}; an older report then reads as
/// version 3, with "upgraded_from": its version. Returns the document. Throws InputError.
nlohmann::json report_from_json(nlohmann::json doc, const std::string& file);

/// The backend variant of a report row: its "variant", or its "backend" for a row
/// written before variants (schema version 1 or 2) -- defaults, the same variant.
std::string row_variant(const nlohmann::json& row);

/// What stream_report() hands each row: the row (moved out, not kept) and its
/// index in "results".
using RowSink = std::function<void(nlohmann::json&& row, size_t index)>;

/// Read a report one row at a time, for readers that must not hold every row
/// (compare of 100k-row reports): jsonu::stream_file() parses the file in
/// blocks and hands each row of "results", checked as load_report() checks it
/// (an object; the schema's row definition, validate_report_row(); at most one
/// row per (case_id, variant); schema_version first when the file states it
/// before "results", as the writer does) and upgraded as load_report() upgrades
/// it (a row of a version 1 or 2 report without "variant" gets its backend's
/// name, one without "options" gets {}; when the file states its version only
/// after "results", rows come as they are: row_variant() reads either) to
/// `on_row`. Rows get no "derived" figures (derive_row() is the caller's, if it
/// needs them). Returns the header: every other field checked against the
/// schema, "results" an empty array, an older header marked "upgraded_from": its
/// version; `file_version`, when given, receives the version the file states.
/// Memory: one row, the header and one (case_id, variant) key per row.
/// The file is read by jsonu::stream_file_fast() (RapidJSON): a row that the
/// quick schema check (reports/schema_fast.hpp) accepts is checked and handed
/// without nlohmann's parser; any other row, and every row from where the fast
/// reader steps back, takes the nlohmann path with valijson, so the rows handed
/// and every error are the same either way. `parts`, when given, names the
/// parts of a row that `on_row` reads, as jsonu::to_nlohmann()'s `keep` (e.g.
/// {"status": true, "check": {"pass": true}}): rows are then handed with those
/// parts (and case_id, backend, variant) only, the rest left out, so that the
/// fast path builds less (a row of the nlohmann path comes whole). Throws
/// InputError as load_report() does, and whatever `on_row` throws.
nlohmann::json stream_report(const std::string& file, const RowSink& on_row, int* file_version = nullptr,
                             const nlohmann::json* parts = nullptr);

/// How many rows stream_report() has handed through its fast path (RapidJSON
/// and the quick schema check) in this process: what tests read to see that the
/// fast path is taken.
uint64_t report_rows_read_fast();

/// "<case_id>|<variant>", the identity of a row across runs (row_variant()).
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

/// A merged report assembled one row at a time and written once: rows placed by
/// merge_reports()'s rules (a repeated (case_id, variant) refused, or with
/// replace_duplicates put in the earlier row's place), its header merged from
/// the inputs' as merge_reports() merges it, the rows waiting in an unlinked
/// scratch file next to the output until write(). What merge_report_files()
/// and `run --gpus` (harness/run/multi_gpu.cpp) write their reports with.
/// Memory: per row its key and a 40-byte record, never a whole report.
class MergedReportWriter {
 public:
  /// Orders the rows at write() (stably; else as placed): e.g. a row's case and
  /// backend positions in the scenario.
  using Rank = std::function<std::pair<size_t, size_t>(const nlohmann::json& row)>;
  /// What write() calls on a row of input number `input` (row `index` of its
  /// "results") that was not stored final (one without "derived", "variant"
  /// or "options"): e.g. normalise_row().
  using Normalise = std::function<void(nlohmann::json& row, size_t input, size_t index)>;

  /// Throws InputError naming `output` when the scratch file cannot be made.
  MergedReportWriter(const std::string& output, const MergeOptions& opts, Rank rank = {});
  ~MergedReportWriter();
  MergedReportWriter(const MergedReportWriter&) = delete;
  MergedReportWriter& operator=(const MergedReportWriter&) = delete;

  /// Row `index` of input number `input` (file `file`). Throws InputError naming
  /// the row when its (case_id, variant) is placed already (without
  /// replace_duplicates); std::runtime_error when the scratch file fails.
  void add_row(const std::string& file, size_t input, size_t index, const nlohmann::json& row);
  /// A row from no input (never normalised), placed when its (case_id, variant)
  /// is not placed yet; returns whether it was.
  bool add_row_if_new(const nlohmann::json& row);
  /// Throws InputError naming `file`'s /environment when it differs from the
  /// first input's and that is not allowed (the first input's header, here or
  /// in add_input(), starts the merged header).
  void check_environment(const std::string& file, const nlohmann::json& header);
  /// After input `file`'s rows: its header and row count (merged_from, started,
  /// finished, ceilings, backends).
  void add_input(const std::string& file, const nlohmann::json& header, size_t rows);
  /// Rows placed.
  size_t rows() const;
  /// The merged header of the inputs so far (merge_reports()'s, no "results").
  nlohmann::json header() const;
  /// Write `header` (an object without "results") and the rows to the output
  /// atomically (AtomicFileWriter): byte for byte write_json_atomic() of
  /// `header` + "results". Throws InputError naming the output on I/O failure
  /// (the output is then untouched), and what `normalise` throws.
  void write(const nlohmann::json& header, const Normalise& normalise = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// What merge_report_files() wrote.
struct MergeTotals {
  size_t reports = 0;  ///< inputs merged
  size_t rows = 0;     ///< rows written
};

/// merge_reports() of report files, read one row at a time (stream_report())
/// and written to `output` piece by piece (AtomicFileWriter): the rows wait in
/// an unlinked file next to `output` until every input's header is read, then
/// the merged report is written, byte for byte what write_json_atomic() writes
/// of merge_reports() on the loaded inputs. Memory: one row, the headers, and
/// per output row its key and a 32-byte record; never a whole report. Errors
/// as load_report() on every input, then merge_reports(), in that order
/// (InputError naming the file); an I/O failure on `output` or its spill is an
/// InputError naming `output`, and `output` is then untouched.
MergeTotals merge_report_files(const std::vector<std::string>& files, const std::string& output,
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
