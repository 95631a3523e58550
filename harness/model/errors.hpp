// Error types and exit codes shared by every attnbench subcommand.
//
// Exit codes (docs/semantics.md section 12): 0 success, 1 a correctness failure or a
// gated regression, 2 bad input or usage, 3 internal error.
#pragma once

#include <stdexcept>
#include <string>

namespace attnbench {

/// Process exit codes, fixed by docs/semantics.md section 12.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,     ///< correctness failure or gated regression
  kExitBadInput = 2,    ///< bad input or usage
  kExitInternal = 3,    ///< internal error
  kExitUnexpectedExit = 4,  ///< `run`: backend or plugin code called exit() in the middle of the run
};

/// Bad user input. The message always names the file, the JSON path (RFC 6901
/// pointer, "" for the document root) and the offending value, e.g.
/// `scenarios/x.json: /mask/0/kind: unknown mask kind "casual"`.
/// Maps to exit code 2.
class InputError : public std::runtime_error {
 public:
  InputError(std::string file, std::string json_path, std::string message)
      : std::runtime_error(format(file, json_path, message)),
        file_(std::move(file)), path_(std::move(json_path)) {}
  const std::string& file() const { return file_; }
  const std::string& json_path() const { return path_; }

  static std::string format(const std::string& file, const std::string& path,
                            const std::string& message) {
    std::string out = file.empty() ? std::string("<input>") : file;
    out += ": ";
    out += path.empty() ? std::string("/") : path;
    out += ": ";
    out += message;
    return out;
  }

 private:
  std::string file_, path_;
};

/// A requested feature is not available for a problem (a backend's
/// `supports()` reason turned into an exception where a row cannot be made).
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A backend's work ran past its time limit and was stopped (report status
/// "timeout"); e.g. an out-of-process peer's worker killed after its timeout.
class Timeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A backend's process died (report status "crashed"); e.g. a peer's worker
/// killed by a signal.
class Crashed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace attnbench
