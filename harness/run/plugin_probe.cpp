// Plugins loaded through a probe child: see plugin_probe.hpp.
#include "harness/run/plugin_probe.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>
#include <stdexcept>

#include "harness/backend/backend.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/run/process.hpp"
#include "reports/journal.hpp"

namespace attnbench {

namespace {

/// A fresh private folder under the temporary directory, removed at scope exit.
struct ProbeDir {
  std::string path;
  ProbeDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "attnbench-probe-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a temporary folder under " + tmpl);
    path = tmpl;
  }
  ~ProbeDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

/// What one probe child answered: its JSON object, or why there is none.
struct ProbeAnswer {
  nlohmann::json answer;  ///< the object it wrote (null without one)
  std::string failure;    ///< "" when it answered and exited 0; else how it ended, with its stderr's tail
};

/// Run `attnbench __plugin-probe [--available] PATH RESULT` on `path`, killed
/// after `timeout_s` or when this process is asked to stop; `timeout_note`
/// follows the failure of a child that ran past the limit.
ProbeAnswer run_probe(const std::string& path, bool available, double timeout_s, const std::string& timeout_note) {
  ProbeDir tmp;
  const std::string result = tmp.path + "/probe.json";
  std::vector<std::string> argv = {self_executable(), "__plugin-probe"};
  if (available) argv.push_back("--available");
  argv.push_back(std::filesystem::absolute(path).string());
  argv.push_back(result);
  ChildStatus st;
  {
    ChildProcess child(argv, {}, tmp.path + "/stdout", tmp.path + "/stderr");
    st = wait_child(child, timeout_s, [] { return stop_signal() != 0; });
  }
  ProbeAnswer a;
  if (is_regular_file_path(result)) {
    try {
      a.answer = jsonu::load_file(result);
    } catch (const std::exception&) {
    }
  }
  if (!a.answer.is_object()) a.answer = nullptr;
  if (a.answer.contains("input_error")) return a;  // the loading error, reported by the caller
  if (!a.answer.is_null() && st.exited && st.exit_code == 0) return a;
  a.failure = "the process " + describe(st);
  if (st.timed_out) a.failure += " (" + timeout_note + " " + jsonu::show(nlohmann::json(timeout_s)) + " s)";
  else if (st.exited) a.failure += " without an answer";
  const std::string tail = tail_of_file(tmp.path + "/stderr", 10, 2000);
  if (!tail.empty()) a.failure += "; last lines of its stderr:\n" + tail;
  return a;
}

/// What the probe child reported of a plugin, and its availability once asked.
struct ProbedPlugin {
  std::string path, name, description;
  Device device = Device::cpu;
  bool deterministic = true;
  OptionSpecs options;    ///< the plugin's declared options (ABI version 2)
  double timeout_s = 60;  ///< the probes' time limit

  /// available() of the plugin, asked once in a probe child (`--available`): a
  /// child that crashes, hangs or exits reads as unavailable, saying how it ended.
  std::pair<bool, std::string> availability() const {
    std::call_once(asked_, [this] {
      const ProbeAnswer a = run_probe(path, /*available=*/true, timeout_s, "available() must answer within");
      if (!a.failure.empty() || !a.answer.contains("available") || !a.answer["available"].is_boolean()) {
        std::string why = a.failure;
        if (a.answer.contains("input_error") && a.answer["input_error"].is_string())
          why = a.answer["input_error"].get<std::string>();
        available_ = {false, "its available() probe (an isolated child process) failed: " + why};
        return;
      }
      available_ = {a.answer["available"].get<bool>(), a.answer.value("why", std::string())};
    });
    return available_;
  }

 private:
  mutable std::once_flag asked_;
  mutable std::pair<bool, std::string> available_;
};

/// The stand-in of a probed plugin: metadata, and available() answered by a
/// probe child. Its other code runs in the isolated children of the runner
/// (Backend::isolated_only()), which load the library.
class IsolatedPluginBackend final : public Backend {
 public:
  explicit IsolatedPluginBackend(std::shared_ptr<const ProbedPlugin> p) : p_(std::move(p)) {}
  std::string name() const override { return p_->name; }
  std::string description() const override { return p_->description; }
  Device device() const override { return p_->device; }
  bool available(std::string* why) const override {
    const auto [ok, reason] = p_->availability();
    if (!ok && why) *why = reason;
    return ok;
  }
  Support supports(const Problem&) const override { return Support::yes(); }  // asked in the child
  std::unique_ptr<BackendInstance> prepare(const Problem&, const ProblemData&) override {
    throw std::logic_error("plugin " + p_->name + " (" + p_->path +
                           ") runs only in an isolated child process (its stand-in was asked to prepare)");
  }
  bool deterministic() const override { return p_->deterministic; }
  bool isolated_only() const override { return true; }
  /// The plugin's declarations as the probe reported them: a variant is checked
  /// here, before any child runs, and the child gets the resolved values.
  OptionSpecs option_specs() const override { return p_->options; }

 private:
  std::shared_ptr<const ProbedPlugin> p_;
};

/// Canonical path -> backend name of every plugin this process loaded.
std::map<std::string, std::string>& loaded_plugins() {
  static std::map<std::string, std::string> loaded;
  return loaded;
}

}  // namespace

std::string probe_plugin(const std::string& path, double timeout_s) {
  std::error_code ec;
  const std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
  const std::string key = ec ? path : canonical;
  if (auto it = loaded_plugins().find(key); it != loaded_plugins().end()) return it->second;
  if (!std::filesystem::exists(path, ec)) throw InputError(path, "", "plugin file not found");
  if (!is_regular_file_path(path)) throw InputError(path, "", "plugin is not a regular file (a FIFO, folder or device?)");
  const ProbeAnswer a = run_probe(path, /*available=*/false, timeout_s, "a plugin must load within");
  const nlohmann::json& j = a.answer;
  if (j.contains("input_error") && j["input_error"].is_string()) {
    std::string msg = j["input_error"].get<std::string>();
    const std::string prefix = InputError::format(std::filesystem::absolute(path).string(), "", "");
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
    throw InputError(path, "", msg);
  }
  if (!a.failure.empty() || !j.contains("name") || !j["name"].is_string()) {
    throw InputError(path, "", "loading the plugin in a probe process failed: " +
                                   (a.failure.empty() ? std::string("its answer names no backend") : a.failure));
  }
  auto p = std::make_shared<ProbedPlugin>();
  p->path = path;
  p->name = j["name"].get<std::string>();
  p->description = j.value("description", std::string());
  p->device = j.value("device", std::string()) == "cuda" ? Device::cuda : Device::cpu;
  p->deterministic = j.value("deterministic", true);
  try {
    for (const auto& o : j.value("options", nlohmann::json::array())) p->options.push_back(OptionSpec::from_json(o));
  } catch (const std::exception& e) {
    throw InputError(path, "", std::string("the probe reported malformed option declarations: ") + e.what());
  }
  p->timeout_s = timeout_s;
  for (const auto& n : BackendRegistry::names())
    if (n == p->name)
      throw InputError(path, "", "backend name \"" + p->name +
                                     "\" is already registered (an in-tree backend or another plugin); "
                                     "give the plugin another name");
  BackendRegistry::add(p->name, [p] { return std::make_unique<IsolatedPluginBackend>(p); });
  loaded_plugins()[key] = p->name;
  return p->name;
}

int plugin_probe_main(const std::string& path, const std::string& result, bool available) {
  follow_parent(SIGKILL);
  nlohmann::json out;
  int code = kExitOk;
  try {
    const std::string name = BackendRegistry::load_plugin(path);
    const auto b = BackendRegistry::create(name);
    out = {{"name", name},
           {"description", b->description()},
           {"device", b->device() == Device::cuda ? "cuda" : "cpu"},
           {"deterministic", b->deterministic()},
           {"options", nlohmann::json::array()}};
    for (const auto& o : b->option_specs()) out["options"].push_back(o.to_json());
    if (available) {
      std::string why;
      out["available"] = b->available(&why);
      out["why"] = why;
    }
  } catch (const InputError& e) {
    out = {{"input_error", e.what()}};
    code = kExitBadInput;
  }
  write_file_atomic(result, out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", false);
  return code;
}

}  // namespace attnbench
