// report.json: rows, the atomic writer, the reader's guard, merge, mask
// thumbnails, the environment fingerprint, the progress line, and validation of
// written reports against reports/report.schema.json (Ajv, through node).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "harness/device/environment.hpp"
#include "harness/model/version.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/measure/measure.hpp"
#include "harness/model/problem.hpp"
#include "harness/run/progress.hpp"
#include "reports/report.hpp"
#include "tests/big_reports.hpp"
#include "tests/schema_skip.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSource = ATTNBENCH_SOURCE_DIR;
const std::string& kBaseline = test::kBaselineReport;
const std::string& kRerun = test::kRerunReport;

fs::path scratch(const std::string& name) { return test::scratch_path("report", name); }

void write(const fs::path& p, const std::string& text) { test::write_file(p, text); }

std::string input_error_path(const std::string& file) {
  try {
    load_report(file);
  } catch (const InputError& e) {
    return e.json_path();
  }
  return "<no error>";
}


bool skip_allowed() {
  const char* v = std::getenv("ATTNBENCH_ALLOW_BROWSER_SKIP");
  return v && std::string(v) == "1";
}

/// A report written the way the runner writes one: real environment, real
/// TimingStats, every row field.
json write_sample_report(const fs::path& path) {
  TimingPolicy pol;
  ReportWriter w(path.string(), make_report_header("attnbench run x.json", {{"name", "unit"}, {"cases", 2}},
                                                   pol.to_json(), env::collect("attnbench run x.json")));
  ReportRow r;
  r.case_id = "causal-s256";
  r.backend = "cpu";
  r.status = RowStatus::pass;
  r.problem = {{"batch", 1}, {"heads_q", 2}, {"heads_kv", 1}, {"seq_q", 256}, {"seq_k", 256}, {"head_dim", 64},
               {"head_dim_v", 64}, {"dtype", "bf16"}, {"layout", "bshd"}, {"mask", json::array()}};
  r.work = json{{"useful_pairs", 65792}, {"executed_pairs", 98304}, {"useful_flops_fwd", 1.68e7},
                {"executed_flops_fwd", 2.5e7}, {"useful_flops_bwd", 4.2e7}, {"executed_flops_bwd", 6.3e7},
                {"tile_efficiency", 0.669}}.get<WorkFigures>();
  r.check = json{{"pass", true}, {"mode", "full"}, {"scope", "all"}, {"worst_ratio", 1.1},
                 {"tensors", json::array({{{"name", "O"}, {"pass", true}, {"ratio", 1.1}}})}}.get<CheckFigures>();
  TimingStats t;
  t.samples_ms = {1.0, 1.1, 0.95};
  t.summarize();
  t.stop_reason = "time_cap";
  t.timer = "steady_clock";
  r.timing.set(Pass::forward, t);
  r.timing.set(Pass::forward_backward, t);
  r.memory = json{{"allocated_bytes", 1024}, {"workspace_bytes", 0}}.get<MemoryFigures>();
  r.derive({});
  r.extra = {{"setup_ms", 0.5}};
  r.clocks = {{"start", env::sample_clocks(0).to_json()}, {"end", env::sample_clocks(0).to_json()}};
  r.mask_thumbnail = mask_thumbnail("+.\n#+\n", 128, 128);
  w.add_row(r);
  ReportRow u;
  u.case_id = "causal-s256";
  u.backend = "naive";
  u.status = RowStatus::unsupported;
  u.reason = "needs a GPU";
  w.add_row(u);
  ReportRow e;
  e.case_id = "doc-s512";
  e.backend = "cpu";
  e.status = RowStatus::oom;
  e.message = "out of memory allocating 8 GiB";
  w.add_row(e);
  // The statuses and check fields of issue 16: unchecked with nonfinite counts, a
  // fail classified as a fully-masked-row convention, a budget error row.
  ReportRow n;
  n.case_id = "doc-s512";
  n.backend = "naive";
  n.status = RowStatus::unchecked;
  n.check = json{{"mode", "off"}, {"scope", "nothing checked (--check off)"}, {"nonfinite", {{"O", 0}, {"LSE", 2}}}}
                .get<CheckFigures>();
  w.add_row(n);
  ReportRow f;
  f.case_id = "causal-s256";
  f.backend = "cpu";
  f.status = RowStatus::fail;
  f.message = "numerics fine, fully-masked-row convention differs: LSE not -inf on 8 of 8 rows";
  f.check = json{{"pass", false}, {"mode", "full"}, {"scope", "all"}, {"fully_masked_rows", 8},
                 {"failure_class", "fully_masked_rows"}, {"failure_detail", f.message},
                 {"tensors", json::array({{{"name", "LSE"}, {"pass", false}, {"masked_checked", 8},
                                           {"masked_rows_mismatch", 8}, {"rest_max_abs_err", 0.0},
                                           {"rest_pass", true}}})}}
                .get<CheckFigures>();
  w.add_row(f);
  ReportRow b;
  b.case_id = "S1099511627776";
  b.backend = "cpu";
  b.status = RowStatus::error;
  b.problem = nullptr;
  b.message = "x.json: /axes/seq/1: Q would need 35184372088832 elements, more than the budget of 2^34";
  w.add_row(b);
  w.set_field("ceilings", {{"measured", false}, {"reason", "no GPU"}});
  w.finish();
  return w.document();
}

}  // namespace

TEST_CASE("row statuses round-trip") {
  for (RowStatus s : {RowStatus::pass, RowStatus::fail, RowStatus::unsupported, RowStatus::error, RowStatus::oom,
                      RowStatus::timeout, RowStatus::crashed})
    CHECK(parse_row_status(to_string(s)) == s);
  CHECK_FALSE(parse_row_status("passed").has_value());
}

TEST_CASE("rows serialise with optional parts") {
  ReportRow r;
  r.case_id = "c";
  r.backend = "b";
  r.status = RowStatus::unsupported;
  r.reason = "why";
  json j = r.to_json();
  CHECK(j["status"] == "unsupported");
  CHECK(j["reason"] == "why");
  CHECK_FALSE(j.contains("message"));
  CHECK(j["timing"].is_null());
  CHECK_FALSE(j.contains("clocks"));
  CHECK_FALSE(j.contains("mask_thumbnail"));
  r.clocks = {{"start", {{"available", false}}}};
  CHECK(r.to_json().contains("clocks"));
}

TEST_CASE("the writer fills the header, rewrites after every row and finishes") {
  fs::path p = scratch("writer.json");
  ReportWriter w(p.string(), {{"command", "x"}});
  json on_disk = jsonu::load_file(p.string());
  CHECK(on_disk["schema_version"] == kReportSchemaVersion);
  CHECK(on_disk["tool"] == "attnbench");
  CHECK(on_disk["started"].is_string());
  CHECK(on_disk["finished"].is_null());
  CHECK(on_disk["results"].empty());
  ReportRow r;
  r.case_id = "a";
  r.backend = "cpu";
  r.status = RowStatus::error;
  r.message = "boom";
  w.add_row(r);
  CHECK(jsonu::load_file(p.string())["results"].size() == 1);
  w.add_row(r);
  CHECK(jsonu::load_file(p.string())["results"].size() == 2);
  w.finish();
  on_disk = jsonu::load_file(p.string());
  CHECK(on_disk["finished"].is_string());
  CHECK(on_disk["finished"].get<std::string>().back() == 'Z');
  // no temp file left behind
  int others = 0;
  for (const auto& e : fs::directory_iterator(p.parent_path()))
    if (e.path().filename().string().rfind("writer.json.tmp", 0) == 0) ++others;
  CHECK(others == 0);
  CHECK_THROWS_AS(write_json_atomic("/nonexistent-dir/x/report.json", json::object()), std::runtime_error);
}

TEST_CASE("load_report accepts the example baselines") {
  json doc = load_report(kBaseline);
  CHECK(doc["results"].size() == 10);
  CHECK(row_key(doc["results"][0]) == "full-s1024|naive");
}

TEST_CASE("load_report names file, JSON path and value of bad input") {
  json good = jsonu::load_file(kBaseline);
  fs::path p = scratch("bad.json");

  json bad = good;
  bad["schema_version"] = kReportSchemaVersion + 1;
  write(p, bad.dump());
  CHECK(input_error_path(p.string()) == "/schema_version");

  write(p, "{\"schema_version\": 1, \"results\": [");
  CHECK(input_error_path(p.string()) == "");
  CHECK(input_error_path((fs::path(p).parent_path() / "missing.json").string()) == "");

  // The rest is the schema's (valijson): a build without it reads unvalidated.
  if (!test::schema_validation_or_loud_skip("schema errors")) return;
  bad = good;
  bad["results"][3]["status"] = "passed";
  write(p, bad.dump());
  CHECK(input_error_path(p.string()) == "/results/3/status");

  bad = good;
  bad["results"][0]["timing"]["fwd"]["samples_ms"][4] = "x";
  write(p, bad.dump());
  CHECK(input_error_path(p.string()) == "/results/0/timing/fwd/samples_ms/4");

  bad = good;
  bad["results"][1]["timing"]["both"] = bad["results"][1]["timing"]["fwd"];
  write(p, bad.dump());
  CHECK(input_error_path(p.string()) == "/results/1/timing/both");

  bad = good;
  bad["results"][2].erase("backend");
  write(p, bad.dump());
  CHECK(input_error_path(p.string()) == "/results/2/backend");
}

TEST_CASE("merge concatenates shards and guards environments and duplicates") {
  json a = load_report(kBaseline), b = load_report(kRerun);
  json shard0 = a, shard1 = b;
  shard0["results"] = json::array();
  shard1["results"] = json::array();
  for (size_t i = 0; i < a["results"].size(); ++i) (i % 2 ? shard1 : shard0)["results"].push_back(a["results"][i]);
  json m = merge_reports({{"s0.json", shard0}, {"s1.json", shard1}});
  CHECK(m["results"].size() == a["results"].size());
  CHECK(m["merged_from"].size() == 2);
  CHECK(m["merged_from"][1]["file"] == "s1.json");
  CHECK(m["started"] == a["started"]);   // the earlier start
  CHECK(m["finished"] == b["finished"]);  // the later finish
  CHECK_FALSE(m.contains("shard"));

  // the same row twice
  CHECK_THROWS_AS(merge_reports({{"a.json", a}, {"b.json", b}}), InputError);
  json r = merge_reports({{"a.json", a}, {"b.json", b}}, {false, true});
  CHECK(r["results"].size() == a["results"].size());
  CHECK(r["results"][0]["timing"] == b["results"][0]["timing"]);

  // another GPU
  json other = shard1;
  other["environment"]["gpu"]["name"] = "NVIDIA H200";
  try {
    merge_reports({{"s0.json", shard0}, {"h200.json", other}});
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(e.file() == "h200.json");
    CHECK(e.json_path() == "/environment");
    CHECK(std::string(e.what()).find("H200") != std::string::npos);
  }
  CHECK(merge_reports({{"s0.json", shard0}, {"h200.json", other}}, {true, false})["results"].size() ==
        a["results"].size());

  // an unfinished input leaves the merge unfinished
  json running = shard1;
  running["finished"] = nullptr;
  CHECK(merge_reports({{"s0.json", shard0}, {"s1.json", running}})["finished"].is_null());
  CHECK_THROWS_AS(merge_reports({}), InputError);
}

namespace {

/// What `attnbench merge` wrote before it streamed: write_json_atomic() of
/// merge_reports() on the loaded inputs.
std::string whole_merge(const std::vector<std::string>& files, const MergeOptions& o) {
  std::vector<std::pair<std::string, json>> docs;
  for (const auto& f : files) docs.emplace_back(f, load_report(f));
  const fs::path out = scratch("whole_merge.json");
  write_json_atomic(out.string(), merge_reports(docs, o));
  return test::read_file(out);
}

/// The InputError's "file: path: message" of merging `files` whole, or "" when it merges.
std::string whole_merge_error(const std::vector<std::string>& files, const MergeOptions& o) {
  try {
    (void)whole_merge(files, o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("merge_report_files streams the inputs and writes byte for byte what merge_reports wrote") {
  // shards of a version 1 report (rows derived and given variants on the way), a
  // version 2 and a version 3 report of other runs, and --replace
  const std::string raw = kSource + "/docs/results/raw/";
  json a = jsonu::load_file(kBaseline);  // as written (version 1), not upgraded
  json shard0 = a, shard1 = a;
  shard0["results"] = json::array();
  shard1["results"] = json::array();
  for (size_t i = 0; i < a["results"].size(); ++i) (i % 2 ? shard1 : shard0)["results"].push_back(a["results"][i]);
  shard1["started"] = "2020-01-01T00:00:00Z";
  const fs::path s0 = scratch("m_s0.json"), s1 = scratch("m_s1.json");
  write(s0, shard0.dump(1));
  write(s1, shard1.dump());
  const fs::path out = scratch("m_out.json");
  struct Case {
    std::vector<std::string> files;
    MergeOptions o;
  };
  const std::vector<Case> cases = {
      {{s0.string(), s1.string()}, {}},
      {{kBaseline, kRerun}, {false, true}},  // every row replaced by the rerun's, in the baseline's order
      {{s1.string(), kRerun, s0.string()}, {false, true}},
      {{raw + "2026-11-24-session10-masks.json"}, {}},
      {{raw + "2026-11-27-session12-flex_variants.json", raw + "2026-11-27-session12-fwd_rows.json",
        raw + "2026-11-24-session10-dense.json"}, {true, true}}};
  for (const auto& c : cases) {
    CAPTURE(c.files.front());
    CAPTURE(c.files.size());
    const MergeTotals t = merge_report_files(c.files, out.string(), c.o);
    const std::string expected = whole_merge(c.files, c.o);
    CHECK(test::read_file(out) == expected);
    CHECK(t.reports == c.files.size());
    CHECK(t.rows == json::parse(expected)["results"].size());
  }
  const json merged = load_report(out.string());  // and it reads back
  CHECK(merged["merged_from"].size() == 3);
}

TEST_CASE("MergedReportWriter (run --gpus): ranked rows and rows from no input, byte for byte the in-memory merge") {
  // What `run --gpus` wrote before it streamed: merge_reports() of the shards,
  // extra rows appended where their key is new, stably sorted by rank, header edited.
  const json a = load_report(kBaseline), b = load_report(kRerun);
  json s0 = a, s1 = a;
  s0["results"] = json::array();
  s1["results"] = json::array();
  for (size_t i = 0; i < a["results"].size(); ++i) (i % 3 ? s1 : s0)["results"].push_back(a["results"][i]);
  json extra = json::array();
  size_t fresh = 0;
  for (size_t i = 0; i < b["results"].size(); i += 2) {  // some already placed (same keys), some new
    json r = b["results"][i];
    if (i % 4 == 0) r["case_id"] = r["case_id"].get<std::string>() + "-extra", ++fresh;
    r.erase("derived");  // stored as compact JSON, read back as is (never normalised)
    extra.push_back(r);
  }
  std::map<std::string, size_t> case_pos;
  for (const auto& r : a["results"]) case_pos.emplace(r["case_id"].get<std::string>(), case_pos.size());
  auto rank = [&](const json& r) {
    const auto it = case_pos.find(r.value("case_id", ""));
    return std::make_pair(it == case_pos.end() ? size_t{0} : it->second, r.value("variant", "").size());
  };
  // in memory
  json whole = merge_reports({{"s0", s0}, {"s1", s1}}, MergeOptions{true, false});
  std::set<std::string> keys;
  for (const auto& r : whole["results"]) keys.insert(row_key(r));
  for (const auto& r : extra)
    if (keys.insert(row_key(r)).second) whole["results"].push_back(r);
  std::stable_sort(whole["results"].begin(), whole["results"].end(),
                   [&](const json& x, const json& y) { return rank(x) < rank(y); });
  whole["command"] = "attnbench run --gpus all";
  const fs::path expected = scratch("gpus_whole.json"), out = scratch("gpus_streamed.json");
  write_json_atomic(expected.string(), whole);
  // streamed
  MergedReportWriter m(out.string(), MergeOptions{true, false}, rank);
  size_t placed = 0;
  for (const auto& [name, doc] : std::vector<std::pair<std::string, json>>{{"s0", s0}, {"s1", s1}}) {
    for (size_t i = 0; i < doc["results"].size(); ++i) m.add_row(name, placed, i, doc["results"][i]);
    m.check_environment(name, doc);
    m.add_input(name, doc, doc["results"].size());
    ++placed;
  }
  size_t added = 0;
  for (const auto& r : extra) added += m.add_row_if_new(r);
  CHECK(added == fresh);
  CHECK(added > 1);
  json header = m.header();
  header["command"] = "attnbench run --gpus all";
  m.write(header);
  CHECK(test::read_file(out) == test::read_file(expected));
  CHECK(m.rows() == whole["results"].size());
  // a row repeated across inputs is refused, naming it
  MergedReportWriter dup(scratch("gpus_dup.json").string(), MergeOptions{true, false});
  dup.add_row("s0", 0, 0, a["results"][0]);
  CHECK_THROWS_WITH_AS(dup.add_row("s1", 1, 4, a["results"][0]),
                       doctest::Contains("s1: /results/4: row (case_id"), InputError);
}

TEST_CASE("merge_report_files: the errors of load_report on every input first, then merge_reports', output untouched") {
  json a = load_report(kBaseline);
  json other = a;
  other["environment"]["gpu"]["name"] = "NVIDIA H200";
  json broken = a;
  broken["results"][3]["status"] = "done";
  const fs::path h200 = scratch("e_h200.json"), bad = scratch("e_bad.json"), out = scratch("e_out.json");
  write(h200, other.dump(1));
  write(bad, broken.dump(1));
  write(out, "keep me");
  const std::vector<std::vector<std::string>> cases = {
      {kBaseline, h200.string()},                 // environment
      {kBaseline, kRerun},                        // duplicate rows
      {kBaseline, h200.string(), bad.string()},   // an invalid input after an environment mismatch
      {kBaseline, kRerun, h200.string()},         // a duplicate before an environment mismatch
      {h200.string(), kBaseline, kRerun}};        // the environment of the second input, not the third's rows
  for (const auto& files : cases) {
    CAPTURE(files.back());
    const std::string expected = whole_merge_error(files, {});
    REQUIRE_FALSE(expected.empty());
    CHECK_THROWS_WITH_AS(merge_report_files(files, out.string()), expected.c_str(), InputError);
    CHECK(test::read_file(out) == "keep me");
  }
  CHECK_THROWS_WITH_AS(merge_report_files({kBaseline}, "/nonexistent-dir/out.json"),
                       doctest::Contains("/nonexistent-dir/out.json"), InputError);
  CHECK_THROWS_AS(merge_report_files({}, out.string()), InputError);
  // nothing is left next to the output
  for (const auto& e : fs::directory_iterator(out.parent_path()))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("attnbench merge holds one row at a time: its peak memory stays below the inputs' size") {
  const fs::path s0 = scratch("big_s0.json"), s1 = scratch("big_s1.json"), out = scratch("big_out.json");
  json a = load_report(kBaseline);
  test::write_big_report(a, 500, 30000, s0);
  for (auto& row : a["results"]) row["case_id"] = "other-" + row["case_id"].get<std::string>();
  test::write_big_report(a, 500, 30000, s1);
  const long bytes = static_cast<long>(fs::file_size(s0) + fs::file_size(s1));
  int code = -1;
  const long rss = test::reader_peak_rss(ATTNBENCH_BINARY,
                                         {ATTNBENCH_BINARY, "merge", s0.string(), s1.string(), "-o", out.string()}, code);
  CHECK(code == 0);
  INFO("peak RSS " << rss / 1000000 << " MB beyond the binary's own for " << bytes / 1000000 << " MB of reports");
  CHECK(rss < bytes / 2);
  CHECK(load_report(out.string())["results"].size() == 1000);
}

TEST_CASE("mask thumbnails keep small renderings and downsample large ones") {
  json t = mask_thumbnail("+..\n#+.\n##+\n", 128, 128);
  CHECK(t["rows"] == json::array({"+..", "#+.", "##+"}));
  CHECK(t["cell_q_blocks"] == 1);

  // 4x4 causal pattern into 2x2 cells
  json d = mask_thumbnail("+...\n#+..\n##+.\n###+\n", 64, 64, 2);
  CHECK(d["rows"] == json::array({"+.", "#+"}));
  CHECK(d["cell_q_blocks"] == 2);
  CHECK(d["cell_kv_blocks"] == 2);
  CHECK(d["q_block"] == 64);

  // a 100-block rendering fits in 48 cells per side
  std::string big;
  for (int i = 0; i < 100; ++i) big += std::string(100, i % 2 ? '#' : '.') + "\n";
  json b = mask_thumbnail(big, 128, 128);
  CHECK(b["rows"].size() <= 48);
  CHECK(b["rows"][0].get<std::string>().size() <= 48);
  CHECK(b["rows"][0].get<std::string>().find_first_not_of('+') == std::string::npos);  // mixed cells

  CHECK(mask_thumbnail("", 128, 128).is_null());
  CHECK_THROWS_AS(mask_thumbnail("#+\n#\n", 128, 128), std::invalid_argument);
  CHECK_THROWS_AS(mask_thumbnail("#x\n", 128, 128), std::invalid_argument);
}

TEST_CASE("mask_thumbnail_for draws batch row 0 of a problem at 128 x 128 tiles") {
  json pj = {{"batch", 2}, {"heads_q", 2}, {"heads_kv", 1}, {"seq_q", 512}, {"seq_k", 512}, {"head_dim", 64},
             {"dtype", "bf16"}, {"mask", json::array({{{"kind", "causal"}}})}};
  json t = mask_thumbnail_for(problem_from_json(pj, "p.json"));
  CHECK(t["rows"] == json::array({"+...", "#+..", "##+.", "###+"}));
  CHECK(t["q_block"] == 128);
  // documents differ per batch row: row 0 is drawn
  pj["mask"] = json::array({{{"kind", "document"}, {"doc_lengths", {{256, 256}, {512}}}}});
  json d = mask_thumbnail_for(problem_from_json(pj, "p.json"));
  CHECK(d["rows"] == json::array({"##..", "##..", "..##", "..##"}));
}

TEST_CASE("environment fingerprint without a GPU and the version hook") {
  CHECK(env::register_library_version("unit-test-lib", [] { return std::string("1.2.3"); }));
  CHECK(env::register_library_version("unit-test-throws", []() -> std::string { throw std::runtime_error("nope"); }));
  json e = env::collect("attnbench unit", 0);
  CHECK(e["versions"]["unit-test-lib"] == "1.2.3");
  CHECK(e["versions"]["unit-test-throws"].get<std::string>().find("nope") != std::string::npos);
  CHECK(e["gpu"].contains("available"));
  CHECK(e["gpu"]["name"].is_string());
  if (!e["gpu"]["available"].get<bool>()) {
    CHECK(e["gpu"]["name"] == "none");
    CHECK(e["gpu"]["reason"].get<std::string>().size() > 0);
  }
  for (const char* k : {"driver", "cuda_runtime", "cudnn", "cublas"}) CHECK(e["versions"][k].is_string());
  CHECK(e["host"]["cpu_model"].is_string());
  CHECK(e["host"]["hostname"].get<std::string>().size() > 0);
  CHECK(e["harness"]["git_revision"] == git_revision());
  CHECK(e["harness"]["command_line"] == "attnbench unit");
  CHECK(e["time"].get<std::string>().size() == 20);  // YYYY-MM-DDTHH:MM:SSZ

  env::ClockSample s = env::sample_clocks(0);
  json sj = s.to_json();
  CHECK(sj["available"] == s.available);
  if (!s.available) CHECK(sj["reason"].get<std::string>().size() > 0);

  json id = env::comparable_identity(e);
  CHECK(id["gpu"] == e["gpu"]["name"]);
  CHECK(env::comparable_identity(json::object())["gpu"] == "unknown");
}

TEST_CASE("throttle reason bits are named") {
  CHECK(env::throttle_reason_names(0).empty());
  CHECK(env::throttle_reason_names(0x4) == std::vector<std::string>{"sw_power_cap"});
  CHECK(env::throttle_reason_names(0x1 | 0x40) == std::vector<std::string>{"gpu_idle", "hw_thermal_slowdown"});
  CHECK(env::throttle_reason_names(uint64_t{1} << 20) == std::vector<std::string>{"bit_20"});
  CHECK(env::host_cpu_model().size() > 0);
}

TEST_CASE("progress: quiet off a terminal, status line and ETA") {
  FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  {
    Progress quiet(10, 2, f);  // a file is not a terminal
    CHECK_FALSE(quiet.active());
    quiet.start_case(0, "a");
    quiet.message("hello");
  }
  std::fseek(f, 0, SEEK_END);
  CHECK(std::ftell(f) == 0);

  double now = 100.0;
  Progress p(4, 2, f, true, [&] { return now; });
  CHECK(p.active());
  p.start_case(0, "causal-s1024");
  p.set_backend("cudnn");
  CHECK(p.status_line() == "[1/4] causal-s1024 | cudnn | 0s elapsed");
  now += 30;
  p.finish_unit();  // 1 of 8 units in 30 s -> 7 more at 30 s each
  CHECK(p.status_line() == "[1/4] causal-s1024 | cudnn | 30s elapsed | ETA 3m30s");
  p.message("a line above");
  p.done();
  std::fflush(f);
  std::fseek(f, 0, SEEK_SET);
  std::string written(4096, '\0');
  written.resize(std::fread(written.data(), 1, written.size(), f));
  std::fclose(f);
  CHECK(written.find("a line above\n") != std::string::npos);
  CHECK(written.find("\r\x1b[2K") != std::string::npos);

  CHECK(Progress::format_duration(59.4) == "59s");
  CHECK(Progress::format_duration(187) == "3m07s");
  CHECK(Progress::format_duration(7500) == "2h05m");
  CHECK(Progress::format_duration(-1) == "?");
}

TEST_CASE("written reports and the baselines validate against reports/report.schema.json") {
  const char* node_env = std::getenv("ATTNBENCH_NODE");  // node binary (default: node on PATH)
  const std::string node_cmd = node_env && *node_env ? node_env : "node";
  const std::string node = test::run_command("command -v '" + node_cmd + "'").second;
  const std::string validator = kSource + "/tests/html/validate_report.mjs";
  const std::string schema = kSource + "/reports/report.schema.json";
  const bool have_ajv = fs::exists(kSource + "/reports/node_modules/ajv/dist/2020.js");
  if (node.empty() || !have_ajv) {
    const std::string why = node.empty() ? "node not found" : "reports/node_modules/ajv missing (npm ci in reports/)";
    if (skip_allowed()) {
      std::fprintf(stderr, "\n*** SKIPPED: schema validation (%s); ATTNBENCH_ALLOW_BROWSER_SKIP=1 ***\n\n", why.c_str());
      return;
    }
    FAIL("schema validation cannot run: " << why << " (run ci/install_browser.sh, or set ATTNBENCH_ALLOW_BROWSER_SKIP=1)");
  }
  fs::path written = scratch("written.json");
  write_sample_report(written);
  auto [rc, out] = test::run_command("'" + node_cmd + "' '" + validator + "' '" + schema + "' '" + written.string() + "' '" + kBaseline + "' '" +
                       kRerun + "' 2>&1");
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("\"valid\":false") == std::string::npos);

  // the validator really validates: broken reports are rejected
  json bad = jsonu::load_file(kBaseline);
  bad["results"][0]["status"] = "passed";
  bad["results"][1].erase("check");
  bad["results"][2]["timing"]["fwd"].erase("samples_ms");
  fs::path bad_path = scratch("invalid.json");
  write(bad_path, bad.dump());
  auto [rc2, out2] = test::run_command("'" + node_cmd + "' '" + validator + "' '" + schema + "' '" + bad_path.string() + "' 2>&1");
  INFO(out2);
  CHECK(rc2 == 1);
  CHECK(out2.find("/results/0/status") != std::string::npos);
  CHECK(out2.find("/results/1") != std::string::npos);
  CHECK(out2.find("/results/2/timing/fwd") != std::string::npos);

  // an unsupported row without its reason is rejected
  json unsup = jsonu::load_file(kBaseline);
  for (auto& r : unsup["results"])
    if (r["status"] == "unsupported") r.erase("reason");
  write(bad_path, unsup.dump());
  CHECK(test::run_command("'" + node_cmd + "' '" + validator + "' '" + schema + "' '" + bad_path.string() + "' >/dev/null 2>&1").first == 1);
}
