// Nothing lost, nothing crashes, at the CLI: the real binary (ATTNBENCH_BINARY)
// with the test-only misbehaving backends (ATTNBENCH_TEST_BACKENDS=1,
// backends/testing/): crash isolation, case timeouts, the journal and --resume
// after kill -9 and SIGTERM, the --out lock, bad arguments leaving an existing
// report untouched, and --gpus over fake devices. Assertions are on rows,
// statuses, exit codes and messages, never on timings.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli_util.hpp"

extern char** environ;

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using namespace attnbench::test::cli;

/// A scratch directory, removed at scope exit; the misbehaving backends on.
struct Scratch {
  fs::path path;
  explicit Scratch(const std::string& name) {
    ::setenv("ATTNBENCH_TEST_BACKENDS", "1", 1);
    ::setenv("ATTNBENCH_TEST_SLOW_MS", "300", 1);
    path = fs::temp_directory_path() / ("attnbench_rel_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
    // Four cases: seq 32 and 48, no mask and causal.
    std::ofstream(path / "tiny.json") << R"({"name": "tiny",
      "base": {"batch": 1, "heads_q": 2, "heads_kv": 2, "head_dim": 16, "seq": 32, "dtype": "fp32"},
      "axes": {"mask": [[], [{"kind": "causal"}]], "seq": [32, 48]}})";
  }
  ~Scratch() { fs::remove_all(path); }
  std::string scenario() const { return (path / "tiny.json").string(); }
  std::string dir(const std::string& n) const { return (path / n).string(); }
};

/// Run `attnbench ARGS` to completion (ARGS shell-quoted by the caller).
Result run(const Scratch& s, const std::string& args, const std::string& env = "") {
  return run_in(s.path, args, env);
}

/// Finished rows in DIR/journal.jsonl.
int journal_rows(const std::string& dir) {
  // Only complete lines: a kill -9 can cut a multi-page row write short (Linux
  // stops a write at a page boundary for a fatal signal), and --resume drops
  // such a torn last line, so it must not be counted here either (seen flaky
  // under load: one torn row counted, --resume read 0).
  const std::string text = slurp(fs::path(dir) / "journal.jsonl");
  int n = 0;
  for (size_t pos = 0, nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1)
    n += text.compare(pos, 7, "{\"row\":") == 0;
  return n;
}

/// Wait until the journal holds `n` rows (at most 120 s: a bound against a hung
/// test, not a timing assertion).
void wait_rows(const std::string& dir, int n) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (journal_rows(dir) < n && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(journal_rows(dir) >= n);
}

json report_of(const std::string& dir) { return json::parse(slurp(fs::path(dir) / "report.json")); }

/// (case_id, backend, status) of every row, in report order.
std::vector<std::tuple<std::string, std::string, std::string>> rows_of(const json& report) {
  std::vector<std::tuple<std::string, std::string, std::string>> out;
  for (const auto& r : report["results"]) out.emplace_back(r["case_id"], r["backend"], r["status"]);
  return out;
}

const json* find_row(const json& report, const std::string& case_id, const std::string& backend) {
  for (const auto& r : report["results"])
    if (r["case_id"] == case_id && r["backend"] == backend) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("isolation: segfault and abort become crashed rows, bad_alloc oom, and the sweep goes on") {
  Scratch s("crash");
  const std::string out = s.dir("out");
  Result r = run(s, "run '" + s.scenario() + "' --backends cpu,test-crash,test-abort,test-oom --isolate on "
                    "--no-timing --out '" + out + "'");
  INFO(r.err);
  CHECK(r.code == 1);  // crashed rows count against the exit code
  CHECK(contains(r.out, "16 rows: 4 pass, 0 fail, 0 unsupported, 0 error, 4 oom, 0 timeout, 8 crashed"));
  const json rep = report_of(out);
  REQUIRE(rep["results"].size() == 16);
  CHECK(rep["finished"].is_string());
  for (const char* c : {"S32_full", "S32_causal", "S48_full", "S48_causal"}) {
    INFO(c);
    const json* cpu = find_row(rep, c, "cpu");
    const json* seg = find_row(rep, c, "test-crash");
    const json* abrt = find_row(rep, c, "test-abort");
    const json* oom = find_row(rep, c, "test-oom");
    REQUIRE((cpu && seg && abrt && oom));
    CHECK((*cpu)["status"] == "pass");
    CHECK((*cpu)["extra"]["isolation"]["child_seconds"].get<double>() > 0);
    CHECK((*seg)["status"] == "crashed");
    CHECK(contains((*seg)["message"], "killed by SIGSEGV (signal 11)"));
    CHECK((*seg)["extra"]["isolation"]["signal"] == "SIGSEGV");
    CHECK((*abrt)["status"] == "crashed");
    CHECK(contains((*abrt)["message"], "SIGABRT"));
    CHECK(contains((*abrt)["message"], "last lines of its stderr:\ntest-abort: giving up on purpose"));
    CHECK((*oom)["status"] == "oom");
    CHECK(contains((*oom)["message"], "host out of memory (std::bad_alloc"));
  }
  CHECK_FALSE(fs::exists(fs::path(out) / ".units"));  // the unit files are cleaned up
  // The test backends exist only with the variable set.
  Result l = run(s, "list backends", "ATTNBENCH_TEST_BACKENDS=0");
  CHECK(l.code == 0);
  CHECK_FALSE(contains(l.out, "test-crash"));
}

TEST_CASE("isolation: a hang past --case-timeout is a timeout row and the sweep continues") {
  Scratch s("hang");
  const std::string out = s.dir("out");
  // 5 s: long enough for the cpu unit (inputs, reference, check in a child) on a
  // loaded 2-core CI machine, where 0.5 s once timed it out too.
  Result r = run(s, "run '" + s.scenario() + "' --backends test-hang,cpu --case-timeout 5 --cases '^S32' "
                    "--no-timing --out '" + out + "'");
  INFO(r.err);
  CHECK(r.code == 1);
  const json rep = report_of(out);
  REQUIRE(rep["results"].size() == 4);
  for (const char* c : {"S32_full", "S32_causal"}) {
    const json* h = find_row(rep, c, "test-hang");
    const json* cpu = find_row(rep, c, "cpu");
    REQUIRE((h && cpu));
    CHECK((*h)["status"] == "timeout");
    CHECK(contains((*h)["message"], "ran past its time limit and was killed"));
    CHECK(contains((*h)["message"], "--case-timeout 5"));
    CHECK((*cpu)["status"] == "pass");
  }
  // A time limit cannot be kept in-process.
  Result bad = run(s, "run '" + s.scenario() + "' --backends cpu --case-timeout 1 --isolate off --out '" +
                          s.dir("o2") + "'");
  CHECK(bad.code == 2);
  CHECK(contains(bad.err, "--case-timeout"));
  CHECK(run(s, "run '" + s.scenario() + "' --backends cpu --isolate maybe --out '" + s.dir("o3") + "'").code == 2);
}

TEST_CASE("kill -9 mid-run, then --resume: the rows of an uninterrupted run, none twice") {
  Scratch s("kill9");
  const std::string full = s.dir("full"), out = s.dir("out");
  Result u = run(s, "run '" + s.scenario() + "' --backends test-slow,cpu --no-timing --out '" + full + "'");
  REQUIRE_MESSAGE(u.code == 0, u.err);
  const json uninterrupted = report_of(full);
  REQUIRE(uninterrupted["results"].size() == 8);

  const pid_t pid = start({"run", s.scenario(), "--backends", "test-slow,cpu", "--no-timing", "--out", out},
                          s.dir("bg"));
  wait_rows(out, 1);
  ::kill(pid, SIGKILL);
  CHECK(wait_exit(pid) == 128 + SIGKILL);
  const int before = journal_rows(out);
  CHECK(before < 8);  // each test-slow row takes 300 ms: it died mid-sweep
  // A row torn mid-write is dropped on resume.
  std::ofstream(fs::path(out) / "journal.jsonl", std::ios::app) << R"({"row": {"case_id": "S48_ca)";

  Result r = run(s, "run '" + s.scenario() + "' --backends test-slow,cpu --no-timing --out '" + out + "' --resume");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.err, "--resume: " + std::to_string(before) + " rows from"));
  CHECK(contains(r.err, "dropped a torn last line"));
  CHECK(contains(r.err, "taking over the stale lock"));  // the killed run's pid is still in it
  CHECK(contains(r.err, "pid " + std::to_string(pid)));
  const json resumed = report_of(out);
  CHECK(resumed["results"].size() == 8);
  CHECK(rows_of(resumed) == rows_of(uninterrupted));  // same rows, same order
  CHECK(resumed["finished"].is_string());
  CHECK(resumed["resumed"].size() == 1);
  // A second --resume of a finished run runs nothing more.
  Result again = run(s, "run '" + s.scenario() + "' --backends test-slow,cpu --no-timing --out '" + out + "' --resume");
  CHECK(again.code == 0);
  CHECK(report_of(out)["results"].size() == 8);
  CHECK(journal_rows(out) == 8);
}

TEST_CASE("--resume refuses a journal of another scenario, seed or options, naming what differs") {
  Scratch s("identity");
  const std::string out = s.dir("out");
  REQUIRE(run(s, "run '" + s.scenario() + "' --backends cpu --no-timing --cases full --out '" + out + "'").code == 0);
  const std::string before = slurp(fs::path(out) / "report.json");
  Result r = run(s, "run '" + s.scenario() + "' --backends cpu --no-timing --cases full --seed 7 --resume --out '" +
                        out + "'");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "journal.jsonl: /identity: --resume continues only the same run"));
  CHECK(contains(r.err, "seed was null, now 7"));
  r = run(s, "run '" + s.scenario() + "' --backends cpu --check off --no-timing --cases full --resume --out '" + out + "'");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "check was \"auto\", now \"off\""));
  CHECK(slurp(fs::path(out) / "report.json") == before);
  // The same scenario file spelled another way (here with a "./" inside) is the same run.
  const std::string respelled = (fs::path(s.scenario()).parent_path() / "." / "tiny.json").string();
  r = run(s, "run '" + respelled + "' --backends cpu --no-timing --cases full --resume --out '" + out + "'");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(contains(r.err, "--resume: "));
}

TEST_CASE("a second run into the same --out is refused, naming the holder's pid") {
  Scratch s("lock");
  const std::string out = s.dir("out");
  const pid_t pid = start({"run", s.scenario(), "--backends", "test-slow", "--no-timing", "--out", out}, s.dir("bg"));
  wait_rows(out, 1);
  Result r = run(s, "run '" + s.scenario() + "' --backends cpu --no-timing --out '" + out + "'");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "another attnbench run is writing into this directory (pid " + std::to_string(pid) + ","));
  CHECK(wait_exit(pid) == 0);  // the first run is unharmed
  const json rep = report_of(out);
  CHECK(rep["results"].size() == 4);
  for (const auto& row : rep["results"]) CHECK(row["backend"] == "test-slow");
  // Released at the end: the next run goes through.
  CHECK(run(s, "run '" + s.scenario() + "' --backends cpu --no-timing --cases S32_full --out '" + out + "'").code == 0);
}

TEST_CASE("bad arguments leave an existing report and journal untouched") {
  Scratch s("badargs");
  const std::string out = s.dir("out");
  REQUIRE(run(s, "run '" + s.scenario() + "' --backends cpu --no-timing --out '" + out + "'").code == 0);
  const std::string report = slurp(fs::path(out) / "report.json"), journal = slurp(fs::path(out) / "journal.jsonl");
  REQUIRE(contains(report, "S48_causal"));
  const std::string base = "run '" + s.scenario() + "' --out '" + out + "' ";
  const std::pair<const char*, const char*> bad[] = {
      {"--backends cpu --cases '('", "--cases"},
      {"--backends cpu --max-seconds -1", "max_seconds must be > 0"},
      {"--backends cpu --min-samples 0", "min_samples must be >= 1"},
      {"--backends cpu --rel-stddev -0.5", "target_rel_stddev"},
      {"--backends cpu,cpu", "listed more than once"},
      {"--backends no-such", "unknown backend"},
      {"--backends cpu --check sometimes", "--check"},
      {"--backends cpu --shard 2/2", "--shard"},
      {"--backends cpu --isolate sometimes", "--isolate"},
      {"--backends cpu --gpus 0,0", "--gpus"},
  };
  for (const auto& [args, what] : bad) {
    INFO(args);
    Result r = run(s, base + args, "ATTNBENCH_FAKE_GPUS=2");
    CHECK(r.code == 2);
    CHECK(contains(r.err, what));
    CHECK(slurp(fs::path(out) / "report.json") == report);
    CHECK(slurp(fs::path(out) / "journal.jsonl") == journal);
  }
  // An output path that is a file is bad input too.
  std::ofstream(s.dir("plain")) << "x";
  Result r = run(s, "run '" + s.scenario() + "' --backends cpu --out '" + s.dir("plain") + "'");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "cannot create the output directory"));
}

TEST_CASE("planted symlinks: the journal is never written through one, report.json is replaced, not followed") {
  Scratch s("symlink");
  const std::string out = s.dir("out");
  fs::create_directories(out);
  std::ofstream(s.dir("victim")) << "precious";
  fs::create_symlink(s.dir("victim"), fs::path(out) / "report.json");
  REQUIRE(run(s, "run '" + s.scenario() + "' --backends cpu --no-timing --cases S32_full --out '" + out + "'").code == 0);
  CHECK(slurp(s.dir("victim")) == "precious");
  CHECK_FALSE(fs::is_symlink(fs::path(out) / "report.json"));
  CHECK(report_of(out)["results"].size() == 1);
  // report, compare and merge outputs likewise.
  fs::create_symlink(s.dir("victim"), s.dir("page.html"));
  CHECK(run(s, "report '" + out + "/report.json' --no-charts -o '" + s.dir("page.html") + "'").code == 0);
  CHECK(slurp(s.dir("victim")) == "precious");
  CHECK(contains(slurp(s.dir("page.html")), "<html"));

  const std::string out2 = s.dir("out2");
  fs::create_directories(out2);
  fs::create_symlink(s.dir("victim"), fs::path(out2) / "journal.jsonl");
  Result r = run(s, "run '" + s.scenario() + "' --backends cpu --no-timing --out '" + out2 + "'");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "journal.jsonl"));
  CHECK(slurp(s.dir("victim")) == "precious");
}

TEST_CASE("SIGTERM and SIGINT: the report holds the rows done, exit 143 / 130, --resume completes it") {
  Scratch s("signal");
  for (const int sig : {SIGTERM, SIGINT}) {
    INFO(sig);
    const std::string out = s.dir("out" + std::to_string(sig));
    const pid_t pid = start({"run", s.scenario(), "--backends", "test-slow", "--no-timing", "--out", out}, s.dir("bg"));
    wait_rows(out, 1);
    ::kill(pid, sig);
    CHECK(wait_exit(pid) == 128 + sig);
    const json rep = report_of(out);
    const int done = static_cast<int>(rep["results"].size());
    CHECK(done >= 1);
    CHECK(done < 4);
    CHECK(done == journal_rows(out));  // the report was rewritten with every row done
    CHECK(rep["finished"].is_null());
    CHECK(rep["interrupted"]["signal"] == (sig == SIGTERM ? "SIGTERM" : "SIGINT"));
    CHECK(contains(slurp(s.dir("bg") + ".out"), "--resume"));

    Result r = run(s, "run '" + s.scenario() + "' --backends test-slow --no-timing --out '" + out + "' --resume");
    INFO(r.err);
    CHECK(r.code == 0);
    const json fin = report_of(out);
    CHECK(fin["results"].size() == 4);
    CHECK(fin["finished"].is_string());
    CHECK_FALSE(fin.contains("interrupted"));
    for (const auto& row : fin["results"]) CHECK(row["status"] == "pass");
  }
}

TEST_CASE("--gpus over fake devices: one report with exactly the rows of an unsharded run") {
  Scratch s("gpus");
  const std::string one = s.dir("one"), many = s.dir("many");
  Result u = run(s, "run '" + s.scenario() + "' --backends cpu,test-oom --no-timing --out '" + one + "'");
  REQUIRE_MESSAGE(u.code == 0, u.err);
  Result r = run(s, "run '" + s.scenario() + "' --backends cpu,test-oom --no-timing --gpus all --out '" + many + "'",
                 "ATTNBENCH_FAKE_GPUS=3");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.err, "[3 GPUs] 8/8 rows"));
  const json merged = report_of(many);
  CHECK(rows_of(merged) == rows_of(report_of(one)));  // same rows, same order
  CHECK(merged["gpus"] == json::array({0, 1, 2}));
  REQUIRE(merged["shards"].size() == 3);
  CHECK(merged["shards"][1]["rows"] == 2);  // shard 1/3 runs case 1 only: 2 backends
  CHECK(merged["finished"].is_string());
  CHECK(fs::exists(fs::path(many) / "shards" / "gpu2" / "journal.jsonl"));

  // A shard that dies: its rows are still there, with the reason.
  const std::string bad = s.dir("bad");
  r = run(s, "run '" + s.scenario() + "' --backends cpu,test-crash --isolate off --no-timing --gpus 0,1 --out '" + bad + "'",
          "ATTNBENCH_FAKE_GPUS=2");
  CHECK(r.code == 1);
  const json b = report_of(bad);
  REQUIRE(b["results"].size() == 8);
  const json* died = find_row(b, "S32_full", "test-crash");
  const json* never = find_row(b, "S48_full", "cpu");
  REQUIRE((died && never));
  CHECK((*died)["status"] == "crashed");
  CHECK(contains((*died)["message"], "shard 0/2 on GPU 0 was killed by SIGSEGV (signal 11) while running this row"));
  CHECK((*never)["status"] == "error");
  CHECK(contains((*never)["message"], "not run: shard 0/2 on GPU 0"));
  CHECK((*find_row(b, "S32_full", "cpu"))["status"] == "pass");

  // Validated before anything runs.
  r = run(s, "run '" + s.scenario() + "' --backends cpu --gpus 0,2 --out '" + s.dir("x") + "'", "ATTNBENCH_FAKE_GPUS=2");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "\"2\" in \"0,2\" is not a GPU index below 2 (ATTNBENCH_FAKE_GPUS=2)"));
  r = run(s, "run '" + s.scenario() + "' --backends cpu --gpus all --shard 0/2 --out '" + s.dir("y") + "'",
          "ATTNBENCH_FAKE_GPUS=2");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "drop --shard"));
}

TEST_CASE("crashed and timeout rows in compare (a regression where BASE passed), report and the HTML counts") {
  Scratch s("statuses");
  const std::string out = s.dir("out");
  Result r = run(s, "run '" + s.scenario() + "' --backends cpu,test-crash --isolate on --cases '^S32' --no-timing "
                    "--out '" + out + "'");
  REQUIRE_MESSAGE(r.code == 1, r.err);
  // BASE: the same rows with test-crash passing.
  json base = report_of(out);
  json cpu_check;  // a real passing check (compare reads pass from the check data, not the status)
  for (const auto& row : base["results"])
    if (row["backend"] == "cpu") cpu_check = row["check"];
  for (auto& row : base["results"])
    if (row["backend"] == "test-crash") {
      row["status"] = "pass";
      row.erase("message");
      row["check"] = cpu_check;
    }
  std::ofstream(s.dir("base.json")) << base.dump();
  Result c = run(s, "compare '" + s.dir("base.json") + "' '" + out + "/report.json'");
  CHECK(c.code == 1);
  CHECK(contains(c.out, "| S32_full | test-crash | pass | crashed |"));
  CHECK(contains(c.err, "2 gate failure(s)"));
  // The other way round is no regression.
  c = run(s, "compare '" + out + "/report.json' '" + s.dir("base.json") + "'");
  CHECK(c.code == 0);
  Result h = run(s, "report '" + out + "/report.json' --no-charts -o '" + s.dir("r.html") + "'");
  CHECK(h.code == 0);
  CHECK(contains(slurp(s.dir("r.html")), "crashed 2</span>"));
  CHECK(contains(slurp(s.dir("r.html")), "pass 2</span>"));
}

namespace {
/// Pids of processes whose command line contains `needle`.
std::vector<pid_t> pids_with(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = slurp(e.path() / "cmdline");
    for (auto& ch : cmd)
      if (ch == '\0') ch = ' ';
    if (contains(cmd, needle)) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}
}  // namespace

TEST_CASE("kill -9 of a run leaves no isolated child behind (it follows its parent)") {
  Scratch s("orphan");
  const std::string out = s.dir("out");
  const pid_t pid = start({"run", s.scenario(), "--backends", "test-hang", "--case-timeout", "600", "--no-timing",
                           "--out", out},
                          s.dir("bg"));
  const std::string request = (fs::path(out) / ".units" / "unit-0.request.json").string();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (pids_with(request).empty() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(pids_with(request).size() == 1);
  ::kill(pid, SIGKILL);
  CHECK(wait_exit(pid) == 128 + SIGKILL);
  const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!pids_with(request).empty() && std::chrono::steady_clock::now() < gone_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(pids_with(request).empty());
}

TEST_CASE("--gpus: SIGTERM reaches the shards, the merged report holds the rows done, --resume completes it") {
  Scratch s("gpus_signal");
  ::setenv("ATTNBENCH_FAKE_GPUS", "2", 1);
  const std::string out = s.dir("out");
  const pid_t pid = start({"run", s.scenario(), "--backends", "test-slow,cpu", "--no-timing", "--gpus", "all", "--out", out},
                          s.dir("bg"));
  wait_rows(out + "/shards/gpu0", 1);
  ::kill(pid, SIGTERM);
  CHECK(wait_exit(pid) == 143);
  const json rep = report_of(out);
  const int done = journal_rows(out + "/shards/gpu0") + journal_rows(out + "/shards/gpu1");
  CHECK(static_cast<int>(rep["results"].size()) == done);
  CHECK(done < 8);  // each shard finishes the row it is on (at most its 3rd of 4) and stops
  CHECK(rep["interrupted"]["signal"] == "SIGTERM");
  for (const auto& row : rep["results"]) CHECK(row["status"] == "pass");  // no failure rows for a stop

  Result r = run(s, "run '" + s.scenario() + "' --backends test-slow,cpu --no-timing --gpus all --out '" + out + "' --resume");
  INFO(r.err);
  CHECK(r.code == 0);
  const json fin = report_of(out);
  CHECK(fin["results"].size() == 8);
  CHECK(fin["finished"].is_string());
  ::unsetenv("ATTNBENCH_FAKE_GPUS");
}
