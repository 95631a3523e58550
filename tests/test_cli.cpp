// The attnbench CLI as users run it: the real binary (ATTNBENCH_BINARY), exit
// codes (0 ok, 2 bad input or usage) and messages naming file, JSON path and value.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/cli_util.hpp"

namespace {

const std::string kDir = std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios";

using namespace attnbench::test::cli;

const char* kGoodMatrix = R"({"name": "tiny", "description": "two tiny cases",
  "base": {"batch": 1, "heads_q": 4, "heads_kv": 2, "head_dim": 32, "seq": 200, "dtype": "fp16"},
  "axes": {"mask": [[], [{"kind": "causal"}]]}})";

}  // namespace

TEST_CASE("describe: bad input exits with 2 and names file, JSON path and value") {
  TempDir t;
  struct Bad {
    const char* name;
    const char* body;
    const char* path;
    const char* value;
  };
  const Bad bad[] = {
      {"unknown_kind.json",
       R"({"base": {"batch": 1, "heads_q": 4, "head_dim": 32, "seq": 64}, "axes": {"mask": [[], [{"kind": "casual"}]]}})",
       "/axes/mask/1/0/kind", "\"casual\""},
      {"wrong_type.json", R"({"base": {"batch": "two", "heads_q": 4, "head_dim": 32, "seq": 64}})", "/base/batch",
       "\"two\""},
      {"doc_lengths.json",
       R"({"base": {"batch": 1, "heads_q": 4, "head_dim": 32, "seq": 64,
                    "mask": [{"kind": "causal"}, {"kind": "document", "doc_lengths": [[30, 30]]}]}})",
       "/base/mask/1/doc_lengths/0", "sum to 60"},
      {"unknown_axis.json", R"({"base": {"batch": 1, "heads_q": 4, "head_dim": 32, "seq": 64}, "axes": {"hedas": [1]}})",
       "/axes/hedas", "\"hedas\""},
      {"zip.json",
       R"({"base": {"heads_q": 4, "head_dim": 32}, "axes": {"seq": [64, 128], "batch": [1]}, "zip": [["seq", "batch"]]})",
       "/zip/0", "has 2 values"},
      {"problem.json", R"({"batch": 1, "heads_q": 4, "heads_kv": 3, "head_dim": 32, "seq_q": 64})", "/heads_kv",
       "(3)"},
      {"model.json", R"({"base": {"batch": 1, "seq": 64, "model": "llama-7"}})", "/base/model", "\"llama-7\""},
  };
  for (const auto& b : bad) {
    INFO(b.name);
    std::string file = t.write(b.name, b.body);
    Result r = run("describe '" + file + "'", t);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(contains(r.err, file + ": " + b.path + ": "));
    CHECK(contains(r.err, b.value));
    CHECK(r.out.empty());
  }
  std::string broken = t.write("broken.json", "{\"base\": [1, 2,");
  Result r = run("describe '" + broken + "'", t);
  CHECK(r.code == 2);
  CHECK(contains(r.err, broken + ": /: malformed JSON"));
  r = run("describe no-such-scenario", t);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "no-such-scenario"));
  // Usage errors.
  CHECK(run("describe", t).code == 2);
  CHECK(run("describe default --seed minus-one", t).code == 2);
  CHECK(run("list", t).code == 2);
  CHECK(run("list gadgets", t).code == 2);
}

TEST_CASE("describe: a good scenario prints every case") {
  TempDir t;
  std::string file = t.write("tiny.json", kGoodMatrix);
  Result r = run("describe '" + file + "'", t);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "scenario tiny"));
  CHECK(contains(r.out, "two tiny cases"));
  CHECK(contains(r.out, "S200") == false);  // seq is a base field, not an axis
  CHECK(contains(r.out, "\nfull "));
  CHECK(contains(r.out, "\ncausal "));
  CHECK(contains(r.out, "4/2"));
  CHECK(contains(r.out, "200/200"));
  CHECK(contains(r.out, "fp16"));
  // Useful pairs: full = 200 * 200 * 4 heads, causal = 200 * 201 / 2 * 4.
  CHECK(contains(r.out, " 160000 "));
  CHECK(contains(r.out, " 80400 "));

  r = run("describe '" + file + "' --json --seed 42", t);
  INFO(r.err);
  REQUIRE(r.code == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["scenario"] == "tiny");
  REQUIRE(j["cases"].size() == 2);
  const auto& c = j["cases"][1];
  CHECK(c["id"] == "causal");
  CHECK(c["useful_pairs"] == 80400);
  // Two 128-row q-blocks: tiles (0,0) and (1,0), (1,1): 128*128 + 72*128 + 72*72 per head.
  CHECK(c["executed_pairs"] == 4 * (128 * 128 + 72 * 128 + 72 * 72));
  CHECK(c["tile_efficiency"].get<double>() == doctest::Approx(80400.0 / (4.0 * (128 * 128 + 72 * 128 + 72 * 72))));
  CHECK(c["problem"]["seed"] == 42);
  CHECK(c["packing"].is_null());
}

TEST_CASE("describe packed_codealpaca: the peers numbers (fill 0.9865, 187 docs, 3135211 pairs per head)") {
  TempDir t;
  Result r = run("describe '" + kDir + "/packed_codealpaca.json' --json", t);
  INFO(r.err);
  REQUIRE(r.code == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  bool found = false;
  for (const auto& c : j["cases"]) {
    if (c["id"] != "llama3-8b_greedy_fill1_padmax") continue;
    found = true;
    CHECK(c["batch"] == 4);
    CHECK(c["heads_q"] == 32);
    CHECK(c["heads_kv"] == 8);
    CHECK(c["head_dim"] == 128);
    CHECK(c["seq_q"] == 8192);
    CHECK(c["dtype"] == "bf16");
    CHECK(c["mask"] == "causal(br)+document");
    CHECK(c["packing"]["packing_ratio"].get<double>() == doctest::Approx(0.9865).epsilon(5e-5));
    CHECK(c["packing"]["docs"] == 187);
    CHECK(c["useful_pairs"] == int64_t{3135211} * 32);
    CHECK(c["executed_pairs"].get<int64_t>() >= c["useful_pairs"].get<int64_t>());
  }
  CHECK(found);
  // The text form shows the packing ratio and docs per pack.
  r = run("describe packed_codealpaca", t, "ATTNBENCH_SCENARIOS_DIR='" + kDir + "'");
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "0.9865"));
  CHECK(contains(r.out, "46/47/46/48"));
}

TEST_CASE("list backends and list scenarios") {
  TempDir t;
  Result r = run("list backends", t);
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "name"));
  CHECK(contains(r.out, "\ncpu "));
  CHECK(contains(r.out, "available"));

  r = run("list scenarios", t, "ATTNBENCH_SCENARIOS_DIR='" + kDir + "'");
  REQUIRE(r.code == 0);
  for (const char* n : {"default", "gpu_smoke", "packed_codealpaca", "dense_sweep", "sliding_window", "masks", "edge_cases"})
    CHECK(contains(r.out, std::string("\n") + n + " "));
  CHECK_FALSE(contains(r.out, "error:"));

  t.write("tiny.json", kGoodMatrix);
  t.write("zbroken.json", "{");
  r = run("list scenarios", t, "ATTNBENCH_SCENARIOS_DIR='" + t.path.string() + "'");
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "tiny "));
  CHECK(contains(r.out, "two tiny cases"));
  CHECK(contains(r.out, "zbroken "));
  CHECK(contains(r.out, "error:"));
  // describe by name uses the same directory.
  r = run("describe tiny", t, "ATTNBENCH_SCENARIOS_DIR='" + t.path.string() + "'");
  CHECK(r.code == 0);
}

TEST_CASE("run: the scenario's timing.max_seconds is the default time cap; --max-seconds wins") {
  TempDir t;
  const std::string f = t.write("capped.json", R"({"name": "capped", "timing": {"max_seconds": 0.25},
    "base": {"batch": 1, "heads_q": 2, "heads_kv": 2, "head_dim": 16, "seq": 32, "dtype": "fp32"}})");
  auto cap_of = [&](const std::string& extra) {
    const std::string out = (t.path / "out").string();
    Result r = run("run '" + f + "' --backends cpu --check off --no-determinism --out '" + out + "'" + extra, t);
    REQUIRE_MESSAGE(r.code == 0, r.err);
    return nlohmann::json::parse(slurp(out + "/report.json"))["measurement"]["max_seconds"].get<double>();
  };
  CHECK(cap_of("") == 0.25);
  CHECK(cap_of(" --max-seconds 0.125") == 0.125);
  const std::string bad = t.write("bad.json", R"({"timing": {"max_seconds": -1}, "base": {"batch": 1, "heads_q": 2,
    "heads_kv": 2, "head_dim": 16, "seq": 32}})");
  Result r = run("run '" + bad + "' --backends cpu --out '" + (t.path / "o2").string() + "'", t);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "/timing/max_seconds"));
}
