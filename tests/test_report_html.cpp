// The HTML report: escaping of everything that comes from the input file, the
// derived figures, the page without chart bundles, `attnbench report`, and a real
// rendering in headless Chromium (no console errors, every chart drawn, no
// network request, a screenshot saved).
//
// The browser part needs node, reports/node_modules (npm ci) and Debian's
// chromium, which ci/install_browser.sh installs. Without them the test FAILS,
// unless ATTNBENCH_ALLOW_BROWSER_SKIP=1: then it prints a loud SKIPPED line and
// the executable exits with 77 (ctest: SKIP_RETURN_CODE 77) provided every other
// test case passed. ATTNBENCH_NODE names the node binary (default: node on PATH),
// ATTNBENCH_CHROMIUM the browser (default: /usr/bin/chromium).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "reports/report.hpp"
#include "reports/html_report.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSource = ATTNBENCH_SOURCE_DIR;
const std::string kBaseline = kSource + "/ci/baselines/example-h100.json";

// ---- exit code 77 for an allowed skip, only when everything else passed
bool g_browser_skipped = false;
bool g_all_passed = false;

struct SkipListener : public doctest::IReporter {
  explicit SkipListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    g_all_passed = s.numTestCasesFailed == 0 && s.numAssertsFailed == 0;
    if (g_browser_skipped && g_all_passed)
      std::atexit([] {
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(77);
      });
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("attnbench_skip77", 1, SkipListener);

fs::path scratch(const std::string& name) { return test::scratch_path("html", name); }


size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

/// The JSON inside <script type="application/json" id="attnbench-charts">.
std::string chart_json_of(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"attnbench-charts\">";
  size_t a = page.find(open);
  if (a == std::string::npos) return "";
  a += open.size();
  return page.substr(a, page.find("</script>", a) - a);
}

const std::string kHostile = "</script><script>alert(\"x\")</script><!-- \xE2\x80\xA8 \xE2\x80\xA9 <b>bold</b> '&";

}  // namespace

TEST_CASE("escape_html escapes markup and attribute quotes") {
  CHECK(html::escape_html("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&#39;");
  CHECK(html::escape_html("plain \xC3\xA9") == "plain \xC3\xA9");
}

TEST_CASE("json_for_script leaves nothing that ends a script or confuses JS") {
  json j = {{"s", kHostile}, {"n", 1.5}};
  const std::string out = html::json_for_script(j);
  CHECK(out.find('<') == std::string::npos);
  CHECK(out.find('>') == std::string::npos);
  CHECK(out.find('&') == std::string::npos);
  CHECK(out.find("\xE2\x80\xA8") == std::string::npos);
  CHECK(out.find("\xE2\x80\xA9") == std::string::npos);
  for (unsigned char c : out) CHECK(c < 0x80);
  CHECK(json::parse(out) == j);  // still the same JSON
}

TEST_CASE("script_safe neutralises </script and <!-- in bundles") {
  CHECK(html::script_safe("var a='</SCRIPT>';var b=\"<!--\";x<y") == "var a='<\\/SCRIPT>';var b=\"<\\!--\";x<y");
  CHECK(html::script_safe("</scrip") == "</scrip");
}

TEST_CASE("mask thumbnails become run-length SVG") {
  json t = mask_thumbnail("+..\n#+.\n##+\n", 128, 128);
  const std::string svg = html::mask_svg(t, 96);
  CHECK(svg.rfind("<svg class=\"mask\"", 0) == 0);
  CHECK(count(svg, "<rect") == 1 + 5);  // background + runs "+", "#", "+", "##", "+"
  CHECK(svg.find("viewBox=\"0 0 3 3\"") != std::string::npos);
  CHECK(html::mask_svg(json()) == "");
  CHECK(html::mask_svg(json{{"rows", {"#<script>"}}}) == "");
}

TEST_CASE("derived figures: TFLOP/s, fractions of the ceilings, speed-ups") {
  json doc = load_report(kBaseline);
  json rows = html::derive_rows(doc, "naive");
  REQUIRE(rows.size() == doc["results"].size());
  const json& src = doc["results"][3];  // causal-s1024 on cudnn
  const json& d = rows[3];
  REQUIRE(d["backend"] == "cudnn");
  const double fwd = src["timing"]["fwd"]["median_ms"].get<double>();
  const double tflops = src["work"]["useful_flops_fwd"].get<double>() / (fwd * 1e-3) / 1e12;
  CHECK(d["useful_tflops_fwd"].get<double>() == doctest::Approx(tflops));
  CHECK(d["pct_gemm_fwd"].get<double>() == doctest::Approx(100.0 * tflops / 745.0));
  CHECK(d["executed_tflops_fwd"].get<double>() >= d["useful_tflops_fwd"].get<double>());
  const double naive_fwd = doc["results"][2]["timing"]["fwd"]["median_ms"].get<double>();
  CHECK(d["speedup_fwd"].get<double>() == doctest::Approx(naive_fwd / fwd));
  CHECK(rows[2]["speedup_fwd"].get<double>() == doctest::Approx(1.0));
  CHECK(d["mask"] == "causal");
  CHECK(d["pct_bw_fwd"].is_number());
  CHECK(d["tensors"].size() == 5);
  // the unsupported row has no figures
  const json& u = rows[8];
  CHECK(u["status"] == "unsupported");
  CHECK(u["fwd_ms"].is_null());
  CHECK(u["useful_tflops_fwd"].is_null());
  CHECK(u["note"].get<std::string>().find("THD") != std::string::npos);
}

TEST_CASE("every string from the report is escaped in the page") {
  json doc = load_report(kBaseline);
  doc["results"][0]["status"] = "error";
  doc["results"][0]["message"] = kHostile;
  doc["results"][1]["case_id"] = kHostile;
  doc["scenario"]["name"] = "<i>scenario</i>";
  doc["environment"]["host"]["hostname"] = kHostile;
  html::HtmlOptions o;
  o.node_modules = scratch("no_modules").string();  // no bundles: count our own scripts only
  const std::string page = html::render_report(doc, o);
  CHECK(page.find("alert(\"x\")</script>") == std::string::npos);
  CHECK(page.find("<b>bold</b>") == std::string::npos);
  CHECK(page.find("<i>scenario</i>") == std::string::npos);
  CHECK(page.find("&lt;i&gt;scenario&lt;/i&gt;") != std::string::npos);
  CHECK(count(page, "<script") == 2);  // the chart JSON and the page script
  CHECK(count(page, "</script") == 2);
  CHECK(count(page, "<!--") == 0);
  const std::string charts = chart_json_of(page);
  CHECK(charts == "[]");  // no bundles, no charts
  CHECK(page.find("id=\"charts-missing\"") != std::string::npos);
  CHECK(page.find("npm ci") != std::string::npos);
}

TEST_CASE("kernel traces become a Kernels section, escaped, with the reason for rows not traced") {
  json doc = load_report(kBaseline);
  REQUIRE(doc["results"].size() >= 2);
  json pass = {{"activities", 3},
               {"device_us", 1665.0},
               {"span_us", 1714.2},
               {"kernels",
                json::array({{{"kind", "kernel"}, {"name", "sdpa_bprop<" + kHostile + ">"}, {"calls", 1},
                              {"total_us", 807.1}, {"mean_us", 807.1}, {"share", 0.485}, {"grid", {132, 1, 1}},
                              {"block", {384, 1, 1}}, {"ctas", 132}, {"registers", 168}, {"shared_bytes", 216064}},
                             {{"kind", "memset"}, {"name", "memset"}, {"calls", 1}, {"total_us", 0.8},
                              {"mean_us", 0.8}, {"share", 0.0005}, {"bytes", 4}}})}};
  doc["results"][0]["extra"]["kernel_trace"] = {{"note", "n"}, {"fwd", pass}, {"bwd", {{"error", "CUPTI busy"}}}};
  doc["results"][1]["extra"]["kernel_trace"] = {{"unavailable", "the backend runs <in> a worker"}};
  html::HtmlOptions o;
  o.node_modules = scratch("no_modules_k").string();
  const std::string page = html::render_report(doc, o);
  CHECK(page.find("id=\"kernels-heading\"") != std::string::npos);
  CHECK(page.find("1 rows traced") != std::string::npos);
  CHECK(page.find("alert(\"x\")</script>") == std::string::npos);
  CHECK(page.find("sdpa_bprop&lt;") != std::string::npos);
  CHECK(page.find(">48.5%<") != std::string::npos);
  CHECK(page.find("132 x 1 x 1") != std::string::npos);
  CHECK(page.find("4 bytes") != std::string::npos);
  CHECK(page.find("bwd: CUPTI busy") != std::string::npos);
  CHECK(page.find("not traced (the backend runs &lt;in&gt; a worker)") != std::string::npos);
  CHECK(count(page, "<script") == 2);
  // Without traces there is no section at all.
  const std::string plain = html::render_report(load_report(kBaseline), o);
  CHECK(plain.find("kernels-heading") == std::string::npos);
}

TEST_CASE("a traced pass with a timeline gets a lane per stream and a bar per activity") {
  json pass = {{"span_us", 100.0},
               {"busy_us", 90.0},
               {"device_us", 120.0},
               {"streams", 2},
               {"kernels", json::array({{{"kind", "kernel"}, {"name", "bprop<" + kHostile + ">"}},
                                        {{"kind", "memset"}, {"name", "memset"}}})},
               {"timeline", json::array({json::array({0, 0, 0.0, 50.0}), json::array({1, 1, 10.0, 5.0}),
                                         json::array({0, 1, 50.0, 50.0}),
                                         json::array({0, 9, 0.0, 1.0}),     // lane out of range: skipped
                                         json::array({"x", 0, 0.0, 1.0})})}};  // malformed: skipped
  const std::string svg = html::timeline_svg(pass, 464);
  CHECK(count(svg, "<svg") == 1);
  CHECK(count(svg, "<rect") == 3);
  CHECK(count(svg, ">stream ") == 2);
  // 64 px of labels, 392 px for 100 us: the third bar starts at 64 + 196 px, 196 px wide
  CHECK(svg.find("<rect x=\"260.00\" y=\"22.0\" width=\"196.00\"") != std::string::npos);
  CHECK(svg.find(html::kernel_colour(0)) != std::string::npos);
  CHECK(svg.find(html::kernel_colour(1)) != std::string::npos);
  CHECK(svg.find("bprop&lt;") != std::string::npos);
  CHECK(svg.find("alert(\"x\")</script>") == std::string::npos);
  CHECK(svg.find("memset: start 10.0 us, 5.0 us") != std::string::npos);
  CHECK(svg.find(">100 us<") != std::string::npos);  // the axis ends at the span
  CHECK(html::kernel_colour(10) == html::kernel_colour(0));
  // No timeline, or a zero span: nothing drawn.
  json none = pass;
  none.erase("timeline");
  CHECK(html::timeline_svg(none).empty());
  json flat = pass;
  flat["span_us"] = 0.0;
  CHECK(html::timeline_svg(flat).empty());

  // In the page: the pass line with span / busy / streams and the SVG before the table.
  json doc = load_report(kBaseline);
  doc["results"][0]["extra"]["kernel_trace"] = {{"fwd", pass}};
  html::HtmlOptions o;
  o.node_modules = scratch("no_modules_t").string();
  const std::string page = html::render_report(doc, o);
  CHECK(page.find("fwd: span 100.0 us, busy 90.0 us, activities summed 120.0 us over 2 stream(s)") != std::string::npos);
  const size_t svg_at = page.find("class=\"timeline\""), table_at = page.find("class=\"kernel-table\"");
  REQUIRE(svg_at != std::string::npos);
  REQUIRE(table_at != std::string::npos);
  CHECK(svg_at < table_at);
  // A malformed stream count cannot blow the picture up: lanes are clamped to 64.
  json huge = pass;
  huge["streams"] = 2e6;
  CHECK(count(html::timeline_svg(huge), ">stream ") == 64);
  huge["streams"] = 1e300;
  CHECK(count(html::timeline_svg(huge), ">stream ") == 64);
  huge["timeline"] = json::array({json::array({1e30, 0, 0.0, 1.0})});  // a non-integer kernel index: skipped
  CHECK(count(html::timeline_svg(huge), "<rect") == 0);
}

TEST_CASE("chart specs are embedded safely when the bundles are there") {
  std::string why;
  const std::string assets = html::find_chart_assets(&why);
  if (assets.empty()) {
    MESSAGE("bundles missing (" << why << "); covered by the browser test's own check");
    return;
  }
  json doc = load_report(kBaseline);
  doc["results"][1]["case_id"] = kHostile;
  const std::string page = html::render_report(doc, {"naive", "", "", "", true});
  CHECK(count(page, "<script") == 2 + 3);
  CHECK(count(page, "</script") == 2 + 3);
  const std::string charts = chart_json_of(page);
  CHECK(charts.find('<') == std::string::npos);
  json parsed = json::parse(charts);
  REQUIRE(parsed.size() == 4);
  CHECK(parsed[0]["name"] == "throughput_vs_seq");
  CHECK(parsed[1]["name"] == "fwd_bwd_split");
  CHECK(parsed[2]["name"] == "packing_vs_throughput");
  CHECK(parsed[3]["name"] == "error_ratios");
  CHECK(count(page, "class=\"chart\"") == 4);
}

TEST_CASE("an unknown baseline backend is bad input") {
  json doc = load_report(kBaseline);
  try {
    html::render_report(doc, {"flash", "", "", "", false});
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(e.json_path() == "--baseline");
    CHECK(std::string(e.what()).find("naive") != std::string::npos);
  }
}

TEST_CASE("attnbench report: writes the page; bad input exits 2") {
  const std::string bin = ATTNBENCH_BINARY;
  const fs::path out = scratch("cli.html");
  CHECK(test::run_command(bin + " report " + kBaseline + " -o " + out.string() + " --baseline naive 2>&1").first == 0);
  const std::string page = read(out);
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.find("example-smoke") != std::string::npos);
  CHECK(page.find("NVIDIA H100 80GB HBM3") != std::string::npos);
  CHECK(test::run_command(bin + " report " + kBaseline + " -o " + out.string() + " --baseline nope 2>&1").first == 2);
  CHECK(test::run_command(bin + " report /nonexistent/report.json -o " + out.string() + " 2>&1").first == 2);
}

TEST_CASE("headless Chromium renders the report: no errors, every chart drawn") {
  std::string missing;
  const char* node_env = std::getenv("ATTNBENCH_NODE");  // node binary (default: node on PATH)
  const std::string node = node_env && *node_env ? node_env : "node";
  if (test::run_command("command -v '" + node + "'").second.empty()) missing += node + "; ";
  if (!fs::exists("/usr/bin/chromium") && !std::getenv("ATTNBENCH_CHROMIUM")) missing += "/usr/bin/chromium; ";
  if (!fs::exists(kSource + "/reports/node_modules/playwright-core/package.json")) missing += "reports/node_modules/playwright-core; ";
  std::string why;
  if (html::find_chart_assets(&why).empty()) missing += "vega bundles (" + why + "); ";
  if (!missing.empty()) {
    const char* allow = std::getenv("ATTNBENCH_ALLOW_BROWSER_SKIP");
    if (allow && std::string(allow) == "1") {
      std::fprintf(stderr,
                   "\n**********************************************************************\n"
                   "*** SKIPPED: HTML report browser test: missing %s\n"
                   "*** (ATTNBENCH_ALLOW_BROWSER_SKIP=1; run ci/install_browser.sh to test)\n"
                   "**********************************************************************\n\n",
                   missing.c_str());
      g_browser_skipped = true;
      return;
    }
    FAIL("the browser test cannot run, missing: " << missing
                                                  << "(run ci/install_browser.sh, or set ATTNBENCH_ALLOW_BROWSER_SKIP=1)");
  }
  json doc = load_report(kBaseline);
  doc["results"][0]["status"] = "error";
  doc["results"][0]["message"] = kHostile;  // hostile text must not break the page
  const fs::path page = fs::absolute("report_html_test.html");
  const fs::path png = fs::absolute("report_html_test.png");
  {
    std::ofstream out(page, std::ios::binary);
    out << html::render_report(doc, {"naive", "", kBaseline, "", true});
  }
  fs::remove(png);
  auto [rc, out] = test::run_command("'" + node + "' '" + kSource + "/tests/html/render_check.mjs' '" + page.string() + "' '" + png.string() +
                       "' 2>&1");
  INFO("render_check output: " << out);
  REQUIRE(rc == 0);
  const std::string last = out.substr(out.rfind('{'));
  json r = json::parse(last.substr(0, last.find('\n')));
  CHECK(r["errors"].empty());
  CHECK(r["requests"].empty());
  CHECK(r["expected"] == 4);
  CHECK(r["drawn"] == 4);
  CHECK(r["chart_divs"] == 4);
  CHECK(r["svgs"].get<int>() + r["canvases"].get<int>() >= 4);
  CHECK(r["table_rows"] == doc["results"].size());
  CHECK(r["mask_svgs"] == 5);  // one per case
  REQUIRE(fs::exists(png));
  CHECK(fs::file_size(png) > 10000);
  std::fprintf(stderr, "report_html: screenshot saved to %s\n", png.string().c_str());
}

TEST_CASE("fail rows say which failure class; unchecked rows are counted apart") {
  json doc = load_report(kBaseline);
  REQUIRE(doc["results"].size() >= 3);
  doc["results"][0]["status"] = "fail";
  doc["results"][0]["check"]["failure_class"] = "fully_masked_rows";
  doc["results"][0]["check"]["failure_detail"] = "numerics fine, fully-masked-row convention differs: LSE not -inf on 8 of 8 rows";
  doc["results"][1]["status"] = "fail";
  doc["results"][1]["check"]["failure_class"] = "numerics";
  doc["results"][1]["check"]["failure_detail"] = "wrong numbers on rows that attend keys: dQ (ratio 7.1)";
  doc["results"][2]["status"] = "unchecked";
  doc["results"][2]["check"] = {{"mode", "off"}};
  html::HtmlOptions o;
  o.node_modules = scratch("no_modules2").string();
  const json rows = html::derive_rows(doc, "");
  CHECK(rows[0]["failure_class"] == "fully_masked_rows");
  CHECK(rows[0]["note"] == "numerics fine, fully-masked-row convention differs: LSE not -inf on 8 of 8 rows");
  CHECK(rows[2]["failure_class"] == "");
  const std::string page = html::render_report(doc, o);
  CHECK(page.find("st-fail\">fail 2</span> (1 wrong numbers, 1 only the fully-masked-row convention)") != std::string::npos);
  CHECK(page.find("st-unchecked\">unchecked 1</span> (outputs not checked: correctness unknown)") != std::string::npos);
  CHECK(count(page, ">fully masked rows only</span>") == 1);
  CHECK(count(page, ">wrong numbers</span>") == 1);
}

TEST_CASE("the page head, ceiling line, environment tables and the notice when no chart has data") {
  json doc = load_report(kBaseline);
  html::HtmlOptions o;
  o.node_modules = scratch("no_modules_head").string();
  o.source_file = "runs/<a>.json";
  std::string page = html::render_report(doc, o);
  CHECK(page.find("GPU: NVIDIA H100 80GB HBM3 &middot; git example &middot; started 2026-03-02T10:00:00Z "
                  "&middot; runs/&lt;a&gt;.json") != std::string::npos);
  CHECK(page.find("run not finished") == std::string::npos);
  CHECK(page.find("Measured ceilings: bf16 GEMM 745 TFLOP/s, device copy 2980 GB/s.") != std::string::npos);
  CHECK(page.find("<h3>Run</h3>") != std::string::npos);
  CHECK(page.find("<tr><th>git_revision</th><td>example</td></tr>") != std::string::npos);
  CHECK(page.find("<h3>Ceilings</h3><table class=\"kv\"><tbody><tr><th>copy_d2d.how</th>") != std::string::npos);
  CHECK(page.find("merged_from") == std::string::npos);
  CHECK(page.find("No chart has data") == std::string::npos);

  // A partial, merged run without ceilings, timings (so no rates) or checked tensors.
  doc.erase("finished");
  doc.erase("ceilings");
  doc["merged_from"] = json::array({{{"file", "s<0>.json"}, {"rows", 4}}});
  for (auto& r : doc["results"]) {
    r.erase("timing");
    r.erase("derived");  // load_report() derived the rates from the timings
    if (r.contains("check") && r["check"].is_object()) r["check"].erase("tensors");
  }
  page = html::render_report(doc, o);
  CHECK(page.find("&middot; <b>run not finished (partial report)</b>") != std::string::npos);
  CHECK(page.find("Ceilings not measured: fractions of peak are blank.") != std::string::npos);
  CHECK(page.find("<h3>Ceilings</h3><p>not measured</p>") != std::string::npos);
  CHECK(page.find("<tr><th>merged_from[0].file</th><td>s&lt;0&gt;.json</td></tr>") != std::string::npos);
  CHECK(page.find("<p class=\"notice\">No chart has data: no row was timed.</p>") != std::string::npos);
  CHECK(page.find("id=\"charts-missing\"") == std::string::npos);
  CHECK(chart_json_of(page) == "[]");
}
