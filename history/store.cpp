// The results history store: see store.hpp.
#include "history/store.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "harness/device/environment.hpp"
#include "harness/measure/measure.hpp"
#include "harness/model/errors.hpp"
#include "reports/compare.hpp"
#include "reports/report.hpp"

namespace attnbench::history {

using json = nlohmann::json;

// ------------------------------------------------------------------ identities

std::string fnv1a128_hex(const std::string& text) {
  using u128 = unsigned __int128;
  const u128 prime = (u128{1} << 88) | 0x13b;
  u128 h = (u128{0x6c62272e07bb0142ULL} << 64) | u128{0x62b821756295c58dULL};
  for (unsigned char c : text) {
    h ^= c;
    h *= prime;
  }
  static const char* digits = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 31; i >= 0; --i, h >>= 4) out[i] = digits[static_cast<unsigned>(h & 0xf)];
  return out;
}

std::string content_hash(const json& report) { return fnv1a128_hex(report.dump()); }

std::string case_key(const json& row) {
  if (row.contains("problem") && row["problem"].is_object() && !row["problem"].empty())
    return fnv1a128_hex(row["problem"].dump());
  return fnv1a128_hex("case_id:" + row.value("case_id", std::string()));
}

std::string variant_key(const json& row) {
  // The backend variant's label (row_variant: the backend's name at its defaults
  // and for rows written before variants, so their keys are unchanged).
  std::string key = row_variant(row);
  const json extra = row.value("extra", json());
  if (!extra.is_object()) return key;
  if (extra.contains("variant") && extra["variant"].is_object()) key += " " + extra["variant"].dump();
  if (extra.contains("backend") && extra["backend"].is_object() && extra["backend"].contains("options") &&
      extra["backend"]["options"].is_object())
    key += " " + extra["backend"]["options"].dump();
  return key;
}

Machine machine_of(const json& report) {
  const json environment = report.value("environment", json::object());
  Machine m;
  m.fingerprint = env::comparable_identity(environment);
  const json host = environment.value("host", json::object());
  m.fingerprint["cpu"] = host.is_object() ? host.value("cpu_model", json("unknown")) : json("unknown");
  const json clocks = environment.value("clocks_at_start", json::object());
  m.fingerprint["max_sm_clock_mhz"] = clocks.is_object() ? clocks.value("max_sm_clock_mhz", json()) : json();
  m.key = fnv1a128_hex(m.fingerprint.dump());
  auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  m.label = text(m.fingerprint["gpu"]) + " | " + text(m.fingerprint["sm_count"]) + " SMs | driver " +
            text(m.fingerprint["driver"]) + " | CUDA " + text(m.fingerprint["cuda_runtime"]) + " | " +
            text(m.fingerprint["cpu"]);
  if (m.fingerprint["max_sm_clock_mhz"].is_number())
    m.label += " | max SM clock " + text(m.fingerprint["max_sm_clock_mhz"]) + " MHz";
  return m;
}

// ------------------------------------------------------------------ schema

namespace {

constexpr const char* kApp = "attnbench-history";

/// The statements of migration step `version` (1: the tables; 2: the indexes the
/// gate and the queries use). {id}, {real} and {bigint} are Database::ddl() words.
std::vector<std::string> migration(int version) {
  if (version == 1)
    return {
        "CREATE TABLE attnbench_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE attnbench_runs (id {id}, content_hash TEXT NOT NULL UNIQUE, git_revision TEXT NOT NULL, "
        "started TEXT NOT NULL, finished TEXT, ingested TEXT NOT NULL, machine TEXT NOT NULL, machine_label TEXT "
        "NOT NULL, machine_json TEXT NOT NULL, scenario TEXT NOT NULL, source TEXT NOT NULL, accepted {bigint} NOT "
        "NULL, row_count {bigint} NOT NULL, header_json TEXT NOT NULL)",
        "CREATE TABLE attnbench_results (id {id}, run_id {bigint} NOT NULL REFERENCES attnbench_runs (id) ON "
        "DELETE CASCADE, case_id TEXT NOT NULL, case_key TEXT NOT NULL, backend TEXT NOT NULL, variant TEXT NOT "
        "NULL, status TEXT NOT NULL, deterministic {bigint}, nonfinite {bigint}, worst_ratio {real}, problem_json "
        "TEXT NOT NULL, check_json TEXT NOT NULL, row_json TEXT NOT NULL, UNIQUE (run_id, case_id, backend))",
        "CREATE TABLE attnbench_timings (result_id {bigint} NOT NULL REFERENCES attnbench_results (id) ON DELETE "
        "CASCADE, pass TEXT NOT NULL, n {bigint} NOT NULL, median_ms {real} NOT NULL, q1_ms {real} NOT NULL, "
        "q3_ms {real} NOT NULL, min_ms {real} NOT NULL, max_ms {real} NOT NULL, mean_ms {real} NOT NULL, "
        "stddev_ms {real} NOT NULL, samples_json TEXT NOT NULL, PRIMARY KEY (result_id, pass))",
        "CREATE TABLE attnbench_figures (result_id {bigint} NOT NULL REFERENCES attnbench_results (id) ON DELETE "
        "CASCADE, pass TEXT NOT NULL, name TEXT NOT NULL, value {real} NOT NULL, PRIMARY KEY (result_id, pass, "
        "name))",
    };
  return {
      "CREATE INDEX attnbench_results_series ON attnbench_results (case_key, backend, variant)",
      "CREATE INDEX attnbench_runs_machine ON attnbench_runs (machine, started)",
      "CREATE INDEX attnbench_figures_name ON attnbench_figures (name, pass)",
  };
}

std::string with_ddl(const Database& db, std::string sql) {
  for (const char* word : {"id", "real", "bigint"}) {
    const std::string marker = std::string("{") + word + "}";
    for (size_t p; (p = sql.find(marker)) != std::string::npos;) sql.replace(p, marker.size(), db.ddl(word));
  }
  return sql;
}

/// The schema version of `db`: 0 for an empty database (or, on PostgreSQL, a
/// schema without attnbench tables). Throws InputError for a foreign or newer one.
int stored_version(Database& db) {
  const std::vector<std::string> tables = db.tables();
  if (std::find(tables.begin(), tables.end(), "attnbench_meta") == tables.end()) {
    if (db.engine() == "sqlite" && !tables.empty()) {
      std::string list;
      for (const auto& t : tables) list += (list.empty() ? "" : ", ") + t;
      throw InputError(db.label(), "", "not an attnbench history database: it holds the tables " + list +
                                           " and no attnbench_meta (give another --db)");
    }
    return 0;
  }
  std::map<std::string, std::string> meta;
  for (const auto& r : db.query("SELECT key, value FROM attnbench_meta")) meta[as_text(r.at(0))] = as_text(r.at(1));
  if (meta["app"] != kApp)
    throw InputError(db.label(), "attnbench_meta/app",
                     "not an attnbench history database (app \"" + meta["app"] + "\", expected \"" + kApp + "\")");
  int version = 0;
  try {
    version = std::stoi(meta["schema_version"]);
  } catch (const std::exception&) {
    throw InputError(db.label(), "attnbench_meta/schema_version", "not a number: \"" + meta["schema_version"] + "\"");
  }
  if (version < 1 || version > kHistorySchemaVersion)
    throw InputError(db.label(), "attnbench_meta/schema_version",
                     "schema version " + std::to_string(version) + ": this attnbench reads versions 1 to " +
                         std::to_string(kHistorySchemaVersion) + (version > kHistorySchemaVersion ? " (written by a newer attnbench)" : ""));
  return version;
}

}  // namespace

int HistoryStore::migrate(Database& db, int version) {
  Transaction t(db, true);
  const int from = stored_version(db);
  for (int v = from + 1; v <= version; ++v)
    for (const auto& sql : migration(v)) db.exec(with_ddl(db, sql));
  if (from == 0) db.exec("INSERT INTO attnbench_meta (key, value) VALUES ('app', $1)", {std::string(kApp)});
  if (version > from)
    db.exec("INSERT INTO attnbench_meta (key, value) VALUES ('schema_version', $1) ON CONFLICT (key) DO UPDATE SET "
            "value = excluded.value",
            {std::to_string(version)});
  t.commit();
  return from;
}

HistoryStore HistoryStore::open(const std::string& url, bool writable) {
  try {
    HistoryStore store(open_database(url, !writable));
    if (writable) {
      migrate(store.db(), kHistorySchemaVersion);
    } else if (const int v = stored_version(store.db()); v != kHistorySchemaVersion) {
      throw InputError(store.label(), "attnbench_meta/schema_version",
                       v == 0 ? std::string("empty database: no attnbench history in it")
                              : "schema version " + std::to_string(v) + " is older than this attnbench's (" +
                                    std::to_string(kHistorySchemaVersion) +
                                    "): `attnbench history add` (or `history migrate`) brings it up to date");
    }
    return store;
  } catch (const DbError& e) {
    throw InputError(e.database(), "", "cannot use the history database: " + e.message());
  }
}

int HistoryStore::schema_version() { return stored_version(*db_); }

// ------------------------------------------------------------------ ingest

namespace {

DbValue opt_int(const std::optional<int64_t>& v) { return v ? DbValue(*v) : DbValue(nullptr); }
DbValue text_or_empty(const json& v) { return v.is_string() ? v.get<std::string>() : std::string(); }

/// Store the timing and figures of one timed pass of result `result_id`.
void add_pass(Database& db, int64_t result_id, const std::string& pass, const json& timing, const json& derived,
              const std::string& source, const std::string& path) {
  const TimingStats s = TimingStats::from_json(timing, source, path);
  db.exec("INSERT INTO attnbench_timings (result_id, pass, n, median_ms, q1_ms, q3_ms, min_ms, max_ms, mean_ms, "
          "stddev_ms, samples_json) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
          {result_id, pass, s.n, s.median_ms, s.q1_ms, s.q3_ms, s.min_ms, s.max_ms, s.mean_ms, s.stddev_ms,
           json(s.samples_ms).dump()});
  std::vector<std::pair<std::string, double>> figures = {
      {"n", static_cast<double>(s.n)}, {"median_ms", s.median_ms}, {"q1_ms", s.q1_ms},     {"q3_ms", s.q3_ms},
      {"iqr_ms", s.iqr_ms},           {"min_ms", s.min_ms},       {"max_ms", s.max_ms},   {"mean_ms", s.mean_ms},
      {"stddev_ms", s.stddev_ms},     {"rel_stddev", s.rel_stddev}};
  if (derived.is_object())
    for (const auto& item : derived.items()) {
      const std::string name = item.key();
      if (item.value().is_number() &&
          std::none_of(figures.begin(), figures.end(), [&](const auto& f) { return f.first == name; }))
        figures.emplace_back(name, item.value().get<double>());
    }
  // One statement per pass (a round trip each on PostgreSQL).
  std::string sql = "INSERT INTO attnbench_figures (result_id, pass, name, value) VALUES ";
  std::vector<DbValue> params;
  for (const auto& [name, value] : figures) {
    if (!std::isfinite(value)) continue;
    const size_t k = params.size();
    sql += (k ? ", ($" : "($") + std::to_string(k + 1) + ", $" + std::to_string(k + 2) + ", $" +
           std::to_string(k + 3) + ", $" + std::to_string(k + 4) + ")";
    params.insert(params.end(), {result_id, pass, name, value});
  }
  if (!params.empty()) db.exec(sql, params);
}

/// Store row `i` of run `run_id`.
void add_row(Database& db, int64_t run_id, const json& row, size_t i, const std::string& source) {
  const json check = row.value("check", json());
  const std::optional<bool> det = deterministic_of(row);
  const json worst = check.is_object() ? check.value("worst_ratio", json()) : json();
  const std::vector<DbRow> id = db.query(
      "INSERT INTO attnbench_results (run_id, case_id, case_key, backend, variant, status, deterministic, "
      "nonfinite, worst_ratio, problem_json, check_json, row_json) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, "
      "$11, $12) RETURNING id",
      {run_id, row.value("case_id", std::string()), case_key(row), row.value("backend", std::string()),
       variant_key(row), row.value("status", std::string()), det ? DbValue(int64_t{*det}) : DbValue(nullptr),
       opt_int(nonfinite_count(row)), worst.is_number() ? DbValue(worst.get<double>()) : DbValue(nullptr),
       row.value("problem", json()).dump(), check.dump(), row.dump()});
  const int64_t result_id = as_int(id.at(0).at(0));
  const json timing = row.value("timing", json());
  if (!timing.is_object()) return;
  const json derived = row.value("derived", json());
  for (const auto& [pass, t] : timing.items())
    if (t.is_object())
      add_pass(db, result_id, pass, t, derived.is_object() ? derived.value(pass, json()) : json(), source,
               "/results/" + std::to_string(i) + "/timing/" + pass);
}

}  // namespace

IngestResult HistoryStore::add(const json& report, const std::string& source, bool accepted) {
  if (!report.is_object() || !report.contains("results") || !report["results"].is_array())
    throw InputError(source, "/results", "a report needs a \"results\" array");
  IngestResult out;
  out.content_hash = content_hash(report);
  const Machine m = machine_of(report);
  json header = report;
  header.erase("results");
  const json& results = report["results"];
  Transaction t(*db_);
  const std::vector<DbRow> ins = db_->query(
      "INSERT INTO attnbench_runs (content_hash, git_revision, started, finished, ingested, machine, machine_label, "
      "machine_json, scenario, source, accepted, row_count, header_json) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
      "$10, $11, $12, $13) ON CONFLICT (content_hash) DO NOTHING RETURNING id",
      {out.content_hash, text_or_empty(report.value("git_revision", json())),
       text_or_empty(report.value("started", json())),
       report.value("finished", json()).is_string() ? DbValue(report["finished"].get<std::string>()) : DbValue(nullptr),
       env::utc_now_iso8601(), m.key, m.label, m.fingerprint.dump(),
       text_or_empty(report.value("scenario", json::object()).value("name", json())), source,
       int64_t{accepted}, static_cast<int64_t>(results.size()), header.dump()});
  if (ins.empty()) {  // stored before (by us or by a concurrent writer that committed first)
    out.run_id = as_int(db_->query("SELECT id FROM attnbench_runs WHERE content_hash = $1", {out.content_hash})
                            .at(0)
                            .at(0));
    t.commit();
    return out;
  }
  out.run_id = as_int(ins.at(0).at(0));
  for (size_t i = 0; i < results.size(); ++i) add_row(*db_, out.run_id, results[i], i, source);
  t.commit();
  out.added = true;
  out.rows = static_cast<int64_t>(results.size());
  return out;
}

// ------------------------------------------------------------------ runs, retention

std::vector<RunInfo> HistoryStore::list_runs() {
  std::vector<RunInfo> out;
  for (const auto& r : db_->query("SELECT id, content_hash, git_revision, started, machine, machine_label, source, "
                                  "accepted, row_count FROM attnbench_runs ORDER BY started DESC, id DESC"))
    out.push_back({as_int(r[0]), as_text(r[1]), as_text(r[2]), as_text(r[3]), as_text(r[4]), as_text(r[5]),
                   as_text(r[6]), as_int(r[7]) != 0, as_int(r[8])});
  return out;
}

std::vector<RunInfo> HistoryStore::prune(const std::string& older_than, std::optional<int64_t> keep_last,
                                         bool dry_run) {
  if (keep_last && *keep_last < 0)
    throw InputError("<command line>", "--keep", "must be >= 0, got " + std::to_string(*keep_last));
  Transaction t(*db_);
  std::map<std::string, int64_t> kept_per_machine;
  std::vector<RunInfo> doomed;
  for (const RunInfo& r : list_runs()) {  // newest first
    const bool too_old = !older_than.empty() && r.started < older_than;
    const bool beyond_count = keep_last && kept_per_machine[r.machine] >= *keep_last;
    if (too_old || beyond_count) doomed.push_back(r);
    else ++kept_per_machine[r.machine];
  }
  if (!dry_run)
    for (const RunInfo& r : doomed) db_->exec("DELETE FROM attnbench_runs WHERE id = $1", {r.id});
  t.commit();
  return doomed;
}

}  // namespace attnbench::history
