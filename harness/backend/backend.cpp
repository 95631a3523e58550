#include "harness/backend/backend.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace attnbench {

namespace {
std::map<std::string, BackendRegistry::Factory>& registry() {
  static std::map<std::string, BackendRegistry::Factory> r;
  return r;
}
BackendRegistry::PluginLoader& plugin_loader() {
  static BackendRegistry::PluginLoader l;
  return l;
}
}  // namespace

bool BackendRegistry::set_plugin_loader(PluginLoader loader) {
  plugin_loader() = std::move(loader);
  return true;
}

std::string BackendRegistry::load_plugin(const std::string& path) {
  if (!plugin_loader()) throw std::logic_error("no plugin loader linked into this binary (backends/plugin/)");
  return plugin_loader()(path);
}

bool BackendRegistry::add(const std::string& name, Factory f) {
  auto& r = registry();
  if (r.count(name)) throw std::logic_error("backend registered twice: " + name);
  r.emplace(name, std::move(f));
  return true;
}

std::vector<std::string> BackendRegistry::names() {
  std::vector<std::string> out;
  for (const auto& kv : registry()) out.push_back(kv.first);
  return out;
}

std::unique_ptr<Backend> BackendRegistry::create(const std::string& name) {
  auto& r = registry();
  auto it = r.find(name);
  if (it == r.end()) return nullptr;
  return it->second();
}

}  // namespace attnbench
