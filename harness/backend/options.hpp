// Backend options: the typed, declared knobs that make a backend *variant*
// (docs/backend-options.md). A backend declares its options once
// (Backend::option_specs(): name, type, allowed values, default, one line of doc);
// a run selects variants as `flex`, `flex[block=64]`,
// `flex[bwd_path=sm80,dbias=atomic]` (the `--backends` list and a scenario's
// `backends`); each variant's options are resolved here (defaults filled in,
// every value checked and written in its canonical form) before anything runs.
//
// A variant's identity is its label: the backend name, followed by the options
// whose resolved value differs from the default, sorted by name, in brackets
// ("cpu", "cpu[threads=1]"). A variant written with explicit default values is the
// same variant as the plain name. Reports carry the label ("variant") and the full
// resolved set ("options", typed JSON) on every row.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnbench {

/// The type of a declared option.
enum class OptionType { boolean, integer, enumeration, string };

/// "bool", "int", "enum", "string".
const char* to_string(OptionType t);

/// One declared option of a backend. Values are held as canonical text:
/// booleans "true"/"false", integers in decimal, enums one of `choices`.
struct OptionSpec {
  std::string name;        ///< [a-z0-9_]+, unique within the backend
  OptionType type = OptionType::boolean;
  std::string default_value;  ///< canonical text; valid for the spec
  std::vector<std::string> choices;  ///< enumeration: the allowed values
  int64_t min = 0, max = 0;          ///< integer: the inclusive range
  std::string doc;                   ///< one line

  /// A boolean option (values true/false; 1/0, on/off, yes/no accepted).
  static OptionSpec flag(std::string name, bool def, std::string doc);
  /// An integer option in [min, max].
  static OptionSpec integer(std::string name, int64_t def, int64_t min, int64_t max, std::string doc);
  /// An enumeration: one of `choices`; `def` must be one of them.
  static OptionSpec choice(std::string name, std::string def, std::vector<std::string> choices, std::string doc);
  /// A free string (no ',', '[', ']', '=' or control characters, which the
  /// variant syntax reserves).
  static OptionSpec text(std::string name, std::string def, std::string doc);

  /// What values are allowed, for messages and `list backends --options`:
  /// "true|false", "64|128", "0..1024", "string".
  std::string allowed() const;
  /// The canonical text of `value` for this option. Throws InputError(file,
  /// pointer, message) naming the backend, option and value when it is not allowed.
  std::string canonical(const std::string& value, const std::string& backend, const std::string& file,
                        const std::string& pointer) const;
  /// The typed JSON of canonical text `value` (bool, integer or string).
  nlohmann::json typed(const std::string& value) const;
  /// {"name", "type", "default" (typed), "allowed", "doc"} (+ "choices" / "min", "max").
  nlohmann::json to_json() const;
  /// The spec to_json() wrote (a plugin's declarations crossing the probe
  /// process). Throws std::invalid_argument (or std::logic_error for a default
  /// outside its range or choices) on a malformed object.
  static OptionSpec from_json(const nlohmann::json& j);
};

/// A backend's declarations, in the order the backend lists them.
using OptionSpecs = std::vector<OptionSpec>;

/// A backend's resolved options: every declared option with its canonical value.
/// Empty for a backend that declares none.
class OptionValues {
 public:
  OptionValues() = default;
  /// Take `values` as resolved (names and values not rechecked: use resolve_options()).
  explicit OptionValues(std::map<std::string, std::string> values) : values_(std::move(values)) {}
  /// The canonical text of option `name`; std::logic_error when not declared
  /// (a backend reading an option it did not declare is a programming error).
  const std::string& text(const std::string& name) const;
  /// Option `name` as a boolean ("true"); std::logic_error as text().
  bool flag(const std::string& name) const;
  /// Option `name` as an integer; std::logic_error as text().
  int64_t integer(const std::string& name) const;
  /// Every option by name.
  const std::map<std::string, std::string>& all() const { return values_; }
  bool empty() const { return values_.empty(); }
  bool operator==(const OptionValues& o) const { return values_ == o.values_; }

 private:
  std::map<std::string, std::string> values_;
};

/// One entry of a backend list as written: "flex" or "flex[block=64,dbias=atomic]".
struct VariantRequest {
  std::string backend;
  std::vector<std::pair<std::string, std::string>> options;  ///< as written, in order
};

/// Parse one entry ("name" or "name[k=v,...]", spaces around names and values
/// trimmed). Throws InputError(file, pointer, ...) naming the text on bad syntax
/// (unbalanced brackets, an option without '=', an empty name, an option given twice).
VariantRequest parse_variant(const std::string& text, const std::string& file, const std::string& pointer);

/// The entries of a comma-separated backend list, split at the commas outside
/// brackets ("cpu,flex[block=64,dbias=atomic]" -> "cpu", "flex[block=64,dbias=atomic]"),
/// each trimmed; empty entries skipped. No syntax check (parse_variant does it).
std::vector<std::string> split_backend_list(const std::string& text);

/// Split a comma-separated backend list at the commas outside brackets
/// ("flex,flex[block=64,dbias=atomic]" -> 2 entries) and parse each; empty
/// entries are skipped. Throws as parse_variant().
std::vector<VariantRequest> parse_backend_list(const std::string& text, const std::string& file,
                                               const std::string& pointer);

/// Every option of `specs` at its default, overridden by `given`. Throws
/// InputError(file, pointer, ...) naming the backend, the option and the value for
/// an option `specs` does not declare (listing those it does) or a value it does
/// not allow.
OptionValues resolve_options(const std::string& backend, const OptionSpecs& specs,
                             const std::vector<std::pair<std::string, std::string>>& given, const std::string& file,
                             const std::string& pointer);

/// The variant's label: `backend`, plus "[k=v,...]" of the options whose value
/// differs from their default, sorted by name ("cpu", "cpu[threads=1]").
std::string variant_label(const std::string& backend, const OptionSpecs& specs, const OptionValues& values);

/// The resolved options as a JSON object, typed per spec (bool, integer, string).
nlohmann::json options_json(const OptionSpecs& specs, const OptionValues& values);

/// The canonical text of every member of a typed options object (as options_json
/// writes it, e.g. read back from a report row or an isolated unit's request).
/// Throws std::invalid_argument on a member that is not a bool, integer or string.
std::vector<std::pair<std::string, std::string>> option_pairs_from_json(const nlohmann::json& j);

}  // namespace attnbench
