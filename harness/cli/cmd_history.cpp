// `attnbench history add | show | report | runs | prune | migrate` and the
// history part of `attnbench compare --history DB NEW.json` (docs/history.md).
// Database failures (a corrupted or foreign file, a lost server) are bad input
// naming the database: exit code 2.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>

#include "harness/cli/cli.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/printable.hpp"
#include "history/gate.hpp"
#include "history/store.hpp"
#include "history/trend.hpp"
#include "reports/journal.hpp"
#include "reports/report.hpp"

namespace attnbench::cli {

namespace {

using history::HistoryStore;

/// The default database: $ATTNBENCH_HISTORY_DB, else attnbench-history.sqlite here.
std::string default_db() {
  const char* env = std::getenv("ATTNBENCH_HISTORY_DB");
  return env && *env ? env : "attnbench-history.sqlite";
}

void add_db_option(CLI::App* cmd, std::string& db) {
  db = default_db();
  cmd->add_option("--db", db,
                  "history database: a SQLite file or postgresql://... (default $ATTNBENCH_HISTORY_DB, else "
                  "attnbench-history.sqlite)")
      ->capture_default_str();
}

/// Run `fn`, a DbError becoming bad input that names the database (exit 2).
template <typename F>
int guarded(F&& fn) {
  try {
    return fn();
  } catch (const history::DbError& e) {
    throw InputError(e.database(), "", "history database error: " + e.message());
  }
}

void write_text(const std::string& path, const std::string& text) {
  try {
    write_file_atomic(path, text);
  } catch (const std::runtime_error& e) {
    throw InputError(path, "", e.what());
  }
}

void add_history_add(CLI::App* history, Action& action) {
  struct Args {
    std::vector<std::string> reports;
    std::string db;
    bool candidate = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = history->add_subcommand("add", "store reports in the history (a run already stored is skipped)");
  cmd->add_option("reports", a->reports, "report.json files")->required()->expected(1, -1);
  add_db_option(cmd, a->db);
  cmd->add_flag("--candidate", a->candidate, "store the runs as not accepted: never a baseline of the history gate");
  cmd->callback([a, &action] {
    action = [a]() -> int {
      return guarded([&] {
        // Every report is read (and validated) before the database is touched.
        std::vector<nlohmann::json> docs;
        for (const auto& f : a->reports) docs.push_back(load_report(f));
        HistoryStore store = HistoryStore::open(a->db, true);
        int64_t added = 0;
        for (size_t i = 0; i < docs.size(); ++i) {
          const history::IngestResult r = store.add(docs[i], a->reports[i], !a->candidate);
          added += r.added;
          std::printf("attnbench history: %s %s: run %lld (%s)%s\n", r.added ? "added" : "already stored",
                      printable(a->reports[i]).c_str(), static_cast<long long>(r.run_id), r.content_hash.c_str(),
                      r.added ? (", " + std::to_string(r.rows) + " rows").c_str() : "");
        }
        std::printf("attnbench history: %lld of %zu reports added to %s\n", static_cast<long long>(added),
                    docs.size(), printable(store.label()).c_str());
        return kExitOk;
      });
    };
  });
}

/// Options shared by show and report.
struct SeriesArgs {
  std::string db;
  history::SeriesFilter filter;
  int window = 10, min_runs = 3;
  std::string max_slowdown = "5%";
};

void add_series_options(CLI::App* cmd, SeriesArgs& a) {
  add_db_option(cmd, a.db);
  cmd->add_option("--case", a.filter.case_regex, "only cases whose id matches this regular expression");
  cmd->add_option("--backend", a.filter.backend, "only this backend");
  cmd->add_option("--machine", a.filter.machine_regex, "only machines whose label matches this regular expression");
  cmd->add_option("--pass", a.filter.pass, "only this pass (fwd, bwd, fwd_bwd)");
  cmd->add_option("--figure", a.filter.figure, "the figure: median_ms, q1_ms, min_ms, useful_tflops, x_floor, ...")
      ->capture_default_str();
  cmd->add_option("--history-window", a.window, "regression marks: last N accepted runs")->capture_default_str();
  cmd->add_option("--history-min-runs", a.min_runs, "regression marks: at least this many runs")->capture_default_str();
  cmd->add_option("--max-slowdown", a.max_slowdown, "regression marks: minimum relative threshold")->capture_default_str();
}

std::vector<history::TrendSeries> read_series(const SeriesArgs& a, HistoryStore& store) {
  history::HistoryGateOptions o;
  o.window = a.window;
  o.min_runs = a.min_runs;
  o.compare.max_slowdown = parse_fraction(a.max_slowdown, "--max-slowdown");
  return history::load_series(store, a.filter, o);
}

void add_history_show(CLI::App* history, Action& action) {
  struct Args : SeriesArgs {
    int last = 8;
    std::string json_out;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = history->add_subcommand("show", "a table of one figure over revisions, per case, backend and machine");
  add_series_options(cmd, *a);
  cmd->add_option("--last", a->last, "show the last N revisions (0 = all)")->capture_default_str();
  cmd->add_option("--json", a->json_out, "also write the series (every point) as JSON to this file");
  cmd->callback([a, &action] {
    action = [a]() -> int {
      return guarded([&] {
        HistoryStore store = HistoryStore::open(a->db, false);
        const auto series = read_series(*a, store);
        std::fputs(history::trend_table(series, a->filter.figure, a->last).c_str(), stdout);
        if (!a->json_out.empty()) write_text(a->json_out, history::series_json(series).dump(1) + "\n");
        return kExitOk;
      });
    };
  });
}

void add_history_report(CLI::App* history, Action& action) {
  struct Args : SeriesArgs {
    std::string output = "trend.html", title = "attnbench trends";
    bool no_charts = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = history->add_subcommand("report", "one self-contained HTML page of trend charts, regressions marked");
  add_series_options(cmd, *a);
  cmd->add_option("-o,--output", a->output, "HTML file to write")->capture_default_str();
  cmd->add_option("--title", a->title, "page title")->capture_default_str();
  cmd->add_flag("--no-charts", a->no_charts, "do not inline the Vega bundles (tables only)");
  cmd->callback([a, &action] {
    action = [a]() -> int {
      return guarded([&] {
        HistoryStore store = HistoryStore::open(a->db, false);
        const auto series = read_series(*a, store);
        write_text(a->output, history::render_trend_page(series, a->filter.figure, a->title, store.label(),
                                                         !a->no_charts));
        std::printf("attnbench history: wrote %s (%zu series)\n", printable(a->output).c_str(), series.size());
        return kExitOk;
      });
    };
  });
}

void add_history_runs(CLI::App* history, Action& action) {
  auto db = std::make_shared<std::string>();
  auto* cmd = history->add_subcommand("runs", "list the stored runs, newest first");
  add_db_option(cmd, *db);
  cmd->callback([db, &action] {
    action = [db]() -> int {
      return guarded([&] {
        HistoryStore store = HistoryStore::open(*db, false);
        for (const auto& r : store.list_runs())
          std::printf("%lld  %s  %s  %s  %lld rows%s  %s\n", static_cast<long long>(r.id), r.started.c_str(),
                      printable(r.git_revision).c_str(), r.content_hash.substr(0, 12).c_str(),
                      static_cast<long long>(r.rows), r.accepted ? "" : " (candidate)",
                      printable(r.machine_label).c_str());
        return kExitOk;
      });
    };
  });
}

/// now - `days` days as ISO 8601 UTC.
std::string days_ago(double days) {
  const auto t = std::chrono::system_clock::now() -
                 std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(days * 86400.0));
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void add_history_prune(CLI::App* history, Action& action) {
  struct Args {
    std::string db;
    int64_t keep = -1;
    double older_than_days = -1;
    bool dry_run = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = history->add_subcommand("prune", "delete old runs (by age and/or count per machine), in one transaction");
  add_db_option(cmd, a->db);
  cmd->add_option("--keep", a->keep, "keep the newest N runs of each machine");
  cmd->add_option("--older-than", a->older_than_days, "delete runs started more than DAYS days ago");
  cmd->add_flag("--dry-run", a->dry_run, "list what would be deleted, delete nothing");
  cmd->callback([a, &action] {
    action = [a]() -> int {
      if (a->keep < 0 && a->older_than_days < 0)
        throw InputError("<command line>", "history prune", "give --keep N and/or --older-than DAYS");
      if (a->older_than_days != -1 && !(a->older_than_days >= 0))
        throw InputError("<command line>", "--older-than", "must be >= 0 days");
      return guarded([&] {
        HistoryStore store = HistoryStore::open(a->db, true);
        const auto doomed = store.prune(a->older_than_days >= 0 ? days_ago(a->older_than_days) : std::string(),
                                        a->keep >= 0 ? std::optional<int64_t>(a->keep) : std::nullopt, a->dry_run);
        for (const auto& r : doomed)
          std::printf("%s run %lld  %s  %s\n", a->dry_run ? "would delete" : "deleted", static_cast<long long>(r.id),
                      r.started.c_str(), printable(r.git_revision).c_str());
        std::printf("attnbench history: %s %zu runs\n", a->dry_run ? "would delete" : "deleted", doomed.size());
        return kExitOk;
      });
    };
  });
}

void add_history_migrate(CLI::App* history, Action& action) {
  auto db = std::make_shared<std::string>();
  auto* cmd = history->add_subcommand("migrate", "create the database or bring its schema to this version");
  add_db_option(cmd, *db);
  cmd->callback([db, &action] {
    action = [db]() -> int {
      return guarded([&] {
        HistoryStore store = HistoryStore::open(*db, true);
        std::printf("attnbench history: %s at schema version %d\n", printable(store.label()).c_str(),
                    store.schema_version());
        return kExitOk;
      });
    };
  });
}

}  // namespace

void add_history_command(CLI::App& app, Action& action) {
  auto* history = app.add_subcommand("history", "the results history: every run kept in a database (docs/history.md)");
  history->require_subcommand(1);
  add_history_add(history, action);
  add_history_show(history, action);
  add_history_report(history, action);
  add_history_runs(history, action);
  add_history_prune(history, action);
  add_history_migrate(history, action);
}

void add_history_compare_options(CLI::App* compare, HistoryCompareArgs& args) {
  compare->add_option("--history", args.db,
                      "judge NEW (the one report given) against the last accepted runs of this history database "
                      "(SQLite file or postgresql://...): median and MAD per case, backend, variant and machine");
  compare->add_option("--history-window", args.window, "--history: last N accepted runs")->capture_default_str();
  compare->add_option("--history-min-runs", args.min_runs,
                      "--history: fewer runs and the two-report test decides the timing")
      ->capture_default_str();
  compare->add_option("--history-k", args.k, "--history: threshold in robust standard deviations (1.4826 MAD)")
      ->capture_default_str();
}

int run_history_compare(const HistoryCompareArgs& args, const CompareOptions& options, const std::string& new_file,
                        const std::string& markdown_file, const std::string& json_file, bool quiet) {
  return guarded([&] {
    const nlohmann::json neu = load_report(new_file);
    HistoryStore store = HistoryStore::open(args.db, false);
    history::HistoryGateOptions o;
    o.compare = options;
    o.window = args.window;
    o.min_runs = args.min_runs;
    o.k = args.k;
    const history::HistoryGate g = history::compare_with_history(store, neu, new_file, o);
    const std::string md = g.markdown();
    if (!quiet) std::fputs(md.c_str(), stdout);
    if (!markdown_file.empty()) write_text(markdown_file, md);
    if (!json_file.empty()) write_text(json_file, g.to_json().dump(1) + "\n");
    std::fprintf(stderr,
                 "attnbench compare --history: %lld gate failure(s); against history %lld SLOWER, %lld FASTER, %lld "
                 "SAME, %lld NO_HISTORY\n",
                 static_cast<long long>(g.regressions()), static_cast<long long>(g.count(history::HistoryVerdict::slower)),
                 static_cast<long long>(g.count(history::HistoryVerdict::faster)),
                 static_cast<long long>(g.count(history::HistoryVerdict::same)),
                 static_cast<long long>(g.count(history::HistoryVerdict::no_history)));
    return g.exit_code();
  });
}

}  // namespace attnbench::cli
