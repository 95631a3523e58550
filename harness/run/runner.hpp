// The main job: run every case of a scenario on every selected backend, check
// outputs and gradients against the float64 reference, time the passes and
// write report rows as they complete (docs/semantics.md sections 7, 8, 9 and 12).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/check/check.hpp"
#include "harness/measure/measure.hpp"
#include "harness/workloads/scenario.hpp"

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
  TimingPolicy policy;
  int shard_index = 0, shard_count = 1;  ///< run cases with index % count == shard_index
  std::string case_filter;            ///< ECMAScript regex searched in case ids; empty = all
  int device = 0;
  std::string command_line;           ///< recorded in the report
};

/// Summary of a finished run.
struct RunSummary {
  int64_t rows = 0, pass = 0, fail = 0, unsupported = 0, error = 0, oom = 0;
  int64_t unchecked = 0;  ///< rows run with --check off: ran, correctness unknown
  /// Of the `fail` rows, those whose numerics pass and only fully masked rows
  /// break the convention (check.failure_class "fully_masked_rows").
  int64_t fail_masked_rows_only = 0;
  std::string report_path;
  /// 1 when any row failed the correctness rule or errored, else 0.
  int exit_code() const { return (fail > 0 || error > 0) ? 1 : 0; }
};

/// Run `scenario` and write `opts.out_dir/report.json` after every row.
/// Unknown backend names, and a name listed twice (it would write two rows for
/// one (case_id, backend)), throw InputError (exit 2) before anything runs; a
/// failing backend becomes a row (error/oom with the message) and the sweep goes on;
/// so does a case over the total-size budget (Case::invalid: an error row per
/// backend). With --check off a row that ran is `unchecked`, never `pass`.
RunSummary run_scenario(const Scenario& scenario, const RunOptions& opts);

/// Parse "i/n" (0 <= i < n) for --shard. Throws InputError.
std::pair<int, int> parse_shard(const std::string& s);

}  // namespace attnbench
