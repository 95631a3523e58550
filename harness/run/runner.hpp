// The main job: run every case of a scenario on every selected backend, check
// outputs and gradients against the float64 reference, time the passes and
// write report rows as they complete (docs/semantics.md sections 7, 8, 9 and 12).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/check/check.hpp"
#include "harness/measure/measure.hpp"
#include "reports/report.hpp"
#include "harness/workloads/scenario.hpp"

#include <nlohmann/json.hpp>

namespace attnbench {

/// Options of `attnbench run`.
struct RunOptions {
  std::vector<std::string> backends;  ///< empty = every registered backend
  std::string out_dir = "out";        ///< report.json (and report.html) go here
  std::optional<uint64_t> seed;       ///< overrides every case's seed
  CheckMode check = CheckMode::automatic;
  bool determinism = true;            ///< run twice and compare bitwise
  bool timing = true;                 ///< time fwd, bwd and fwd+bwd
  bool backward = true;               ///< run and check the backward pass
  /// After the timed passes, trace one untimed forward and one untimed backward
  /// of each in-process GPU backend (CUPTI) into extra.kernel_trace
  /// (harness/measure/kernel_trace.hpp); `--kernel-trace`.
  bool kernel_trace = false;
  /// Where the host-side check of a GPU row (its outputs against the float64
  /// gold, and the case's reference when that row computes it) runs
  /// (`--check-overlap`; README, "Checks overlapped with GPU timing"):
  ///  - rows (default): on a worker thread (or in the finished isolated child)
  ///    from the row's timing on, and it may go on while the next rows run, as
  ///    long as each of them is a GPU backend timed without host launch latency
  ///    (Backend::samples_exclude_host_latency: the stream hold or --timer
  ///    graph; the peers' worker holds its stream); at most `pending_checks`
  ///    rows wait for their check beside the row being run, and rows are written
  ///    in run order (harness/run/row_pipeline.hpp);
  ///  - same_row: on a worker thread while the row itself is timed, joined
  ///    before the next row starts;
  ///  - off: before the row is timed.
  /// CPU rows are always checked before they are timed, and every pending check
  /// is joined before a CPU row (or a peer without the stream hold) runs.
  enum class CheckOverlap { off, same_row, rows } check_overlap = CheckOverlap::rows;
  /// `--pending-checks`: with check_overlap rows, how many rows may wait for
  /// their check while the next row runs (1 to 64; each holds its host outputs,
  /// or its finished child), or 0 = auto (the default): chosen per case by
  /// auto_pending_checks() from the host's available memory.
  int pending_checks = 0;
  TimingPolicy policy;
  int shard_index = 0, shard_count = 1;  ///< run cases with index % count == shard_index
  std::string case_filter;            ///< ECMAScript regex searched in case ids; empty = all
  int device = 0;
  std::string command_line;           ///< recorded in the report
  /// `--resume`: continue DIR/journal.jsonl, skipping its rows; the journal's
  /// scenario, seed and options must equal these (else InputError, exit 2).
  bool resume = false;
  /// `--isolate`: run each (case, backend) in a child process of the attnbench
  /// binary. automatic (the CLI's default): on when --case-timeout is set, or for
  /// in-process GPU backends in sweeps of more than one case. Off by default here,
  /// so that a program other than attnbench calling run_scenario() (a test) never
  /// starts itself as a child unless it asks to (and sets `executable`).
  enum class Isolate { off, on, automatic } isolate = Isolate::off;
  double case_timeout_s = 0;          ///< `--case-timeout`: kill an isolated unit after this (0: no limit)
  /// The attnbench binary for isolated units (run as `EXE __unit REQUEST RESULT`);
  /// empty = this process's own (/proc/self/exe).
  std::string executable;
};

/// "on", "off", "auto" -> RunOptions::Isolate. Throws InputError (--isolate).
RunOptions::Isolate parse_isolate(const std::string& s);

/// "rows", "same-row" (or "same_row"), "off" -> RunOptions::CheckOverlap.
/// Throws InputError (--check-overlap) for anything else.
RunOptions::CheckOverlap parse_check_overlap(const std::string& s);
/// --pending-checks: "auto" -> 0, "N" (1 to 64) -> N. Throws InputError
/// (--pending-checks) for anything else.
int parse_pending_checks(const std::string& s);
/// "rows", "same_row", "off": the value of extra.check_overlap.mode.
const char* to_string(RunOptions::CheckOverlap m);

/// Summary of a finished run.
struct RunSummary {
  int64_t rows = 0, pass = 0, fail = 0, unsupported = 0, error = 0, oom = 0, timeout = 0, crashed = 0;
  int64_t unchecked = 0;        ///< rows run with --check off: ran, correctness unknown
  /// Of the `fail` rows, those whose numerics pass and only fully masked rows
  /// break the convention (check.failure_class "fully_masked_rows").
  int64_t fail_masked_rows_only = 0;
  int64_t resumed = 0;          ///< rows taken over from the journal (--resume), included above
  /// (case, backend) pairs of the run without a row at its end (never expected:
  /// the run is then not finished and exits 1).
  int64_t missing = 0;
  int interrupted_signal = 0;   ///< SIGINT / SIGTERM that stopped the run, else 0
  std::string report_path;
  /// Count one row of status `s` (by name; an unknown name counts as error).
  void add(const std::string& status);
  /// 128 + signal when interrupted (130 SIGINT, 143 SIGTERM); else 1 when any
  /// row failed the correctness rule, errored, timed out or crashed, or a row is
  /// missing; else 0.
  int exit_code() const;
  /// "12 rows: 10 pass, 1 fail, ..." (every status, zeros included).
  std::string line() const;
};

/// Check everything about a run that can be checked without running it, touching
/// nothing: backend names (unknown, or listed twice: it would write two rows for
/// one (case_id, backend)), the --cases regex, the timing policy, --isolate with
/// --case-timeout. Returns the backends in run order. Throws InputError (exit 2).
std::vector<std::string> validate_run(const Scenario& scenario, const RunOptions& opts);

/// Indices of the scenario's cases this run covers (--shard, then --cases), in order.
/// Throws InputError for a bad --cases regex.
std::vector<size_t> selected_cases(const Scenario& scenario, const RunOptions& opts);

/// Run `scenario` into `opts.out_dir`: every finished row is appended to
/// DIR/journal.jsonl (fsync'd) and DIR/report.json is rebuilt from the rows
/// (ReportWriter). validate_run() runs first, so bad options touch nothing; then
/// DIR is locked (OutDirLock: a second run into it is InputError naming the pid).
/// A failing backend becomes a row (error, oom, timeout, crashed with the message)
/// and the sweep goes on. A SIGINT/SIGTERM recorded by install_stop_handlers()
/// stops it between rows (an isolated unit is killed and left to --resume): the
/// report gets "interrupted" and the summary interrupted_signal.
/// A case over the total-size budget (Case::invalid) becomes an error row per
/// backend and the sweep goes on. With --check off a row that ran is `unchecked`,
/// never `pass`.
RunSummary run_scenario(const Scenario& scenario, const RunOptions& opts);

/// What --resume requires a journal to match: scenario (file, name, case
/// fingerprint), seed, backends, shard and every option that changes a row.
nlohmann::json resume_identity(const Scenario& scenario, const RunOptions& opts, const std::vector<std::string>& names);

/// Throws InputError naming `journal` and every key of `now` (but those in
/// `ignore`) whose value differs in `was`.
void check_resume_identity(const nlohmann::json& was, const nlohmann::json& now, const std::string& journal,
                           const std::set<std::string>& ignore = {});

/// The journal rows that belong to this run, keyed by the case's fingerprint:
/// its (case_id, backend) is one of the run's (selected cases x `names`), its
/// problem (seed included) equals the case's, it is the first row of its key,
/// and it is a valid report row (schema, checked inside `header`). Every other
/// row is reported on stderr (naming `file`) and dropped.
std::vector<nlohmann::json> rows_of_this_run(const Scenario& scenario, const RunOptions& opts,
                                             const std::vector<std::string>& names,
                                             const std::vector<nlohmann::json>& rows, const nlohmann::json& header,
                                             const std::string& file);

/// One (case, backend) unit exactly as run_scenario runs it, for callers that
/// run problems one at a time (`attnbench hunt`): an `unsupported` row when the
/// backend is not available or its supports() refuses the problem; else prepare,
/// forward, backward, check against the reference (opts.check), determinism and
/// timing as `opts` asks, in this process, or with `isolate` in a child
/// `attnbench __unit` (opts.executable, killed after opts.case_timeout_s when > 0;
/// its transient files in `unit_dir`, created when needed, numbered by `unit_no`,
/// which is advanced). A failing backend becomes the row's status (error, oom,
/// timeout, crashed, with the message), never an exception. std::nullopt when
/// this process was asked to stop (stop_signal()) while the child ran.
/// `backend` must have been configure()d by the caller.
std::optional<ReportRow> run_case_unit(const Case& c, Backend& backend, const RunOptions& opts, bool isolate,
                                       const std::filesystem::path& unit_dir, int64_t& unit_no);

/// The hidden `attnbench __unit REQUEST RESULT` subcommand: run one isolated
/// (case, backend) unit described by the JSON file REQUEST (written by
/// run_scenario) and write its row to RESULT. Returns the process exit code.
int run_unit_main(const std::string& request_path, const std::string& result_path);

/// Parse "i/n" (0 <= i < n) for --shard. Throws InputError.
std::pair<int, int> parse_shard(const std::string& s);

}  // namespace attnbench
