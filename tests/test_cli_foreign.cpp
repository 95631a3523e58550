// Foreign code and crafted inputs at the CLI (issue 33): misbehaving plugins
// (tests/plugins/hostile.c, long_name.c) cannot take a run down or fake a
// success; the compare gate derives verdicts from the check data; --resume and
// --gpus never write duplicate rows; terminal output is escaped; input-file
// problems are exit 2 naming the file. The real binary (ATTNBENCH_BINARY) runs
// in scratch folders; assertions are on rows, statuses, exit codes and messages.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli_util.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace attnbench::test::cli;

namespace {

/// Two unmasked cases (seq 16 and 24) and a causal one: test-hostile runs the
/// first two and declines the third.
const char* kScenario = R"({"name": "foreign",
  "base": {"batch": 1, "heads_q": 1, "heads_kv": 1, "head_dim": 8, "seq": 16, "dtype": "fp32"},
  "axes": {"mask": [[], [{"kind": "causal"}]], "seq": [16, 24]}})";

std::string q(const std::string& s) { return "'" + s + "'"; }

json load(const fs::path& p) { return json::parse(slurp(p)); }

/// Rows of a report by "case_id|backend".
std::map<std::string, json> rows_of(const fs::path& report) {
  std::map<std::string, json> out;
  const json doc = load(report);
  for (const auto& r : doc.at("results"))
    out[r.at("case_id").get<std::string>() + "|" + r.at("backend").get<std::string>()] = r;
  return out;
}

const std::string kHostile = ATTNBENCH_TEST_PLUGIN_HOSTILE;

/// `run foreign.json --backends cpu,test-hostile --plugin hostile` plus `extra`.
Result run_hostile(const TempDir& t, const std::string& mode, const std::string& extra = "",
                   const std::string& env = "", int timeout_s = 120) {
  const std::string scen = t.write("foreign.json", kScenario);
  return run("run " + q(scen) + " --backends cpu,test-hostile --no-timing --no-backward --plugin " + q(kHostile) +
                 " --out " + q((t.path / "out").string()) + " " + extra,
             t, "HOSTILE_MODE=" + mode + (env.empty() ? "" : " " + env), timeout_s);
}

}  // namespace

TEST_CASE("a well-behaved plugin runs isolated by default and passes") {
  TempDir t;
  const Result r = run_hostile(t, "none");
  INFO(r.err);
  CHECK(r.code == 0);
  const auto rows = rows_of(t.path / "out" / "report.json");
  REQUIRE(rows.size() == 8);
  int pass = 0, unsupported = 0;
  for (const auto& [k, row] : rows) {
    if (row["backend"] != "test-hostile") continue;
    pass += row["status"] == "pass";
    unsupported += row["status"] == "unsupported";
    if (row["status"] == "pass") CHECK(row["extra"].contains("isolation"));  // ran in a child
  }
  CHECK(pass == 2);
  CHECK(unsupported == 2);
}

TEST_CASE("a plugin that segfaults in forward() or available() gives crashed rows; the run goes on") {
  for (const std::string mode : {"segv_forward", "segv_available", "segv_supports"}) {
    TempDir t;
    const Result r = run_hostile(t, mode);
    INFO(mode, r.err);
    CHECK(r.code == 1);  // a crashed row is a failure, never the end of the run
    const auto rows = rows_of(t.path / "out" / "report.json");
    REQUIRE(rows.size() == 8);
    int crashed = 0, cpu_pass = 0;
    for (const auto& [k, row] : rows) {
      crashed += row["backend"] == "test-hostile" && row["status"] == "crashed";
      cpu_pass += row["backend"] == "cpu" && row["status"] == "pass";
    }
    CHECK(crashed == (mode == "segv_forward" ? 2 : 4));
    CHECK(cpu_pass == 4);
    CHECK(contains(rows.at("S16_full|test-hostile").value("message", ""), "SIGSEGV"));
    CHECK(load(t.path / "out" / "report.json")["finished"].is_string());
  }
}

TEST_CASE("a plugin that hangs in supports() is killed by --case-timeout") {
  TempDir t;
  const Result r = run_hostile(t, "hang_supports", "--case-timeout 1 --cases S16", "", 60);
  INFO(r.err);
  CHECK(r.code == 1);
  const auto rows = rows_of(t.path / "out" / "report.json");
  REQUIRE(rows.size() == 4);
  CHECK(rows.at("S16_full|test-hostile")["status"] == "timeout");
  CHECK(rows.at("S16_causal|test-hostile")["status"] == "timeout");
  CHECK(rows.at("S16_full|cpu")["status"] == "pass");
}

TEST_CASE("a plugin that calls exit(0) never makes a run succeed") {
  SUBCASE("isolated (the default): error rows, exit 1") {
    for (const std::string mode : {"exit_forward", "exit_supports"}) {
      TempDir t;
      const Result r = run_hostile(t, mode);
      INFO(mode, r.err);
      CHECK(r.code == 1);
      const auto rows = rows_of(t.path / "out" / "report.json");
      REQUIRE(rows.size() == 8);
      CHECK(rows.at("S16_full|test-hostile")["status"] == "error");
      CHECK(contains(rows.at("S16_full|test-hostile").value("message", ""), "exited with code 0 without writing its row"));
    }
  }
  SUBCASE("--isolate off: the exit handler marks the report interrupted and exits 4") {
    for (const std::string mode : {"exit_forward", "exit_supports"}) {
      TempDir t;
      const Result r = run_hostile(t, mode, "--isolate off");
      INFO(mode, r.err);
      CHECK(r.code == 4);
      CHECK(contains(r.err, "exited in the middle of the run"));
      const json doc = load(t.path / "out" / "report.json");
      CHECK(doc["finished"].is_null());
      CHECK(contains(doc["interrupted"].value("reason", ""), "exited in the middle of the run"));
      CHECK(doc["results"].size() < 8);
      CHECK(contains(slurp(t.path / "out" / "journal.jsonl"), "\"interrupted\""));
      // The report is valid: the gate reads it and fails it as unfinished (exit 1, not 2).
      const std::string rp = (t.path / "out" / "report.json").string();
      const Result c = run("compare " + q(rp) + " " + q(rp), t);
      CHECK(c.code == 1);
      CHECK(contains(c.err, "NEW unfinished: interrupted (the process exited in the middle of the run"));
    }
  }
}

TEST_CASE("plugin names: checked and copied once at load") {
  TempDir t;
  SUBCASE("a 20000-character name is refused, exit 2 naming the file") {
    const Result r = run("list backends --plugin " + q(ATTNBENCH_TEST_PLUGIN_LONG_NAME), t);
    CHECK(r.code == 2);
    CHECK(contains(r.err, ATTNBENCH_TEST_PLUGIN_LONG_NAME));
    CHECK(contains(r.err, "at most 64 characters"));
  }
  SUBCASE("a plugin that rewrites its name after loading keeps its first name (isolated and in process)") {
    for (const std::string iso : {"--isolate on", "--isolate off"}) {
      const Result r = run_hostile(t, "rename", iso);
      INFO(iso, r.err);
      CHECK(r.code == 0);
      const auto rows = rows_of(t.path / "out" / "report.json");
      CHECK(rows.size() == 8);
      CHECK(rows.count("S16_full|test-hostile") == 1);
      for (const auto& [k, row] : rows) CHECK(row["backend"] != "renamed");
    }
  }
}

TEST_CASE("plugin files that are not loadable are exit 2 naming the file, never a crash or a hang") {
  TempDir t;
  SUBCASE("a truncated shared library") {
    const std::string lib = (t.path / "libtrunc.so").string();
    const std::string bytes = slurp(kHostile);
    std::ofstream(lib, std::ios::binary) << bytes.substr(0, bytes.size() / 3);
    const Result r = run("list backends --plugin " + q(lib), t);
    CHECK(r.code == 2);
    CHECK(contains(r.err, lib));
  }
  SUBCASE("a FIFO") {
    const std::string fifo = (t.path / "libfifo.so").string();
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const Result r = run("list backends --plugin " + q(fifo), t, "", 20);
    CHECK(r.code == 2);
    CHECK(contains(r.err, "not a regular file"));
  }
  SUBCASE("a symlink loop and an unreadable folder in ATTNBENCH_PLUGIN_PATH") {
    fs::create_symlink(t.path / "loop", t.path / "loop");
    Result r = run("list backends", t, "ATTNBENCH_PLUGIN_PATH=" + q((t.path / "loop").string()));
    CHECK(r.code == 2);
    CHECK(contains(r.err, (t.path / "loop").string()));
    if (::geteuid() != 0) {  // root reads any folder
      fs::create_directories(t.path / "closed");
      fs::permissions(t.path / "closed", fs::perms::none);
      r = run("list backends", t, "ATTNBENCH_PLUGIN_PATH=" + q((t.path / "closed").string()));
      CHECK(r.code == 2);
      CHECK(contains(r.err, "closed"));
      fs::permissions(t.path / "closed", fs::perms::owner_all);
    }
  }
}

/// Lines "loaded" that test-hostile's entry point appended to `log` (one per process that loaded it).
int loads_in(const fs::path& log) {
  std::istringstream in(slurp(log));
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line == "loaded";
  return n;
}

TEST_CASE("an isolated unit loads only the plugin whose backend it runs") {
  TempDir t;
  const fs::path log = t.path / "loads.log";
  SUBCASE("units of an in-tree backend load no plugin: the probe alone loads it") {
    const std::string scen = t.write("foreign.json", kScenario);
    const Result r = run("run " + q(scen) + " --backends cpu --no-timing --no-backward --isolate on --plugin " +
                             q(kHostile) + " --out " + q((t.path / "out").string()),
                         t, "HOSTILE_MODE=none HOSTILE_LOAD_LOG=" + q(log.string()));
    INFO(r.err);
    CHECK(r.code == 0);
    const auto rows = rows_of(t.path / "out" / "report.json");
    REQUIRE(rows.size() == 4);
    for (const auto& [k, row] : rows) CHECK(row["extra"].contains("isolation"));  // four cpu units, in children
    CHECK(loads_in(log) == 1);  // the load probe; every unit loaded it too before
  }
  SUBCASE("units of the plugin load it, once each") {
    const Result r = run_hostile(t, "none", "--isolate on", "HOSTILE_LOAD_LOG=" + q(log.string()));
    INFO(r.err);
    CHECK(r.code == 0);
    const auto rows = rows_of(t.path / "out" / "report.json");
    REQUIRE(rows.size() == 8);
    CHECK(loads_in(log) == 1 + 4);  // the probe, then one unit per (case, test-hostile); none for cpu's four
  }
}

TEST_CASE("list backends probes a plugin's available() in a child process") {
  TempDir t;
  auto listing = [&](const std::string& mode) {
    const Result r = run("list backends --plugin " + q(kHostile), t,
                         "HOSTILE_MODE=" + mode + " HOSTILE_LOAD_LOG=" + q((t.path / (mode + ".log")).string()));
    INFO(mode, r.err);
    CHECK(r.code == 0);
    std::istringstream in(r.out);
    std::string line, plugin_line, cpu_line;
    while (std::getline(in, line)) {
      if (line.rfind("test-hostile ", 0) == 0) plugin_line = line;
      if (line.rfind("cpu ", 0) == 0) cpu_line = line;
    }
    CHECK(contains(cpu_line, "available"));  // the listing goes on past the plugin
    CHECK(loads_in(t.path / (mode + ".log")) == 2);  // the load probe and the available() probe; never this process
    return plugin_line;
  };
  CHECK(contains(listing("none"), "  available  "));
  CHECK(contains(listing("unavailable"), "unavailable: test-hostile: HOSTILE_MODE=unavailable"));
  const std::string crashed = listing("segv_available");
  CHECK(contains(crashed, "unavailable: its available() probe (an isolated child process) failed"));
  CHECK(contains(crashed, "SIGSEGV"));
}

TEST_CASE("a --plugin path holding ':' reaches isolated children and --gpus shards") {
  TempDir t;
  fs::create_directories(t.path / "a:b");
  const std::string lib = (t.path / "a:b" / "libhostile.so").string();
  fs::copy_file(kHostile, lib);
  const std::string scen = t.write("foreign.json", kScenario);
  for (const std::string extra : {"--isolate on", "--gpus all"}) {
    const std::string out = (t.path / ("out" + std::to_string(extra.size()))).string();
    const Result r = run("run " + q(scen) + " --backends test-hostile --no-timing --no-backward --plugin " + q(lib) +
                             " --out " + q(out) + " " + extra,
                         t, "HOSTILE_MODE=none ATTNBENCH_FAKE_GPUS=2");
    INFO(extra, r.err);
    CHECK(r.code == 0);
    const auto rows = rows_of(fs::path(out) / "report.json");
    CHECK(rows.size() == 4);
    CHECK(rows.at("S16_full|test-hostile")["status"] == "pass");
  }
}

namespace {

/// A timed base report of the cpu backend on the four foreign cases (built once).
const json& base_report() {
  static const json doc = [] {
    TempDir t;
    const std::string scen = t.write("foreign.json", kScenario);
    const Result r = run("run " + q(scen) + " --backends cpu --no-backward --max-seconds 0.02 --min-samples 3 --out " +
                             q((t.path / "out").string()),
                         t);
    REQUIRE(r.code == 0);
    return load(t.path / "out" / "report.json");
  }();
  return doc;
}

/// `attnbench compare BASE NEW [opts]` with NEW = base_report() edited by `edit`.
template <class Edit>
Result compare_with(const TempDir& t, Edit edit, const std::string& opts = "") {
  json neu = base_report();
  edit(neu);
  const std::string b = t.write("base.json", base_report().dump()), n = t.write("new.json", neu.dump());
  return run("compare " + q(b) + " " + q(n) + " " + opts, t);
}

}  // namespace

TEST_CASE("compare: the same report passes the gate") {
  TempDir t;
  const Result r = compare_with(t, [](json&) {});
  INFO(r.out, r.err);
  CHECK(r.code == 0);
}

TEST_CASE("compare: a row that says pass is judged by its check data") {
  TempDir t;
  SUBCASE("every tensor failed") {
    const Result r = compare_with(t, [](json& n) {
      for (auto& tensor : n["results"][0]["check"]["tensors"]) tensor["pass"] = false;
    });
    CHECK(r.code == 1);
    CHECK(contains(r.out, "contradicted by its check data"));
  }
  SUBCASE("nothing checked") {
    const Result r = compare_with(t, [](json& n) { n["results"][0]["check"]["tensors"] = json::array(); });
    CHECK(r.code == 1);
    CHECK(contains(r.out, "| pass | unchecked |"));
  }
}

TEST_CASE("compare: new crashed/error/timeout/oom rows gate unless --allow-new-errors") {
  for (const std::string st : {"crashed", "error", "timeout", "oom"}) {
    TempDir t;
    auto add = [&](json& n) {
      json row = n["results"][0];
      row["case_id"] = "extra_case";
      row["status"] = st;
      row["message"] = "it broke";
      row.erase("timing");
      row["check"] = nullptr;
      n["results"].push_back(row);
    };
    Result r = compare_with(t, add);
    INFO(st, r.out, r.err);
    CHECK(r.code == 1);
    CHECK(contains(r.err, "--allow-new-errors"));
    r = compare_with(t, add, "--allow-new-errors");
    CHECK(r.code == 0);
  }
}

TEST_CASE("compare: missing rows, an unfinished NEW and a NEW without timings gate by default") {
  TempDir t;
  const auto drop = [](json& n) { n["results"].erase(n["results"].begin()); };
  Result r = compare_with(t, drop);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "1 missing from NEW (--allow-missing)"));
  CHECK(compare_with(t, drop, "--allow-missing").code == 0);

  const auto unfinished = [](json& n) { n["finished"] = nullptr; };
  r = compare_with(t, unfinished);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "NEW unfinished"));
  CHECK(compare_with(t, unfinished, "--allow-unfinished").code == 0);
  const auto interrupted = [](json& n) { n["interrupted"] = {{"signal", "SIGTERM"}, {"time", "2026-11-27T00:00:00Z"}}; };
  CHECK(compare_with(t, interrupted).code == 1);

  const auto untimed = [](json& n) {
    for (auto& row : n["results"]) row["timing"] = nullptr;
  };
  r = compare_with(t, untimed);
  CHECK(r.code == 1);
  CHECK(contains(r.out, "| timings compared | 0 |"));
  CHECK(contains(r.err, "4 untimed in NEW (--allow-no-timing)"));
  CHECK(compare_with(t, untimed, "--allow-no-timing").code == 0);
}

namespace {

/// `run foreign.json --backends cpu,test-hostile` (well-behaved) into t/out with `extra`.
Result run_cpu(const TempDir& t, const std::string& extra, const std::string& env = "") {
  const std::string scen = t.write("foreign.json", kScenario);
  return run("run " + q(scen) + " --backends cpu,test-hostile --plugin " + q(kHostile) +
                 " --no-timing --no-backward --out " + q((t.path / "out").string()) + " " + extra,
             t, "HOSTILE_MODE=none ATTNBENCH_FAKE_GPUS=2" + (env.empty() ? "" : " " + env));
}

/// The journal's lines.
std::vector<std::string> lines_of(const fs::path& p) {
  std::vector<std::string> out;
  std::istringstream in(slurp(p));
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

void write_lines(const fs::path& p, const std::vector<std::string>& lines) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  for (const auto& l : lines) out << l << "\n";
}

}  // namespace

TEST_CASE("--resume keys rows by the case's fingerprint: foreign, tampered and invalid rows are dropped") {
  TempDir t;
  REQUIRE(run_cpu(t, "--seed 1").code == 0);
  const fs::path jp = t.path / "out" / "journal.jsonl";
  auto lines = lines_of(jp);
  REQUIRE(lines.size() == 10);  // first line, 8 rows, finished
  lines.pop_back();
  json seed_row = json::parse(lines[1]);
  const std::string tampered_key = seed_row["row"]["case_id"].get<std::string>() + "|" + seed_row["row"]["backend"].get<std::string>();
  seed_row["row"]["problem"]["seed"] = 99;  // a row of another seed
  lines[1] = seed_row.dump();
  json ghost = json::parse(lines[2]);
  ghost["row"]["case_id"] = "ghost_case";  // a case not in the scenario
  lines.push_back(ghost.dump());
  json bogus = json::parse(lines[3]);
  bogus["row"]["status"] = "bogus";  // schema-invalid
  lines[3] = bogus.dump();
  write_lines(jp, lines);
  const Result r = run_cpu(t, "--seed 1 --resume");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(contains(r.err, "another seed or scenario"));
  CHECK(contains(r.err, "ghost_case|"));
  CHECK(contains(r.err, "not a valid report row"));
  const auto rows = rows_of(t.path / "out" / "report.json");
  CHECK(rows.size() == 8);
  for (const auto& [k, row] : rows) CHECK(row["case_id"] != "ghost_case");
  CHECK(rows.at(tampered_key)["problem"]["seed"] == 1);
  for (const auto& [k, row] : rows) CHECK(row["status"] != "bogus");
  CHECK(contains(r.err, "--resume: 6 rows"));  // 8 + ghost - 3 dropped: the two of this run ran again
}

TEST_CASE("--resume: an empty or torn-first-line journal starts afresh; a FIFO journal is exit 2") {
  TempDir t;
  fs::create_directories(t.path / "out");
  const fs::path jp = t.path / "out" / "journal.jsonl";
  for (const std::string body : {"", "{\"attnbench_jour"}) {
    std::ofstream(jp, std::ios::binary | std::ios::trunc) << body;
    const Result r = run_cpu(t, "--resume");
    INFO(r.err);
    CHECK(r.code == 0);
    CHECK(contains(r.err, "starting afresh"));
    CHECK(rows_of(t.path / "out" / "report.json").size() == 8);
  }
  fs::remove(jp);
  REQUIRE(::mkfifo(jp.c_str(), 0600) == 0);
  const Result r = run("run " + q(t.write("foreign.json", kScenario)) + " --backends cpu --no-timing --resume --out " +
                           q((t.path / "out").string()),
                       t, "", 20);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "journal.jsonl"));
}

TEST_CASE("--gpus --resume with another device list or count never duplicates rows; another seed is refused") {
  TempDir t;
  REQUIRE(run_cpu(t, "--gpus 0,1").code == 0);
  // Lose the last row of the first shard, as a kill would.
  const fs::path j0 = t.path / "out" / "shards" / "gpu0" / "journal.jsonl";
  auto lines = lines_of(j0);
  lines.pop_back();  // finished
  lines.pop_back();  // a row
  write_lines(j0, lines);
  for (const std::string gpus : {"1,0", "0", "all"}) {
    const Result r = run_cpu(t, "--gpus " + gpus + " --resume");
    INFO(gpus, r.err);
    CHECK(r.code == 0);
    const json doc = load(t.path / "out" / "report.json");
    CHECK(doc["results"].size() == 8);
    CHECK(rows_of(t.path / "out" / "report.json").size() == 8);  // 8 distinct (case, backend)
    CHECK(doc["finished"].is_string());
    if (gpus == "0") CHECK_FALSE(fs::exists(t.path / "out" / "shards" / "gpu1"));  // its rows handed on to gpu0
  }
  const Result seed = run_cpu(t, "--gpus all --resume --seed 5");
  CHECK(seed.code == 2);
  CHECK(contains(seed.err, "seed"));
}

TEST_CASE("--gpus: a file where a shard folder should be is exit 2 naming it") {
  TempDir t;
  fs::create_directories(t.path / "out" / "shards");
  std::ofstream(t.path / "out" / "shards" / "gpu1") << "in the way";
  const Result r = run_cpu(t, "--gpus 0,1");
  CHECK(r.code == 2);
  CHECK(contains(r.err, "gpu1"));
}

TEST_CASE("a case that cannot be built becomes an error row; the sweep and describe go on") {
  TempDir t;
  const std::string scen = t.write("big.json", R"({"name": "big",
    "base": {"batch": 1, "heads_q": 1, "heads_kv": 1, "head_dim": 1, "dtype": "fp32", "seq": 16},
    "axes": {"seq": [16, 16777216, 32]}})");
  // seq 2^24 is inside the size budget, but its BlockMask does not fit in 4 GB of address space.
  const std::string limit = "ulimit -v 4000000;";
  const Result r = run("run " + q(scen) + " --backends cpu --no-timing --out " + q((t.path / "out").string()), t, limit);
  INFO(r.err);
  CHECK(r.code == 0);  // an oom row is not a correctness failure
  const auto rows = rows_of(t.path / "out" / "report.json");
  REQUIRE(rows.size() == 3);
  CHECK(rows.at("S16777216|cpu")["status"] == "oom");
  CHECK(contains(rows.at("S16777216|cpu").value("message", ""), "building the case"));
  CHECK(rows.at("S32|cpu")["status"] == "pass");
  const Result d = run("describe " + q(scen), t, limit);
  CHECK(d.code == 0);
  CHECK(contains(d.out, "S16777216: cannot count its pairs"));
  CHECK(contains(d.out, "S32 "));
}

TEST_CASE("one case cap for the whole scenario file, parts included") {
  TempDir t;
  std::string seqs, dims;  // 1000 x 100 = 100000 cases in the second part, one in the first
  for (int i = 1; i <= 1000; ++i) seqs += (i > 1 ? "," : "") + std::to_string(i);
  for (int i = 1; i <= 100; ++i) dims += (i > 1 ? "," : "") + std::to_string(i);
  const std::string scen = t.write("parts.json", R"({"name": "parts",
    "base": {"batch": 1, "heads_q": 1, "heads_kv": 1, "head_dim": 8, "dtype": "fp32", "seq": 16},
    "parts": [{"name": "one"},
              {"name": "many", "axes": {"seq": [)" + seqs + R"(], "head_dim": [)" + dims + R"(]}}]})");
  const Result r = run("describe " + q(scen), t, "", 20);
  CHECK(r.code == 2);
  CHECK(contains(r.err, "more than 100000 cases (all parts together)"));
  CHECK(contains(r.err, "/parts/1"));
}

TEST_CASE("exclude rules do not cost rules x cases: 39999 rules over 40000 cases in seconds") {
  TempDir t;
  std::string vals, rules;
  for (int i = 1; i <= 200; ++i) vals += (i > 1 ? "," : "") + std::to_string(i);
  for (int s = 1; s <= 200; ++s)
    for (int d = 1; d <= 200; ++d)
      if (s != 1 || d != 1)
        rules += std::string(rules.empty() ? "" : ",") + "{\"seq\":" + std::to_string(s) + ",\"head_dim\":" + std::to_string(d) + "}";
  const std::string scen = t.write("ex.json", R"({"name": "ex",
    "base": {"batch": 1, "heads_q": 1, "heads_kv": 1, "head_dim": 1, "dtype": "fp32", "seq": 16},
    "axes": {"seq": [)" + vals + R"(], "head_dim": [)" + vals + R"(]}, "exclude": [)" + rules + "]}");
  const Result r = run("describe " + q(scen), t, "", 20);  // about 40 s before the rules were indexed
  CHECK(r.code == 0);
  CHECK(contains(r.out, "1 case;"));
}

TEST_CASE("a backend that claims determinism and is not gets a visible note: terminal, summary, HTML") {
  TempDir t;
  const Result r = run_hostile(t, "flaky", "--cases S16_full");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(contains(r.err, "NOT DETERMINISTIC"));
  const std::string report = (t.path / "out" / "report.json").string();
  const Result s = run("summary " + q(report), t);
  CHECK(contains(s.out, "determinism mismatches (1):"));
  CHECK(contains(s.out, "S16_full / test-hostile: NOT DETERMINISTIC"));
  const Result h = run("report " + q(report) + " --no-charts -o " + q((t.path / "r.html").string()), t);
  CHECK(h.code == 0);
  CHECK(contains(slurp(t.path / "r.html"), "NOT DETERMINISTIC"));
}

TEST_CASE("summary and compare print names, messages and reasons with control characters escaped") {
  TempDir t;
  json doc = base_report();
  const std::string evil = "\x1b]0;owned\x07\x1b[2J";
  doc["results"][0]["status"] = "error";
  doc["results"][0]["message"] = "boom " + evil;
  doc["results"][0].erase("check");
  doc["results"][1]["case_id"] = "case" + evil;
  doc["results"][2]["backend"] = "cpu" + evil;
  doc["results"][3]["status"] = "unsupported";
  doc["results"][3]["reason"] = "no " + evil;
  doc["results"][3].erase("check");
  doc["results"][3].erase("timing");
  const std::string f = t.write("evil.json", doc.dump());
  const Result s = run("summary " + q(f), t);
  INFO(s.err);
  REQUIRE(s.code <= 1);
  CHECK(contains(s.out, "boom "));
  CHECK(s.out.find('\x1b') == std::string::npos);
  CHECK(s.out.find('\x07') == std::string::npos);
  const Result c = run("compare " + q(t.write("base.json", base_report().dump())) + " " + q(f), t);
  CHECK(c.code == 1);
  CHECK(contains(c.out, "boom "));
  CHECK((c.out + c.err).find('\x1b') == std::string::npos);
  CHECK((c.out + c.err).find('\x07') == std::string::npos);
}

TEST_CASE("a stale parent-pid variable in the environment does not stop a top-level run") {
  TempDir t;
  const Result r = run_cpu(t, "", "ATTNBENCH_PARENT_PID=1 ATTNBENCH_PARENT=1:3:12345");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(rows_of(t.path / "out" / "report.json").size() == 8);
}

TEST_CASE("a FIFO where the lock file or the journal should be is exit 2 naming it, never a hang") {
  TempDir t;
  for (const std::string name : {".attnbench.lock", "journal.jsonl"}) {
    fs::remove_all(t.path / "out");
    fs::create_directories(t.path / "out");
    REQUIRE(::mkfifo((t.path / "out" / name).c_str(), 0600) == 0);
    const Result r = run("run " + q(t.write("foreign.json", kScenario)) + " --backends cpu --no-timing --out " +
                             q((t.path / "out").string()),
                         t, "", 20);
    INFO(name, r.err);
    CHECK(r.code == 2);
    CHECK(contains(r.err, name));
    CHECK(contains(r.err, "not a regular file"));
  }
}

TEST_CASE("compare --json with report paths that are not UTF-8 is no internal error") {
  TempDir t;
  const std::string b = t.write("base.json", base_report().dump()), n = t.write("n\xfe.json", base_report().dump());
  const Result r = run("compare " + q(b) + " " + q(n) + " --json " + q((t.path / "c.json").string()), t);
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(json::parse(slurp(t.path / "c.json"))["regressions"] == 0);
}

TEST_CASE("SIGINT to a --gpus run leaves no shard process behind") {
  TempDir t;
  const std::string scen = t.write("foreign.json", kScenario);
  const std::string out = (t.path / "out-sigint").string();
  const std::string pidfile = (t.path / "pid").string();
  const std::string cmd = "ATTNBENCH_TEST_BACKENDS=1 ATTNBENCH_TEST_SLOW_MS=400 ATTNBENCH_FAKE_GPUS=2 '" +
                          std::string(ATTNBENCH_BINARY) + "' run " + q(scen) +
                          " --backends test-slow --no-timing --gpus all --out " + q(out) +
                          " >/dev/null 2>&1 & echo $! > " + q(pidfile);
  REQUIRE(std::system(cmd.c_str()) == 0);
  const pid_t parent = std::stoi(slurp(pidfile));
  // Wait until both shards run, then interrupt the parent.
  auto shards = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string cmdline = slurp(e.path() / "cmdline");
      if (contains(cmdline, out + "/shards/")) ++n;
    }
    return n;
  };
  for (int i = 0; i < 100 && shards() < 2; ++i) ::usleep(50000);
  REQUIRE(shards() == 2);
  ::kill(parent, SIGINT);
  for (int i = 0; i < 200 && ::kill(parent, 0) == 0; ++i) ::usleep(50000);
  CHECK(::kill(parent, 0) != 0);
  for (int i = 0; i < 100 && shards() > 0; ++i) ::usleep(50000);
  CHECK(shards() == 0);
  CHECK(load(fs::path(out) / "report.json")["interrupted"]["signal"] == "SIGINT");
}

TEST_CASE("a child forked by a plugin does not keep the --out lock after the run") {
  for (const std::string iso : {"", "--isolate off"}) {
    TempDir t;
    const Result first = run_hostile(t, "fork_forward", "--cases S16_full " + iso);
    INFO(iso, first.err);
    CHECK(first.code == 0);
    const Result second = run_hostile(t, "none", "--cases S16_full");  // the forked child still sleeps
    INFO(second.err);
    CHECK(second.code == 0);
    CHECK_FALSE(contains(second.err, "another attnbench run"));
  }
}
