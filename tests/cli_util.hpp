// Helpers of the suites that run the attnbench binary itself (test_cli,
// test_cli_hostile, test_cli_reliability, test_check_overlap): a scratch
// directory, the run with captured output, a run in the background, file
// reading. The binary is ATTNBENCH_BINARY (set by tests/CMakeLists.txt).
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace attnbench::test::cli {

/// Exit code (-1 when the binary did not exit normally), stdout and stderr of one run.
struct Result {
  int code = -1;
  std::string out, err;
};

/// The bytes of a file ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A temporary directory <tmp>/attnbench_cli_<pid>_<n>, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int n = 0;
    path = std::filesystem::temp_directory_path() /
           ("attnbench_cli_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// Write `body` to file `name` in the directory; returns its path.
  std::string write(const std::string& name, const std::string& body) const {
    std::ofstream(path / name, std::ios::binary) << body;
    return (path / name).string();
  }
};

/// Run `attnbench ARGS` (shell-quoted by the caller) with environment assignments
/// `env` in front, under a `timeout_s` limit (coreutils timeout: a hang fails the
/// test with code 124 instead of blocking it), capturing stdout and stderr in
/// files of directory `dir`.
inline Result run_in(const std::filesystem::path& dir, const std::string& args, const std::string& env = "",
                     int timeout_s = 120) {
  const std::string out = (dir / "stdout.txt").string(), err = (dir / "stderr.txt").string();
  const std::string cmd = env + (env.empty() ? "" : " ") + "timeout " + std::to_string(timeout_s) + " '" +
                          std::string(ATTNBENCH_BINARY) + "' " + args + " >'" + out + "' 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

/// run_in() the directory of `t`.
inline Result run(const std::string& args, const TempDir& t, const std::string& env = "", int timeout_s = 120) {
  return run_in(t.path, args, env, timeout_s);
}

/// Start `attnbench ARGS...` in the background with this process's environment
/// (stdout / stderr to LOG.out / LOG.err); returns its pid. Throws
/// std::runtime_error when it cannot be started.
inline pid_t start(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {ATTNBENCH_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> av;
  for (auto& a : argv) av.push_back(a.data());
  av.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, (log + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, (log + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, av[0], &fa, nullptr, av.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
  return pid;
}

/// Wait for `pid`: its exit code, or 128 + the signal that killed it.
inline int wait_exit(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/// Whether `s` contains `sub`.
inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace attnbench::test::cli
