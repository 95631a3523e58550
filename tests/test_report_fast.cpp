// The fast reader of reports (harness/model/json_fast.hpp and stream_report()'s
// fast path): it must read exactly what the nlohmann reader reads (number types
// included), step back to it wherever that reader refuses or reads differently
// (same errors), and be taken for the rows of real reports; compare, summary and
// merge must give the same output and the same errors with fast reading on and off.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#if defined(ATTNBENCH_HAVE_RAPIDJSON)
#include <rapidjson/document.h>
#endif

#include "harness/model/errors.hpp"
#include "harness/model/json_fast.hpp"
#include "harness/model/json_util.hpp"
#include "reports/compare.hpp"
#include "reports/report.hpp"
#include "reports/schema.hpp"
#include "reports/summary.hpp"
#include "tests/big_reports.hpp"
#include "tests/report_mutations.hpp"
#include "tests/schema_skip.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using nlohmann::json;
namespace fs = std::filesystem;

#if !defined(ATTNBENCH_HAVE_RAPIDJSON)

TEST_CASE("the fast reader of reports: built without RapidJSON, every report is read the nlohmann way") {
  jsonu::set_fast_json_reading(true);
  CHECK_FALSE(jsonu::fast_json_reading());  // nothing to switch on
  (void)test::fast_reader_or_loud_skip("the fast reader");
}

#else  // the rest of this file needs RapidJSON

namespace {

const std::string kSource = ATTNBENCH_SOURCE_DIR;
const std::string& kBaseline = test::kBaselineReport;
const std::string& kRerun = test::kRerunReport;

fs::path scratch(const std::string& name) { return test::scratch_path("report_fast", name); }


/// Fast reading on or off for one scope.
class FastReading {
 public:
  explicit FastReading(bool on) : was_(jsonu::fast_json_reading()) { jsonu::set_fast_json_reading(on); }
  ~FastReading() { jsonu::set_fast_json_reading(was_); }

 private:
  bool was_;
};

/// True when `a` and `b` are the same JSON with the same number types
/// (nlohmann's == calls 1 and 1u and 1.0 equal).
bool identical(const json& a, const json& b) {
  if (a.type() != b.type() || a.size() != b.size()) return false;
  if (a.is_object()) {
    for (auto x = a.begin(), y = b.begin(); x != a.end(); ++x, ++y)
      if (x.key() != y.key() || !identical(*x, *y)) return false;
    return true;
  }
  if (a.is_array()) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!identical(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

/// What stream_file_fast() read of a file: the root, every element of
/// "results" (each handed once, in order), the root as the first element saw
/// it, or the error; and how many elements the fast sink got.
struct Read {
  json root, first_root;
  std::vector<json> elements;
  std::string error;
  size_t fast = 0;
  bool in_order = true;
};

Read read_file(const fs::path& file, bool fast) {
  FastReading mode(fast);
  Read r;
  auto put = [&](json&& e, size_t i, const json& root) {
    r.in_order = r.in_order && i == r.elements.size();
    if (i == 0) r.first_root = root;
    r.elements.push_back(std::move(e));
  };
  try {
    r.root = jsonu::stream_file_fast(
        file.string(), "results",
        [&](const rapidjson::Value& e, size_t i, const json& root) {
          ++r.fast;
          put(jsonu::to_nlohmann(e), i, root);
        },
        [&](json&& e, size_t i, const json& root) { put(std::move(e), i, root); });
  } catch (const InputError& e) {
    r.error = e.what();
  }
  return r;
}

/// Reads `text` both ways; CHECKs that they agree. Returns the fast read.
Read both_ways(const std::string& text) {
  const fs::path f = scratch("text.json");
  test::write_file(f, text);
  const Read slow = read_file(f, false), fast = read_file(f, true);
  CHECK(slow.fast == 0);
  CHECK(fast.in_order);
  CHECK(fast.error == slow.error);
  CHECK(identical(fast.root, slow.root));
  CHECK(identical(fast.first_root, slow.first_root));
  REQUIRE(fast.elements.size() == slow.elements.size());
  for (size_t i = 0; i < fast.elements.size(); ++i) CHECK(identical(fast.elements[i], slow.elements[i]));
  return fast;
}

std::string nested(int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']'); }

}  // namespace

TEST_CASE("stream_file_fast reads what stream_file reads, number types included, through RapidJSON") {
  const std::string text = R"({"schema_version": 3, "a": [1, -2, 3.5, 1e2, 18446744073709551615, 18446744073709551616,
    -9223372036854775808, -9223372036854775809, 0.1, 5e-324, 1.7976931348623157e308, 2.2250738585072011e-308,
    0.30000000000000004, 123456789012345678901234567890],
    "results": [{"x": "\u00e9\u20ac\ud83d\ude00 \" \\ \/ \b\f\n\r\t \u0000", "n": null, "t": true, "f": false},
                [], 7, "s", {"deep": [[[{}]]]}, {"z": 1, "a": 2, "m": {"b": [], "a": {}}}],
    "after": {"k": [1, 2], "caf\u00e9": "\u00fc"}})";
  const Read r = both_ways(text);
  CHECK(r.error.empty());
  CHECK(r.elements.size() == 6);
  CHECK(r.fast == 6);  // every element went the fast way
  CHECK(r.root["a"][4].is_number_unsigned());
  CHECK(r.root["a"][5].is_number_float());   // past 2^64: a float, as nlohmann reads it
  CHECK(r.root["a"][7].is_number_float());   // below -2^63
  CHECK(r.root["a"][1].is_number_integer());
  CHECK(r.root["results"] == json::array());
  CHECK(r.first_root.contains("schema_version"));
  CHECK(r.elements[0]["x"].get<std::string>().size() == 23);
  // real reports: every row fast, the same as nlohmann
  for (const std::string& f : {kBaseline, kSource + "/docs/results/raw/2026-11-27-session12-fwd_rows.json"}) {
    CAPTURE(f);
    const Read fast = read_file(f, true), slow = read_file(f, false);
    CHECK(fast.error.empty());
    CHECK(fast.fast == fast.elements.size());
    CHECK(fast.elements.size() > 5);
    CHECK(identical(fast.root, slow.root));
    for (size_t i = 0; i < fast.elements.size(); ++i) CHECK(identical(fast.elements[i], slow.elements[i]));
  }
}

TEST_CASE("stream_file_fast steps back where parse_text refuses or reads differently, with the same errors") {
  const std::vector<std::string> texts = {
      R"({"results": [{"a": 1}, {"a": 1, "a": 2}]})",          // duplicate key in a row (after one fast row)
      R"({"results": [{"k": {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8, "i": 9, "j": 10,
          "k": 11, "l": 12, "m": 13, "n": 14, "o": 15, "p": 16, "q": 17, "a": 18}}]})",  // ... among many keys
      R"({"results": [], "results": []})", R"({"a": 1, "results": [1], "a": 2})",  // at the root
      R"({"results": [{"x": 1e400}]})", R"({"results": [-1e400]})", R"({"results": [1e-400, 4.9e-325]})",
      R"({"results": [-0, -0.0, 0]})",                          // nlohmann: -0 is a signed integer
      R"({"results": ["\udc00"]})", R"({"results": ["\ud800"]})", R"({"results": ["\ud800\u0041"]})",
      std::string("{\"results\": [1]}\0", 15) + "x", std::string("{\"results\": [\"a\0b\"]}", 20),
      "\xEF\xBB\xBF{\"results\": [1]}",                           // a byte-order mark: nlohmann skips it
      "{\"results\": [\"\xC3\x28\"]}", "{\"results\": [\"\xC0\xAF\"]}", "{\"results\": [\"\xED\xA0\x80\"]}",
      "{\"results\": [\"\xF4\x90\x80\x80\"]}", "{\"results\": [\"\xE2\x82\"]}", "{\"results\": [\"\xC3",
      "{\"results\": [\"\x01\"]}", "{\"results\": [\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"]}",
      "{\"results\": [" + nested(254) + "]}", "{\"results\": [" + nested(255) + "]}", nested(300),
      R"({"results": [1 2]})", R"({"results": [1,]})", R"({} x)", "", "   ", R"({"results": [01]})", R"([1.])",
      R"({"results": [NaN]})", R"({"results": [1] /* c */})", R"({"results": {"a": 1}})", R"([1, 2])", R"("text")",
      R"(5)", R"({"results": [1], "tail": [}")", R"({"results": [[1, 2], {"a": [1]}], "x": 1})"};
  int stepped_back = 0, errors = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    CAPTURE(i);
    CAPTURE(texts[i].substr(0, 80));
    const Read r = both_ways(texts[i]);
    stepped_back += r.fast < r.elements.size();
    errors += !r.error.empty();
  }
  CHECK(errors > 25);
  CHECK(stepped_back >= 3);  // -0, 1e-400, the byte-order mark
  // the fast elements before a step back are not handed again
  const Read dup = both_ways(R"({"results": [{"a": 1}, {"b": 1}, {"a": 1, "a": 2}]})");
  CHECK(dup.fast == 2);
  CHECK(dup.elements.size() == 2);
  CHECK(dup.error.find("duplicate key \"a\"") != std::string::npos);
  CHECK(dup.error.find("/results/2/a") != std::string::npos);
}

TEST_CASE("compare, summary and merge: the same output with fast reading on and off, and the fast path taken") {
  const fs::path base = scratch("base.json"), neu = scratch("new.json"), out = scratch("merged.json");
  test::write_big_report(load_report(kBaseline), 300, 0, base);
  json rerun = load_report(kRerun);
  for (auto& row : rerun["results"])  // slower samples: SLOWER verdicts
    for (auto& [pass, t] : row["timing"].items())
      if (t.is_object() && t.contains("samples_ms"))
        for (auto& s : t["samples_ms"]) s = s.get<double>() * 1.5;
  test::write_big_report(rerun, 280, 0, neu);  // 20 rows missing
  struct Outputs {
    std::string markdown, json_text, summary, merged;
    uint64_t fast_rows = 0;
  };
  auto outputs = [&](bool fast) {
    FastReading mode(fast);
    Outputs o;
    const uint64_t before = report_rows_read_fast();
    const Comparison c = compare_report_files(base.string(), neu.string());
    o.markdown = c.markdown();
    c.write_json([&](std::string_view s) { o.json_text += s; });
    o.summary = summarize_report_file(neu.string()).text();
    merge_report_files({base.string(), neu.string()}, out.string(), MergeOptions{true, true});
    o.merged = test::read_file(out);
    o.fast_rows = report_rows_read_fast() - before;
    return o;
  };
  const Outputs slow = outputs(false), fast = outputs(true);
  CHECK(slow.fast_rows == 0);
  CHECK(fast.fast_rows == 300 + 280 + 280 + 300 + 280);  // compare, summary, merge: every row
  CHECK(fast.markdown == slow.markdown);
  CHECK(fast.json_text == slow.json_text);
  CHECK(fast.summary == slow.summary);
  CHECK(fast.merged == slow.merged);
  CHECK(fast.markdown.find("| rows missing | 20 |") != std::string::npos);
  CHECK(fast.markdown.find("### Regressions (SLOWER)") != std::string::npos);
  CHECK(fast.summary.find("verdict: 280 rows") != std::string::npos);
}

TEST_CASE("rows the quick check does not accept take the nlohmann path: the same errors or outputs either way") {
  const json doc = load_report(kBaseline);
  const fs::path base = scratch("m_base.json"), bad = scratch("m_bad.json");
  test::write_big_report(doc, 40, 0, base);
  const json big = jsonu::load_file(base.string());
  test::Rng rng{2033};
  int thrown = 0, read = 0;
  for (int k = 0; k < 40; ++k) {
    json d = big;
    const size_t at = static_cast<size_t>(rng.uniform(0, 39));
    d["results"][at] = test::mutated(d["results"][at], rng);
    test::write_file(bad, d.dump(1));
    CAPTURE(d["results"][at].dump().substr(0, 300));
    auto outcome = [&](bool fast) {
      FastReading mode(fast);
      std::string out;
      try {
        out = compare_report_files(base.string(), bad.string()).markdown();
        out += summarize_report_file(bad.string()).text();
      } catch (const InputError& e) {
        out = std::string("InputError: ") + e.what();
      }
      return out;
    };
    const uint64_t before = report_rows_read_fast();
    const std::string fast = outcome(true);
    const uint64_t fast_rows = report_rows_read_fast() - before;
    const std::string slow = outcome(false);
    CHECK(fast == slow);
    if (fast.rfind("InputError: ", 0) == 0) {
      ++thrown;
      CHECK(fast.find(bad.string()) != std::string::npos);  // names the file
      CHECK(fast.find("/results/") != std::string::npos);   // and the field
    } else {
      ++read;
    }
    if (schema_validation_available() && !valijson_accepts(d["results"][at], true)) {
      // refused at row `at` of NEW: BASE's 40 rows and NEW's rows before it went the fast way, not it
      CHECK(fast.find("/results/" + std::to_string(at)) != std::string::npos);
      CHECK(fast_rows == 40 + at);
    }
  }
  CHECK(thrown > 10);
  CHECK(read > 3);
}

TEST_CASE("attnbench compare: an invalid row exits 2 naming file and field, with fast reading on and off") {
  json doc = load_report(kBaseline);
  size_t row = 0;
  while (!doc["results"][row]["timing"]["fwd"].is_object()) ++row;  // the first row timed forward
  REQUIRE(!doc["results"][row]["timing"]["fwd"]["samples_ms"].empty());
  doc["results"][row]["timing"]["fwd"]["samples_ms"][0] = "fast";
  const fs::path bad = scratch("cli_bad.json");
  test::write_file(bad, doc.dump(1));
  const std::string cmd = std::string(ATTNBENCH_BINARY) + " compare " + kBaseline + " " + bad.string() + " -q 2>&1";
  const auto [code_fast, out_fast] = test::run_command("ATTNBENCH_FAST_JSON=1 " + cmd);
  const auto [code_slow, out_slow] = test::run_command("ATTNBENCH_FAST_JSON=0 " + cmd);
  CHECK(code_fast == 2);
  CHECK(code_slow == 2);
  CHECK(out_fast == out_slow);
  CHECK(out_fast.find(bad.string()) != std::string::npos);
  CHECK(out_fast.find("/results/" + std::to_string(row) + "/timing/fwd/samples_ms/0") != std::string::npos);
  // a case_id that is not a string: the schema's error (exit 2), not a JSON library's (exit 3)
  json odd = load_report(kBaseline);
  odd["results"][1]["case_id"] = 5;
  test::write_file(bad, odd.dump(1));
  for (const char* fast : {"1", "0"}) {
    const std::pair<int, std::string> r = test::run_command(std::string("ATTNBENCH_FAST_JSON=") + fast + " " + cmd);
    CAPTURE(r.second);
    CHECK(r.first == 2);
    CHECK(r.second.find(bad.string() + ": /results/1/case_id: does not match") != std::string::npos);
  }
}

TEST_CASE("compare_report_files reads NEW on a second thread: BASE's error first, then NEW's, as one thread would") {
  json doc = load_report(kBaseline);
  json bad_base = doc, bad_new = doc;
  bad_base["results"][2]["status"] = "maybe";
  bad_new["results"][4]["status"] = 7;
  json dup_new = doc;
  dup_new["results"].push_back(dup_new["results"][1]);
  const fs::path bb = scratch("t_bad_base.json"), bn = scratch("t_bad_new.json"), dn = scratch("t_dup_new.json");
  test::write_file(bb, bad_base.dump(1));
  test::write_file(bn, bad_new.dump(1));
  test::write_file(dn, dup_new.dump(1));
  auto error_of = [](const fs::path& b, const fs::path& n) {
    try {
      compare_report_files(b.string(), n.string());
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string both = error_of(bb, bn), only_new = error_of(kBaseline, bn), dup = error_of(kBaseline, dn);
  CHECK(both.find(bb.string()) != std::string::npos);
  CHECK(both.find("/results/2/status") != std::string::npos);
  CHECK(only_new.find(bn.string()) != std::string::npos);
  CHECK(only_new.find("/results/4/status") != std::string::npos);
  CHECK(dup.find("duplicate row") != std::string::npos);
  CHECK(error_of(bb, dn) == both);  // BASE's error, not NEW's duplicate
  // and the comparison of good files is the one compare_reports() makes of the loaded reports
  const Comparison streamed = compare_report_files(kBaseline, kRerun);
  const Comparison whole = compare_reports(load_report(kBaseline), load_report(kRerun), kBaseline, kRerun);
  CHECK(streamed.markdown() == whole.markdown());
  CHECK(streamed.to_json() == whole.to_json());
}

#endif  // ATTNBENCH_HAVE_RAPIDJSON
