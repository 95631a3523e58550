#include "reports/summary.hpp"

#include "reports/report.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <unordered_map>

#include "harness/model/printable.hpp"

namespace attnbench {
namespace {

std::string num(double v, const char* fmt = "%.3g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

int64_t count_field(const nlohmann::json& t, const char* key) {
  const auto it = t.find(key);
  return it != t.end() && it->is_number() ? it->get<int64_t>() : 0;
}

/// Why a `fail` row failed, tensor by tensor.
std::string fail_origin(const nlohmann::json& row) {
  const auto check = row.find("check");
  if (check == row.end() || !check->is_object() || !check->contains("tensors")) return "check failed (no details)";
  std::string out;
  for (const auto& t : check->at("tensors")) {
    if (t.value("pass", true)) continue;
    std::string why;
    if (int64_t n = count_field(t, "nan_mismatch")) why = std::to_string(n) + " NaN/inf class mismatches";
    else if (int64_t n2 = count_field(t, "unwritten")) why = std::to_string(n2) + " elements never written";
    else if (int64_t n3 = count_field(t, "masked_nonzero")) why = std::to_string(n3) + " nonzero on fully masked rows";
    else if (t.contains("ratio") && t["ratio"].is_number() && t.contains("r") && t["r"].is_number())
      why = "error " + num(t["ratio"].get<double>()) + "x max(e_lp, ulp), allowed " + num(t["r"].get<double>()) + "x";
    else why = "outside the rule";
    out += (out.empty() ? "" : "; ") + t.value("name", std::string("?")) + ": " + why;
  }
  return out.empty() ? "check failed (no failing tensor listed)" : out;
}

std::string first_line(std::string s) {
  s = s.substr(0, s.find('\n'));
  if (s.size() > 200) s = s.substr(0, 197) + "...";
  return s;
}

/// Median of `pass` of a row, or a negative value when absent.
double median_of(const nlohmann::json& row, const char* pass) {
  const auto t = row.find("timing");
  if (t == row.end() || !t->is_object()) return -1.0;
  const auto p = t->find(pass);
  if (p == t->end() || !p->is_object()) return -1.0;
  const auto m = p->find("median_ms");
  return m != p->end() && m->is_number() ? m->get<double>() : -1.0;
}

/// What the winner of a case is picked from: a passing row's variant and medians.
struct PassingRow {
  std::string variant;
  double fwd_bwd_ms = -1.0, fwd_ms = -1.0;  ///< negative: not timed
};

CaseWinner pick_winner(const std::string& id, const std::vector<PassingRow>& rows) {
  CaseWinner w;
  w.case_id = id;
  for (const char* pass : {"fwd_bwd", "fwd"}) {
    const bool fb = std::string(pass) == "fwd_bwd";
    std::vector<std::pair<double, std::string>> ranked;
    for (const auto& r : rows)
      if ((fb ? r.fwd_bwd_ms : r.fwd_ms) >= 0.0) ranked.emplace_back(fb ? r.fwd_bwd_ms : r.fwd_ms, r.variant);
    if (ranked.empty()) continue;
    std::sort(ranked.begin(), ranked.end());
    w.pass_name = pass;
    w.backend = ranked[0].second;
    w.median_ms = ranked[0].first;
    if (ranked.size() > 1) w.runner_up = ranked[1].second, w.runner_up_ms = ranked[1].first;
    break;
  }
  return w;
}

/// printable() of a report string, cut to `max` characters (a name can be long).
std::string shown(const std::string& s, size_t max = 200) {
  std::string p = printable(s);
  if (p.size() > max) p = p.substr(0, max - 3) + "...";
  return p;
}

}  // namespace

std::string determinism_note(const nlohmann::json& row) {
  const auto ex = row.find("extra");
  if (ex == row.end() || !ex->is_object()) return "";
  const auto d = ex->find("deterministic"), e = ex->find("expected_deterministic");
  if (d == ex->end() || e == ex->end() || !d->is_boolean() || !e->is_boolean()) return "";
  if (e->get<bool>() && !d->get<bool>())
    return "NOT DETERMINISTIC: the backend claims bitwise determinism but two runs differed";
  return "";
}

namespace {

/// The summary built one row at a time (summarize_report(), summarize_report_file()):
/// a row's counts and notes are taken as it comes; per case only the passing
/// rows' variants and medians are kept, for the winners.
class SummaryBuilder {
 public:
  /// The parts of a row add() reads (median_of(), determinism_note(),
  /// fail_origin()), besides its key (case_id, backend, variant), as
  /// stream_report() takes them.
  static const nlohmann::json& parts() {
    static const nlohmann::json p = {
        {"status", true}, {"reason", true}, {"message", true},
        {"timing", {{"fwd", {{"median_ms", true}}}, {"fwd_bwd", {{"median_ms", true}}}}},
        {"extra", {{"deterministic", true}, {"expected_deterministic", true}}},
        {"check", {{"tensors", {{"pass", true}, {"nan_mismatch", true}, {"unwritten", true}, {"masked_nonzero", true},
                                {"ratio", true}, {"r", true}, {"name", true}}}}}};
    return p;
  }

  void add(const nlohmann::json& row) {
    const std::string id = row.value("case_id", std::string()), backend = row_variant(row),
                      status = row.value("status", std::string());
    auto [at, fresh] = case_at_.emplace(id, passing_.size());
    if (fresh) {
      order_.push_back(id);
      passing_.emplace_back();
    }
    ++s_.rows;
    BackendTally& t = s_.backends[backend];
    if (status == "pass") ++t.pass;
    else if (status == "fail") ++t.fail;
    else if (status == "unsupported") ++t.unsupported;
    else if (status == "error") ++t.error;
    else ++t.other;
    if (status == "pass") passing_[at->second].push_back({backend, median_of(row, "fwd_bwd"), median_of(row, "fwd")});
    if (status == "unsupported") ++s_.unsupported_reasons[backend][first_line(row.value("reason", std::string()))];
    if (const std::string note = determinism_note(row); !note.empty()) s_.determinism.push_back({id, backend, status, note});
    if (status == "pass" || status == "unsupported") return;
    s_.failures.push_back({id, backend, status,
                           status == "fail" ? fail_origin(row) : first_line(row.value("message", std::string("(no message)")))});
  }

  ReportSummary finish() {
    s_.cases = static_cast<int64_t>(order_.size());
    for (size_t i = 0; i < order_.size(); ++i) s_.winners.push_back(pick_winner(order_[i], passing_[i]));
    return std::move(s_);
  }

 private:
  ReportSummary s_;
  std::vector<std::string> order_;                      ///< case ids, first appearance
  std::unordered_map<std::string, size_t> case_at_;     ///< case id -> index in order_
  std::vector<std::vector<PassingRow>> passing_;        ///< per case
};

}  // namespace

ReportSummary summarize_report(const nlohmann::json& report) {
  const auto res = report.find("results");
  if (res == report.end() || !res->is_array()) throw std::invalid_argument("report has no results array");
  SummaryBuilder b;
  for (const auto& row : *res) b.add(row);
  return b.finish();
}

ReportSummary summarize_report_file(const std::string& file) {
  SummaryBuilder b;
  (void)stream_report(file, [&](nlohmann::json&& row, size_t) { b.add(row); }, nullptr, &SummaryBuilder::parts());
  return b.finish();
}

std::string ReportSummary::text(size_t max_failures) const {
  std::string out = "verdict: " + std::to_string(rows) + " rows, " + std::to_string(cases) + " cases, " +
                    std::to_string(backends.size()) + " backends\n";
  size_t w = 7;
  for (const auto& [name, t] : backends) w = std::max(w, shown(name, 64).size());
  char line[512];
  std::snprintf(line, sizeof line, "  %-*s %6s %6s %12s %6s %6s\n", static_cast<int>(w), "backend", "pass", "fail",
                "unsupported", "error", "other");
  out += line;
  for (const auto& [name, t] : backends) {
    std::snprintf(line, sizeof line, "  %-*s %6lld %6lld %12lld %6lld %6lld\n", static_cast<int>(w), shown(name, 64).c_str(),
                  static_cast<long long>(t.pass), static_cast<long long>(t.fail), static_cast<long long>(t.unsupported),
                  static_cast<long long>(t.error), static_cast<long long>(t.other));
    out += line;
  }
  out += "fastest passing backend per case (median time):\n";
  for (const auto& c : winners) {
    out += "  " + shown(c.case_id) + ": ";
    if (c.backend.empty()) {
      out += "no passing row with a timing\n";
      continue;
    }
    out += shown(c.backend, 64) + " " + num(c.median_ms, "%.4g") + " ms (" + c.pass_name + ")";
    if (!c.runner_up.empty() && c.median_ms > 0.0)
      out += ", " + num(c.runner_up_ms / c.median_ms, "%.2f") + "x ahead of " + shown(c.runner_up, 64);
    out += "\n";
  }
  if (failures.empty()) {
    out += "failures: none\n";
  } else {
    out += "failures (" + std::to_string(failures.size()) + "):\n";
    for (size_t i = 0; i < failures.size() && i < max_failures; ++i) {
      const auto& f = failures[i];
      out += "  " + shown(f.case_id) + " / " + shown(f.backend, 64) + ": " + shown(f.status, 32) + ": " + shown(f.where, 400) + "\n";
    }
    if (failures.size() > max_failures)
      out += "  ... and " + std::to_string(failures.size() - max_failures) + " more (see the report)\n";
  }
  if (!determinism.empty()) {
    out += "determinism mismatches (" + std::to_string(determinism.size()) + "):\n";
    for (size_t i = 0; i < determinism.size() && i < max_failures; ++i)
      out += "  " + shown(determinism[i].case_id) + " / " + shown(determinism[i].backend, 64) + ": " +
             determinism[i].where + "\n";
  }
  if (!unsupported_reasons.empty()) out += "unsupported, most frequent reason per backend:\n";
  for (const auto& [backend, reasons] : unsupported_reasons) {
    const auto top = std::max_element(reasons.begin(), reasons.end(),
                                      [](const auto& a, const auto& b) { return a.second < b.second; });
    out += "  " + shown(backend, 64) + ": " + std::to_string(top->second) + "x " + shown(top->first);
    if (reasons.size() > 1) out += " (+" + std::to_string(reasons.size() - 1) + " other reasons)";
    out += "\n";
  }
  return out;
}

}  // namespace attnbench
