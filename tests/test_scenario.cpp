// Scenario matrices: expansion order, ids, zip, exclude, parts, model presets,
// packing hookup, seed override, path resolution, the shipped scenario files, and
// malformed input (InputError naming file, JSON path and value).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <unistd.h>

#include "harness/model/errors.hpp"
#include "harness/model/mask.hpp"
#include "harness/workloads/scenario.hpp"

using namespace attnbench;
using nlohmann::json;

namespace {

const std::string kDir = std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios";
const std::string kFile = kDir + "/test.json";  // data paths resolve next to it

json design_example() {
  return json::parse(R"({"batch": 2, "heads_q": 8, "heads_kv": 2, "seq_q": 300, "seq_k": 300,
 "head_dim": 64, "head_dim_v": 64, "dtype": "bf16", "scale": null, "layout": "bshd",
 "mask": [{"kind": "causal", "align": "bottom_right"},
          {"kind": "sliding_window", "left": 64, "right": 0}],
 "score_mod": {"kind": "none"}, "seed": 7})");
}

json small_matrix() {
  return json::parse(R"({"name": "m", "description": "d",
    "base": {"batch": 1, "heads_q": 4, "heads_kv": 2, "head_dim": 64, "seed": 3},
    "axes": {"mask": [[], [{"kind": "causal"}]], "dtype": ["bf16", "fp16"], "seq": [128, 256]}})");
}

std::vector<std::string> ids(const Scenario& s) {
  std::vector<std::string> out;
  for (const auto& c : s.cases) out.push_back(c.id);
  return out;
}

/// The InputError message of expanding `j`, or "" if it expands.
std::string error_of(const json& j, const std::string& file = kFile) {
  try {
    scenario_from_json(j, file);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

/// A temporary directory, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("attnbench_scen_" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& body) const {
    std::ofstream((path / name).string()) << body;
    return (path / name).string();
  }
};

}  // namespace

TEST_CASE("the docs/semantics.md problem example is a one-case scenario") {
  Scenario s = scenario_from_json(design_example(), "/tmp/example.json");
  REQUIRE(s.cases.size() == 1);
  CHECK(s.name == "example");
  CHECK(s.cases[0].id == "example");
  CHECK(to_json(s.cases[0].problem) == to_json(problem_from_json(design_example(), "x")));
  CHECK_FALSE(s.cases[0].packing.has_value());
  // name/description are allowed on a problem file.
  json j = design_example();
  j["name"] = "named";
  j["description"] = "one problem";
  Scenario n = scenario_from_json(j, "/tmp/example.json");
  CHECK(n.name == "named");
  CHECK(n.description == "one problem");
  CHECK(n.cases[0].id == "named");
  CHECK(scenario_from_json(design_example(), "f.json", 99).cases[0].problem.seed == 99);
}

TEST_CASE("timing.max_seconds: a scenario's default time cap, validated") {
  json j = {{"base", {{"batch", 1}, {"heads_q", 2}, {"heads_kv", 2}, {"seq", 16}, {"head_dim", 8}}},
            {"axes", {{"seq", {16, 32}}}}};
  CHECK_FALSE(scenario_from_json(j, kFile).max_seconds.has_value());
  j["timing"] = {{"max_seconds", 0.25}};
  Scenario s = scenario_from_json(j, kFile);
  REQUIRE(s.max_seconds.has_value());
  CHECK(*s.max_seconds == 0.25);
  CHECK(s.cases.size() == 2);
  json bad = j;
  bad["timing"]["max_seconds"] = 0;
  std::string e = error_of(bad);
  CHECK(e.find("/timing/max_seconds") != std::string::npos);
  CHECK(e.find("positive") != std::string::npos);
  bad["timing"] = {{"max_second", 1}};
  CHECK(error_of(bad).find("max_second") != std::string::npos);
  // default.json sets one (the quick start's job on small problems).
  const Scenario d = load_scenario(std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios/default.json");
  REQUIRE(d.max_seconds.has_value());
  CHECK(*d.max_seconds == 0.5);
}

TEST_CASE("cartesian expansion: canonical axis order, last axis fastest, stable ids") {
  Scenario s = scenario_from_json(small_matrix(), kFile);
  CHECK(s.name == "m");
  CHECK(s.description == "d");
  // Canonical order: seq, dtype, mask (whatever the key order of the file).
  CHECK(ids(s) == std::vector<std::string>{"S128_bf16_full", "S128_bf16_causal", "S128_fp16_full",
                                           "S128_fp16_causal", "S256_bf16_full", "S256_bf16_causal",
                                           "S256_fp16_full", "S256_fp16_causal"});
  const Case& c = s.cases[3];
  CHECK(c.problem.seq_q == 128);
  CHECK(c.problem.seq_k == 128);
  CHECK(c.problem.dtype == DType::fp16);
  CHECK(describe_mask(c.problem) == "causal(br)");
  CHECK(c.problem.seed == 3);
  CHECK(c.axes["seq"] == 128);
  CHECK(c.axes["dtype"] == "fp16");
  // Same input, same output.
  CHECK(ids(scenario_from_json(small_matrix(), kFile)) == ids(s));
  // Every id is filesystem-safe.
  for (const auto& id : ids(s))
    for (char ch : id) CHECK((std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.' || ch == '+'));
}

TEST_CASE("axis value labels") {
  CHECK(axis_value_label("seq", 8192) == "S8192");
  CHECK(axis_value_label("batch", 4) == "B4");
  CHECK(axis_value_label("head_dim", 128) == "D128");
  CHECK(axis_value_label("model", "llama3-8b") == "llama3-8b");
  CHECK(axis_value_label("model", json()) == "nomodel");
  CHECK(axis_value_label("packing.fill", 0.95) == "fill0.95");
  CHECK(axis_value_label("packing.pad_to", "longest") == "padlongest");
  CHECK(axis_value_label("mask", json::parse(R"([{"kind":"causal","align":"top_left"},{"kind":"sliding_window","left":64,"right":-1}])")) ==
        "causal-tl+win64-inf");
  CHECK(axis_value_label("score_mod", json::parse(R"({"kind":"softcap","cap":50})")) == "softcap50");
  CHECK(axis_value_label("score_mod", "none") == "nomod");
  CHECK(axis_value_label("label", "a b/c") == "a-b-c");
  CHECK(axis_value_label("packing", json::parse(R"({"source":{"kind":"empirical","file":"data/codealpaca.json"},"fill":0.9})")) ==
        "codealpaca-greedy-fill0.9");
  // Equal labels within an axis are made unique.
  json j = small_matrix();
  j["axes"] = json::parse(R"({"seq": [64], "mask": [[{"kind": "document", "doc_lengths": [[64]]}],
                                                  [{"kind": "document", "doc_lengths": [[32, 32]]}]]})");
  CHECK(ids(scenario_from_json(j, kFile)) == std::vector<std::string>{"S64_doc-v0", "S64_doc-v1"});
  // Uniqueness is per group: a repeated value inside a zip group keeps its plain label
  // when the zipped labels differ, and equal zipped labels get suffixes.
  j["base"]["seq"] = 64;
  j["axes"] = json::parse(R"({"head_dim": [64, 128, 192], "head_dim_v": [64, 128, 128]})");
  j["zip"] = json::parse(R"([["head_dim", "head_dim_v"]])");
  CHECK(ids(scenario_from_json(j, kFile)) == std::vector<std::string>{"D64-Dv64", "D128-Dv128", "D192-Dv128"});
  j["base"].erase("seq");
  j["axes"] = json::parse(R"({"seq": [64, 64], "dtype": ["bf16", "bf16"]})");
  j["zip"] = json::parse(R"([["seq", "dtype"]])");
  CHECK(ids(scenario_from_json(j, kFile)) == std::vector<std::string>{"S64-bf16-v0", "S64-bf16-v1"});
}

TEST_CASE("zip advances axes together; unequal lengths are rejected") {
  json j = json::parse(R"({"base": {"heads_q": 16, "head_dim": 128},
    "axes": {"seq": [512, 1024, 4096], "batch": [32, 16, 4], "mask": [[{"kind": "causal"}], []]},
    "zip": [["seq", "batch"]]})");
  Scenario s = scenario_from_json(j, kFile);
  CHECK(ids(s) == std::vector<std::string>{"B32-S512_causal", "B32-S512_full", "B16-S1024_causal",
                                           "B16-S1024_full", "B4-S4096_causal", "B4-S4096_full"});
  for (const auto& c : s.cases) CHECK(c.problem.batch * c.problem.seq_q == 16384);
  j["axes"]["batch"] = {32, 16};
  std::string e = error_of(j);
  CHECK(contains(e, "test.json: /zip/0: "));
  CHECK(contains(e, "has 3 values"));
  CHECK(contains(e, "has 2"));
  j["axes"]["batch"] = {32, 16, 4};
  j["zip"] = json::parse(R"([["seq", "heads_q"]])");
  CHECK(contains(error_of(j), "/zip/0/1"));
  j["zip"] = json::parse(R"([["seq", "batch"], ["batch", "mask"]])");
  CHECK(contains(error_of(j), "/zip/1/0"));
  // A "label" axis names a zipped group.
  json l = json::parse(R"({"base": {"heads_q": 4, "head_dim": 64},
    "axes": {"label": ["short", "long"], "seq": [64, 2048], "batch": [8, 1]},
    "zip": [["label", "seq", "batch"]]})");
  CHECK(ids(scenario_from_json(l, kFile)) == std::vector<std::string>{"short", "long"});
}

TEST_CASE("exclude drops matching cases; rules must match something") {
  json j = small_matrix();
  j["exclude"] = json::parse(R"([{"dtype": "fp16", "mask": "causal"}, {"seq": 256, "dtype": "bf16"}])");
  Scenario s = scenario_from_json(j, kFile);
  CHECK(ids(s) == std::vector<std::string>{"S128_bf16_full", "S128_bf16_causal", "S128_fp16_full", "S256_fp16_full"});
  // Exact JSON values match too.
  j["exclude"] = json::parse(R"([{"mask": [{"kind": "causal"}]}])");
  CHECK(scenario_from_json(j, kFile).cases.size() == 4);
  // Effective (non-axis) fields can be matched.
  j["exclude"] = json::parse(R"([{"heads_q": 4, "seq": "S128"}])");
  CHECK(scenario_from_json(j, kFile).cases.size() == 4);
  j["exclude"] = json::parse(R"([{"dtype": "fp32"}])");
  std::string e = error_of(j);
  CHECK(contains(e, "/exclude/0"));
  CHECK(contains(e, "matches no case"));
  j["exclude"] = json::parse(R"([{"colour": "red"}])");
  CHECK(contains(error_of(j), "/exclude/0/colour"));
  j["exclude"] = json::parse(R"([{}])");
  CHECK(contains(error_of(j), "/exclude/0"));
  j["exclude"] = json::parse(R"([{"seq": 128}, {"seq": 256}])");
  CHECK(contains(error_of(j), "every case is excluded"));
}

TEST_CASE("model presets") {
  const auto& p = model_presets();
  REQUIRE(p.size() == 6);
  auto check = [](const char* name, int64_t hq, int64_t hkv, int64_t d, int64_t w, double cap) {
    const ModelPreset* m = find_model_preset(name);
    REQUIRE(m != nullptr);
    CHECK(m->heads_q == hq);
    CHECK(m->heads_kv == hkv);
    CHECK(m->head_dim == d);
    CHECK(m->sliding_window == w);
    CHECK(m->softcap == cap);
  };
  check("llama3-8b", 32, 8, 128, -1, 0.0);
  check("llama3.2-1b", 32, 8, 64, -1, 0.0);
  check("llama3-70b", 64, 8, 128, -1, 0.0);
  check("mistral-7b", 32, 8, 128, 4096, 0.0);
  check("gemma2-9b", 16, 8, 256, 4096, 50.0);
  check("qwen2.5-7b", 28, 4, 128, -1, 0.0);
  CHECK(find_model_preset("gpt-5") == nullptr);

  json j = json::parse(R"({"base": {"batch": 1, "seq": 8192, "heads_q": 2, "head_dim": 32, "mask": [{"kind": "causal"}]},
                           "axes": {"model": ["llama3-8b", "mistral-7b", "gemma2-9b", null]}})");
  Scenario s = scenario_from_json(j, kFile);
  REQUIRE(ids(s) == std::vector<std::string>{"llama3-8b", "mistral-7b", "gemma2-9b", "nomodel"});
  const Problem& llama = s.cases[0].problem;
  CHECK(s.cases[0].model == "llama3-8b");
  CHECK(llama.heads_q == 32);
  CHECK(llama.heads_kv == 8);
  CHECK(llama.head_dim == 128);
  CHECK(llama.head_dim_v == 128);
  CHECK(describe_mask(llama) == "causal(br)");
  CHECK(describe_mask(s.cases[1].problem) == "causal(br)+window(4096,0)");
  CHECK(s.cases[2].problem.score_mod.kind == ScoreMod::Kind::softcap);
  CHECK(s.cases[2].problem.score_mod.cap == 50.0);
  CHECK(s.cases[2].problem.head_dim == 256);
  CHECK(s.cases[3].problem.heads_q == 2);  // base values without a model
  CHECK(s.cases[3].model.empty());
  // Axes override the preset; an explicit window replaces the preset's.
  j["axes"]["head_dim"] = {64};
  j["base"]["mask"] = json::parse(R"([{"kind": "causal"}, {"kind": "sliding_window", "left": 128, "right": 0}])");
  Scenario o = scenario_from_json(j, kFile);
  CHECK(o.cases[1].problem.head_dim == 64);
  CHECK(o.cases[1].problem.head_dim_v == 64);
  CHECK(o.cases[1].problem.heads_q == 32);
  CHECK(describe_mask(o.cases[1].problem) == "causal(br)+window(128,0)");
  // Unknown presets name the axis value.
  j["axes"]["model"] = {"llama3-8b", "llama9"};
  std::string e = error_of(j);
  CHECK(contains(e, "/axes/model/1"));
  CHECK(contains(e, "\"llama9\""));
}

TEST_CASE("packing in a scenario: packed problem, stats and document-causal mask") {
  json j = json::parse(R"({"base": {"batch": 3, "heads_q": 4, "heads_kv": 2, "head_dim": 64, "seq": 1000,
      "mask": [{"kind": "causal"}],
      "packing": {"source": {"kind": "fixed", "length": 300}, "shuffle": "none"}},
    "axes": {"packing.fill": [1.0, 0.6], "packing.pad_to": ["max_seq_len", "longest"]}})");
  Scenario s = scenario_from_json(j, kFile);
  REQUIRE(ids(s) == std::vector<std::string>{"fill1_padmax", "fill1_padlongest", "fill0.6_padmax", "fill0.6_padlongest"});
  const Case& c = s.cases[0];
  REQUIRE(c.packing.has_value());
  CHECK(c.problem.batch == 3);
  CHECK(c.problem.seq_q == 1000);
  CHECK(c.packing->docs_per_pack == std::vector<int64_t>{3, 3, 3});
  CHECK(c.packing->packing_ratio == doctest::Approx(0.9));
  CHECK(describe_mask(c.problem) == "causal(br)+document");
  const DocumentTerm* d = c.problem.find_mask<DocumentTerm>();
  REQUIRE(d != nullptr);
  CHECK(d->doc_ids[1][899] == 2);
  CHECK(d->doc_ids[1][900] == -1);
  // 9 documents of 300, each causal: 9 * 300 * 301 / 2 allowed pairs per head.
  CHECK(count_allowed_pairs(c.problem) == 9 * 300 * 301 / 2);
  CHECK(s.cases[1].problem.seq_q == 900);
  CHECK(s.cases[1].packing->packing_ratio == doctest::Approx(1.0));
  CHECK(s.cases[2].packing->docs_per_pack == std::vector<int64_t>{2, 2, 2});  // capacity 600
  CHECK(s.cases[3].problem.seq_q == 600);
  // A packing axis may hold null (no packing) and whole packing objects.
  json k = json::parse(R"({"base": {"batch": 2, "heads_q": 4, "head_dim": 64, "seq": 256},
    "axes": {"packing": [null, {"name": "fixed64", "source": {"kind": "fixed", "length": 64}}]}})");
  Scenario ks = scenario_from_json(k, kFile);
  CHECK(ids(ks) == std::vector<std::string>{"nopack", "fixed64"});
  CHECK_FALSE(ks.cases[0].packing.has_value());
  CHECK(ks.cases[1].packing->docs_per_pack == std::vector<int64_t>{4, 4});
}

TEST_CASE("seed override replaces case and packing seeds") {
  json j = json::parse(R"({"base": {"batch": 2, "heads_q": 4, "head_dim": 64, "seq": 2048, "seed": 5,
      "packing": {"source": {"kind": "uniform", "min": 10, "max": 400}}}})");
  Scenario a = scenario_from_json(j, kFile), b = scenario_from_json(j, kFile, 6), c = scenario_from_json(j, kFile, 6);
  CHECK(a.cases[0].problem.seed == 5);
  CHECK(b.cases[0].problem.seed == 6);
  CHECK(b.cases[0].packing->seed == 6);
  CHECK(to_json(b.cases[0].problem) == to_json(c.cases[0].problem));
  CHECK(to_json(a.cases[0].problem) != to_json(b.cases[0].problem));
  j["base"]["packing"]["seed"] = 9;  // an explicit packing seed, also overridden
  CHECK(scenario_from_json(j, kFile).cases[0].packing->seed == 9);
  CHECK(scenario_from_json(j, kFile, 6).cases[0].packing->seed == 6);
}

TEST_CASE("parts: separate matrices sharing a base, ids prefixed by the part name") {
  json j = json::parse(R"({"name": "p", "base": {"batch": 1, "heads_q": 4, "head_dim": 64, "seq": 128},
    "parts": [{"name": "plain"},
              {"name": "dims", "base": {"seq": 64}, "axes": {"head_dim": [64, 128]}}]})");
  Scenario s = scenario_from_json(j, kFile);
  CHECK(ids(s) == std::vector<std::string>{"plain", "dims_D64", "dims_D128"});
  CHECK(s.cases[0].problem.seq_q == 128);
  CHECK(s.cases[1].problem.seq_q == 64);
  CHECK(s.cases[2].part == "dims");
  j["parts"][1]["name"] = "plain";
  CHECK(contains(error_of(j), "/parts/1/name"));
  j["parts"][1]["name"] = "bad name";
  CHECK(contains(error_of(j), "/parts/1/name"));
  j["parts"][1]["name"] = "dims";
  j["parts"][1]["base"]["batch"] = "one";
  std::string e = error_of(j);
  CHECK(contains(e, "/parts/1/base/batch"));
  CHECK(contains(e, "\"one\""));
}

TEST_CASE("malformed scenarios name file, JSON path and value") {
  // Unknown mask kind inside an axis value.
  json j = small_matrix();
  j["axes"]["mask"] = json::parse(R"([[], [{"kind": "casual"}]])");
  std::string e = error_of(j);
  CHECK(contains(e, "test.json: /axes/mask/1/0/kind: "));
  CHECK(contains(e, "\"casual\""));
  // Wrong types.
  j = small_matrix();
  j["base"]["batch"] = "two";
  e = error_of(j);
  CHECK(contains(e, "/base/batch"));
  CHECK(contains(e, "\"two\""));
  j = small_matrix();
  j["axes"]["dtype"] = {"bf16", 16};
  e = error_of(j);
  CHECK(contains(e, "/axes/dtype/1"));
  CHECK(contains(e, "16"));
  j = small_matrix();
  j["axes"]["seq"] = 128;
  CHECK(contains(error_of(j), "/axes/seq"));
  // Inconsistent document lengths.
  j = small_matrix();
  j["axes"]["mask"] = json::parse(R"([[{"kind": "document", "doc_lengths": [[100, 20]]}]])");
  e = error_of(j);
  CHECK(contains(e, "/axes/mask/0/0/doc_lengths/0"));
  CHECK(contains(e, "sum to 120"));
  // A single mask object (not a list) keeps its path.
  j["axes"]["mask"] = json::parse(R"([{"kind": "sliding_window", "left": -5}])");
  CHECK(contains(error_of(j), "/axes/mask/0/left"));
  // Unknown axis, unknown top-level key, unknown base key.
  j = small_matrix();
  j["axes"]["colour"] = {"red"};
  e = error_of(j);
  CHECK(contains(e, "/axes/colour"));
  CHECK(contains(e, "unknown axis"));
  j = small_matrix();
  j["axis"] = json::object();
  CHECK(contains(error_of(j), "/axis"));
  j = small_matrix();
  j["base"]["heads"] = 4;
  CHECK(contains(error_of(j), "/base/heads"));
  // A missing required field points at the base.
  j = small_matrix();
  j["base"].erase("heads_q");
  CHECK(contains(error_of(j), "/base/heads_q: missing required field"));
  // GQA mismatch from an axis names the axis value.
  j = small_matrix();
  j["axes"]["heads_kv"] = {2, 3};
  CHECK(contains(error_of(j), "/axes/heads_kv/1"));
  // Packing errors point into the packing object or its key axis.
  j = small_matrix();
  j["base"]["packing"] = json::parse(R"({"source": {"kind": "fixed", "length": 10}, "fill": 2})");
  CHECK(contains(error_of(j), "/base/packing/fill"));
  j["base"]["packing"]["fill"] = 1;
  j["axes"]["packing.fill"] = {0.5, -1};
  e = error_of(j);
  CHECK(contains(e, "/axes/packing.fill/1"));
  CHECK(contains(e, "-1"));
  j = small_matrix();
  j["axes"]["packing.fill"] = {0.5};
  CHECK(contains(error_of(j), "needs a packing object"));
  j = small_matrix();
  j["base"]["packing"] = json::parse(R"({"source": {"kind": "fixed", "length": 10}})");
  j["axes"]["mask"] = json::parse(R"([[{"kind": "causal"}, {"kind": "document", "doc_lengths": [[128]]}]])");
  j["axes"]["seq"] = {128};
  e = error_of(j);
  CHECK(contains(e, "/axes/mask/0/1"));
  CHECK(contains(e, "document"));
  // Malformed JSON files.
  TempDir t;
  std::string bad = t.write("bad.json", "{\"base\": {\"batch\": 1,, }");
  try {
    load_scenario(bad);
    FAIL("expected InputError");
  } catch (const InputError& err) {
    CHECK(err.file() == bad);
    CHECK(err.json_path() == "");
    CHECK(contains(err.what(), "malformed JSON"));
  }
  CHECK_THROWS_AS(load_scenario(t.path.string() + "/missing.json"), InputError);
  CHECK(contains(error_of(json::array({1, 2})), "expected an object"));
}

TEST_CASE("scenario path resolution and listing") {
  CHECK(std::filesystem::path(resolve_scenario_path("default")).filename() == "default.json");
  CHECK(std::filesystem::path(resolve_scenario_path("masks.json")).filename() == "masks.json");
  CHECK(resolve_scenario_path(kDir + "/edge_cases.json") == kDir + "/edge_cases.json");
  try {
    resolve_scenario_path("no-such-scenario");
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(contains(e.what(), "no-such-scenario"));
    CHECK(contains(e.what(), "default"));  // lists known names
  }
  TempDir t;
  t.write("alpha.json", R"({"name": "alpha", "description": "first one", "base": {"batch": 1, "heads_q": 1, "head_dim": 8, "seq": 8}})");
  t.write("beta.json", R"({"name": "beta", "axes": {"oops": [1]}})");
  t.write("notes.txt", "not a scenario");
  ::setenv("ATTNBENCH_SCENARIOS_DIR", t.path.c_str(), 1);
  CHECK(scenarios_dir() == t.path.string());
  CHECK(std::filesystem::path(resolve_scenario_path("alpha")).parent_path() == t.path);
  ::unsetenv("ATTNBENCH_SCENARIOS_DIR");
  auto list = list_scenarios(t.path.string());
  REQUIRE(list.size() == 2);
  CHECK(list[0] == std::make_pair(std::string("alpha"), std::string("first one")));
  CHECK(list[1].first == "beta");
  CHECK(contains(list[1].second, "error:"));
  CHECK(contains(list[1].second, "/axes/oops"));
  CHECK(list_scenarios(t.path.string() + "/nope").empty());
}

TEST_CASE("the shipped scenario files expand, with unique filesystem-safe ids") {
  const std::vector<std::string> names = {"default", "gpu_smoke", "packed_codealpaca", "dense_sweep",
                                          "sliding_window", "masks", "edge_cases"};
  auto listed = list_scenarios(kDir);
  std::set<std::string> listed_names;
  for (const auto& [n, d] : listed) {
    listed_names.insert(n);
    CHECK_FALSE(d.empty());
    CHECK(d.find('\n') == std::string::npos);
    CHECK(d.rfind("error:", 0) != 0);
  }
  for (const auto& n : names) {
    INFO(n);
    CHECK(listed_names.count(n) == 1);
    Scenario s = load_scenario(kDir + "/" + n + ".json");
    CHECK_FALSE(s.description.empty());
    std::set<std::string> seen;
    for (const auto& c : s.cases) {
      CHECK(seen.insert(c.id).second);
      for (char ch : c.id)
        CHECK((std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.' || ch == '+'));
    }
  }
}

TEST_CASE("default.json is small enough for the CPU reference") {
  Scenario s = load_scenario(kDir + "/default.json");
  CHECK(s.cases.size() == 8);
  bool doc = false, window = false, mod = false;
  for (const auto& c : s.cases) {
    CHECK(c.problem.seq_q <= 384);
    CHECK(c.problem.seq_k <= 384);
    CHECK(c.problem.dtype == DType::bf16);
    CHECK(c.problem.heads_q == 8);
    CHECK(c.problem.heads_kv == 2);
    CHECK(c.problem.head_dim == 64);
    doc = doc || c.problem.find_mask<DocumentTerm>() != nullptr;
    window = window || c.problem.find_mask<SlidingWindowTerm>() != nullptr;
    mod = mod || c.problem.score_mod.kind != ScoreMod::Kind::none;
  }
  CHECK(doc);
  CHECK(window);
  CHECK(mod);
}

TEST_CASE("dense_sweep and sliding_window hold the peers' rows") {
  Scenario d = load_scenario(kDir + "/dense_sweep.json");
  auto find = [](const Scenario& s, const std::string& id) -> const Case* {
    for (const auto& c : s.cases)
      if (c.id == id) return &c;
    return nullptr;
  };
  for (const char* id : {"B16-S1024_D128_causal", "B4-S4096_D128_causal", "B1-S16384_D128_causal", "B4-S4096_D128_full"}) {
    INFO(id);
    const Case* c = find(d, id);
    REQUIRE(c != nullptr);
    CHECK(c->problem.heads_q == 16);
    CHECK(c->problem.heads_kv == 16);
    CHECK(c->problem.head_dim == 128);
    CHECK(c->problem.batch * c->problem.seq_q == 16384);
  }
  CHECK(d.cases.size() == 24);
  Scenario w = load_scenario(kDir + "/sliding_window.json");
  const Case* peer = find(w, "window_B1-S16384_causal+win4096-0");
  REQUIRE(peer != nullptr);
  CHECK(peer->problem.heads_q == 32);
  CHECK(peer->problem.head_dim == 128);
  CHECK(describe_mask(peer->problem) == "causal(br)+window(4096,0)");
  const Case* gemma = find(w, "model_gemma2-9b_B2-S8192");
  REQUIRE(gemma != nullptr);
  CHECK(gemma->problem.score_mod.kind == ScoreMod::Kind::softcap);
}

TEST_CASE("packed_codealpaca: the peers workload numbers") {
  Scenario s = load_scenario(kDir + "/packed_codealpaca.json");
  CHECK(s.cases.size() == 16);
  const Case* peer = nullptr;
  for (const auto& c : s.cases)
    if (c.id == "llama3-8b_greedy_fill1_padmax") peer = &c;
  REQUIRE(peer != nullptr);
  const Problem& p = peer->problem;
  CHECK(p.batch == 4);
  CHECK(p.heads_q == 32);
  CHECK(p.heads_kv == 8);
  CHECK(p.head_dim == 128);
  CHECK(p.seq_q == 8192);
  CHECK(p.dtype == DType::bf16);
  REQUIRE(peer->packing.has_value());
  CHECK(peer->packing->packing_ratio == doctest::Approx(0.9865).epsilon(5e-5));
  CHECK(peer->packing->docs == 187);
  CHECK(peer->packing->shuffle == "python");
  CHECK(count_allowed_pairs(p) == 3135211);
  // Llama-3.2-1B: the same packing, D64.
  for (const auto& c : s.cases)
    if (c.id == "llama3.2-1b_greedy_fill1_padmax") {
      CHECK(c.problem.head_dim == 64);
      CHECK(c.packing->docs == 187);
    }
}
