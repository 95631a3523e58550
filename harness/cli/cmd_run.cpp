// `attnbench run SCENARIO [--backends a,b] [--out DIR] [--seed N] ...`
#include <cstdlib>
#include <filesystem>
#include <csignal>
#include <cstdio>

#include "harness/backend/options.hpp"
#include "harness/cli/cli.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/run/multi_gpu.hpp"
#include "harness/run/plugin_probe.hpp"
#include "harness/run/process.hpp"
#include "harness/model/printable.hpp"
#include "harness/run/runner.hpp"

namespace attnbench::cli {

namespace {

/// This process's `run` arguments without --gpus, --out, --shard and --device
/// (each as "--opt VALUE" or "--opt=VALUE"): what each --gpus shard is started with.
std::vector<std::string> shard_child_args() {
  const auto& words = argv_words();
  std::vector<std::string> out;
  size_t i = 0;
  while (i < words.size() && words[i] != "run") ++i;
  for (++i; i < words.size(); ++i) {
    const std::string& w = words[i];
    bool dropped = false;
    for (const char* opt : {"--gpus", "--out", "--shard", "--device"}) {
      if (w == opt) {
        ++i;  // and its value
        dropped = true;
      } else if (w.rfind(std::string(opt) + "=", 0) == 0) {
        dropped = true;
      }
      if (dropped) break;
    }
    if (!dropped) out.push_back(w);
  }
  return out;
}

/// --stopping and --min-time into `p`: nvbench's documented defaults (0.5 %, 10
/// samples) for what the command line leaves unset. Throws InputError for an
/// unknown rule or --min-time without --stopping nvbench.
void apply_stopping_options(TimingPolicy& p, const std::string& stopping, double min_time, bool rel_given,
                            bool min_samples_given, bool min_time_given) {
  try {
    p.stopping = parse_stopping(stopping);
  } catch (const std::invalid_argument& e) {
    throw InputError("<command line>", "--stopping", e.what());
  }
  if (p.stopping == Stopping::nvbench) {
    if (!rel_given) p.target_rel_stddev = kNvbenchMaxNoise;
    if (!min_samples_given) p.min_samples = kNvbenchMinSamples;
  } else if (min_time_given) {
    throw InputError("<command line>", "--min-time", "applies to --stopping nvbench only (rel_stddev has no minimum time)");
  }
  p.min_time_s = min_time;
}

/// --throttle-threshold (percent), --throttle-recovery and --timer into `p`.
/// Throws InputError naming the option for a value out of range or an unknown timer.
void apply_throttle_options(TimingPolicy& p, double threshold_percent, double recovery_s, const std::string& timer) {
  if (!(threshold_percent >= 0 && threshold_percent <= 100))
    throw InputError("<command line>", "--throttle-threshold",
                     "expected a percentage in [0, 100], got " + std::to_string(threshold_percent));
  if (!(recovery_s >= 0 && recovery_s <= 60))
    throw InputError("<command line>", "--throttle-recovery", "expected seconds in [0, 60], got " + std::to_string(recovery_s));
  p.throttle_threshold = threshold_percent / 100.0;
  p.throttle_recovery_s = recovery_s;
  try {
    p.timer = parse_timer(timer);
  } catch (const std::invalid_argument& e) {
    throw InputError("<command line>", "--timer", e.what());
  }
}

}  // namespace

/// Hand the --plugin files (absolute) to the --gpus shards, which inherit the
/// environment and load every plugin again, in ATTNBENCH_CHILD_PLUGINS
/// (hex-encoded, comma-separated: a path may hold ':' or any other byte).
void export_plugin_path(const std::vector<std::string>& plugins) {
  if (plugins.empty()) return;
  std::string list;
  if (const char* env = std::getenv("ATTNBENCH_CHILD_PLUGINS")) list = env;
  for (const std::string& p : plugins)
    list += (list.empty() ? "" : ",") + hex_encode(std::filesystem::absolute(p).string());
  ::setenv("ATTNBENCH_CHILD_PLUGINS", list.c_str(), 1);
}

void add_unit_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("__unit", "");  // hidden: one isolated (case, backend) of `run --isolate`
  cmd->group("");
  auto req = std::make_shared<std::string>(), res = std::make_shared<std::string>();
  cmd->add_option("request", *req)->required();
  cmd->add_option("result", *res)->required();
  cmd->callback([req, res, &action] {
    action = [req, res] {
      std::string backend;  // a malformed request is reported by run_unit_main, naming the field
      try {
        backend = jsonu::load_file(*req).at("row").at("backend").get<std::string>();
      } catch (const std::exception&) {
      }
      load_unit_plugin(backend);  // only this unit's plugin, as the parent listed it (ATTNBENCH_UNIT_PLUGINS)
      return run_unit_main(*req, *res);
    };
  });
  auto* probe = app.add_subcommand("__plugin-probe", "");  // hidden: load one plugin for the parent (plugin_probe.hpp)
  probe->group("");
  auto lib = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto ask_available = std::make_shared<bool>(false);
  probe->add_option("library", *lib)->required();
  probe->add_option("result", *out)->required();
  probe->add_flag("--available", *ask_available);
  probe->callback([lib, out, ask_available, &action] {
    action = [lib, out, ask_available] { return plugin_probe_main(*lib, *out, *ask_available); };
  });
}

void add_run_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("run", "run a scenario on the backends and write DIR/report.json");
  struct Args {
    std::string scenario;
    std::string backends;
    std::string out = "out";
    int64_t seed = -1;
    std::string check = "auto";
    std::string shard = "0/1";
    std::string cases;
    bool hot = false, no_timing = false, no_backward = false, no_determinism = false, kernel_trace = false,
         no_hold = false, no_overlap = false;
    std::string check_overlap = "rows";
    std::string pending_checks = "auto";
    double max_seconds = 2.0, rel_stddev = 0.02, case_timeout = 0;
    std::string stopping = "rel_stddev", timer = "events";
    double min_time = kNvbenchMinTimeS, throttle_threshold = 75, throttle_recovery = 0.05;
    int min_samples = 5, device = 0;
    bool resume = false;
    std::string isolate = "auto", gpus;
    std::vector<std::string> plugins;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("scenario", args->scenario, "scenario file or name under scenarios/")->required();
  cmd->add_option("--backends", args->backends, "comma-separated backend variants: NAME or NAME[option=value,...] (default: the scenario's "
                  "\"backends\", else all registered; `attnbench list backends --options`)");
  cmd->add_option("--out", args->out, "output directory (report.json)")->capture_default_str();
  cmd->add_option("--seed", args->seed, "override every case's seed");
  cmd->add_option("--check", args->check, "correctness check: auto | full | sample | off")->capture_default_str();
  cmd->add_option("--shard", args->shard, "run cases i, i+n, ... of the matrix (i/n)")->capture_default_str();
  cmd->add_option("--cases", args->cases, "only cases whose id matches this regular expression");
  cmd->add_flag("--hot", args->hot, "do not flush L2 between timing samples");
  cmd->add_flag("--no-timing", args->no_timing, "check only, do not time");
  cmd->add_flag("--no-backward", args->no_backward, "forward pass only");
  cmd->add_flag("--no-determinism", args->no_determinism, "skip the run-twice bitwise comparison");
  cmd->add_flag("--no-stream-hold", args->no_hold,
                "GPU samples include host launch latency (default: a spin kernel holds the stream while a pass is "
                "enqueued, as nvbench does)");
  cmd->add_option("--check-overlap", args->check_overlap,
                  "where a GPU row's host-side check (and the case's float64 reference when that row computes it) "
                  "runs: rows (on a worker thread or in the finished isolated child, while the row and then the next "
                  "GPU rows are timed; rows still written in order) | same-row (while the row itself is timed) | off "
                  "(before the row is timed)")
      ->capture_default_str();
  cmd->add_option("--pending-checks", args->pending_checks,
                  "--check-overlap rows: rows that may wait for their check while the next row runs (each holds its "
                  "host outputs or its finished child): N (1 to 64) or auto (per case, as many as fit in a quarter "
                  "of the host's available memory, 1 to 4)")
      ->capture_default_str();
  cmd->add_flag("--no-overlap", args->no_overlap, "the same as --check-overlap off");
  cmd->add_flag("--kernel-trace", args->kernel_trace,
                "record the kernels of one untimed forward and backward per GPU row (CUPTI) in extra.kernel_trace");
  cmd->add_option("--max-seconds", args->max_seconds, "time cap per (case, backend, pass); default: the scenario's timing.max_seconds, else 2")->capture_default_str();
  cmd->add_option("--rel-stddev", args->rel_stddev, "stop sampling at this relative stddev")->capture_default_str();
  cmd->add_option("--min-samples", args->min_samples, "minimum timing samples")->capture_default_str();
  cmd->add_option("--stopping", args->stopping,
                  "stopping rule: rel_stddev (attnbench's: --rel-stddev after --min-samples, no minimum time) | "
                  "nvbench (nvbench's stdrel shape: also --min-time of accumulated sample time; defaults 0.5 %, "
                  "10 samples, 0.5 s)")
      ->capture_default_str();
  cmd->add_option("--min-time", args->min_time,
                  "--stopping nvbench: seconds of accumulated sample time before sampling may stop")
      ->capture_default_str();
  cmd->add_option("--throttle-threshold", args->throttle_threshold,
                  "discard GPU samples whose SM clock (NVML) is below PERCENT of the maximum SM clock, or that saw a "
                  "hardware slowdown (0: keep every sample)")
      ->capture_default_str();
  cmd->add_option("--throttle-recovery", args->throttle_recovery,
                  "seconds to wait after a discarded (throttled) GPU sample")
      ->capture_default_str();
  cmd->add_option("--timer", args->timer,
                  "GPU timer: events (CUDA events around the enqueued pass) | graph (replay of the pass captured as a "
                  "CUDA graph: launch overhead out of the number)")
      ->capture_default_str();
  cmd->add_option("--device", args->device, "CUDA device index")->capture_default_str();
  cmd->add_flag("--resume", args->resume,
                "continue the run in --out from its journal, skipping finished rows (same scenario, seed and options)");
  cmd->add_option("--isolate", args->isolate,
                  "run each (case, backend) in a child process: on | off | auto (on for in-process GPU backends in "
                  "sweeps of more than one case, and with --case-timeout)")
      ->capture_default_str();
  cmd->add_option("--case-timeout", args->case_timeout,
                  "kill an isolated (case, backend) after SECONDS: a timeout row (0: no limit)");
  cmd->add_option("--gpus", args->gpus,
                  "all | 0,1,3: one shard per GPU in child processes, merged into one report");
  add_plugin_option(cmd, args->plugins);
  cmd->callback([args, cmd, &action] {
    const bool max_seconds_given = cmd->count("--max-seconds") > 0;
    const bool rel_given = cmd->count("--rel-stddev") > 0, min_samples_given = cmd->count("--min-samples") > 0,
               min_time_given = cmd->count("--min-time") > 0;
    action = [args, max_seconds_given, rel_given, min_samples_given, min_time_given]() -> int {
      // Plugins run in isolated children unless --isolate off asks for this process.
      load_plugins(args->plugins, parse_isolate(args->isolate) == RunOptions::Isolate::off);
      export_plugin_path(args->plugins);
      RunOptions o;
      o.backends = split_backend_list(args->backends);  // variants: "cpu,flex[block=64,dbias=atomic]"
      o.out_dir = args->out;
      if (args->seed >= 0) o.seed = static_cast<uint64_t>(args->seed);
      o.check = parse_check_mode(args->check);
      auto [si, sn] = parse_shard(args->shard);
      o.shard_index = si;
      o.shard_count = sn;
      o.case_filter = args->cases;
      o.policy.cold = !args->hot;
      o.policy.hold_stream = !args->no_hold;
      o.policy.max_seconds = args->max_seconds;
      o.policy.target_rel_stddev = args->rel_stddev;
      o.policy.min_samples = args->min_samples;
      apply_stopping_options(o.policy, args->stopping, args->min_time, rel_given, min_samples_given, min_time_given);
      apply_throttle_options(o.policy, args->throttle_threshold, args->throttle_recovery, args->timer);
      o.timing = !args->no_timing;
      o.backward = !args->no_backward;
      o.determinism = !args->no_determinism;
      o.kernel_trace = args->kernel_trace;
      o.check_overlap = args->no_overlap ? RunOptions::CheckOverlap::off : parse_check_overlap(args->check_overlap);
      o.pending_checks = parse_pending_checks(args->pending_checks);
      o.device = args->device;
      o.command_line = command_line();
      o.resume = args->resume;
      o.isolate = parse_isolate(args->isolate);
      o.case_timeout_s = args->case_timeout;
      const std::vector<int> gpus = args->gpus.empty() ? std::vector<int>{} : parse_gpus(args->gpus);
      Scenario s = load_scenario(resolve_scenario_path(args->scenario), o.seed);
      if (s.max_seconds && !max_seconds_given) o.policy.max_seconds = *s.max_seconds;
      install_stop_handlers();
      follow_parent(SIGTERM);  // a --gpus shard stops (row done, report written) when its parent dies
      RunSummary sum = gpus.empty() ? run_scenario(s, o) : run_on_gpus(s, o, gpus, shard_child_args());
      std::printf("attnbench: %s\n", sum.line().c_str());
      if (sum.interrupted_signal)
        std::printf("attnbench: interrupted by %s: %s holds the rows done; `--resume` completes the run\n",
                    signal_name(sum.interrupted_signal).c_str(), sum.report_path.c_str());
      else
        std::printf("attnbench: report written to %s\n", sum.report_path.c_str());
      return sum.exit_code();
    };
  });
}

}  // namespace attnbench::cli
