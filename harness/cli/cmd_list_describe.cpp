// `attnbench list backends|scenarios` and `attnbench describe SCENARIO`.
//
// describe prints, per case: id, B, Hq/Hkv, Sq/Sk, Dqk/Dv, dtype, layout, mask,
// score mod, packing ratio and docs per pack (packed cases), useful pairs
// (count_allowed_pairs * Hq), executed pairs with 128x128 tiles
// (build_block_mask(p, 128, 128).executed_pairs_per_head(B) * Hq) and their ratio,
// the tile efficiency (docs/semantics.md section 8). Bad input exits with code 2 and a
// message naming file, JSON path and value.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/backend/backend.hpp"
#include "harness/model/block_mask.hpp"
#include "harness/cli/cli.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/printable.hpp"
#include "harness/model/mask.hpp"
#include "harness/workloads/scenario.hpp"

namespace attnbench::cli {

namespace {

/// Tile size of the "executed pairs" column (FlexAttention's default BlockMask).
constexpr int64_t kDescribeTile = 128;

/// Pair counts of one case (all query heads, all batch rows).
struct PairCounts {
  int64_t useful = 0;
  int64_t executed = 0;
  std::string error;  ///< the case could not be counted (std::bad_alloc of its BlockMask): "" when counted
  double efficiency() const { return executed > 0 ? static_cast<double>(useful) / static_cast<double>(executed) : 0.0; }
};

/// Never throws: a case that cannot be counted (its BlockMask does not fit in
/// host memory) gets `error`, and the other cases are described.
PairCounts count_pairs(const Problem& p) {
  PairCounts c;
  try {
    c.useful = count_allowed_pairs(p) * p.heads_q;
    BlockMask bm = build_block_mask(p, kDescribeTile, kDescribeTile);
    c.executed = bm.executed_pairs_per_head(p.batch) * p.heads_q;
  } catch (const std::bad_alloc& e) {
    c = {};
    c.error = std::string("cannot count its pairs: host out of memory (") + e.what() + ")";
  } catch (const std::exception& e) {
    c = {};
    c.error = std::string("cannot count its pairs: ") + e.what();
  }
  return c;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string docs_per_pack_text(const std::vector<int64_t>& d) {
  if (d.empty()) return "-";
  if (d.size() <= 8) {
    std::string s;
    for (auto n : d) {
      if (!s.empty()) s += "/";
      s += std::to_string(n);
    }
    return s;
  }
  auto [lo, hi] = std::minmax_element(d.begin(), d.end());
  return std::to_string(*lo) + ".." + std::to_string(*hi);
}

/// Left-aligned text table with a header row.
void print_table(const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) return;
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], printable(r[c]).size());
  for (const auto& r0 : rows) {
    std::vector<std::string> r;  // cells come from input files: no control characters reach the terminal
    for (const auto& cell : r0) r.push_back(printable(cell));
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

/// `list backends --options`: one line per declared option of every registered
/// backend (backend, option, type, allowed values, default, doc); backends that
/// declare none say so.
void print_backend_options() {
  std::vector<std::vector<std::string>> rows = {{"backend", "option", "type", "allowed", "default", "doc"}};
  for (const auto& name : BackendRegistry::names()) {
    auto b = BackendRegistry::create(name);
    if (!b) continue;
    const OptionSpecs specs = b->option_specs();
    if (specs.empty()) rows.push_back({name, "-", "-", "-", "-", "(no options)"});
    for (const auto& o : specs)
      rows.push_back({name, o.name, to_string(o.type), o.allowed(), o.default_value, o.doc});
  }
  std::printf("\nbackend options (select a variant as NAME[option=value,...] in --backends or a scenario's "
              "\"backends\"):\n");
  print_table(rows);
}

/// The scenario's backend variants (its "backends", each resolved: unknown
/// backends and bad options are InputError naming the file), as describe shows
/// them: {"variant", "backend", "options"} with every option, defaults included.
nlohmann::json scenario_variants(const Scenario& s) {
  nlohmann::json out = nlohmann::json::array();
  if (s.backends.empty()) return out;
  for (const auto& label : BackendRegistry::resolve_variants(s.backends, s.file, "/backends")) {
    const auto b = BackendRegistry::create_variant(label);
    out.push_back({{"variant", label}, {"backend", b->name()}, {"options", b->options_json()}});
  }
  return out;
}

int run_list_backends(bool with_options) {
  std::vector<std::vector<std::string>> rows = {{"name", "device", "status", "description"}};
  for (const auto& name : BackendRegistry::names()) {
    auto b = BackendRegistry::create(name);
    if (!b) continue;
    std::string why;
    bool ok = b->available(&why);
    rows.push_back({name, b->device() == Device::cuda ? "cuda" : "cpu",
                    ok ? "available" : "unavailable: " + (why.empty() ? std::string("unknown reason") : why),
                    b->description()});
  }
  print_table(rows);
  if (with_options) print_backend_options();
  return kExitOk;
}

int run_list_scenarios() {
  const std::string dir = scenarios_dir();
  auto list = list_scenarios(dir);
  if (list.empty()) {
    std::printf("no scenario files in %s\n", dir.c_str());
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {{"name", "description"}};
  for (const auto& [name, desc] : list) rows.push_back({name, desc});
  print_table(rows);
  return kExitOk;
}

int run_describe(const std::string& arg, std::optional<uint64_t> seed, bool as_json) {
  const std::string path = resolve_scenario_path(arg);
  Scenario s = load_scenario(path, seed);
  const nlohmann::json variants = scenario_variants(s);
  if (as_json) {
    nlohmann::json out;
    out["scenario"] = s.name;
    out["backends"] = variants;
    out["description"] = s.description;
    out["file"] = s.file;
    out["tile"] = {kDescribeTile, kDescribeTile};
    out["cases"] = nlohmann::json::array();
    for (const auto& c : s.cases) {
      if (!c.invalid.empty()) {  // over the budget: nothing is counted
        out["cases"].push_back({{"id", c.id}, {"invalid", c.invalid},
                                {"axes", c.axes.is_null() ? nlohmann::json::object() : c.axes}});
        continue;
      }
      const Problem& p = c.problem;
      PairCounts pc = count_pairs(p);
      nlohmann::json j;
      j["id"] = c.id;
      j["model"] = c.model.empty() ? nlohmann::json() : nlohmann::json(c.model);
      j["part"] = c.part.empty() ? nlohmann::json() : nlohmann::json(c.part);
      j["axes"] = c.axes.is_null() ? nlohmann::json::object() : c.axes;
      j["batch"] = p.batch;
      j["heads_q"] = p.heads_q;
      j["heads_kv"] = p.heads_kv;
      j["seq_q"] = p.seq_q;
      j["seq_k"] = p.seq_k;
      j["head_dim"] = p.head_dim;
      j["head_dim_v"] = p.head_dim_v;
      j["dtype"] = to_string(p.dtype);
      j["layout"] = to_string(p.layout);
      j["mask"] = describe_mask(p);
      j["score_mod"] = describe_score_mod(p.score_mod);
      j["packing"] = c.packing ? to_json(*c.packing) : nlohmann::json();
      j["useful_pairs"] = pc.error.empty() ? nlohmann::json(pc.useful) : nlohmann::json();
      j["executed_pairs"] = pc.error.empty() ? nlohmann::json(pc.executed) : nlohmann::json();
      j["tile_efficiency"] = pc.error.empty() ? nlohmann::json(pc.efficiency()) : nlohmann::json();
      if (!pc.error.empty()) j["error"] = pc.error;
      j["problem"] = to_json(p, /*compact=*/true);
      out["cases"].push_back(std::move(j));
    }
    std::cout << out.dump(1) << "\n";
    return kExitOk;
  }
  std::printf("scenario %s (%s): %s\n%zu case%s; pairs summed over batch and query heads; executed = in %ldx%ld tiles\n",
              printable(s.name).c_str(), printable(s.file).c_str(),
              s.description.empty() ? "-" : printable(s.description).c_str(),
              s.cases.size(), s.cases.size() == 1 ? "" : "s", static_cast<long>(kDescribeTile),
              static_cast<long>(kDescribeTile));
  std::vector<std::vector<std::string>> rows = {{"id", "B", "Hq/Hkv", "Sq/Sk", "Dqk/Dv", "dtype", "layout", "mask",
                                                 "score_mod", "pack_ratio", "docs/pack", "useful", "executed",
                                                 "tile_eff"}};
  std::vector<std::string> invalid;
  for (const auto& c : s.cases) {
    if (!c.invalid.empty()) {
      rows.push_back({c.id, "-", "-", "-", "-", "-", "-", "invalid", "-", "-", "-", "-", "-", "-"});
      invalid.push_back(c.id + ": " + c.invalid);
      continue;
    }
    const Problem& p = c.problem;
    PairCounts pc = count_pairs(p);
    if (!pc.error.empty()) invalid.push_back(c.id + ": " + pc.error);
    rows.push_back({c.id, std::to_string(p.batch), std::to_string(p.heads_q) + "/" + std::to_string(p.heads_kv),
                    std::to_string(p.seq_q) + "/" + std::to_string(p.seq_k),
                    std::to_string(p.head_dim) + "/" + std::to_string(p.head_dim_v), to_string(p.dtype),
                    to_string(p.layout), describe_mask(p), describe_score_mod(p.score_mod),
                    c.packing ? fixed(c.packing->packing_ratio, 4) : "-",
                    c.packing ? docs_per_pack_text(c.packing->docs_per_pack) : "-",
                    pc.error.empty() ? std::to_string(pc.useful) : "error",
                    pc.error.empty() ? std::to_string(pc.executed) : "-",
                    pc.executed > 0 ? fixed(pc.efficiency(), 4) : "-"});
  }
  print_table(rows);
  if (!variants.empty()) {
    std::printf("backend variants (the scenario's \"backends\"; every option, defaults included):\n");
    for (const auto& v : variants)
      std::printf("  %-28s %s\n", printable(v["variant"].get<std::string>()).c_str(),
                  printable(v["options"].dump()).c_str());
  }
  if (!invalid.empty()) {
    std::printf("%zu case%s over the size budget or not countable (each becomes an error row in `run`):\n", invalid.size(),
                invalid.size() == 1 ? "" : "s");
    for (const auto& m : invalid) std::printf("  %s\n", printable(m).c_str());
  }
  return kExitOk;
}

}  // namespace

void add_list_command(CLI::App& app, Action& action) {
  CLI::App* list = app.add_subcommand("list", "list backends or scenarios");
  list->require_subcommand(1);
  CLI::App* backends = list->add_subcommand("backends", "registered backends: name, device, availability, description");
  CLI::App* scenarios =
      list->add_subcommand("scenarios", "scenario files (name and description) in the scenarios directory");
  auto plugins = std::make_shared<std::vector<std::string>>();
  auto with_options = std::make_shared<bool>(false);
  add_plugin_option(backends, *plugins);
  backends->add_flag("--options", *with_options,
                     "also list every backend's options: name, type, allowed values, default, doc");
  backends->callback([&action, plugins, with_options] {
    action = [plugins, with_options] {
      load_plugins(*plugins);
      return run_list_backends(*with_options);
    };
  });
  scenarios->callback([&action] { action = [] { return run_list_scenarios(); }; });
}

void add_describe_command(CLI::App& app, Action& action) {
  CLI::App* d = app.add_subcommand("describe", "expand a scenario and show every case with its pair counts");
  auto scenario = std::make_shared<std::string>();
  auto seed = std::make_shared<uint64_t>(0);
  auto as_json = std::make_shared<bool>(false);
  d->add_option("SCENARIO", *scenario, "scenario file, or a name under the scenarios directory")->required();
  CLI::Option* seed_opt = d->add_option("--seed", *seed, "override every case's seed (and the packing seed)");
  d->add_flag("--json", *as_json, "print JSON instead of a table");
  d->callback([&action, scenario, seed, seed_opt, as_json] {
    std::optional<uint64_t> s;
    if (seed_opt->count() > 0) s = *seed;
    action = [scenario, s, as_json] { return run_describe(*scenario, s, *as_json); };
  });
}

}  // namespace attnbench::cli
