// Child processes and work directories of the peers: one worker run with a
// timeout (on harness/device/process.hpp, the process module the runner uses too),
// the temporary work directory of a request, and the log-tail helpers that error
// messages quote.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "harness/device/process.hpp"

namespace attnbench::peers {

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

/// A ProcessResult's exit code and signal from how the child ended.
void take_status(const ChildStatus& st, ProcessResult& r);

/// "\n<label>:\n<tail>" when `tail` is non-empty, else "" (stderr tails in messages).
std::string with_tail(const std::string& label, const std::string& tail);

/// A duration in seconds as short text ("600", "0.5").
std::string seconds_text(double s);

/// Seconds elapsed since `t0` on the steady clock.
double seconds_since(std::chrono::steady_clock::time_point t0);

/// A fresh directory `root/<prefix>XXXXXX` (mkdtemp; `root` is created when
/// missing), removed with its contents on destruction unless `keep`. Throws
/// std::runtime_error naming `root` and the system error when it cannot be made.
class WorkDir {
 public:
  WorkDir(const std::string& root, const std::string& prefix, bool keep);
  ~WorkDir();
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  /// The directory.
  const std::string& path() const { return path_; }
  /// path()/name.
  std::string file(const std::string& name) const;
  /// Whether the destructor leaves the directory in place.
  bool kept() const { return keep_; }

 private:
  std::string path_;
  bool keep_;
};

}  // namespace attnbench::peers
