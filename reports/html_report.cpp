// The HTML report: see html_report.hpp. The page skeleton, CSS and the small
// script that draws the charts are in html_template.cpp.
#include "reports/html_report.hpp"
#include "reports/report.hpp"
#include "reports/summary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "harness/model/errors.hpp"

namespace attnbench::html {

extern const char* const kReportTemplate;  // html_template.cpp

namespace {

using json = nlohmann::json;

constexpr const char* kBundles[] = {"vega/build/vega.min.js", "vega-lite/build/vega-lite.min.js",
                                    "vega-embed/build/vega-embed.min.js"};
constexpr size_t kMaxNoteChars = 300;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

double num(const json& j, const char* key, double fallback = NAN) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return fallback;
}

std::string str(const json& j, const char* key, const std::string& fallback = "") {
  if (j.is_object() && j.contains(key) && j[key].is_string()) return j[key].get<std::string>();
  return fallback;
}

json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Short mask label from a problem's mask list, e.g. "causal+window(64,0)".
std::string mask_label(const json& problem) {
  if (!problem.is_object() || !problem.contains("mask") || !problem["mask"].is_array()) return "?";
  std::string out;
  for (const auto& m : problem["mask"]) {
    const std::string kind = str(m, "kind", "?");
    std::string part = kind;
    if (kind == "sliding_window")
      part = "window(" + fmt("%.0f", num(m, "left", -1)) + "," + fmt("%.0f", num(m, "right", -1)) + ")";
    else if (kind == "block_sparse")
      part = "block_sparse(" + fmt("%.2g", num(m, "density", 1)) + ")";
    else if (kind == "prefix_lm")
      part = "prefix_lm(" + fmt("%.0f", num(m, "prefix_len", 0)) + ")";
    out += (out.empty() ? "" : "+") + part;
  }
  if (out.empty()) out = "full";
  if (problem.contains("score_mod") && problem["score_mod"].is_object()) {
    const std::string sm = str(problem["score_mod"], "kind", "none");
    if (sm != "none") out += " [" + sm + "]";
  }
  return out;
}

/// A stored derived figure of a row: derived.<pass>.<key>, or null (json).
json figure(const json& row, const char* pass, const char* key) {
  if (!row.contains("derived") || !row["derived"].is_object()) return nullptr;
  const json& d = row["derived"];
  if (!d.contains(pass) || !d[pass].is_object() || !d[pass].contains(key)) return nullptr;
  const json& v = d[pass][key];
  return v.is_number() || v.is_string() ? v : json(nullptr);
}

double median_of(const json& row, const char* pass) {
  if (!row.contains("timing") || !row["timing"].is_object() || !row["timing"].contains(pass)) return NAN;
  return num(row["timing"][pass], "median_ms");
}

/// A small label after a fail badge: what kind of failure (check.failure_class).
std::string failure_class_label(const std::string& c) {
  if (c == "fully_masked_rows")
    return " <span class=\"fclass\" title=\"numerics fine on every row that attends keys; fully masked rows break "
           "the convention (O/dQ = 0, LSE = -inf)\">fully masked rows only</span>";
  if (c == "numerics") return " <span class=\"fclass\" title=\"errors beyond the rule on rows that attend keys\">wrong numbers</span>";
  return "";
}

std::string status_class(const std::string& s) {
  if (s == "pass") return "st-pass";
  if (s == "fail") return "st-fail";
  if (s == "unsupported") return "st-unsup";
  if (s == "unchecked") return "st-unchecked";
  return "st-error";
}

std::string cell_num(const json& v, const char* f) {
  if (!v.is_number()) return "<td class=\"na\">&ndash;</td>";
  return "<td data-v=\"" + fmt("%.9g", v.get<double>()) + "\">" + fmt(f, v.get<double>()) + "</td>";
}

/// Replace {{NAME}} markers of `tpl` in one pass (inserted text is never rescanned).
std::string fill(const std::string& tpl, const std::map<std::string, std::string>& values) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t a = tpl.find("{{", pos);
    if (a == std::string::npos) break;
    size_t b = tpl.find("}}", a + 2);
    if (b == std::string::npos) break;
    const std::string key = tpl.substr(a + 2, b - a - 2);
    auto it = values.find(key);
    if (it == values.end()) {
      out += tpl.substr(pos, b + 2 - pos);
    } else {
      out += tpl.substr(pos, a - pos);
      out += it->second;
    }
    pos = b + 2;
  }
  out += tpl.substr(pos);
  return out;
}

void flatten(const json& j, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
  } else if (j.is_array() && !j.empty() && (j.front().is_object() || j.front().is_array())) {
    for (size_t i = 0; i < j.size(); ++i) flatten(j[i], prefix + "[" + std::to_string(i) + "]", out);
  } else if (j.is_string()) {
    out.emplace_back(prefix, j.get<std::string>());
  } else {
    out.emplace_back(prefix, j.dump());
  }
}

std::string kv_table(const json& j) {
  std::vector<std::pair<std::string, std::string>> rows;
  flatten(j, "", rows);
  std::string out = "<table class=\"kv\"><tbody>";
  for (const auto& [k, v] : rows)
    out += "<tr><th>" + escape_html(k) + "</th><td>" + escape_html(v) + "</td></tr>";
  return out + "</tbody></table>";
}

}  // namespace

// ------------------------------------------------------------------ escaping

std::string escape_html(std::string_view s) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string json_for_script(const json& j) {
  const std::string text = j.dump(-1, ' ', true, json::error_handler_t::replace);  // ASCII only
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    // <, > and & occur only inside JSON strings, where \uXXXX is equivalent.
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else out += c;
  }
  return out;
}

std::string script_safe(std::string js) {
  auto lower_at = [&](size_t i) { return static_cast<char>(std::tolower(static_cast<unsigned char>(js[i]))); };
  std::string out;
  out.reserve(js.size());
  for (size_t i = 0; i < js.size(); ++i) {
    if (js[i] == '<' && i + 1 < js.size()) {
      bool script_close = js[i + 1] == '/' && i + 8 <= js.size();
      for (size_t k = 0; script_close && k < 6; ++k) script_close = lower_at(i + 2 + k) == "script"[k];
      if (script_close) {  // "</script" -> "<\/script"
        out += "<\\/";
        ++i;
        continue;
      }
      if (js.compare(i + 1, 3, "!--") == 0) {  // "<!--" -> "<\!--"
        out += "<\\!";
        ++i;
        continue;
      }
    }
    out += js[i];
  }
  return out;
}

// ------------------------------------------------------------------ assets

std::string find_chart_assets(std::string* why) {
  std::vector<std::string> candidates;
  if (const char* e = std::getenv("ATTNBENCH_NODE_MODULES"); e && *e) candidates.emplace_back(e);
  candidates.push_back(std::string(ATTNBENCH_SOURCE_DIR) + "/reports/node_modules");
  std::string reasons;
  for (const auto& dir : candidates) {
    bool all = true;
    for (const char* b : kBundles) {
      if (!std::filesystem::exists(std::filesystem::path(dir) / b)) {
        reasons += (reasons.empty() ? "" : "; ") + (std::filesystem::path(dir) / b).string() + " missing";
        all = false;
        break;
      }
    }
    if (all) return dir;
  }
  if (why) *why = reasons;
  return "";
}

// ------------------------------------------------------------------ figures

nlohmann::json derive_rows(const json& report, const std::string& baseline) {
  std::map<std::string, const json*> base_rows;
  if (!baseline.empty())
    for (const auto& r : report.at("results"))
      if (row_variant(r) == baseline) base_rows[str(r, "case_id")] = &r;

  json out = json::array();
  for (const auto& r : report.at("results")) {
    json d;
    const json problem = r.value("problem", json());
    const json work = r.value("work", json());
    d["case_id"] = str(r, "case_id");
    d["backend"] = row_variant(r);  // the variant's label: "flex[block=64]" (the backend at defaults: its name)
    d["status"] = str(r, "status");
    d["mask"] = mask_label(problem);
    d["seq_q"] = finite_or_null(num(problem, "seq_q"));
    d["seq_k"] = finite_or_null(num(problem, "seq_k"));
    d["config"] = "B" + fmt("%.0f", num(problem, "batch", 0)) + " H" + fmt("%.0f", num(problem, "heads_q", 0)) + "/" +
                  fmt("%.0f", num(problem, "heads_kv", 0)) + " D" + fmt("%.0f", num(problem, "head_dim", 0)) + " " +
                  str(problem, "dtype", "?") + " " + str(problem, "layout", "");
    const double fwd = median_of(r, "fwd"), bwd = median_of(r, "bwd"), fb = median_of(r, "fwd_bwd");
    d["fwd_ms"] = finite_or_null(fwd);
    d["bwd_ms"] = finite_or_null(bwd);
    d["fwd_bwd_ms"] = finite_or_null(fb);
    // Throughput and roofline figures as the derive step stored them (reports/derive.hpp).
    for (const char* pass : {"fwd", "bwd", "fwd_bwd"}) {
      const std::string p = pass;
      d["useful_tflops_" + p] = figure(r, pass, "useful_tflops");
      d["executed_tflops_" + p] = figure(r, pass, "executed_tflops");
      d["pct_gemm_" + p] = figure(r, pass, "pct_gemm");
      d["pct_bw_" + p] = figure(r, pass, "pct_copy");
      d["floor_ms_" + p] = figure(r, pass, "floor_ms");
      d["x_floor_" + p] = figure(r, pass, "x_floor");
      const json bound = figure(r, pass, "bound");
      d["bound_" + p] = bound.is_string() ? bound.get<std::string>() : std::string();
    }
    d["tile_efficiency"] = finite_or_null(num(work, "tile_efficiency"));
    d["packing_ratio"] = (r.contains("packing") && r["packing"].is_object())
                             ? finite_or_null(num(r["packing"], "packing_ratio"))
                             : json(nullptr);
    const json check = r.value("check", json());
    d["worst_ratio"] = finite_or_null(num(check, "worst_ratio"));
    json tensors = json::array();
    if (check.is_object() && check.contains("tensors") && check["tensors"].is_array())
      for (const auto& t : check["tensors"])
        if (t.is_object() && t.contains("ratio") && t["ratio"].is_number())
          tensors.push_back({{"tensor", str(t, "name")}, {"ratio", t["ratio"]}, {"pass", t.value("pass", false)}});
    d["tensors"] = tensors;
    d["speedup_fwd"] = nullptr;
    d["speedup_fwd_bwd"] = nullptr;
    if (auto it = base_rows.find(str(r, "case_id")); it != base_rows.end()) {
      d["speedup_fwd"] = finite_or_null(median_of(*it->second, "fwd") / fwd);
      d["speedup_fwd_bwd"] = finite_or_null(median_of(*it->second, "fwd_bwd") / fb);
    }
    std::string note = str(r, "reason");
    if (note.empty()) note = str(r, "message");
    if (note.empty()) note = str(check, "failure_detail");
    if (const std::string det = determinism_note(r); !det.empty()) note = note.empty() ? det : note + "; " + det;
    d["note"] = note;
    // fail rows: "fully_masked_rows" (numerics fine, convention differs) or "numerics".
    d["failure_class"] = str(check, "failure_class");
    out.push_back(d);
  }
  return out;
}

// ------------------------------------------------------------------ mask thumbnails

std::string mask_svg(const json& thumb, int px) {
  if (!thumb.is_object() || !thumb.contains("rows") || !thumb["rows"].is_array() || thumb["rows"].empty()) return "";
  std::vector<std::string> rows;
  for (const auto& r : thumb["rows"]) {
    if (!r.is_string()) return "";
    rows.push_back(r.get<std::string>());
  }
  const size_t w = rows.front().size();
  if (w == 0) return "";
  for (const auto& r : rows)
    if (r.size() != w || r.find_first_not_of("#+.") != std::string::npos) return "";
  const size_t h = rows.size();
  const double scale = static_cast<double>(px) / static_cast<double>(std::max(w, h));
  std::ostringstream os;
  os << "<svg class=\"mask\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fmt("%.0f", w * scale) << "\" height=\""
     << fmt("%.0f", h * scale) << "\" viewBox=\"0 0 " << w << " " << h
     << "\" shape-rendering=\"crispEdges\" role=\"img\"><title>BlockMask: dark = full tile, grey = partial, light = "
        "skipped</title><rect width=\""
     << w << "\" height=\"" << h << "\" fill=\"#f1f3f5\"/>";
  for (size_t y = 0; y < h; ++y) {
    for (size_t x = 0; x < w;) {
      const char c = rows[y][x];
      size_t e = x;
      while (e < w && rows[y][e] == c) ++e;
      if (c != '.')
        os << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << (e - x) << "\" height=\"1\" fill=\""
           << (c == '#' ? "#1f4e79" : "#8fb3d9") << "\"/>";
      x = e;
    }
  }
  os << "</svg>";
  return os.str();
}

// ------------------------------------------------------------------ kernel timelines

std::string kernel_colour(int64_t index) {
  static const char* const palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                        "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return palette[((index % 10) + 10) % 10];
}

std::string timeline_svg(const json& pass, int width) {
  if (!pass.is_object() || !pass.contains("timeline") || !pass["timeline"].is_array() || pass["timeline"].empty())
    return "";
  const double span = num(pass, "span_us", 0);
  if (!(span > 0)) return "";
  const json kernels = pass.contains("kernels") && pass["kernels"].is_array() ? pass["kernels"] : json::array();
  // Lanes: the report's stream count, clamped so that a malformed value cannot
  // make a huge picture; bars on lanes outside it are skipped.
  const double streams = num(pass, "streams", 1);
  const int64_t lanes = std::isfinite(streams) ? static_cast<int64_t>(std::clamp(streams, 1.0, 64.0)) : 1;
  const double label_w = 64, lane_h = 14, gap = 4, top = 4, axis_h = 18;
  const double plot_w = std::max(100.0, static_cast<double>(width) - label_w - 8);
  const double height = top + static_cast<double>(lanes) * (lane_h + gap) + axis_h;
  std::ostringstream os;
  os << "<svg class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\""
     << fmt("%.0f", height) << "\" role=\"img\"><title>Kernel timeline: one lane per stream, bars coloured by "
        "kernel</title>";
  for (int64_t l = 0; l < lanes; ++l)
    os << "<text x=\"0\" y=\"" << fmt("%.1f", top + static_cast<double>(l) * (lane_h + gap) + lane_h - 3)
       << "\" font-size=\"11\">stream " << l << "</text>";
  for (const auto& e : pass["timeline"]) {
    if (!e.is_array() || e.size() != 4 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
        !e[2].is_number() || !e[3].is_number())
      continue;
    const auto k = e[0].get<int64_t>();
    const auto lane = e[1].get<int64_t>();
    const double start = e[2].get<double>(), dur = e[3].get<double>();
    if (lane < 0 || lane >= lanes || k < 0 || !std::isfinite(start) || !std::isfinite(dur)) continue;
    const std::string name = static_cast<size_t>(k) < kernels.size() && kernels[static_cast<size_t>(k)].is_object()
                                 ? str(kernels[static_cast<size_t>(k)], "name")
                                 : "?";
    os << "<rect x=\"" << fmt("%.2f", label_w + start / span * plot_w) << "\" y=\""
       << fmt("%.1f", top + static_cast<double>(lane) * (lane_h + gap)) << "\" width=\""
       << fmt("%.2f", std::max(0.5, dur / span * plot_w)) << "\" height=\"" << fmt("%.0f", lane_h) << "\" fill=\""
       << kernel_colour(k) << "\"><title>" << escape_html(name) << ": start " << fmt("%.1f", start) << " us, "
       << fmt("%.1f", dur) << " us</title></rect>";
  }
  const double axis_y = top + static_cast<double>(lanes) * (lane_h + gap);
  os << "<line x1=\"" << label_w << "\" x2=\"" << fmt("%.1f", label_w + plot_w) << "\" y1=\"" << fmt("%.1f", axis_y)
     << "\" y2=\"" << fmt("%.1f", axis_y) << "\" stroke=\"#868e96\"/>";
  for (int i = 0; i <= 4; ++i) {
    const double x = label_w + plot_w * i / 4.0;
    os << "<text x=\"" << fmt("%.1f", x) << "\" y=\"" << fmt("%.1f", axis_y + 13) << "\" font-size=\"10\" text-anchor=\""
       << (i == 0 ? "start" : (i == 4 ? "end" : "middle")) << "\">" << fmt("%.0f", span * i / 4.0) << " us</text>";
  }
  os << "</svg>";
  return os.str();
}

// ------------------------------------------------------------------ the page
//
// render_report() fills the {{NAME}} markers of kReportTemplate; each helper
// below renders one of them (or one part of one), in the order the page shows
// them. `rows` is always derive_rows()'s array, `results` the report's own rows.

namespace {

/// Throws InputError (field "--baseline") when `baseline` is set and no row of
/// `results` (the report's "results" array) has that backend; the message lists
/// the backends that do occur.
void check_baseline(const json& results, const std::string& baseline) {
  std::set<std::string> backends;
  for (const auto& r : results) backends.insert(row_variant(r));
  if (!baseline.empty() && !backends.count(baseline)) {
    std::string known;
    for (const auto& b : backends) known += (known.empty() ? "" : ", ") + b;
    throw InputError("<command line>", "--baseline",
                     "backend \"" + baseline + "\" has no rows in the report (backends: " + known + ")");
  }
}

/// {{SUMMARY}}: the counts line above the table, one badge per status with its
/// number of rows; fail rows split into wrong numbers and rows that break only
/// the fully-masked-row convention (check.failure_class), and a remark on
/// unchecked rows.
std::string summary_counts_html(const json& rows) {
  std::map<std::string, int> counts;
  for (const auto& r : rows) counts[r["status"].get<std::string>()]++;
  std::ostringstream summary;
  summary << "<p class=\"counts\">" << rows.size() << " rows:";
  std::map<std::string, int> fail_classes;
  for (const auto& r : rows)
    if (r["status"] == "fail") fail_classes[r["failure_class"].get<std::string>()]++;
  for (const auto& [s, n] : counts) {
    summary << " <span class=\"badge " << status_class(s) << "\">" << escape_html(s) << " " << n << "</span>";
    if (s == "fail" && (fail_classes.count("fully_masked_rows") || fail_classes.count("numerics")))
      summary << " (" << fail_classes["numerics"] << " wrong numbers, " << fail_classes["fully_masked_rows"]
              << " only the fully-masked-row convention)";
    if (s == "unchecked") summary << " (outputs not checked: correctness unknown)";
  }
  summary << "</p>";
  return summary.str();
}

/// The opening of the summary table up to <tbody>: one header cell per column,
/// each with a title saying what it holds (medians in ms; useful and executed
/// TFLOP/s; % of the measured GEMM and copy ceilings; the roofline floor in ms,
/// the time as a multiple of it and its bound; the speed-up columns only when
/// `baseline` is not "").
std::string summary_table_head(const std::string& baseline) {
  std::ostringstream table;
  table << "<table id=\"summary\" class=\"sortable\"><thead><tr>"
        << "<th>case</th><th>backend</th><th>status</th><th>mask</th>"
        << "<th title=\"median, ms\">fwd ms</th><th title=\"median, ms\">bwd ms</th><th title=\"median, ms\">fwd+bwd ms</th>"
        << "<th title=\"useful FLOPs / fwd time\">useful TFLOP/s fwd</th>"
        << "<th title=\"executed FLOPs (computed tiles) / fwd time\">executed TFLOP/s fwd</th>"
        << "<th title=\"useful FLOPs / bwd time\">useful TFLOP/s bwd</th>"
        << "<th title=\"useful fwd+bwd FLOPs / fwd+bwd time\">useful TFLOP/s fwd+bwd</th>"
        << "<th title=\"useful fwd TFLOP/s / measured bf16 GEMM ceiling\">% GEMM peak fwd</th>"
        << "<th title=\"fewest fwd bytes / fwd time / measured copy bandwidth\">% copy BW fwd</th>"
        << "<th title=\"roofline floor of the fwd pass: max(fewest bytes / measured copy bandwidth, useful FLOPs / "
           "measured GEMM rate), ms\">floor ms fwd</th>"
        << "<th title=\"fwd median / fwd roofline floor\">x floor fwd</th>"
        << "<th title=\"which term sets the fwd floor\">bound fwd</th>"
        << "<th title=\"roofline floor of fwd + bwd (bytes and FLOPs of both passes), ms\">floor ms fwd+bwd</th>"
        << "<th title=\"fwd+bwd median / its roofline floor\">x floor fwd+bwd</th>"
        << "<th title=\"which term sets the fwd+bwd floor\">bound fwd+bwd</th>"
        << "<th title=\"useful pairs / executed pairs\">tile eff.</th>";
  if (!baseline.empty())
    table << "<th title=\"baseline time / this time\">speed-up fwd vs " << escape_html(baseline)
          << "</th><th>speed-up fwd+bwd vs " << escape_html(baseline) << "</th>";
  table << "<th title=\"largest e / max(e_lp, ulp) over the checked tensors\">worst error ratio</th>"
        << "<th>note</th></tr></thead><tbody>";
  return table.str();
}

/// One <tr> of the summary table for derive_rows() object `r`, in the columns of
/// summary_table_head() (speed-ups only when `have_baseline`); missing figures
/// are a dash, the note is cut to kMaxNoteChars with the whole of it as tooltip.
std::string summary_table_row(const json& r, bool have_baseline) {
  const std::string st = r["status"].get<std::string>();
  std::string note = r["note"].get<std::string>();
  const std::string short_note = note.size() > kMaxNoteChars ? note.substr(0, kMaxNoteChars) + "..." : note;
  std::ostringstream table;
  table << "<tr><td>" << escape_html(r["case_id"].get<std::string>()) << "</td><td>"
        << escape_html(r["backend"].get<std::string>()) << "</td><td><span class=\"badge " << status_class(st)
        << "\">" << escape_html(st) << "</span>" << failure_class_label(r["failure_class"].get<std::string>())
        << "</td><td>" << escape_html(r["mask"].get<std::string>()) << "</td>"
        << cell_num(r["fwd_ms"], "%.4g") << cell_num(r["bwd_ms"], "%.4g") << cell_num(r["fwd_bwd_ms"], "%.4g")
        << cell_num(r["useful_tflops_fwd"], "%.3g") << cell_num(r["executed_tflops_fwd"], "%.3g")
        << cell_num(r["useful_tflops_bwd"], "%.3g") << cell_num(r["useful_tflops_fwd_bwd"], "%.3g")
        << cell_num(r["pct_gemm_fwd"], "%.1f%%") << cell_num(r["pct_bw_fwd"], "%.1f%%")
        << cell_num(r["floor_ms_fwd"], "%.4g") << cell_num(r["x_floor_fwd"], "%.2fx")
        << "<td>" << escape_html(r["bound_fwd"].get<std::string>()) << "</td>"
        << cell_num(r["floor_ms_fwd_bwd"], "%.4g") << cell_num(r["x_floor_fwd_bwd"], "%.2fx")
        << "<td>" << escape_html(r["bound_fwd_bwd"].get<std::string>()) << "</td>"
        << cell_num(r["tile_efficiency"], "%.3f");
  if (have_baseline) table << cell_num(r["speedup_fwd"], "%.2fx") << cell_num(r["speedup_fwd_bwd"], "%.2fx");
  table << cell_num(r["worst_ratio"], "%.3g") << "<td class=\"note\" title=\"" << escape_html(note) << "\">"
        << escape_html(short_note) << "</td></tr>";
  return table.str();
}

/// {{TABLE}}: the sortable summary table, one row per derive_rows() object, with
/// speed-up columns against `baseline` ("" = none).
std::string summary_table_html(const json& rows, const std::string& baseline) {
  std::string table = summary_table_head(baseline);
  for (const auto& r : rows) table += summary_table_row(r, !baseline.empty());
  return table + "</tbody></table>";
}

/// {{CASES}}: one figure per case id, in order of first appearance in `results`:
/// the BlockMask thumbnail of the first row of that case that has one (mask_svg()),
/// and a caption with the mask label, sequence lengths, dtype, layout and the
/// packing ratio when the row has one.
std::string cases_html(const json& results) {
  std::ostringstream cases;
  std::set<std::string> seen;
  std::map<std::string, const json*> first_row;
  for (const auto& r : results) {
    const std::string id = str(r, "case_id");
    if (!first_row.count(id) || (!first_row[id]->contains("mask_thumbnail") && r.contains("mask_thumbnail")))
      first_row[id] = &r;
  }
  cases << "<div class=\"cases\">";
  for (const auto& r : results) {
    const std::string id = str(r, "case_id");
    if (!seen.insert(id).second) continue;
    const json& row = *first_row[id];
    const json problem = row.value("problem", json());
    std::string svg = mask_svg(row.value("mask_thumbnail", json()));
    cases << "<figure class=\"case\">" << (svg.empty() ? "<div class=\"nomask\">no mask picture</div>" : svg)
          << "<figcaption><b>" << escape_html(id) << "</b><br>" << escape_html(mask_label(problem)) << "<br>"
          << "Sq " << fmt("%.0f", num(problem, "seq_q", 0)) << ", Sk " << fmt("%.0f", num(problem, "seq_k", 0))
          << ", " << escape_html(str(problem, "dtype")) << " " << escape_html(str(problem, "layout"));
    if (row.contains("packing") && row["packing"].is_object())
      cases << "<br>packing ratio " << fmt("%.3f", num(row["packing"], "packing_ratio", 0));
    cases << "</figcaption></figure>";
  }
  cases << "</div>";
  return cases.str();
}

/// The kernels table of one traced pass `t` (a summarize_trace() object) named
/// `pass`: one line per kernel, memset or copy with its colour swatch
/// (kernel_colour()), calls, total us, share of the pass in %, grid (kernels) or
/// bytes (memsets and copies), CTAs, registers and shared memory bytes.
std::string kernel_table_html(const char* pass, const json& t) {
  std::ostringstream kernels;
  kernels << "<table class=\"kernel-table\"><thead><tr><th>" << pass
          << "</th><th>kernel</th><th>calls</th><th>total us</th><th>share</th><th>grid</th><th>CTAs</th>"
             "<th>regs</th><th>smem bytes</th></tr></thead><tbody>";
  const json list = t.contains("kernels") && t["kernels"].is_array() ? t["kernels"] : json::array();
  int64_t group = -1;
  for (const auto& k : list) {
    ++group;
    if (!k.is_object()) continue;
    const bool is_kernel = str(k, "kind") == "kernel";
    std::string grid;
    if (is_kernel && k.contains("grid") && k["grid"].is_array())
      for (const auto& g : k["grid"]) grid += (grid.empty() ? "" : " x ") + fmt("%.0f", g.is_number() ? g.get<double>() : 0.0);
    kernels << "<tr><td>" << escape_html(str(k, "kind")) << "</td><td class=\"kname\"><span style=\"display:inline-block;"
               "width:9px;height:9px;margin-right:4px;background:"
            << kernel_colour(group) << "\"></span>" << escape_html(str(k, "name"))
            << "</td>" << cell_num(k.value("calls", json()), "%.0f") << cell_num(k.value("total_us", json()), "%.1f")
            << cell_num(k.contains("share") && k["share"].is_number() ? json(100.0 * k["share"].get<double>()) : json(),
                        "%.1f%%")
            << "<td>" << escape_html(is_kernel ? grid : fmt("%.0f bytes", num(k, "bytes", 0))) << "</td>"
            << cell_num(k.value("ctas", json()), "%.0f") << cell_num(k.value("registers", json()), "%.0f")
            << cell_num(k.value("shared_bytes", json()), "%.0f") << "</tr>";
  }
  kernels << "</tbody></table>";
  return kernels.str();
}

/// One traced pass `t` named `pass` of a row's kernel trace: its error when the
/// trace failed, else a line with span, busy and summed device time (us) and the
/// stream count, the timeline (timeline_svg()) and kernel_table_html().
std::string kernel_pass_html(const char* pass, const json& t) {
  std::ostringstream kernels;
  if (t.contains("error")) {
    kernels << "<p>" << pass << ": " << escape_html(str(t, "error")) << "</p>";
    return kernels.str();
  }
  kernels << "<p class=\"subtitle\">" << pass << ": span " << fmt("%.1f", num(t, "span_us", 0)) << " us, busy "
          << fmt("%.1f", num(t, "busy_us", 0)) << " us, activities summed " << fmt("%.1f", num(t, "device_us", 0))
          << " us over " << fmt("%.0f", num(t, "streams", 0)) << " stream(s)";
  if (num(t, "timeline_dropped", 0) > 0 && t.contains("timeline") && t["timeline"].is_array())
    kernels << "; timeline shows the first " << t["timeline"].size() << " activities";
  kernels << "</p>" << timeline_svg(t) << kernel_table_html(pass, t);
  return kernels.str();
}

/// One report row's kernel trace `kt` (extra.kernel_trace) under `label`: a line
/// with the reason when the row was not traced ("unavailable"), else a collapsible
/// block whose summary counts activities and device time per pass and whose body
/// is kernel_pass_html() for fwd and bwd. `traced` counts the rows traced.
std::string kernel_trace_html(const std::string& label, const json& kt, int& traced) {
  std::ostringstream kernels;
  if (kt.contains("unavailable")) {
    kernels << "<p class=\"subtitle\">" << escape_html(label) << ": not traced ("
            << escape_html(str(kt, "unavailable")) << ")</p>";
    return kernels.str();
  }
  ++traced;
  kernels << "<details class=\"kernels\"><summary>" << escape_html(label);
  for (const char* pass : {"fwd", "bwd"})
    if (kt.contains(pass) && kt[pass].is_object() && !kt[pass].contains("error"))
      kernels << " &middot; " << pass << ": " << fmt("%.0f", num(kt[pass], "activities", 0)) << " activities, "
              << fmt("%.1f", num(kt[pass], "device_us", 0)) << " us on the device";
  kernels << "</summary>";
  for (const char* pass : {"fwd", "bwd"})
    if (kt.contains(pass) && kt[pass].is_object()) kernels << kernel_pass_html(pass, kt[pass]);
  kernels << "</details>";
  return kernels.str();
}

/// {{KERNELS}}: the Kernels section (attnbench run --kernel-trace), a heading and
/// kernel_trace_html() for each row of `results` with an extra.kernel_trace object;
/// "" when no row has one.
std::string kernels_html(const json& results) {
  std::string kernels;
  int traced = 0;
  for (const auto& r : results) {
    if (!r.contains("extra") || !r["extra"].is_object() || !r["extra"].contains("kernel_trace")) continue;
    const json& kt = r["extra"]["kernel_trace"];
    if (!kt.is_object()) continue;
    kernels += kernel_trace_html(str(r, "case_id") + " | " + row_variant(r), kt, traced);
  }
  if (kernels.empty()) return "";
  return "<h2 id=\"kernels-heading\">Kernels</h2><p class=\"subtitle\">One untimed forward and backward per "
         "row traced with CUPTI (<code>attnbench run --kernel-trace</code>): every kernel, memset and copy "
         "the pass launched in this process, largest device time first; " +
         std::to_string(traced) + " rows traced.</p>" + kernels;
}

// ---- charts: Vega-Lite specs with inline data; each builder returns null when
// its chart has no data.


/// Useful TFLOP/s (fwd and fwd+bwd) against Sq, one line per backend and config,
/// faceted by pass and mask, on a log2 axis ticked at the measured lengths only.
json throughput_chart(const json& rows) {
  json pts = json::array();
  for (const auto& r : rows)
    for (const char* pass : {"fwd", "fwd_bwd"}) {
      const auto& t = r[std::string("useful_tflops_") + pass];
      if (!t.is_number() || !r["seq_q"].is_number()) continue;
      pts.push_back({{"backend", r["backend"]}, {"mask", r["mask"]}, {"seq_q", r["seq_q"]}, {"tflops", t},
                     {"pass", pass}, {"config", r["config"]}, {"case_id", r["case_id"]}});
    }
  json seqs = json::array();  // axis ticks at the measured lengths only
  for (const auto& p : pts)
    if (std::find(seqs.begin(), seqs.end(), p["seq_q"]) == seqs.end()) seqs.push_back(p["seq_q"]);
  if (pts.empty()) return nullptr;
  return chart_entry("throughput_vs_seq", "Useful TFLOP/s against sequence length, per backend and mask",
                     {{"data", {{"values", pts}}},
                      {"facet", {{"row", {{"field", "pass"}, {"type", "nominal"}, {"title", "pass"}}},
                                 {"column", {{"field", "mask"}, {"type", "nominal"}, {"title", "mask"}}}}},
                      {"spec",
                       {{"width", 260},
                        {"height", 180},
                        {"mark", {{"type", "line"}, {"point", true}}},
                        {"encoding",
                         {{"x", {{"field", "seq_q"}, {"type", "quantitative"}, {"scale", {{"type", "log"}, {"base", 2}}},
                                 {"axis", {{"values", seqs}, {"format", "d"}, {"labelAngle", 0}}},
                                 {"title", "sequence length (Sq)"}}},
                          {"y", {{"field", "tflops"}, {"type", "quantitative"}, {"title", "useful TFLOP/s"}}},
                          {"color", {{"field", "backend"}, {"type", "nominal"}}},
                          {"detail", {{"field", "config"}, {"type", "nominal"}}},
                          {"tooltip", json::array({{{"field", "case_id"}}, {{"field", "backend"}},
                                                   {{"field", "tflops"}, {"format", ".1f"}}, {{"field", "config"}}})}}}}},
                      {"resolve", {{"scale", {{"y", "independent"}}}}}});
}

/// Forward and backward medians (ms) stacked per row that timed both passes.
json fwd_bwd_split_chart(const json& rows) {
  json bars = json::array();
  for (const auto& r : rows) {
    if (!r["fwd_ms"].is_number() || !r["bwd_ms"].is_number()) continue;
    const std::string label = r["case_id"].get<std::string>() + " | " + r["backend"].get<std::string>();
    bars.push_back({{"row", label}, {"part", "forward"}, {"ms", r["fwd_ms"]}, {"order", 0}});
    bars.push_back({{"row", label}, {"part", "backward"}, {"ms", r["bwd_ms"]}, {"order", 1}});
  }
  if (bars.empty()) return nullptr;
  return chart_entry("fwd_bwd_split", "Forward and backward time (medians, ms)",
                     {{"data", {{"values", bars}}},
                      {"width", 520},
                      {"mark", "bar"},
                      {"encoding",
                       {{"y", {{"field", "row"}, {"type", "nominal"}, {"title", nullptr}, {"sort", nullptr}}},
                        {"x", {{"field", "ms"}, {"type", "quantitative"}, {"stack", "zero"}, {"title", "ms"}}},
                        {"color", {{"field", "part"}, {"type", "nominal"}, {"sort", json::array({"forward", "backward"})}}},
                        {"order", {{"field", "order"}, {"type", "ordinal"}}},
                        {"tooltip", json::array({{{"field", "row"}}, {{"field", "part"}}, {{"field", "ms"}, {"format", ".4g"}}})}}}});
}

/// Packing ratio (real / padded tokens) against useful TFLOP/s, fwd+bwd where
/// timed else fwd, for the rows of packed cases.
json packing_chart(const json& rows) {
  json pts = json::array();
  for (const auto& r : rows) {
    if (!r["packing_ratio"].is_number()) continue;
    const json& t = r["useful_tflops_fwd_bwd"].is_number() ? r["useful_tflops_fwd_bwd"] : r["useful_tflops_fwd"];
    if (!t.is_number()) continue;
    pts.push_back({{"backend", r["backend"]}, {"packing_ratio", r["packing_ratio"]}, {"tflops", t},
                   {"case_id", r["case_id"]}, {"mask", r["mask"]}});
  }
  if (pts.empty()) return nullptr;
  return chart_entry("packing_vs_throughput", "Packing ratio against useful TFLOP/s (fwd+bwd where timed, else fwd)",
                     {{"data", {{"values", pts}}},
                      {"width", 420},
                      {"height", 260},
                      {"mark", {{"type", "point"}, {"filled", true}, {"size", 60}}},
                      {"encoding",
                       {{"x", {{"field", "packing_ratio"}, {"type", "quantitative"}, {"title", "packing ratio (real / padded tokens)"},
                               {"scale", {{"zero", false}}}}},
                        {"y", {{"field", "tflops"}, {"type", "quantitative"}, {"title", "useful TFLOP/s"}}},
                        {"color", {{"field", "backend"}, {"type", "nominal"}}},
                        {"shape", {{"field", "mask"}, {"type", "nominal"}}},
                        {"tooltip", json::array({{{"field", "case_id"}}, {{"field", "backend"}},
                                                 {{"field", "packing_ratio"}, {"format", ".3f"}},
                                                 {{"field", "tflops"}, {"format", ".1f"}}})}}}});
}

/// Error ratio e / max(e_lp, ulp) per checked tensor and backend, with rules at
/// the correctness rule's r = 2 (O, LSE) and r = 3 (gradients).
json error_ratio_chart(const json& rows) {
  json pts = json::array();
  for (const auto& r : rows)
    for (const auto& t : r["tensors"])
      pts.push_back({{"backend", r["backend"]}, {"tensor", t["tensor"]}, {"ratio", t["ratio"]}, {"pass", t["pass"]},
                     {"case_id", r["case_id"]}});
  if (pts.empty()) return nullptr;
  const json order = json::array({"O", "LSE", "dQ", "dK", "dV", "dBias"});
  return chart_entry(
      "error_ratios", "Error ratio e / max(e_lp, ulp) per tensor (rule: r = 2 for O and LSE, 3 for gradients)",
      {{"width", 420},
       {"height", 260},
       {"layer",
        json::array(
            {{{"data", {{"values", pts}}},
              {"mark", {{"type", "point"}, {"filled", true}, {"size", 50}}},
              {"encoding",
               {{"x", {{"field", "tensor"}, {"type", "nominal"}, {"sort", order}, {"title", "tensor"}}},
                {"xOffset", {{"field", "backend"}, {"type", "nominal"}}},
                {"y", {{"field", "ratio"}, {"type", "quantitative"}, {"title", "error ratio"}}},
                {"color", {{"field", "backend"}, {"type", "nominal"}}},
                {"shape", {{"field", "pass"}, {"type", "nominal"}, {"title", "tensor passed"}}},
                {"tooltip", json::array({{{"field", "case_id"}}, {{"field", "backend"}}, {{"field", "tensor"}},
                                         {{"field", "ratio"}, {"format", ".3g"}}})}}}},
             {{"data", {{"values", json::array({{{"y", 2}, {"label", "r = 2"}}, {{"y", 3}, {"label", "r = 3"}}})}}},
              {"mark", {{"type", "rule"}, {"strokeDash", json::array({4, 4})}, {"color", "#888"}}},
              {"encoding", {{"y", {{"field", "y"}, {"type", "quantitative"}}}}}}})}});
}

/// The page's charts, in page order, leaving out those without data.
json chart_specs(const json& rows) {
  json charts = json::array();
  for (json c : {throughput_chart(rows), fwd_bwd_split_chart(rows), packing_chart(rows), error_ratio_chart(rows)})
    if (!c.is_null()) charts.push_back(std::move(c));
  return charts;
}

/// What the chart section puts into the page.
struct ChartSection {
  std::string html;     ///< {{CHARTS}}: a box per chart, or a notice saying why there are none
  std::string bundles;  ///< {{BUNDLES}}: the inlined Vega, Vega-Lite and vega-embed scripts, or ""
  json specs;           ///< {{CHART_SPECS}}: the chart list the page script draws ([] without bundles)
};

/// The chart section for `charts` (chart_specs()): the bundles come from
/// options.node_modules or find_chart_assets(); without them (or with
/// inline_charts false) a notice says how to get them and no chart is kept.
/// Throws std::runtime_error when a bundle that exists cannot be read.
ChartSection chart_section(json charts, const HtmlOptions& opt) {
  ChartSection out;
  std::string why;
  const std::string assets = !opt.inline_charts ? std::string()
                             : !opt.node_modules.empty() ? opt.node_modules
                                                         : find_chart_assets(&why);
  if (opt.inline_charts && !opt.node_modules.empty()) {
    for (const char* b : kBundles)
      if (!std::filesystem::exists(std::filesystem::path(opt.node_modules) / b))
        why = (std::filesystem::path(opt.node_modules) / b).string() + " missing";
  }
  const bool have_assets = opt.inline_charts && !assets.empty() && why.empty();
  if (charts.empty()) {
    out.html = "<p class=\"notice\">No chart has data: no row was timed.</p>";
  } else if (!have_assets) {
    out.html = "<p class=\"notice\" id=\"charts-missing\">The charts need the Vega bundles: run <code>npm ci</code> in "
               "<code>reports/</code> (or <code>ci/install_browser.sh</code>) and render the report again" +
               (why.empty() ? std::string() : " (" + escape_html(why) + ")") + ".</p>";
    charts = json::array();
  } else {
    for (size_t i = 0; i < charts.size(); ++i)
      out.html += "<section class=\"chart-box\"><h3>" + escape_html(charts[i]["title"].get<std::string>()) +
                  "</h3><div class=\"chart\" id=\"chart-" + std::to_string(i) + "\" data-chart=\"" +
                  escape_html(charts[i]["name"].get<std::string>()) + "\"></div></section>";
    for (const char* b : kBundles)
      out.bundles += "<script>" + script_safe(read_file((std::filesystem::path(assets) / b).string())) + "</script>\n";
  }
  out.specs = std::move(charts);
  return out;
}

/// {{ENVIRONMENT}}: key/value tables of the run (command, git revision, times,
/// scenario, merged_from), the measured ceilings, the measurement policy (when
/// stored) and the environment.
std::string environment_html(const json& report) {
  std::ostringstream envs;
  json run = {{"command", report.value("command", json())},
              {"git_revision", report.value("git_revision", json())},
              {"started", report.value("started", json())},
              {"finished", report.value("finished", json())},
              {"scenario", report.value("scenario", json::object())}};
  if (report.contains("merged_from")) run["merged_from"] = report["merged_from"];
  envs << "<h3>Run</h3>" << kv_table(run);
  envs << "<h3>Ceilings</h3>"
       << (report.contains("ceilings") && report["ceilings"].is_object() ? kv_table(report["ceilings"])
                                                                         : "<p>not measured</p>");
  if (report.contains("measurement")) envs << "<h3>Measurement policy</h3>" << kv_table(report["measurement"]);
  envs << "<h3>Environment</h3>" << kv_table(report.value("environment", json::object()));
  return envs.str();
}

/// {{SUBTITLE}} (markup): GPU name, git revision, start time, the source file
/// when given, and a warning when the run did not finish (partial report).
std::string subtitle_html(const json& report, const HtmlOptions& opt) {
  const json environment = report.value("environment", json::object());
  const json gpu = environment.value("gpu", json::object());
  // each part escaped; the separators are ours
  std::string subtitle = "GPU: " + escape_html(str(gpu, "name", "unknown")) + " &middot; git " +
             escape_html(str(report, "git_revision", "unknown")) + " &middot; started " +
             escape_html(str(report, "started", "?"));
  if (!opt.source_file.empty()) subtitle += " &middot; " + escape_html(opt.source_file);
  if (!report.contains("finished") || report["finished"].is_null())
    subtitle += " &middot; <b>run not finished (partial report)</b>";
  return subtitle;
}

/// {{CEILINGS}} (plain text, escaped by the caller): the measured bf16 GEMM rate
/// (TFLOP/s) and copy bandwidth (GB/s), or a line saying they were not measured.
std::string ceiling_line(const json& report) {
  const json ceil = report.value("ceilings", json());
  if (ceil.is_object() && ceil.value("measured", false))
    return "Measured ceilings: bf16 GEMM " + fmt("%.0f", num(ceil, "gemm_bf16_tflops", 0)) +
           " TFLOP/s, device copy " + fmt("%.0f", num(ceil, "copy_gbps", 0)) + " GB/s.";
  return "Ceilings not measured: fractions of peak are blank.";
}

}  // namespace

json chart_entry(const std::string& name, const std::string& heading, json spec) {
  spec["$schema"] = "https://vega.github.io/schema/vega-lite/v6.json";
  return {{"name", name}, {"title", heading}, {"spec", spec}};
}

std::string render_chart_page(const std::string& title, const std::string& subtitle_html, const std::string& body_html,
                              const json& charts, const HtmlOptions& opt) {
  // The report's own head (style) and tail (chart list, bundles, script) around a new body.
  const std::string tpl = kReportTemplate;
  const size_t body = tpl.find("<body>");
  const size_t tail = tpl.find("<script type=\"application/json\" id=\"attnbench-charts\">");
  if (body == std::string::npos || tail == std::string::npos)
    throw std::logic_error("render_chart_page: the report template lost its <body> or chart list");
  const std::string page = tpl.substr(0, body + 6) +
                           "\n<header>\n  <h1>{{TITLE}}</h1>\n  <div class=\"subtitle\">{{SUBTITLE}}</div>\n</header>\n"
                           "{{BODY}}\n<h2 id=\"charts-heading\">Charts</h2>\n<div class=\"charts\">{{CHARTS}}</div>\n\n" +
                           tpl.substr(tail);
  const ChartSection cs = chart_section(charts, opt);
  return fill(page, {{"TITLE", escape_html(title)},
                     {"SUBTITLE", subtitle_html},
                     {"BODY", body_html},
                     {"CHARTS", cs.html},
                     {"CHART_SPECS", json_for_script(cs.specs)},
                     {"BUNDLES", cs.bundles}});
}

std::string render_report(const json& report, const HtmlOptions& opt) {
  const json& results = report.at("results");
  check_baseline(results, opt.baseline_backend);
  const json rows = derive_rows(report, opt.baseline_backend);
  const json scenario = report.value("scenario", json::object());
  const std::string title =
      !opt.title.empty() ? opt.title : "attnbench report: " + str(scenario, "name", "unnamed scenario");
  const std::string summary = summary_counts_html(rows);
  const std::string table = summary_table_html(rows, opt.baseline_backend);
  const std::string cases = cases_html(results);
  const std::string kernels = kernels_html(results);
  const ChartSection charts = chart_section(chart_specs(rows), opt);
  return fill(kReportTemplate,
              {{"TITLE", escape_html(title)},
               {"SUBTITLE", subtitle_html(report, opt)},
               {"SUMMARY", summary},
               {"CEILINGS", escape_html(ceiling_line(report))},
               {"TABLE", table},
               {"CASES", cases},
               {"KERNELS", kernels},
               {"CHARTS", charts.html},
               {"ENVIRONMENT", environment_html(report)},
               {"CHART_SPECS", json_for_script(charts.specs)},
               {"BUNDLES", charts.bundles}});
}

}  // namespace attnbench::html
