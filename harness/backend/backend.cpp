#include "harness/backend/backend.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "harness/model/errors.hpp"
#include "harness/model/printable.hpp"

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
  return create(VariantRequest{name, {}});
}

std::unique_ptr<Backend> BackendRegistry::create(const VariantRequest& v, const std::string& file,
                                                 const std::string& pointer) {
  auto& r = registry();
  auto it = r.find(v.backend);
  if (it == r.end()) return nullptr;
  std::unique_ptr<Backend> b = it->second();
  b->bind_options(v.options, file, pointer);
  return b;
}

std::unique_ptr<Backend> BackendRegistry::create_variant(const std::string& text, const std::string& file,
                                                         const std::string& pointer) {
  return create(parse_variant(text, file, pointer), file, pointer);
}

std::vector<std::string> BackendRegistry::resolve_variants(const std::vector<std::string>& entries,
                                                           const std::string& file, const std::string& pointer) {
  std::vector<std::string> labels;
  for (const auto& text : entries) {
    const VariantRequest v = parse_variant(text, file, pointer);
    const auto b = create(v, file, pointer);
    if (!b) {
      std::string known;
      for (const auto& k : names()) known += (known.empty() ? "" : ", ") + k;
      throw InputError(file, pointer, "unknown backend \"" + printable(v.backend) + "\" (registered: " + known + ")");
    }
    const std::string label = b->variant();
    if (std::find(labels.begin(), labels.end(), label) != labels.end())
      throw InputError(file, pointer,
                       "backend \"" + printable(label) + "\" is listed more than once" +
                           (label != text ? " (\"" + printable(text) + "\" is that variant)" : std::string()));
    labels.push_back(label);
  }
  return labels;
}

void Backend::bind_options(const std::vector<std::pair<std::string, std::string>>& given, const std::string& file,
                           const std::string& pointer) {
  const OptionSpecs specs = option_specs();
  OptionValues values = resolve_options(name(), specs, given, file.empty() ? "<command line>" : file,
                                        pointer.empty() ? "--backends" : pointer);
  apply_options(values);
  variant_ = variant_label(name(), specs, values);
  values_ = std::move(values);
}

}  // namespace attnbench
