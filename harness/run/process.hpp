// Process plumbing of `attnbench run` beside its child processes
// (harness/device/process.hpp, included here): the SIGINT/SIGTERM stop flag and
// the lock of an --out directory.
#pragma once

#include <string>

#include "harness/device/process.hpp"

namespace attnbench {

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
