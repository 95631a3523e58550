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
//  - Inputs travel as .npy files (float32 when every value is a float32, else
//    float64): 4 tensors of B*H*S*D*4 or *8 bytes each way.
//
// The pieces live in this folder, one concern per file: peer_config (launch
// setup, run context), peer_process (one worker run, work dirs), peer_serve
// (persistent workers), peer_protocol (request and result files, tensors),
// peer_probe (availability), peer_errors (failures -> rows), and torch_peers /
// torch_peer_rules (the five PyTorch peers and their static rules).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backends/peers/peer_config.hpp"
#include "backends/peers/peer_errors.hpp"
#include "harness/backend/backend.hpp"

namespace attnbench::peers {

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
  /// The worker holds its stream while Python enqueues a timed pass (StreamHold
  /// in attnbench_torch/timing.py, sized to twice the longest enqueue seen, its
  /// overruns counted as host gaps) unless the run or ATTNBENCH_PEER_HOLD_STREAM=0
  /// turns it off; it has no graph timer.
  bool samples_exclude_host_latency(bool hold_stream, bool graph_timer) const override;
  /// With persistent workers (the probe offers them and ATTNBENCH_PEER_SERVE is
  /// not 0), the worker starts now and imports what this peer needs (serve_prestart).
  void warm_up() override;

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

}  // namespace attnbench::peers
