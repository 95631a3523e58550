// `attnbench summary` (reports/summary.hpp): per-backend counts, the fastest
// passing backend per case, and the origin of every failing row, on a
// hand-written report whose answers are known; and the CLI's exit codes.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/errors.hpp"
#include "reports/report.hpp"
#include "reports/summary.hpp"
#include "tests/big_reports.hpp"
#include "test_util.hpp"

namespace {

using nlohmann::json;

json timed(double fwd, double fwd_bwd) {
  json t = json::object();
  if (fwd >= 0) t["fwd"] = {{"median_ms", fwd}};
  if (fwd_bwd >= 0) t["fwd_bwd"] = {{"median_ms", fwd_bwd}};
  return t;
}

json row(const std::string& id, const std::string& backend, const std::string& status, json timing = nullptr) {
  return {{"case_id", id}, {"backend", backend}, {"status", status}, {"timing", std::move(timing)}};
}

json sample_report() {
  json rows = json::array();
  rows.push_back(row("c1", "a", "pass", timed(1.0, 4.0)));
  rows.push_back(row("c1", "b", "pass", timed(0.5, 2.0)));
  rows.push_back(row("c1", "c", "pass", timed(0.1, -1)));  // no fwd_bwd: not ranked while others have one
  json fail = row("c2", "a", "fail", timed(0.2, 0.8));
  fail["check"] = {{"pass", false},
                   {"tensors", json::array({{{"name", "O"}, {"pass", true}},
                                            {{"name", "LSE"}, {"pass", false}, {"nan_mismatch", 12}},
                                            {{"name", "dQ"}, {"pass", false}, {"ratio", 7.5}, {"r", 3.0}}})}};
  rows.push_back(fail);
  rows.push_back(row("c2", "b", "pass", timed(0.3, 1.2)));
  json unsup = row("c2", "c", "unsupported");
  unsup["reason"] = "no THD";
  rows.push_back(unsup);
  json err = row("c3", "a", "error");
  err["message"] = "plugin x (/p/x.so): forward failed: boom\nsecond line";
  rows.push_back(err);
  rows.push_back(row("c3", "c", "pass", timed(0.9, -1)));  // only a forward timing in this case
  json crash = row("c3", "b", "crashed");
  crash["message"] = "worker died";
  rows.push_back(crash);
  return {{"results", rows}};
}

}  // namespace

TEST_CASE("summary: counts per backend, fastest passing backend per case, failure origins") {
  const auto s = attnbench::summarize_report(sample_report());
  CHECK(s.rows == 9);
  CHECK(s.cases == 3);
  REQUIRE(s.backends.size() == 3);
  CHECK(s.backends.at("a").pass == 1);
  CHECK(s.backends.at("a").fail == 1);
  CHECK(s.backends.at("a").error == 1);
  CHECK(s.backends.at("b").pass == 2);
  CHECK(s.backends.at("b").other == 1);
  CHECK(s.backends.at("c").unsupported == 1);
  CHECK(s.backends.at("c").pass == 2);

  REQUIRE(s.winners.size() == 3);
  CHECK(s.winners[0].backend == "b");
  CHECK(s.winners[0].pass_name == "fwd_bwd");
  CHECK(s.winners[0].median_ms == 2.0);
  CHECK(s.winners[0].runner_up == "a");
  CHECK(s.winners[1].backend == "b");  // a is faster but failed the rule
  CHECK(s.winners[1].runner_up.empty());
  CHECK(s.winners[2].backend == "c");
  CHECK(s.winners[2].pass_name == "fwd");

  REQUIRE(s.failures.size() == 3);
  CHECK(s.failures[0].case_id == "c2");
  CHECK(s.failures[0].where == "LSE: 12 NaN/inf class mismatches; dQ: error 7.5x max(e_lp, ulp), allowed 3x");
  CHECK(s.failures[1].where == "plugin x (/p/x.so): forward failed: boom");
  CHECK(s.failures[2].status == "crashed");

  const std::string text = s.text();
  CHECK(text.find("c1: b 2 ms (fwd_bwd), 2.00x ahead of a") != std::string::npos);
  CHECK(text.find("c2 / a: fail: LSE: 12 NaN/inf") != std::string::npos);
  CHECK(text.find("failures (3):") != std::string::npos);
  CHECK(s.text(1).find("... and 2 more") != std::string::npos);
  REQUIRE(s.unsupported_reasons.size() == 1);
  CHECK(s.unsupported_reasons.at("c").at("no THD") == 1);
  CHECK(text.find("unsupported, most frequent reason per backend:\n  c: 1x no THD\n") != std::string::npos);
}

TEST_CASE("summary: a report without results is refused") {
  CHECK_THROWS_AS(attnbench::summarize_report(json::object()), std::invalid_argument);
}

TEST_CASE("attnbench summary: the CLI prints the verdict of a real run; bad input exits 2") {
  using attnbench::test::run_command;
  using attnbench::test::scratch_path;
  const std::string bin = ATTNBENCH_BINARY;
  const auto scen = scratch_path("summary", "tiny.json");
  std::ofstream(scen) << R"({"name": "tiny", "description": "one tiny case",
    "base": {"batch": 1, "heads_q": 2, "heads_kv": 1, "head_dim": 16, "seq": 32, "dtype": "bf16"},
    "axes": {"mask": [[], [{"kind": "causal"}]]}})";
  const auto out = scratch_path("summary", "run");
  auto [code, text] = run_command("'" + bin + "' run '" + scen.string() + "' --backends cpu --max-seconds 0.01 --out '" +
                                  out.string() + "' 2>&1");
  REQUIRE(code == 0);
  auto [scode, stext] = run_command("'" + bin + "' summary '" + (out / "report.json").string() + "' 2>&1");
  CHECK(scode == 0);
  CHECK(stext.find("verdict: 2 rows, 2 cases, 1 backends") != std::string::npos);
  CHECK(stext.find("  cpu          2      0            0      0      0") != std::string::npos);
  CHECK(stext.find("failures: none") != std::string::npos);
  auto [bcode, btext] = run_command("'" + bin + "' summary /nonexistent/report.json 2>&1");
  CHECK(bcode == 2);
  CHECK(btext.find("/nonexistent/report.json") != std::string::npos);
}

TEST_CASE("summarize_report_file reads row by row: the summary of load_report + summarize_report") {
  using namespace attnbench;
  const std::string src = ATTNBENCH_SOURCE_DIR;
  const std::vector<std::string> files = {src + "/ci/baselines/example-h100.json",  // version 1
                                          src + "/docs/results/raw/2026-11-24-session10-masks.json",
                                          src + "/docs/results/raw/2026-11-27-session11-gpu_smoke-v1.json",
                                          src + "/docs/results/raw/2026-11-27-session12-flex_variants.json"};
  // one with failures, an unsupported reason, a determinism mismatch and a case without a passing row
  json doc = load_report(files.front());
  doc["results"][0]["status"] = "fail";
  doc["results"][1]["status"] = "error";
  doc["results"][1]["message"] = "boom\nsecond line";
  doc["results"][2]["status"] = "unsupported";
  doc["results"][2]["reason"] = "no";
  doc["results"][3]["extra"] = {{"deterministic", false}, {"expected_deterministic", true}};
  const auto edited = test::scratch_path("summary", "edited.json");
  test::write_file(edited, doc.dump(1));
  std::vector<std::string> all = files;
  all.push_back(edited.string());
  for (const auto& f : all) {
    CAPTURE(f);
    const ReportSummary whole = summarize_report(load_report(f)), streamed = summarize_report_file(f);
    CHECK(streamed.text(1000) == whole.text(1000));
    CHECK(streamed.rows == whole.rows);
    CHECK(streamed.cases == whole.cases);
    CHECK(streamed.failures.size() == whole.failures.size());
  }
  const ReportSummary e = summarize_report_file(edited.string());
  CHECK(e.failures.size() == 2);
  CHECK(e.determinism.size() == 1);
  CHECK_THROWS_AS(summarize_report_file("/nonexistent/report.json"), InputError);
}

TEST_CASE("attnbench summary holds one row at a time: its peak memory stays below the report's size") {
  using namespace attnbench;
  const auto big = test::scratch_path("summary", "big.json");
  test::write_big_report(load_report(std::string(ATTNBENCH_SOURCE_DIR) + "/ci/baselines/example-h100.json"), 1000,
                         30000, big);
  const long bytes = static_cast<long>(std::filesystem::file_size(big));
  int code = -1;
  const long rss = test::reader_peak_rss(ATTNBENCH_BINARY, {ATTNBENCH_BINARY, "summary", big.string()}, code);
  CHECK(code == 0);
  INFO("peak RSS " << rss / 1000000 << " MB beyond the binary's own for " << bytes / 1000000 << " MB of report");
  CHECK(rss < bytes / 2);
}
