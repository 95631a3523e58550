// Out-of-process peer backends: process launch, the file protocol of
// docs/peers.md, and the five PyTorch peers (see peer_backend.hpp).
#include "backends/peers/peer_backend.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>

#include "harness/device/process.hpp"
#include "harness/model/block_mask.hpp"
#include "harness/model/json_util.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/npy.hpp"
#include "harness/model/thread_pool.hpp"

extern char** environ;

namespace attnbench::peers {

PeerErrorClass classify_peer_error(const std::string& message) {
  auto has = [&](const char* k) { return message.find(k) != std::string::npos; };
  if (has("out of resource") || has("OutOfResources") || has("too many resources requested for launch") ||
      has("cudaErrorLaunchOutOfResources"))
    return PeerErrorClass::unsupported;
  if (has("out of memory") || has("OutOfMemory") || has("cudaErrorMemoryAllocation") || has("ALLOC_FAILED"))
    return PeerErrorClass::oom;
  return PeerErrorClass::error;
}

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::mutex& context_mutex() {
  static std::mutex m;
  return m;
}
RunContext& context_storage() {
  static RunContext c;
  return c;
}

/// A fresh directory under `root`, removed on destruction unless `keep`.
class WorkDir {
 public:
  WorkDir(const std::string& root, const std::string& prefix, bool keep) : keep_(keep) {
    std::error_code ec;
    fs::create_directories(root, ec);
    std::string templ = (fs::path(root) / (prefix + "XXXXXX")).string();
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
      throw std::runtime_error("cannot create a peer work directory under " + root + ": " + std::strerror(errno));
    path_ = buf.data();
  }
  ~WorkDir() {
    if (keep_) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return (fs::path(path_) / name).string(); }
  bool kept() const { return keep_; }

 private:
  std::string path_;
  bool keep_;
};

/// "\n<label>: <tail>" when the tail is non-empty.
std::string with_tail(const std::string& label, const std::string& tail) {
  return tail.empty() ? std::string() : "\n" + label + ":\n" + tail;
}

/// A duration in seconds as short text ("600", "0.5").
std::string seconds_text(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

const char* pass_key(int i) {
  static const char* keys[] = {"fwd", "bwd", "fwd_bwd"};
  return keys[i];
}

}  // namespace

// ------------------------------------------------------------------ configuration

LaunchConfig resolve_launch_config(const LaunchConfig& in) {
  LaunchConfig c = in;
  if (c.python.empty()) c.python = env_or("ATTNBENCH_PYTHON", "python3");
  if (c.worker.empty())
    c.worker = env_or("ATTNBENCH_TORCH_WORKER", std::string(ATTNBENCH_SOURCE_DIR) + "/backends/peers/attnbench_torch/__main__.py");
  if (!(c.timeout_s > 0)) {
    c.timeout_s = 600;
    const std::string t = env_or("ATTNBENCH_PEER_TIMEOUT", "");
    if (!t.empty()) {
      char* end = nullptr;
      const double v = std::strtod(t.c_str(), &end);
      if (end && *end == '\0' && v > 0) c.timeout_s = v;
    }
  }
  if (!(c.probe_timeout_s > 0)) c.probe_timeout_s = 180;
  if (!(c.kill_grace_s >= 0)) c.kill_grace_s = 5;
  if (c.work_root.empty()) {
    std::error_code ec;
    fs::path tmp = fs::temp_directory_path(ec);
    c.work_root = env_or("ATTNBENCH_PEER_WORKDIR", ec ? std::string("/tmp") : tmp.string());
  }
  if (!c.keep_work_dir) c.keep_work_dir = env_or("ATTNBENCH_PEER_KEEP", "0") == "1";
  if (c.serve < 0) c.serve = env_or("ATTNBENCH_PEER_SERVE", "1") == "0" ? 0 : 1;
  return c;
}

void set_default_run_context(const RunContext& ctx) {
  std::lock_guard<std::mutex> lock(context_mutex());
  context_storage() = ctx;
}

RunContext default_run_context() {
  std::lock_guard<std::mutex> lock(context_mutex());
  return context_storage();
}

// ------------------------------------------------------------------ processes

namespace {

/// A ProcessResult's exit code and signal from how the child ended.
void take_status(const ChildStatus& st, ProcessResult& r) {
  r.exit_code = st.exited ? st.exit_code : -1;
  r.signal = st.exited ? 0 : st.signal;
}

}  // namespace

ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::vector<std::pair<std::string, std::string>>& env, double timeout_s,
                          double kill_grace_s, const std::string& stdout_path, const std::string& stderr_path) {
  ProcessResult r;
  if (argv.empty() || argv[0].empty()) {
    r.error = "empty command";
    return r;
  }
  std::optional<ChildProcess> child;
  try {
    child.emplace(argv, env, ChildIo{stdout_path, stderr_path});
  } catch (const std::system_error& e) {
    r.error = e.code().message();
    return r;
  }
  r.launched = true;
  ChildStatus st = wait_child(*child, timeout_s, nullptr, kill_grace_s);
  r.timed_out = st.timed_out;
  if (!st.timed_out) st = child->end_group(false, kill_grace_s);  // after a normal exit: what is left of the group
  take_status(st, r);
  r.wall_s = st.seconds;
  return r;
}

std::string file_tail(const std::string& path, size_t max_chars, size_t from) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  if (from > 0) f.seekg(static_cast<std::streamoff>(from));
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  if (s.size() > max_chars) s = "..." + s.substr(s.size() - max_chars);
  return s;
}

// ------------------------------------------------------------------ persistent workers

namespace {

/// One `PYTHON WORKER --serve` process (docs/peers.md "Persistent workers"): one
/// end of a socketpair is its stdin and stdout (request paths in, one JSON answer
/// line out), stderr appends to a log file in its own directory.
class ServeWorker {
 public:
  explicit ServeWorker(const LaunchConfig& c) : c_(c) {}
  ~ServeWorker() { stop(); }
  ServeWorker(const ServeWorker&) = delete;
  ServeWorker& operator=(const ServeWorker&) = delete;

  bool alive() const { return child_ != nullptr; }

  /// One request; `timeout_s` and `grace_s` are the caller's (not the starter's).
  ServeOutcome request(const std::string& path, double timeout_s, double grace_s) {
    c_.timeout_s = timeout_s;
    c_.kill_grace_s = grace_s;
    ServeOutcome out;
    const auto t0 = std::chrono::steady_clock::now();
    if (!alive()) {
      if (!start(out.process)) return out;
      out.started = true;
    }
    out.process.launched = true;
    out.stderr_path = log_path_;
    std::error_code ec;
    const auto size = fs::file_size(log_path_, ec);
    out.stderr_offset = ec ? 0 : static_cast<size_t>(size);
    out.request_index = ++served_;
    const std::string line = path + "\n";
    size_t sent = 0;
    while (sent < line.size()) {
      const ssize_t n = send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the worker is gone: reaped below
      sent += static_cast<size_t>(n);
    }
    std::string answer;
    bool eof = sent < line.size();
    while (!eof) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        answer = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        break;
      }
      const double left = c_.timeout_s - seconds_since(t0);
      if (left <= 0) {
        out.process.timed_out = true;
        kill_worker(true, out.process);
        out.process.wall_s = seconds_since(t0);
        return out;
      }
      pollfd pfd{fd_, POLLIN, 0};
      const int pr = poll(&pfd, 1, static_cast<int>(std::min(left * 1000.0, 1000.0)) + 1);
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) continue;
      char tmp[4096];
      const ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
      if (n > 0) {
        buf_.append(tmp, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        eof = true;
      }
    }
    if (eof) {  // died or exited without answering: its exit code or signal says how
      kill_worker(false, out.process);
      out.process.wall_s = seconds_since(t0);
      return out;
    }
    out.process.wall_s = seconds_since(t0);
    try {
      out.reply = json::parse(answer);
    } catch (const json::parse_error&) {
      out.reply = nullptr;
    }
    if (!out.reply.is_object() || out.reply.value("request", std::string()) != path) {
      // Not the protocol: restart rather than trust what comes next.
      ProcessResult ignored;
      kill_worker(true, ignored);
      out.process.error = "the persistent worker answered \"" + answer.substr(0, 300) + "\" instead of {\"request\": \"" +
                          path + "\", ...}";
      return out;
    }
    out.answered = true;
    out.process.exit_code = out.reply.value("exit_code", 0);
    if (out.reply.value("restart", false)) {
      ProcessResult ignored;
      kill_worker(false, ignored);  // it exits by itself after saying so
    }
    return out;
  }

  /// EOF on the worker's stdin, then the group ends (SIGKILL after the grace time).
  void stop() {
    if (!alive()) return;
    shutdown(fd_, SHUT_WR);
    ProcessResult ignored;
    kill_worker(false, ignored);
  }

 private:
  bool start(ProcessResult& r) {
    if (!dir_) dir_ = std::make_unique<WorkDir>(c_.work_root, "attnbench-serve-", c_.keep_work_dir);
    log_path_ = dir_->file("worker.stderr.txt");
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      r.error = std::string("socketpair: ") + std::strerror(errno);
      return false;
    }
    ChildIo io;
    io.stdio_fd = sv[1];
    io.stderr_path = log_path_;
    io.stderr_append = true;
    try {
      child_ = std::make_unique<ChildProcess>(std::vector<std::string>{c_.python, c_.worker, "--serve"}, c_.env, io);
    } catch (const std::system_error& e) {
      close(sv[1]);
      close(sv[0]);
      r.error = e.code().message();
      return false;
    }
    close(sv[1]);
    fd_ = sv[0];
    served_ = 0;
    buf_.clear();
    return true;
  }

  void kill_worker(bool terminate, ProcessResult& r) {
    if (!alive()) return;
    if (!terminate) shutdown(fd_, SHUT_WR);  // a worker between requests exits on EOF
    take_status(child_->end_group(terminate, c_.kill_grace_s), r);
    child_.reset();
    close(fd_);
    fd_ = -1;
  }

  LaunchConfig c_;
  std::unique_ptr<WorkDir> dir_;
  std::string log_path_, buf_;
  std::unique_ptr<ChildProcess> child_;
  int fd_ = -1;
  int served_ = 0;
};

std::mutex& serve_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::unique_ptr<ServeWorker>>& serve_pool() {
  static std::map<std::string, std::unique_ptr<ServeWorker>> pool;
  return pool;
}

/// The key of a launch setup (probe cache and persistent workers).
std::string launch_key(const LaunchConfig& c) {
  std::string key = c.python + '\n' + c.worker;
  for (const auto& [k, v] : c.env) key += '\n' + k + '=' + v;
  return key;
}

}  // namespace

ServeOutcome serve_request(const LaunchConfig& cfg, const std::string& request_path) {
  const LaunchConfig c = resolve_launch_config(cfg);
  std::lock_guard<std::mutex> lock(serve_mutex());
  auto& w = serve_pool()[launch_key(c)];
  if (!w) w = std::make_unique<ServeWorker>(c);
  return w->request(request_path, c.timeout_s, c.kill_grace_s);
}

void stop_serve_workers() {
  std::lock_guard<std::mutex> lock(serve_mutex());
  serve_pool().clear();
}

size_t serve_workers_alive() {
  std::lock_guard<std::mutex> lock(serve_mutex());
  size_t n = 0;
  for (const auto& [k, w] : serve_pool()) n += w && w->alive();
  return n;
}

// ------------------------------------------------------------------ protocol: request

json make_request(const std::string& peer, const Problem& p, const RunContext& ctx) {
  json r;
  r["protocol"] = kProtocolVersion;
  r["peer"] = peer;
  r["problem"] = "problem.json";
  json inputs = {{"q", "q.npy"}, {"k", "k.npy"}, {"v", "v.npy"}, {"do", "do.npy"}};
  if (p.has_learnable_bias()) inputs["bias"] = "bias.npy";
  if (p.offset_numel() > 0) inputs["offset"] = "offset.npy";
  r["inputs"] = inputs;
  r["backward"] = ctx.backward;
  json passes = json::array();
  if (ctx.timing) {
    passes.push_back("fwd");
    if (ctx.backward) {
      passes.push_back("bwd");
      passes.push_back("fwd_bwd");
    }
  }
  r["passes"] = passes;
  r["timing"] = ctx.policy.to_json();
  r["timing"]["hold_stream"] = ctx.hold_stream;
  r["determinism"] = ctx.determinism;
  r["device"] = ctx.device;
  r["result"] = "result.json";
  if (ctx.options.is_object() && !ctx.options.empty()) r["options"] = ctx.options;
  return r;
}

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  f << text;
  f.close();
  if (!f) throw std::runtime_error("cannot write " + path);
}

/// Write input `t` as float32 when every value is a float32 (make_inputs rounds
/// to the problem dtype: bf16 / fp16 / fp32 values are), else float64: half the
/// bytes the worker reads (a B32 S512 H16 D64 row wrote 537 MB of float64).
void write_tensor(const std::string& path, const HostTensor& t, const std::vector<int64_t>& want, const char* name) {
  if (t.shape != want || static_cast<int64_t>(t.data.size()) != t.numel())
    throw std::invalid_argument(std::string("peer inputs: ") + name + " does not have the problem's shape");
  std::vector<float> f(t.data.size());
  std::atomic<bool> exact{true};
  parallel_chunks(f.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end && exact.load(std::memory_order_relaxed); ++i) {
      f[i] = static_cast<float>(t.data[i]);
      if (static_cast<double>(f[i]) != t.data[i]) exact.store(false);  // not a float32 (or NaN)
    }
  });
  if (exact.load()) npy::write(path, t.shape, f.data());
  else npy::write(path, t.shape, t.data.data());  // keep float64
}

std::vector<int64_t> bias_shape(const Problem& p) {
  if (p.score_mod.kind == ScoreMod::Kind::rel_bias) return {p.heads_q, 2 * p.score_mod.max_distance + 1};
  return {p.bias_numel()};
}

}  // namespace

void write_work_dir(const std::string& dir, const std::string& peer, const Problem& p, const ProblemData& in,
                    const RunContext& ctx) {
  const fs::path d(dir);
  write_tensor((d / "q.npy").string(), in.q, {p.batch, p.heads_q, p.seq_q, p.head_dim}, "q");
  write_tensor((d / "k.npy").string(), in.k, {p.batch, p.heads_kv, p.seq_k, p.head_dim}, "k");
  write_tensor((d / "v.npy").string(), in.v, {p.batch, p.heads_kv, p.seq_k, p.head_dim_v}, "v");
  write_tensor((d / "do.npy").string(), in.d_o, {p.batch, p.heads_q, p.seq_q, p.head_dim_v}, "do");
  if (p.has_learnable_bias()) {
    if (static_cast<int64_t>(in.bias.size()) != p.bias_numel())
      throw std::invalid_argument("peer inputs: bias has " + std::to_string(in.bias.size()) + " elements, expected " +
                                  std::to_string(p.bias_numel()));
    npy::write((d / "bias.npy").string(), bias_shape(p), in.bias.data());
  }
  if (p.offset_numel() > 0) {
    if (static_cast<int64_t>(in.offset.size()) != p.offset_numel())
      throw std::invalid_argument("peer inputs: offset has the wrong length");
    std::vector<int64_t> off(in.offset.begin(), in.offset.end());
    npy::write((d / "offset.npy").string(), {p.offset_numel()}, off.data());
  }
  write_text((d / "problem.json").string(), to_json(p).dump(1) + "\n");
  write_text((d / "request.json").string(), make_request(peer, p, ctx).dump(1) + "\n");
}

// ------------------------------------------------------------------ protocol: result

namespace {

[[noreturn]] void bad_result(const std::string& file, const std::string& field, const std::string& what) {
  throw PeerProtocolError(file + (field.empty() ? std::string() : ": " + field) + ": " + what);
}

std::optional<double> opt_number(const json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number()) bad_result(file, std::string("/") + key, "expected a number or null, got " + j[key].dump());
  return j[key].get<double>();
}

/// Output `key` of shape `shape` (or, with `allow_flat`, the same elements as one
/// dimension) as float64.
HostTensor read_output(const std::string& dir, const json& outputs, const char* key, const std::vector<int64_t>& shape,
                       const std::string& result_file, bool allow_flat = false) {
  std::string name = std::string(key) + ".npy";
  if (outputs.contains(key)) {
    if (!outputs[key].is_string()) bad_result(result_file, std::string("/outputs/") + key, "expected a file name");
    name = outputs[key].get<std::string>();
  }
  const fs::path path = fs::path(name).is_absolute() ? fs::path(name) : fs::path(dir) / name;
  npy::Array a;
  try {
    a = npy::read(path.string(), key);
  } catch (const std::exception& e) {
    throw PeerProtocolError(std::string("peer output ") + key + ": " + e.what());
  }
  if (!npy::is_float(a.dtype))
    throw PeerProtocolError(path.string() + ": " + key + " must be float64 or float32, got " + npy::descr(a.dtype));
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  const bool flat_ok = (shape.size() == 1 || allow_flat) && a.shape.size() == 1 && a.numel() == numel;
  if (a.shape != shape && !flat_ok) {
    std::string want = "(";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    want += shape.size() == 1 ? ",)" : ")";
    throw PeerProtocolError(path.string() + ": " + key + " has shape " + a.shape_str() + ", expected " + want);
  }
  HostTensor t;
  t.shape = shape;
  t.data = a.to_double();
  return t;
}

}  // namespace

PeerResult read_result(const std::string& dir, const Problem& p, bool with_grads) {
  const std::string file = (fs::path(dir) / "result.json").string();
  std::ifstream f(file, std::ios::binary);
  if (!f) throw PeerProtocolError(file + ": cannot read (the worker wrote no result)");
  PeerResult r;
  std::stringstream contents;
  contents << f.rdbuf();
  try {
    r.raw = jsonu::parse_text(contents.str(), file);  // depth limit, finite numbers, unique keys
  } catch (const InputError& e) {
    throw PeerProtocolError(e.what());  // names the file, pointer and value
  }
  const json& j = r.raw;
  if (!j.is_object()) bad_result(file, "", "expected a JSON object");
  if (j.contains("protocol") && j["protocol"] != kProtocolVersion)
    bad_result(file, "/protocol", "protocol " + j["protocol"].dump() + ", expected " + std::to_string(kProtocolVersion));
  if (!j.contains("status") || !j["status"].is_string()) bad_result(file, "/status", "missing or not a string");
  r.status = j["status"].get<std::string>();
  if (r.status != "ok" && r.status != "unsupported" && r.status != "error")
    bad_result(file, "/status", "expected ok, unsupported or error, got \"" + r.status + "\"");
  auto text = [&](const char* key) -> std::string {
    if (!j.contains(key) || j[key].is_null()) return {};
    if (!j[key].is_string()) bad_result(file, std::string("/") + key, "expected a string");
    return j[key].get<std::string>();
  };
  r.reason = text("reason");
  r.message = text("message");
  if (r.status == "unsupported" && r.reason.empty()) r.reason = "the peer reported unsupported without a reason";
  if (r.status == "error" && r.message.empty()) r.message = "the peer reported an error without a message";

  if (j.contains("timings_ms") && !j["timings_ms"].is_null()) {
    const json& t = j["timings_ms"];
    if (!t.is_object()) bad_result(file, "/timings_ms", "expected an object {fwd, bwd, fwd_bwd}");
    for (auto it = t.begin(); it != t.end(); ++it)
      if (it.key() != "fwd" && it.key() != "bwd" && it.key() != "fwd_bwd")
        bad_result(file, "/timings_ms/" + it.key(), "unknown pass (expected fwd, bwd or fwd_bwd)");
    for (int i = 0; i < 3; ++i) {
      if (!t.contains(pass_key(i)) || t[pass_key(i)].is_null()) continue;
      const json& a = t[pass_key(i)];
      const std::string path = std::string("/timings_ms/") + pass_key(i);
      if (!a.is_array()) bad_result(file, path, "expected an array of milliseconds");
      std::vector<double> v;
      for (size_t n = 0; n < a.size(); ++n) {
        if (!a[n].is_number()) bad_result(file, path + "/" + std::to_string(n), "expected a number, got " + a[n].dump());
        const double x = a[n].get<double>();
        if (!std::isfinite(x) || x < 0)
          bad_result(file, path + "/" + std::to_string(n), "expected a finite non-negative time, got " + a[n].dump());
        v.push_back(x);
      }
      r.samples[i] = std::move(v);
    }
  }
  r.compile_ms = opt_number(j, "compile_ms", file);
  r.setup_ms = opt_number(j, "setup_ms", file);
  if (j.contains("deterministic") && !j["deterministic"].is_null()) {
    if (!j["deterministic"].is_boolean()) bad_result(file, "/deterministic", "expected true, false or null");
    r.deterministic = j["deterministic"].get<bool>();
  }
  if (j.contains("executed_pairs") && !j["executed_pairs"].is_null()) {
    if (!j["executed_pairs"].is_number_integer() || j["executed_pairs"].get<int64_t>() < 0)
      bad_result(file, "/executed_pairs", "expected a non-negative integer");
    r.executed_pairs = j["executed_pairs"].get<int64_t>();
  }
  if (j.contains("memory") && j["memory"].is_object() && j["memory"].contains("allocated_bytes") &&
      j["memory"]["allocated_bytes"].is_number_integer())
    r.allocated_bytes = j["memory"]["allocated_bytes"].get<int64_t>();

  if (r.status != "ok") return r;
  const json outputs = j.contains("outputs") && j["outputs"].is_object() ? j["outputs"] : json::object();
  r.outputs.o = read_output(dir, outputs, "o", {p.batch, p.heads_q, p.seq_q, p.head_dim_v}, file);
  r.outputs.lse = read_output(dir, outputs, "lse", {p.batch, p.heads_q, p.seq_q}, file);
  if (with_grads) {
    r.outputs.dq = read_output(dir, outputs, "dq", {p.batch, p.heads_q, p.seq_q, p.head_dim}, file);
    r.outputs.dk = read_output(dir, outputs, "dk", {p.batch, p.heads_kv, p.seq_k, p.head_dim}, file);
    r.outputs.dv = read_output(dir, outputs, "dv", {p.batch, p.heads_kv, p.seq_k, p.head_dim_v}, file);
    if (p.has_learnable_bias()) r.outputs.dbias = read_output(dir, outputs, "dbias", bias_shape(p), file, true).data;
  }
  return r;
}

// ------------------------------------------------------------------ probe

bool ProbeResult::peer_ok(const std::string& peer, std::string* why) const {
  if (!ok) {
    if (why) *why = reason;
    return false;
  }
  if (report.is_object() && report.contains("peers") && report["peers"].is_object() && report["peers"].contains(peer)) {
    const json& e = report["peers"][peer];
    if (e.is_object() && e.value("ok", true) == false) {
      if (why) *why = e.value("reason", std::string("the worker reports this peer unavailable"));
      return false;
    }
  }
  return true;
}

namespace {

std::mutex& probe_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, ProbeResult>& probe_cache() {
  static std::map<std::string, ProbeResult> c;
  return c;
}

ProbeResult run_probe(const LaunchConfig& c) {
  ProbeResult r;
  std::error_code ec;
  if (!fs::is_regular_file(c.worker, ec)) {
    r.reason = "peer worker script not found: " + c.worker + " (set ATTNBENCH_TORCH_WORKER)";
    return r;
  }
  WorkDir tmp(c.work_root, "attnbench-probe-", false);
  const std::string out = tmp.file("probe.stdout.txt"), err = tmp.file("probe.stderr.txt");
  ProcessResult pr = run_process({c.python, c.worker, "--probe"}, c.env, c.probe_timeout_s, c.kill_grace_s, out, err);
  if (!pr.launched) {
    r.reason = "cannot run the Python interpreter \"" + c.python + "\" (set ATTNBENCH_PYTHON): " + pr.error;
    return r;
  }
  if (pr.timed_out) {
    r.reason = c.worker + " --probe did not answer within " + seconds_text(c.probe_timeout_s) + " s";
    return r;
  }
  // The report is the last line of stdout that parses as a JSON object.
  std::ifstream f(out);
  std::string line, last_json;
  while (std::getline(f, line))
    if (!line.empty() && line.front() == '{') last_json = line;
  try {
    if (!last_json.empty()) r.report = json::parse(last_json);
  } catch (const json::parse_error&) {
    r.report = nullptr;
  }
  if (!r.report.is_object()) {
    r.reason = "\"" + c.python + " " + c.worker + " --probe\" exited with " +
               (pr.signal ? "signal " + std::to_string(pr.signal) : "code " + std::to_string(pr.exit_code)) +
               " without a JSON report" + with_tail("stderr", file_tail(err, 800));
    return r;
  }
  r.ok = r.report.value("ok", false) == true && pr.exit_code == 0;
  if (!r.ok) {
    r.reason = r.report.value("reason", std::string());
    if (r.reason.empty()) r.reason = "the worker's probe failed (exit code " + std::to_string(pr.exit_code) + ")";
  }
  return r;
}

}  // namespace

ProbeResult probe(const LaunchConfig& cfg) {
  const LaunchConfig c = resolve_launch_config(cfg);
  const std::string key = launch_key(c);
  std::lock_guard<std::mutex> lock(probe_mutex());
  auto it = probe_cache().find(key);
  if (it != probe_cache().end()) return it->second;
  ProbeResult r;
  try {
    r = run_probe(c);
  } catch (const std::exception& e) {
    r.ok = false;
    r.reason = std::string("probe failed: ") + e.what();
  }
  probe_cache()[key] = r;
  return r;
}

void clear_probe_cache() {
  std::lock_guard<std::mutex> lock(probe_mutex());
  probe_cache().clear();
}

// ------------------------------------------------------------------ the backend

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

int64_t PeerBackend::estimate_executed_pairs(const Problem& p) const {
  return p.batch * p.heads_q * p.seq_q * p.seq_k;
}

std::unique_ptr<BackendInstance> PeerBackend::prepare(const Problem& p, const ProblemData& inputs) {
  const LaunchConfig c = resolve_launch_config(cfg_);
  RunContext ctx = context();
  ctx.options = options_json();  // the variant, in the request (never in the environment)
  if (!ctx.policy.hold_stream || env_or("ATTNBENCH_PEER_HOLD_STREAM", "1") == "0") ctx.hold_stream = false;
  WorkDir wd(c.work_root, "attnbench-peer-", c.keep_work_dir);
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

// ------------------------------------------------------------------ PyTorch peers

const char* torch_peer_name(TorchPeer k) {
  switch (k) {
    case TorchPeer::sdpa_flash: return "torch-sdpa-flash";
    case TorchPeer::sdpa_cudnn: return "torch-sdpa-cudnn";
    case TorchPeer::sdpa_efficient: return "torch-sdpa-efficient";
    case TorchPeer::flex: return "torch-flex";
    case TorchPeer::varlen: return "torch-varlen";
  }
  return "torch-unknown";
}

namespace {

/// Per row, whether every document id >= 0 forms one contiguous run.
bool documents_contiguous(const DocumentTerm& d) {
  for (const auto& row : d.doc_ids) {
    std::set<int32_t> seen;
    int32_t prev = -2;
    for (int32_t id : row) {
      if (id != prev && id >= 0 && !seen.insert(id).second) return false;
      prev = id;
    }
  }
  return true;
}

/// True when the flattened mask restricts any (b, i, j) (mirrors Problem.has_mask()).
bool restricts(const Problem& p) {
  MaskArrays arrays;
  const MaskDesc m = make_mask_desc(p, arrays);
  return m.upper_tl != kNoBound || m.upper_br != kNoBound || m.lower_br != -kNoBound || m.prefix_len >= 0 ||
         m.doc_ids != nullptr || m.seq_lens_q != nullptr || m.block_density >= 0.0;
}

std::string description_of(TorchPeer k) {
  switch (k) {
    case TorchPeer::sdpa_flash:
      return "PyTorch F.scaled_dot_product_attention restricted to FLASH_ATTENTION (out-of-process peer)";
    case TorchPeer::sdpa_cudnn:
      return "PyTorch F.scaled_dot_product_attention restricted to CUDNN_ATTENTION (out-of-process peer)";
    case TorchPeer::sdpa_efficient:
      return "PyTorch F.scaled_dot_product_attention restricted to EFFICIENT_ATTENTION (out-of-process peer)";
    case TorchPeer::flex:
      return "PyTorch flex_attention under torch.compile with a BlockMask (out-of-process peer)";
    case TorchPeer::varlen:
      return "PyTorch torch.nn.attention.varlen.varlen_attn on packed sequences (out-of-process peer)";
  }
  return "PyTorch peer";
}

}  // namespace

Support torch_peer_supports(TorchPeer k, const Problem& p) {
  const std::string name = torch_peer_name(k);
  const bool flash = k == TorchPeer::sdpa_flash, cudnn = k == TorchPeer::sdpa_cudnn, varlen = k == TorchPeer::varlen;
  if (!varlen && p.layout == Layout::thd)
    return Support::no(name + " runs on padded [B, H, S, D] tensors; the thd layout is served by torch-varlen");
  if ((flash || cudnn || varlen) && p.dtype == DType::fp32)
    return Support::no(name + " supports fp16 and bf16 only (got fp32)");
  if (k != TorchPeer::flex && p.score_mod.kind != ScoreMod::Kind::none)
    return Support::no(std::string("score_mod ") + to_string(p.score_mod.kind) +
                       " needs torch-flex: F.scaled_dot_product_attention and varlen_attn take no score_mod");
  if ((flash || varlen) && p.head_dim != p.head_dim_v)
    return Support::no(name + " (FlashAttention) needs head_dim == head_dim_v (got " + std::to_string(p.head_dim) +
                       " and " + std::to_string(p.head_dim_v) + ")");
  const auto* causal = p.find_mask<CausalTerm>();
  if (flash) {
    std::string others;
    for (const auto& m : p.mask)
      if (!std::holds_alternative<CausalTerm>(m)) others += (others.empty() ? "" : ", ") + std::string(mask_kind_name(m));
    if (!others.empty())
      return Support::no("the flash backend of F.scaled_dot_product_attention takes no attn_mask, only is_causal (mask has " +
                         others + ")");
    if (causal && causal->align == CausalAlign::bottom_right && p.seq_q != p.seq_k)
      return Support::no("bottom-right causal with seq_q != seq_k: F.scaled_dot_product_attention's is_causal is "
                         "top-left and the flash backend takes no attn_mask");
  }
  if (varlen) {
    std::string bad;
    for (const auto& m : p.mask)
      if (std::holds_alternative<PrefixLmTerm>(m) || std::holds_alternative<BlockSparseTerm>(m))
        bad += (bad.empty() ? "" : ", ") + std::string(mask_kind_name(m));
    if (!bad.empty())
      return Support::no("varlen_attn supports causal, sliding_window, document and padding masks only (mask has " + bad + ")");
    const auto* doc = p.find_mask<DocumentTerm>();
    if (doc && p.find_mask<PaddingTerm>())
      return Support::no("varlen_attn: a document mask together with a padding mask is not supported");
    if (doc && !documents_contiguous(*doc))
      return Support::no("document ids are not contiguous runs: varlen_attn needs one sequence per document");
    if (causal && causal->align == CausalAlign::top_left && !doc)
      for (int64_t b = 0; b < p.batch; ++b)
        if (p.valid_q(b) != p.valid_k(b))
          return Support::no("top-left causal with query length != key length: varlen_attn (FlashAttention) "
                             "aligns the causal diagonal bottom-right");
  }
  return Support::yes();
}

std::string torch_peer_mask_plan(TorchPeer k, const Problem& p) {
  if (k == TorchPeer::varlen) return "sequences";
  if (!restricts(p)) return "none";
  if (k == TorchPeer::flex) return "block_mask";
  const auto* causal = p.find_mask<CausalTerm>();
  if (p.mask.size() == 1 && causal && (p.seq_q == p.seq_k || causal->align == CausalAlign::top_left)) return "is_causal";
  return "dense";
}

int64_t torch_peer_executed_pairs(TorchPeer k, const Problem& p) {
  const int64_t dense = p.batch * p.heads_q * p.seq_q * p.seq_k;
  try {
    if (k == TorchPeer::varlen) {
      // Sequences as the worker (attnbench_torch/peers/varlen.py) builds them: documents, else rows of valid lengths.
      std::vector<std::pair<int64_t, int64_t>> seqs;
      if (const auto* doc = p.find_mask<DocumentTerm>()) {
        for (const auto& row : doc->doc_ids) {
          size_t t = 0;
          while (t < row.size()) {
            size_t e = t;
            while (e < row.size() && row[e] == row[t]) ++e;
            if (row[t] >= 0) seqs.emplace_back(static_cast<int64_t>(e - t), static_cast<int64_t>(e - t));
            t = e;
          }
        }
      } else {
        for (int64_t b = 0; b < p.batch; ++b)
          if (p.valid_q(b) > 0) seqs.emplace_back(p.valid_q(b), p.valid_k(b));
      }
      std::map<std::pair<int64_t, int64_t>, int64_t> memo;
      int64_t total = 0;
      for (const auto& s : seqs) {
        auto it = memo.find(s);
        if (it == memo.end()) {
          Problem q;
          q.batch = 1;
          q.heads_q = q.heads_kv = 1;
          q.seq_q = s.first;
          q.seq_k = s.second;
          q.head_dim = p.head_dim;
          q.head_dim_v = p.head_dim_v;
          if (p.find_mask<CausalTerm>()) q.mask.push_back(CausalTerm{CausalAlign::bottom_right});
          if (const auto* w = p.find_mask<SlidingWindowTerm>()) q.mask.push_back(*w);
          it = memo.emplace(s, build_block_mask(q, 128, 128).executed_pairs_per_head(1)).first;
        }
        total += it->second;
      }
      return total * p.heads_q;
    }
    if (torch_peer_mask_plan(k, p) == "dense") return dense;
    return build_block_mask(p, 128, 128).executed_pairs_per_head(p.batch) * p.heads_q;
  } catch (const std::exception&) {
    return dense;
  }
}

OptionSpecs torch_peer_option_specs(TorchPeer k) {
  if (k != TorchPeer::flex) return {};
  return {OptionSpec::choice("compile_mode", "default", {"default", "max-autotune-no-cudagraphs", "max-autotune"},
                             "torch.compile mode of flex_attention (max-autotune: Triton autotuning of the kernel)")};
}

TorchPeerBackend::TorchPeerBackend(TorchPeer kind, LaunchConfig cfg)
    : PeerBackend(torch_peer_name(kind), torch_peer_name(kind), description_of(kind), std::move(cfg)), kind_(kind) {}

// One line each (harness/backend/backend.hpp).
ATTNBENCH_REGISTER_BACKEND(TorchSdpaFlash);
ATTNBENCH_REGISTER_BACKEND(TorchSdpaCudnn);
ATTNBENCH_REGISTER_BACKEND(TorchSdpaEfficient);
ATTNBENCH_REGISTER_BACKEND(TorchFlex);
ATTNBENCH_REGISTER_BACKEND(TorchVarlen);

}  // namespace attnbench::peers
