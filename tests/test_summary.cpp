// `attnbench summary` (reports/summary.hpp): per-backend counts, the fastest
// passing backend per case, and the origin of every failing row, on a
// hand-written report whose answers are known; and the CLI's exit codes.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "reports/summary.hpp"
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
