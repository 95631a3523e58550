// The cached worker probe (peer_probe.hpp).
#include "backends/peers/peer_probe.hpp"

#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <system_error>

#include "backends/peers/peer_process.hpp"

namespace attnbench::peers {

namespace fs = std::filesystem;
using nlohmann::json;

bool ProbeResult::peer_ok(const std::string& peer, std::string* why) const {
  if (!ok) {
    if (why) *why = reason;
    return false;
  }
  if (report.is_object() && report.contains("peers") && report["peers"].is_object() && report["peers"].contains(peer)) {
    const json& e = report["peers"][peer];
    if (e.is_object() && e.value("ok", true) == false) {
      if (why) *why = e.value("reason", std::string("the worker reports this peer unavailable"));
      return false;
    }
  }
  return true;
}

namespace {

std::mutex& probe_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, ProbeResult>& probe_cache() {
  static std::map<std::string, ProbeResult> c;
  return c;
}

ProbeResult run_probe(const LaunchConfig& c) {
  ProbeResult r;
  std::error_code ec;
  if (!fs::is_regular_file(c.worker, ec)) {
    r.reason = "peer worker script not found: " + c.worker + " (set ATTNBENCH_TORCH_WORKER)";
    return r;
  }
  WorkDir tmp(c.work_root, "attnbench-probe-", false);
  const std::string out = tmp.file("probe.stdout.txt"), err = tmp.file("probe.stderr.txt");
  ProcessResult pr = run_process({c.python, c.worker, "--probe"}, c.env, c.probe_timeout_s, c.kill_grace_s, out, err);
  if (!pr.launched) {
    r.reason = "cannot run the Python interpreter \"" + c.python + "\" (set ATTNBENCH_PYTHON): " + pr.error;
    return r;
  }
  if (pr.timed_out) {
    r.reason = c.worker + " --probe did not answer within " + seconds_text(c.probe_timeout_s) + " s";
    return r;
  }
  // The report is the last line of stdout that parses as a JSON object.
  std::ifstream f(out);
  std::string line, last_json;
  while (std::getline(f, line))
    if (!line.empty() && line.front() == '{') last_json = line;
  try {
    if (!last_json.empty()) r.report = json::parse(last_json);
  } catch (const json::parse_error&) {
    r.report = nullptr;
  }
  if (!r.report.is_object()) {
    r.reason = "\"" + c.python + " " + c.worker + " --probe\" exited with " +
               (pr.signal ? "signal " + std::to_string(pr.signal) : "code " + std::to_string(pr.exit_code)) +
               " without a JSON report" + with_tail("stderr", file_tail(err, 800));
    return r;
  }
  r.ok = r.report.value("ok", false) == true && pr.exit_code == 0;
  if (!r.ok) {
    r.reason = r.report.value("reason", std::string());
    if (r.reason.empty()) r.reason = "the worker's probe failed (exit code " + std::to_string(pr.exit_code) + ")";
  }
  return r;
}

}  // namespace

ProbeResult probe(const LaunchConfig& cfg) {
  const LaunchConfig c = resolve_launch_config(cfg);
  const std::string key = launch_key(c);
  std::lock_guard<std::mutex> lock(probe_mutex());
  auto it = probe_cache().find(key);
  if (it != probe_cache().end()) return it->second;
  ProbeResult r;
  try {
    r = run_probe(c);
  } catch (const std::exception& e) {
    r.ok = false;
    r.reason = std::string("probe failed: ") + e.what();
  }
  probe_cache()[key] = r;
  return r;
}

void clear_probe_cache() {
  std::lock_guard<std::mutex> lock(probe_mutex());
  probe_cache().clear();
}

}  // namespace attnbench::peers
