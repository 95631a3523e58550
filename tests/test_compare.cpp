// The regression gate on the example baselines of ci/baselines/: the same run
// twice reads SAME, a 10% slowdown reads SLOWER, a correctness flip fails, a
// different GPU is refused; the Mann-Whitney U test against hand-computed values;
// the `attnbench compare` and `merge` exit codes.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>
#include <string>
#include <vector>

#include "reports/compare.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/measure/measure.hpp"
#include "reports/report.hpp"
#include "tests/big_reports.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSource = ATTNBENCH_SOURCE_DIR;
const std::string& kBaseline = test::kBaselineReport;
const std::string& kRerun = test::kRerunReport;

fs::path scratch(const std::string& name) { return test::scratch_path("compare", name); }

void save(const fs::path& p, const json& j) {
  std::ofstream out(p);
  out << j.dump(1);
}

/// Scale every timing sample of rows matching `backend` ("" = all) by `factor`
/// with multiplicative noise (deterministic seed), and re-summarise.
json slowed(json doc, double factor, const std::string& backend = "", uint32_t seed = 42) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.01);
  for (auto& row : doc["results"]) {
    if (!backend.empty() && row["backend"] != backend) continue;
    if (!row["timing"].is_object()) continue;
    for (auto& [pass, t] : row["timing"].items()) {
      TimingStats s = TimingStats::from_json(t, "x", "/");
      for (double& x : s.samples_ms) x *= factor * std::exp(noise(rng));
      s.summarize();
      t = s.to_json();
    }
  }
  return doc;
}

int run_status(const std::string& cmd) {
  int st = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST_CASE("Mann-Whitney U: hand-computed values") {
  // no ties: U = 0, mu = 4.5, sigma^2 = 9/12 * 7 = 5.25, z = (0 - 4.5 + 0.5) / sqrt(5.25)
  MannWhitney a = mann_whitney_u({1, 2, 3}, {4, 5, 6});
  CHECK(a.valid);
  CHECK(a.u == doctest::Approx(0.0));
  CHECK(a.z == doctest::Approx(-4.0 / std::sqrt(5.25)));
  CHECK(a.p == doctest::Approx(std::erfc(4.0 / std::sqrt(5.25) / std::sqrt(2.0))));
  CHECK(a.p == doctest::Approx(0.0809).epsilon(0.001));
  // symmetric
  MannWhitney b = mann_whitney_u({4, 5, 6}, {1, 2, 3});
  CHECK(b.u == doctest::Approx(9.0));
  CHECK(b.p == doctest::Approx(a.p));
  // ties: ranks 1, (2,3,4)->3, (5,6)->5.5; R_a = 7, U = 1; tie sum = 24 + 6 = 30;
  // sigma^2 = 9/12 * (7 - 30/30) = 4.5; z = (1 - 4.5 + 0.5) / sqrt(4.5) = -sqrt(2)
  MannWhitney t = mann_whitney_u({1, 2, 2}, {2, 3, 3});
  CHECK(t.u == doctest::Approx(1.0));
  CHECK(t.z == doctest::Approx(-std::sqrt(2.0)));
  CHECK(t.p == doctest::Approx(std::erfc(1.0)));
  // all equal: no information
  MannWhitney e = mann_whitney_u({2, 2, 2}, {2, 2});
  CHECK(e.p == 1.0);
  CHECK_FALSE(mann_whitney_u({}, {1.0}).valid);
  // identical samples: U at its mean
  MannWhitney same = mann_whitney_u({1, 2, 3, 4}, {1, 2, 3, 4});
  CHECK(same.u == doctest::Approx(8.0));
  CHECK(same.p == doctest::Approx(1.0));
}

TEST_CASE("tolerances parse as fractions or percentages") {
  CHECK(parse_fraction("5%", "--max-slowdown") == doctest::Approx(0.05));
  CHECK(parse_fraction("12.5%", "--max-slowdown") == doctest::Approx(0.125));
  CHECK(parse_fraction("0.1", "--max-slowdown") == doctest::Approx(0.1));
  CHECK(parse_fraction("0", "--max-slowdown") == 0.0);
  for (const char* bad : {"5", "abc", "", "-1%", "150%", "5%%", "nan"}) {
    try {
      parse_fraction(bad, "--max-slowdown");
      FAIL("accepted " << bad);
    } catch (const InputError& e) {
      CHECK(e.json_path() == "--max-slowdown");
    }
  }
}

TEST_CASE("the same run twice reads SAME") {
  json a = load_report(kBaseline), b = load_report(kRerun);
  Comparison c = compare_reports(a, b, "base.json", "new.json");
  CHECK(c.rows_compared == 10);
  CHECK(c.timings.size() == 27);  // 9 timed rows x 3 passes
  CHECK(c.count(Verdict::same) == 27);
  CHECK(c.regressions() == 0);
  CHECK(c.exit_code() == 0);
  CHECK(c.status_changes.empty());
  CHECK(c.added.empty());
  CHECK(c.missing.empty());
  CHECK(c.markdown().find("## attnbench compare: OK") != std::string::npos);
  // a run against itself: every U test at p = 1
  Comparison self = compare_reports(a, a, "a", "a");
  for (const auto& t : self.timings) {
    CHECK(t.verdict == Verdict::same);
    CHECK(t.test.p == doctest::Approx(1.0));
  }
}

TEST_CASE("a 10% slowdown reads SLOWER and fails the gate") {
  json a = load_report(kBaseline);
  json b = slowed(load_report(kRerun), 1.10, "cudnn");
  Comparison c = compare_reports(a, b, "base.json", "new.json");
  int64_t slower = 0;
  for (const auto& t : c.timings) {
    if (t.backend == "cudnn") {
      CHECK(t.verdict == Verdict::slower);
      CHECK(t.regression);
      CHECK(t.ratio == doctest::Approx(1.10).epsilon(0.03));
      CHECK_FALSE(t.intervals_overlap);
      CHECK(t.test.p < 0.05);
      ++slower;
    } else {
      CHECK(t.verdict == Verdict::same);
    }
  }
  CHECK(slower == 15);  // 5 cudnn rows x 3 passes
  CHECK(c.exit_code() == 1);
  const std::string md = c.markdown();
  CHECK(md.find("REGRESSED") != std::string::npos);
  CHECK(md.find("### Regressions (SLOWER)") != std::string::npos);
  CHECK(md.find("causal-s4096") != std::string::npos);

  // a wider tolerance lets the same change through
  CompareOptions loose;
  loose.max_slowdown = 0.15;
  CHECK(compare_reports(a, b, "base.json", "new.json", loose).exit_code() == 0);

  // and a 10% speed-up reads FASTER without failing
  Comparison f = compare_reports(a, slowed(load_report(kRerun), 1.0 / 1.10), "base.json", "new.json");
  CHECK(f.count(Verdict::faster) == 27);
  CHECK(f.exit_code() == 0);
}

TEST_CASE("noise that hides the change reads AMBIGUOUS") {
  json a = load_report(kBaseline);
  json b = a;
  // one row's fwd samples spread widely: median +10%, but q1 below the base's q3
  auto& t = b["results"][1]["timing"]["fwd"];
  const double m = TimingStats::from_json(a["results"][1]["timing"]["fwd"], "x", "/").median_ms;
  TimingStats s;
  for (double f : {0.80, 0.95, 1.08, 1.12, 1.30, 1.40}) s.samples_ms.push_back(f * m);
  s.summarize();
  t = s.to_json();
  Comparison c = compare_reports(a, b, "base.json", "new.json");
  const PassComparison* found = nullptr;
  for (const auto& pc : c.timings)
    if (pc.case_id == a["results"][1]["case_id"].get<std::string>() &&
        pc.backend == a["results"][1]["backend"].get<std::string>() && pc.pass == "fwd")
      found = &pc;
  REQUIRE(found != nullptr);
  CHECK(found->ratio == doctest::Approx(1.10));
  CHECK(found->verdict == Verdict::ambiguous);
  CHECK(c.exit_code() == 0);
  CompareOptions strict;
  strict.fail_on_ambiguous = true;
  CHECK(compare_reports(a, b, "base.json", "new.json", strict).exit_code() == 1);
}

TEST_CASE("summary-only timings fall back to the interval test") {
  json a = load_report(kBaseline);
  json b = slowed(load_report(kRerun), 1.10, "naive");
  for (json* d : {&a, &b})
    for (auto& row : (*d)["results"])
      if (row["timing"].is_object())
        for (auto& [pass, t] : row["timing"].items()) t.erase("samples_ms");
  Comparison c = compare_reports(a, b, "a", "b");
  for (const auto& t : c.timings) {
    CHECK_FALSE(t.test.valid);
    CHECK(t.note.find("interval test only") != std::string::npos);
    CHECK(t.verdict == (t.backend == "naive" ? Verdict::slower : Verdict::same));
  }
}

TEST_CASE("a correctness flip fails; known failures and new rows are listed") {
  json a = load_report(kBaseline), b = load_report(kRerun);
  b["results"][2]["status"] = "fail";
  b["results"][2]["check"]["pass"] = false;
  b["results"][2]["check"]["worst_ratio"] = 7.5;
  Comparison c = compare_reports(a, b, "base.json", "new.json");
  REQUIRE(c.status_changes.size() == 1);
  CHECK(c.status_changes[0].base_status == "pass");
  CHECK(c.status_changes[0].new_status == "fail");
  CHECK(c.status_changes[0].regression);
  CHECK(c.status_changes[0].detail.find("7.5") != std::string::npos);
  CHECK(c.exit_code() == 1);
  CHECK(c.markdown().find("### Status changes") != std::string::npos);

  // pass -> error fails too
  json e = load_report(kRerun);
  e["results"][0]["status"] = "error";
  e["results"][0]["message"] = "cudaErrorIllegalAddress";
  CHECK(compare_reports(a, e, "a", "e").exit_code() == 1);

  // failing in both runs: listed, not gating
  json a2 = a;
  a2["results"][2]["status"] = "fail";
  Comparison known = compare_reports(a2, b, "a", "b");
  REQUIRE(known.status_changes.size() == 1);
  CHECK_FALSE(known.status_changes[0].regression);
  CHECK(known.exit_code() == 0);
  CHECK(known.markdown().find("known failure") != std::string::npos);

  // a row only in NEW that fails gates; missing rows are listed
  json n = load_report(kRerun);
  json extra = n["results"][0];
  extra["case_id"] = "brand-new";
  extra["status"] = "fail";
  n["results"].push_back(extra);
  n["results"].erase(n["results"].begin() + 3);
  Comparison added = compare_reports(a, n, "a", "n");
  CHECK(added.added == std::vector<std::string>{"brand-new|naive"});
  CHECK(added.missing.size() == 1);
  CHECK(added.exit_code() == 1);
  CompareOptions allow_missing;
  allow_missing.allow_missing = true;
  n["results"].erase(n["results"].end() - 1);  // drop the failing new row
  CHECK(compare_reports(a, n, "a", "n").exit_code() == 1);  // a missing row gates by default
  CHECK(compare_reports(a, n, "a", "n").gate_breakdown() == "1 missing from NEW (--allow-missing)");
  CHECK(compare_reports(a, n, "a", "n", allow_missing).exit_code() == 0);
}

TEST_CASE("runs from different GPUs or drivers are refused unless allowed") {
  json a = load_report(kBaseline), b = load_report(kRerun);
  b["environment"]["gpu"]["name"] = "NVIDIA H200";
  try {
    compare_reports(a, b, "base.json", "new.json");
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(e.file() == "new.json");
    CHECK(e.json_path() == "/environment");
    CHECK(std::string(e.what()).find("NVIDIA H200") != std::string::npos);
    CHECK(std::string(e.what()).find("--allow-env-mismatch") != std::string::npos);
  }
  json d = load_report(kRerun);
  d["environment"]["versions"]["driver"] = "580.1";
  CHECK_THROWS_AS(compare_reports(a, d, "a", "d"), InputError);
  CompareOptions allow;
  allow.allow_env_mismatch = true;
  Comparison c = compare_reports(a, b, "a", "b", allow);
  CHECK(c.env_mismatch);
  CHECK(c.exit_code() == 0);
  CHECK(c.markdown().find("different environments") != std::string::npos);
  // bad options
  CompareOptions bad;
  bad.alpha = 0;
  CHECK_THROWS_AS(compare_reports(a, a, "a", "a", bad), InputError);
}

TEST_CASE("comparison JSON carries every verdict") {
  json a = load_report(kBaseline);
  Comparison c = compare_reports(a, slowed(load_report(kRerun), 1.1, "cudnn"), "a", "b");
  json j = c.to_json();
  CHECK(j["regressions"] == 15);
  CHECK(j["timings"].size() == 27);
  CHECK(j["timings"][0].contains("p"));
  CHECK(j["options"]["max_slowdown"] == doctest::Approx(0.05));
}

TEST_CASE("attnbench compare and merge: exit codes 0, 1 and 2") {
  const std::string bin = ATTNBENCH_BINARY;
  const fs::path slow = scratch("slow.json"), flip = scratch("flip.json"), other = scratch("other.json"),
                 md = scratch("summary.md"), merged = scratch("merged.json");
  save(slow, slowed(load_report(kRerun), 1.10, "cudnn"));
  json f = load_report(kRerun);
  f["results"][0]["status"] = "fail";
  save(flip, f);
  json o = load_report(kRerun);
  o["environment"]["gpu"]["name"] = "NVIDIA A100-SXM4-80GB";
  save(other, o);

  CHECK(run_status(bin + " compare " + kBaseline + " " + kRerun) == 0);
  CHECK(run_status(bin + " compare " + kBaseline + " " + slow.string() + " --markdown " + md.string()) == 1);
  std::ifstream in(md);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.find("REGRESSED") != std::string::npos);
  CHECK(run_status(bin + " compare " + kBaseline + " " + slow.string() + " --max-slowdown 20%") == 0);
  CHECK(run_status(bin + " compare " + kBaseline + " " + flip.string()) == 1);
  CHECK(run_status(bin + " compare " + kBaseline + " " + other.string()) == 2);
  CHECK(run_status(bin + " compare " + kBaseline + " " + other.string() + " --allow-env-mismatch") == 0);
  CHECK(run_status(bin + " compare " + kBaseline + " /nonexistent/report.json") == 2);
  CHECK(run_status(bin + " compare " + kBaseline + " " + kRerun + " --max-slowdown 5") == 2);

  CHECK(run_status(bin + " merge " + kBaseline + " " + other.string() + " -o " + merged.string()) == 2);
  CHECK(run_status(bin + " merge " + kBaseline + " " + kRerun + " -o " + merged.string()) == 2);  // duplicate rows
  CHECK(run_status(bin + " merge " + kBaseline + " " + kRerun + " --replace -o " + merged.string()) == 0);
  CHECK(load_report(merged.string())["merged_from"].size() == 2);
}

// ------------------------------------------------------------ guards beyond speed

namespace {

/// Index of the row (case_id, backend) in doc["results"].
size_t row_index(const json& doc, const std::string& case_id, const std::string& backend) {
  for (size_t i = 0; i < doc["results"].size(); ++i)
    if (doc["results"][i]["case_id"] == case_id && doc["results"][i]["backend"] == backend) return i;
  FAIL("row not found: " << case_id << " " << backend);
  return 0;
}

}  // namespace

TEST_CASE("compare: a row deterministic in base and not in new gates unless --allow-nondeterminism") {
  const json base = load_report(kBaseline);
  json neu = base;
  const size_t i = row_index(neu, "causal-s1024", "naive");
  REQUIRE(neu["results"][i]["extra"]["deterministic"] == true);
  neu["results"][i]["extra"]["deterministic"] = false;
  Comparison c = compare_reports(base, neu, "base.json", "new.json");
  REQUIRE(c.guards.size() == 1);
  CHECK(c.guards[0].kind == "nondeterministic");
  CHECK(c.guards[0].case_id == "causal-s1024");
  CHECK(c.guards[0].backend == "naive");
  CHECK(c.guards[0].regression);
  CHECK(c.regressions() == 1);
  CHECK(c.exit_code() == 1);
  CHECK(c.markdown().find("| causal-s1024 | naive | nondeterministic | **yes** |") != std::string::npos);
  // cudnn was nondeterministic in base already: false -> false is no guard.
  const size_t k = row_index(neu, "causal-s1024", "cudnn");
  CHECK(neu["results"][k]["extra"]["deterministic"] == false);
  CompareOptions allow;
  allow.allow_nondeterminism = true;
  Comparison a = compare_reports(base, neu, "base.json", "new.json", allow);
  REQUIRE(a.guards.size() == 1);
  CHECK_FALSE(a.guards[0].regression);
  CHECK(a.exit_code() == 0);
  // nondeterministic -> deterministic is not a guard either way.
  Comparison back = compare_reports(neu, base, "new.json", "base.json");
  CHECK(back.guards.empty());
}

TEST_CASE("compare: outputs gaining NaN/Inf gate unless --allow-nonfinite, also on a known failure") {
  json base = load_report(kBaseline);
  const size_t i = row_index(base, "causal-s1024", "naive");
  // A known failure in both (the status gate does not fire for fail -> fail) ...
  base["results"][i]["status"] = "fail";
  base["results"][i]["check"]["pass"] = false;
  json neu = base;
  // ... whose outputs now hold 7 NaNs where gold is finite.
  neu["results"][i]["check"]["tensors"][0]["unwritten"] = 7;
  Comparison c = compare_reports(base, neu, "base.json", "new.json");
  int64_t status_gates = 0;
  for (const auto& s : c.status_changes) status_gates += s.regression;
  CHECK(status_gates == 0);
  REQUIRE(c.guards.size() == 1);
  CHECK(c.guards[0].kind == "nonfinite");
  CHECK(c.guards[0].detail.find("gained 7 non-finite") != std::string::npos);
  CHECK(c.exit_code() == 1);
  CompareOptions allow;
  allow.allow_nonfinite = true;
  CHECK(compare_reports(base, neu, "base.json", "new.json", allow).exit_code() == 0);
  // Unchecked rows: check.nonfinite counts stand in for the tensors.
  json ub = load_report(kBaseline), un = ub;
  for (json* d : {&ub, &un}) {
    auto& r = (*d)["results"][i];
    r["status"] = "unchecked";
    r["check"] = {{"mode", "off"}, {"nonfinite", {{"O", 0}, {"LSE", 0}}}};
  }
  un["results"][i]["check"]["nonfinite"]["LSE"] = 3;
  Comparison u = compare_reports(ub, un, "base.json", "new.json");
  REQUIRE(u.guards.size() == 1);
  CHECK(u.guards[0].detail.find("gained 3 non-finite") != std::string::npos);
}

TEST_CASE("compare: unchecked is unknown correctness, never a pass") {
  const json base = load_report(kBaseline);
  json neu = base;
  const size_t i = row_index(neu, "causal-s1024", "naive");
  neu["results"][i]["status"] = "unchecked";
  neu["results"][i]["check"] = {{"mode", "off"}, {"scope", "nothing checked (--check off)"}};
  Comparison c = compare_reports(base, neu, "base.json", "new.json");
  REQUIRE(c.unchecked.size() == 1);
  CHECK(c.unchecked[0] == "causal-s1024|naive");
  bool gated = false;
  for (const auto& s : c.status_changes)
    if (s.case_id == "causal-s1024" && s.backend == "naive") {
      gated = s.regression;
      CHECK(s.new_status == "unchecked");
      CHECK(s.detail.find("correctness unknown") != std::string::npos);
    }
  CHECK(gated);  // pass -> unchecked gates
  CHECK(c.exit_code() == 1);
  CHECK(c.markdown().find("| rows unchecked in new (correctness unknown) | 1 |") != std::string::npos);
  // An older report's "pass" with check.mode off is read as unchecked too.
  json legacy = base;
  legacy["results"][i]["check"] = {{"mode", "off"}};
  Comparison l = compare_reports(base, legacy, "base.json", "legacy.json");
  CHECK(l.unchecked.size() == 1);
  CHECK(l.exit_code() == 1);
  // unchecked -> pass is fine; unchecked -> fail gates.
  CHECK(compare_reports(neu, base, "a", "b").exit_code() == 0);
  json failed = base;
  failed["results"][i]["status"] = "fail";
  CHECK(compare_reports(neu, failed, "a", "b").exit_code() == 1);
}

TEST_CASE("compare: the markdown shows setup time beside the steady-state median") {
  const json base = load_report(kBaseline);
  const json neu = slowed(base, 1.10);
  Comparison c = compare_reports(base, neu, "base.json", "new.json");
  const std::string md = c.markdown();
  CHECK(md.find("| base setup ms | new setup ms |") != std::string::npos);
  const size_t i = row_index(base, "causal-s1024", "naive");
  const double setup = base["results"][i]["extra"]["setup_ms"].get<double>();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g | %.4g |", setup, setup);
  bool found = false;
  for (const auto& t : c.timings)
    if (t.case_id == "causal-s1024" && t.backend == "naive") {
      CHECK(t.base_setup_ms == doctest::Approx(setup));
      found = true;
    }
  CHECK(found);
  CHECK(md.find(buf) != std::string::npos);
  CHECK(c.to_json()["timings"][0].contains("base_setup_ms"));
}

// ------------------------------------------------------------ reading row by row

TEST_CASE("compare_report_files: the verdicts of load_report + compare_reports, read one row at a time") {
  const fs::path slow = scratch("stream_slow.json"), flip = scratch("stream_flip.json");
  save(slow, slowed(load_report(kRerun), 1.10, "cudnn"));
  json f = load_report(kRerun);
  f["results"][0]["status"] = "fail";
  f["results"].erase(f["results"].begin() + 2);  // a missing row
  json added = f["results"][1];
  added["case_id"] = "only-in-new";
  f["results"].push_back(added);
  save(flip, f);
  for (const std::string& neu : {kRerun, slow.string(), flip.string()}) {
    CAPTURE(neu);
    const Comparison whole = compare_reports(load_report(kBaseline), load_report(neu), kBaseline, neu);
    const Comparison streamed = compare_report_files(kBaseline, neu);
    CHECK(streamed.to_json() == whole.to_json());
    CHECK(streamed.markdown() == whole.markdown());
  }
  const Comparison c = compare_report_files(kBaseline, flip.string());
  CHECK(c.missing.size() == 1);
  CHECK(c.added == std::vector<std::string>{"only-in-new|" + added["backend"].get<std::string>()});
  CHECK(c.exit_code() == 1);

  json other = load_report(kRerun);
  other["environment"]["gpu"]["name"] = "NVIDIA A100-SXM4-80GB";
  save(scratch("stream_other.json"), other);
  CHECK_THROWS_WITH_AS(compare_report_files(kBaseline, scratch("stream_other.json").string()),
                       doctest::Contains("stream_other.json: /environment: runs are from different environments"),
                       InputError);
}

TEST_CASE("compare --json is written piece by piece, byte for byte the document to_json() dumps") {
  const fs::path flip = scratch("json_flip.json"), out = scratch("json_out.json");
  json f = load_report(kRerun);
  f["results"][0]["status"] = "fail";
  f["results"].erase(f["results"].begin() + 2);
  f["results"][1]["message"] = "bad \"quoted\" line\nbreak \u00e9";  // escapes and non-ASCII in a streamed element
  f["results"][1]["status"] = "error";
  save(flip, f);
  for (const std::string& neu : {kBaseline, kRerun, flip.string()}) {
    CAPTURE(neu);
    const Comparison c = compare_report_files(kBaseline, neu);
    std::string streamed;
    size_t pieces = 0;
    c.write_json([&](std::string_view piece) {
      streamed += piece;
      ++pieces;
    });
    CHECK(streamed == c.to_json().dump(1, ' ', false, json::error_handler_t::replace) + "\n");
    CHECK(pieces > c.timings.size());  // one piece at least per timing: never the whole text at once
  }
  // the CLI writes the same file
  CHECK(run_status(std::string(ATTNBENCH_BINARY) + " compare " + kBaseline + " " + flip.string() + " -q --json " +
                   out.string()) == 1);
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str() == compare_report_files(kBaseline, flip.string()).to_json().dump(1, ' ', false,
                                                                                    json::error_handler_t::replace) +
                          "\n");
  // an empty comparison: every array empty ("[]")
  Comparison empty;
  std::string e;
  empty.write_json([&](std::string_view piece) { e += piece; });
  CHECK(e == empty.to_json().dump(1, ' ', false, json::error_handler_t::replace) + "\n");
  CHECK(e.find("\"timings\": []") != std::string::npos);
}

TEST_CASE("attnbench compare holds one row at a time: its peak memory stays below the reports' size") {
  // 1000 rows of ~35 KB each (the baseline's rows, each with a 30 KB extra
  // field): two files of ~35 MB. Reading them whole (as before this test) held
  // both documents, twice their size (measured: 168 MB for 54 MB of reports);
  // row by row holds one row and a digest per BASE row (17 MB).
  const fs::path base = scratch("big_base.json"), neu = scratch("big_new.json");
  test::write_big_report(load_report(kBaseline), 1000, 30000, base);
  save(neu, slowed(load_report(base.string()), 1.10, "cudnn"));
  const long bytes = static_cast<long>(fs::file_size(base) + fs::file_size(neu));
  int code = -1;
  const long rss = test::reader_peak_rss(ATTNBENCH_BINARY, {ATTNBENCH_BINARY, "compare", base.string(), neu.string(), "-q"}, code);
  CHECK(code == 1);  // the cudnn rows are SLOWER
  INFO("peak RSS " << rss / 1000000 << " MB beyond the binary's own for " << bytes / 1000000 << " MB of reports");
  CHECK(rss < bytes / 2);
}
