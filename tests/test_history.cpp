// The results history (docs/history.md) on SQLite and on PostgreSQL: a series of
// generated reports (the example baseline's rows with seeded timing noise) is
// ingested; `history show` and `history report` give the generated figures;
// `compare --history` flags an injected 10% slowdown that the two-report compare
// misses at the same noise, and passes a noise-only run; ingest is idempotent;
// parallel writers lose and duplicate nothing; schema migration, retention, and
// corrupted or foreign files (exit 2, named).
//
// The PostgreSQL cases run only under tests/history_pg_test.sh (ctest
// history_postgresql), which starts a private server and sets
// ATTNBENCH_TEST_PG_SOCKET / ATTNBENCH_TEST_PG_PORT; elsewhere they are skipped.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "harness/measure/measure.hpp"
#include "harness/model/errors.hpp"
#include "history/db.hpp"
#include "history/gate.hpp"
#include "history/store.hpp"
#include "history/trend.hpp"
#include "reports/report.hpp"
#include "tests/cli_util.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using namespace attnbench::history;
using nlohmann::json;
namespace fs = std::filesystem;
namespace tc = attnbench::test::cli;

namespace {

const std::string kTemplate = std::string(ATTNBENCH_SOURCE_DIR) + "/ci/baselines/example-h100.json";
constexpr int kSamples = 400;
constexpr double kSampleNoise = 0.15;  ///< log-normal sigma of the samples within a run
constexpr double kRunNoise = 0.005;    ///< sigma of the run-to-run factor

/// Standard normal from two uniforms (Box-Muller): portable across standard libraries.
double normal(std::mt19937_64& rng) {
  const double u1 = (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// Report `index` of a series: the template's rows, each timed pass resampled
/// around its median times `slowdown`; revision rev<index>, started on day index + 1.
/// Returns the document; `medians` gets "case|backend|pass" -> median.
json make_run(int index, double slowdown, std::map<std::string, double>* medians = nullptr) {
  static const json tpl = load_report(kTemplate);
  json doc = tpl;
  char rev[16], day[40];
  std::snprintf(rev, sizeof(rev), "rev%02d", index);
  std::snprintf(day, sizeof(day), "2026-03-%02dT10:00:00Z", index + 1);
  doc["git_revision"] = rev;
  doc["started"] = day;
  doc["finished"] = day;
  doc.erase("upgraded_from");
  std::mt19937_64 rng(1000 + index);
  for (auto& row : doc["results"]) {
    row.erase("derived");  // derived again on load from the new timings
    if (!row["timing"].is_object()) continue;
    for (auto& [pass, t] : row["timing"].items()) {
      const double center = t["median_ms"].get<double>() * (1.0 + kRunNoise * normal(rng)) * slowdown;
      TimingStats s;
      for (int i = 0; i < kSamples; ++i) s.samples_ms.push_back(center * std::exp(kSampleNoise * normal(rng)));
      s.summarize();
      for (const char* k : {"n", "median_ms", "q1_ms", "q3_ms", "iqr_ms", "min_ms", "max_ms", "mean_ms", "stddev_ms",
                            "rel_stddev", "samples_ms"})
        t[k] = s.to_json()[k];
      if (medians) (*medians)[row["case_id"].get<std::string>() + "|" + row["backend"].get<std::string>() + "|" + pass] = s.median_ms;
    }
  }
  return report_from_json(doc, rev);
}

std::string save(const tc::TempDir& t, const std::string& name, const json& doc) { return t.write(name, doc.dump()); }

std::string q(const std::string& s) { return "'" + s + "'"; }

/// A fresh database named `name`: a SQLite file in `t`, or a new PostgreSQL
/// database on the test server.
using DbMaker = std::function<std::string(const tc::TempDir& t, const std::string& name)>;

std::string sqlite_db(const tc::TempDir& t, const std::string& name) { return (t.path / (name + ".sqlite")).string(); }

const char* pg_socket() { return std::getenv("ATTNBENCH_TEST_PG_SOCKET"); }

std::string pg_url(const std::string& dbname) {
  const char* port = std::getenv("ATTNBENCH_TEST_PG_PORT");
  return "postgresql://postgres@/" + dbname + "?host=" + pg_socket() + "&port=" + (port ? port : "5432");
}

std::string pg_db(const tc::TempDir&, const std::string& name) {
  auto admin = open_database(pg_url("postgres"), false);
  admin->exec("DROP DATABASE IF EXISTS " + name);
  admin->exec("CREATE DATABASE " + name);
  return pg_url(name);
}

int64_t count(const std::string& url, const std::string& table) {
  auto db = open_database(url, true);
  return as_int(db->query("SELECT COUNT(*) FROM " + table).at(0).at(0));
}

// ------------------------------------------------------------------ the suites

/// Ingest, idempotence, show, report, and the gate against the two-report test.
void check_series_and_gate(const DbMaker& make) {
  tc::TempDir t;
  const std::string db = make(t, "series");
  std::vector<std::string> files;
  std::map<std::string, double> last_medians;
  for (int i = 0; i < 10; ++i) files.push_back(save(t, "run" + std::to_string(i) + ".json", make_run(i, 1.0, &last_medians)));
  std::string args = "history add --db " + q(db);
  for (const auto& f : files) args += " " + q(f);
  tc::Result r = tc::run(args, t);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(tc::contains(r.out, "10 of 10 reports added"));
  CHECK(count(db, "attnbench_runs") == 10);
  CHECK(count(db, "attnbench_results") == 100);
  CHECK(count(db, "attnbench_timings") == 270);  // 9 timed rows x 3 passes, every sample kept
  // Idempotent: the same content from another path is the same run.
  fs::copy_file(files[3], t.path / "copy_of_run3.json");
  r = tc::run("history add --db " + q(db) + " " + q(files[0]) + " " + q((t.path / "copy_of_run3.json").string()), t);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(tc::contains(r.out, "0 of 2 reports added"));
  CHECK(count(db, "attnbench_runs") == 10);
  {
    auto d = open_database(db, true);
    const auto samples = d->query("SELECT samples_json FROM attnbench_timings LIMIT 1");
    CHECK(json::parse(as_text(samples.at(0).at(0))).size() == kSamples);
  }

  // history show: the generated medians, per revision.
  r = tc::run("history show --db " + q(db) + " --case '^full-s1024$' --backend naive --pass fwd --last 3 --json " +
                  q((t.path / "show.json").string()),
              t);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const json shown = json::parse(tc::slurp(t.path / "show.json"));
  REQUIRE(shown.size() == 1);
  CHECK(shown[0]["points"].size() == 10);
  CHECK(shown[0]["points"][9]["git_revision"] == "rev09");
  CHECK(shown[0]["points"][9]["value"].get<double>() == doctest::Approx(last_medians["full-s1024|naive|fwd"]).epsilon(1e-12));
  CHECK(shown[0]["regressions"] == 0);
  char cell[32];
  std::snprintf(cell, sizeof(cell), "%.4g", last_medians["full-s1024|naive|fwd"]);
  CHECK(tc::contains(r.out, cell));
  CHECK(tc::contains(r.out, "rev09"));
  CHECK(!tc::contains(r.out, "rev06"));  // --last 3: rev07..rev09
  // A derived figure is stored too (useful TFLOP/s of the same pass).
  r = tc::run("history show --db " + q(db) + " --case '^full-s1024$' --backend naive --pass fwd --figure useful_tflops "
                  "--json " + q((t.path / "tf.json").string()),
              t);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const json tf = json::parse(tc::slurp(t.path / "tf.json"));
  REQUIRE(tf.size() == 1);
  const double flops = load_report(files[9])["results"][0]["work"]["useful_flops_fwd"].get<double>();
  CHECK(tf[0]["points"][9]["value"].get<double>() ==
        doctest::Approx(flops / (last_medians["full-s1024|naive|fwd"] * 1e-3) / 1e12).epsilon(1e-9));

  // The gate: a noise-only run passes, a 10% slowdown fails against history and
  // is AMBIGUOUS (not gating) for the two-report compare at the same noise.
  const std::string noise = save(t, "noise.json", make_run(10, 1.0));
  const std::string slow = save(t, "slow.json", make_run(11, 1.10));
  r = tc::run("compare --history " + q(db) + " " + q(noise) + " --json " + q((t.path / "g0.json").string()), t);
  CHECK_MESSAGE(r.code == 0, (r.out + r.err));
  const json g0 = json::parse(tc::slurp(t.path / "g0.json"));
  CHECK(g0["regressions"] == 0);
  double noise_dev = 0, noise_thr = 1;
  for (const auto& tm : g0["timings"]) {
    CHECK(tm["verdict"] == "SAME");
    noise_dev = std::max(noise_dev, std::abs(tm["ratio"].get<double>() - 1));
    noise_thr = std::min(noise_thr, tm["threshold_ms"].get<double>() / tm["center_ms"].get<double>());
  }
  CHECK(noise_thr >= doctest::Approx(0.05));  // never under the relative floor
  json elsewhere = make_run(12, 1.5);  // another driver: no history there
  elsewhere["environment"]["versions"]["driver"] = "580.1";
  r = tc::run("compare --history " + q(db) + " " + q(save(t, "elsewhere.json", elsewhere)), t);
  CHECK(r.code == 0);
  CHECK(tc::contains(r.out, "no accepted run of this machine"));
  r = tc::run("compare --history " + q(db) + " " + q(slow) + " --json " + q((t.path / "g1.json").string()), t);
  CHECK_MESSAGE(r.code == 1, (r.out + r.err));
  CHECK(tc::contains(r.out, "Regressions against history (SLOWER)"));
  const json g1 = json::parse(tc::slurp(t.path / "g1.json"));
  CHECK(g1["timings"].size() == 27);
  for (const auto& tm : g1["timings"]) {
    CHECK(tm["verdict"] == "SLOWER");
    CHECK(tm["history_runs"] == 10);
  }
  CHECK(g1["regressions"] == 27);
  double slow_min = 10;
  for (const auto& tm : g1["timings"]) slow_min = std::min(slow_min, tm["ratio"].get<double>());
  MESSAGE("noise-only run: largest change " << noise_dev * 100 << "%, smallest threshold " << noise_thr * 100
                                            << "%; 10% slower run: smallest change " << (slow_min - 1) * 100 << "%");
  r = tc::run("compare " + q(files[9]) + " " + q(slow) + " --json " + q((t.path / "two.json").string()), t);
  CHECK_MESSAGE(r.code == 0, (r.out + r.err));  // the two-report test misses it
  const json two = json::parse(tc::slurp(t.path / "two.json"));
  int ambiguous = 0;
  for (const auto& tm : two["timings"]) ambiguous += tm["verdict"] == "AMBIGUOUS";
  CHECK(ambiguous == 27);

  // Stored, the slow run is marked in show and in the trend page.
  r = tc::run("history add --db " + q(db) + " " + q(noise) + " " + q(slow), t);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  r = tc::run("history show --db " + q(db) + " --pass fwd_bwd --json " + q((t.path / "all.json").string()), t);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const json all = json::parse(tc::slurp(t.path / "all.json"));
  CHECK(all.size() == 9);
  for (const auto& s : all) {
    CHECK(s["regressions"] == 1);
    CHECK(s["points"][11]["verdict"] == "SLOWER");
    CHECK(s["points"][10]["verdict"] == "SAME");
  }
  std::snprintf(cell, sizeof(cell), "%.4g!", all[0]["points"][11]["value"].get<double>());
  CHECK(tc::contains(r.out, cell));
  r = tc::run("history report --db " + q(db) + " --no-charts -o " + q((t.path / "trend.html").string()), t);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const std::string page = tc::slurp(t.path / "trend.html");
  CHECK(tc::contains(page, "27 series, 324 points, 27 regressions"));
  CHECK(tc::contains(page, "<table id=\"regressions\""));
  CHECK(tc::contains(page, "<td>rev11</td>"));
}

/// Several `history add` processes at once, with overlapping reports.
void check_parallel_writers(const DbMaker& make) {
  tc::TempDir t;
  const std::string db = make(t, "parallel");
  std::vector<std::string> files;
  for (int i = 0; i < 8; ++i) files.push_back(save(t, "p" + std::to_string(i) + ".json", make_run(i, 1.0)));
  std::string script;
  for (int w = 0; w < 6; ++w) {  // writer w adds reports w, w+1, w+2 (mod 8): each report by up to 3 writers
    script += "( '" + std::string(ATTNBENCH_BINARY) + "' history add --db " + q(db);
    for (int k = 0; k < 3; ++k) script += " " + q(files[(w + k) % 8]);
    script += " >'" + (t.path / ("w" + std::to_string(w) + ".out")).string() + "' 2>&1; echo $? >'" +
              (t.path / ("w" + std::to_string(w) + ".rc")).string() + "' ) & ";
  }
  script += "wait";
  REQUIRE(std::system(script.c_str()) == 0);
  int64_t added = 0;
  for (int w = 0; w < 6; ++w) {
    const std::string rc = tc::slurp(t.path / ("w" + std::to_string(w) + ".rc"));
    const std::string out = tc::slurp(t.path / ("w" + std::to_string(w) + ".out"));
    CHECK_MESSAGE(rc == "0\n", out);
    for (size_t p = 0; (p = out.find("added /", p)) != std::string::npos; ++p) ++added;
  }
  std::set<int> expected;
  for (int w = 0; w < 6; ++w)
    for (int k = 0; k < 3; ++k) expected.insert((w + k) % 8);
  CHECK(added == static_cast<int64_t>(expected.size()));  // each report added by exactly one writer
  CHECK(count(db, "attnbench_runs") == static_cast<int64_t>(expected.size()));
  CHECK(count(db, "attnbench_results") == 10 * static_cast<int64_t>(expected.size()));
}

/// Retention: --keep and --older-than, dry run first; children go with their runs.
void check_prune(const DbMaker& make) {
  tc::TempDir t;
  const std::string db = make(t, "prune");
  std::string args = "history add --db " + q(db);
  for (int i = 0; i < 6; ++i) args += " " + q(save(t, "r" + std::to_string(i) + ".json", make_run(i, 1.0)));
  REQUIRE(tc::run(args, t).code == 0);
  tc::Result r = tc::run("history prune --db " + q(db) + " --keep 2 --dry-run", t);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(tc::contains(r.out, "would delete 4 runs"));
  CHECK(count(db, "attnbench_runs") == 6);
  r = tc::run("history prune --db " + q(db) + " --keep 2", t);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(tc::contains(r.out, "deleted 4 runs"));
  CHECK(count(db, "attnbench_runs") == 2);
  CHECK(count(db, "attnbench_results") == 20);
  CHECK(count(db, "attnbench_timings") == 54);
  {
    auto d = open_database(db, true);
    const auto revs = d->query("SELECT git_revision FROM attnbench_runs ORDER BY started");
    CHECK(as_text(revs.at(0).at(0)) == "rev04");  // the newest two are kept
    CHECK(as_text(revs.at(1).at(0)) == "rev05");
    CHECK(as_int(d->query("SELECT COUNT(*) FROM attnbench_figures f WHERE NOT EXISTS (SELECT 1 FROM attnbench_results "
                          "r WHERE r.id = f.result_id)").at(0).at(0)) == 0);
  }
  r = tc::run("history prune --db " + q(db) + " --older-than 36500", t);  // a century: nothing that old
  CHECK(tc::contains(r.out, "deleted 0 runs"));
  r = tc::run("history prune --db " + q(db) + " --older-than 0", t);
  CHECK(tc::contains(r.out, "deleted 2 runs"));
  CHECK(count(db, "attnbench_results") == 0);
  CHECK(tc::run("history prune --db " + q(db), t).code == 2);  // neither limit given
}

/// An older schema is migrated on write and refused on read; a newer one is refused.
void check_migration(const DbMaker& make) {
  tc::TempDir t;
  const std::string db = make(t, "migrate");
  {
    auto d = open_database(db, false);
    CHECK(HistoryStore::migrate(*d, 1) == 0);
  }
  CHECK_THROWS_AS(HistoryStore::open(db, false), InputError);  // read-only: older schema
  tc::Result r = tc::run("history show --db " + q(db), t);
  CHECK(r.code == 2);
  CHECK(tc::contains(r.err, "schema version 1 is older"));
  r = tc::run("history migrate --db " + q(db), t);
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK(tc::contains(r.out, "schema version 2"));
  {
    HistoryStore s = HistoryStore::open(db, false);
    CHECK(s.schema_version() == kHistorySchemaVersion);
    s.db().exec("SELECT case_key FROM attnbench_results");  // the tables are there
  }
  {
    auto d = open_database(db, false);
    d->exec("UPDATE attnbench_meta SET value = '99' WHERE key = 'schema_version'");
  }
  r = tc::run("history add --db " + q(db) + " " + q(kTemplate), t);
  CHECK(r.code == 2);
  CHECK(tc::contains(r.err, "written by a newer attnbench"));
}

}  // namespace

// ------------------------------------------------------------------ pure parts

TEST_CASE("robust statistics and the history rule") {
  const RobustStats s = robust_stats({1.0, 2.0, 3.0, 4.0, 100.0});
  CHECK(s.median == 3.0);
  CHECK(s.mad == 1.0);  // |x - 3| = 2 1 0 1 97
  CHECK(robust_stats({4.0, 1.0, 3.0, 2.0}).median == 2.5);
  CHECK_THROWS(robust_stats({}));
  HistoryGateOptions o;  // k 3.5, min_rel 5%, min_runs 3
  const std::vector<double> h = {10.0, 10.1, 9.9, 10.0, 10.2, 9.8};  // median 10, MAD 0.1
  HistoryTiming t = judge_against(h, 10.4, o);
  CHECK(t.threshold_ms == doctest::Approx(3.5 * 1.4826 * 0.1));  // max(0.519, 5% of 10 = 0.5)
  CHECK(t.verdict == HistoryVerdict::same);
  t = judge_against(h, 10.6, o);
  CHECK(t.verdict == HistoryVerdict::slower);
  CHECK(t.regression);
  CHECK(t.modified_z == doctest::Approx(0.6745 * 6));
  CHECK(judge_against(h, 9.3, o).verdict == HistoryVerdict::faster);
  CHECK(judge_against({10.0, 10.0}, 20.0, o).verdict == HistoryVerdict::no_history);  // 2 < min_runs
  const std::vector<double> noisy = {10, 12, 8, 11, 9, 10};  // MAD 1: threshold 3.5 * 1.4826 = 5.19
  CHECK(judge_against(noisy, 15.0, o).verdict == HistoryVerdict::same);
  CHECK(judge_against(noisy, 15.3, o).verdict == HistoryVerdict::slower);
}

TEST_CASE("identities: content, case, variant, machine") {
  const json doc = load_report(kTemplate);
  json other = doc;
  CHECK(content_hash(doc) == content_hash(other));
  other["results"][0]["timing"]["fwd"]["samples_ms"][0] = 1.0;
  CHECK(content_hash(doc) != content_hash(other));
  CHECK(fnv1a128_hex("") == "6c62272e07bb014262b821756295c58d");  // the offset basis
  CHECK(fnv1a128_hex("a") == "d228cb696f1a8caf78912b704e4a8964");  // FNV-1a 128 test vector
  json row = doc["results"][0];
  const std::string key = case_key(row);
  row["case_id"] = "renamed";
  CHECK(case_key(row) == key);  // the problem's fields, not the id
  row["problem"]["seq_q"] = 2048;
  CHECK(case_key(row) != key);
  CHECK(variant_key(row) == "naive");
  row["extra"]["variant"] = {{"storage", "padded"}};
  CHECK(variant_key(row) == "naive {\"storage\":\"padded\"}");
  row["variant"] = "naive[block=64]";  // a backend variant (report schema 3) keys apart from the defaults
  CHECK(variant_key(row) == "naive[block=64] {\"storage\":\"padded\"}");
  const Machine m = machine_of(doc);
  CHECK(m.fingerprint["gpu"] == "NVIDIA H100 80GB HBM3");
  CHECK(m.fingerprint["max_sm_clock_mhz"] == 1980);
  json moved = doc;
  moved["environment"]["versions"]["driver"] = "580.1";
  CHECK(machine_of(moved).key != m.key);
}

TEST_CASE("sqlite: series, idempotent ingest, show, report and the gate") { check_series_and_gate(sqlite_db); }
TEST_CASE("sqlite: parallel writers lose and duplicate nothing") { check_parallel_writers(sqlite_db); }
TEST_CASE("sqlite: prune by count and age") { check_prune(sqlite_db); }
TEST_CASE("sqlite: schema migration") { check_migration(sqlite_db); }

TEST_CASE("sqlite: corrupted, foreign and missing files exit 2, named, untouched") {
  tc::TempDir t;
  const std::string garbage = t.write("garbage.db", std::string(4096, 'x'));
  tc::Result r = tc::run("history add --db " + q(garbage) + " " + q(kTemplate), t);
  CHECK(r.code == 2);
  CHECK(tc::contains(r.err, garbage));
  CHECK(tc::contains(r.err, "not a database"));
  CHECK(tc::slurp(garbage) == std::string(4096, 'x'));
  r = tc::run("compare --history " + q(garbage) + " " + q(kTemplate), t);
  CHECK(r.code == 2);
  CHECK(tc::contains(r.err, garbage));
  const std::string foreign = (t.path / "foreign.db").string();
  {
    auto d = open_database(foreign, false);
    d->exec("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)");
  }
  const std::string before = tc::slurp(foreign);
  r = tc::run("history add --db " + q(foreign) + " " + q(kTemplate), t);
  CHECK(r.code == 2);
  CHECK(tc::contains(r.err, foreign));
  CHECK(tc::contains(r.err, "not an attnbench history database"));
  CHECK(tc::contains(r.err, "invoices"));
  CHECK(tc::slurp(foreign) == before);
  const std::string missing = (t.path / "nope.sqlite").string();
  r = tc::run("history show --db " + q(missing), t);
  CHECK(r.code == 2);
  CHECK(tc::contains(r.err, missing));
  CHECK(!fs::exists(missing));  // reading never creates it
  // A bad report is refused before the database is touched.
  const std::string bad = t.write("bad.json", "{\"schema_version\": 2}");
  const std::string fresh = (t.path / "fresh.sqlite").string();
  r = tc::run("history add --db " + q(fresh) + " " + q(bad), t);
  CHECK(r.code == 2);
  CHECK(!fs::exists(fresh));
  CHECK(tc::run("compare --history " + q(fresh) + " " + q(kTemplate) + " " + q(kTemplate), t).code == 2);
}

TEST_CASE("compare --history: status, determinism and NaN guards gate; short histories fall back to two reports") {
  tc::TempDir t;
  const std::string db = sqlite_db(t, "guards");
  REQUIRE(tc::run("history add --db " + q(db) + " " + q(save(t, "a.json", make_run(0, 1.0))) + " " +
                      q(save(t, "b.json", make_run(1, 1.0))),
                  t)
              .code == 0);
  // Two runs (< --history-min-runs 3): NO_HISTORY, the two-report test against
  // the latest run decides: a 10% slowdown is AMBIGUOUS there, a 60% one SLOWER.
  tc::Result r = tc::run("compare --history " + q(db) + " " + q(save(t, "c.json", make_run(2, 1.10))) + " --json " +
                             q((t.path / "c_gate.json").string()),
                         t);
  CHECK_MESSAGE(r.code == 0, (r.out + r.err));
  json g = json::parse(tc::slurp(t.path / "c_gate.json"));
  for (const auto& tm : g["timings"]) CHECK(tm["verdict"] == "NO_HISTORY");
  CHECK(g["two_report"]["timings"].size() == 27);
  r = tc::run("compare --history " + q(db) + " " + q(save(t, "d.json", make_run(2, 1.60))) + " --json " +
                  q((t.path / "d_gate.json").string()),
              t);
  CHECK(r.code == 1);
  g = json::parse(tc::slurp(t.path / "d_gate.json"));
  CHECK(g["regressions"] == 27);
  CHECK(g["two_report"]["regressions"] == 27);
  // Guards, against the latest accepted row of each case.
  json bad = make_run(3, 1.0);
  bad["results"][0]["extra"]["deterministic"] = false;           // full-s1024 naive
  bad["results"][1]["check"]["tensors"][0]["nan_mismatch"] = 5;  // full-s1024 cudnn
  bad["results"][2]["status"] = "fail";                          // causal-s1024 naive
  bad["results"][2]["check"]["pass"] = false;
  r = tc::run("compare --history " + q(db) + " " + q(save(t, "bad.json", bad)) + " --json " +
                  q((t.path / "bad_gate.json").string()),
              t);
  CHECK(r.code == 1);
  g = json::parse(tc::slurp(t.path / "bad_gate.json"));
  CHECK(g["regressions"] == 3);
  REQUIRE(g["two_report"]["guards"].size() == 2);
  CHECK(g["two_report"]["guards"][0]["kind"] == "nondeterministic");
  CHECK(g["two_report"]["guards"][1]["kind"] == "nonfinite");
  REQUIRE(g["two_report"]["status_changes"].size() == 1);
  CHECK(g["two_report"]["status_changes"][0]["case_id"] == "causal-s1024");
  CHECK(g["two_report"]["status_changes"][0]["new_status"] == "fail");
  r = tc::run("compare --history " + q(db) + " " + q((t.path / "bad.json").string()) +
                  " --allow-nondeterminism --allow-nonfinite --json " + q((t.path / "bad2.json").string()),
              t);
  CHECK(r.code == 1);
  CHECK(json::parse(tc::slurp(t.path / "bad2.json"))["regressions"] == 1);  // the status change alone
}

TEST_CASE("ci/gate.sh against the history: gates, then records accepted runs and candidates") {
  tc::TempDir t;
  const std::string db = sqlite_db(t, "gate");
  std::string args = "history add --db " + q(db);
  for (int i = 0; i < 4; ++i) args += " " + q(save(t, "r" + std::to_string(i) + ".json", make_run(i, 1.0)));
  REQUIRE(tc::run(args, t).code == 0);
  const std::string gate = std::string(ATTNBENCH_SOURCE_DIR) + "/ci/gate.sh";
  auto run_gate = [&](const std::string& report) {
    const std::string cmd = "cd " + q(t.path.string()) + " && ATTNBENCH=" + q(ATTNBENCH_BINARY) + " GATE_HISTORY_DB=" +
                            q(db) + " GATE_HISTORY_RECORD=1 " + q(gate) + " " + q(report) + " >gate.out 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  CHECK(run_gate(save(t, "slow.json", make_run(4, 1.10))) == 1);
  CHECK(tc::contains(tc::slurp(t.path / "gate-summary.md"), "compare --history: REGRESSED"));
  CHECK(run_gate(save(t, "noise.json", make_run(5, 1.0))) == 0);
  {
    HistoryStore s = HistoryStore::open(db, false);
    const auto runs = s.list_runs();  // newest first
    REQUIRE(runs.size() == 6);
    CHECK(runs[0].git_revision == "rev05");
    CHECK(runs[0].accepted);
    CHECK(runs[1].git_revision == "rev04");
    CHECK(!runs[1].accepted);  // the failed run is a candidate, never a baseline
  }
  const tc::Result r = tc::run("compare --history " + q(db) + " " + q(save(t, "next.json", make_run(6, 1.0))) +
                                   " --json " + q((t.path / "next_gate.json").string()),
                               t);
  CHECK(r.code == 0);
  const json g = json::parse(tc::slurp(t.path / "next_gate.json"));
  CHECK(g["timings"][0]["history_runs"] == 5);  // rev00..rev03 and rev05
}

TEST_CASE("the trend page draws one chart per case and backend with the report's charting") {
  tc::TempDir t;
  const std::string db = sqlite_db(t, "page");
  {
    HistoryStore s = HistoryStore::open(db, true);
    for (int i = 0; i < 5; ++i) s.add(make_run(i, 1.0), "run" + std::to_string(i));
    s.add(make_run(5, 1.25), "slow");
  }
  HistoryStore s = HistoryStore::open(db, false);
  SeriesFilter f;
  f.case_regex = "^causal-s1024$";
  f.pass = "fwd";
  const auto series = load_series(s, f, HistoryGateOptions{});
  REQUIRE(series.size() == 2);  // naive and cudnn
  CHECK(series[0].points.size() == 6);
  CHECK(series[0].points[5].verdict == HistoryVerdict::slower);
  // Bundles present (stubs): the page carries the chart specs the report's script draws.
  const fs::path mods = t.path / "node_modules";
  for (const char* b : {"vega/build/vega.min.js", "vega-lite/build/vega-lite.min.js", "vega-embed/build/vega-embed.min.js"}) {
    fs::create_directories((mods / b).parent_path());
    std::ofstream(mods / b) << "/* stub */";
  }
  const std::string page = render_trend_page(series, "median_ms", "trends", db, true, mods.string());
  CHECK(tc::contains(page, "id=\"chart-0\""));
  CHECK(tc::contains(page, "id=\"chart-1\""));
  CHECK(!tc::contains(page, "id=\"chart-2\""));
  CHECK(tc::contains(page, "triangle-up"));
  CHECK(tc::contains(page, "vega-lite/v6.json"));
  CHECK(tc::contains(page, "vegaEmbed(el, c.spec"));  // the report's own chart script
  CHECK(tc::contains(page, "2 series, 12 points, 2 regressions"));
  // Rates: smaller is worse.
  f.figure = "useful_tflops";
  const auto rates = load_series(s, f, HistoryGateOptions{});
  REQUIRE(rates.size() == 2);
  CHECK(rates[0].points[5].verdict == HistoryVerdict::slower);
  f.case_regex = "(";
  CHECK_THROWS_AS(load_series(s, f, HistoryGateOptions{}), InputError);
}

TEST_CASE("headless Chromium draws every chart of the trend page") {
  const std::string source = ATTNBENCH_SOURCE_DIR;
  std::string missing;
  if (!fs::exists("/usr/bin/chromium") && !std::getenv("ATTNBENCH_CHROMIUM")) missing += "/usr/bin/chromium; ";
  if (!fs::exists(source + "/reports/node_modules/playwright-core/package.json")) missing += "playwright-core; ";
  if (!fs::exists(source + "/reports/node_modules/vega/build/vega.min.js")) missing += "vega bundles; ";
  if (!missing.empty()) {
    const char* allow = std::getenv("ATTNBENCH_ALLOW_BROWSER_SKIP");
    REQUIRE_MESSAGE((allow && std::string(allow) == "1"), "the browser test cannot run, missing: "
                                                              << missing << "(run ci/install_browser.sh)");
    MESSAGE("SKIPPED (ATTNBENCH_ALLOW_BROWSER_SKIP=1): trend page browser test, missing " << missing);
    return;
  }
  tc::TempDir t;
  const std::string db = sqlite_db(t, "browser");
  std::string args = "history add --db " + q(db);
  for (int i = 0; i < 5; ++i) args += " " + q(save(t, "r" + std::to_string(i) + ".json", make_run(i, i == 4 ? 1.2 : 1.0)));
  REQUIRE(tc::run(args, t).code == 0);
  const std::string page = (t.path / "trend.html").string(), png = (t.path / "trend.png").string();
  REQUIRE(tc::run("history report --db " + q(db) + " --case causal -o " + q(page), t).code == 0);
  const auto [rc, out_text] = attnbench::test::run_command("node " + q(source + "/tests/html/render_check.mjs") + " " +
                                                      q(page) + " " + q(png) + " 2>&1");
  const std::string out = out_text;  // a plain variable: doctest's macros capture it in a lambda
  REQUIRE_MESSAGE(rc == 0, out);
  const json info = json::parse(out.substr(out.rfind('{')));
  CHECK(info["errors"].empty());
  CHECK(info["requests"].empty());  // offline
  CHECK(info["expected"] == 4);     // causal-s1024, causal-s4096 x naive, cudnn
  CHECK(info["drawn"] == 4);
  CHECK(info["svgs"] == 4);
  CHECK(info["table_rows"] == 12);  // 4 (case, backend) x 3 passes
}

TEST_CASE("postgresql: series, idempotent ingest, show, report and the gate" * doctest::skip(!pg_socket())) {
  check_series_and_gate(pg_db);
}
TEST_CASE("postgresql: parallel writers lose and duplicate nothing" * doctest::skip(!pg_socket())) {
  check_parallel_writers(pg_db);
}
TEST_CASE("postgresql: prune by count and age" * doctest::skip(!pg_socket())) { check_prune(pg_db); }
TEST_CASE("postgresql: schema migration" * doctest::skip(!pg_socket())) { check_migration(pg_db); }
TEST_CASE("postgresql: a refused connection exits 2 naming the server, password hidden" * doctest::skip(!pg_socket())) {
  tc::TempDir t;
  const tc::Result r = tc::run("history show --db 'postgresql://postgres:secret@/nosuchdb?host=" +
                                   std::string(pg_socket()) + "'",
                               t);
  CHECK(r.code == 2);
  CHECK(tc::contains(r.err, "postgresql://postgres:***@/nosuchdb"));
  CHECK(!tc::contains(r.err, "secret"));
}
