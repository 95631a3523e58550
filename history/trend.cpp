// Trends of the results history: see trend.hpp.
#include "history/trend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>

#include "harness/model/errors.hpp"
#include "harness/model/printable.hpp"
#include "reports/html_report.hpp"

namespace attnbench::history {

using json = nlohmann::json;

namespace {

std::regex make_regex(const std::string& text, const char* option) {
  try {
    return std::regex(text, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw InputError("<command line>", option, "not a regular expression: \"" + text + "\" (" + e.what() + ")");
  }
}

/// Judge every point against the accepted points before it (the threshold is
/// symmetric, so where larger is better SLOWER and FASTER swap).
void mark(TrendSeries& s, bool larger_worse, const HistoryGateOptions& o) {
  std::vector<double> before;  // accepted values, newest first
  for (TrendPoint& p : s.points) {
    const std::vector<double> window(before.begin(),
                                     before.begin() + std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(before.size()), o.window));
    HistoryVerdict v = judge_against(window, p.value, o).verdict;
    if (!larger_worse && v == HistoryVerdict::slower) v = HistoryVerdict::faster;
    else if (!larger_worse && v == HistoryVerdict::faster) v = HistoryVerdict::slower;
    p.verdict = v;
    if (p.accepted && (p.status == "pass" || p.status == "unchecked")) before.insert(before.begin(), p.value);
  }
}

}  // namespace

int64_t TrendSeries::regressions() const {
  return std::count_if(points.begin(), points.end(), [](const TrendPoint& p) { return p.verdict == HistoryVerdict::slower; });
}

bool larger_is_worse(const std::string& figure) {
  return (figure.size() > 3 && figure.compare(figure.size() - 3, 3, "_ms") == 0) || figure == "x_floor" ||
         figure == "rel_stddev";
}

std::vector<TrendSeries> load_series(HistoryStore& store, const SeriesFilter& f, const HistoryGateOptions& o) {
  const std::regex case_re = make_regex(f.case_regex, "--case"), machine_re = make_regex(f.machine_regex, "--machine");
  std::string sql =
      "SELECT res.case_id, res.case_key, res.backend, res.variant, r.machine, r.machine_label, fg.pass, r.id, "
      "r.git_revision, r.started, r.accepted, res.status, fg.value FROM attnbench_figures fg JOIN attnbench_results "
      "res ON res.id = fg.result_id JOIN attnbench_runs r ON r.id = res.run_id WHERE fg.name = $1";
  std::vector<DbValue> params = {f.figure};
  if (!f.backend.empty()) {
    sql += " AND res.backend = $2";
    params.push_back(f.backend);
  }
  if (!f.pass.empty()) {
    sql += " AND fg.pass = $" + std::to_string(params.size() + 1);
    params.push_back(f.pass);
  }
  sql += " ORDER BY r.started, r.id";
  std::map<std::string, TrendSeries> by_key;
  for (const auto& r : store.db().query(sql, params)) {
    const std::string case_id = as_text(r[0]), machine_label = as_text(r[5]);
    if (!f.case_regex.empty() && !std::regex_search(case_id, case_re)) continue;
    if (!f.machine_regex.empty() && !std::regex_search(machine_label, machine_re)) continue;
    const std::string key = case_id + '\x1f' + as_text(r[2]) + '\x1f' + as_text(r[3]) + '\x1f' + as_text(r[4]) +
                            '\x1f' + as_text(r[6]) + '\x1f' + as_text(r[1]);
    TrendSeries& s = by_key[key];
    if (s.points.empty()) s = {case_id, as_text(r[1]), as_text(r[2]), as_text(r[3]), as_text(r[4]), machine_label, as_text(r[6]), {}};
    s.points.push_back({as_int(r[7]), as_text(r[8]), as_text(r[9]), as_text(r[11]), as_int(r[10]) != 0,
                        as_double(r[12]), HistoryVerdict::no_history});
  }
  std::vector<TrendSeries> out;
  for (auto& [k, s] : by_key) {
    mark(s, larger_is_worse(f.figure), o);
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

/// Revisions in the order of their first run (started, then run id).
std::vector<std::string> revision_order(const std::vector<TrendSeries>& series) {
  std::map<std::string, std::pair<std::string, int64_t>> first;  // revision -> (started, run id)
  for (const auto& s : series)
    for (const auto& p : s.points) {
      auto [it, fresh] = first.emplace(p.git_revision, std::make_pair(p.started, p.run_id));
      if (!fresh) it->second = std::min(it->second, std::make_pair(p.started, p.run_id));
    }
  std::vector<std::string> revs;
  for (const auto& [rev, at] : first) revs.push_back(rev);
  std::sort(revs.begin(), revs.end(), [&](const auto& a, const auto& b) { return first[a] < first[b]; });
  return revs;
}

/// Median of a revision's values in `s` with its mark, "-" when it has none.
std::string cell(const TrendSeries& s, const std::string& rev) {
  std::vector<double> v;
  bool slower = false, faster = false;
  for (const auto& p : s.points)
    if (p.git_revision == rev) {
      v.push_back(p.value);
      slower |= p.verdict == HistoryVerdict::slower;
      faster |= p.verdict == HistoryVerdict::faster;
    }
  if (v.empty()) return "-";
  return fmt("%.4g", robust_stats(v).median) + (slower ? "!" : faster ? "+" : "");
}

/// "[n]", the machine legend's tag.
std::string machine_tag(int64_t n) {
  std::string tag(1, '[');
  tag += std::to_string(n);
  tag += ']';
  return tag;
}

}  // namespace

std::string trend_table(const std::vector<TrendSeries>& series, const std::string& figure, int last_revisions) {
  std::ostringstream os;
  if (series.empty()) return "no stored series match (figure " + printable(figure) + ")\n";
  std::vector<std::string> revs = revision_order(series);
  if (last_revisions > 0 && static_cast<int>(revs.size()) > last_revisions)
    revs.erase(revs.begin(), revs.end() - last_revisions);
  std::vector<std::string> machines;
  for (const auto& s : series)
    if (std::find(machines.begin(), machines.end(), s.machine_label) == machines.end()) machines.push_back(s.machine_label);
  std::vector<std::vector<std::string>> table;
  std::vector<std::string> head = {"case", "backend", "variant", "pass", "machine"};
  for (const auto& r : revs) head.push_back(r.substr(0, 12));
  table.push_back(head);
  for (const auto& s : series) {
    const auto m = std::find(machines.begin(), machines.end(), s.machine_label) - machines.begin();
    std::vector<std::string> line = {printable(s.case_id), printable(s.backend), printable(s.variant), s.pass,
                                     machine_tag(m + 1)};
    for (const auto& r : revs) line.push_back(cell(s, r));
    table.push_back(line);
  }
  std::vector<size_t> width(head.size(), 0);
  for (const auto& line : table)
    for (size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  os << printable(figure) << " per revision (oldest to newest; ! = regression, + = improvement against the "
                             "accepted runs before it)\n";
  for (const auto& line : table) {
    for (size_t c = 0; c < line.size(); ++c) {
      const std::string pad(width[c] - line[c].size(), ' ');
      os << (c ? "  " : "") << (c < 5 ? line[c] + pad : pad + line[c]);
    }
    os << "\n";
  }
  os << "machines:\n";
  for (size_t i = 0; i < machines.size(); ++i) os << "  [" << i + 1 << "] " << printable(machines[i]) << "\n";
  return os.str();
}

json series_json(const std::vector<TrendSeries>& series) {
  json out = json::array();
  for (const auto& s : series) {
    json pts = json::array();
    for (const auto& p : s.points)
      pts.push_back({{"run_id", p.run_id}, {"git_revision", p.git_revision}, {"started", p.started},
                     {"status", p.status}, {"accepted", p.accepted}, {"value", p.value},
                     {"verdict", to_string(p.verdict)}});
    out.push_back({{"case_id", s.case_id}, {"case_key", s.case_key}, {"backend", s.backend}, {"variant", s.variant},
                   {"machine", s.machine_label}, {"pass", s.pass}, {"regressions", s.regressions()},
                   {"points", pts}});
  }
  return out;
}

namespace {

/// One chart per (case, backend): a line per (variant, pass, machine), points of
/// regressions circled by a large black triangle.
json trend_charts(const std::vector<TrendSeries>& series, const std::string& figure) {
  std::map<std::pair<std::string, std::string>, json> data;
  for (const auto& s : series)
    for (const auto& p : s.points) {
      const std::string line = s.variant + " | " + s.pass + " | " + s.machine_label.substr(0, 40);
      data[{s.case_id, s.backend}].push_back({{"started", p.started},      {"revision", p.git_revision},
                                              {"value", p.value},          {"series", line},
                                              {"verdict", to_string(p.verdict)},
                                              {"regression", p.verdict == HistoryVerdict::slower}});
    }
  json charts = json::array();
  int i = 0;
  for (const auto& [key, pts] : data) {
    const json x = {{"field", "started"}, {"type", "temporal"}, {"title", "run started"}};
    const json y = {{"field", "value"}, {"type", "quantitative"}, {"title", figure}, {"scale", {{"zero", false}}}};
    const json tooltip = json::array({{{"field", "revision"}}, {{"field", "started"}}, {{"field", "series"}},
                                      {{"field", "value"}, {"format", ".4g"}}, {{"field", "verdict"}}});
    charts.push_back(html::chart_entry(
        "trend_" + std::to_string(i++), key.first + " on " + key.second + ": " + figure + " over runs",
        {{"data", {{"values", pts}}},
         {"width", 520},
         {"height", 200},
         {"layer",
          json::array({{{"mark", {{"type", "line"}, {"point", true}}},
                        {"encoding", {{"x", x}, {"y", y}, {"color", {{"field", "series"}, {"type", "nominal"}}},
                                      {"tooltip", tooltip}}}},
                       {{"transform", json::array({{{"filter", "datum.regression"}}})},
                        {"mark", {{"type", "point"}, {"filled", false}, {"size", 220}, {"strokeWidth", 2},
                                  {"color", "#000"}, {"shape", "triangle-up"}}},
                        {"encoding", {{"x", x}, {"y", y}, {"tooltip", tooltip}}}}})}}));
  }
  return charts;
}

}  // namespace

std::string render_trend_page(const std::vector<TrendSeries>& series, const std::string& figure,
                              const std::string& title, const std::string& database, bool inline_charts,
                              const std::string& node_modules) {
  using html::escape_html;
  int64_t regressions = 0, points = 0;
  std::ostringstream body;
  body << "<h2 id=\"series-heading\">Series</h2><div class=\"table-wrap\"><table id=\"summary\" class=\"sortable\">"
          "<thead><tr><th>case</th><th>backend</th><th>variant</th><th>pass</th><th>machine</th><th>runs</th>"
          "<th>latest</th><th>regressions</th></tr></thead><tbody>";
  std::ostringstream reg;
  for (const auto& s : series) {
    regressions += s.regressions();
    points += static_cast<int64_t>(s.points.size());
    body << "<tr><td>" << escape_html(s.case_id) << "</td><td>" << escape_html(s.backend) << "</td><td>"
         << escape_html(s.variant) << "</td><td>" << escape_html(s.pass) << "</td><td>" << escape_html(s.machine_label)
         << "</td><td data-v=\"" << s.points.size() << "\">" << s.points.size() << "</td><td data-v=\""
         << fmt("%.9g", s.points.back().value) << "\">" << fmt("%.4g", s.points.back().value) << "</td><td data-v=\""
         << s.regressions() << "\">" << s.regressions() << "</td></tr>";
    for (const auto& p : s.points)
      if (p.verdict == HistoryVerdict::slower)
        reg << "<tr class=\"regression\"><td>" << escape_html(s.case_id) << "</td><td>" << escape_html(s.backend)
            << "</td><td>" << escape_html(s.variant) << "</td><td>" << escape_html(s.pass) << "</td><td>"
            << escape_html(p.git_revision) << "</td><td>" << escape_html(p.started) << "</td><td>"
            << fmt("%.4g", p.value) << "</td></tr>";
  }
  body << "</tbody></table></div>";
  body << "<h2 id=\"regressions-heading\">Regressions</h2>";
  if (regressions == 0) body << "<p id=\"no-regressions\">No point is a regression against the accepted runs before it.</p>";
  else
    body << "<table id=\"regressions\" class=\"kv\"><thead><tr><th>case</th><th>backend</th><th>variant</th><th>pass</th>"
            "<th>revision</th><th>started</th><th>" << escape_html(figure) << "</th></tr></thead><tbody>"
         << reg.str() << "</tbody></table>";
  html::HtmlOptions opt;
  opt.inline_charts = inline_charts;
  opt.node_modules = node_modules;
  const std::string subtitle = escape_html(database) + " &middot; " + escape_html(figure) + " &middot; " +
                               std::to_string(series.size()) + " series, " + std::to_string(points) + " points, " +
                               std::to_string(regressions) + " regressions";
  return html::render_chart_page(title, subtitle, body.str(), trend_charts(series, figure), opt);
}

}  // namespace attnbench::history
