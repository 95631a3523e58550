// The run's stop flag and --out lock: see process.hpp.
#include "harness/run/process.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "harness/model/errors.hpp"

namespace attnbench {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal == 0) g_stop_signal = sig;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // no SA_RESTART: a blocking wait returns early; a second signal kills
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal() { return g_stop_signal; }
void clear_stop_signal() { g_stop_signal = 0; }

namespace {

/// The fds of the --out locks this process holds. A child made by fork()
/// without exec (plugin code, a library) closes them at once (pthread_atfork),
/// so it never keeps DIR locked after this run ends; exec'd children never get
/// them (O_CLOEXEC).
int g_lock_fds[8] = {-1, -1, -1, -1, -1, -1, -1, -1};

extern "C" void close_locks_in_forked_child() {
  for (int& fd : g_lock_fds)
    if (fd >= 0) ::close(fd), fd = -1;
}

void remember_lock_fd(int fd, bool add) {
  static const bool registered = ::pthread_atfork(nullptr, nullptr, close_locks_in_forked_child) == 0;
  (void)registered;
  for (int& slot : g_lock_fds)
    if (add ? slot < 0 : slot == fd) {
      slot = add ? fd : -1;
      return;
    }
}

}  // namespace

OutDirLock::OutDirLock(const std::string& dir) {
  const std::string path = dir + "/.attnbench.lock";
  // O_NONBLOCK: a FIFO planted there never blocks the open; it is refused below.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd_ < 0) throw InputError(dir, "", "cannot create the lock file " + path + ": " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(path, "", "the lock file is not a regular file (a FIFO, socket or device?); remove it");
  }
  char buf[32] = {0};
  const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
  const long holder = n > 0 ? std::strtol(buf, nullptr, 10) : 0;
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw InputError(dir, "", "another attnbench run is writing into this directory (pid " + std::to_string(holder) +
                                  ", lock file " + path + "); wait for it or use another --out");
  }
  if (holder > 0 && holder != ::getpid())
    std::fprintf(stderr, "attnbench: warning: taking over the stale lock %s of pid %ld, which is no longer running\n",
                 path.c_str(), holder);
  remember_lock_fd(fd_, true);
  const std::string me = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    throw std::runtime_error("cannot write lock file " + path + ": " + std::strerror(errno));
}

OutDirLock::~OutDirLock() {
  if (fd_ < 0) return;
  remember_lock_fd(fd_, false);
  (void)::ftruncate(fd_, 0);  // released: no pid left behind
  ::close(fd_);
}

}  // namespace attnbench
