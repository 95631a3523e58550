// Plugins loaded through a probe child: see plugin_probe.hpp.
#include "harness/run/plugin_probe.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>

#include "harness/backend/backend.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/run/process.hpp"
#include "reports/journal.hpp"

namespace attnbench {

namespace {

/// What the probe child reported of a plugin.
struct ProbedPlugin {
  std::string path, name, description;
  Device device = Device::cpu;
  bool deterministic = true;
  OptionSpecs options;  ///< the plugin's declared options (ABI version 2)
};

/// The stand-in of a probed plugin: metadata only. Its code runs in the isolated
/// children of the runner (Backend::isolated_only()), which load the library.
class IsolatedPluginBackend final : public Backend {
 public:
  explicit IsolatedPluginBackend(std::shared_ptr<const ProbedPlugin> p) : p_(std::move(p)) {}
  std::string name() const override { return p_->name; }
  std::string description() const override { return p_->description; }
  Device device() const override { return p_->device; }
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

}  // namespace

std::string probe_plugin(const std::string& path, double timeout_s) {
  static std::map<std::string, std::string> loaded;  // canonical path -> backend name
  std::error_code ec;
  const std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
  const std::string key = ec ? path : canonical;
  if (auto it = loaded.find(key); it != loaded.end()) return it->second;
  if (!std::filesystem::exists(path, ec)) throw InputError(path, "", "plugin file not found");
  if (!is_regular_file_path(path)) throw InputError(path, "", "plugin is not a regular file (a FIFO, folder or device?)");
  ProbeDir tmp;
  const std::string result = tmp.path + "/probe.json";
  ChildStatus st;
  {
    ChildProcess child({self_executable(), "__plugin-probe", std::filesystem::absolute(path).string(), result}, {},
                       tmp.path + "/stdout", tmp.path + "/stderr");
    st = wait_child(child, timeout_s, [] { return stop_signal() != 0; });
  }
  nlohmann::json j;
  bool answered = false;
  if (is_regular_file_path(result)) {
    try {
      j = jsonu::load_file(result);
      answered = j.is_object();
    } catch (const std::exception&) {
    }
  }
  if (answered && j.contains("input_error") && j["input_error"].is_string()) {
    std::string msg = j["input_error"].get<std::string>();
    const std::string prefix = InputError::format(std::filesystem::absolute(path).string(), "", "");
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
    throw InputError(path, "", msg);
  }
  if (!answered || !st.exited || st.exit_code != 0 || !j.contains("name") || !j["name"].is_string()) {
    std::string msg = "loading the plugin in a probe process failed: the process " + describe(st);
    if (st.timed_out) msg += " (a plugin must load within " + jsonu::show(nlohmann::json(timeout_s)) + " s)";
    else if (st.exited) msg += " without an answer";
    const std::string tail = tail_of_file(tmp.path + "/stderr", 10, 2000);
    if (!tail.empty()) msg += "; last lines of its stderr:\n" + tail;
    throw InputError(path, "", msg);
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
  for (const auto& n : BackendRegistry::names())
    if (n == p->name)
      throw InputError(path, "", "backend name \"" + p->name +
                                     "\" is already registered (an in-tree backend or another plugin); "
                                     "give the plugin another name");
  BackendRegistry::add(p->name, [p] { return std::make_unique<IsolatedPluginBackend>(p); });
  loaded[key] = p->name;
  return p->name;
}

int plugin_probe_main(const std::string& path, const std::string& result) {
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
  } catch (const InputError& e) {
    out = {{"input_error", e.what()}};
    code = kExitBadInput;
  }
  write_file_atomic(result, out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", false);
  return code;
}

}  // namespace attnbench
