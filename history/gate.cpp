// The regression gate against history: see gate.hpp for the rule.
#include "history/gate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "harness/measure/measure.hpp"
#include "harness/model/errors.hpp"
#include "reports/report.hpp"

namespace attnbench::history {

using json = nlohmann::json;

namespace {

double median_in_place(std::vector<double>& x) {
  const size_t n = x.size(), mid = n / 2;
  std::nth_element(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(mid), x.end());
  const double hi = x[mid];
  if (n % 2) return hi;
  return (*std::max_element(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(mid)) + hi) / 2.0;
}

}  // namespace

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

RobustStats robust_stats(std::vector<double> x) {
  if (x.empty()) throw std::invalid_argument("robust_stats: no values");
  RobustStats s;
  s.n = static_cast<int64_t>(x.size());
  s.median = median_in_place(x);
  for (double& v : x) v = std::abs(v - s.median);
  s.mad = median_in_place(x);
  return s;
}

const char* to_string(HistoryVerdict v) {
  switch (v) {
    case HistoryVerdict::same: return "SAME";
    case HistoryVerdict::faster: return "FASTER";
    case HistoryVerdict::slower: return "SLOWER";
    case HistoryVerdict::no_history: return "NO_HISTORY";
  }
  return "SAME";
}

HistoryTiming judge_against(const std::vector<double>& history, double new_median, const HistoryGateOptions& o) {
  HistoryTiming t;
  t.new_median_ms = new_median;
  t.history_runs = static_cast<int64_t>(history.size());
  if (history.empty() || t.history_runs < o.min_runs) return t;
  const RobustStats s = robust_stats(history);
  t.center_ms = s.median;
  t.mad_ms = s.mad;
  t.threshold_ms = std::max(o.k * 1.4826 * s.mad, o.compare.max_slowdown * s.median);
  t.ratio = s.median > 0 ? new_median / s.median : 1.0;
  t.modified_z = s.mad > 0 ? 0.6745 * (new_median - s.median) / s.mad : 0.0;
  if (new_median > s.median + t.threshold_ms) t.verdict = HistoryVerdict::slower;
  else if (new_median < s.median - t.threshold_ms) t.verdict = HistoryVerdict::faster;
  else t.verdict = HistoryVerdict::same;
  t.regression = t.verdict == HistoryVerdict::slower;
  return t;
}

int64_t HistoryGate::count(HistoryVerdict v) const {
  return std::count_if(timings.begin(), timings.end(), [v](const HistoryTiming& t) { return t.verdict == v; });
}

int64_t HistoryGate::regressions() const { return count(HistoryVerdict::slower) + two_report.regressions(); }

namespace {

/// The series of `row` on `machine` in accepted runs other than `exclude_hash`,
/// newest first: the latest stored row (any status) and, per pass, the medians
/// of rows that passed or ran unchecked.
struct SeriesHistory {
  json latest_row;                                      ///< null when none
  std::map<std::string, std::vector<double>> medians;   ///< pass -> newest first
};

SeriesHistory series_history(Database& db, const json& row, const std::string& machine,
                             const std::string& exclude_hash, int window) {
  const std::string joins = " FROM attnbench_results res JOIN attnbench_runs r ON r.id = res.run_id";
  const std::string where =
      " WHERE res.case_key = $1 AND res.backend = $2 AND res.variant = $3 AND r.machine = $4 AND r.accepted = 1 AND "
      "r.content_hash <> $5";
  const std::string newest = " ORDER BY r.started DESC, r.id DESC";
  const std::vector<DbValue> params = {case_key(row), row.value("backend", std::string()), variant_key(row), machine,
                                       exclude_hash};
  SeriesHistory h;
  const auto latest = db.query("SELECT res.row_json" + joins + where + newest + " LIMIT 1", params);
  if (!latest.empty()) h.latest_row = json::parse(as_text(latest[0][0]));
  for (const auto& r : db.query("SELECT t.pass, t.median_ms" + joins +
                                    " JOIN attnbench_timings t ON t.result_id = res.id" + where +
                                    " AND res.status IN ('pass', 'unchecked')" + newest,
                                params)) {
    auto& v = h.medians[as_text(r[0])];
    if (static_cast<int>(v.size()) < window) v.push_back(as_double(r[1]));
  }
  return h;
}

}  // namespace

HistoryGate compare_with_history(HistoryStore& store, const json& neu, const std::string& new_file,
                                 const HistoryGateOptions& options) {
  if (options.window < 1)
    throw InputError("<command line>", "--history-window", "must be >= 1, got " + std::to_string(options.window));
  if (options.min_runs < 1)
    throw InputError("<command line>", "--history-min-runs", "must be >= 1, got " + std::to_string(options.min_runs));
  if (!(options.k > 0))
    throw InputError("<command line>", "--history-k", "must be > 0, got " + std::to_string(options.k));
  HistoryGate gate;
  gate.database = store.label();
  gate.new_file = new_file;
  gate.options = options;
  const Machine machine = machine_of(neu);
  gate.machine_label = machine.label;
  const std::string hash = content_hash(neu);
  json base = {{"schema_version", neu.value("schema_version", json(kReportSchemaVersion))},
               {"environment", neu.value("environment", json::object())},
               {"results", json::array()}};
  std::set<std::string> decided;  // row_key|pass judged by history
  const json& results = neu.at("results");
  for (size_t i = 0; i < results.size(); ++i) {
    const json& row = results[i];
    SeriesHistory h = series_history(store.db(), row, machine.key, hash, options.window);
    if (!h.latest_row.is_null()) {
      h.latest_row["case_id"] = row.value("case_id", std::string());  // the same problem under today's id
      base["results"].push_back(std::move(h.latest_row));
      ++gate.rows_with_history;
    }
    const json timing = row.value("timing", json());
    if (!timing.is_object()) continue;
    for (const auto& [pass, t] : timing.items()) {
      if (!t.is_object()) continue;
      const TimingStats s = TimingStats::from_json(t, new_file, "/results/" + std::to_string(i) + "/timing/" + pass);
      if (s.n == 0) continue;
      HistoryTiming ht = judge_against(h.medians[pass], s.median_ms, options);
      ht.case_id = row.value("case_id", std::string());
      ht.backend = row.value("backend", std::string());
      ht.variant = variant_key(row);
      ht.pass = pass;
      if (ht.verdict != HistoryVerdict::no_history) decided.insert(row_key(row) + "|" + pass);
      gate.timings.push_back(std::move(ht));
    }
  }
  gate.two_report = compare_reports(base, neu, "history " + store.label(), new_file, options.compare);
  for (auto& pc : gate.two_report.timings)
    if (decided.count(pc.case_id + "|" + pc.backend + "|" + pc.pass)) {
      pc.regression = false;
      pc.note = "judged against history (not gating here)";
    }
  return gate;
}

// ------------------------------------------------------------------ output

namespace {

void history_table(std::ostringstream& os, const std::vector<const HistoryTiming*>& rows) {
  os << "| case | backend | variant | pass | history median ms | MAD ms | threshold ms | new median ms | change | "
        "modified z | runs |\n|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto* t : rows)
    os << "| " << md_cell(t->case_id) << " | " << md_cell(t->backend) << " | " << md_cell(t->variant) << " | "
       << t->pass << " | " << fmt("%.4g", t->center_ms) << " | " << fmt("%.3g", t->mad_ms) << " | "
       << fmt("%.3g", t->threshold_ms) << " | " << fmt("%.4g", t->new_median_ms) << " | "
       << fmt("%+.1f%%", (t->ratio - 1) * 100) << " | " << fmt("%.2f", t->modified_z) << " | " << t->history_runs
       << " |\n";
  os << "\n";
}

}  // namespace

std::string HistoryGate::markdown() const {
  std::ostringstream os;
  const int64_t reg = regressions();
  os << "## attnbench compare --history: " << (reg ? "REGRESSED" : "OK") << "\n\n";
  os << "- history: `" << md_cell(database) << "` on " << md_cell(machine_label) << "\n";
  os << "- new: `" << md_cell(new_file) << "`\n";
  os << "- rule: SLOWER when the median exceeds the median c of the last " << options.window
     << " accepted runs by more than max(" << fmt("%.3g", options.k) << " * 1.4826 * MAD, "
     << fmt("%.3g", options.compare.max_slowdown * 100) << "% of c); with fewer than " << options.min_runs
     << " runs the two-report test against the latest accepted run decides\n";
  if (rows_with_history == 0)
    os << "- **warning: the history holds no accepted run of this machine for these cases: nothing to compare "
          "against (only failing rows gate)**\n";
  os << "\n";
  os << "| | count |\n|---|---:|\n";
  os << "| rows with history | " << rows_with_history << " |\n";
  for (HistoryVerdict v : {HistoryVerdict::slower, HistoryVerdict::faster, HistoryVerdict::same, HistoryVerdict::no_history})
    os << "| " << to_string(v) << " | " << count(v) << " |\n";
  os << "| two-report gate failures (status, guards, timings without history) | " << two_report.regressions() << " |\n";
  os << "| **gate failures** | **" << reg << "** |\n\n";
  auto pick = [&](HistoryVerdict v) {
    std::vector<const HistoryTiming*> out;
    for (const auto& t : timings)
      if (t.verdict == v) out.push_back(&t);
    std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->ratio > b->ratio; });
    return out;
  };
  if (auto s = pick(HistoryVerdict::slower); !s.empty()) {
    os << "### Regressions against history (SLOWER)\n\n";
    history_table(os, s);
  }
  if (auto s = pick(HistoryVerdict::faster); !s.empty()) {
    os << "### Improvements against history (FASTER)\n\n";
    history_table(os, s);
  }
  os << "### Two-report test against the latest accepted run\n\n";
  std::istringstream cmp(two_report.markdown());
  for (std::string line; std::getline(cmp, line);) os << (line.rfind('#', 0) == 0 ? "##" : "") << line << "\n";
  return os.str();
}

json HistoryGate::to_json() const {
  json j = {{"database", database},   {"new_file", new_file},
            {"machine", machine_label}, {"regressions", regressions()},
            {"rows_with_history", rows_with_history},
            {"options", {{"window", options.window}, {"min_runs", options.min_runs}, {"k", options.k},
                         {"min_rel", options.compare.max_slowdown}}},
            {"timings", json::array()},  {"two_report", two_report.to_json()}};
  for (const auto& t : timings)
    j["timings"].push_back({{"case_id", t.case_id},         {"backend", t.backend},
                            {"variant", t.variant},         {"pass", t.pass},
                            {"verdict", to_string(t.verdict)}, {"history_runs", t.history_runs},
                            {"center_ms", t.center_ms},     {"mad_ms", t.mad_ms},
                            {"threshold_ms", t.threshold_ms}, {"new_median_ms", t.new_median_ms},
                            {"ratio", t.ratio},             {"modified_z", t.modified_z},
                            {"regression", t.regression}});
  return j;
}

}  // namespace attnbench::history
