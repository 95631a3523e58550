// Child processes: see process.hpp.
#include "harness/device/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

extern char** environ;

namespace attnbench {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// The status waitid() reports of an ended child.
ChildStatus from_siginfo(const siginfo_t& info) {
  ChildStatus s;
  if (info.si_code == CLD_EXITED) {
    s.exited = true;
    s.exit_code = info.si_status;
  } else {
    s.signal = info.si_status;  // CLD_KILLED, CLD_DUMPED
  }
  return s;
}

}  // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGTRAP: return "SIGTRAP";
    case SIGPIPE: return "SIGPIPE";
    case SIGSYS: return "SIGSYS";
    case SIGXCPU: return "SIGXCPU";
    default: return "signal " + std::to_string(sig);
  }
}

std::string describe(const ChildStatus& s) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f", s.seconds);
  if (s.timed_out) return std::string("ran past its time limit and was killed after ") + buf + " s";
  if (s.stopped) return "was stopped (this run was interrupted)";
  if (s.exited) return "exited with code " + std::to_string(s.exit_code);
  return "was killed by " + signal_name(s.signal) + " (signal " + std::to_string(s.signal) + ")";
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::pair<std::string, std::string>>& env, const ChildIo& io) {
  if (argv.empty() || argv[0].empty()) throw std::system_error(ENOENT, std::generic_category(), "cannot start an empty command");
  std::vector<std::string> envs;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    bool overridden = kv.rfind("ATTNBENCH_PARENT_PID=", 0) == 0 || kv.rfind("ATTNBENCH_PARENT=", 0) == 0;
    for (const auto& [k, v] : env) overridden = overridden || kv.rfind(k + "=", 0) == 0;
    if (!overridden) envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  // The parent handshake of follow_parent(): the read end of a pipe whose only
  // write end this process holds, at fd kParentFd, named with its inode in
  // ATTNBENCH_PARENT (a stale copy of the variable names no such pipe).
  int fds[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  if (fds[0] == kParentFd) {  // dup2 onto itself would keep FD_CLOEXEC
    const int moved = ::fcntl(fds[0], F_DUPFD_CLOEXEC, kParentFd + 1);
    ::close(fds[0]);
    fds[0] = moved;
  }
  parent_pipe_ = fds[1];
  struct stat pst{};
  ::fstat(fds[0], &pst);
  envs.push_back("ATTNBENCH_PARENT=" + std::to_string(::getpid()) + ":" + std::to_string(kParentFd) + ":" +
                 std::to_string(static_cast<unsigned long long>(pst.st_ino)));
  std::vector<char*> av, ev;
  for (const auto& a : argv) av.push_back(const_cast<char*>(a.c_str()));
  av.push_back(nullptr);
  for (auto& e : envs) ev.push_back(e.data());
  ev.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  if (io.stdio_fd >= 0) {  // dup2 clears close-on-exec on 0 and 1
    posix_spawn_file_actions_adddup2(&fa, io.stdio_fd, STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&fa, io.stdio_fd, STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, io.stdout_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
  }
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, io.stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_NOFOLLOW | (io.stderr_append ? O_APPEND : O_TRUNC), 0644);
  posix_spawn_file_actions_adddup2(&fa, fds[0], kParentFd);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);  // own process group: a timeout kills its helpers too
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  t0_ = now_s();
  const int rc = posix_spawnp(&pid_, av[0], &fa, &attr, av.data(), ev.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(fds[0]);
  if (rc != 0) {
    ::close(parent_pipe_);
    throw std::system_error(rc, std::generic_category(), "cannot start " + argv[0]);
  }
#ifdef SYS_pidfd_open
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
#endif
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !done_) (void)kill_group(0.5);
  if (pid_ > 0) reap();
  if (pidfd_ >= 0) ::close(pidfd_);
  if (parent_pipe_ >= 0) ::close(parent_pipe_);
}

std::optional<ChildStatus> ChildProcess::poll() {
  if (done_) return done_;
  siginfo_t info{};
  info.si_pid = 0;
  // WNOWAIT: the child stays a zombie, so its id (the group's id) is not reused
  // before end_group() has signalled the group.
  while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == EINTR) continue;
    done_ = ChildStatus{};  // ECHILD: reaped elsewhere (SIGCHLD ignored): gone, status unknown
    done_->exited = true;
    done_->seconds = now_s() - t0_;
    reaped_ = true;
    return done_;
  }
  if (info.si_pid == pid_) {
    done_ = from_siginfo(info);
    done_->seconds = now_s() - t0_;
  }
  return done_;
}

void ChildProcess::reap() {
  if (reaped_) return;
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  if (!done_) {  // never seen ended (the caller signalled and reaps at once)
    ChildStatus s;
    if (WIFEXITED(st)) s.exited = true, s.exit_code = WEXITSTATUS(st);
    else if (WIFSIGNALED(st)) s.signal = WTERMSIG(st);
    s.seconds = now_s() - t0_;
    done_ = s;
  }
}

std::optional<ChildStatus> ChildProcess::wait_for(int ms) {
  if (auto s = poll()) return s;
  if (pidfd_ >= 0) {
    struct pollfd p{pidfd_, POLLIN, 0};
    (void)::poll(&p, 1, ms);  // EINTR (a stop signal) just returns early
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms < 0 || ms > 5 ? 5 : ms));
  }
  return poll();
}

void ChildProcess::signal_group(int sig) {
  if (!done_) ::kill(-pid_, sig);
}

ChildStatus ChildProcess::kill_group(double grace_s) {
  if (poll()) return *done_;
  return end_group(true, grace_s);
}

ChildStatus ChildProcess::end_group(bool terminate, double grace_s) {
  if (reaped_) return *done_;
  if (terminate && !poll()) ::kill(-pid_, SIGTERM);
  const double t_end = now_s() + grace_s;
  while (!poll() && now_s() < t_end) (void)wait_for(20);
  ::kill(-pid_, SIGKILL);  // whatever is left of the group (the child itself may be a zombie: harmless)
  reap();
  return *done_;
}

ChildStatus wait_child(ChildProcess& c, double timeout_s, const std::function<bool()>& stop, double grace_s) {
  const double t_end = timeout_s > 0 ? now_s() + timeout_s : 0;
  for (;;) {
    int ms = 200;
    if (timeout_s > 0) {
      const double left = t_end - now_s();
      if (left <= 0) {
        ChildStatus s = c.kill_group(grace_s);
        s.timed_out = true;
        return s;
      }
      ms = static_cast<int>(left * 1000) + 1 < ms ? static_cast<int>(left * 1000) + 1 : ms;
    }
    if (auto s = c.wait_for(ms)) return *s;
    if (stop && stop()) {
      ChildStatus s = c.kill_group(grace_s);
      s.stopped = true;
      return s;
    }
  }
}

void follow_parent(int sig) {
  const char* v = std::getenv("ATTNBENCH_PARENT");
  ::unsetenv("ATTNBENCH_PARENT_PID");  // the old, forgeable form: never followed
  if (!v || !*v) return;
  unsigned long long pid = 0, fd = 0, ino = 0;
  const bool parsed = std::sscanf(v, "%llu:%llu:%llu", &pid, &fd, &ino) == 3;
  struct stat st{};
  // Genuine only when the named fd is the pipe of that inode: a stale variable
  // (inherited from a run long gone, or set by hand) names no such pipe.
  const bool genuine = parsed && fd == static_cast<unsigned long long>(kParentFd) &&
                       ::fstat(kParentFd, &st) == 0 && S_ISFIFO(st.st_mode) &&
                       static_cast<unsigned long long>(st.st_ino) == ino;
  ::unsetenv("ATTNBENCH_PARENT");  // not for this process's own children
  if (!genuine) return;
  ::fcntl(kParentFd, F_SETFD, FD_CLOEXEC);
  ::prctl(PR_SET_PDEATHSIG, sig);
  struct pollfd p{kParentFd, POLLIN, 0};
  if (::poll(&p, 1, 0) == 1 && (p.revents & POLLHUP)) std::raise(sig);  // the parent died before prctl
}

bool is_regular_file_path(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error(std::string("cannot resolve /proc/self/exe: ") + std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

std::string tail_of_file(const std::string& path, int max_lines, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = size > static_cast<std::streamoff>(max_bytes) ? size - static_cast<std::streamoff>(max_bytes) : 0;
  in.seekg(from);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  size_t pos = s.size();
  for (int i = 0; i < max_lines && pos != std::string::npos && pos > 0; ++i) pos = s.rfind('\n', pos - 1);
  if (pos != std::string::npos && pos < s.size() && s[pos] == '\n') s = s.substr(pos + 1);
  return s;
}

}  // namespace attnbench
