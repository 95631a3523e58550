// `attnbench run SCENARIO --gpus all|0,1,3`: one shard of the sweep per GPU, each
// a child `attnbench run --shard k/n` pinned to its GPU with CUDA_VISIBLE_DEVICES,
// one combined progress line, and one merged report at the end.
#pragma once

#include <string>
#include <vector>

#include "harness/run/runner.hpp"

namespace attnbench {

/// The GPUs of `--gpus SPEC`: "all" is every visible CUDA device; "0,1,3" lists
/// them (no repeats), each below the device count. With ATTNBENCH_FAKE_GPUS=N in
/// the environment (tests, CPU machines) the count is N and no device is queried.
/// Throws InputError (--gpus) for a bad list, an index out of range or no device.
std::vector<int> parse_gpus(const std::string& spec);

/// Run `scenario` as gpus.size() shards: shard k runs
/// `EXE run ARGS... --shard k/n --out DIR/shards/gpuG --device 0` with
/// CUDA_VISIBLE_DEVICES=G (G = gpus[k]; ARGS = `child_args`, the user's
/// arguments without --gpus, --out, --shard and --device), stdout and stderr in
/// DIR/shards/gpuG/{stdout,stderr}.log. The shards' journals feed one progress
/// line; at the end DIR/report.json holds every shard's rows (merge_reports,
/// rows in scenario then backend order) plus, for each (case, backend) a shard
/// did not finish because it failed, a `crashed` (killed by a signal) or `error`
/// row naming the shard, how it ended and its last stderr lines. SIGINT/SIGTERM
/// are passed on to the shards, and the report is written with the rows done.
/// Throws InputError (exit 2, nothing touched) for what validate_run() refuses
/// and for --gpus with --shard.
RunSummary run_on_gpus(const Scenario& scenario, const RunOptions& opts, const std::vector<int>& gpus,
                       const std::vector<std::string>& child_args);

}  // namespace attnbench
