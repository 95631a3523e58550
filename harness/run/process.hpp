// Process plumbing of `attnbench run`: child processes of the attnbench binary
// (crash isolation of one (case, backend) unit, and one shard per GPU for
// --gpus), the SIGINT/SIGTERM stop flag, and the lock of an --out directory.
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

/// A child process started with posix_spawn in its own process group (so a
/// timeout kills what it started too), stdout and stderr to files, the parent's
/// environment plus `env` overrides. Its destructor kills and reaps a child
/// still running.
class ChildProcess {
 public:
  /// `argv[0]` is the program path. Throws std::runtime_error naming it when it
  /// cannot be started.
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
               const std::string& stdout_path, const std::string& stderr_path);
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
  /// SIGTERM to the group, SIGKILL after `grace_s`, reap; the status says how it ended.
  ChildStatus kill_group(double grace_s);

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int parent_pipe_ = -1;  ///< write end of the parent handshake (follow_parent())
  double t0_ = 0;
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

/// Install SIGINT and SIGTERM handlers that only record the signal (the first
/// one; a second signal of the same kind gets the default action, so a second
/// Ctrl-C still kills). The runner polls stop_signal() between rows.
void install_stop_handlers();
/// The signal that asked this process to stop, or 0.
int stop_signal();
/// Forget a recorded signal (tests).
void clear_stop_signal();

/// An exclusive lock on an --out directory: DIR/.attnbench.lock, flock()ed and
/// holding the owner's pid. A lock whose holder died is released by the kernel
/// and taken over (with a warning on stderr naming the dead pid).
class OutDirLock {
 public:
  /// Throws InputError (exit 2) naming the directory and the holder's pid when
  /// another process holds it, or naming the lock file when it cannot be created.
  explicit OutDirLock(const std::string& dir);
  ~OutDirLock();
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace attnbench
