// The results history (docs/history.md): every report ingested into one database,
// SQLite by default, PostgreSQL for a team (history/db.hpp), under one versioned
// schema. A run is identified by its content (content_hash() of the loaded
// report), so ingesting the same report twice, from any path, stores it once.
// Every row keeps its case identity (case_key(): the problem's fields, not only
// the id string), backend and variant (variant_key()), the run's machine
// (machine_of(): GPU, SM count, driver, CUDA runtime, host CPU, clock policy) and
// git revision; every timing pass (samples included), every derived figure and
// the check result are stored, and the whole row as JSON.
//
// Tables (prefix attnbench_, so a shared PostgreSQL database can hold them):
//   meta     (key, value): "app" = attnbench-history, "schema_version"
//   runs     one per ingested report: content_hash (unique), git_revision,
//            started, finished, ingested, machine (key), machine_label,
//            machine_json, scenario, source (first path ingested), accepted,
//            row_count, header_json (the report without its rows)
//   results  one per row: run_id, case_id, case_key, backend, variant, status,
//            deterministic, nonfinite, worst_ratio, problem_json, check_json,
//            row_json
//   timings  one per timed pass: n, median/q1/q3/min/max/mean/stddev (ms), samples_json
//   figures  (result_id, pass, name, value): the timing summary and every number
//            of the row's derived figures, the table `history show` reads
// Writes run inside transactions (SQLite: BEGIN IMMEDIATE, waiting for other
// writers; PostgreSQL: ON CONFLICT on the content hash), so parallel writers never
// lose or duplicate a run.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "history/db.hpp"

namespace attnbench::history {

/// The schema version this build writes; open() migrates older ones.
constexpr int kHistorySchemaVersion = 2;

/// 32 hex digits: FNV-1a 128-bit (offset basis 0x6c62272e07bb014262b821756295c58d,
/// prime 2^88 + 0x13b; Fowler, Noll and Vo, draft-eastlake-fnv) of `text`.
std::string fnv1a128_hex(const std::string& text);
/// The identity of a run: fnv1a128_hex of the loaded report's canonical JSON
/// (nlohmann's dump: keys sorted, no whitespace).
std::string content_hash(const nlohmann::json& report);
/// The identity of a row's case: fnv1a128_hex of its "problem" object's canonical
/// JSON (every problem field: shape, dtype, layout, mask, score mod, seed); the
/// case_id alone when the row has no problem.
std::string case_key(const nlohmann::json& row);
/// The variant of a row: its backend variant's label (row_variant(): the backend
/// name at its defaults, `flex[block=64]` otherwise), followed by the canonical
/// JSON of the options it records in extra (extra.variant, then
/// extra.backend.options, each when it is an object), e.g. `cudnn` or
/// `cudnn {"storage":"padded"}`. THE one definition: new option sources are added here.
std::string variant_key(const nlohmann::json& row);

/// The machine of a run.
struct Machine {
  nlohmann::json fingerprint;  ///< env::comparable_identity + host CPU model + clock policy (max SM clock)
  std::string key;             ///< fnv1a128_hex of the fingerprint
  std::string label;           ///< readable, e.g. "NVIDIA H100 80GB HBM3 | 132 SMs | driver 570.133.20 | ..."
};
/// The machine of a loaded report (its "environment").
Machine machine_of(const nlohmann::json& report);

/// What add() did with one report.
struct IngestResult {
  int64_t run_id = 0;
  bool added = false;   ///< false: a run with the same content was already stored
  int64_t rows = 0;     ///< rows stored (0 when not added)
  std::string content_hash;
};

/// One stored run, newest first in list_runs().
struct RunInfo {
  int64_t id = 0;
  std::string content_hash, git_revision, started, machine, machine_label, source;
  bool accepted = true;
  int64_t rows = 0;
};

/// An open history database at kHistorySchemaVersion.
class HistoryStore {
 public:
  /// Open `url` (open_database()). Writable: a missing SQLite file is created and
  /// an older schema migrated, in one exclusive transaction. Read-only: the
  /// database must exist and be at this version. Throws InputError naming the
  /// database (exit code 2) for a file that is not a database, a foreign database
  /// (tables but no attnbench_meta, or another "app"), a newer schema, a
  /// read-only open of an older one, or a failed connection.
  static HistoryStore open(const std::string& url, bool writable);
  /// Bring `db` to `version` (1..kHistorySchemaVersion) in one exclusive
  /// transaction; what open() does (tests create older schemas with it). Returns
  /// the version found before. Throws InputError for a foreign or newer database.
  static int migrate(Database& db, int version);

  /// Store one loaded report (load_report()) read from `source`, in one
  /// transaction; `accepted` false keeps it out of the gate's baselines. Throws
  /// InputError naming `source` for a report without "results".
  IngestResult add(const nlohmann::json& report, const std::string& source, bool accepted = true);
  /// Runs, newest (started, then id) first.
  std::vector<RunInfo> list_runs();
  /// Delete runs (their rows, timings and figures with them) in one transaction:
  /// those started before `older_than` (ISO 8601 UTC text, "" = no age limit) and,
  /// per machine, all but the newest `keep_last` (nullopt = no count limit).
  /// Returns the runs deleted (or that would be, when `dry_run`).
  std::vector<RunInfo> prune(const std::string& older_than, std::optional<int64_t> keep_last, bool dry_run);
  /// The schema version stored in meta.
  int schema_version();

  Database& db() { return *db_; }
  const std::string& label() const { return db_->label(); }

 private:
  explicit HistoryStore(std::unique_ptr<Database> db) : db_(std::move(db)) {}
  std::unique_ptr<Database> db_;
};

}  // namespace attnbench::history

