// The typed path from timing to report: the derive step (throughput, ceilings,
// roofline floor) on hand-computed examples, schema version 2 round trips,
// version 1 reports still loading and comparing, and schema validation naming
// the field (valijson; a loud skip in builds without it).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/model/problem.hpp"
#include "reports/compare.hpp"
#include "reports/derive.hpp"
#include "reports/report.hpp"
#include "tests/schema_skip.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kSource = ATTNBENCH_SOURCE_DIR;
const std::string kBaselineV1 = kSource + "/ci/baselines/example-h100.json";

/// B=1, Hq=2, Hkv=1, S=128, D=64, bf16, no mask: 2 * 128 * 128 = 32768 useful pairs.
Problem small_problem() { return test::make_problem(1, 2, 1, 128, 128, 64, DType::bf16); }

/// One-sample timing stats with median `ms`, timed by `timer`.
TimingStats stats(double ms, const std::string& timer = "cuda_events") {
  TimingStats t;
  t.samples_ms = {ms};
  t.summarize();
  t.timer = timer;
  t.stop_reason = "max_samples";
  return t;
}

/// The InputError of loading `text` as a report file, or a failed test.
InputError load_error(const std::string& name, const json& doc) {
  const fs::path p = test::scratch_path("derive", name);
  test::write_file(p, doc.dump());
  try {
    load_report(p.string());
  } catch (const InputError& e) {
    return e;
  }
  FAIL("expected an InputError loading " << p.string());
  return InputError("", "", "");
}

}  // namespace

TEST_CASE("count_work: FLOPs and fewest bytes by hand") {
  const WorkFigures w = count_work(small_problem(), 32768, 49152);
  // fwd FLOPs = 2 * pairs * (64 + 64) = 256 * pairs
  CHECK(w.useful_flops_fwd == 8388608.0);
  CHECK(w.executed_flops_fwd == 12582912.0);
  CHECK(w.useful_flops_bwd == 20971520.0);  // 2.5 x
  CHECK(w.executed_flops_bwd == 31457280.0);
  CHECK(w.tile_efficiency == doctest::Approx(2.0 / 3.0).epsilon(1e-15));
  // |Q| = |O| = 1*2*128*64 = 16384, |K| = |V| = 8192, |LSE| = 256, e = 2:
  // fwd 2 * 49152 + 4 * 256 = 99328; bwd 4 * 49152 + 4 * 256 = 197632.
  REQUIRE(w.min_bytes_fwd);
  REQUIRE(w.min_bytes_bwd);
  CHECK(*w.min_bytes_fwd == 99328.0);
  CHECK(*w.min_bytes_bwd == 197632.0);

  // A learnable rel_bias (max_distance 3): bias [Hq, 7] = 14 float32, read in both
  // passes; dBias (14 float32) written by the backward.
  Problem b = small_problem();
  b.score_mod.kind = ScoreMod::Kind::rel_bias;
  b.score_mod.max_distance = 3;
  const WorkFigures wb = count_work(b, 32768, 32768);
  CHECK(*wb.min_bytes_fwd == 99328.0 + 56.0);
  CHECK(*wb.min_bytes_bwd == 197632.0 + 112.0);
  // fp32 doubles the tensor bytes, not LSE's
  Problem f = small_problem();
  f.dtype = DType::fp32;
  CHECK(*count_work(f, 1, 1).min_bytes_fwd == 4.0 * 49152 + 1024);

  // The compact problem JSON of a row gives the same sizes.
  const auto size = problem_size_from_json(to_json(b, true));
  REQUIRE(size);
  CHECK(min_bytes(*size, false) == *wb.min_bytes_fwd);
  CHECK(min_bytes(*size, true) == *wb.min_bytes_bwd);
  CHECK_FALSE(problem_size_from_json(json()).has_value());
}

TEST_CASE("derive_pass: rates, % of ceilings and the roofline floor by hand") {
  CeilingRates c;
  c.gemm_tflops = 100.0;   // 1e14 FLOP/s
  c.copy_gbps = 1000.0;    // 1e12 bytes/s
  // fwd of small_problem in 0.001 ms = 1e-6 s
  const PassFigures f = derive_pass(8388608.0, 12582912.0, 99328.0, 0.001, c);
  CHECK(*f.useful_tflops == doctest::Approx(8.388608).epsilon(1e-12));
  CHECK(*f.executed_tflops == doctest::Approx(12.582912).epsilon(1e-12));
  CHECK(*f.pct_gemm == doctest::Approx(8.388608).epsilon(1e-12));
  CHECK(*f.achieved_gbps == doctest::Approx(99.328).epsilon(1e-12));
  CHECK(*f.pct_copy == doctest::Approx(9.9328).epsilon(1e-12));
  // memory floor 99328 B / 1e12 B/s = 9.9328e-5 ms; compute floor 8388608 / 1e14 = 8.388608e-5 ms
  CHECK(*f.memory_floor_ms == doctest::Approx(9.9328e-5).epsilon(1e-12));
  CHECK(*f.compute_floor_ms == doctest::Approx(8.388608e-5).epsilon(1e-12));
  CHECK(*f.floor_ms == *f.memory_floor_ms);
  CHECK(f.bound == "memory");
  CHECK(*f.x_floor == doctest::Approx(0.001 / 9.9328e-5).epsilon(1e-12));  // 10.0677

  // A tenth of the GEMM rate makes the same pass compute-bound.
  c.gemm_tflops = 10.0;
  const PassFigures g = derive_pass(8388608.0, 12582912.0, 99328.0, 0.001, c);
  CHECK(g.bound == "compute");
  CHECK(*g.floor_ms == doctest::Approx(8.388608e-4).epsilon(1e-12));
  CHECK(*g.x_floor == doctest::Approx(1.1920928955078125).epsilon(1e-12));  // 0.001 / 8.388608e-4

  // No ceilings: the rates only.
  const PassFigures n = derive_pass(8388608.0, 12582912.0, 99328.0, 0.001, {});
  CHECK(*n.useful_tflops == doctest::Approx(8.388608).epsilon(1e-12));
  CHECK_FALSE(n.pct_gemm.has_value());
  CHECK_FALSE(n.floor_ms.has_value());
  CHECK(n.bound.empty());
  // No time: nothing but the inputs.
  CHECK_FALSE(derive_pass(1, 1, 1.0, 0.0, c).useful_tflops.has_value());
}

TEST_CASE("derive_row: every timed pass, fwd_bwd sums both passes, CPU rows get no ceilings") {
  const WorkFigures w = count_work(small_problem(), 32768, 32768);
  PassTimings t;
  t.set(Pass::forward, stats(0.001));
  t.set(Pass::forward_backward, stats(0.004));
  CeilingRates c;
  c.gemm_tflops = 100.0;
  c.copy_gbps = 1000.0;
  const auto d = derive_row(w, t, json(), c);
  REQUIRE(d);
  CHECK(d->bwd == std::nullopt);
  REQUIRE(d->fwd_bwd);
  // (8388608 + 20971520) FLOPs in 4e-6 s = 7.33999... TFLOP/s; bytes 99328 + 197632 = 296960
  CHECK(d->fwd_bwd->useful_flops == 29360128.0);
  CHECK(*d->fwd_bwd->useful_tflops == doctest::Approx(7.340032).epsilon(1e-12));
  CHECK(*d->fwd_bwd->min_bytes == 296960.0);
  CHECK(*d->fwd_bwd->memory_floor_ms == doctest::Approx(2.9696e-4).epsilon(1e-12));
  CHECK(*d->fwd_bwd->compute_floor_ms == doctest::Approx(2.9360128e-4).epsilon(1e-12));
  CHECK(d->fwd_bwd->bound == "memory");

  PassTimings cpu;
  cpu.set(Pass::forward, stats(0.001, "steady_clock"));
  const auto dc = derive_row(w, cpu, json(), c);
  REQUIRE(dc);
  CHECK(*dc->fwd->useful_tflops == doctest::Approx(8.388608).epsilon(1e-12));
  CHECK_FALSE(dc->fwd->pct_gemm.has_value());
  CHECK_FALSE(dc->fwd->floor_ms.has_value());

  CHECK_FALSE(derive_row(w, PassTimings{}, json(), c).has_value());
  CHECK_FALSE(derive_row(std::nullopt, t, json(), c).has_value());
}

TEST_CASE("a version 2 row round-trips through its JSON") {
  ReportRow r;
  r.case_id = "c1";
  r.backend = "flash";
  r.status = RowStatus::fail;
  r.message = "numerics";
  r.problem = to_json(small_problem(), true);
  r.work = count_work(small_problem(), 32768, 40000);
  CheckFigures ck;
  ck.pass = false;
  ck.mode = "full";
  ck.scope = "all";
  ck.worst_ratio.value = std::numeric_limits<double>::infinity();
  TensorCheckFigures o;
  o.name = "O";
  o.ratio.value = std::nan("");
  o.max_abs_err.value = 0.25;
  o.checked = 100;
  ck.tensors = {o};
  ck.fully_masked_rows = 0;
  ck.failure_class = "numerics";
  ck.failure_detail = "O: 3 elements";
  r.check = ck;
  r.timing.set(Pass::forward, stats(0.5));
  MemoryFigures m;
  m.allocated_bytes = 4096;
  r.memory = m;
  CeilingRates c;
  c.gemm_tflops = 700.0;
  c.copy_gbps = 3000.0;
  r.derive(c);
  REQUIRE(r.derived);
  const json j = r.to_json();
  CHECK(j["check"]["worst_ratio"] == "inf");
  CHECK(j["check"]["tensors"][0]["ratio"] == "nan");
  CHECK(j["memory"] == json{{"allocated_bytes", 4096}});
  CHECK(j["derived"]["fwd"]["bound"].is_string());
  const ReportRow back = ReportRow::from_json(j);
  CHECK(back.to_json() == j);
  CHECK(std::isinf(*back.check->worst_ratio.value));
  CHECK(std::isnan(*back.check->tensors[0].ratio.value));
  CHECK(back.work->min_bytes_fwd == r.work->min_bytes_fwd);
  CHECK(back.derived->fwd->x_floor == r.derived->fwd->x_floor);

  // A written report loads back with the stored figures untouched.
  const fs::path p = test::scratch_path("derive", "v2.json");
  {
    ReportWriter w(p.string(), {{"command", "x"}, {"scenario", {{"name", "t"}}},
                                {"environment", jsonu::load_file(kBaselineV1)["environment"]}});
    w.add_row(r);
    w.finish();
  }
  const json doc = load_report(p.string());
  CHECK(doc["schema_version"] == kReportSchemaVersion);
  CHECK_FALSE(doc.contains("upgraded_from"));
  CHECK(doc["results"][0]["derived"] == j["derived"]);
}

TEST_CASE("a version 1 report loads as the current version with derived figures, and compares") {
  const json raw = jsonu::load_file(kBaselineV1);
  REQUIRE(raw["schema_version"] == 1);
  const json v1 = load_report(kBaselineV1);
  CHECK(v1["schema_version"] == kReportSchemaVersion);
  CHECK(v1["upgraded_from"] == 1);
  // causal-s1024 on cudnn: figures from its work, median and the file's ceilings
  const json& row = v1["results"][3];
  REQUIRE(row["backend"] == "cudnn");
  const double fwd = row["timing"]["fwd"]["median_ms"].get<double>();
  const double uf = row["work"]["useful_flops_fwd"].get<double>();
  const double gemm = raw["ceilings"]["gemm_bf16_tflops"].get<double>();
  CHECK(row["derived"]["fwd"]["useful_tflops"].get<double>() == doctest::Approx(uf / (fwd * 1e-3) / 1e12));
  CHECK(row["derived"]["fwd"]["pct_gemm"].get<double>() == doctest::Approx(100.0 * uf / (fwd * 1e-3) / 1e12 / gemm));
  // fwd_bwd by hand: B2 Hq16 Hkv4 S1024 D128 bf16; |Q| = |O| = 4194304, |K| = |V| =
  // 1048576, |LSE| = 32768: bytes 21102592 (fwd) + 42074112 (bwd) = 63176704, over
  // 2980 GB/s = 0.0212 ms; FLOPs 8598323200 + 21495808000 = 30094131200 over 745
  // TFLOP/s = 0.040395 ms: compute-bound; median 0.118001 ms = 2.92 x the floor.
  const json& fb = row["derived"]["fwd_bwd"];
  CHECK(fb["min_bytes"].get<double>() == 63176704.0);
  CHECK(fb["useful_flops"].get<double>() == 30094131200.0);
  CHECK(fb["memory_floor_ms"].get<double>() == doctest::Approx(63176704.0 / 2980e6).epsilon(1e-12));
  CHECK(fb["floor_ms"].get<double>() == doctest::Approx(30094131200.0 / 745e9).epsilon(1e-12));
  CHECK(fb["bound"] == "compute");
  CHECK(fb["x_floor"].get<double>() == doctest::Approx(0.118001 / (30094131200.0 / 745e9)).epsilon(1e-12));
  // The unsupported row has nothing to derive.
  CHECK(v1["results"][8]["derived"].is_null());

  // Saved as the current version (what merge writes) and compared with the version 1 file.
  const fs::path p = test::scratch_path("derive", "v1-as-v2.json");
  test::write_file(p, v1.dump());
  const json v2 = load_report(p.string());
  CHECK(v2["results"][3]["derived"] == row["derived"]);
  const Comparison cmp = compare_reports(v1, v2, "v1.json", "v2.json");
  CHECK(cmp.rows_compared == static_cast<int64_t>(v1["results"].size()));
  CHECK(cmp.regressions() == 0);
  CHECK(cmp.exit_code() == 0);
}

TEST_CASE("schema version outside 1..3 is refused naming /schema_version") {
  json doc = jsonu::load_file(kBaselineV1);
  doc["schema_version"] = 4;
  const InputError e = load_error("v4.json", doc);
  CHECK(e.json_path() == "/schema_version");
  CHECK(std::string(e.what()).find("reads 1 to 3") != std::string::npos);
}

TEST_CASE("the schema rejects a malformed report naming file, field and value") {
  if (!test::schema_validation_or_loud_skip("schema errors")) return;
  json doc = jsonu::load_file(kBaselineV1);
  doc["results"][3]["status"] = "bogus";
  InputError e = load_error("bad-status.json", doc);
  CHECK(e.json_path() == "/results/3/status");
  CHECK(std::string(e.what()).find("bad-status.json") != std::string::npos);
  CHECK(std::string(e.what()).find("\"bogus\"") != std::string::npos);

  // A version 2 row's derived figure of the wrong type.
  json v2 = load_report(kBaselineV1);
  v2["results"][3]["derived"]["fwd"]["x_floor"] = "fast";
  e = load_error("bad-derived.json", v2);
  CHECK(e.json_path() == "/results/3/derived/fwd/x_floor");
  CHECK(std::string(e.what()).find("\"fast\"") != std::string::npos);

  // A missing required field is named by its own pointer.
  doc = jsonu::load_file(kBaselineV1);
  doc["results"][2].erase("case_id");
  e = load_error("no-case.json", doc);
  CHECK(e.json_path() == "/results/2/case_id");
  CHECK(std::string(e.what()).find("(absent)") != std::string::npos);

  // The schema built into the binary is the file in the tree.
  std::ifstream in(kSource + "/reports/report.schema.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(json::parse(report_schema_text()) == json::parse(text));
}
