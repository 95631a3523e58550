// Out-of-process peer backends (docs/peers.md): attention implementations of other
// frameworks, run in their own process through a file protocol and reported as
// ordinary attnbench backends.
//
// For each prepared case, PeerBackend::prepare():
//   1. makes a fresh work directory (under $ATTNBENCH_PEER_WORKDIR or the system
//      temp dir) and writes problem.json (to_json(problem)), q.npy, k.npy, v.npy,
//      do.npy (float64, logical [B, H, S, D], values already rounded to the dtype),
//      bias.npy / offset.npy (learnable score mods) and request.json (peer name,
//      passes to time, timing policy, determinism, device);
//   2. runs `PYTHON WORKER --request DIR/request.json` in its own process group,
//      stdout/stderr captured to files, killed (whole group) after the timeout
//      (or sends DIR/request.json to the persistent `WORKER --serve`, below);
//   3. reads result.json and o/lse/dq/dk/dv(/dbias).npy, then removes the directory.
// The worker did all the GPU work inside prepare(): forward() and backward() only
// publish its results into the instance's outputs (so the runner's NaN poisoning,
// read-back and checking work unchanged), external_samples_ms() hands the runner
// the worker's raw CUDA-event samples and external_deterministic() its bitwise
// run-twice verdict.
//
// Status mapping: result "unsupported" -> attnbench::Unsupported(reason);
// "error" -> std::runtime_error(message, with the stderr tail), except a
// compile-time resource error (classify_peer_error) -> Unsupported with the
// message, and device OOM -> a runtime_error the runner records as oom; no result.json ->
// std::runtime_error (exit code and stderr tail); killed by a signal -> PeerCrashed;
// past the timeout -> PeerTimeout. Availability is a cached `WORKER --probe` run.
//
// Sharp edges:
//  - The runner passes its options through Backend::configure (set_context());
//    without it a peer uses set_default_run_context() (TimingPolicy{}, all on).
//  - A worker whose probe says "serve": true (the PyTorch worker) runs once per
//    launch setup and process (`WORKER --serve`, serve_request()): torch is
//    imported and the CUDA context made once per run, not per case. Workers
//    without it (and ATTNBENCH_PEER_SERVE=0) start one process per request.
//  - Inputs travel as float64 .npy files: 4 tensors of B*H*S*D*8 bytes each way.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/backend/backend.hpp"
#include "harness/model/errors.hpp"
#include "harness/measure/measure.hpp"

namespace attnbench::peers {

/// Version of the file protocol (request.json "protocol", result.json "protocol").
inline constexpr int kProtocolVersion = 1;

/// The worker ran past its timeout and was killed (report status "timeout").
class PeerTimeout : public Timeout {
 public:
  using Timeout::Timeout;
};
/// The worker died from a signal (report status "crashed").
class PeerCrashed : public Crashed {
 public:
  using Crashed::Crashed;
};
/// result.json or an output file is missing or malformed (report status "error").
class PeerProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What a peer's "error" message means for the row (classify_peer_error()).
enum class PeerErrorClass {
  error,        ///< anything else: report status "error"
  oom,          ///< device memory exhausted at run time: status "oom"
  unsupported,  ///< a compile-time resource limit: the kernel cannot be built for this problem
};

/// Classify a peer's error message (its text and stderr tail). A compile-time
/// resource error is `unsupported`, not `oom`: Triton's "out of resource: shared
/// memory" / "registers" (OutOfResources), "too many resources requested for
/// launch" (cudaErrorLaunchOutOfResources). Device memory exhaustion ("CUDA out of
/// memory", OutOfMemoryError, cudaErrorMemoryAllocation, CUBLAS/CUDNN ALLOC_FAILED)
/// is `oom`; a message naming both (a resource error whose traceback mentions
/// memory) is `unsupported`. Case-sensitive substrings; never throws.
PeerErrorClass classify_peer_error(const std::string& message);

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
  bool keep_work_dir = false;  ///< keep work dirs (also $ATTNBENCH_PEER_KEEP=1), for debugging
  /// Persistent worker (docs/peers.md "Persistent workers"): when the probe says
  /// "serve": true, requests go to one `WORKER --serve` process per launch setup
  /// instead of a process each. -1: $ATTNBENCH_PEER_SERVE ("0" turns it off;
  /// default on), 0: off, 1: on.
  int serve = -1;
};

/// `cfg` with every empty field filled from the environment and the defaults above.
LaunchConfig resolve_launch_config(const LaunchConfig& cfg);

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
RunContext default_run_context();

/// Outcome of one child process.
struct ProcessResult {
  bool launched = false;   ///< false: the executable could not be started (see error)
  bool timed_out = false;  ///< killed after the timeout
  int exit_code = -1;      ///< when it exited normally
  int signal = 0;          ///< when a signal ended it (0 otherwise)
  double wall_s = 0;
  std::string error;       ///< launch failure text
};

/// Run `argv` (argv[0] looked up in PATH) with the current environment plus `env`,
/// stdin from /dev/null, stdout and stderr to the given files, in a new process
/// group. After `timeout_s` the group gets SIGTERM, then SIGKILL after
/// `kill_grace_s`; after a normal exit any process left in the group is killed.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::vector<std::pair<std::string, std::string>>& env, double timeout_s,
                          double kill_grace_s, const std::string& stdout_path, const std::string& stderr_path);

/// The last `max_chars` characters of a text file ("" if unreadable), reading only
/// what follows byte `from` (a persistent worker's log since a request began).
std::string file_tail(const std::string& path, size_t max_chars = 4000, size_t from = 0);

/// The outcome of one request to a persistent worker (serve_request()).
struct ServeOutcome {
  ProcessResult process;    ///< launched / error / timed_out / signal / exit_code as for run_process; wall_s of
                            ///< this request (worker start included when it started one)
  bool answered = false;    ///< the worker answered the request (result.json is then written)
  nlohmann::json reply;     ///< its answer line: {"request", "exit_code", "status", "restart", "served"}
  int request_index = 0;    ///< 1 for the first request a worker process served
  bool started = false;     ///< this request started the worker process
  std::string stderr_path;  ///< the worker's stderr log
  size_t stderr_offset = 0; ///< size of that log when the request was sent
};

/// Send `request_path` (absolute) to the persistent `PYTHON WORKER --serve` of
/// launch setup `c` (started on first use; one per python, worker and env) and wait
/// up to c.timeout_s for its answer. A worker past the timeout is killed with its
/// process group (timed_out); one that dies or answers `restart: true` is
/// replaced by a fresh process on the next request. Never throws for worker
/// failures; throws std::runtime_error when the log directory cannot be made.
ServeOutcome serve_request(const LaunchConfig& c, const std::string& request_path);
/// Stop every persistent worker (EOF on its stdin, then its group is killed after
/// kill_grace_s). Called at exit; tests call it to start afresh.
void stop_serve_workers();
/// Number of persistent worker processes alive now.
size_t serve_workers_alive();

/// request.json for `peer` and `p` (docs/peers.md): protocol, peer, problem and
/// input file names, backward, passes ([] without timing; ["fwd"] without
/// backward), timing policy, determinism, device, result file name, and the
/// variant's options (only when the backend declares any).
nlohmann::json make_request(const std::string& peer, const Problem& p, const RunContext& ctx);

/// Write problem.json, the input .npy files and request.json into `dir` (which
/// must exist). Throws std::invalid_argument when `in` does not match `p`, and
/// std::runtime_error when a file cannot be written.
void write_work_dir(const std::string& dir, const std::string& peer, const Problem& p, const ProblemData& in,
                    const RunContext& ctx);

/// The contents of result.json and the output files.
struct PeerResult {
  std::string status;    ///< "ok", "unsupported" or "error"
  std::string reason;    ///< unsupported
  std::string message;   ///< error
  AttentionOutputs outputs;  ///< ok: logical float64 tensors (gradients when present)
  /// Raw samples in ms for fwd, bwd, fwd_bwd (index = harness Pass); nullopt when absent.
  std::optional<std::vector<double>> samples[3];
  std::optional<double> compile_ms;
  std::optional<double> setup_ms;
  std::optional<bool> deterministic;
  std::optional<int64_t> executed_pairs;
  std::optional<int64_t> allocated_bytes;
  nlohmann::json raw;    ///< result.json as parsed
};

/// Read DIR/result.json and, for status ok, the outputs it lists (default names
/// o.npy, lse.npy, dq.npy, dk.npy, dv.npy, dbias.npy), checking shapes against `p`
/// (dbias may also come flat).
/// Gradients are required when `with_grads`. Throws PeerProtocolError naming the
/// file and field on anything missing or malformed (result.json is parsed by
/// jsonu::parse_text: too deep, infinite numbers and duplicate keys are malformed);
/// never throws for status unsupported or error (the caller maps those).
PeerResult read_result(const std::string& dir, const Problem& p, bool with_grads);

/// Availability of the peers behind one (python, worker, env) launch setup.
struct ProbeResult {
  bool ok = false;       ///< the worker runs and its framework sees a GPU
  std::string reason;    ///< why not
  nlohmann::json report; ///< the worker's JSON (versions, per-peer verdicts)
  /// Whether `peer` can run; `why` receives the reason when not.
  bool peer_ok(const std::string& peer, std::string* why) const;
};

/// Run `WORKER --probe` once per distinct launch setup and process (cached).
ProbeResult probe(const LaunchConfig& cfg);
/// Forget cached probe results (tests).
void clear_probe_cache();

/// A backend served by a worker process speaking the peer protocol.
class PeerBackend : public Backend {
 public:
  /// `peer` is the name sent in request.json (usually equal to `name`).
  PeerBackend(std::string name, std::string peer, std::string description, LaunchConfig cfg = {});

  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  Device device() const override { return Device::cuda; }
  /// The cached probe: interpreter runs, framework imports, GPU visible, peer present.
  bool available(std::string* why) const override;
  /// static_support(p): rules known without starting the worker.
  Support supports(const Problem& p) const override { return static_support(p); }
  /// Writes the work dir, runs the worker, reads its results (see the file comment).
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& inputs) override;
  /// Determinism is measured by the worker; none is promised.
  bool deterministic() const override { return false; }
  /// The worker is a process of its own: `--isolate auto` leaves it in-process.
  bool runs_out_of_process() const override { return true; }

  /// Use `ctx` instead of the process-wide default context.
  void set_context(const RunContext& ctx) { context_ = ctx; }
  /// set_context() from the runner's options (Backend::configure).
  void configure(const TimingPolicy& policy, bool backward, bool timing, bool determinism, int device) override {
    set_context(RunContext{policy, backward, timing, determinism, device});
  }
  /// The context prepare() uses.
  RunContext context() const { return context_ ? *context_ : default_run_context(); }
  /// The launch setup (environment defaults resolved).
  LaunchConfig launch_config() const { return resolve_launch_config(cfg_); }
  /// Name sent in request.json.
  const std::string& peer() const { return peer_; }

 protected:
  /// Problems the peer can reject without running; default: everything supported.
  virtual Support static_support(const Problem& p) const {
    (void)p;
    return Support::yes();
  }
  /// (i, j) pairs inside the tiles the peer computes, summed over batch and query
  /// heads, when the worker does not report it; default: every pair (B*Hq*Sq*Sk).
  virtual int64_t estimate_executed_pairs(const Problem& p) const;

 private:
  std::string name_, peer_, description_;
  LaunchConfig cfg_;
  std::optional<RunContext> context_;
};

/// PyTorch's attention paths (the worker package backends/peers/attnbench_torch/).
enum class TorchPeer { sdpa_flash, sdpa_cudnn, sdpa_efficient, flex, varlen };
/// Backend and request name: "torch-sdpa-flash", "torch-sdpa-cudnn",
/// "torch-sdpa-efficient", "torch-flex", "torch-varlen".
const char* torch_peer_name(TorchPeer k);
/// The static rules of the worker's static_support() (attnbench_torch/support.py) (kept identical; a test
/// compares them): layouts, dtypes, score mods, head dims and masks per path.
Support torch_peer_supports(TorchPeer k, const Problem& p);
/// How the torch worker expresses the mask: "none", "is_causal", "dense" (a
/// boolean attn_mask), "block_mask" (flex) or "sequences" (varlen).
std::string torch_peer_mask_plan(TorchPeer k, const Problem& p);
/// Executed pairs (docs/semantics.md section 8) per path: flex, and SDPA with is_causal or
/// no mask, the 128x128 BlockMask of the problem; SDPA with a dense mask, every
/// pair; varlen, the 128x128 tiles of each sequence (document or row) under its
/// causal / window bounds. Estimates of the kernels' own tiling, except for flex.
int64_t torch_peer_executed_pairs(TorchPeer k, const Problem& p);
/// The options of a PyTorch peer: torch-flex declares compile_mode
/// (default | max-autotune-no-cudagraphs | max-autotune: torch.compile's mode for
/// flex_attention); the SDPA paths are backends of their own (torch-sdpa-flash,
/// -cudnn, -efficient) and varlen_attn has no variant knob: none.
OptionSpecs torch_peer_option_specs(TorchPeer k);

/// One PyTorch peer backend.
class TorchPeerBackend : public PeerBackend {
 public:
  explicit TorchPeerBackend(TorchPeer kind, LaunchConfig cfg = {});
  TorchPeer kind() const { return kind_; }

 protected:
  Support static_support(const Problem& p) const override { return torch_peer_supports(kind_, p); }
  int64_t estimate_executed_pairs(const Problem& p) const override { return torch_peer_executed_pairs(kind_, p); }

 public:
  /// torch_peer_option_specs(kind()).
  OptionSpecs option_specs() const override { return torch_peer_option_specs(kind_); }

 private:
  TorchPeer kind_;
};

/// Default-constructible registration types, one per PyTorch path.
template <TorchPeer K>
class TorchPeerT final : public TorchPeerBackend {
 public:
  TorchPeerT() : TorchPeerBackend(K) {}
};
using TorchSdpaFlash = TorchPeerT<TorchPeer::sdpa_flash>;
using TorchSdpaCudnn = TorchPeerT<TorchPeer::sdpa_cudnn>;
using TorchSdpaEfficient = TorchPeerT<TorchPeer::sdpa_efficient>;
using TorchFlex = TorchPeerT<TorchPeer::flex>;
using TorchVarlen = TorchPeerT<TorchPeer::varlen>;

}  // namespace attnbench::peers
