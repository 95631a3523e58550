// Scenario matrices (JSON) and their expansion into cases.
//
// A scenario file is either a single problem file (docs/semantics.md section 10; optional
// "name" and "description" keys are allowed and ignored by the problem parser),
// or a matrix:
//
//   {"name": "...", "description": "one line",
//    "base":    {problem fields, plus "seq", "model", "packing"},
//    "axes":    {field: [values], ...},
//    "zip":     [[field, field, ...], ...],
//    "exclude": [{field: value, ...}, ...],
//    "parts":   [{"name": ..., "base": {...}, "axes": ..., "zip": ..., "exclude": ...}]}
//
// - A file is a matrix iff it has "base", "axes" or "parts".
// - Axis names: every problem field (batch, heads_q, heads_kv, seq_q, seq_k,
//   head_dim, head_dim_v, dtype, scale, layout, mask, score_mod, seed), "seq"
//   (sets seq_q and seq_k), "model" (a preset name of model_presets(), or null),
//   "packing" (a packing object of packing.hpp, or null), "packing.<key>" (one key
//   of the packing object) and "label" (strings that only name cases).
// - Precedence: base < model preset < axis values. A preset sets heads_q,
//   heads_kv, head_dim, head_dim_v (unless an axis sets them), appends
//   sliding_window{left: W, right: 0} when the mask has no sliding_window entry,
//   and sets softcap when no axis sets score_mod and the base has none.
// - Expansion: cartesian product of the axis groups (an axis alone, or a zip group
//   whose axes advance together and must have equal lengths), in the canonical
//   axis order below, the first group outermost:
//     label, model, batch, heads_q, heads_kv, seq, seq_q, seq_k, head_dim,
//     head_dim_v, dtype, layout, scale, mask, score_mod, packing,
//     packing.{source,strategy,shuffle,seed,max_seq_len,num_packs,fill,pad_to,pool_docs},
//     seed
//   (a zip group sits at the position of its first member in that order). The order
//   of keys in the file does not matter.
// - Exclusion: a case is dropped when every key of some rule matches: the rule value
//   equals the case's value (axis value or effective field, JSON equality) or the
//   label of that value. Each rule must match at least one case.
// - Case id: the labels of the groups joined by "_", e.g.
//   "llama3-8b_fill0.95_greedy"; a zip group's label is its members' labels joined
//   by "-", or the "label" axis value when the group has one; with parts, the part
//   name comes first. Labels use only [A-Za-z0-9.+-] (filesystem-safe); equal
//   labels within a group (an axis or a zip group) get "-v<index>" suffixes, so
//   ids are unique.
// - Budget: a case larger than the total-size budget (harness/model/budget.hpp)
//   is kept with Case::invalid set (its row becomes `error`); any other invalid
//   field still fails the whole file (InputError, exit 2). A single-problem file
//   over the budget fails with exit 2.
// - Packing: when a case has a packing object, its documents are packed into
//   `num_packs` (default: batch) packs of `max_seq_len` (default: seq_q), batch
//   becomes num_packs, seq_q = seq_k = the padded length, and a DocumentTerm is
//   appended to the case's mask (which must not hold document or padding entries).
// - Backends: an optional top-level "backends" list of variants to run when the
//   command line gives no --backends: strings as `--backends` entries ("cpu",
//   "flex[block=64]") or {"backend": NAME, "options": {k: v}, "sweep": {k: [v, ...]}},
//   one variant per combination of the sweep's values (docs/backend-options.md).
// See docs/scenarios.md for the full format and examples.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/workloads/packing.hpp"
#include "harness/model/problem.hpp"

namespace attnbench {

// PackingStats (the packing outcome of one case) lives in packing.hpp.

/// One expanded case of a scenario.
struct Case {
  std::string id;      ///< stable, readable, unique within the scenario
  Problem problem;
  std::optional<PackingStats> packing;
  std::string model;   ///< model preset name, if any
  nlohmann::json axes; ///< the axis values that produced this case
  std::string part;    ///< name of the part it came from ("" without parts)
  /// Non-empty when the case exceeds the total-size budget (BudgetError of
  /// harness/model/budget.hpp): the message, naming file, JSON pointer and value.
  /// `problem` is then not valid (nothing may be allocated or counted from it); the
  /// runner writes an `error` row with this message for each backend and goes on.
  std::string invalid;
};

/// An expanded scenario.
struct Scenario {
  std::string name;
  std::string description;
  std::string file;    ///< path it was loaded from ("" if built in memory)
  std::vector<Case> cases;
  /// "timing": {"max_seconds": x}: the scenario's default time cap per (case,
  /// backend, pass) in seconds, used when the command line gives no
  /// --max-seconds (small scenarios converge long before the 2 s default).
  std::optional<double> max_seconds;
  /// "backends": the backend variants the scenario runs when the command line gives
  /// no --backends, as variant texts ("cpu", "flex[block=64]"; an entry's "sweep"
  /// already expanded to one text per value). Empty = every registered backend.
  std::vector<std::string> backends;
};

/// A model preset: head shape (and default mask / score mod where the model has one).
struct ModelPreset {
  std::string name;
  int64_t heads_q, heads_kv, head_dim;
  int64_t sliding_window = -1;  ///< left window, -1 = none
  double softcap = 0.0;         ///< 0 = none
};
/// Built-in presets: llama3-8b (32/8, 128), llama3.2-1b (32/8, 64), llama3-70b
/// (64/8, 128), mistral-7b (32/8, 128, window 4096), gemma2-9b (16/8, 256, softcap
/// 50, window 4096), qwen2.5-7b (28/4, 128), from the models' published configs
/// (num_attention_heads / num_key_value_heads, head_dim, sliding_window,
/// attn_logit_softcapping).
const std::vector<ModelPreset>& model_presets();
/// The preset called `name`, or nullptr.
const ModelPreset* find_model_preset(const std::string& name);

/// Resolve SCENARIO as given on the command line: an existing file path, or a name
/// under scenarios_dir() ("default" -> <dir>/default.json; "x.json" -> <dir>/x.json).
/// Throws InputError (file = the argument, path "") listing the known names if
/// nothing matches.
std::string resolve_scenario_path(const std::string& name_or_path);
/// The scenarios/ directory used for names and `list scenarios`: $ATTNBENCH_SCENARIOS_DIR
/// if set and non-empty, else ./scenarios if it is a directory, else
/// BINDIR/../share/attnbench/scenarios when it exists (an installed binary), else
/// the source tree's scenarios/ (ATTNBENCH_SOURCE_DIR "/scenarios").
std::string scenarios_dir();

/// Load and expand a scenario file. `seed_override` replaces every case's seed
/// (and the packing seed). Throws InputError (exit code 2) naming file, JSON path
/// and value for every malformed field.
Scenario load_scenario(const std::string& file, std::optional<uint64_t> seed_override = std::nullopt);
/// Same, from an already-parsed document (`file` labels errors and resolves
/// relative data paths).
Scenario scenario_from_json(const nlohmann::json& j, const std::string& file,
                            std::optional<uint64_t> seed_override = std::nullopt);

/// (name, description) of every *.json file in `dir` (not recursing), sorted by
/// name; the name is the file stem (what `describe NAME` takes). Files that fail to
/// parse are listed with "error: <message>" as description; a problem file without
/// a description gets "single problem". A missing directory gives an empty list.
std::vector<std::pair<std::string, std::string>> list_scenarios(const std::string& dir);

/// Filesystem-safe case-id label of one axis value (see the format above), e.g.
/// ("seq", 8192) -> "S8192", ("mask", [{"kind":"causal"}]) -> "causal",
/// ("packing.fill", 0.95) -> "fill0.95". Never throws; malformed values get a
/// generic label (errors are reported when the case is parsed).
std::string axis_value_label(const std::string& axis, const nlohmann::json& value);

}  // namespace attnbench
