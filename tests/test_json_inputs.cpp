// Every JSON input is safe (issue 16): the one loader (jsonu::parse_text /
// load_file) rejects nesting deeper than kMaxJsonDepth, numbers that overflow to
// infinity and duplicate keys with InputError; reports holding two rows for one
// (case_id, backend) are refused; `run` never writes such rows. The CLI half runs
// the real binary (ATTNBENCH_BINARY): exit 2, the file named, no crash.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "reports/compare.hpp"
#include "reports/report.hpp"
#include "test_util.hpp"
#include "tests/schema_skip.hpp"

using namespace attnbench;
using nlohmann::json;

namespace {

const std::string kSource = ATTNBENCH_SOURCE_DIR;
const std::string kBaseline = kSource + "/ci/baselines/example-h100.json";

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

/// `depth` nested arrays around 0: deep(2) == "[[0]]".
std::string deep(int depth) { return std::string(depth, '[') + "0" + std::string(depth, ']'); }

/// The InputError that parse_text(text, "in.json") throws (fails the test if none).
InputError parse_error_of(const std::string& text) {
  try {
    (void)jsonu::parse_text(text, "in.json");
  } catch (const InputError& e) {
    return e;
  }
  FAIL("parse_text accepted: " << text.substr(0, 80));
  return InputError("", "", "");
}

std::string write(const std::string& name, const std::string& body) {
  const std::string p = test::scratch_path("json_inputs", name).string();
  std::ofstream(p, std::ios::binary) << body;
  return p;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Cli {
  int code = -1;
  std::string err;
};

/// Run `attnbench ARGS`; stdout is discarded, stderr returned.
Cli run_cli(const std::string& args) {
  const std::string err = test::scratch_path("json_inputs", "stderr.txt").string();
  auto [code, out] = test::run_command("'" + std::string(ATTNBENCH_BINARY) + "' " + args + " >/dev/null 2>'" + err + "'");
  return {code, read(err)};
}

/// The message of the InputError `f()` throws, "" when it throws none.
template <typename F>
std::string input_error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const char* kTiny = R"({"name": "tiny", "base": {"batch": 1, "heads_q": 2, "heads_kv": 2, "head_dim": 16, "seq": 32,
  "dtype": "fp32"}})";

}  // namespace

TEST_CASE("parse_text: nesting up to kMaxJsonDepth is read, one more level is refused") {
  CHECK(jsonu::kMaxJsonDepth == 256);
  json ok = jsonu::parse_text(deep(jsonu::kMaxJsonDepth), "in.json");
  const json* p = &ok;
  int levels = 0;
  while (p->is_array()) {
    REQUIRE(p->size() == 1);
    p = &(*p)[0];
    ++levels;
  }
  CHECK(levels == 256);
  CHECK(*p == 0);

  InputError e = parse_error_of(deep(jsonu::kMaxJsonDepth + 1));
  CHECK(e.file() == "in.json");
  CHECK(contains(e.what(), "deeper than 256"));
  CHECK(contains(e.what(), "depth 257"));
  CHECK(e.json_path() == "/0" + [] { std::string s; for (int i = 1; i < 256; ++i) s += "/0"; return s; }());
  // 100,000 deep is refused the same way, and objects count like arrays.
  CHECK(contains(parse_error_of(deep(100000)).what(), "deeper than 256"));
  std::string objs;
  for (int i = 0; i < 300; ++i) objs += "{\"a\":";
  objs += "1" + std::string(300, '}');
  InputError o = parse_error_of(objs);
  CHECK(o.json_path().substr(0, 6) == "/a/a/a");
  CHECK(o.json_path().size() == 2 * 256);
}

TEST_CASE("parse_text: numbers that overflow to infinity are refused with their pointer and text") {
  InputError e = parse_error_of(R"({"base": {"seq": [64, 1e400]}})");
  CHECK(e.file() == "in.json");
  CHECK(e.json_path() == "/base/seq/1");
  CHECK(contains(e.what(), "1e400"));
  CHECK(contains(e.what(), "infinity"));
  CHECK(parse_error_of("-1E+999").json_path() == "");
  CHECK(contains(parse_error_of("[[1], {\"x\": -1E+999}]").what(), "in.json: /1/x: number -1E+999"));
  // Large but finite numbers, and integers beyond 64 bits (read as doubles), stay.
  CHECK(jsonu::parse_text("[1e308, -1.7e308, 4.9e-324, 1e-400]", "in.json")[0] == 1e308);
  CHECK(jsonu::parse_text("123456789012345678901234567890", "in.json").get<double>() == doctest::Approx(1.2345678901e29));
}

TEST_CASE("parse_text: a key repeated in one object is refused with its pointer") {
  InputError e = parse_error_of(R"({"base": {"seq": 64, "heads_q": 2, "seq": 128}})");
  CHECK(e.file() == "in.json");
  CHECK(e.json_path() == "/base/seq");
  CHECK(contains(e.what(), "duplicate key \"seq\""));
  CHECK(parse_error_of(R"([{}, {"a/b": 1, "a/b": 2}])").json_path() == "/1/a~1b");
  // The same key in different objects is fine, and values land where they belong.
  json j = jsonu::parse_text(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": [3, {"k": 4}]}], "d": "x"})", "in.json");
  CHECK(j["a"]["k"] == 1);
  CHECK(j["b"]["k"] == 2);
  CHECK(j["c"][0]["k"][1]["k"] == 4);
  CHECK(j.dump() == R"({"a":{"k":1},"b":{"k":2},"c":[{"k":[3,{"k":4}]}],"d":"x"})");
}

TEST_CASE("parse_text / load_file: malformed and missing input") {
  InputError e = parse_error_of("{\"a\": [1, 2,");
  CHECK(e.json_path() == "");
  CHECK(contains(e.what(), "in.json: /: malformed JSON"));
  CHECK(contains(parse_error_of("[1] [2]").what(), "malformed JSON"));  // trailing content
  CHECK_THROWS_WITH_AS(jsonu::load_file("/nonexistent/x.json"), "/nonexistent/x.json: /: cannot open file", InputError);
  const std::string f = write("dup.json", R"({"x": 1, "x": 2})");
  CHECK(contains(input_error_of([&] { jsonu::load_file(f); }), f + ": /x: duplicate key \"x\""));
  CHECK(jsonu::load_file(write("ok.json", R"({"x": [1.5, null, true, "s"]})"))["x"][0] == 1.5);
}

TEST_CASE("stream_file hands each element of the root's array once, in order, and keeps the rest") {
  const std::string f = write("stream.json", R"({"a": 1, "results": [{"x": 1}, 2, [3, {"y": null}]], "z": {"k": true}})");
  std::vector<std::pair<size_t, json>> got;
  std::vector<bool> saw_a, saw_z;
  const json doc = jsonu::stream_file(f, "results", [&](json&& e, size_t i, const json& root) {
    got.emplace_back(i, std::move(e));
    saw_a.push_back(root.contains("a"));
    saw_z.push_back(root.contains("z"));
    CHECK(root["results"].empty());  // handed elements are not kept
  });
  REQUIRE(got.size() == 3);
  CHECK(got[0] == std::make_pair(size_t{0}, json{{"x", 1}}));
  CHECK(got[1] == std::make_pair(size_t{1}, json(2)));
  CHECK(got[2] == std::make_pair(size_t{2}, json::parse(R"([3, {"y": null}])")));
  CHECK(saw_a == std::vector<bool>{true, true, true});
  CHECK(saw_z == std::vector<bool>{false, false, false});  // "z" follows the array
  CHECK(doc == json::parse(R"({"a": 1, "results": [], "z": {"k": true}})"));

  // Only the root's member streams: a nested "results" stays in the document.
  int calls = 0;
  const json nested = jsonu::stream_file(write("nested.json", R"({"a": {"results": [1, 2]}})"), "results",
                                         [&](json&&, size_t, const json&) { ++calls; });
  CHECK(calls == 0);
  CHECK(nested["a"]["results"] == json::array({1, 2}));
}

TEST_CASE("stream_file: parse_text's rules, with pointers that count the handed elements") {
  auto error_of = [](const std::string& name, const std::string& text) {
    const std::string f = write(name, text);
    try {
      (void)jsonu::stream_file(f, "results", [](json&&, size_t, const json&) {});
    } catch (const InputError& e) {
      return std::make_pair(e.json_path(), std::string(e.what()));
    }
    FAIL("stream_file accepted " << text);
    return std::make_pair(std::string(), std::string());
  };
  const auto dup = error_of("s_dup.json", R"({"results": [{"x": 1}, {"x": 1, "x": 2}]})");
  CHECK(dup.first == "/results/1/x");
  CHECK(contains(dup.second, "s_dup.json: /results/1/x: duplicate key \"x\""));
  CHECK(error_of("s_inf.json", R"({"results": [0, 0, [1e400]]})").first == "/results/2/0");
  CHECK(error_of("s_deep.json", "{\"results\": [0, " + deep(300) + "]}").first.rfind("/results/1/0/0", 0) == 0);
  CHECK(contains(error_of("s_bad.json", R"({"results": [1, 2,)").second, "malformed JSON"));
  CHECK(contains(error_of("s_root_dup.json", R"({"results": [1], "results": []})").second, "duplicate key \"results\""));
  CHECK_THROWS_WITH_AS(jsonu::stream_file("/nonexistent/x.json", "results", [](json&&, size_t, const json&) {}),
                       "/nonexistent/x.json: /: cannot open file", InputError);
}

TEST_CASE("stream_report checks every row as load_report does") {
  const json good = load_report(kBaseline);
  size_t rows = 0;
  const json header = stream_report(kBaseline, [&](json&& row, size_t i) {
    CHECK(row["case_id"] == good["results"][i]["case_id"]);
    CHECK_FALSE(row.contains("derived"));  // as stored: the baseline has none
    ++rows;
  });
  CHECK(rows == good["results"].size());
  CHECK(header["results"].empty());
  CHECK(header["environment"] == good["environment"]);

  auto path_of = [](const json& doc) {
    const std::string f = write("stream_bad.json", doc.dump());
    try {
      (void)stream_report(f, [](json&&, size_t) {});
    } catch (const InputError& e) {
      return e.json_path();
    }
    return std::string("(accepted)");
  };
  json bad = jsonu::load_file(kBaseline);
  bad["schema_version"] = 99;
  CHECK(path_of(bad) == "/schema_version");
  bad = jsonu::load_file(kBaseline);
  bad["results"].push_back(bad["results"][0]);
  CHECK(path_of(bad) == "/results/" + std::to_string(good["results"].size()));  // the duplicate row
  if (!test::schema_validation_or_loud_skip("streamed rows against the schema")) return;
  bad = jsonu::load_file(kBaseline);
  bad["results"][3]["status"] = "passed";
  CHECK(path_of(bad) == "/results/3/status");
  bad = jsonu::load_file(kBaseline);
  bad["results"][2].erase("backend");
  CHECK(path_of(bad) == "/results/2/backend");
  bad = jsonu::load_file(kBaseline);
  bad["tool"] = "other";
  CHECK(path_of(bad) == "/tool");  // the header, after the rows
}

TEST_CASE("load_report and compare_reports refuse two rows for one (case_id, backend variant)") {
  json doc = load_report(kBaseline);
  REQUIRE(doc["results"].size() >= 1);
  json dup = doc;
  json first = dup["results"][0];
  first["status"] = "fail";
  dup["results"].insert(dup["results"].begin(), first);  // failing row, then its passing twin
  const std::string f = write("dup_rows.json", dup.dump());
  const std::string key = "case_id \"" + first["case_id"].get<std::string>() + "\", backend variant \"" +
                          first["backend"].get<std::string>() + "\"";
  CHECK(contains(input_error_of([&] { load_report(f); }), f + ": /results/1: duplicate row (" + key + ")"));
  CHECK(contains(input_error_of([&] { compare_reports(doc, dup, "base.json", "new.json"); }),
                 "new.json: /results/1: duplicate row (" + key + ")"));
  CHECK(contains(input_error_of([&] { compare_reports(dup, doc, "base.json", "new.json"); }),
                 "base.json: /results/1: duplicate row"));
  CHECK(compare_reports(doc, doc, "base.json", "new.json").exit_code() == 0);
  // Two variants of one backend are two keys, not a duplicate.
  json two = doc;
  json other = two["results"][0];
  other["variant"] = other["backend"].get<std::string>() + "[x=1]";
  two["results"].push_back(other);
  CHECK(load_report(write("two_variants.json", two.dump()))["results"].size() == doc["results"].size() + 1);
}

TEST_CASE("CLI: a scenario nested 100,000 deep, 1e400 and duplicate keys exit 2 naming the file") {
  const std::string deep_file = write("deep.json", "{\"base\": " + deep(100000) + "}");
  for (const std::string& args :
       {"describe '" + deep_file + "'", "run '" + deep_file + "' --backends cpu --out '" +
                                            test::scratch_path("json_inputs", "out_deep").string() + "'"}) {
    Cli r = run_cli(args);
    INFO(args << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(contains(r.err, deep_file + ": /base"));
    CHECK(contains(r.err, "nested deeper than 256"));
  }
  const std::string inf_file = write("inf.json", R"({"name": "inf", "base": {"batch": 1, "heads_q": 2,
    "head_dim": 16, "seq": 32, "scale": 1e400}})");
  Cli r = run_cli("describe '" + inf_file + "'");
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(contains(r.err, inf_file + ": /base/scale: number 1e400 is out of range"));

  const std::string dup_file = write("dupkey.json", R"({"name": "d", "base": {"batch": 1, "heads_q": 2,
    "head_dim": 16, "seq": 32, "batch": 4}})");
  r = run_cli("describe '" + dup_file + "'");
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(contains(r.err, dup_file + ": /base/batch: duplicate key \"batch\""));

  // A packing data file goes through the same loader.
  const std::string lengths = write("lengths.json", R"({"lengths": [10, 20, 1e400]})");
  const std::string packed = write("packed.json", R"({"name": "p", "base": {"batch": 1, "heads_q": 2, "head_dim": 16,
    "seq": 64, "packing": {"source": {"kind": "empirical", "file": ")" + lengths + R"("}}}})");
  r = run_cli("describe '" + packed + "'");
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(contains(r.err, lengths + ": /lengths/2: number 1e400"));

  // `list scenarios` survives a hostile file in the directory and names it.
  const std::string dir = test::scratch_path("json_inputs", "scen").string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/deep.json") << "{\"base\": " << deep(100000) << "}";
  std::ofstream(dir + "/tiny.json") << kTiny;
  auto [code, out] = test::run_command("ATTNBENCH_SCENARIOS_DIR='" + dir + "' '" + std::string(ATTNBENCH_BINARY) +
                                       "' list scenarios 2>&1");
  INFO(out);
  CHECK(code == 0);
  CHECK(contains(out, "deep.json: /base"));
  CHECK(contains(out, "nested deeper than 256"));
  CHECK(contains(out, "\ntiny "));
}

TEST_CASE("CLI: compare, merge and report refuse hostile reports with exit 2") {
  json doc = json::parse(read(kBaseline));
  const std::string base = write("base.json", doc.dump());
  CHECK(run_cli("compare '" + base + "' '" + base + "' -q").code == 0);

  // NEW 100,000 deep (as BASE too), 1e400 in a timing, a duplicate key.
  const std::string deep_file = write("deep_report.json", "{\"schema_version\": " + deep(100000) + "}");
  std::string text = doc.dump();
  const std::string inf_file = write("inf_report.json", text.insert(text.size() - 1, ", \"x\": 1e400"));
  text = doc.dump();
  const std::string dup_file = write("dupkey_report.json", text.insert(text.size() - 1, ", \"results\": []"));
  struct Bad {
    std::string file, says;
  };
  for (const Bad& b : {Bad{deep_file, deep_file + ": /schema_version"}, Bad{inf_file, inf_file + ": /x: number 1e400"},
                       Bad{dup_file, dup_file + ": /results: duplicate key \"results\""}}) {
    for (const std::string& args :
         {"compare '" + base + "' '" + b.file + "' -q", "compare '" + b.file + "' '" + base + "' -q",
          "merge '" + base + "' '" + b.file + "' -o '" + test::scratch_path("json_inputs", "m.json").string() + "'",
          "report '" + b.file + "' -o '" + test::scratch_path("json_inputs", "r.html").string() + "'"}) {
      Cli r = run_cli(args);
      INFO(args << ": " << r.err);
      CHECK(r.code == 2);
      CHECK(contains(r.err, b.says));
    }
  }

  // NEW holds a failing row followed by a passing duplicate of it: refused, not passed.
  json dup = doc;
  json failing = dup["results"][0];
  failing["status"] = "fail";
  dup["results"].insert(dup["results"].begin(), failing);
  const std::string dup_rows = write("dup_rows.json", dup.dump());
  for (const std::string& args : {"compare '" + base + "' '" + dup_rows + "' -q",
                                  "merge '" + dup_rows + "' -o '" + test::scratch_path("json_inputs", "m2.json").string() + "' --replace"}) {
    Cli r = run_cli(args);
    INFO(args << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(contains(r.err, dup_rows + ": /results/1: duplicate row (case_id \"" + failing["case_id"].get<std::string>()));
  }
}

TEST_CASE("CLI: run --backends cpu,cpu is refused before any row is written") {
  const std::string f = write("tiny.json", kTiny);
  const std::string out = test::scratch_path("json_inputs", "out_twice").string();
  Cli r = run_cli("run '" + f + "' --backends cpu,cpu --check off --no-timing --out '" + out + "'");
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "--backends: backend \"cpu\" is listed more than once"));
  CHECK_FALSE(std::filesystem::exists(out + "/report.json"));
  // One listing runs and writes one row per case.
  r = run_cli("run '" + f + "' --backends cpu --check off --no-timing --no-determinism --out '" + out + "'");
  INFO(r.err);
  REQUIRE(r.code == 0);
  json rep = json::parse(read(out + "/report.json"));
  CHECK(rep["results"].size() == 1);
}
