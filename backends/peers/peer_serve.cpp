// The persistent worker pool (peer_serve.hpp).
#include "backends/peers/peer_serve.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>

namespace attnbench::peers {

namespace fs = std::filesystem;
using nlohmann::json;

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
    out.prestarted = prestarted_ && out.request_index == 1;
    std::string answer;
    bool eof = !send_line(path);
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

  /// Start the worker now if it is not running and send "#preload PEER": it
  /// imports what PEER's first request needs and answers nothing (serve.py).
  bool prestart(const std::string& peer) {
    if (!alive()) {
      ProcessResult ignored;
      if (!start(ignored)) return false;
      prestarted_ = true;
    }
    return send_line("#preload " + peer);
  }

  /// EOF on the worker's stdin, then the group ends (SIGKILL after the grace time).
  void stop() {
    if (!alive()) return;
    shutdown(fd_, SHUT_WR);
    ProcessResult ignored;
    kill_worker(false, ignored);
  }

 private:
  /// `text` and a newline to the worker; false when it is gone (reaped by the caller).
  bool send_line(const std::string& text) {
    const std::string line = text + "\n";
    size_t sent = 0;
    while (sent < line.size()) {
      const ssize_t n = send(fd_, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

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
    prestarted_ = false;
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
  bool prestarted_ = false;  ///< started by prestart(), not by a request
};

std::mutex& serve_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::unique_ptr<ServeWorker>>& serve_pool() {
  static std::map<std::string, std::unique_ptr<ServeWorker>> pool;
  return pool;
}

}  // namespace

ServeOutcome serve_request(const LaunchConfig& cfg, const std::string& request_path) {
  const LaunchConfig c = resolve_launch_config(cfg);
  std::lock_guard<std::mutex> lock(serve_mutex());
  auto& w = serve_pool()[launch_key(c)];
  if (!w) w = std::make_unique<ServeWorker>(c);
  return w->request(request_path, c.timeout_s, c.kill_grace_s);
}

bool serve_prestart(const LaunchConfig& cfg, const std::string& peer) {
  try {
    const LaunchConfig c = resolve_launch_config(cfg);
    std::lock_guard<std::mutex> lock(serve_mutex());
    auto& w = serve_pool()[launch_key(c)];
    if (!w) w = std::make_unique<ServeWorker>(c);
    return w->prestart(peer);
  } catch (const std::exception&) {  // best effort: the first request starts it instead
    return false;
  }
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

}  // namespace attnbench::peers
