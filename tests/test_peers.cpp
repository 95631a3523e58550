// Out-of-process peers (backends/peers): the file protocol (request.json, the
// work directory, result.json and output .npy files), process launching with
// timeouts, availability detection, the static rules of the PyTorch peers (and
// their agreement with the worker package attnbench_torch), and full round trips through a fake
// worker written by the test: directly, and through the runner.
// Everything here runs without a GPU and without PyTorch; the tests that need a
// python3 interpreter say so and skip themselves when there is none.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/peers/peer_backend.hpp"
#include "backends/peers/peer_probe.hpp"
#include "backends/peers/peer_process.hpp"
#include "backends/peers/peer_protocol.hpp"
#include "backends/peers/peer_serve.hpp"
#include "backends/peers/torch_peer_rules.hpp"
#include "harness/backend/backend.hpp"
#include "harness/model/block_mask.hpp"
#include "harness/check/check.hpp"
#include "harness/model/dtype_codec.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/npy.hpp"
#include "harness/model/problem.hpp"
#include "harness/run/runner.hpp"
#include "harness/model/tensors.hpp"
#include "reference/reference.hpp"

using namespace attnbench;
using namespace attnbench::peers;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kWorker = std::string(ATTNBENCH_SOURCE_DIR) + "/backends/peers/attnbench_torch/__main__.py";

/// A fresh directory under /tmp, removed with its contents at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    char buf[] = "/tmp/attnbench-test-peers-XXXXXX";
    REQUIRE(mkdtemp(buf) != nullptr);
    path = buf;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (fs::path(path) / name).string(); }
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  REQUIRE(f.good());
  f << text;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Problem make_problem(int64_t B, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, int64_t d, std::vector<MaskTerm> mask = {},
                     ScoreMod mod = {}, Layout layout = Layout::bshd, DType dtype = DType::bf16) {
  Problem p;
  p.batch = B;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seq_q = sq;
  p.seq_k = sk;
  p.head_dim = d;
  p.head_dim_v = d;
  p.mask = std::move(mask);
  p.score_mod = mod;
  p.layout = layout;
  p.dtype = dtype;
  p.seed = 3;
  validate(p);
  return p;
}

ScoreMod mod_of(ScoreMod::Kind kind) {
  ScoreMod m;
  m.kind = kind;
  m.cap = 5.0;
  m.max_distance = 4;
  m.size = 6;
  return m;
}

/// A tensor with recognisable values: base + index / 1000.
HostTensor ramp(std::vector<int64_t> shape, double base) {
  HostTensor t(std::move(shape));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = base + static_cast<double>(i) / 1000.0;
  return t;
}

/// Outputs a worker would return for `p`: ramps, with -inf in the LSE's first row.
AttentionOutputs fake_outputs(const Problem& p) {
  AttentionOutputs o;
  o.o = ramp({p.batch, p.heads_q, p.seq_q, p.head_dim_v}, 1.0);
  o.lse = ramp({p.batch, p.heads_q, p.seq_q}, 2.0);
  o.lse.data[0] = -std::numeric_limits<double>::infinity();
  o.dq = ramp({p.batch, p.heads_q, p.seq_q, p.head_dim}, 3.0);
  o.dk = ramp({p.batch, p.heads_kv, p.seq_k, p.head_dim}, 4.0);
  o.dv = ramp({p.batch, p.heads_kv, p.seq_k, p.head_dim_v}, 5.0);
  for (int64_t i = 0; i < p.bias_numel(); ++i) o.dbias.push_back(6.0 + static_cast<double>(i));
  return o;
}

void write_outputs(const std::string& dir, const AttentionOutputs& o) {
  npy::write(dir + "/o.npy", o.o.shape, o.o.data.data());
  // LSE as float32: peers may return float32 (exact for every kernel dtype).
  std::vector<float> lse(o.lse.data.begin(), o.lse.data.end());
  npy::write(dir + "/lse.npy", o.lse.shape, lse.data());
  npy::write(dir + "/dq.npy", o.dq.shape, o.dq.data.data());
  npy::write(dir + "/dk.npy", o.dk.shape, o.dk.data.data());
  npy::write(dir + "/dv.npy", o.dv.shape, o.dv.data.data());
  if (!o.dbias.empty()) npy::write(dir + "/dbias.npy", {static_cast<int64_t>(o.dbias.size())}, o.dbias.data());
}

json ok_result() {
  return {{"protocol", 1},
          {"status", "ok"},
          {"timings_ms", {{"fwd", {0.5, 0.25, 0.75}}, {"bwd", {1.5}}, {"fwd_bwd", {2.0, 2.5}}}},
          {"timing_info", {{"fwd", {{"stop_reason", "converged"}}}}},
          {"compile_ms", 1234.5},
          {"setup_ms", 7.25},
          {"deterministic", true},
          {"executed_pairs", 4242},
          {"memory", {{"allocated_bytes", 1000}, {"peak_bytes", 2000}}},
          {"versions", {{"torch", "fake"}}},
          {"notes", {"a note"}},
          {"lse_source", "fake"}};
}

bool same_values(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
  return true;
}

bool all_nan(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isnan(x)) return false;
  return !v.empty();
}

/// Runs `sh -c script`, returning the process result; stdout/stderr to files in `dir`.
ProcessResult sh(const TempDir& dir, const std::string& script, double timeout_s = 30,
                 const std::vector<std::pair<std::string, std::string>>& env = {}) {
  return run_process({"/bin/sh", "-c", script}, env, timeout_s, 0.5, dir / "out.txt", dir / "err.txt");
}

/// Whether `python3` runs here (the worker's stdlib-only modes need nothing else).
bool have_python() {
  TempDir d;
  ProcessResult r = run_process({"python3", "-c", "import json, sys; sys.exit(0)"}, {}, 60, 1, d / "o", d / "e");
  return r.launched && r.exit_code == 0;
}

/// The fake worker: a POSIX shell script speaking the protocol. `fixture` holds
/// probe.json (optional), mode (ok | unsupported | error | noresult | crash |
/// hang | garbage), result.json and out/*.npy for mode ok; the script copies what
/// attnbench wrote into spy_* files there. With --serve (persistent mode) it
/// appends its process id to spy_serve_pids, answers each request line with the
/// JSON of docs/peers.md and exits after an error (restart: true) or at EOF; a
/// "#preload PEER" line is appended to spy_preload and not answered.
std::string write_fake_worker(const TempDir& fixture) {
  const std::string path = fixture / "fake_worker.sh";
  std::string s = R"(#!/bin/sh
# Fake attnbench peer worker (tests/test_peers.cpp).
FIX="@FIX@"
if [ "$1" = "--probe" ]; then
  if [ -f "$FIX/probe.json" ]; then cat "$FIX/probe.json"; else echo '{"protocol": 1, "ok": true, "peers": {}}'; fi
  exit 0
fi
handle() {
  DIR=$(dirname "$1")
  cp "$1" "$FIX/spy_request.json"
  cp "$DIR/problem.json" "$FIX/spy_problem.json"
  cp "$DIR/q.npy" "$FIX/spy_q.npy"
  echo "$DIR" > "$FIX/spy_dir"
  MODE=ok
  [ -f "$FIX/mode" ] && MODE=$(cat "$FIX/mode")
  STATUS=ok
  case "$MODE" in
    ok) cp "$FIX"/out/*.npy "$DIR"/ && cp "$FIX/result.json" "$DIR/result.json" ;;
    unsupported) STATUS=unsupported; echo '{"protocol": 1, "status": "unsupported", "reason": "fake: no kernel for this"}' > "$DIR/result.json" ;;
    error) STATUS=error; echo "fake traceback line" >&2; echo '{"protocol": 1, "status": "error", "message": "fake: CUDA error: boom"}' > "$DIR/result.json" ;;
    resource) STATUS=error; echo '{"protocol": 1, "status": "error", "message": "OutOfResources: out of resource: shared memory, Required: 262144"}' > "$DIR/result.json" ;;
    devoom) STATUS=error; echo '{"protocol": 1, "status": "error", "message": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}' > "$DIR/result.json" ;;
    noresult) echo "fake worker died early" >&2; exit 3 ;;
    crash) kill -KILL $$ ;;
    hang) sleep 30 ;;
    garbage) echo 'this is not json' > "$DIR/result.json" ;;
    chatty) echo "a library printing to stdout"; cp "$FIX"/out/*.npy "$DIR"/ && cp "$FIX/result.json" "$DIR/result.json" ;;
  esac
}
if [ "$1" = "--serve" ]; then
  echo $$ >> "$FIX/spy_serve_pids"
  exec 3>&1 1>&2  # answers on the original stdout only
  N=0
  while IFS= read -r REQ; do
    case "$REQ" in "#preload "*) echo "$REQ" >> "$FIX/spy_preload"; continue ;; esac
    N=$((N + 1))
    echo "request $N begins" >&2
    handle "$REQ"
    RESTART=false
    [ "$STATUS" = error ] && RESTART=true
    echo "{\"request\": \"$REQ\", \"exit_code\": 0, \"status\": \"$STATUS\", \"restart\": $RESTART, \"served\": $N}" >&3
    [ "$RESTART" = true ] && exit 0
  done
  exit 0
fi
[ "$1" = "--request" ] || { echo "fake worker: bad usage" >&2; exit 2; }
handle "$2"
exit 0
)";
  s.replace(s.find("@FIX@"), 5, fixture.path);
  write_file(path, s);
  return path;
}

/// Runs `f` (a prepare() and what follows) and names the outcome: f's own pair, or
/// {"unsupported" | "timeout" | "crashed" | "protocol" | "error", message} for
/// the exception prepare() threw.
template <class F>
std::pair<std::string, std::string> outcome_of(F f) {
  try {
    return f();
  } catch (const Unsupported& e) {
    return {"unsupported", e.what()};
  } catch (const PeerTimeout& e) {
    return {"timeout", e.what()};
  } catch (const PeerCrashed& e) {
    return {"crashed", e.what()};
  } catch (const PeerProtocolError& e) {
    return {"protocol", e.what()};
  } catch (const std::runtime_error& e) {
    return {"error", e.what()};
  }
}

LaunchConfig fake_config(const TempDir& fixture, const std::string& worker) {
  LaunchConfig c;
  c.python = "/bin/sh";
  c.worker = worker;
  c.work_root = fixture / "work";
  c.timeout_s = 60;
  c.kill_grace_s = 0.5;
  return c;
}

/// Number of entries of `dir` whose name starts with `prefix`.
int count_entries(const std::string& dir, const std::string& prefix) {
  int n = 0;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

/// Sets an environment variable for the scope, restoring the old value.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old) setenv(name.c_str(), old->c_str(), 1);
    else unsetenv(name.c_str());
  }
};

}  // namespace

// ------------------------------------------------------------------ request and work dir

TEST_CASE("request_work_root: the chosen root, else a memory file system with room, else the temp dir") {
  TempDir shm;
  LaunchConfig c;
  {
    ScopedEnv unset("ATTNBENCH_PEER_WORKDIR", "");
    c = resolve_launch_config({});
  }
  CHECK(c.work_root_default);
  CHECK(request_work_root(c, 1000, shm.path) == shm.path);  // a writable directory with room
  CHECK(request_work_root(c, uint64_t{1} << 62, shm.path) == c.work_root);  // no room for the files
  CHECK(request_work_root(c, 1000, shm / "missing") == c.work_root);
  {
    ScopedEnv chosen("ATTNBENCH_PEER_WORKDIR", shm / "chosen");
    const LaunchConfig e = resolve_launch_config({});
    CHECK_FALSE(e.work_root_default);
    CHECK(request_work_root(e, 1000, shm.path) == shm / "chosen");
  }
  LaunchConfig given;
  given.work_root = shm / "given";
  CHECK(request_work_root(resolve_launch_config(given), 1000, shm.path) == shm / "given");
}

TEST_CASE("torch-flex declares compile_mode; a variant's options travel in request.json") {
  const auto flex = BackendRegistry::create_variant("torch-flex[compile_mode=max-autotune]");
  REQUIRE(flex);
  CHECK(flex->variant() == "torch-flex[compile_mode=max-autotune]");
  CHECK(flex->options_json() == json({{"compile_mode", "max-autotune"}}));
  CHECK(BackendRegistry::create("torch-flex")->variant() == "torch-flex");
  CHECK(BackendRegistry::create("torch-sdpa-flash")->option_specs().empty());
  CHECK_THROWS_AS(BackendRegistry::create_variant("torch-flex[compile_mode=fast]"), InputError);
  const Problem p = make_problem(1, 2, 2, 16, 16, 16);
  RunContext ctx;
  CHECK_FALSE(make_request("torch-sdpa-flash", p, ctx).contains("options"));  // no options declared: none sent
  ctx.options = flex->options_json();
  CHECK(make_request("torch-flex", p, ctx)["options"] == json({{"compile_mode", "max-autotune"}}));
}

TEST_CASE("make_request carries the peer, the passes, the timing policy and the inputs") {
  Problem p = make_problem(2, 4, 2, 40, 40, 16);
  RunContext ctx;
  json r = make_request("torch-flex", p, ctx);
  CHECK(r["protocol"] == kProtocolVersion);
  CHECK(r["peer"] == "torch-flex");
  CHECK(r["problem"] == "problem.json");
  CHECK(r["result"] == "result.json");
  CHECK(r["inputs"] == json({{"q", "q.npy"}, {"k", "k.npy"}, {"v", "v.npy"}, {"do", "do.npy"}}));
  CHECK(r["backward"] == true);
  CHECK(r["passes"] == json({"fwd", "bwd", "fwd_bwd"}));
  CHECK(r["determinism"] == true);
  CHECK(r["device"] == 0);
  json want_timing = TimingPolicy{}.to_json();
  want_timing["hold_stream"] = true;
  CHECK(r["timing"] == want_timing);

  ctx.policy.cold = false;
  ctx.policy.warmup = 7;
  ctx.policy.min_samples = 11;
  ctx.policy.max_samples = 13;
  ctx.policy.target_rel_stddev = 0.125;
  ctx.policy.max_seconds = 3.5;
  ctx.determinism = false;
  ctx.policy.stopping = Stopping::nvbench;
  ctx.policy.min_time_s = 0.25;
  ctx.device = 2;
  r = make_request("torch-flex", p, ctx);
  want_timing = json({{"cold", false}, {"warmup", 7}, {"min_samples", 11}, {"max_samples", 13},
                      {"target_rel_stddev", 0.125}, {"max_seconds", 3.5}, {"hold_stream", true},
                      {"stopping", "nvbench"}, {"min_time_s", 0.25}, {"throttle_threshold", 0.75},
                      {"throttle_recovery_s", 0.05}, {"timer", "events"}});
  CHECK(r["timing"] == want_timing);
  CHECK(r["determinism"] == false);
  CHECK(r["device"] == 2);

  ctx.backward = false;
  CHECK(make_request("x", p, ctx)["passes"] == json({"fwd"}));
  CHECK(make_request("x", p, ctx)["backward"] == false);
  ctx.timing = false;
  CHECK(make_request("x", p, ctx)["passes"] == json::array());

  Problem rel = make_problem(1, 2, 2, 8, 8, 8, {}, mod_of(ScoreMod::Kind::rel_bias));
  CHECK(make_request("x", rel, RunContext{})["inputs"].contains("bias"));
  CHECK_FALSE(make_request("x", rel, RunContext{})["inputs"].contains("offset"));
  Problem off = make_problem(1, 2, 2, 8, 8, 8, {}, mod_of(ScoreMod::Kind::offset_bias));
  CHECK(make_request("x", off, RunContext{})["inputs"]["bias"] == "bias.npy");
  CHECK(make_request("x", off, RunContext{})["inputs"]["offset"] == "offset.npy");
}

TEST_CASE("run context: a backend's own context wins over the process-wide default") {
  const RunContext saved = default_run_context();
  RunContext hot;
  hot.policy.cold = false;
  hot.backward = false;
  set_default_run_context(hot);
  TorchFlex flex;
  CHECK_FALSE(flex.context().policy.cold);
  CHECK_FALSE(flex.context().backward);
  TimingPolicy pol;
  pol.max_seconds = 9;
  flex.configure(pol, true, false, false, 1);
  CHECK(flex.context().policy.max_seconds == 9);
  CHECK(flex.context().policy.cold);
  CHECK(flex.context().backward);
  CHECK_FALSE(flex.context().timing);
  CHECK_FALSE(flex.context().determinism);
  CHECK(flex.context().device == 1);
  CHECK_FALSE(TorchVarlen().context().backward);  // others still see the default
  set_default_run_context(saved);
}

/// The values an input file of write_work_dir holds: uint16 arrays are the bits of
/// the problem's 16-bit dtype `t`.
std::vector<double> input_values(const npy::Array& a, DType t) {
  if (a.dtype != npy::Dtype::u2) return a.to_double();
  std::vector<double> v(static_cast<size_t>(a.numel()));
  decode_span(a.raw.data(), 0, v.size(), t, v.data());
  return v;
}

TEST_CASE("write_work_dir writes problem.json, 16-bit inputs, bias/offset and request.json") {
  TempDir d;
  Problem p = make_problem(2, 4, 2, 24, 24, 8, {CausalTerm{}, document_term_from_lengths({{10, 6}, {24}}, 24)},
                           mod_of(ScoreMod::Kind::rel_bias));
  ProblemData in = make_inputs(p);
  RunContext ctx;
  write_work_dir(d.path, "torch-flex", p, in, ctx);

  Problem back = problem_from_json(json::parse(read_file(d / "problem.json")), d / "problem.json");
  CHECK(to_json(back) == to_json(p));
  CHECK(json::parse(read_file(d / "request.json")) == make_request("torch-flex", p, ctx));

  struct Want {
    const char* file;
    const HostTensor* t;
  } wants[] = {{"q.npy", &in.q}, {"k.npy", &in.k}, {"v.npy", &in.v}, {"do.npy", &in.d_o}};
  for (const auto& w : wants) {
    npy::Array a = npy::read(d / w.file);
    CHECK(a.dtype == npy::Dtype::u2);  // bf16 values travel as their bits
    CHECK(a.shape == w.t->shape);
    CHECK(input_values(a, DType::bf16) == w.t->data);  // bitwise: rounded values travel exactly
    CHECK(a.raw.size() == 2 * w.t->data.size());
  }
  npy::Array bias = npy::read(d / "bias.npy");
  CHECK(bias.shape == std::vector<int64_t>{4, 9});  // rel_bias [Hq, 2m + 1]
  CHECK(bias.to_double() == in.bias);
  CHECK_FALSE(fs::exists(d / "offset.npy"));

  TempDir d2;
  Problem po = make_problem(1, 2, 1, 16, 20, 8, {}, mod_of(ScoreMod::Kind::offset_bias));
  ProblemData ino = make_inputs(po);
  write_work_dir(d2.path, "torch-flex", po, ino, ctx);
  npy::Array off = npy::read(d2 / "offset.npy");
  CHECK(off.dtype == npy::Dtype::i8);
  CHECK(off.shape == std::vector<int64_t>{20});
  std::vector<int64_t> want(ino.offset.begin(), ino.offset.end());
  CHECK(off.to_int64() == want);
  CHECK(npy::read(d2 / "bias.npy").shape == std::vector<int64_t>{6});

  // A value that is not a float32 keeps the tensor in float64, one that is a float32
  // but no bf16 in float32 (nothing is rounded on the way); the others stay bits.
  ProblemData wide = in;
  wide.k.data[5] = 0.1;
  wide.v.data[3] = 1.0 + std::ldexp(1.0, -20);  // a float32, not a bf16
  TempDir d3;
  write_work_dir(d3.path, "torch-flex", p, wide, ctx);
  npy::Array k = npy::read(d3 / "k.npy");
  CHECK(k.dtype == npy::Dtype::f8);
  CHECK(k.to_double() == wide.k.data);
  npy::Array v = npy::read(d3 / "v.npy");
  CHECK(v.dtype == npy::Dtype::f4);
  CHECK(v.to_double() == wide.v.data);
  CHECK(npy::read(d3 / "q.npy").dtype == npy::Dtype::u2);
  // fp16 problems travel as fp16 bits; fp32 problems as float32.
  for (DType t : {DType::fp16, DType::fp32}) {
    Problem pt = p;
    pt.dtype = t;
    ProblemData it = make_inputs(pt);
    TempDir dt;
    write_work_dir(dt.path, "torch-flex", pt, it, ctx);
    npy::Array q = npy::read(dt / "q.npy");
    CHECK(q.dtype == (t == DType::fp16 ? npy::Dtype::u2 : npy::Dtype::f4));
    CHECK(input_values(q, t) == it.q.data);
  }

  ProblemData wrong = in;
  wrong.q = HostTensor({2, 4, 24, 7});
  CHECK_THROWS_AS(write_work_dir(d.path, "torch-flex", p, wrong, ctx), std::invalid_argument);
}

// ------------------------------------------------------------------ result

TEST_CASE("read_result reads outputs (float64 or float32), samples and facts") {
  TempDir d;
  Problem p = make_problem(1, 2, 1, 12, 16, 8, {}, mod_of(ScoreMod::Kind::offset_bias));
  AttentionOutputs want = fake_outputs(p);
  write_outputs(d.path, want);
  write_file(d / "result.json", ok_result().dump());

  PeerResult r = read_result(d.path, p, true);
  CHECK(r.status == "ok");
  CHECK(r.outputs.o.shape == want.o.shape);
  CHECK(r.outputs.o.data == want.o.data);
  CHECK(r.outputs.lse.shape == want.lse.shape);
  CHECK(std::isinf(r.outputs.lse.data[0]));
  CHECK(r.outputs.lse.data[0] < 0);
  for (size_t i = 1; i < want.lse.data.size(); ++i)
    CHECK(r.outputs.lse.data[i] == static_cast<double>(static_cast<float>(want.lse.data[i])));
  CHECK(r.outputs.dq.data == want.dq.data);
  CHECK(r.outputs.dk.data == want.dk.data);
  CHECK(r.outputs.dv.data == want.dv.data);
  CHECK(r.outputs.dbias == want.dbias);
  REQUIRE(r.samples[0]);
  CHECK(*r.samples[0] == std::vector<double>{0.5, 0.25, 0.75});
  CHECK(*r.samples[1] == std::vector<double>{1.5});
  CHECK(*r.samples[2] == std::vector<double>{2.0, 2.5});
  CHECK(r.compile_ms == doctest::Approx(1234.5));
  CHECK(r.setup_ms == doctest::Approx(7.25));
  CHECK(r.deterministic == true);
  CHECK(r.executed_pairs == 4242);
  CHECK(r.allocated_bytes == 1000);

  // Without gradients the gradient files are not needed.
  fs::remove(d / "dq.npy");
  PeerResult fwd_only = read_result(d.path, p, false);
  CHECK_FALSE(fwd_only.outputs.has_grads());
  CHECK_THROWS_AS(read_result(d.path, p, true), PeerProtocolError);

  // dBias comes shaped like the bias ([Hq, 2m + 1] for rel_bias) or flat.
  TempDir d3;
  Problem rel = make_problem(1, 2, 1, 12, 16, 8, {}, mod_of(ScoreMod::Kind::rel_bias));
  AttentionOutputs wr = fake_outputs(rel);
  write_outputs(d3.path, wr);
  write_file(d3 / "result.json", R"({"status": "ok"})");
  npy::write(d3 / "dbias.npy", {2, 9}, wr.dbias.data());
  CHECK(read_result(d3.path, rel, true).outputs.dbias == wr.dbias);
  npy::write(d3 / "dbias.npy", {9, 2}, wr.dbias.data());
  CHECK_THROWS_AS(read_result(d3.path, rel, true), PeerProtocolError);

  // bf16 / fp16 outputs may come as uint16 bits of the problem's dtype; LSE may not.
  for (DType t : {DType::bf16, DType::fp16}) {
    TempDir db;
    Problem pb = make_problem(1, 2, 1, 12, 16, 8);
    pb.dtype = t;
    AttentionOutputs wb = fake_outputs(pb);
    write_outputs(db.path, wb);
    write_file(db / "result.json", R"({"status": "ok"})");
    HostTensor o16 = make_inputs(pb).d_o;  // values in the dtype, shaped like O
    std::vector<uint16_t> bits(o16.data.size());
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = t == DType::bf16 ? bf16_bits(o16.data[i]) : fp16_bits(o16.data[i]);
    npy::write(db / "o.npy", o16.shape, bits.data());
    CHECK(read_result(db.path, pb, true).outputs.o.data == o16.data);
    npy::write(db / "lse.npy", wb.lse.shape, std::vector<uint16_t>(wb.lse.data.size()).data());
    CHECK_THROWS_AS(read_result(db.path, pb, true), PeerProtocolError);
  }

  // Optional facts may be absent or null.
  json minimal = {{"status", "ok"}, {"compile_ms", nullptr}, {"deterministic", nullptr}};
  write_file(d / "result.json", minimal.dump());
  PeerResult m = read_result(d.path, p, false);
  CHECK_FALSE(m.compile_ms);
  CHECK_FALSE(m.deterministic);
  CHECK_FALSE(m.samples[0]);
}

TEST_CASE("read_result passes unsupported and error through without outputs") {
  TempDir d;
  Problem p = make_problem(1, 1, 1, 4, 4, 8);
  write_file(d / "result.json", R"({"protocol": 1, "status": "unsupported", "reason": "no kernel"})");
  PeerResult u = read_result(d.path, p, true);
  CHECK(u.status == "unsupported");
  CHECK(u.reason == "no kernel");
  write_file(d / "result.json", R"({"status": "unsupported"})");
  CHECK_FALSE(read_result(d.path, p, true).reason.empty());
  write_file(d / "result.json", R"({"status": "error", "message": "boom"})");
  PeerResult e = read_result(d.path, p, true);
  CHECK(e.status == "error");
  CHECK(e.message == "boom");
}

TEST_CASE("read_result rejects malformed results, naming the file and field") {
  TempDir d;
  Problem p = make_problem(1, 2, 1, 12, 16, 8);
  auto error_of = [&](const std::string& result_text) -> std::string {
    write_file(d / "result.json", result_text);
    try {
      read_result(d.path, p, true);
    } catch (const PeerProtocolError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error_of("{ not json").find("malformed JSON") != std::string::npos);
  CHECK(error_of("[1, 2]").find("expected a JSON object") != std::string::npos);
  CHECK(error_of(R"({"status": "maybe"})").find("/status") != std::string::npos);
  CHECK(error_of(R"({"protocol": 2, "status": "ok"})").find("/protocol") != std::string::npos);
  CHECK(error_of(R"({"status": "error", "timings_ms": {"fwd": [1, -2]}})").find("/timings_ms/fwd/1") != std::string::npos);
  CHECK(error_of(R"({"status": "error", "timings_ms": {"fwd": ["x"]}})").find("/timings_ms/fwd/0") != std::string::npos);
  CHECK(error_of(R"({"status": "error", "timings_ms": {"forward": [1]}})").find("/timings_ms/forward") != std::string::npos);
  CHECK(error_of(R"({"status": "error", "deterministic": "yes"})").find("/deterministic") != std::string::npos);
  CHECK(error_of(R"({"status": "error", "compile_ms": "fast"})").find("/compile_ms") != std::string::npos);

  // status ok: every output must exist with the logical shape and a float dtype.
  AttentionOutputs o = fake_outputs(p);
  write_outputs(d.path, o);
  CHECK(error_of(R"({"status": "ok"})").empty());
  HostTensor wrong = ramp({1, 2, 16, 12}, 0.0);  // Sq and Sk swapped
  npy::write(d / "o.npy", wrong.shape, wrong.data.data());
  const std::string shape_err = error_of(R"({"status": "ok"})");
  CHECK(shape_err.find("o.npy") != std::string::npos);
  CHECK(shape_err.find("(1, 2, 16, 12)") != std::string::npos);
  CHECK(shape_err.find("(1, 2, 12, 8)") != std::string::npos);
  write_outputs(d.path, o);
  std::vector<int64_t> ints(static_cast<size_t>(o.dv.numel()), 1);
  npy::write(d / "dv.npy", o.dv.shape, ints.data());
  CHECK(error_of(R"({"status": "ok"})").find("float64, float32 or (fp16 / bf16 problems) uint16 bits") !=
        std::string::npos);
  // uint16 holds the bits of a bf16 problem's dtype (p is bf16; 0x3f80 is 1.0), and
  // is refused for an fp32 problem.
  std::vector<uint16_t> halves(static_cast<size_t>(o.dv.numel()), 0x3f80);
  npy::write(d / "dv.npy", o.dv.shape, halves.data());
  CHECK(read_result(d.path, p, true).outputs.dv.data == std::vector<double>(halves.size(), 1.0));
  Problem p32 = p;
  p32.dtype = DType::fp32;
  try {
    read_result(d.path, p32, true);
    FAIL("uint16 outputs of an fp32 problem were accepted");
  } catch (const PeerProtocolError& e) {
    CHECK(std::string(e.what()).find("uint16 bits, got <u2") != std::string::npos);
  }
  fs::remove(d / "dv.npy");
  CHECK(error_of(R"({"status": "ok"})").find("dv") != std::string::npos);
  fs::remove(d / "result.json");
  CHECK_THROWS_AS(read_result(d.path, p, false), PeerProtocolError);
}

// ------------------------------------------------------------------ processes

TEST_CASE("run_process captures exit codes and output, and passes the environment") {
  TempDir d;
  ProcessResult r = sh(d, "echo to-out; echo to-err >&2; exit 3");
  CHECK(r.launched);
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 3);
  CHECK(r.signal == 0);
  CHECK(read_file(d / "out.txt") == "to-out\n");
  CHECK(read_file(d / "err.txt") == "to-err\n");
  CHECK(file_tail(d / "err.txt") == "to-err");
  CHECK(file_tail(d / "out.txt", 3) == "...out");

  r = sh(d, "printf '%s' \"$ATTNBENCH_TEST_PEER_VAR\"", 30, {{"ATTNBENCH_TEST_PEER_VAR", "hello peers"}});
  CHECK(r.exit_code == 0);
  CHECK(read_file(d / "out.txt") == "hello peers");

  r = sh(d, "kill -KILL $$");
  CHECK(r.launched);
  CHECK(r.signal == SIGKILL);

  r = run_process({"/nonexistent/attnbench-no-such-program"}, {}, 10, 0.5, d / "o", d / "e");
  CHECK_FALSE(r.launched);
  CHECK_FALSE(r.error.empty());
}

TEST_CASE("run_process kills the whole process group at the timeout") {
  TempDir d;
  const std::string pidfile = d / "child.pid";
  ProcessResult r = sh(d, "sleep 30 & echo $! > " + pidfile + "; wait", 1.5);
  CHECK(r.launched);
  CHECK(r.timed_out);
  CHECK(r.wall_s < 10);
  const std::string pid_text = read_file(pidfile);
  REQUIRE_FALSE(pid_text.empty());
  const pid_t child = static_cast<pid_t>(std::stol(pid_text));
  // The grandchild (sleep) is gone: no such process, or a zombie awaiting its reaper.
  bool alive = false;
  for (int i = 0; i < 100; ++i) {
    alive = kill(child, 0) == 0;
    if (alive) {
      const std::string stat = read_file("/proc/" + std::to_string(child) + "/stat");
      const size_t close = stat.rfind(')');
      alive = close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
    }
    if (!alive) break;
    usleep(20000);
  }
  CHECK_FALSE(alive);
}

// ------------------------------------------------------------------ PyTorch peer rules

TEST_CASE("torch peers: static support rules") {
  const TorchPeer all[] = {TorchPeer::sdpa_flash, TorchPeer::sdpa_cudnn, TorchPeer::sdpa_efficient, TorchPeer::flex,
                           TorchPeer::varlen};
  auto ok = [](TorchPeer k, const Problem& p) { return torch_peer_supports(k, p).ok; };
  Problem dense = make_problem(2, 8, 2, 64, 64, 32);
  for (TorchPeer k : all) CHECK(ok(k, dense));

  Problem causal_br_rect = make_problem(1, 2, 2, 32, 64, 32, {CausalTerm{CausalAlign::bottom_right}});
  CHECK_FALSE(ok(TorchPeer::sdpa_flash, causal_br_rect));
  CHECK(torch_peer_supports(TorchPeer::sdpa_flash, causal_br_rect).reason.find("top-left") != std::string::npos);
  CHECK(ok(TorchPeer::sdpa_efficient, causal_br_rect));  // as a dense attn_mask
  CHECK(torch_peer_mask_plan(TorchPeer::sdpa_efficient, causal_br_rect) == "dense");
  CHECK(ok(TorchPeer::flex, causal_br_rect));
  CHECK(ok(TorchPeer::varlen, causal_br_rect));  // FlashAttention is bottom-right

  Problem causal_tl_rect = make_problem(1, 2, 2, 32, 64, 32, {CausalTerm{CausalAlign::top_left}});
  CHECK(ok(TorchPeer::sdpa_flash, causal_tl_rect));  // PyTorch decides at run time
  CHECK(torch_peer_mask_plan(TorchPeer::sdpa_cudnn, causal_tl_rect) == "is_causal");
  CHECK_FALSE(ok(TorchPeer::varlen, causal_tl_rect));

  Problem window = make_problem(1, 2, 2, 64, 64, 32, {SlidingWindowTerm{16, 0}});
  CHECK_FALSE(ok(TorchPeer::sdpa_flash, window));
  CHECK(torch_peer_supports(TorchPeer::sdpa_flash, window).reason.find("sliding_window") != std::string::npos);
  CHECK(ok(TorchPeer::sdpa_cudnn, window));
  CHECK(ok(TorchPeer::varlen, window));

  Problem docs = make_problem(2, 4, 4, 64, 64, 32, {CausalTerm{}, document_term_from_lengths({{30, 20}, {64}}, 64)});
  CHECK_FALSE(ok(TorchPeer::sdpa_flash, docs));
  CHECK(ok(TorchPeer::varlen, docs));
  CHECK(torch_peer_mask_plan(TorchPeer::flex, docs) == "block_mask");
  DocumentTerm split;
  split.doc_ids = {std::vector<int32_t>(64, 0)};
  for (int i = 20; i < 40; ++i) split.doc_ids[0][i] = 1;  // id 0 appears in two runs
  Problem noncontig = make_problem(1, 2, 2, 64, 64, 32, {split});
  CHECK_FALSE(ok(TorchPeer::varlen, noncontig));
  CHECK(ok(TorchPeer::flex, noncontig));

  Problem prefix = make_problem(1, 2, 2, 64, 64, 32, {PrefixLmTerm{10}});
  CHECK_FALSE(ok(TorchPeer::varlen, prefix));
  CHECK(ok(TorchPeer::sdpa_efficient, prefix));
  Problem sparse = make_problem(1, 2, 2, 256, 256, 32, {BlockSparseTerm{0.5, 9}});
  CHECK_FALSE(ok(TorchPeer::varlen, sparse));
  CHECK(ok(TorchPeer::flex, sparse));

  for (auto kind : {ScoreMod::Kind::softcap, ScoreMod::Kind::alibi, ScoreMod::Kind::rel_bias, ScoreMod::Kind::offset_bias}) {
    Problem m = make_problem(1, 2, 2, 32, 32, 32, {}, mod_of(kind));
    CHECK(ok(TorchPeer::flex, m));
    for (TorchPeer k : {TorchPeer::sdpa_flash, TorchPeer::sdpa_cudnn, TorchPeer::sdpa_efficient, TorchPeer::varlen}) {
      CHECK_FALSE(ok(k, m));
      CHECK(torch_peer_supports(k, m).reason.find("torch-flex") != std::string::npos);
    }
  }
  Problem thd = make_problem(2, 2, 2, 32, 32, 32, {}, {}, Layout::thd);
  CHECK(ok(TorchPeer::varlen, thd));
  for (TorchPeer k : {TorchPeer::sdpa_flash, TorchPeer::sdpa_cudnn, TorchPeer::sdpa_efficient, TorchPeer::flex})
    CHECK_FALSE(ok(k, thd));
  Problem fp32 = make_problem(1, 2, 2, 32, 32, 32, {}, {}, Layout::bshd, DType::fp32);
  CHECK(ok(TorchPeer::sdpa_efficient, fp32));
  CHECK(ok(TorchPeer::flex, fp32));
  CHECK_FALSE(ok(TorchPeer::sdpa_flash, fp32));
  CHECK_FALSE(ok(TorchPeer::sdpa_cudnn, fp32));
  CHECK_FALSE(ok(TorchPeer::varlen, fp32));
  Problem dv = make_problem(1, 2, 2, 32, 32, 64);
  dv.head_dim_v = 32;
  CHECK_FALSE(ok(TorchPeer::sdpa_flash, dv));
  CHECK_FALSE(ok(TorchPeer::varlen, dv));
  CHECK(ok(TorchPeer::flex, dv));
}

TEST_CASE("torch peers: executed pairs follow each path's tiles") {
  Problem causal = make_problem(2, 4, 2, 300, 300, 32, {CausalTerm{}});
  const int64_t tiles = build_block_mask(causal, 128, 128).executed_pairs_per_head(2) * 4;
  CHECK(torch_peer_executed_pairs(TorchPeer::flex, causal) == tiles);
  CHECK(torch_peer_executed_pairs(TorchPeer::sdpa_flash, causal) == tiles);
  CHECK(torch_peer_mask_plan(TorchPeer::sdpa_flash, causal) == "is_causal");

  Problem window = make_problem(1, 2, 2, 300, 300, 32, {SlidingWindowTerm{64, 0}});
  CHECK(torch_peer_executed_pairs(TorchPeer::sdpa_efficient, window) == 2 * 300 * 300);  // dense attn_mask
  CHECK(torch_peer_executed_pairs(TorchPeer::flex, window) < 2 * 300 * 300);

  // varlen: each document is its own sequence of 128-tiles: 100 -> one 100x100 tile,
  // 150 causal -> tiles (0,0), (1,0), (1,1) = 128*128 + 22*128 + 22*22.
  Problem docs = make_problem(1, 2, 2, 256, 256, 32, {CausalTerm{}, document_term_from_lengths({{100, 150}}, 256)});
  CHECK(torch_peer_executed_pairs(TorchPeer::varlen, docs) == 2 * (100 * 100 + 128 * 128 + 22 * 128 + 22 * 22));
  // Rows with a padding mask: sequences of the valid lengths.
  Problem pad = make_problem(2, 1, 1, 200, 200, 32, {PaddingTerm{{100, 200}, {100, 200}}});
  CHECK(torch_peer_executed_pairs(TorchPeer::varlen, pad) == 100 * 100 + 200 * 200);
  CHECK(torch_peer_mask_plan(TorchPeer::varlen, pad) == "sequences");
  CHECK(torch_peer_mask_plan(TorchPeer::flex, make_problem(1, 1, 1, 8, 8, 8)) == "none");
  CHECK(torch_peer_mask_plan(TorchPeer::sdpa_cudnn, make_problem(1, 1, 1, 8, 8, 8, {SlidingWindowTerm{-1, -1}})) == "none");
}

// ------------------------------------------------------------------ availability

TEST_CASE("availability: a missing interpreter or worker is unavailable with a reason") {
  clear_probe_cache();
  TempDir d;
  LaunchConfig c;
  c.python = "/nonexistent/python3";
  c.worker = kWorker;
  c.work_root = d.path;
  std::string why;
  TorchPeerBackend b(TorchPeer::flex, c);
  CHECK_FALSE(b.available(&why));
  CHECK(why.find("ATTNBENCH_PYTHON") != std::string::npos);
  CHECK(why.find("/nonexistent/python3") != std::string::npos);

  c.python = "/bin/sh";
  c.worker = d / "no_such_worker.py";
  TorchPeerBackend b2(TorchPeer::flex, c);
  why.clear();
  CHECK_FALSE(b2.available(&why));
  CHECK(why.find("not found") != std::string::npos);

  // A probe that prints no JSON: the reason carries the exit code and stderr.
  write_file(d / "broken.sh", "echo 'Traceback: something broke' >&2; exit 4\n");
  c.worker = d / "broken.sh";
  why.clear();
  CHECK_FALSE(TorchPeerBackend(TorchPeer::flex, c).available(&why));
  CHECK(why.find("code 4") != std::string::npos);
  CHECK(why.find("something broke") != std::string::npos);

  // A worker whose probe lists this peer as unusable.
  TempDir fix;
  const std::string w = write_fake_worker(fix);
  write_file(fix / "probe.json",
             R"({"ok": true, "peers": {"torch-varlen": {"ok": false, "reason": "varlen_attn missing"}}})");
  LaunchConfig fc = fake_config(fix, w);
  why.clear();
  CHECK(TorchPeerBackend(TorchPeer::flex, fc).available(&why));
  CHECK_FALSE(TorchPeerBackend(TorchPeer::varlen, fc).available(&why));
  CHECK(why == "varlen_attn missing");
  // Probes are cached per launch setup: the probe file no longer matters.
  fs::remove(fix / "probe.json");
  CHECK_FALSE(TorchPeerBackend(TorchPeer::varlen, fc).available(&why));
  clear_probe_cache();
  CHECK(TorchPeerBackend(TorchPeer::varlen, fc).available(&why));
}

TEST_CASE("availability: the real worker reports unsupported when torch cannot be imported or has no CUDA") {
  if (!have_python()) {
    MESSAGE("python3 not found: skipped");
    return;
  }
  clear_probe_cache();
  TempDir d;
  // A fake `torch` package first on PYTHONPATH shadows any real one.
  fs::create_directories(d / "notorch/torch");
  write_file(d / "notorch/torch/__init__.py", "raise ImportError('fake torch deliberately unusable')\n");
  fs::create_directories(d / "nocuda/torch");
  write_file(d / "nocuda/torch/__init__.py",
             "__version__ = '0.0-fake'\n"
             "class version:\n    cuda = None\n"
             "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
             "    @staticmethod\n    def device_count():\n        return 0\n");
  LaunchConfig c;
  c.python = "python3";
  c.worker = kWorker;
  c.work_root = d.path;
  c.env = {{"PYTHONPATH", d / "notorch"}};
  std::string why;
  CHECK_FALSE(TorchPeerBackend(TorchPeer::sdpa_flash, c).available(&why));
  CHECK(why.find("cannot import torch") != std::string::npos);
  CHECK(why.find("deliberately unusable") != std::string::npos);
  ProbeResult pr = probe(c);
  CHECK_FALSE(pr.ok);
  CHECK(pr.report["peers"]["torch-flex"]["ok"] == false);

  c.env = {{"PYTHONPATH", d / "nocuda"}};
  why.clear();
  CHECK_FALSE(TorchPeerBackend(TorchPeer::varlen, c).available(&why));
  CHECK(why.find("CUDA is not available") != std::string::npos);
  CHECK(why.find("0.0-fake") != std::string::npos);

  // A request reaching that worker answers unsupported, which prepare() raises.
  Problem p = make_problem(1, 2, 2, 16, 16, 8, {CausalTerm{}});
  ProblemData in = make_inputs(p);
  TorchPeerBackend b(TorchPeer::flex, c);
  try {
    b.prepare(p, in);
    FAIL("prepare() should throw Unsupported");
  } catch (const Unsupported& e) {
    CHECK(std::string(e.what()).find("CUDA is not available") != std::string::npos);
  }
  // The worker's own static rules answer before touching torch.
  Problem window = make_problem(1, 2, 2, 16, 16, 8, {SlidingWindowTerm{4, 0}});
  TorchPeerBackend flash(TorchPeer::sdpa_flash, c);
  try {
    flash.prepare(window, make_inputs(window));
    FAIL("prepare() should throw Unsupported");
  } catch (const Unsupported& e) {
    CHECK(std::string(e.what()) == torch_peer_supports(TorchPeer::sdpa_flash, window).reason);
  }
  CHECK(count_entries(d.path, "attnbench-peer-") == 0);  // work dirs cleaned up

  // The real worker's --serve loop: two requests, one process, answers on stdout
  // only (the worker's prints go to its stderr log), unsupported keeps it alive.
  // Started ahead with "#preload torch-flex" (the fake torch has no torch._dynamo:
  // the preload says so on stderr and the worker goes on), which gets no answer.
  stop_serve_workers();
  REQUIRE(serve_prestart(c, "torch-flex"));
  for (int i = 1; i <= 2; ++i) {
    TempDir wd;
    write_work_dir(wd.path, "torch-flex", p, in, RunContext{});
    ServeOutcome so = serve_request(c, wd / "request.json");
    REQUIRE(so.answered);
    CHECK_FALSE(so.started);
    CHECK(so.prestarted == (i == 1));
    CHECK(so.request_index == i);
    CHECK(so.reply["status"] == "unsupported");
    CHECK(so.reply["restart"] == false);
    CHECK(so.reply["served"] == i);
    json res = json::parse(read_file(wd / "result.json"));
    CHECK(res["status"] == "unsupported");
    CHECK(res["reason"].get<std::string>().find("CUDA is not available") != std::string::npos);
  }
  CHECK(serve_workers_alive() == 1);
  stop_serve_workers();
  CHECK(serve_workers_alive() == 0);

  // The default setup (python3 + the real worker) on this machine: if it is not
  // usable, it says why.
  clear_probe_cache();
  why.clear();
  if (!TorchFlex().available(&why)) {
    CHECK_FALSE(why.empty());
    MESSAGE("torch-flex unavailable here: " << why);
  }
}

// ------------------------------------------------------------------ round trips with a fake worker

TEST_CASE("round trip through a fake worker: files in, files out, results published") {
  TempDir fix;
  const std::string w = write_fake_worker(fix);
  Problem p = make_problem(2, 4, 2, 20, 20, 8, {CausalTerm{}}, mod_of(ScoreMod::Kind::rel_bias));
  ProblemData in = make_inputs(p);
  AttentionOutputs want = fake_outputs(p);
  fs::create_directories(fix / "out");
  write_outputs(fix / "out", want);
  write_file(fix / "result.json", ok_result().dump());

  TorchPeerBackend b(TorchPeer::flex, fake_config(fix, w));
  RunContext ctx;
  ctx.policy.cold = false;
  ctx.policy.min_samples = 9;
  b.configure(ctx.policy, ctx.backward, ctx.timing, ctx.determinism, ctx.device);
  CHECK(b.context().policy.min_samples == 9);
  clear_probe_cache();
  std::string why;
  REQUIRE(b.available(&why));
  REQUIRE(b.supports(p));
  CHECK(b.device() == Device::cuda);
  CHECK(b.name() == "torch-flex");

  auto inst = b.prepare(p, in);
  // What attnbench wrote, as the worker saw it.
  json req = json::parse(read_file(fix / "spy_request.json"));
  CHECK(req == make_request("torch-flex", p, ctx));
  CHECK(req["timing"]["cold"] == false);
  CHECK(req["timing"]["min_samples"] == 9);
  CHECK(req["timing"]["hold_stream"] == true);
  {
    ScopedEnv host_time("ATTNBENCH_PEER_HOLD_STREAM", "0");
    b.prepare(p, in);
    CHECK(json::parse(read_file(fix / "spy_request.json"))["timing"]["hold_stream"] == false);
  }
  CHECK(to_json(problem_from_json(json::parse(read_file(fix / "spy_problem.json")), "spy")) == to_json(p));
  CHECK(input_values(npy::read(fix / "spy_q.npy"), p.dtype) == in.q.data);
  // The work dir is gone.
  std::string work_dir = read_file(fix / "spy_dir");
  while (!work_dir.empty() && work_dir.back() == '\n') work_dir.pop_back();
  CHECK_FALSE(fs::exists(work_dir));
  CHECK(count_entries(fix / "work", "attnbench-peer-") == 0);

  // Poisoned until a pass publishes its results.
  inst->poison_outputs();
  AttentionOutputs got = inst->read_outputs(true);
  CHECK(all_nan(got.o.data));
  CHECK(all_nan(got.dq.data));
  CHECK(all_nan(got.dbias));
  inst->forward();
  got = inst->read_outputs(false);
  CHECK(same_values(got.o.data, want.o.data));
  CHECK(got.lse.data[0] == -std::numeric_limits<double>::infinity());
  CHECK_FALSE(got.has_grads());
  inst->backward();
  inst->synchronize();
  got = inst->read_outputs(true);
  CHECK(got.dq.data == want.dq.data);
  CHECK(got.dk.data == want.dk.data);
  CHECK(got.dv.data == want.dv.data);
  CHECK(got.dbias == want.dbias);
  inst->poison_outputs();
  CHECK(all_nan(inst->read_outputs(true).o.data));

  CHECK(*inst->external_samples_ms(0) == std::vector<double>{0.5, 0.25, 0.75});
  CHECK(*inst->external_samples_ms(1) == std::vector<double>{1.5});
  CHECK(*inst->external_samples_ms(2) == std::vector<double>{2.0, 2.5});
  CHECK(inst->external_deterministic() == true);
  CHECK(inst->executed_pairs() == 4242);  // the worker's figure wins over the estimate
  CHECK(inst->setup_ms() == doctest::Approx(7.25));
  CHECK(inst->allocated_bytes() == 1000);
  json ex = inst->extra();
  CHECK(ex["peer"] == "torch-flex");
  CHECK(ex["compile_ms"] == 1234.5);
  CHECK(ex["versions"]["torch"] == "fake");
  CHECK(ex["notes"] == json({"a note"}));
  CHECK(ex["executed_pairs_source"] == "worker");
  CHECK_FALSE(ex.contains("work_dir"));

  // Without executed_pairs and timings from the worker: the estimate, and empty
  // sample lists (the runner must not time the publishing no-ops).
  json r2 = ok_result();
  r2.erase("executed_pairs");
  r2.erase("timings_ms");
  r2.erase("deterministic");
  write_file(fix / "result.json", r2.dump());
  auto inst2 = b.prepare(p, in);
  CHECK(inst2->executed_pairs() == torch_peer_executed_pairs(TorchPeer::flex, p));
  REQUIRE(inst2->external_samples_ms(1));
  CHECK(inst2->external_samples_ms(1)->empty());
  CHECK_FALSE(inst2->external_deterministic());

  // Keeping the work dir (debugging) reports where it is.
  LaunchConfig keep = fake_config(fix, w);
  keep.keep_work_dir = true;
  TorchPeerBackend kb(TorchPeer::flex, keep);
  auto inst3 = kb.prepare(p, in);
  const std::string kept = inst3->extra()["work_dir"];
  CHECK(fs::exists(fs::path(kept) / "request.json"));
  CHECK(fs::exists(fs::path(kept) / "o.npy"));
}

TEST_CASE("worker outcomes map to unsupported, error, crashed and timeout") {
  TempDir fix;
  const std::string w = write_fake_worker(fix);
  Problem p = make_problem(1, 2, 1, 12, 12, 8);
  ProblemData in = make_inputs(p);
  LaunchConfig c = fake_config(fix, w);
  TorchPeerBackend b(TorchPeer::sdpa_cudnn, c);
  c.timeout_s = 0.5;
  TorchPeerBackend impatient(TorchPeer::sdpa_cudnn, c);
  auto outcome = [&](const std::string& mode) -> std::pair<std::string, std::string> {
    write_file(fix / "mode", mode);
    return outcome_of([&]() {
      (mode == "hang" ? impatient : b).prepare(p, in);
      return std::pair<std::string, std::string>{"none", ""};
    });
  };
  auto [k1, m1] = outcome("unsupported");
  CHECK(k1 == "unsupported");
  CHECK(m1 == "fake: no kernel for this");
  auto [k2, m2] = outcome("error");
  CHECK(k2 == "error");
  CHECK(m2.find("peer torch-sdpa-cudnn") != std::string::npos);
  CHECK(m2.find("fake: CUDA error: boom") != std::string::npos);
  CHECK(m2.find("fake traceback line") != std::string::npos);
  auto [k3, m3] = outcome("noresult");
  CHECK(k3 == "error");
  CHECK(m3.find("code 3") != std::string::npos);
  CHECK(m3.find("fake worker died early") != std::string::npos);
  auto [k4, m4] = outcome("crash");
  CHECK(k4 == "crashed");
  CHECK(m4.find("signal 9") != std::string::npos);
  auto [k5, m5] = outcome("hang");
  CHECK(k5 == "timeout");
  CHECK(m5.find("0.5 s") != std::string::npos);
  auto [k6, m6] = outcome("garbage");
  CHECK(k6 == "protocol");
  CHECK(m6.find("malformed JSON") != std::string::npos);
  // A compile-time resource error is unsupported with the reason; device OOM is an
  // error whose text the runner records as oom.
  auto [k7, m7] = outcome("resource");
  CHECK(k7 == "unsupported");
  CHECK(m7.find("compile-time resource limit") != std::string::npos);
  CHECK(m7.find("out of resource: shared memory") != std::string::npos);
  auto [k8, m8] = outcome("devoom");
  CHECK(k8 == "error");
  CHECK(m8.find("device out of memory") != std::string::npos);
  CHECK(count_entries(fix / "work", "attnbench-peer-") == 0);  // cleaned up on every path
}

TEST_CASE("persistent worker: one process serves the requests; failures restart it") {
  TempDir fix;
  const std::string w = write_fake_worker(fix);
  write_file(fix / "probe.json", R"({"protocol": 1, "ok": true, "serve": true, "peers": {}})");
  Problem p = make_problem(1, 2, 1, 12, 12, 8);
  ProblemData in = make_inputs(p);
  AttentionOutputs want = fake_outputs(p);
  fs::create_directories(fix / "out");
  write_outputs(fix / "out", want);
  write_file(fix / "result.json", ok_result().dump());
  LaunchConfig c = fake_config(fix, w);
  TorchPeerBackend b(TorchPeer::varlen, c);
  clear_probe_cache();
  stop_serve_workers();
  auto pids = [&]() {
    std::istringstream is(read_file(fix / "spy_serve_pids"));
    std::vector<std::string> v;
    for (std::string l; std::getline(is, l);) v.push_back(l);
    return v;
  };
  auto outcome = [&](const std::string& mode) -> std::pair<std::string, std::string> {
    write_file(fix / "mode", mode);
    return outcome_of([&]() {
      auto inst = b.prepare(p, in);
      inst->forward();
      CHECK(same_values(inst->read_outputs(false).o.data, want.o.data));
      return std::pair<std::string, std::string>{"ok", inst->extra().dump()};
    });
  };

  // Three requests, one process; a library's stdout chatter does not break the answers.
  auto [k1, e1] = outcome("ok");
  REQUIRE(k1 == "ok");
  CHECK(json::parse(e1)["worker_mode"] == "serve");
  CHECK(json::parse(e1)["worker_request_index"] == 1);
  CHECK(outcome("chatty").first == "ok");
  auto [k3, e3] = outcome("ok");
  REQUIRE(k3 == "ok");
  CHECK(json::parse(e3)["worker_request_index"] == 3);
  CHECK(pids().size() == 1);
  CHECK(serve_workers_alive() == 1);
  CHECK(count_entries(fix / "work", "attnbench-peer-") == 0);

  // unsupported keeps the process; error restarts it, and its message carries the
  // stderr of that request only.
  CHECK(outcome("unsupported") == std::pair<std::string, std::string>{"unsupported", "fake: no kernel for this"});
  CHECK(pids().size() == 1);
  auto [k5, m5] = outcome("error");
  CHECK(k5 == "error");
  CHECK(m5.find("fake: CUDA error: boom") != std::string::npos);
  CHECK(m5.find("fake traceback line") != std::string::npos);
  CHECK(m5.find("request 4 begins") == std::string::npos);
  CHECK(m5.find("request 5 begins") != std::string::npos);
  CHECK(serve_workers_alive() == 0);
  CHECK(outcome("ok").first == "ok");
  CHECK(pids().size() == 2);

  // A worker that exits without answering, one killed by a signal and one past the
  // timeout: each a row of its kind, and the next request gets a fresh process.
  auto [k7, m7] = outcome("noresult");
  CHECK(k7 == "error");
  CHECK(m7.find("exited with code 3 without answering") != std::string::npos);
  CHECK(m7.find("fake worker died early") != std::string::npos);
  CHECK(outcome("ok").first == "ok");
  auto [k9, m9] = outcome("crash");
  CHECK(k9 == "crashed");
  CHECK(m9.find("signal 9") != std::string::npos);
  c.timeout_s = 0.5;
  TorchPeerBackend impatient(TorchPeer::varlen, c);
  write_file(fix / "mode", "hang");
  CHECK_THROWS_AS(impatient.prepare(p, in), PeerTimeout);
  CHECK(serve_workers_alive() == 0);
  CHECK(outcome("ok").first == "ok");
  CHECK(pids().size() == 5);  // first, after error, after noresult, after crash, after the timeout
  CHECK(count_entries(fix / "work", "attnbench-peer-") == 0);

  // At the end the workers get EOF and exit; their log directories go.
  stop_serve_workers();
  CHECK(serve_workers_alive() == 0);
  CHECK(count_entries(fix / "work", "attnbench-serve-") == 0);
}

/// A fake worker whose requests answer ok with fake outputs for a small problem
/// `p`, no persistent worker alive and no probe cached: the start of the tests of
/// the persistent mode.
struct ServeFixture {
  TempDir fix;
  std::string w = write_fake_worker(fix);
  Problem p = make_problem(1, 2, 1, 12, 12, 8);
  ProblemData in = make_inputs(p);
  ServeFixture() {
    fs::create_directories(fix / "out");
    write_outputs(fix / "out", fake_outputs(p));
    write_file(fix / "result.json", ok_result().dump());
    stop_serve_workers();
    clear_probe_cache();
  }
};

TEST_CASE("persistent worker: warm_up starts it ahead of the first request and sends #preload PEER") {
  ServeFixture sf;
  TempDir& fix = sf.fix;
  const std::string& w = sf.w;
  const Problem& p = sf.p;
  const ProblemData& in = sf.in;
  TorchPeerBackend flex(TorchPeer::flex, fake_config(fix, w)), varlen(TorchPeer::varlen, fake_config(fix, w));
  flex.warm_up();  // the default probe offers no "serve": nothing starts
  CHECK(serve_workers_alive() == 0);
  write_file(fix / "probe.json", R"({"protocol": 1, "ok": true, "serve": true, "peers": {}})");
  clear_probe_cache();
  {
    ScopedEnv off("ATTNBENCH_PEER_SERVE", "0");
    flex.warm_up();
    CHECK(serve_workers_alive() == 0);
  }
  flex.warm_up();
  varlen.warm_up();  // the same launch setup: the same worker, a second line
  CHECK(serve_workers_alive() == 1);
  const json first = flex.prepare(p, in)->extra();
  CHECK(first["worker_mode"] == "serve");
  CHECK(first["worker_request_index"] == 1);
  CHECK(first["worker_prestarted"] == true);
  CHECK(read_file(fix / "spy_preload") == "#preload torch-flex\n#preload torch-varlen\n");
  const json second = varlen.prepare(p, in)->extra();
  CHECK(second["worker_request_index"] == 2);
  CHECK(second["worker_prestarted"] == false);
  std::istringstream pids(read_file(fix / "spy_serve_pids"));
  int n = 0;
  for (std::string l; std::getline(pids, l);) ++n;
  CHECK(n == 1);  // one process served the preloads and both requests
  stop_serve_workers();
  CHECK(serve_workers_alive() == 0);
}

TEST_CASE("persistent worker: ATTNBENCH_PEER_SERVE=0 or no \"serve\" in the probe means a process per request") {
  ServeFixture sf;
  TempDir& fix = sf.fix;
  const std::string& w = sf.w;
  const Problem& p = sf.p;
  const ProblemData& in = sf.in;
  TorchPeerBackend b(TorchPeer::varlen, fake_config(fix, w));
  CHECK(b.prepare(p, in)->extra()["worker_mode"] == "process");  // the default probe has no "serve"
  write_file(fix / "probe.json", R"({"protocol": 1, "ok": true, "serve": true, "peers": {}})");
  clear_probe_cache();
  {
    ScopedEnv off("ATTNBENCH_PEER_SERVE", "0");
    CHECK(b.launch_config().serve == 0);
    CHECK(b.prepare(p, in)->extra()["worker_mode"] == "process");
  }
  CHECK(b.launch_config().serve == 1);
  CHECK(b.prepare(p, in)->extra()["worker_mode"] == "serve");
  CHECK(fs::exists(fix / "spy_serve_pids"));
  stop_serve_workers();
}

TEST_CASE("runner end to end: a peer selected by the environment becomes a report row") {
  TempDir fix;
  const std::string w = write_fake_worker(fix);
  Problem p = make_problem(1, 2, 2, 16, 16, 8, {CausalTerm{}});
  fs::create_directories(fix / "out");
  write_outputs(fix / "out", fake_outputs(p));
  write_file(fix / "result.json", ok_result().dump());
  ScopedEnv e1("ATTNBENCH_PYTHON", "/bin/sh");
  ScopedEnv e2("ATTNBENCH_TORCH_WORKER", w);
  ScopedEnv e3("ATTNBENCH_PEER_WORKDIR", fix / "work");
  clear_probe_cache();

  Scenario s;
  s.name = "peers-e2e";
  Case c;
  c.id = "tiny-causal";
  c.problem = p;
  s.cases.push_back(c);
  RunOptions o;
  o.backends = {"torch-flex", "torch-sdpa-flash"};
  o.out_dir = fix / "report";
  o.check = CheckMode::off;
  RunSummary sum = run_scenario(s, o);
  CHECK(sum.rows == 2);
  CHECK(sum.unchecked == 2);  // --check off: ran, correctness unknown
  CHECK(sum.pass == 0);
  json rep = json::parse(read_file(fix / "report/report.json"));
  REQUIRE(rep["results"].size() == 2);
  for (const auto& row : rep["results"]) {
    CHECK(row["status"] == "unchecked");
    CHECK(row["timing"]["fwd"]["samples_ms"] == json({0.5, 0.25, 0.75}));
    CHECK(row["timing"]["fwd_bwd"]["n"] == 2);
    CHECK(row["extra"]["deterministic"] == true);
    CHECK(row["extra"]["backend"]["compile_ms"] == 1234.5);
    CHECK(row["work"]["executed_pairs"] == 4242);
  }
  clear_probe_cache();
}

// ------------------------------------------------------------------ the Python worker's stdlib parts

TEST_CASE("attnbench_torch: its mask port equals the harness mask") {
  if (!have_python()) {
    MESSAGE("python3 not found: skipped");
    return;
  }
  TempDir d;
  DocumentTerm ids;  // non-contiguous ids and padding
  ids.doc_ids = {{0, 0, 1, 1, 0, 0, 2, 2, 2, -1, -1, 3, 3, 3, 3, 3, 0, 0, 1, 1},
                 {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7, -1, -1}};
  const std::vector<Problem> problems = {
      make_problem(2, 2, 1, 20, 33, 8, {CausalTerm{CausalAlign::bottom_right}}),
      make_problem(2, 2, 1, 33, 20, 8, {CausalTerm{CausalAlign::top_left}}),
      make_problem(1, 1, 1, 40, 50, 8, {SlidingWindowTerm{5, 3}}),
      make_problem(1, 1, 1, 40, 40, 8, {CausalTerm{}, SlidingWindowTerm{7, -1}}),
      make_problem(2, 1, 1, 20, 20, 8, {CausalTerm{}, ids}),
      make_problem(2, 1, 1, 30, 30, 8, {document_term_from_lengths({{10, 0, 12}, {30}}, 30)}),
      make_problem(1, 1, 1, 30, 30, 8, {PrefixLmTerm{9}}),
      make_problem(2, 1, 1, 30, 40, 8, {CausalTerm{}, PaddingTerm{{20, 30}, {25, 40}}}),
      make_problem(1, 1, 1, 300, 400, 8, {BlockSparseTerm{0.4, 0x8000000000000005ULL}}),
      make_problem(1, 1, 1, 260, 260, 8, {CausalTerm{}, BlockSparseTerm{0.7, 12345}, PrefixLmTerm{100}}),
  };
  std::vector<std::string> argv = {"python3", kWorker, "--dump-mask"};
  for (size_t n = 0; n < problems.size(); ++n) {
    argv.push_back(d / ("problem" + std::to_string(n) + ".json"));
    write_file(argv.back(), to_json(problems[n]).dump());
  }
  ProcessResult r = run_process(argv, {}, 300, 1, d / "out.jsonl", d / "err.txt");
  REQUIRE(r.exit_code == 0);
  std::ifstream lines(d / "out.jsonl");
  std::string line;
  size_t n = 0;
  while (std::getline(lines, line)) {
    REQUIRE(n < problems.size());
    const Problem& p = problems[n];
    CAPTURE(n);
    CAPTURE(describe_mask(p));
    json j = json::parse(line);
    CHECK(j["problem"] == argv[3 + n]);
    std::vector<uint8_t> want = materialize_mask(p);
    REQUIRE(j["rows"].size() == static_cast<size_t>(p.batch * p.seq_q));
    size_t idx = 0, mismatches = 0;
    for (const auto& row : j["rows"]) {
      const std::string bits = row.get<std::string>();
      REQUIRE(bits.size() == static_cast<size_t>(p.seq_k));
      for (char ch : bits) mismatches += (ch == '1') != (want[idx++] != 0);
    }
    CHECK(mismatches == 0);
    ++n;
  }
  CHECK(n == problems.size());
}

TEST_CASE("attnbench_torch: its static rules equal the C++ rules, reasons included") {
  if (!have_python()) {
    MESSAGE("python3 not found: skipped");
    return;
  }
  TempDir d;
  DocumentTerm split;
  split.doc_ids = {std::vector<int32_t>(32, 0)};
  for (int i = 10; i < 20; ++i) split.doc_ids[0][i] = 1;
  Problem dv = make_problem(1, 2, 2, 32, 32, 64);
  dv.head_dim_v = 32;
  const std::vector<Problem> problems = {
      make_problem(2, 4, 2, 32, 32, 16),
      make_problem(1, 2, 2, 16, 32, 16, {CausalTerm{CausalAlign::bottom_right}}),
      make_problem(1, 2, 2, 16, 32, 16, {CausalTerm{CausalAlign::top_left}}),
      make_problem(1, 2, 2, 32, 32, 16, {SlidingWindowTerm{8, 0}, CausalTerm{}}),
      make_problem(2, 2, 2, 32, 32, 16, {CausalTerm{}, document_term_from_lengths({{10, 22}, {32}}, 32)}),
      make_problem(1, 2, 2, 32, 32, 16, {split}),
      make_problem(2, 2, 2, 32, 32, 16, {PaddingTerm{{10, 32}, {12, 32}}, CausalTerm{CausalAlign::top_left}}),
      make_problem(1, 2, 2, 32, 32, 16, {PrefixLmTerm{4}, BlockSparseTerm{0.5, 1}}),
      make_problem(1, 2, 2, 32, 32, 16, {}, mod_of(ScoreMod::Kind::softcap)),
      make_problem(1, 2, 2, 32, 32, 16, {}, mod_of(ScoreMod::Kind::offset_bias)),
      make_problem(2, 2, 2, 32, 32, 16, {}, {}, Layout::thd),
      make_problem(1, 2, 2, 32, 32, 16, {}, {}, Layout::bhsd, DType::fp32),
      dv,
  };
  const TorchPeer all[] = {TorchPeer::sdpa_flash, TorchPeer::sdpa_cudnn, TorchPeer::sdpa_efficient, TorchPeer::flex,
                           TorchPeer::varlen};
  std::vector<std::string> argv = {"python3", kWorker, "--support", "all"};
  for (size_t n = 0; n < problems.size(); ++n) {
    argv.push_back(d / ("problem" + std::to_string(n) + ".json"));
    write_file(argv.back(), to_json(problems[n]).dump());
  }
  ProcessResult r = run_process(argv, {}, 300, 1, d / "out.jsonl", d / "err.txt");
  REQUIRE(r.exit_code == 0);
  std::ifstream lines(d / "out.jsonl");
  std::string line;
  size_t n = 0;
  int rejected = 0;
  while (std::getline(lines, line)) {
    REQUIRE(n < problems.size());
    json j = json::parse(line);
    for (TorchPeer k : all) {
      CAPTURE(n);
      CAPTURE(torch_peer_name(k));
      const json& v = j["verdicts"][torch_peer_name(k)];
      Support s = torch_peer_supports(k, problems[n]);
      CHECK(v["ok"] == s.ok);
      CHECK(v["reason"] == s.reason);
      rejected += s.ok ? 0 : 1;
    }
    ++n;
  }
  CHECK(n == problems.size());
  CHECK(rejected >= 20);  // the table exercises most rules
}

// ------------------------------------------------------------------ the worker's torch code on the CPU

namespace {

/// An interpreter that imports torch and numpy ($ATTNBENCH_TEST_TORCH_PYTHON, else
/// python3, else /usr/bin/python3), or "" when there is none.
std::string torch_python() {
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("ATTNBENCH_TEST_TORCH_PYTHON"); e && *e) candidates.push_back(e);
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  TempDir d;
  for (const auto& py : candidates) {
    ProcessResult r = run_process({py, "-c", "import torch, numpy"}, {}, 300, 1, d / "o", d / "e");
    if (r.launched && r.exit_code == 0) return py;
  }
  return "";
}

}  // namespace

TEST_CASE("attnbench_torch end to end on the CPU (stand-in kernels): C++ -> worker -> C++ -> correctness rule") {
  const std::string py = torch_python();
  if (py.empty()) {
    MESSAGE("no python3 with torch and numpy (set ATTNBENCH_TEST_TORCH_PYTHON): skipped");
    return;
  }
  TempDir d;
  LaunchConfig c;
  c.python = py;
  c.worker = std::string(ATTNBENCH_SOURCE_DIR) + "/backends/peers/attnbench_torch/cpu_check.py";
  c.work_root = d.path;
  c.timeout_s = 600;
  RunContext ctx;
  ctx.timing = true;
  ctx.policy.warmup = 0;
  ctx.policy.min_samples = 1;
  ctx.policy.max_samples = 2;
  ctx.policy.max_seconds = 0.05;
  struct Item {
    TorchPeer kind;
    Problem p;
  };
  const std::vector<Item> items = {
      // Dense boolean attn_mask with fully masked (padding) rows; LSE by the side computation.
      {TorchPeer::sdpa_efficient, make_problem(2, 4, 2, 96, 96, 32, {CausalTerm{}, document_term_from_lengths({{40, 30}, {96}}, 96)})},
      // BlockMask + learnable bias gradients, bhsd layout, Sq != Sk.
      {TorchPeer::flex, make_problem(1, 4, 2, 64, 80, 32, {CausalTerm{}, PaddingTerm{{50}, {70}}},
                                     mod_of(ScoreMod::Kind::rel_bias), Layout::bhsd)},
      // Packed documents with a window, padding tokens outside every sequence.
      {TorchPeer::varlen, make_problem(2, 4, 1, 96, 96, 32, {SlidingWindowTerm{16, 0}, document_term_from_lengths({{30, 50}, {20, 70}}, 96)})},
  };
  for (const auto& it : items) {
    CAPTURE(torch_peer_name(it.kind));
    TorchPeerBackend b(it.kind, c);
    b.set_context(ctx);
    REQUIRE(b.supports(it.p));
    ProblemData in = make_inputs(it.p);
    auto inst = b.prepare(it.p, in);
    inst->poison_outputs();
    inst->forward();
    inst->backward();
    AttentionOutputs got = inst->read_outputs(true);
    AttentionOutputs gold = reference::gold(it.p, in, true);
    AttentionOutputs lp = reference::lp(it.p, in, true);
    CheckResult cr = check_outputs(it.p, got, gold, lp, b.rule(), reference::SliceSet::every());
    for (const auto& t : cr.tensors) {
      CAPTURE(t.name);
      CAPTURE(t.max_abs_err);
      CAPTURE(t.tolerance);
      CHECK(t.pass);
    }
    CHECK(cr.pass);
    CHECK(inst->external_deterministic() == true);
    for (int pass = 0; pass < 3; ++pass) {
      REQUIRE(inst->external_samples_ms(pass));
      CHECK_FALSE(inst->external_samples_ms(pass)->empty());
    }
    json ex = inst->extra();
    CHECK(ex["peer"] == torch_peer_name(it.kind));
    CHECK(ex["versions"].contains("torch"));
    CHECK(ex["timing_info"]["fwd"]["hold_stream"] == false);  // no spin kernel on the CPU
    CHECK(ex["timing_info"]["bwd"]["host_enqueue_ms_median"].is_number());
    if (it.kind == TorchPeer::sdpa_efficient) CHECK(ex["lse_source"].get<std::string>().find("side computation") == 0);
    if (it.kind == TorchPeer::varlen) CHECK(ex["notes"].dump().find("4 sequences") != std::string::npos);
  }
  CHECK(count_entries(d.path, "attnbench-peer-") == 0);
}

TEST_CASE("classify_peer_error: compile-time resource limits are unsupported, device OOM stays oom") {
  using attnbench::peers::classify_peer_error;
  using attnbench::peers::PeerErrorClass;
  CHECK(classify_peer_error("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: "
                            "262144, Hardware limit: 232448. Reducing block sizes or `num_stages` may help.") ==
        PeerErrorClass::unsupported);
  CHECK(classify_peer_error("InductorError: out of resource: registers") == PeerErrorClass::unsupported);
  CHECK(classify_peer_error("CUDA error: too many resources requested for launch") == PeerErrorClass::unsupported);
  // A resource error whose stderr tail also mentions memory is still a compile-time limit.
  CHECK(classify_peer_error("OutOfResources: shared memory\nstderr: ... out of memory hint") ==
        PeerErrorClass::unsupported);
  CHECK(classify_peer_error("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB") ==
        PeerErrorClass::oom);
  CHECK(classify_peer_error("cudaErrorMemoryAllocation") == PeerErrorClass::oom);
  CHECK(classify_peer_error("CUBLAS_STATUS_ALLOC_FAILED") == PeerErrorClass::oom);
  CHECK(classify_peer_error("RuntimeError: CUDA error: an illegal memory access was encountered") ==
        PeerErrorClass::error);
  CHECK(classify_peer_error("") == PeerErrorClass::error);
}
