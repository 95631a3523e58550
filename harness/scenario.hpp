// Scenario matrices (JSON) and their expansion into cases.
//
// A scenario file is either a single problem file (DESIGN.md section 6), or a
// matrix: {"name", "description", "base": {problem fields}, "axes": {field:
// [values]}, "zip": [[field, field], ...], "exclude": [{field: value, ...}],
// "packing": {...} or an axis "packing": [{...}, ...], "model": preset name or
// axis}. Axes expand as a cartesian product; zipped axes advance together;
// exclusion rules drop matching cases. Each case gets a stable, readable id built
// from the values of its axes. See docs/scenarios.md for the full format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/problem.hpp"

namespace attnbench {

/// Packing outcome of one case built from a document-length source.
struct PackingStats {
  std::string source;       ///< e.g. "empirical:codealpaca", "lognormal(6,1)"
  std::string strategy;     ///< "greedy" or "ffd"
  std::string pad_to;       ///< "max_seq_len" or "longest"
  double target_fill = 1.0;
  int64_t real_tokens = 0;     ///< tokens belonging to documents
  int64_t padded_tokens = 0;   ///< B * padded sequence length
  double packing_ratio = 0.0;  ///< real_tokens / padded_tokens
  std::vector<int64_t> docs_per_pack;
  int64_t truncated_docs = 0;  ///< documents longer than max_seq_len, cut to fit
};

/// One expanded case of a scenario.
struct Case {
  std::string id;      ///< stable, readable, unique within the scenario
  Problem problem;
  std::optional<PackingStats> packing;
  std::string model;   ///< model preset name, if any
  nlohmann::json axes; ///< the axis values that produced this case
};

/// An expanded scenario.
struct Scenario {
  std::string name;
  std::string description;
  std::string file;    ///< path it was loaded from ("" if built in memory)
  std::vector<Case> cases;
};

/// A model preset: head shape (and default mask / score mod where the model has one).
struct ModelPreset {
  std::string name;
  int64_t heads_q, heads_kv, head_dim;
  int64_t sliding_window = -1;  ///< left window, -1 = none
  double softcap = 0.0;         ///< 0 = none
};
/// Built-in presets: llama3-8b, llama3.2-1b, llama3-70b, mistral-7b, gemma2-9b, qwen2.5-7b.
const std::vector<ModelPreset>& model_presets();

/// Resolve SCENARIO as given on the command line: an existing path, or a name
/// under the scenarios/ directory ("default" -> scenarios/default.json).
/// Throws InputError if nothing matches.
std::string resolve_scenario_path(const std::string& name_or_path);
/// The scenarios/ directory used for names and `list scenarios`.
std::string scenarios_dir();

/// Load and expand a scenario file. `seed_override` replaces every case's seed
/// (and the packing seed). Throws InputError (exit code 2) naming file, JSON path
/// and value for every malformed field.
Scenario load_scenario(const std::string& file, std::optional<uint64_t> seed_override = std::nullopt);
/// Same, from an already-parsed document (`file` labels errors and resolves
/// relative data paths).
Scenario scenario_from_json(const nlohmann::json& j, const std::string& file,
                            std::optional<uint64_t> seed_override = std::nullopt);

/// (name, description) of every *.json file in `dir`, sorted by name. Files that
/// fail to parse are listed with the error as description.
std::vector<std::pair<std::string, std::string>> list_scenarios(const std::string& dir);

}  // namespace attnbench
