// Helpers of the suites that run the attnbench binary itself (test_cli,
// test_cli_hostile, test_cli_reliability): a scratch directory, the run with captured output, file
// reading. The binary is ATTNBENCH_BINARY (set by tests/CMakeLists.txt).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

/// Whether `s` contains `sub`.
inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace attnbench::test::cli
