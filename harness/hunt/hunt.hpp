// `attnbench hunt`: differential fuzzing of backends against the float64
// reference (docs/hunt.md). Problems come from the generator (generate.hpp); each
// runs on every backend through the runner's one-unit path (run_case_unit: the
// same prepare / check / determinism / isolation as `attnbench run`); the first
// failure of each (backend, failure class) is shrunk (shrink.hpp) to a minimal
// problem, written to DIR/corpus/ with its report row and a reproduction command.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/hunt/generate.hpp"
#include "harness/run/runner.hpp"

namespace attnbench::hunt {

/// Options of `attnbench hunt`.
struct HuntOptions {
  std::vector<std::string> backends;  ///< required, each registered and listed once
  double budget_s = 600;              ///< time for generating and running problems
  /// Each shrink may run until max(end of the budget, its start + shrink_s):
  /// a failure found late still gets shrunk.
  double shrink_s = 60;
  uint64_t seed = 0;
  std::string out_dir = "hunt-out";
  GenLimits limits;
  /// automatic: isolated for in-process GPU backends (as `run` does for sweeps),
  /// and for every in-process backend when case_timeout_s > 0 (never for an
  /// out-of-process peer, whose worker is its isolation); on / off: every backend.
  RunOptions::Isolate isolate = RunOptions::Isolate::automatic;
  double case_timeout_s = 0;   ///< kill an isolated unit after this (0: none)
  int64_t max_problems = 0;    ///< stop after this many generated problems (0: only the budget)
  std::string executable;      ///< attnbench binary for isolated units ("" = this process)
  std::string command_line;    ///< recorded in hunt.json
  bool quiet = false;          ///< no progress lines on stderr
};

/// Counts of a hunt, overall or per backend.
struct HuntCounts {
  int64_t generated = 0;    ///< problems generated (overall only)
  int64_t run = 0;          ///< units run (problem x backend), shrink runs excluded
  int64_t unsupported = 0;  ///< units skipped: supports() refused or prepare() threw Unsupported
  int64_t passed = 0;       ///< units with no failure
  int64_t failed = 0;       ///< units with a failure (any class)
  nlohmann::json to_json() const;
};

/// One failure found: what failed, the problem as generated and as shrunk.
struct HuntFailure {
  std::string backend;
  std::string failure_class;  ///< failure_class() of the row
  std::string message;        ///< the row's message (failure detail, crash description)
  uint64_t index = 0;         ///< generator index of the original problem
  Problem original, minimal;
  int64_t shrink_steps = 0, shrink_tried = 0;
  bool shrink_complete = false;  ///< false: stopped (budget, signal) with the smallest found so far
  std::string problem_file;      ///< DIR/corpus/<name>.json (the minimal problem)
  std::string row_file;          ///< DIR/corpus/<name>.row.json
  std::string repro;             ///< one shell line that reproduces it
  nlohmann::json row;            ///< the report row of the minimal problem
  nlohmann::json to_json() const;
};

/// Outcome of a hunt or a replay.
struct HuntSummary {
  HuntCounts counts;
  std::map<std::string, HuntCounts> per_backend;
  std::vector<HuntFailure> failures;  ///< one per (backend, class), shrunk
  /// Failures of an already-shrunk (backend, class), counted, not shrunk again:
  /// {"backend", "class", "index"} (the first 100).
  nlohmann::json repeats = nlohmann::json::array();
  int interrupted_signal = 0;
  double seconds = 0;
  bool replay = false;  ///< a replay: `generated` counts the corpus's problem files
  /// 128 + signal when interrupted, 1 when any unit failed, else 0.
  int exit_code() const;
  /// "120 generated, 200 run, 40 unsupported, 199 passed, 1 failed" ("120 problems, ..." for a replay).
  std::string line() const;
};

/// The failure class of a row, "" when it is no failure (pass, unsupported,
/// unchecked): "crashed", "timeout", "error", "oom" from the status; for `fail`,
/// the first failing tensor T (O, LSE, dQ, dK, dV, dBias order) as "unwritten-T"
/// (outputs left NaN), "nonfinite-T" (NaN/Inf pattern differs from gold),
/// "fully_masked_rows-T" (only the fully masked rows break the convention) or
/// "numerics-T"; "nondeterministic" for a passing row whose two runs differ
/// bitwise when the backend claims determinism (extra.expected_deterministic).
std::string failure_class(const ReportRow& row);

/// Parse a duration: "90", "90s", "10m", "1h", "1.5m" -> seconds. Throws
/// InputError naming `option` and the value when it is not a positive duration.
double parse_duration(const std::string& text, const std::string& option);

/// Run a hunt into opts.out_dir (locked; hunt.json rewritten after every event,
/// corpus/ holding the minimal problems). Stops at the budget, at max_problems,
/// or on SIGINT/SIGTERM (install_stop_handlers()), keeping what was found; a
/// shrink in progress ends with its smallest failing problem so far. Throws
/// InputError (exit 2) for unknown or repeated backends, a bad budget, or when no
/// listed backend is available on this machine (unavailable ones are dropped with
/// a warning).
HuntSummary run_hunt(const HuntOptions& opts);

/// Rerun every problem file of `corpus_dir` (*.json except *.row.json, in name
/// order) on opts.backends, or, when that is empty, on the backend its
/// <name>.row.json names. Writes opts.out_dir/replay.json (one entry per unit:
/// file, backend, status, class, message). Throws InputError naming the file for
/// an unreadable problem or an unknown backend.
HuntSummary replay_corpus(const std::string& corpus_dir, const HuntOptions& opts);

}  // namespace attnbench::hunt
