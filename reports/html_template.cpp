// The page skeleton of the HTML report: markup, CSS and the script that sorts the
// table and draws the charts. Kept as a raw string so the attnbench binary needs
// no data file at run time. Markers {{NAME}} are filled by render_report()
// (html_report.cpp) in one pass; every filled value is already escaped there.
namespace attnbench::html {

extern const char* const kReportTemplate;

const char* const kReportTemplate = R"ATTNBENCH_HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="attnbench report">
<title>{{TITLE}}</title>
<style>
  :root { --fg: #1d2329; --muted: #5f6b76; --line: #d9dee3; --bg-alt: #f6f8fa; }
  body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
         color: var(--fg); margin: 0 auto; padding: 16px 24px 48px; max-width: 1800px; }
  h1 { font-size: 22px; margin: 8px 0 2px; }
  h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
  h3 { font-size: 15px; margin: 16px 0 6px; }
  .subtitle, .counts, .notice { color: var(--muted); }
  .notice { background: #fff8e1; border: 1px solid #f0d58a; padding: 8px 12px; border-radius: 4px; color: #6b5200; }
  table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
  #summary { width: 100%; font-size: 13px; }
  #summary th, #summary td { border-bottom: 1px solid var(--line); padding: 4px 6px; text-align: right; white-space: nowrap; }
  #summary th { position: sticky; top: 0; background: #fff; cursor: pointer; user-select: none; vertical-align: bottom; white-space: normal; }
  #summary th[data-dir="asc"]::after { content: " \25B2"; }
  #summary th[data-dir="desc"]::after { content: " \25BC"; }
  #summary td:nth-child(-n+4), #summary th:nth-child(-n+4) { text-align: left; }
  #summary tbody tr:nth-child(even) { background: var(--bg-alt); }
  #summary td.na { color: #aab3bb; text-align: center; }
  #summary td.note { max-width: 360px; overflow: hidden; text-overflow: ellipsis; text-align: left; color: var(--muted); }
  details.kernels { margin: 0.4em 0; }
  table.kernel-table td.kname { font-family: monospace; font-size: 0.8em; text-align: left; max-width: 60em; word-break: break-all; }
  .badge { display: inline-block; padding: 0 6px; border-radius: 9px; font-size: 12px; font-weight: 600; }
  .st-pass { background: #dff3e4; color: #1a6b32; }
  .st-fail { background: #fde2e1; color: #a1231b; }
  .st-unsup { background: #eceff1; color: #55606a; }
  .st-error { background: #fdeccf; color: #8a4b00; }
  .st-unchecked { background: #e8eaf6; color: #3949ab; }
  .fclass { font-size: 0.8em; color: #8a1c1c; white-space: nowrap; }
  .table-wrap { overflow-x: auto; }
  .cases { display: flex; flex-wrap: wrap; gap: 12px; }
  figure.case { margin: 0; padding: 8px; border: 1px solid var(--line); border-radius: 4px; width: 200px; font-size: 12px; }
  figure.case svg.mask { display: block; margin-bottom: 6px; border: 1px solid var(--line); }
  .nomask { width: 96px; height: 96px; display: flex; align-items: center; justify-content: center; text-align: center;
            background: var(--bg-alt); color: var(--muted); font-size: 11px; margin-bottom: 6px; }
  .charts { display: flex; flex-wrap: wrap; gap: 24px; }
  .chart-box { border: 1px solid var(--line); border-radius: 4px; padding: 8px 12px; max-width: 100%; overflow-x: auto; }
  .chart-box h3 { margin-top: 4px; }
  table.kv th { text-align: left; font-weight: 500; color: var(--muted); padding: 2px 16px 2px 0; vertical-align: top; }
  table.kv td { padding: 2px 0; word-break: break-all; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
  .env { columns: 2 560px; }
  .env > * { break-inside: avoid; }
  code { background: var(--bg-alt); padding: 0 3px; border-radius: 3px; }
</style>
</head>
<body>
<header>
  <h1>{{TITLE}}</h1>
  <div class="subtitle">{{SUBTITLE}}</div>
</header>

<h2 id="summary-heading">Summary</h2>
{{SUMMARY}}
<p class="subtitle">Times are medians of the timing samples. Useful TFLOP/s count only the allowed (i, j) pairs;
executed TFLOP/s count every pair in the tiles a backend computes (fwd = 2 &middot; pairs &middot; (Dqk + Dv),
bwd = 2.5 &middot; fwd). {{CEILINGS}} Click a column heading to sort.</p>
<div class="table-wrap">{{TABLE}}</div>

<h2 id="charts-heading">Charts</h2>
<div class="charts">{{CHARTS}}</div>

<h2 id="cases-heading">Cases</h2>
<p class="subtitle">Each case's BlockMask at 128 &times; 128 tiles (b = 0, h = 0), downsampled for large sequences:
dark = full tile, grey = partial tile (mask evaluated inside), light = skipped.</p>
{{CASES}}

{{KERNELS}}
<h2 id="env-heading">Environment</h2>
<div class="env">{{ENVIRONMENT}}</div>

<script type="application/json" id="attnbench-charts">{{CHART_SPECS}}</script>
{{BUNDLES}}
<script>
(function () {
  "use strict";
  // Sortable summary table: numbers sort by their data-v value, text by text.
  document.querySelectorAll("table.sortable thead th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var table = th.closest("table");
      var dir = th.dataset.dir === "asc" ? "desc" : "asc";
      table.querySelectorAll("thead th").forEach(function (o) { delete o.dataset.dir; });
      th.dataset.dir = dir;
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col], y = b.cells[col];
        var vx = x.dataset.v, vy = y.dataset.v, r;
        if (vx !== undefined || vy !== undefined) {
          if (vx === undefined) return 1;
          if (vy === undefined) return -1;
          r = parseFloat(vx) - parseFloat(vy);
        } else {
          r = x.textContent.localeCompare(y.textContent, undefined, { numeric: true });
        }
        return dir === "asc" ? r : -r;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });

  // Charts: one Vega-Lite spec per div#chart-N, drawn as SVG.
  var charts = JSON.parse(document.getElementById("attnbench-charts").textContent);
  document.body.dataset.chartsExpected = String(charts.length);
  document.body.dataset.chartsDrawn = "0";
  if (!charts.length) { document.body.dataset.chartsDone = "1"; return; }
  if (typeof vegaEmbed !== "function") {
    console.error("attnbench: vega-embed is not loaded; charts cannot be drawn");
    return;
  }
  var drawn = 0;
  Promise.all(charts.map(function (c, i) {
    var el = document.getElementById("chart-" + i);
    return vegaEmbed(el, c.spec, { renderer: "svg", actions: false }).then(function () {
      el.dataset.rendered = "1";
      drawn += 1;
      document.body.dataset.chartsDrawn = String(drawn);
    }).catch(function (err) {
      el.textContent = "This chart could not be drawn: " + err;
      console.error("attnbench: chart " + c.name + " failed: " + err);
    });
  })).then(function () { document.body.dataset.chartsDone = "1"; });
})();
</script>
</body>
</html>
)ATTNBENCH_HTML";

}  // namespace attnbench::html
