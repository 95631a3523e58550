// `attnbench run SCENARIO [--backends a,b] [--out DIR] [--seed N] ...`
#include <cstdio>

#include "harness/cli/cli.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/printable.hpp"
#include "harness/run/runner.hpp"

namespace attnbench::cli {

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
         no_hold = false;
    double max_seconds = 2.0, rel_stddev = 0.02;
    int min_samples = 5, device = 0;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("scenario", args->scenario, "scenario file or name under scenarios/")->required();
  cmd->add_option("--backends", args->backends, "comma-separated backend names (default: all registered)");
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
  cmd->add_flag("--kernel-trace", args->kernel_trace,
                "record the kernels of one untimed forward and backward per GPU row (CUPTI) in extra.kernel_trace");
  cmd->add_option("--max-seconds", args->max_seconds, "time cap per (case, backend, pass); default: the scenario's timing.max_seconds, else 2")->capture_default_str();
  cmd->add_option("--rel-stddev", args->rel_stddev, "stop sampling at this relative stddev")->capture_default_str();
  cmd->add_option("--min-samples", args->min_samples, "minimum timing samples")->capture_default_str();
  cmd->add_option("--device", args->device, "CUDA device index")->capture_default_str();
  cmd->callback([args, cmd, &action] {
    const bool max_seconds_given = cmd->count("--max-seconds") > 0;
    action = [args, max_seconds_given]() -> int {
      RunOptions o;
      std::string list = args->backends;
      size_t pos = 0;
      while (!list.empty() && pos <= list.size()) {
        size_t comma = list.find(',', pos);
        std::string name = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        if (!name.empty()) o.backends.push_back(name);
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
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
      o.timing = !args->no_timing;
      o.backward = !args->no_backward;
      o.determinism = !args->no_determinism;
      o.kernel_trace = args->kernel_trace;
      o.device = args->device;
      o.command_line = command_line();
      Scenario s = load_scenario(resolve_scenario_path(args->scenario), o.seed);
      if (s.max_seconds && !max_seconds_given) o.policy.max_seconds = *s.max_seconds;
      RunSummary sum = run_scenario(s, o);
      std::printf("attnbench: %lld rows: %lld pass, %lld fail, %lld unsupported, %lld error, %lld oom",
                  static_cast<long long>(sum.rows), static_cast<long long>(sum.pass), static_cast<long long>(sum.fail),
                  static_cast<long long>(sum.unsupported), static_cast<long long>(sum.error),
                  static_cast<long long>(sum.oom));
      if (sum.fail_masked_rows_only > 0)
        std::printf(" (%lld fail only on the fully-masked-row convention, numerics fine)",
                    static_cast<long long>(sum.fail_masked_rows_only));
      if (sum.unchecked > 0)
        std::printf(", %lld unchecked (--check off: correctness unknown)", static_cast<long long>(sum.unchecked));
      std::printf("\n");
      std::printf("attnbench: report written to %s\n", printable(sum.report_path).c_str());
      return sum.exit_code();
    };
  });
}

}  // namespace attnbench::cli
