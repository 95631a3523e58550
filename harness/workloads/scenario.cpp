// Scenario matrices: parsing, expansion, case ids, model presets, packing hookup.
// The format is documented in scenario.hpp and docs/scenarios.md.
#include "harness/workloads/scenario.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <unordered_map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "harness/model/budget.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"

namespace attnbench {

using nlohmann::json;
using jsonu::child_path;
using jsonu::show;

namespace {
/// Append `item` to `s`, preceded by `sep` unless `s` is empty.
void append_sep(std::string& s, const char* sep, const std::string& item) {
  if (!s.empty()) s += sep;
  s += item;
}
}  // namespace

// ------------------------------------------------------------------ presets

const std::vector<ModelPreset>& model_presets() {
  // num_attention_heads / num_key_value_heads / head_dim (/ sliding_window /
  // attn_logit_softcapping) of each model's published config.json.
  static const std::vector<ModelPreset> presets = {
      {"llama3-8b", 32, 8, 128, -1, 0.0},
      {"llama3.2-1b", 32, 8, 64, -1, 0.0},
      {"llama3-70b", 64, 8, 128, -1, 0.0},
      {"mistral-7b", 32, 8, 128, 4096, 0.0},
      {"gemma2-9b", 16, 8, 256, 4096, 50.0},
      {"qwen2.5-7b", 28, 4, 128, -1, 0.0},
  };
  return presets;
}

const ModelPreset* find_model_preset(const std::string& name) {
  for (const auto& p : model_presets())
    if (p.name == name) return &p;
  return nullptr;
}

// ------------------------------------------------------------------ paths

std::string scenarios_dir() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("ATTNBENCH_SCENARIOS_DIR"); env && *env) return env;
  std::error_code ec;
  if (fs::is_directory("scenarios", ec)) return "scenarios";
  // An installed binary (cmake --install) finds PREFIX/share/attnbench/scenarios.
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "attnbench" / "scenarios";
    if (fs::is_directory(installed, ec)) return installed.string();
  }
  return std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios";
}

std::string resolve_scenario_path(const std::string& arg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (arg.empty()) throw InputError("", "", "empty scenario name");
  if (fs::is_regular_file(arg, ec)) return arg;
  const std::string dir = scenarios_dir();
  for (const std::string& cand : {dir + "/" + arg, dir + "/" + arg + ".json"})
    if (fs::is_regular_file(cand, ec)) return cand;
  std::string known;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".json")
        append_sep(known, ", ", e.path().stem().string());
  throw InputError(arg, "",
                   "no such scenario file or name \"" + arg + "\" (names in " + dir + ": " +
                       (known.empty() ? std::string("none") : known) + ")");
}

// ------------------------------------------------------------------ labels

namespace {

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '+' || c == '-';
    out += ok ? c : '-';
  }
  return out.empty() ? std::string("x") : out;
}

std::string num_str(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    double d = v.get<double>();
    std::ostringstream os;
    os.precision(12);
    os << d;
    return os.str();
  }
  return v.dump();
}

std::string window_bound(const json& v) {
  if (v.is_number() && v.get<double>() == -1) return "inf";
  return num_str(v);
}

std::string mask_entry_label(const json& m) {
  if (!m.is_object() || !m.contains("kind") || !m["kind"].is_string()) return "mask";
  const std::string k = m["kind"].get<std::string>();
  // A label only: a malformed entry (an align that is not a string, found by fuzz_scenario)
  // gets a plain label here and its InputError where the problem is parsed.
  if (k == "causal") return m.contains("align") && m["align"] == "top_left" ? "causal-tl" : "causal";
  if (k == "sliding_window")
    return "win" + window_bound(m.value("left", json(-1))) + "-" + window_bound(m.value("right", json(-1)));
  if (k == "document") return "doc";
  if (k == "prefix_lm") return "prefix" + num_str(m.value("prefix_len", json(0)));
  if (k == "padding") return "pad";
  if (k == "block_sparse") return "sparse" + num_str(m.value("density", json(1)));
  return k;
}

std::string mask_label(const json& v) {
  if (v.is_null() || (v.is_array() && v.empty())) return "full";
  if (v.is_object()) return mask_entry_label(v);
  if (!v.is_array()) return "mask";
  std::string out;
  for (const auto& m : v) append_sep(out, "+", mask_entry_label(m));
  return out;
}

std::string score_mod_label(const json& v) {
  if (v.is_null()) return "nomod";
  if (v.is_string()) return v.get<std::string>() == "none" ? "nomod" : v.get<std::string>();
  if (!v.is_object() || !v.contains("kind") || !v["kind"].is_string()) return "mod";
  const std::string k = v["kind"].get<std::string>();
  if (k == "none") return "nomod";
  if (k == "softcap") return "softcap" + num_str(v.value("cap", json(0)));
  if (k == "rel_bias") return "relbias" + num_str(v.value("max_distance", json(0)));
  if (k == "offset_bias") return "offsetbias" + num_str(v.value("size", json(0)));
  return k;
}

std::string source_label(const json& s) {
  if (!s.is_object() || !s.contains("kind") || !s["kind"].is_string()) return "source";
  const std::string k = s["kind"].get<std::string>();
  if (k == "fixed") return "fixed" + num_str(s.value("length", json(0)));
  if (k == "uniform") return "uniform" + num_str(s.value("min", json(0))) + "-" + num_str(s.value("max", json(0)));
  if (k == "lognormal") return "lognormal" + num_str(s.value("mu", json(0))) + "-" + num_str(s.value("sigma", json(0)));
  if (k == "empirical" && s.contains("file") && s["file"].is_string())
    return std::filesystem::path(s["file"].get<std::string>()).stem().string();
  return k;
}

std::string packing_label(const json& v) {
  if (v.is_null()) return "nopack";
  if (!v.is_object()) return "packing";
  if (v.contains("name") && v["name"].is_string()) return v["name"].get<std::string>();
  std::string out = source_label(v.value("source", json()));
  out += "-" + (v.contains("strategy") && v["strategy"].is_string() ? v["strategy"].get<std::string>()
                                                                     : std::string("greedy"));
  if (v.contains("fill") && v["fill"].is_number() && v["fill"].get<double>() != 1.0) out += "-fill" + num_str(v["fill"]);
  if (v.value("pad_to", json("")) == "longest") out += "-padlongest";
  if (v.contains("shuffle") && v["shuffle"].is_string()) out += "-" + v["shuffle"].get<std::string>();
  return out;
}

}  // namespace

std::string axis_value_label(const std::string& axis, const json& v) {
  static const std::map<std::string, std::string> prefix = {
      {"batch", "B"},   {"heads_q", "Hq"},    {"heads_kv", "Hkv"}, {"seq", "S"},
      {"seq_q", "Sq"},  {"seq_k", "Sk"},      {"head_dim", "D"},   {"head_dim_v", "Dv"},
      {"seed", "seed"}, {"packing.fill", "fill"}, {"packing.max_seq_len", "msl"},
      {"packing.num_packs", "P"}, {"packing.seed", "pseed"}, {"packing.pool_docs", "pool"}};
  std::string out;
  if (auto it = prefix.find(axis); it != prefix.end()) out = it->second + num_str(v);
  else if (axis == "label" || axis == "model" || axis == "dtype" || axis == "layout" ||
           axis == "packing.strategy" || axis == "packing.shuffle")
    out = v.is_string() ? v.get<std::string>() : (v.is_null() && axis == "model" ? "nomodel" : v.dump());
  else if (axis == "scale") out = v.is_null() ? "scaledefault" : "scale" + num_str(v);
  else if (axis == "mask") out = mask_label(v);
  else if (axis == "score_mod") out = score_mod_label(v);
  else if (axis == "packing") out = packing_label(v);
  else if (axis == "packing.source") out = source_label(v);
  else if (axis == "packing.pad_to")
    out = v == "longest" ? "padlongest" : (v == "max_seq_len" ? "padmax" : "pad" + (v.is_string() ? v.get<std::string>() : v.dump()));
  else out = v.is_string() ? v.get<std::string>() : v.dump();
  return sanitize(out);
}

// ------------------------------------------------------------------ expansion

namespace {

const std::vector<std::string>& problem_fields() {
  static const std::vector<std::string> f = {"batch", "heads_q", "heads_kv", "seq_q", "seq_k",
                                             "head_dim", "head_dim_v", "dtype", "scale", "layout",
                                             "mask", "score_mod", "seed"};
  return f;
}

const std::vector<std::string>& packing_axis_keys() {
  static const std::vector<std::string> k = {"source", "strategy", "shuffle", "seed", "max_seq_len",
                                             "num_packs", "fill", "pad_to", "pool_docs"};
  return k;
}

/// Canonical expansion order of axis names; -1 for an unknown name.
int canonical_rank(const std::string& name) {
  static const std::vector<std::string> order = [] {
    std::vector<std::string> o = {"label", "model", "batch", "heads_q", "heads_kv", "seq", "seq_q",
                                  "seq_k", "head_dim", "head_dim_v", "dtype", "layout", "scale",
                                  "mask", "score_mod", "packing"};
    for (const auto& k : packing_axis_keys()) o.push_back("packing." + k);
    o.push_back("seed");
    return o;
  }();
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] == name) return static_cast<int>(i);
  return -1;
}

std::string known_axes_list() {
  std::string s;
  for (const char* n : {"label", "model", "batch", "heads_q", "heads_kv", "seq", "seq_q", "seq_k",
                        "head_dim", "head_dim_v", "dtype", "layout", "scale", "mask", "score_mod",
                        "packing", "packing.<key>", "seed"})
    append_sep(s, ", ", n);
  return s;
}

std::string presets_list() {
  std::string s;
  for (const auto& p : model_presets()) append_sep(s, ", ", p.name);
  return s;
}

struct AxisValue {
  json value;
  std::string label;
  std::string path;
};
struct Axis {
  std::string name;
  std::string path;
  std::vector<AxisValue> values;
};
struct Group {
  std::vector<size_t> members;  // indices into axes
  size_t size = 0;
  int rank = 0;
  std::vector<std::string> labels;  // id label of each position, unique within the group
};
/// Most cases one scenario file may expand to, all parts together (before exclusion).
constexpr size_t kMaxScenarioCases = 100000;

struct Rule {
  json rule;
  std::string path;
  bool used = false;
};

/// The key of a JSON value in RuleSet's index: equal values (JSON equality:
/// 1 == 1.0) get equal keys; "" for objects and arrays (not indexed).
std::string value_key(const json& v) {
  if (v.is_number()) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "n:%.17g", v.get<double>());
    return buf;
  }
  if (v.is_string()) return "s:" + v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "b:1" : "b:0";
  if (v.is_null()) return "z";
  return "";
}

/// A matrix's exclude rules, indexed by the value of each rule's first field, so
/// that a case is tested only against the rules that can match it: the cost is
/// about (cases x distinct first fields + matches), not rules x cases.
struct RuleSet {
  std::vector<Rule> rules;
  /// first field -> value key (value_key(), or "s:" + a label) -> rule indices, ascending
  std::map<std::string, std::unordered_map<std::string, std::vector<size_t>>> by_first;
  std::vector<size_t> unindexed;  ///< rules whose first value is an object or array
  void build() {
    for (size_t i = 0; i < rules.size(); ++i) {
      const auto first = rules[i].rule.begin();
      const std::string k = value_key(first.value());
      if (k.empty()) unindexed.push_back(i);
      else by_first[first.key()][k].push_back(i);
    }
  }
};

/// The raw message of an InputError (its what() without "file: path: ").
std::string raw_message(const InputError& e) {
  std::string w = e.what();
  size_t skip = InputError::format(e.file(), e.json_path(), "").size();
  return skip <= w.size() ? w.substr(skip) : w;
}

/// First token of a JSON pointer ("/mask/0/kind" -> "mask") and the rest ("/0/kind").
std::pair<std::string, std::string> split_pointer(const std::string& p) {
  if (p.size() < 2 || p[0] != '/') return {"", p};
  size_t slash = p.find('/', 1);
  if (slash == std::string::npos) return {p.substr(1), ""};
  return {p.substr(1, slash - 1), p.substr(slash)};
}

/// Builds one case from its merged fields, tracking where each field came from so
/// that errors name the right place in the file.
struct CaseBuilder {
  explicit CaseBuilder(const std::string& f) : file(f) {}
  const std::string& file;
  json fields = json::object();
  std::map<std::string, std::string> origin;  // problem field -> JSON pointer in the file
  std::set<std::string> axis_set;             // fields set by an axis
  bool mask_wrapped = false;                  // the mask was a single object, wrapped into a list
  std::string default_prefix;                 // where missing fields would go ("/base")
  std::string id;

  /// `e` with its pointer mapped to where the field came from in the file.
  InputError mapped(const InputError& e) const {
    auto [head, rest] = split_pointer(e.json_path());
    std::string path;
    if (auto it = origin.find(head); it != origin.end()) {
      if (head == "mask" && mask_wrapped && rest.rfind("/0", 0) == 0) rest = rest.substr(2);
      path = it->second + rest;
    } else {
      path = default_prefix + e.json_path();
    }
    return InputError(file, path, raw_message(e) + " (case " + id + ")");
  }
  [[noreturn]] void fail_mapped(const InputError& e) const { throw mapped(e); }

  void set(const std::string& key, const json& v, const std::string& path, bool from_axis) {
    if (key == "seq") {
      set("seq_q", v, path, from_axis);
      set("seq_k", v, path, from_axis);
      return;
    }
    fields[key] = v;
    origin[key] = path;
    if (from_axis) axis_set.insert(key);
    if (key == "mask") mask_wrapped = false;
  }
};

struct Expander {
  const std::string& file;
  std::optional<uint64_t> seed_override;
  std::vector<Case> cases;
  size_t expanded_ = 0;  ///< combinations of every matrix so far, before exclusion (kMaxScenarioCases)

  void check_base_keys(const json& base, const std::string& bpath) {
    jsonu::require_object(base, file, bpath);
    for (auto it = base.begin(); it != base.end(); ++it) {
      const std::string& k = it.key();
      bool ok = k == "seq" || k == "model" || k == "packing" ||
                std::find(problem_fields().begin(), problem_fields().end(), k) != problem_fields().end();
      if (!ok)
        throw InputError(file, child_path(bpath, k),
                         "unknown base field \"" + k + "\" (expected a problem field, seq, model or packing)");
    }
    if (base.contains("seq") && (base.contains("seq_q") || base.contains("seq_k")))
      throw InputError(file, child_path(bpath, "seq"), "give either seq or seq_q/seq_k, not both");
  }

  /// The base fields of one matrix: `outer_base` (inherited from the file, for
  /// parts, with their paths in `outer_paths`) overlaid with the matrix's own "base"
  /// (seq replaces seq_q / seq_k and vice versa). Sets `base_paths` and the JSON
  /// pointer prefix of fields the matrix does not set.
  json merged_base(const json& m, const std::string& mpath, const json& outer_base,
                   const std::map<std::string, std::string>& outer_paths,
                   std::map<std::string, std::string>& base_paths, std::string& default_prefix) {
    json base = outer_base.is_object() ? outer_base : json::object();
    base_paths = outer_paths;
    default_prefix = outer_paths.empty() ? child_path(mpath, "base") : "/base";
    if (m.contains("base")) {
      const std::string bpath = child_path(mpath, "base");
      check_base_keys(m["base"], bpath);
      default_prefix = bpath;
      for (auto it = m["base"].begin(); it != m["base"].end(); ++it) {
        if (it.key() == "seq") {
          base.erase("seq_q");
          base.erase("seq_k");
        }
        if (it.key() == "seq_q" || it.key() == "seq_k") base.erase("seq");
        base[it.key()] = it.value();
        base_paths[it.key()] = child_path(bpath, it.key());
      }
    }
    return base;
  }

  /// The matrix's "axes", in file order, each value with its label and path.
  std::vector<Axis> parse_axes(const json& m, const std::string& mpath) {
    std::vector<Axis> axes;
    if (m.contains("axes")) {
      const std::string apath = child_path(mpath, "axes");
      const json& a = m["axes"];
      jsonu::require_object(a, file, apath);
      for (auto it = a.begin(); it != a.end(); ++it) {
        const std::string& name = it.key();
        const std::string vpath = child_path(apath, name);
        if (canonical_rank(name) < 0)
          throw InputError(file, vpath, "unknown axis \"" + name + "\" (expected one of: " + known_axes_list() + ")");
        if (!it.value().is_array() || it.value().empty())
          throw InputError(file, vpath, "an axis needs a non-empty list of values, got " + show(it.value()));
        Axis ax;
        ax.name = name;
        ax.path = vpath;
        for (size_t i = 0; i < it.value().size(); ++i) {
          const json& v = it.value()[i];
          if (name == "label" && !v.is_string())
            throw InputError(file, child_path(vpath, i), "label values must be strings, got " + show(v));
          if (name == "model" && !v.is_string() && !v.is_null())
            throw InputError(file, child_path(vpath, i), "model values must be preset names or null, got " + show(v));
          ax.values.push_back({v, axis_value_label(name, v), child_path(vpath, i)});
        }
        axes.push_back(std::move(ax));
      }
      auto has = [&](const char* n) { return a.contains(n); };
      if (has("seq") && (has("seq_q") || has("seq_k")))
        throw InputError(file, child_path(apath, "seq"), "give either a seq axis or seq_q/seq_k axes, not both");
    }
    return axes;
  }

  /// The groups the odometer turns: each "zip" list as one group, every other axis
  /// alone; members and groups in canonical order, labels made unique.
  std::vector<Group> zip_groups(const json& m, const std::string& mpath, const std::vector<Axis>& axes) {
    auto axis_index = [&](const std::string& n) -> int {
      for (size_t i = 0; i < axes.size(); ++i)
        if (axes[i].name == n) return static_cast<int>(i);
      return -1;
    };

    std::vector<Group> groups;
    std::vector<bool> grouped(axes.size(), false);
    if (m.contains("zip")) {
      const std::string zpath = child_path(mpath, "zip");
      const json& z = m["zip"];
      if (!z.is_array()) throw InputError(file, zpath, "expected a list of axis-name lists, got " + show(z));
      for (size_t g = 0; g < z.size(); ++g) {
        const std::string gpath = child_path(zpath, g);
        if (!z[g].is_array() || z[g].empty())
          throw InputError(file, gpath, "expected a non-empty list of axis names, got " + show(z[g]));
        Group grp;
        grp.rank = 1 << 30;
        for (size_t k = 0; k < z[g].size(); ++k) {
          const std::string mp = child_path(gpath, k);
          std::string n = jsonu::get_string(z[g][k], file, mp);
          int ai = axis_index(n);
          if (ai < 0) throw InputError(file, mp, "zip names \"" + n + "\", which is not an axis of this matrix");
          if (grouped[static_cast<size_t>(ai)])
            throw InputError(file, mp, "axis \"" + n + "\" appears in more than one zip position");
          grouped[static_cast<size_t>(ai)] = true;
          grp.members.push_back(static_cast<size_t>(ai));
          grp.rank = std::min(grp.rank, canonical_rank(n));
        }
        grp.size = axes[grp.members[0]].values.size();
        for (size_t k : grp.members)
          if (axes[k].values.size() != grp.size)
            throw InputError(file, gpath,
                             "zipped axes must have equal lengths: \"" + axes[grp.members[0]].name + "\" has " +
                                 std::to_string(grp.size) + " values, \"" + axes[k].name + "\" has " +
                                 std::to_string(axes[k].values.size()) + " (value " + show(z[g]) + ")");
        groups.push_back(std::move(grp));
      }
    }
    for (size_t i = 0; i < axes.size(); ++i)
      if (!grouped[i]) {
        Group g;
        g.members = {i};
        g.size = axes[i].values.size();
        g.rank = canonical_rank(axes[i].name);
        groups.push_back(std::move(g));
      }
    for (auto& g : groups) {
      std::sort(g.members.begin(), g.members.end(),
                [&](size_t a, size_t b) { return canonical_rank(axes[a].name) < canonical_rank(axes[b].name); });
      int label_member = -1;
      for (size_t k : g.members)
        if (axes[k].name == "label") label_member = static_cast<int>(k);
      for (size_t i = 0; i < g.size; ++i) {
        std::string lab;
        if (label_member >= 0) lab = axes[static_cast<size_t>(label_member)].values[i].label;
        else
          for (size_t k : g.members) append_sep(lab, "-", axes[k].values[i].label);
        g.labels.push_back(lab);
      }
      disambiguate(g.labels);
    }
    std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.rank < b.rank; });
    return groups;
  }

  /// The matrix's "exclude" rules, every key checked.
  RuleSet parse_rules(const json& m, const std::string& mpath) {
    RuleSet set;
    std::vector<Rule>& rules = set.rules;
    if (m.contains("exclude")) {
      const std::string epath = child_path(mpath, "exclude");
      const json& ex = m["exclude"];
      if (!ex.is_array()) throw InputError(file, epath, "expected a list of rules {field: value}, got " + show(ex));
      for (size_t r = 0; r < ex.size(); ++r) {
        const std::string rp = child_path(epath, r);
        if (!ex[r].is_object() || ex[r].empty())
          throw InputError(file, rp, "an exclude rule is a non-empty object {field: value}, got " + show(ex[r]));
        for (auto it = ex[r].begin(); it != ex[r].end(); ++it)
          if (canonical_rank(it.key()) < 0 && it.key() != "packing.name")
            throw InputError(file, child_path(rp, it.key()),
                             "unknown field \"" + it.key() + "\" in exclude rule (expected one of: " +
                                 known_axes_list() + ")");
        rules.push_back({ex[r], rp, false});
      }
    }
    set.build();
    return set;
  }

  /// Expand one matrix (the whole file, or one part). `outer_base` holds base
  /// fields inherited from the file (for parts), with their paths in `outer_paths`.
  /// Steps: merged_base, parse_axes, zip_groups, parse_rules, then the odometer
  /// over the groups (build_case per combination).
  void expand(const json& m, const std::string& mpath, const json& outer_base,
              const std::map<std::string, std::string>& outer_paths, const std::string& part,
              const std::string& fallback_id) {
    std::map<std::string, std::string> base_paths;
    std::string default_prefix;
    const json base = merged_base(m, mpath, outer_base, outer_paths, base_paths, default_prefix);
    const std::vector<Axis> axes = parse_axes(m, mpath);
    std::vector<Group> groups = zip_groups(m, mpath, axes);
    size_t total = 1;
    for (const auto& g : groups) {
      total *= g.size;
      if (total > kMaxScenarioCases)
        throw InputError(file, child_path(mpath, "axes"), "the matrix expands to more than 100000 cases");
    }
    // One cap for the whole file: parts add up (1000 parts of 100000 cases are refused at once).
    expanded_ += total;
    if (expanded_ > kMaxScenarioCases)
      throw InputError(file, mpath.empty() ? "/axes" : mpath,
                       "the scenario expands to more than 100000 cases (all parts together)");

    RuleSet rules = parse_rules(m, mpath);

    // ---- odometer over the groups, the last fastest
    std::vector<size_t> idx(groups.size(), 0);
    for (size_t n = 0; n < total; ++n) {
      build_case(base, base_paths, default_prefix, axes, groups, idx, rules, part, fallback_id);
      for (size_t g = groups.size(); g-- > 0;) {
        if (++idx[g] < groups[g].size) break;
        idx[g] = 0;
      }
    }
    for (const auto& r : rules.rules)
      if (!r.used) throw InputError(file, r.path, "exclude rule " + show(r.rule) + " matches no case");
  }

  /// Make equal labels unique: each member of a set of equal labels gets "-v<index>".
  static void disambiguate(std::vector<std::string>& labels) {
    std::map<std::string, int> count;
    for (const auto& l : labels) ++count[l];
    for (size_t i = 0; i < labels.size(); ++i)
      if (count[labels[i]] > 1) labels[i] += "-v" + std::to_string(i);
    std::set<std::string> seen;
    bool clash = false;
    for (const auto& l : labels) clash = clash || !seen.insert(l).second;
    if (clash)
      for (size_t i = 0; i < labels.size(); ++i) labels[i] = "v" + std::to_string(i);
  }

  /// Apply model preset `model` (a name, or null) under the case's axes: base <
  /// model < axes. Returns the preset's name ("" without one).
  std::string apply_model_preset(CaseBuilder& cb, const json& model, const std::string& model_path,
                                 const std::string& id) {
    if (model.is_null()) return {};
    if (!model.is_string())
      throw InputError(file, model_path, "model must be a preset name, got " + show(model) + " (case " + id + ")");
    const std::string model_name = model.get<std::string>();
    const ModelPreset* mp = find_model_preset(model_name);
    if (!mp)
      throw InputError(file, model_path,
                       "unknown model preset " + show(model) + " (expected one of: " + presets_list() + ") (case " + id + ")");
    auto apply = [&](const char* f, int64_t v) {
      if (!cb.axis_set.count(f)) cb.set(f, v, model_path, false);
    };
    apply("heads_q", mp->heads_q);
    apply("heads_kv", mp->heads_kv);
    if (cb.axis_set.count("head_dim") && !cb.axis_set.count("head_dim_v")) {
      cb.fields.erase("head_dim_v");  // Dv follows the axis's Dqk
    } else {
      apply("head_dim", mp->head_dim);
      apply("head_dim_v", mp->head_dim);
    }
    if (mp->sliding_window > 0) {
      json& mk = cb.fields["mask"];
      if (mk.is_null()) {
        mk = json::array();
        cb.origin["mask"] = model_path;
      } else if (mk.is_object()) {
        mk = json::array({mk});
        cb.mask_wrapped = true;
      }
      if (mk.is_array()) {
        bool has_window = false;
        for (const auto& e : mk) has_window = has_window || (e.is_object() && e.value("kind", json()) == "sliding_window");
        if (!has_window) mk.push_back({{"kind", "sliding_window"}, {"left", mp->sliding_window}, {"right", 0}});
      }
    }
    if (mp->softcap > 0 && !cb.axis_set.count("score_mod")) {
      const json sm = cb.fields.value("score_mod", json());
      bool none = sm.is_null() || sm == "none" || (sm.is_object() && sm.value("kind", json()) == "none");
      if (none) cb.set("score_mod", json{{"kind", "softcap"}, {"cap", mp->softcap}}, model_path, false);
    }
    return model_name;
  }

  /// Whether an exclusion rule matches the case (on axis values and effective
  /// fields, before packing); marks the rule used.
  static bool excluded(RuleSet& set, const CaseBuilder& cb, const json& model, const json& packing,
                       const json& axes_json, const std::map<std::string, const AxisValue*>& chosen) {
    auto actual_of = [&](const std::string& k) -> json {
      if (k == "model") return model;
      if (k == "label") return axes_json.value("label", json());
      if (k == "packing") return packing;
      if (k.rfind("packing.", 0) == 0) return packing.is_object() ? packing.value(k.substr(8), json()) : json();
      if (k == "seq") return chosen.count("seq") ? chosen.at("seq")->value : cb.fields.value("seq_q", json());
      return cb.fields.value(k, json());
    };
    auto label_of = [&](const std::string& k, const json& actual) {
      return chosen.count(k) ? chosen.at(k)->label : axis_value_label(k, actual);
    };
    // Candidates: the rules whose first field's value equals this case's value or label.
    std::vector<size_t> cand = set.unindexed;
    for (const auto& [k, index] : set.by_first) {
      const json actual = actual_of(k);
      for (const std::string& key : {value_key(actual), "s:" + label_of(k, actual)}) {
        if (key.empty()) continue;
        if (const auto it = index.find(key); it != index.end()) cand.insert(cand.end(), it->second.begin(), it->second.end());
      }
    }
    std::sort(cand.begin(), cand.end());
    cand.erase(std::unique(cand.begin(), cand.end()), cand.end());
    for (size_t i : cand) {  // in file order: the first rule that matches is the one used
      Rule& r = set.rules[i];
      bool all = true;
      for (auto it = r.rule.begin(); all && it != r.rule.end(); ++it) {
        const json actual = actual_of(it.key());
        all = it.value() == actual ||
              (it.value().is_string() && it.value().get<std::string>() == label_of(it.key(), actual));
      }
      if (all) {
        r.used = true;
        return true;
      }
    }
    return false;
  }

  /// The packing spec of a packed case (null packing: none), with batch and
  /// sequence lengths set from it so that the problem parses; a document or
  /// padding mask beside packing is refused.
  std::optional<PackingSpec> packing_of_case(CaseBuilder& cb, const json& packing, const std::string& packing_path,
                                             std::map<std::string, std::string>& packing_key_paths,
                                             const std::string& id) {
    if (packing.is_null()) return std::nullopt;
    auto int_field = [&](const char* f) -> int64_t {
      const json v = cb.fields.value(f, json());
      // Only a default: an out-of-range value is left to problem_from_json to name.
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return 0;
      return v.is_number_integer() ? v.get<int64_t>() : 0;
    };
    std::optional<PackingSpec> spec;
    try {
      spec = packing_spec_from_json(packing, file, "", int_field("seq_q"), int_field("batch"));
    } catch (const InputError& e) {
      auto [head, rest] = split_pointer(e.json_path());
      std::string path = packing_key_paths.count(head) ? packing_key_paths[head] + rest : packing_path + e.json_path();
      if (e.file() != file) throw;  // an error inside a data file names that file
      throw InputError(file, path, raw_message(e) + " (case " + id + ")");
    }
    if (cb.fields.contains("mask")) {
      const json& mk = cb.fields["mask"];
      std::vector<json> entries;
      if (mk.is_array()) entries.assign(mk.begin(), mk.end());
      else if (mk.is_object()) entries.push_back(mk);
      for (size_t i = 0; i < entries.size(); ++i) {
        json kind = entries[i].is_object() ? entries[i].value("kind", json()) : json();
        if (kind == "document" || kind == "padding")
          throw InputError(file, cb.origin["mask"] + (mk.is_array() && !cb.mask_wrapped ? "/" + std::to_string(i) : ""),
                           "a packed case builds its document mask from the packing; remove the mask's " +
                               show(kind) + " entry (case " + id + ")");
      }
    }
    cb.set("batch", spec->num_packs, packing_path, false);
    cb.set("seq_q", spec->max_seq_len, packing_path, false);
    cb.set("seq_k", spec->max_seq_len, packing_path, false);
    return spec;
  }

  /// Parse the case's problem, pack its documents (spec), validate, and append it
  /// to `cases`; a case over the size budget is appended with `invalid` set.
  void finish_case(Case c, CaseBuilder& cb, std::optional<PackingSpec> spec, const std::string& packing_path) {
    try {
      c.problem = problem_from_json(cb.fields, file, "");
    } catch (const BudgetError& e) {
      // Too large for the budget: this case becomes an error row, the sweep goes on.
      c.invalid = cb.mapped(e).what();
      cases.push_back(std::move(c));
      return;
    } catch (const InputError& e) {
      cb.fail_mapped(e);
    }
    if (seed_override) c.problem.seed = *seed_override;
    if (spec) {
      if (seed_override) spec->seed = *seed_override;
      PackResult res;
      try {
        res = pack_documents(*spec, c.problem.seed);
      } catch (const BudgetError& e) {
        // Too many documents for the budget: this case becomes an error row.
        c.invalid = InputError(file, packing_path, raw_message(e) + " (case " + c.id + ")").what();
        cases.push_back(std::move(c));
        return;
      } catch (const std::invalid_argument& e) {
        throw InputError(file, packing_path, std::string(e.what()) + " (case " + c.id + ")");
      }
      c.problem.batch = spec->num_packs;
      c.problem.seq_q = c.problem.seq_k = res.seq_len;
      c.problem.mask.push_back(res.document_term());
      try {
        validate(c.problem, file, "");
      } catch (const BudgetError& e) {
        c.invalid = cb.mapped(e).what();
      } catch (const InputError& e) {
        cb.fail_mapped(e);
      }
      c.packing = res.stats;
    }
    cases.push_back(std::move(c));
  }

  void build_case(const json& base, const std::map<std::string, std::string>& base_paths,
                  const std::string& default_prefix, const std::vector<Axis>& axes,
                  const std::vector<Group>& groups, const std::vector<size_t>& idx, RuleSet& rules,
                  const std::string& part, const std::string& fallback_id) {
    CaseBuilder cb(file);
    cb.default_prefix = default_prefix;

    // Id.
    std::string id = part;
    for (size_t g = 0; g < groups.size(); ++g) append_sep(id, "_", groups[g].labels[idx[g]]);
    if (id.empty()) id = fallback_id;
    cb.id = id;

    // Base fields (model and packing handled below).
    for (auto it = base.begin(); it != base.end(); ++it) {
      if (it.key() == "model" || it.key() == "packing") continue;
      cb.set(it.key(), it.value(), base_paths.at(it.key()), false);
    }
    json model = base.contains("model") ? base["model"] : json();
    std::string model_path = base.contains("model") ? base_paths.at("model") : "";
    json packing = base.contains("packing") ? base["packing"] : json();
    std::string packing_path = base.contains("packing") ? base_paths.at("packing") : "";
    std::map<std::string, std::string> packing_key_paths;
    std::vector<std::pair<std::string, const AxisValue*>> packing_keys;
    json axes_json = json::object();
    std::map<std::string, const AxisValue*> chosen;

    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t k : groups[g].members) {
        const Axis& ax = axes[k];
        const AxisValue& v = ax.values[idx[g]];
        axes_json[ax.name] = v.value;
        chosen[ax.name] = &v;
        if (ax.name == "label") continue;
        if (ax.name == "model") {
          model = v.value;
          model_path = v.path;
        } else if (ax.name == "packing") {
          packing = v.value;
          packing_path = v.path;
        } else if (ax.name.rfind("packing.", 0) == 0) {
          packing_keys.emplace_back(ax.name.substr(8), &v);
        } else {
          cb.set(ax.name, v.value, v.path, true);
        }
      }

    const std::string model_name = apply_model_preset(cb, model, model_path, id);

    // Effective packing object (base/axis, then packing.<key> axes).
    for (const auto& [key, v] : packing_keys) {
      if (!packing.is_object())
        throw InputError(file, v->path,
                         "axis \"packing." + key + "\" needs a packing object in base or in the packing axis (case " +
                             id + ")");
      packing[key] = v->value;
      packing_key_paths[key] = v->path;
    }

    if (excluded(rules, cb, model, packing, axes_json, chosen)) return;

    std::optional<PackingSpec> spec = packing_of_case(cb, packing, packing_path, packing_key_paths, id);
    Case c;
    c.id = id;
    c.part = part;
    c.model = model_name;
    c.axes = axes_json;
    finish_case(std::move(c), cb, std::move(spec), packing_path);
  }
};

/// One option value of a scenario's backend entry as variant text ("64", "true",
/// "sm80"). Throws InputError for other JSON types or a string holding a character
/// the variant syntax reserves.
std::string option_text(const json& v, const std::string& file, const std::string& path) {
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_string()) {
    const std::string t = v.get<std::string>();
    if (t.find_first_of(",[]=") != std::string::npos)
      throw InputError(file, path, "an option value may not hold ',', '[', ']' or '=', got " + show(v));
    return t;
  }
  throw InputError(file, path, "expected a boolean, an integer or a string option value, got " + show(v));
}

/// The scenario's "backends" list as variant texts (docs/scenarios.md): a string
/// is one variant as written ("flex", "flex[block=64]"); an object
/// {"backend": NAME, "options": {k: v}, "sweep": {k: [v, ...], ...}} is one variant
/// per combination of the sweep's values (cartesian product, in key order, the
/// first key slowest), each with `options` too. Names and options are checked
/// against the backends by the runner (BackendRegistry::resolve_variants).
std::vector<std::string> scenario_backends(const json& list, const std::string& file) {
  if (!list.is_array() || list.empty())
    throw InputError(file, "/backends", "expected a non-empty list of backend variants, got " + show(list));
  std::vector<std::string> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string bp = child_path("/backends", i);
    if (list[i].is_string()) {
      out.push_back(list[i].get<std::string>());
      continue;
    }
    jsonu::require_object(list[i], file, bp);
    jsonu::reject_unknown_keys(list[i], {"backend", "options", "sweep"}, file, bp);
    const std::string name = jsonu::get_string(jsonu::require(list[i], "backend", file, bp), file, child_path(bp, "backend"));
    if (name.empty() || name.find_first_of(",[]=") != std::string::npos)
      throw InputError(file, child_path(bp, "backend"), "expected a backend name, got " + show(list[i]["backend"]));
    std::vector<std::string> fixed;
    if (list[i].contains("options")) {
      const std::string op = child_path(bp, "options");
      jsonu::require_object(list[i]["options"], file, op);
      for (const auto& [k, v] : list[i]["options"].items()) fixed.push_back(k + "=" + option_text(v, file, child_path(op, k)));
    }
    std::vector<std::vector<std::string>> combos = {fixed};
    if (list[i].contains("sweep")) {
      const std::string sp = child_path(bp, "sweep");
      jsonu::require_object(list[i]["sweep"], file, sp);
      if (list[i]["sweep"].empty()) throw InputError(file, sp, "expected at least one option to sweep, got {}");
      for (const auto& [k, values] : list[i]["sweep"].items()) {
        if (!values.is_array() || values.empty())
          throw InputError(file, child_path(sp, k), "expected a non-empty list of values, got " + show(values));
        std::vector<std::vector<std::string>> next;
        for (const auto& c : combos)
          for (size_t vi = 0; vi < values.size(); ++vi) {
            auto n = c;
            n.push_back(k + "=" + option_text(values[vi], file, child_path(child_path(sp, k), vi)));
            next.push_back(std::move(n));
          }
        combos = std::move(next);
      }
    }
    for (const auto& c : combos) {
      std::string text = name;
      for (size_t k = 0; k < c.size(); ++k) text += (k == 0 ? "[" : ",") + c[k];
      out.push_back(c.empty() ? text : text + "]");
    }
  }
  return out;
}

bool is_matrix(const json& j) {
  return j.is_object() && (j.contains("base") || j.contains("axes") || j.contains("parts"));
}

}  // namespace

Scenario scenario_from_json(const json& j, const std::string& file, std::optional<uint64_t> seed_override) {
  Scenario s;
  s.file = file;
  jsonu::require_object(j, file, "");
  const std::string stem = file.empty() ? std::string("scenario") : std::filesystem::path(file).stem().string();
  s.name = j.contains("name") ? jsonu::get_string(j["name"], file, "/name") : stem;
  if (j.contains("description")) s.description = jsonu::get_string(j["description"], file, "/description");
  if (j.contains("timing")) {
    jsonu::require_object(j["timing"], file, "/timing");
    jsonu::reject_unknown_keys(j["timing"], {"max_seconds"}, file, "/timing");
    if (j["timing"].contains("max_seconds")) {
      const double v = jsonu::get_number(j["timing"]["max_seconds"], file, "/timing/max_seconds");
      if (!(v > 0)) throw InputError(file, "/timing/max_seconds", "expected a positive number of seconds, got " + show(j["timing"]["max_seconds"]));
      s.max_seconds = v;
    }
  }

  if (j.contains("backends")) s.backends = scenario_backends(j["backends"], file);

  Expander ex{file, seed_override, {}};
  if (!is_matrix(j)) {
    // A single problem file.
    json p = j;
    p.erase("name");
    p.erase("description");
    p.erase("timing");
    p.erase("backends");
    Case c;
    c.id = sanitize(s.name);
    c.problem = problem_from_json(p, file, "");
    if (seed_override) c.problem.seed = *seed_override;
    s.cases.push_back(std::move(c));
    return s;
  }
  if (j.contains("parts")) {
    jsonu::reject_unknown_keys(j, {"name", "description", "timing", "backends", "base", "parts"}, file, "");
    json base = json::object();
    std::map<std::string, std::string> paths;
    if (j.contains("base")) {
      ex.check_base_keys(j["base"], "/base");
      base = j["base"];
      for (auto it = base.begin(); it != base.end(); ++it) paths[it.key()] = child_path("/base", it.key());
    }
    const json& parts = j["parts"];
    if (!parts.is_array() || parts.empty())
      throw InputError(file, "/parts", "expected a non-empty list of part objects, got " + show(parts));
    std::set<std::string> names;
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::string pp = child_path("/parts", i);
      jsonu::require_object(parts[i], file, pp);
      jsonu::reject_unknown_keys(parts[i], {"name", "description", "base", "axes", "zip", "exclude"}, file, pp);
      std::string name = jsonu::get_string(jsonu::require(parts[i], "name", file, pp), file, child_path(pp, "name"));
      if (name.empty() || sanitize(name) != name)
        throw InputError(file, child_path(pp, "name"),
                         "part names use only letters, digits, '.', '+' and '-', got " + show(parts[i]["name"]));
      if (!names.insert(name).second)
        throw InputError(file, child_path(pp, "name"), "duplicate part name " + show(parts[i]["name"]));
      if (parts[i].contains("description")) jsonu::get_string(parts[i]["description"], file, child_path(pp, "description"));
      ex.expand(parts[i], pp, base, paths, name, name);
    }
  } else {
    jsonu::reject_unknown_keys(j, {"name", "description", "timing", "backends", "base", "axes", "zip", "exclude"}, file,
                               "");
    ex.expand(j, "", json::object(), {}, "", sanitize(s.name));
  }
  if (ex.cases.empty()) throw InputError(file, "/exclude", "every case is excluded: the scenario is empty");
  std::set<std::string> ids;
  for (const auto& c : ex.cases)
    if (!ids.insert(c.id).second)
      throw InputError(file, "", "two cases share the id \"" + c.id + "\"; give the axes distinct values or labels");
  s.cases = std::move(ex.cases);
  return s;
}

Scenario load_scenario(const std::string& file, std::optional<uint64_t> seed_override) {
  return scenario_from_json(jsonu::load_file(file), file, seed_override);
}

std::vector<std::pair<std::string, std::string>> list_scenarios(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::string desc;
    try {
      Scenario s = load_scenario(f.string());
      desc = s.description.empty() ? std::string("single problem") : s.description;
      if (s.description.empty() && s.cases.size() != 1) desc = std::to_string(s.cases.size()) + " cases";
    } catch (const std::exception& e) {
      desc = std::string("error: ") + e.what();
    }
    out.emplace_back(f.stem().string(), desc);
  }
  return out;
}

}  // namespace attnbench
