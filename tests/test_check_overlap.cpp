// --check-overlap rows (issue 29): the host-side check of row k runs while row
// k + 1 is timed, in this process or in k's finished isolated child; rows are
// still written in run order, at most --pending-checks rows wait for their
// check, a crash or timeout of row k + 1 never loses row k, and a check that
// fails (or dies) becomes its row's result. Shown with RowPipeline alone, and
// end to end with the fake GPU test backends (backends/testing/: timing passes
// of a known 40 ms, fixed samples) and a check of a known length
// (ATTNBENCH_TEST_CHECK_DELAY_MS), ordering read from a CLOCK_MONOTONIC event log.
#include <doctest/doctest.h>

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/run/row_pipeline.hpp"
#include "harness/run/runner.hpp"
#include "harness/model/errors.hpp"
#include "tests/cli_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace attnbench;
using namespace attnbench::test::cli;

namespace {

ReportRow named(const std::string& id) {
  ReportRow r;
  r.case_id = id;
  r.backend = "b";
  r.status = RowStatus::pass;
  return r;
}

/// A pipeline writing case ids into `written`, with pending rows whose finish
/// records its id into `finished`.
struct Fixture {
  std::vector<std::string> written, finished;
  std::vector<json> extras;
  RowPipeline::Finish finish_of(const std::string& id) {
    return [this, id](ReportRow& r) {
      finished.push_back(id);
      r.status = RowStatus::fail;
      return true;
    };
  }
};

}  // namespace

TEST_CASE("RowPipeline: rows in push order, at most max_pending waiting, actions in order, beside recorded") {
  Fixture f;
  std::vector<std::string> actions;
  {
    RowPipeline p(1, [&](ReportRow& r) {
      f.written.push_back(r.case_id);
      f.extras.push_back(r.extra);
    });
    p.push_pending(named("a"), f.finish_of("a"));
    CHECK(p.pending() == 1);
    CHECK(f.written.empty());  // a's check may still run beside the next row
    p.running("case|b");
    p.push_pending(named("b"), f.finish_of("b"));  // two pending > 1: a is joined and written
    CHECK(p.pending() == 1);
    CHECK(f.written == std::vector<std::string>{"a"});
    p.push_ready(named("c"));  // behind b
    p.push_action([&] { actions.push_back("after c, written: " + std::to_string(f.written.size())); });
    CHECK(f.written.size() == 1);
    p.drain();
    CHECK(p.pending() == 0);
    p.push_ready(named("d"));  // nothing pending: written at once
    CHECK(f.written.size() == 4);
  }
  CHECK(f.written == std::vector<std::string>{"a", "b", "c", "d"});
  CHECK(f.finished == std::vector<std::string>{"a", "b"});
  CHECK(actions == std::vector<std::string>{"after c, written: 3"});
  CHECK(f.extras[0]["check_overlap"]["beside"] == json::array({"case|b"}));
  CHECK(f.extras[1]["check_overlap"]["beside"] == json::array());
  CHECK_FALSE(f.extras[2].contains("check_overlap"));  // a ready row is left as it is
}

TEST_CASE("RowPipeline: set_max_pending changes the bound from the next push on") {
  Fixture f;
  RowPipeline p(3, [&](ReportRow& r) { f.written.push_back(r.case_id); });
  for (const char* id : {"a", "b", "c"}) p.push_pending(named(id), f.finish_of(id));
  CHECK(p.pending() == 3);
  CHECK(f.written.empty());
  p.set_max_pending(1);  // a smaller case bound: the oldest two go at the next push
  CHECK(p.pending() == 3);
  p.push_pending(named("d"), f.finish_of("d"));
  CHECK(p.pending() == 1);
  CHECK(f.written == std::vector<std::string>{"a", "b", "c"});
  p.set_max_pending(2);
  p.push_pending(named("e"), f.finish_of("e"));
  CHECK(p.pending() == 2);
  p.drain();
  CHECK(f.written == std::vector<std::string>{"a", "b", "c", "d", "e"});
}

TEST_CASE("RowPipeline: max_pending 0 joins at once; a throwing finish is the row's error; false drops only that row") {
  Fixture f;
  RowPipeline p0(0, [&](ReportRow& r) { f.written.push_back(r.case_id); });
  p0.push_pending(named("x"), f.finish_of("x"));
  CHECK(f.written == std::vector<std::string>{"x"});

  std::vector<ReportRow> rows;
  {
    RowPipeline p(2, [&](ReportRow& r) { rows.push_back(r); });
    p.push_pending(named("boom"), [](ReportRow&) -> bool { throw std::runtime_error("reference out of range"); });
    p.push_pending(named("stopped"), [](ReportRow&) { return false; });
    p.push_pending(named("fine"), [](ReportRow&) { return true; });
    CHECK(rows.size() == 1);  // three pending > 2
  }  // the destructor drains
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].case_id == "boom");
  CHECK(rows[0].status == RowStatus::error);
  CHECK(rows[0].message == "the row's check failed: reference out of range");
  CHECK(rows[1].case_id == "fine");
  CHECK(rows[1].status == RowStatus::pass);
}

TEST_CASE("--check-overlap and --pending-checks are parsed and validated") {
  CHECK(parse_check_overlap("rows") == RunOptions::CheckOverlap::rows);
  CHECK(parse_check_overlap("same-row") == RunOptions::CheckOverlap::same_row);
  CHECK(parse_check_overlap("off") == RunOptions::CheckOverlap::off);
  CHECK_THROWS_AS(parse_check_overlap("sometimes"), InputError);
  CHECK(std::string(to_string(RunOptions::CheckOverlap::same_row)) == "same_row");
  RunOptions o;
  CHECK(o.check_overlap == RunOptions::CheckOverlap::rows);  // the default
  o.pending_checks = -1;  // 0 is auto
  Scenario s;
  CHECK_THROWS_AS(validate_run(s, o), InputError);
}

namespace {

/// A scratch folder with a two-case scenario (S32, S48); the test backends on.
struct Scratch {
  TempDir t;
  std::string scenario;
  Scratch() {
    scenario = t.write("two.json", R"({"name": "two",
      "base": {"batch": 1, "heads_q": 2, "heads_kv": 2, "head_dim": 16, "seq": 32, "dtype": "fp32",
               "mask": [{"kind": "causal"}]},
      "axes": {"seq": [32, 48]}})");
  }
  std::string dir(const std::string& n) const { return (t.path / n).string(); }
};

const char* kEnv = "ATTNBENCH_TEST_BACKENDS=1 ATTNBENCH_TEST_TIMING_MS=40 ATTNBENCH_TEST_CHECK_DELAY_MS=700";

json report_of(const std::string& dir) { return json::parse(slurp(fs::path(dir) / "report.json")); }

/// "S32|test-fake-gpu" -> {event -> CLOCK_MONOTONIC ns} from the event log
/// (first timing-start, last timing-end, check-start, check-end).
std::map<std::string, std::map<std::string, long long>> events(const std::string& log) {
  std::map<std::string, std::map<std::string, long long>> out;
  std::istringstream in(slurp(log));
  std::string what, key;
  long long ns = 0;
  while (in >> what >> key >> ns) {
    auto& e = out[key];
    if (what == "timing-start" && e.count(what)) continue;  // the first pass's start
    e[what] = ns;
  }
  return out;
}

/// The parts of a row that do not depend on where or when its check ran.
json verdict(json r) {
  json v = {{"case_id", r["case_id"]}, {"backend", r["backend"]}, {"status", r["status"]},
            {"message", r.value("message", "")}};
  json c = r["check"];
  if (c.is_object())
    for (const char* k : {"reference_ms", "gold_ms", "gold_source"}) c.erase(k);
  v["check"] = c;
  if (r["backend"] == "cpu") return v;  // timed on the host for real: its figures vary run to run
  for (const char* pass : {"fwd", "bwd", "fwd_bwd"})
    v["timing_" + std::string(pass)] = r["timing"].is_object() && r["timing"].contains(pass)
                                           ? r["timing"][pass].value("median_ms", -1.0)
                                           : -1.0;
  return v;
}

/// Run the scenario with `args`, return the report; the event log in `log`.
json run_mode(const Scratch& s, const std::string& out, const std::string& log, const std::string& args,
              const std::string& env_extra = "") {
  fs::remove(log);
  const Result r = run_in(s.t.path, "run '" + s.scenario + "' --out '" + out + "' --no-determinism --max-seconds 0.05 " + args,
                          std::string(kEnv) + " ATTNBENCH_TEST_EVENT_LOG='" + log + "' " + env_extra);
  INFO(r.err);
  REQUIRE((r.code == 0 || r.code == 1));
  return report_of(out);
}

}  // namespace

TEST_CASE("--pending-checks auto: as many pending rows as a quarter of the available memory holds, 1 to 4") {
  Problem p;  // a packed long-document case: B2, 32 / 8 heads, 32k tokens, D128
  p.batch = 2;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.seq_q = p.seq_k = 32768;
  p.head_dim = p.head_dim_v = 128;
  // O and LSE: 2 * 32 * 32768 rows x 129; dQ 128 more per row; dK, dV: 2 * 8 * 32768 rows x 256.
  CHECK(pending_row_bytes(p, true) == 8ull * (2097152ull * 257 + 524288ull * 256));
  CHECK(pending_row_bytes(p, true) == 5385486336ull);
  CHECK(pending_row_bytes(p, false) == 8ull * 2097152ull * 129);
  const uint64_t GiB = 1ull << 30;
  CHECK(auto_pending_checks(p, true, 128 * GiB) == 4);  // 32 GiB / 5.0 GiB = 6.4, at most 4
  CHECK(auto_pending_checks(p, true, 48 * GiB) == 2);   // 12 GiB / 5.0 GiB = 2.4
  CHECK(auto_pending_checks(p, true, 16 * GiB) == 1);   // 4 GiB: less than one row, still 1
  CHECK(auto_pending_checks(p, false, 48 * GiB) == 4);  // 12 GiB / 2.0 GiB = 5.9
  CHECK(auto_pending_checks(p, true, 0) == 1);           // unknown
  CHECK(host_available_bytes() > 0);                     // Linux: /proc/meminfo
  CHECK(parse_pending_checks("auto") == 0);
  CHECK(parse_pending_checks("3") == 3);
  for (const char* bad : {"0", "65", "2x", "", "-1", "many"}) CHECK_THROWS_AS(parse_pending_checks(bad), InputError);
  CHECK(RunOptions{}.pending_checks == 0);  // auto is the default
}

TEST_CASE("attnbench run refuses a bad --check-overlap or --pending-checks (exit 2, naming the option)") {
  Scratch s;
  for (const char* bad : {"--check-overlap sometimes", "--pending-checks 0"}) {
    INFO(bad);
    const Result r = run_in(s.t.path, "run '" + s.scenario + "' --backends cpu --out '" + s.dir("bad") + "' " + bad);
    CHECK(r.code == 2);
    CHECK(contains(r.err, std::string(bad).substr(0, std::string(bad).find(' '))));
    CHECK_FALSE(fs::exists(fs::path(s.dir("bad")) / "journal.jsonl"));
  }
}

TEST_CASE("--check-overlap rows: row k's check runs while row k+1 is timed; the same rows, in the same order") {
  Scratch s;
  const std::string log = s.dir("events.log");
  for (const char* isolate : {"off", "on"}) {
    INFO("--isolate " << isolate);
    // Both cases isolated (a case boundary while a check is pending); one in-process.
    const int cases = std::string(isolate) == "on" ? 2 : 1;
    const std::string backends = " --backends test-fake-gpu,test-fake-gpu-wrong,cpu --isolate " + std::string(isolate) +
                                 (cases == 1 ? " --cases S32" : "");
    const json off = run_mode(s, s.dir(std::string("off_") + isolate), log, "--check-overlap off" + backends);
    const auto ev_off = events(log);
    const json rows = run_mode(s, s.dir(std::string("rows_") + isolate), log, "--check-overlap rows" + backends);
    const auto ev = events(log);
    REQUIRE(off["results"].size() == 3u * cases);
    REQUIRE(rows["results"].size() == 3u * cases);
    for (size_t i = 0; i < 3u * cases; ++i) {
      const json& a = off["results"][i];
      const json& b = rows["results"][i];
      INFO(a["case_id"] << " " << a["backend"]);
      CHECK(verdict(a) == verdict(b));  // same order, same verdicts and timing figures
      CHECK(a["extra"]["check_overlap"]["mode"] == "off");
    }
    CHECK(off["results"][0]["status"] == "pass");
    CHECK(off["results"][1]["status"] == "fail");  // O off by one: the check's verdict is the row's
    CHECK(off["results"][0]["timing"]["fwd"]["median_ms"] == 2.0);
    for (int c = 0; c < cases; ++c) {
      const json& gpu = rows["results"][3 * c];
      const json& wrong = rows["results"][3 * c + 1];
      const json& cpu = rows["results"][3 * c + 2];
      const std::string id = gpu["case_id"];
      const std::string S = c == 0 ? "S32" : "S48";
      CHECK(gpu["backend"] == "test-fake-gpu");
      // test-fake-gpu's check ran beside test-fake-gpu-wrong's row; the cpu row
      // (timed on the host) ran only after every pending check was joined.
      CHECK(gpu["extra"]["check_overlap"]["mode"] == "rows");
      CHECK(gpu["extra"]["check_overlap"]["beside"] == json::array({id + "|test-fake-gpu-wrong"}));
      CHECK(wrong["extra"]["check_overlap"]["mode"] == "rows");
      CHECK(wrong["extra"]["check_overlap"]["beside"] == json::array());
      CHECK(cpu["extra"]["check_overlap"]["mode"] == "off");
      CHECK(gpu["extra"]["check_overlap"]["check_ms"].get<double>() >= 700);
      // The check went on after the row's 3 x 40 ms of timing, for what was left of it.
      CHECK(gpu["extra"]["check_overlap"]["pending_ms"].get<double>() >= 450);
      CHECK(gpu["extra"]["check_overlap"].contains("runner_wait_ms") == (std::string(isolate) == "on"));
      // The event log: with rows, the check of row k ends after row k+1's timing
      // started; with off, every check ends before its own row's timing starts.
      const auto& g = ev.at(S + "|test-fake-gpu");
      const auto& w = ev.at(S + "|test-fake-gpu-wrong");
      CHECK(g.at("check-end") > w.at("timing-start"));
      CHECK(g.at("check-start") < g.at("timing-end"));
      CHECK(ev_off.at(S + "|test-fake-gpu").at("check-end") < ev_off.at(S + "|test-fake-gpu").at("timing-start"));
      CHECK(ev_off.at(S + "|test-fake-gpu").at("check-end") < ev_off.at(S + "|test-fake-gpu-wrong").at("timing-start"));
      // One reference per case, however the checks overlap (the gold lock).
      int computed = 0;
      for (const json* r : {&gpu, &wrong, &cpu}) computed += (*r)["check"]["gold_source"] == "computed";
      CHECK(computed == 1);
    }
    CHECK_FALSE(fs::exists(fs::path(s.dir(std::string("rows_") + isolate)) / ".gold"));
    CHECK_FALSE(fs::exists(fs::path(s.dir(std::string("rows_") + isolate)) / ".units"));
  }
}

TEST_CASE("a case's inputs and reference are obtained from its start, before its first row's check; once per case") {
  Scratch s;
  const std::string log = s.dir("events.log");
  for (const char* isolate : {"off", "on"}) {
    INFO("--isolate " << isolate);
    const json rep = run_mode(s, s.dir(std::string("prefetch_") + isolate), log,
                              std::string("--backends test-fake-gpu,test-fake-gpu-wrong --isolate ") + isolate);
    const auto ev = events(log);
    REQUIRE(rep["results"].size() == 4u);
    for (size_t c = 0; c < 2; ++c) {
      const std::string S = c == 0 ? "S32" : "S48";
      INFO(S);
      const auto& pf = ev.at(S + "|prefetch");
      const auto& first = ev.at(S + "|test-fake-gpu");
      // The prefetch began before the first row's check (which, without it, would
      // compute the reference), and that check ended only once the prefetch had.
      CHECK(pf.at("prefetch-start") < first.at("check-start"));
      CHECK(pf.at("prefetch-end") <= first.at("check-end"));
      int gold_computed = 0, inputs_computed = 0;
      for (size_t i = 2 * c; i < 2 * c + 2; ++i) {
        const json& r = rep["results"][i];
        gold_computed += r["check"]["gold_source"] == "computed";
        inputs_computed += r["extra"]["inputs"]["source"] == "computed";
      }
      CHECK(gold_computed == 1);    // in this process or loaded by the children: computed once
      CHECK(inputs_computed == 1);
      const json& row0 = rep["results"][2 * c];  // the first row carries what the prefetch cost
      CHECK(row0["check"]["gold_source"] == "computed");
      CHECK(row0["check"]["gold_ms"].get<double>() > 0);
      CHECK(row0["extra"]["inputs"]["source"] == "computed");
    }
  }
  // No GPU backend: nothing is prefetched (a CPU row computes its reference before its timing).
  run_mode(s, s.dir("prefetch_cpu"), log, "--backends cpu --cases S32");
  CHECK(events(log).count("S32|prefetch") == 0);
}

TEST_CASE("--check-overlap rows, isolated: a crash or timeout of row k+1 keeps row k; a dying check is its row") {
  Scratch s;
  const std::string log = s.dir("events.log");
  const std::string common = "--cases S32 --isolate on --case-timeout 4 --check-overlap rows ";
  json rep = run_mode(s, s.dir("crash"), log,
                      common + "--backends test-fake-gpu,test-fake-gpu-crash,test-fake-gpu-hang,test-fake-gpu-wrong");
  REQUIRE(rep["results"].size() == 4);
  const json& good = rep["results"][0];
  CHECK(good["backend"] == "test-fake-gpu");
  CHECK(good["status"] == "pass");  // its check went on while the next row's child crashed
  CHECK(good["extra"]["check_overlap"]["beside"].size() >= 1);
  CHECK(rep["results"][1]["backend"] == "test-fake-gpu-crash");
  CHECK(rep["results"][1]["status"] == "crashed");
  CHECK(rep["results"][2]["backend"] == "test-fake-gpu-hang");
  CHECK(rep["results"][2]["status"] == "timeout");
  CHECK(rep["results"][3]["status"] == "fail");

  // The check of test-fake-gpu's row dies (SIGSEGV in its child, after the row
  // was timed): the row is crashed, keeps its timing, and the next row is whole.
  rep = run_mode(s, s.dir("check_crash"), log, common + "--backends test-fake-gpu,test-fake-gpu-wrong",
                 "ATTNBENCH_TEST_CHECK_CRASH=test-fake-gpu");
  REQUIRE(rep["results"].size() == 2);
  const json& died = rep["results"][0];
  CHECK(died["status"] == "crashed");
  CHECK(contains(died["message"].get<std::string>(), "after its row was timed, while checking its outputs"));
  CHECK(died["timing"]["fwd"]["median_ms"] == 2.0);
  CHECK(rep["results"][1]["status"] == "fail");
  CHECK(rep["results"][1]["backend"] == "test-fake-gpu-wrong");
}

TEST_CASE("--check-overlap rows across cases: the last row of a case is written after the next case started") {
  Scratch s;
  const std::string out = s.dir("across");
  const Result r = run_in(s.t.path, "run '" + s.scenario + "' --out '" + out +
                                        "' --no-determinism --backends test-fake-gpu --isolate on",
                          std::string(kEnv));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const json rep = report_of(out);
  REQUIRE(rep["results"].size() == 2);
  CHECK(rep["results"][0]["case_id"] == "S32");  // journal and report in run order
  CHECK(rep["results"][1]["case_id"] == "S48");
  CHECK(rep["results"][0]["extra"]["check_overlap"]["beside"] == json::array({"S48|test-fake-gpu"}));
  // S32's row is written under the "[2/2] S48" line, so it names its case.
  const size_t header = r.err.find("[2/2] S48");
  REQUIRE(header != std::string::npos);
  CHECK(r.err.find("(S32)", header) != std::string::npos);
  CHECK_FALSE(fs::exists(fs::path(out) / ".gold"));  // each case's shared gold removed once its rows are written
}


TEST_CASE("--check-overlap rows, one process: SIGTERM while a check is pending still writes that row; --resume ends it") {
  Scratch s;
  const std::string out = s.dir("stop"), log = s.dir("stop.log");
  const std::vector<std::pair<const char*, const char*>> env = {{"ATTNBENCH_TEST_BACKENDS", "1"},
                                                                 {"ATTNBENCH_TEST_TIMING_MS", "40"},
                                                                 {"ATTNBENCH_TEST_CHECK_DELAY_MS", "1500"},
                                                                 {"ATTNBENCH_TEST_EVENT_LOG", log.c_str()}};
  for (const auto& [k, v] : env) ::setenv(k, v, 1);
  const pid_t pid = start({"run", s.scenario, "--out", out, "--no-determinism", "--backends",
                           "test-fake-gpu,test-fake-gpu-wrong", "--isolate", "off"},
                          s.dir("bg"));
  for (const auto& [k, v] : env) ::unsetenv(k);
  // Once S32's second row is being timed, the first row's check is pending.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!events(log).count("S32|test-fake-gpu-wrong") && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ::kill(pid, SIGTERM);
  CHECK(wait_exit(pid) == 128 + SIGTERM);
  const json rep = report_of(out);
  INFO(slurp(s.dir("bg") + ".err"));
  REQUIRE(rep["results"].size() == 2);  // the pending check was joined and its row written, in order
  CHECK(rep["results"][0]["backend"] == "test-fake-gpu");
  CHECK(rep["results"][0]["status"] == "pass");
  CHECK(rep["results"][0]["extra"]["check_overlap"]["beside"] == json::array({"S32|test-fake-gpu-wrong"}));
  CHECK(rep["results"][1]["status"] == "fail");
  CHECK(rep["interrupted"]["signal"] == "SIGTERM");

  const Result r = run_in(s.t.path, "run '" + s.scenario + "' --out '" + out + "' --no-determinism --backends "
                                        "test-fake-gpu,test-fake-gpu-wrong --isolate off --resume",
                          kEnv);
  INFO(r.err);
  CHECK(r.code == 1);  // test-fake-gpu-wrong fails its check
  const json fin = report_of(out);
  REQUIRE(fin["results"].size() == 4);
  const char* order[][2] = {{"S32", "test-fake-gpu"}, {"S32", "test-fake-gpu-wrong"},
                            {"S48", "test-fake-gpu"}, {"S48", "test-fake-gpu-wrong"}};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(fin["results"][i]["case_id"] == order[i][0]);
    CHECK(fin["results"][i]["backend"] == order[i][1]);
  }
  CHECK(fin["finished"].is_string());
}
