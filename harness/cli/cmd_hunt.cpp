// `attnbench hunt --backends a,b --budget 10m [--seed N] [--out DIR] [--replay DIR]`
// (docs/hunt.md): differential fuzzing against the float64 reference, failures
// shrunk to minimal problem files.
#include <cstdio>
#include <sstream>

#include "harness/backend/options.hpp"
#include "harness/cli/cli.hpp"
#include "harness/hunt/hunt.hpp"
#include "harness/model/errors.hpp"
#include "harness/run/process.hpp"

namespace attnbench::cli {

void add_hunt_command(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "hunt", "generate random valid problems, run them on the backends against the reference, shrink failures");
  struct Args {
    std::string backends, budget = "10m", shrink_time = "60s", out = "hunt-out", replay, isolate = "auto";
    int64_t seed = 0, max_problems = 0, max_seq = 0, max_work = 0;
    double case_timeout = 0;
    bool quiet = false;
    std::vector<std::string> plugins;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("--backends", args->backends,
                  "comma-separated backends to hunt (with --replay: default the backend each .row.json names)");
  cmd->add_option("--budget", args->budget, "time for the search: 90, 90s, 10m, 1h")->capture_default_str();
  cmd->add_option("--seed", args->seed, "generator seed (same seed, same problems in the same order)")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "output folder: hunt.json, corpus/ (minimal failing problems)")
      ->capture_default_str();
  cmd->add_option("--replay", args->replay, "rerun the problem files of this corpus folder instead of hunting");
  cmd->add_option("--shrink-time", args->shrink_time,
                  "each shrink may run this long past the budget (a failure found late is still shrunk)")
      ->capture_default_str();
  cmd->add_option("--max-seq", args->max_seq, "largest Sq / Sk generated (default 600)");
  cmd->add_option("--max-work", args->max_work,
                  "size budget of a problem: B*Hq*Sq*Sk*(Dqk+Dv)/128 at most this (default 262144)");
  cmd->add_option("--max-problems", args->max_problems, "stop after this many problems (0: the budget decides)");
  cmd->add_option("--isolate", args->isolate,
                  "run each unit in a child process: on | off | auto (on for in-process GPU backends and with "
                  "--case-timeout)")
      ->capture_default_str();
  cmd->add_option("--case-timeout", args->case_timeout,
                  "kill an isolated unit after SECONDS: a timeout failure (default 300 when isolated)");
  cmd->add_flag("--quiet", args->quiet, "no progress lines");
  add_plugin_option(cmd, args->plugins);
  cmd->callback([args, &action] {
    action = [args]() -> int {
      load_plugins(args->plugins);
      export_plugin_path(args->plugins);
      hunt::HuntOptions o;
      o.backends = split_backend_list(args->backends);  // variants: "cpu,cpu[threads=1]"
      o.budget_s = hunt::parse_duration(args->budget, "--budget");
      o.shrink_s = hunt::parse_duration(args->shrink_time, "--shrink-time");
      if (args->seed < 0) throw InputError("<command line>", "--seed", "expected a seed >= 0");
      o.seed = static_cast<uint64_t>(args->seed);
      o.out_dir = args->out;
      if (args->max_seq < 0 || args->max_work < 0 || args->max_problems < 0)
        throw InputError("<command line>", "--max-seq/--max-work/--max-problems", "expected values >= 0");
      if (args->max_seq > 0) o.limits.max_seq = args->max_seq;
      if (args->max_work > 0) o.limits.max_work = args->max_work;
      o.max_problems = args->max_problems;
      o.isolate = parse_isolate(args->isolate);
      o.case_timeout_s = args->case_timeout;
      o.quiet = args->quiet;
      o.command_line = command_line();
      install_stop_handlers();
      const hunt::HuntSummary sum = args->replay.empty() ? hunt::run_hunt(o) : hunt::replay_corpus(args->replay, o);
      std::printf("attnbench hunt: %s in %.0f s\n", sum.line().c_str(), sum.seconds);
      for (const auto& f : sum.failures)
        std::printf("attnbench hunt: %s %s: %s\n  reproduce: %s\n", f.backend.c_str(), f.failure_class.c_str(),
                    f.problem_file.c_str(), f.repro.c_str());
      if (sum.interrupted_signal)
        std::printf("attnbench hunt: interrupted by %s; what was found is in %s\n",
                    signal_name(sum.interrupted_signal).c_str(), o.out_dir.c_str());
      return sum.exit_code();
    };
  });
}

}  // namespace attnbench::cli
