// PeerBackend: one request per prepared case through a worker process, its
// results published by a PeerInstance (peer_backend.hpp).
#include "backends/peers/peer_backend.hpp"

#include <filesystem>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

#include "backends/peers/peer_probe.hpp"
#include "backends/peers/peer_process.hpp"
#include "backends/peers/peer_protocol.hpp"
#include "backends/peers/peer_serve.hpp"

namespace attnbench::peers {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// Results of one worker run. forward()/backward() publish them into the outputs
/// the runner poisons and reads back.
class PeerInstance final : public BackendInstance {
 public:
  PeerInstance(PeerResult r, int64_t executed_pairs, json extra)
      : result_(std::move(r)), executed_pairs_(executed_pairs), extra_(std::move(extra)) {
    poison_outputs();
  }

  void forward() override {
    current_.o = result_.outputs.o;
    current_.lse = result_.outputs.lse;
  }
  void backward() override {
    if (!result_.outputs.has_grads())
      throw std::runtime_error("peer " + extra_.value("peer", std::string()) +
                               ": the worker computed no gradients (the run context had backward = false)");
    current_.dq = result_.outputs.dq;
    current_.dk = result_.outputs.dk;
    current_.dv = result_.outputs.dv;
    current_.dbias = result_.outputs.dbias;
  }
  void poison_outputs() override {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    auto poisoned = [nan](const HostTensor& t) { return t.shape.empty() ? HostTensor{} : HostTensor(t.shape, nan); };
    const AttentionOutputs& r = result_.outputs;
    current_.o = poisoned(r.o);
    current_.lse = poisoned(r.lse);
    current_.dq = poisoned(r.dq);
    current_.dk = poisoned(r.dk);
    current_.dv = poisoned(r.dv);
    current_.dbias.assign(r.dbias.size(), nan);
  }
  AttentionOutputs read_outputs(bool with_grads) override {
    AttentionOutputs out = current_;
    if (!with_grads) {
      out.dq = out.dk = out.dv = HostTensor{};
      out.dbias.clear();
    }
    return out;
  }
  int64_t executed_pairs() const override { return executed_pairs_; }
  double setup_ms() const override { return result_.setup_ms.value_or(0.0); }
  size_t allocated_bytes() const override {
    return result_.allocated_bytes ? static_cast<size_t>(*result_.allocated_bytes) : 0;
  }
  /// The worker's samples; an empty list (never nullopt) for a pass it did not
  /// time, so that the runner never times the publishing no-ops above.
  std::optional<std::vector<double>> external_samples_ms(int pass) const override {
    if (pass < 0 || pass > 2 || !result_.samples[pass]) return std::vector<double>{};
    return result_.samples[pass];
  }
  std::optional<bool> external_deterministic() const override { return result_.deterministic; }
  json extra() const override { return extra_; }

 private:
  PeerResult result_;
  AttentionOutputs current_;
  int64_t executed_pairs_;
  json extra_;
};

}  // namespace

PeerBackend::PeerBackend(std::string name, std::string peer, std::string description, LaunchConfig cfg)
    : name_(std::move(name)), peer_(std::move(peer)), description_(std::move(description)), cfg_(std::move(cfg)) {}

bool PeerBackend::available(std::string* why) const { return probe(cfg_).peer_ok(peer_, why); }

void PeerBackend::warm_up() {
  const LaunchConfig c = resolve_launch_config(cfg_);
  if (c.serve != 1) return;
  const ProbeResult pr = probe(cfg_);
  std::string why;
  if (pr.report.value("serve", false) == true && pr.peer_ok(peer_, &why)) serve_prestart(c, peer_);
}

bool PeerBackend::samples_exclude_host_latency(bool hold_stream, bool /*graph_timer*/) const {
  return hold_stream && env_or("ATTNBENCH_PEER_HOLD_STREAM", "1") != "0";
}

int64_t PeerBackend::estimate_executed_pairs(const Problem& p) const {
  return p.batch * p.heads_q * p.seq_q * p.seq_k;
}

std::unique_ptr<BackendInstance> PeerBackend::prepare(const Problem& p, const ProblemData& inputs) {
  const LaunchConfig c = resolve_launch_config(cfg_);
  RunContext ctx = context();
  ctx.options = options_json();  // the variant, in the request (never in the environment)
  if (!samples_exclude_host_latency(ctx.policy.hold_stream, false)) ctx.hold_stream = false;
  // The request's files: the inputs and the outputs (O, dQ, dK, dV of their sizes,
  // at most float32) and LSE.
  const uint64_t elements = static_cast<uint64_t>(inputs.q.data.size() + inputs.k.data.size() + inputs.v.data.size() +
                                                  inputs.d_o.data.size());
  const uint64_t bytes = 2 * 4 * elements + 4 * static_cast<uint64_t>(p.batch * p.heads_q * p.seq_q);
  WorkDir wd(request_work_root(c, bytes), "attnbench-peer-", c.keep_work_dir);
  write_work_dir(wd.path(), peer_, p, inputs, ctx);
  const std::string out = wd.file("worker.stdout.txt"), err = wd.file("worker.stderr.txt");
  const std::string label = "peer " + name_;
  const std::string keep_hint = wd.kept() ? " (work dir kept: " + wd.path() + ")" : " (set ATTNBENCH_PEER_KEEP=1 to keep the work dir)";
  // A persistent worker when the probe offers one (docs/peers.md), else a process.
  const bool serve = c.serve == 1 && probe(cfg_).report.value("serve", false) == true;
  ProcessResult pr;
  std::optional<ServeOutcome> so;
  if (serve) {
    so = serve_request(c, fs::absolute(wd.file("request.json")).string());
    pr = so->process;
    if (pr.launched && !so->answered && pr.error.empty() && !pr.timed_out && !pr.signal)
      pr.error = "the persistent worker exited with code " + std::to_string(pr.exit_code) + " without answering";
  } else {
    pr = run_process({c.python, c.worker, "--request", wd.file("request.json")}, c.env, c.timeout_s, c.kill_grace_s,
                     out, err);
  }
  // stderr of this request: its own file, or the persistent worker's log since it was sent
  auto err_tail = [&](size_t n) { return so ? file_tail(so->stderr_path, n, so->stderr_offset) : file_tail(err, n); };
  if (!pr.launched)
    throw std::runtime_error(label + ": cannot start \"" + c.python + "\" (set ATTNBENCH_PYTHON): " + pr.error);
  if (pr.timed_out)
    throw PeerTimeout(label + ": the worker ran past the timeout of " + seconds_text(c.timeout_s) +
                      " s and was killed (ATTNBENCH_PEER_TIMEOUT)" + keep_hint + with_tail("stderr", err_tail(2000)));
  if (pr.signal)
    throw PeerCrashed(label + ": the worker was killed by " + signal_name(pr.signal) + " (signal " +
                      std::to_string(pr.signal) + ")" + keep_hint +
                      with_tail("stderr", err_tail(2000)));
  if (so && !pr.error.empty() && !so->answered)
    throw std::runtime_error(label + ": " + pr.error + keep_hint + with_tail("stderr", err_tail(2000)));
  std::error_code ec;
  if (!fs::exists(wd.file("result.json"), ec))
    throw std::runtime_error(label + ": the worker exited with code " + std::to_string(pr.exit_code) +
                             " without writing result.json" + keep_hint + with_tail("stderr", err_tail(2000)));
  PeerResult r;
  try {
    r = read_result(wd.path(), p, ctx.backward);
  } catch (const PeerProtocolError& e) {
    throw PeerProtocolError(label + ": " + e.what() + keep_hint + with_tail("stderr", err_tail(1000)));
  }
  if (r.status == "unsupported") throw Unsupported(r.reason);
  if (r.status == "error") {
    const std::string tail = err_tail(1500);
    switch (classify_peer_error(r.message + "\n" + tail)) {
      case PeerErrorClass::unsupported:
        throw Unsupported(label + ": compile-time resource limit: " + r.message);
      case PeerErrorClass::oom:
        // "out of memory" in the text makes the runner's row oom.
        throw std::runtime_error(label + ": device out of memory: " + r.message + keep_hint + with_tail("stderr", tail));
      case PeerErrorClass::error: break;
    }
    throw std::runtime_error(label + ": " + r.message + keep_hint + with_tail("stderr", tail));
  }

  json extra = {{"peer", peer_},
                {"protocol", kProtocolVersion},
                {"worker", c.worker},
                {"worker_process_s", pr.wall_s},
                {"worker_mode", so ? "serve" : "process"},
                {"worker_prestarted", so && so->prestarted},
                {"worker_request_index", so ? so->request_index : 1},
                {"compile_ms", r.compile_ms ? json(*r.compile_ms) : json(nullptr)},
                {"worker_setup_ms", r.setup_ms ? json(*r.setup_ms) : json(nullptr)},
                {"executed_pairs_source", r.executed_pairs ? "worker" : "estimate"}};
  for (const char* k : {"first_call_ms", "lse_source", "versions", "notes", "timing_info", "memory", "worker_wall_s"})
    if (r.raw.contains(k)) extra[k] = r.raw[k];
  if (wd.kept()) extra["work_dir"] = wd.path();
  const int64_t executed = r.executed_pairs ? *r.executed_pairs : estimate_executed_pairs(p);
  return std::make_unique<PeerInstance>(std::move(r), executed, std::move(extra));
}

}  // namespace attnbench::peers
