// The compiled quick schema check (reports/schema_fast.hpp) against valijson:
// on the report schema it must never call valid what valijson refuses (thousands
// of rows mutated at random, from real reports), and it must decide the rows a
// run writes (else it is no fast path); keywords on small schemas; unsupported
// keywords refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/json_fast.hpp"
#include "harness/model/json_util.hpp"
#include "reports/schema.hpp"
#include "reports/schema_fast.hpp"
#include "test_util.hpp"
#include "tests/report_mutations.hpp"
#include "tests/schema_skip.hpp"

using namespace attnbench;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSource = ATTNBENCH_SOURCE_DIR;

SchemaAnswer check(const char* schema, const json& value) { return CompiledSchema(json::parse(schema)).check(value); }

/// Rows of the reports kept in the tree (a GPU baseline, the raw results of
/// docs/results/raw/: GPU and CPU runs, old schema versions included).
std::vector<json> sample_rows() {
  std::vector<std::string> files = {kSource + "/ci/baselines/example-h100.json"};
  for (const auto& e : fs::directory_iterator(kSource + "/docs/results/raw"))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<json> rows;
  for (const auto& f : files) {
    const json doc = jsonu::load_file(f);
    if (!doc.contains("results") || !doc["results"].is_array()) continue;
    size_t taken = 0;
    for (const auto& r : doc["results"])
      if (taken++ < 6) rows.push_back(r);
  }
  return rows;
}

}  // namespace

TEST_CASE("the quick check never calls valid a row valijson refuses, and decides the rows runs write") {
  if (!test::schema_validation_or_loud_skip("the quick schema check against valijson")) return;
  REQUIRE(fast_schema_check_available());
  const json schema = json::parse(report_schema_text());
  const CompiledSchema rows_schema(json{{"$ref", "#/$defs/row"}, {"$defs", schema["$defs"]}});
  const std::vector<json> rows = sample_rows();
  REQUIRE(rows.size() > 40);
  for (const auto& r : rows) {
    CAPTURE(r.value("case_id", ""));
    REQUIRE(valijson_accepts(r, true));
    CHECK(rows_schema.check(r) == SchemaAnswer::valid);
  }
  test::Rng rng{33};
  int refused = 0, accepted = 0, decided_valid = 0, decided_invalid = 0;
  for (int i = 0; i < 3000; ++i) {
    json m = test::mutated(rows[static_cast<size_t>(i) % rows.size()], rng);
    if (rng.coin(0.3)) m = test::mutated(std::move(m), rng);  // two changes
    const bool vj = valijson_accepts(m, true);
    const SchemaAnswer fast = rows_schema.check(m);
    if (!vj && fast == SchemaAnswer::valid) FAIL_CHECK("quick check calls valid a row valijson refuses: " << m.dump());
    (vj ? accepted : refused) += 1;
    decided_valid += vj && fast == SchemaAnswer::valid;
    decided_invalid += !vj && fast == SchemaAnswer::invalid;
  }
  INFO(accepted << " accepted, " << refused << " refused by valijson; quick check: " << decided_valid << " valid, "
                << decided_invalid << " invalid");
  CHECK(refused > 500);  // the mutations do break rows
  CHECK(accepted > 500);
  CHECK(decided_valid > accepted * 95 / 100);  // it is a fast path for valid rows
  CHECK(decided_invalid > refused * 95 / 100);

  // Whole reports: the header's keywords (patterns, if/then/else on ceilings) too,
  // on headers mutated the same way (rows left out: they are checked above).
  const CompiledSchema whole(schema);
  json doc = jsonu::load_file(kSource + "/ci/baselines/example-h100.json");
  CHECK(whole.check(doc) == SchemaAnswer::valid);
  json header = doc;
  header["results"] = json::array();
  header["ceilings"] = jsonu::load_file(kSource + "/docs/results/raw/2026-11-27-session12-fwd_rows.json")["ceilings"];
  REQUIRE(valijson_accepts(header, false));
  int header_refused = 0;
  for (int i = 0; i < 600; ++i) {
    json m = test::mutated(header, rng);
    m["results"] = json::array();  // the mutation may have hit it: keep it an empty row list
    const bool vj = valijson_accepts(m, false);
    if (!vj && whole.check(m) == SchemaAnswer::valid) FAIL_CHECK("quick check calls valid a header valijson refuses: " << m.dump());
    header_refused += !vj;
  }
  CHECK(header_refused > 100);
  doc["started"] = "yesterday";  // fails the time pattern
  CHECK_FALSE(valijson_accepts(doc, false));
  CHECK(whole.check(doc) == SchemaAnswer::invalid);
}

TEST_CASE("the quick check of a RapidJSON row answers as on its nlohmann form (stream_report's fast path)") {
  if (!test::fast_reader_or_loud_skip("the RapidJSON rows' quick check")) return;
  const json schema = json::parse(report_schema_text());
  const CompiledSchema rows_schema(json{{"$ref", "#/$defs/row"}, {"$defs", schema["$defs"]}});
  const std::vector<json> rows = sample_rows();
  test::Rng rng{34};
  std::string text = "{\"results\": [";
  std::vector<json> written;
  // The first rows as written, the rest mutated. The plain prefix is capped: every committed raw
  // report adds sample rows, and an uncapped prefix left too few mutated (invalid) rows once
  // docs/results/raw held 769 of them (283 invalid of 1500, session 22).
  const int plain = std::min(static_cast<int>(rows.size()), 400);
  for (int i = 0; i < 1500; ++i) {
    json m = i < plain ? rows[static_cast<size_t>(i)]
                       : test::mutated(rows[static_cast<size_t>(i) % rows.size()], rng);
    std::string row = m.dump();
    if (i % 3 == 0 && m.is_object()) {  // members in reverse order: the check must not rely on sorted names
      row.clear();
      for (auto it = m.items().begin(); it != m.items().end(); ++it)
        row = json(it.key()).dump() + ":" + it.value().dump() + (row.empty() ? "" : ",") + row;
      row = "{" + row + "}";
    }
    text += (i ? "," : "") + row;
    written.push_back(std::move(m));
  }
  text += "]}";
  const fs::path file = test::scratch_path("schema_fast", "rows.json");
  test::write_file(file, text);
  size_t seen = 0;
  std::map<SchemaAnswer, int> answers;
  jsonu::stream_file_fast(
      file.string(), "results",
      [&](const rapidjson::Value& row, size_t i, const json&) {
        ++seen;
        const SchemaAnswer fast = rows_schema.check_rapidjson(row);
        CHECK(fast == rows_schema.check(written[i]));
        CHECK(fast == rows_schema.check(jsonu::to_nlohmann(row)));
        ++answers[fast];
      },
      [&](json&&, size_t, const json&) { FAIL_CHECK("a row left the fast reader"); });
  CHECK(seen == written.size());
  CHECK(answers[SchemaAnswer::valid] > 300);
  CHECK(answers[SchemaAnswer::invalid] > 300);
}

TEST_CASE("quick check keywords: strict types, enums across number kinds, conditions, refs, lengths") {
  // valijson's strict types: 1.0 is a number, not an integer
  CHECK(check(R"({"type": "integer"})", 3) == SchemaAnswer::valid);
  CHECK(check(R"({"type": "integer"})", 3.0) == SchemaAnswer::invalid);
  CHECK(check(R"({"type": ["number", "null"]})", 3) == SchemaAnswer::valid);
  CHECK(check(R"({"type": ["number", "null"]})", "3") == SchemaAnswer::invalid);
  // an enum compared across number kinds is valijson's to decide
  CHECK(check(R"({"enum": [1, 2]})", 2) == SchemaAnswer::valid);
  CHECK(check(R"({"enum": [1, 2]})", 2.0) == SchemaAnswer::unknown);
  CHECK(check(R"({"enum": ["a", 1]})", "b") == SchemaAnswer::invalid);
  CHECK(check(R"({"const": false})", false) == SchemaAnswer::valid);
  // if / then / else, and an undecidable condition
  const char* cond = R"({"if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}, "else": {"required": ["c"]}})";
  CHECK(check(cond, json{{"a", 1}, {"b", 0}}) == SchemaAnswer::valid);
  CHECK(check(cond, json{{"a", 1}, {"c", 0}}) == SchemaAnswer::invalid);
  CHECK(check(cond, json{{"a", 2}, {"c", 0}}) == SchemaAnswer::valid);
  CHECK(check(cond, json{{"a", 1.0}, {"b", 0}}) == SchemaAnswer::unknown);
  // anyOf, oneOf, allOf
  CHECK(check(R"({"anyOf": [{"type": "string"}, {"minimum": 3}]})", 2) == SchemaAnswer::invalid);
  CHECK(check(R"({"anyOf": [{"type": "string"}, {"minimum": 3}]})", 4) == SchemaAnswer::valid);
  CHECK(check(R"({"oneOf": [{"minimum": 1}, {"minimum": 2}]})", 3) == SchemaAnswer::invalid);
  CHECK(check(R"({"oneOf": [{"minimum": 1}, {"minimum": 2}]})", 1.5) == SchemaAnswer::valid);
  CHECK(check(R"({"allOf": [{"minimum": 1}, {"maximum": 2}]})", 3) == SchemaAnswer::invalid);
  // exclusive bounds
  CHECK(check(R"({"exclusiveMinimum": 0})", 0) == SchemaAnswer::invalid);
  CHECK(check(R"({"exclusiveMinimum": 0})", 1e-300) == SchemaAnswer::valid);
  // objects: additionalProperties false / schema, propertyNames, required
  const char* obj = R"({"type": "object", "required": ["x"], "properties": {"x": {"type": "integer"}},
                        "additionalProperties": {"type": "string"}, "propertyNames": {"enum": ["x", "y"]}})";
  CHECK(check(obj, json{{"x", 1}, {"y", "s"}}) == SchemaAnswer::valid);
  CHECK(check(obj, json{{"x", 1}, {"y", 2}}) == SchemaAnswer::invalid);
  CHECK(check(obj, json{{"x", 1}, {"z", "s"}}) == SchemaAnswer::invalid);
  CHECK(check(obj, json{{"y", "s"}}) == SchemaAnswer::invalid);
  CHECK(check(R"({"additionalProperties": false, "properties": {"a": true}})", json{{"b", 1}}) == SchemaAnswer::invalid);
  // arrays and strings; lengths of non-ASCII strings are valijson's (code points)
  CHECK(check(R"({"items": {"pattern": "^[#+.]{1,3}$"}, "minItems": 1, "maxItems": 2})", json{"#+", "..."}) ==
        SchemaAnswer::valid);
  CHECK(check(R"({"items": {"pattern": "^[#+.]{1,3}$"}})", json{"#+x"}) == SchemaAnswer::invalid);
  CHECK(check(R"({"maxItems": 1})", json{1, 2}) == SchemaAnswer::invalid);
  CHECK(check(R"({"minLength": 2})", "a") == SchemaAnswer::invalid);
  CHECK(check(R"({"minLength": 2})", "\xc3\xa9") == SchemaAnswer::unknown);
  // refs, recursive ones included
  const char* tree = R"({"$ref": "#/$defs/t", "$defs": {"t": {"type": "object", "properties": {"kids": {"type": "array",
                        "items": {"$ref": "#/$defs/t"}}}, "additionalProperties": false}}})";
  CHECK(check(tree, json::parse(R"({"kids": [{"kids": []}, {}]})")) == SchemaAnswer::valid);
  CHECK(check(tree, json::parse(R"({"kids": [{"kids": [{"bad": 1}]}]})")) == SchemaAnswer::invalid);
  CHECK(check("false", 1) == SchemaAnswer::invalid);
  CHECK(check("true", 1) == SchemaAnswer::valid);
}

TEST_CASE("the quick check refuses what it does not implement") {
  CHECK_THROWS_WITH_AS(CompiledSchema(json::parse(R"({"properties": {"a": {"uniqueItems": true}}})")),
                       "/properties/a/uniqueItems: keyword \"uniqueItems\" is not supported by the compiled check",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(CompiledSchema(json::parse(R"({"$ref": "#/nowhere"})")),
                       "$ref \"#/nowhere\" names nothing in the schema", std::invalid_argument);
  CHECK_THROWS_AS(CompiledSchema(json::parse(R"({"$ref": "#/$defs/a", "type": "string", "$defs": {"a": true}})")),
                  std::invalid_argument);
  CHECK_THROWS_AS(CompiledSchema(json::parse(R"({"items": [true, false]})")), std::invalid_argument);
  CHECK_THROWS_AS(CompiledSchema(json::parse(R"({"minimum": "3"})")), std::invalid_argument);
}
