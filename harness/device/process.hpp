// Child processes, the one module for every process attnbench starts: the
// isolated units, --gpus shards and plugin probes of `attnbench run`
// (harness/run/), and the PyTorch peers' workers (backends/peers/). Each child
// runs in its own process group (a timeout or a kill ends what it started
// too), learns of its parent's death (follow_parent()) and is reaped by its
// ChildProcess. The run's stop flag and --out lock are in harness/run/process.hpp.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnbench {

/// How a child process ended.
struct ChildStatus {
  bool exited = false;     ///< exited normally with exit_code
  int exit_code = -1;
  int signal = 0;          ///< killed by this signal (when !exited)
  bool timed_out = false;  ///< killed by us after its time limit
  bool stopped = false;    ///< killed by us because this process was asked to stop
  double seconds = 0;      ///< wall time from start to end
};

/// "killed by SIGSEGV (signal 11)", "exited with code 3", "ran past 5 s and was killed".
std::string describe(const ChildStatus& s);
/// "SIGSEGV" for 11, ..., "signal N" for others.
std::string signal_name(int sig);

/// Where a child's standard streams go.
struct ChildIo {
  std::string stdout_path;     ///< created or truncated (O_NOFOLLOW); unused when stdio_fd >= 0
  std::string stderr_path;     ///< created; truncated unless stderr_append
  bool stderr_append = false;  ///< append to stderr_path (a persistent worker's log)
  int stdio_fd = -1;           ///< >= 0: the child's stdin and stdout (one end of a socketpair); else
                               ///< stdin is /dev/null
};

/// A child process started with posix_spawnp (argv[0] without a '/' is looked
/// up in PATH) in its own process group (so a timeout kills what it started
/// too), SIGINT/SIGTERM/SIGPIPE/SIGHUP/SIGCHLD at their default actions and no
/// signal blocked, the parent's environment plus `env` overrides and the
/// follow_parent() handshake. Its end is noticed without reaping it (the
/// group's id stays reserved until end_group() or the destructor reaps it).
/// Its destructor kills and reaps a child still running.
class ChildProcess {
 public:
  /// `argv[0]` is the program. Throws std::system_error (a std::runtime_error,
  /// its code the errno of posix_spawnp) naming it when it cannot be started.
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
               const ChildIo& io);
  /// stdin /dev/null, stdout and stderr to these files (truncated).
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
               const std::string& stdout_path, const std::string& stderr_path)
      : ChildProcess(argv, env, ChildIo{stdout_path, stderr_path}) {}
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  pid_t pid() const { return pid_; }
  /// The status once ended (non-blocking), else std::nullopt.
  std::optional<ChildStatus> poll();
  /// Block up to `ms` milliseconds (-1: no limit) for the child to end or a
  /// signal to arrive; then poll().
  std::optional<ChildStatus> wait_for(int ms);
  /// Send `sig` to the child's process group.
  void signal_group(int sig);
  /// A child still running: SIGTERM to the group, SIGKILL after `grace_s`,
  /// reap; the status says how it ended. A child that had ended: its status
  /// (what is left of its group is not touched).
  ChildStatus kill_group(double grace_s);
  /// End the group whether or not the child has ended: SIGTERM to it first
  /// when `terminate`, up to `grace_s` for the child to end, then SIGKILL to
  /// whatever is left of the group (helpers it started), and reap.
  ChildStatus end_group(bool terminate, double grace_s);

 private:
  void reap();
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int parent_pipe_ = -1;  ///< write end of the parent handshake (follow_parent())
  double t0_ = 0;
  bool reaped_ = false;
  std::optional<ChildStatus> done_;
};

/// Wait for `c`: up to `timeout_s` (<= 0: no limit), killing its group after it
/// (timed_out) or when `stop()` turns true (stopped).
ChildStatus wait_child(ChildProcess& c, double timeout_s, const std::function<bool()>& stop, double grace_s = 2.0);

/// The fd at which a child started by ChildProcess finds the read end of its
/// parent's handshake pipe.
constexpr int kParentFd = 3;

/// In a child started by ChildProcess (ATTNBENCH_PARENT = "pid:fd:inode" naming
/// the handshake pipe at kParentFd, whose only write end the parent holds): ask
/// the kernel to send `sig` to this process when that parent dies
/// (PR_SET_PDEATHSIG), so a parent killed with -9 leaves no orphan holding a GPU
/// or hanging forever; if the parent is already gone (the pipe hung up), raise
/// `sig` now. A variable that names no such pipe (stale, inherited from
/// elsewhere, or the old ATTNBENCH_PARENT_PID) is ignored: no-op outside such a
/// child. Removes the variables from this process's environment.
void follow_parent(int sig);

/// Whether `path` names a regular file (following symlinks); false for FIFOs,
/// sockets, devices, folders and missing files. Never blocks (stat only).
bool is_regular_file_path(const std::string& path);

/// The running attnbench binary (/proc/self/exe). Throws std::runtime_error.
std::string self_executable();

/// The last `max_lines` lines (at most `max_bytes`) of a text file; "" if unreadable.
std::string tail_of_file(const std::string& path, int max_lines = 20, size_t max_bytes = 4000);

}  // namespace attnbench
