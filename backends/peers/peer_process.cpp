// One worker process with a timeout, work directories and log tails
// (peer_process.hpp).
#include "backends/peers/peer_process.hpp"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace attnbench::peers {

namespace fs = std::filesystem;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

WorkDir::WorkDir(const std::string& root, const std::string& prefix, bool keep) : keep_(keep) {
  std::error_code ec;
  fs::create_directories(root, ec);
  std::string templ = (fs::path(root) / (prefix + "XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data()))
    throw std::runtime_error("cannot create a peer work directory under " + root + ": " + std::strerror(errno));
  path_ = buf.data();
}

WorkDir::~WorkDir() {
  if (keep_) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string WorkDir::file(const std::string& name) const { return (fs::path(path_) / name).string(); }

std::string with_tail(const std::string& label, const std::string& tail) {
  return tail.empty() ? std::string() : "\n" + label + ":\n" + tail;
}

std::string seconds_text(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

void take_status(const ChildStatus& st, ProcessResult& r) {
  r.exit_code = st.exited ? st.exit_code : -1;
  r.signal = st.exited ? 0 : st.signal;
}

ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::vector<std::pair<std::string, std::string>>& env, double timeout_s,
                          double kill_grace_s, const std::string& stdout_path, const std::string& stderr_path) {
  ProcessResult r;
  if (argv.empty() || argv[0].empty()) {
    r.error = "empty command";
    return r;
  }
  std::optional<ChildProcess> child;
  try {
    child.emplace(argv, env, ChildIo{stdout_path, stderr_path});
  } catch (const std::system_error& e) {
    r.error = e.code().message();
    return r;
  }
  r.launched = true;
  ChildStatus st = wait_child(*child, timeout_s, nullptr, kill_grace_s);
  r.timed_out = st.timed_out;
  if (!st.timed_out) st = child->end_group(false, kill_grace_s);  // after a normal exit: what is left of the group
  take_status(st, r);
  r.wall_s = st.seconds;
  return r;
}

std::string file_tail(const std::string& path, size_t max_chars, size_t from) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  if (from > 0) f.seekg(static_cast<std::streamoff>(from));
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  if (s.size() > max_chars) s = "..." + s.substr(s.size() - max_chars);
  return s;
}

}  // namespace attnbench::peers
