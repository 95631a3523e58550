// The self-contained HTML report behind `attnbench report report.json -o report.html`.
//
// One file that opens offline: a summary table (status, times, useful and
// executed TFLOP/s, fraction of the measured ceilings, the roofline floor with
// the time as a multiple of it and its bound, speed-up against a baseline
// backend, worst error ratio; the rates are the rows' stored "derived" figures), Vega-Lite charts (throughput against
// sequence length per backend and mask, the forward/backward split, packing ratio
// against throughput, error ratios per tensor), a thumbnail of each case's
// BlockMask, and the environment.
//
// The Vega, Vega-Lite and vega-embed bundles are read from reports/node_modules
// (installed by `npm ci`, see ci/install_browser.sh) and inlined; without them the
// tables still render and the chart section says how to get the charts.
//
// Every string that comes from the input file is escaped: escape_html() for
// markup, json_for_script() for JSON inside <script> (no "</script", "<!--",
// U+2028 or U+2029 can survive).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace attnbench::html {

/// Options of render_report().
struct HtmlOptions {
  std::string baseline_backend;  ///< speed-ups are relative to this backend ("" = none)
  std::string title;             ///< page title ("" = from the scenario name)
  std::string source_file;       ///< shown in the header
  /// node_modules folder holding vega, vega-lite and vega-embed; "" = look up with
  /// find_chart_assets().
  std::string node_modules;
  bool inline_charts = true;     ///< false: never inline the bundles (tables only)
};

/// The node_modules folder with the three minified bundles: $ATTNBENCH_NODE_MODULES
/// if set, else ATTNBENCH_SOURCE_DIR/reports/node_modules. Returns "" (and the
/// reason in `why`) when a bundle is missing.
std::string find_chart_assets(std::string* why = nullptr);

/// Render the whole page. `report` is a loaded report.json (load_report()).
/// Throws InputError when the baseline backend does not occur in the report, and
/// std::runtime_error when a bundle cannot be read.
std::string render_report(const nlohmann::json& report, const HtmlOptions& options);

/// A chart entry {name, title, spec} of a page's chart list (what render_report()
/// draws), with the Vega-Lite v6 "$schema" set in `spec`.
nlohmann::json chart_entry(const std::string& name, const std::string& heading, nlohmann::json spec);

/// Another page in the report's look (its style and chart script): header with
/// `title` (text) and `subtitle_html` (markup), then `body_html` (markup), then a
/// "Charts" section drawing `charts` (chart_entry() objects; the bundles as in
/// render_report(), else a notice). Used by `attnbench history report`.
/// Throws std::runtime_error when a bundle cannot be read.
std::string render_chart_page(const std::string& title, const std::string& subtitle_html,
                              const std::string& body_html, const nlohmann::json& charts, const HtmlOptions& options);

/// Escape & < > " ' for HTML text and attribute values.
std::string escape_html(std::string_view s);
/// JSON text safe inside a <script> element: ASCII only (U+2028/U+2029 and all
/// non-ASCII as \uXXXX) with <, > and & as \u003c, \u003e, \u0026.
std::string json_for_script(const nlohmann::json& j);
/// A JavaScript bundle made safe for inlining: "</script" and "<!--" (which can
/// only occur inside string literals) become "<\/script" and "<\!--".
std::string script_safe(std::string js);

/// Per-row figures the table and charts show (one object per report row):
/// case_id, backend, status, mask, seq_q, seq_k, config, {fwd,bwd,fwd_bwd}_ms,
/// and per pass P in {fwd, bwd, fwd_bwd}: useful_/executed_tflops_P, pct_gemm_P,
/// pct_bw_P (% of the copy ceiling), floor_ms_P, x_floor_P, bound_P ("" when
/// none) read from the row's stored "derived" figures (reports/derive.hpp; never
/// recomputed here), speedup_{fwd,fwd_bwd} (vs the baseline), worst_ratio,
/// tile_efficiency, packing_ratio; absent figures are null.
nlohmann::json derive_rows(const nlohmann::json& report, const std::string& baseline_backend);

/// Inline SVG of a mask thumbnail (report row "mask_thumbnail"): full cells dark,
/// partial cells mid-grey, empty cells light; each row drawn as runs of equal cells.
/// `px` is the larger side in CSS pixels. "" for a null or malformed thumbnail.
std::string mask_svg(const nlohmann::json& thumbnail, int px = 96);

/// Colour of kernel group `index` of a kernel trace (a 10-colour palette, repeated),
/// shared by the timeline and the swatches of the Kernels table.
std::string kernel_colour(int64_t index);

/// Inline SVG timeline of one traced pass (a summarize_trace() object: "timeline",
/// "kernels", "span_us", "streams"): one lane per stream, one bar per activity
/// coloured by its kernel group, its name, start and duration (us) in a tooltip,
/// and a time axis in microseconds. `width` is in CSS pixels. "" when the pass has
/// no timeline or a zero span; at most 64 lanes; malformed entries (non-integer
/// kernel or lane, a lane outside the lanes, non-finite times) are skipped.
std::string timeline_svg(const nlohmann::json& pass, int width = 960);

}  // namespace attnbench::html
