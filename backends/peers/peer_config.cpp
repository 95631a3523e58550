// Launch setup defaults and the process-wide run context (peer_config.hpp).
#include "backends/peers/peer_config.hpp"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <system_error>

namespace attnbench::peers {

namespace fs = std::filesystem;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

std::string launch_key(const LaunchConfig& c) {
  std::string key = c.python + '\n' + c.worker;
  for (const auto& [k, v] : c.env) key += '\n' + k + '=' + v;
  return key;
}

namespace {

std::mutex& context_mutex() {
  static std::mutex m;
  return m;
}
RunContext& context_storage() {
  static RunContext c;
  return c;
}

}  // namespace

LaunchConfig resolve_launch_config(const LaunchConfig& in) {
  LaunchConfig c = in;
  if (c.python.empty()) c.python = env_or("ATTNBENCH_PYTHON", "python3");
  if (c.worker.empty())
    c.worker = env_or("ATTNBENCH_TORCH_WORKER", std::string(ATTNBENCH_SOURCE_DIR) + "/backends/peers/attnbench_torch/__main__.py");
  if (!(c.timeout_s > 0)) {
    c.timeout_s = 600;
    const std::string t = env_or("ATTNBENCH_PEER_TIMEOUT", "");
    if (!t.empty()) {
      char* end = nullptr;
      const double v = std::strtod(t.c_str(), &end);
      if (end && *end == '\0' && v > 0) c.timeout_s = v;
    }
  }
  if (!(c.probe_timeout_s > 0)) c.probe_timeout_s = 180;
  if (!(c.kill_grace_s >= 0)) c.kill_grace_s = 5;
  if (c.work_root.empty()) {
    c.work_root = env_or("ATTNBENCH_PEER_WORKDIR", "");
    if (c.work_root.empty()) {
      std::error_code ec;
      fs::path tmp = fs::temp_directory_path(ec);
      c.work_root = ec ? std::string("/tmp") : tmp.string();
      c.work_root_default = true;
    }
  }
  if (!c.keep_work_dir) c.keep_work_dir = env_or("ATTNBENCH_PEER_KEEP", "0") == "1";
  if (c.serve < 0) c.serve = env_or("ATTNBENCH_PEER_SERVE", "1") == "0" ? 0 : 1;
  return c;
}

std::string request_work_root(const LaunchConfig& c, uint64_t bytes, const std::string& shm) {
  if (!c.work_root_default) return c.work_root;
  struct statvfs st {};
  if (::access(shm.c_str(), W_OK | X_OK) != 0 || ::statvfs(shm.c_str(), &st) != 0) return c.work_root;
  const unsigned long long free_bytes = static_cast<unsigned long long>(st.f_bavail) * st.f_frsize;
  return free_bytes >= bytes + (1ull << 30) ? shm : c.work_root;
}

void set_default_run_context(const RunContext& ctx) {
  std::lock_guard<std::mutex> lock(context_mutex());
  context_storage() = ctx;
}

RunContext default_run_context() {
  std::lock_guard<std::mutex> lock(context_mutex());
  return context_storage();
}

}  // namespace attnbench::peers
