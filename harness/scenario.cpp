// PLACEHOLDER: replaced by the scenario/packing implementation.
#include "harness/scenario.hpp"
#include <stdexcept>
#include "harness/json_util.hpp"
namespace attnbench {
const std::vector<ModelPreset>& model_presets() { static std::vector<ModelPreset> v; return v; }
std::string scenarios_dir() { return std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios"; }
std::string resolve_scenario_path(const std::string& s) { return s; }
Scenario load_scenario(const std::string& file, std::optional<uint64_t> seed) {
  return scenario_from_json(jsonu::load_file(file), file, seed);
}
Scenario scenario_from_json(const nlohmann::json& j, const std::string& file, std::optional<uint64_t> seed) {
  Scenario s; s.file = file; s.name = "problem";
  Case c; c.problem = problem_from_json(j, file); if (seed) c.problem.seed = *seed; c.id = "case0";
  s.cases.push_back(c); return s;
}
std::vector<std::pair<std::string, std::string>> list_scenarios(const std::string&) { return {}; }
}  // namespace attnbench
