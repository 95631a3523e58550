// Where a peer worker comes from and what it is asked to do: the launch setup
// (interpreter, worker script, environment, timeouts, work directories, persistent
// worker; defaults from ATTNBENCH_* environment variables) and the run context
// (timing policy, passes, determinism, device, options) the runner hands a peer.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/measure/measure.hpp"

namespace attnbench::peers {

/// How the worker process is started. Empty / zero fields take their default from
/// the environment (resolve_launch_config()).
struct LaunchConfig {
  std::string python;   ///< interpreter: $ATTNBENCH_PYTHON, else "python3" (PATH lookup)
  std::string worker;   ///< script: $ATTNBENCH_TORCH_WORKER, else <source tree>/backends/peers/attnbench_torch/__main__.py
  /// Extra or overriding environment variables of the child (e.g. PYTHONPATH).
  std::vector<std::pair<std::string, std::string>> env;
  double timeout_s = 0;        ///< per request: $ATTNBENCH_PEER_TIMEOUT, else 600 s
  double probe_timeout_s = 0;  ///< for --probe: 180 s
  double kill_grace_s = 5;     ///< SIGTERM -> SIGKILL delay when a timeout kills the group
  std::string work_root;       ///< parent of work dirs: $ATTNBENCH_PEER_WORKDIR, else the system temp dir
  /// Set by resolve_launch_config() when work_root came from neither the config nor
  /// $ATTNBENCH_PEER_WORKDIR: a request's inputs and outputs may then go to
  /// /dev/shm instead (request_work_root()).
  bool work_root_default = false;
  bool keep_work_dir = false;  ///< keep work dirs (also $ATTNBENCH_PEER_KEEP=1), for debugging
  /// Persistent worker (docs/peers.md "Persistent workers"): when the probe says
  /// "serve": true, requests go to one `WORKER --serve` process per launch setup
  /// instead of a process each. -1: $ATTNBENCH_PEER_SERVE ("0" turns it off;
  /// default on), 0: off, 1: on.
  int serve = -1;
};

/// `cfg` with every empty field filled from the environment and the defaults above.
LaunchConfig resolve_launch_config(const LaunchConfig& cfg);

/// The parent directory of one request's work dir, whose files (inputs and outputs)
/// take about `bytes`: c.work_root when it was chosen (config or
/// $ATTNBENCH_PEER_WORKDIR); else `shm` (a memory file system: /dev/shm) when it is
/// a writable directory with `bytes` + 1 GiB free, else c.work_root (the temp dir).
/// On the 2-core development machine the inputs of a B8 S2048 H32 D96 row took
/// 1.69 s to write into /tmp and 0.73 s into /dev/shm (bench_peer_protocol). Never throws.
std::string request_work_root(const LaunchConfig& c, uint64_t bytes, const std::string& shm = "/dev/shm");

/// What the runner knows and a peer needs, since the peer times and checks
/// determinism itself.
struct RunContext {
  TimingPolicy policy;       ///< cold/hot, warm-up, stopping rule
  bool backward = true;      ///< compute gradients (and time bwd, fwd_bwd)
  bool timing = true;        ///< time the passes at all
  bool determinism = true;   ///< run twice and compare bitwise
  int device = 0;            ///< CUDA device index
  /// request timing.hold_stream: hold the stream while the worker enqueues a pass,
  /// so samples are GPU time (docs/peers.md). prepare() turns it off when
  /// $ATTNBENCH_PEER_HOLD_STREAM is "0" (host enqueue time inside the samples, as
  /// triton.testing.do_bench measures).
  bool hold_stream = true;
  /// The variant's options (Backend::options_json(): typed, every declared
  /// option), sent as request.json "options" when not empty (docs/peers.md).
  nlohmann::json options = nlohmann::json::object();
};

/// Process-wide context used by peer backends without their own (set_context()).
void set_default_run_context(const RunContext& ctx);
/// A copy of the process-wide context (TimingPolicy{}, everything on, until set).
RunContext default_run_context();

/// The value of environment variable `name`, or `fallback` when it is unset or
/// empty. Never throws.
std::string env_or(const char* name, const std::string& fallback);

/// The key of a launch setup: python, worker and env. Probe results and
/// persistent workers are cached per key.
std::string launch_key(const LaunchConfig& c);

}  // namespace attnbench::peers
