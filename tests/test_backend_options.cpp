// Backend options and variants (harness/backend/options.hpp, docs/backend-options.md):
// declarations, the NAME[k=v,...] syntax, resolution and labels, the registry, the
// cpu backend's `threads`, the fused backends' declarations (CPU-compiled header),
// a scenario's "backends" list, and report rows keyed by variant.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/fused/fused_options.hpp"
#include "harness/backend/backend.hpp"
#include "harness/backend/options.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/tensors.hpp"
#include "harness/workloads/scenario.hpp"
#include "reports/compare.hpp"
#include "reports/report.hpp"
#include "reports/summary.hpp"
#include "tests/cli_util.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace

TEST_CASE("options: canonical values per type, errors name backend, option and value") {
  const OptionSpec b = OptionSpec::flag("fast", false, "doc");
  CHECK(b.canonical("1", "x", "f", "/p") == "true");
  CHECK(b.canonical("Off", "x", "f", "/p") == "false");
  CHECK(b.canonical("yes", "x", "f", "/p") == "true");
  const std::string e = error_of([&] { b.canonical("maybe", "myb", "file.json", "/backends/1"); });
  CHECK(has(e, "file.json: /backends/1:"));
  CHECK(has(e, "backend \"myb\""));
  CHECK(has(e, "option fast=\"maybe\""));
  CHECK(has(e, "true|false"));

  const OptionSpec n = OptionSpec::integer("threads", 0, 0, 16, "doc");
  CHECK(n.canonical("12", "cpu", "", "") == "12");
  CHECK(n.allowed() == "0..16");
  CHECK(has(error_of([&] { n.canonical("17", "cpu", "", ""); }), "out of range"));
  CHECK(has(error_of([&] { n.canonical("1x", "cpu", "", ""); }), "not an integer"));
  CHECK(has(error_of([&] { n.canonical("", "cpu", "", ""); }), "not an integer"));
  CHECK(n.typed("12") == nlohmann::json(12));

  const OptionSpec c = OptionSpec::choice("block", "128", {"128", "64"}, "doc");
  CHECK(c.canonical("64", "flex", "", "") == "64");
  CHECK(has(error_of([&] { c.canonical("96", "flex", "", ""); }), "allowed: 128|64"));
  CHECK(c.to_json()["default"] == "128");
  CHECK(c.to_json()["type"] == "enum");

  const OptionSpec t = OptionSpec::text("bounds", "", "doc");
  CHECK(t.canonical("128/256", "cudnn", "", "") == "128/256");
  CHECK(has(error_of([&] { t.canonical("a=b", "cudnn", "", ""); }), "may not hold"));

  CHECK_THROWS_AS(OptionSpec::choice("x", "3", {"1", "2"}, "doc"), std::logic_error);
  CHECK_THROWS_AS(OptionSpec::integer("x", 5, 0, 4, "doc"), std::logic_error);
}

TEST_CASE("options: the variant syntax splits at top-level commas and checks brackets") {
  const auto list = split_backend_list("flex, flex[block=64] ,flex[bwd_path=sm80,dbias=atomic],,");
  REQUIRE(list.size() == 3);
  CHECK(list[0] == "flex");
  CHECK(list[1] == "flex[block=64]");
  CHECK(list[2] == "flex[bwd_path=sm80,dbias=atomic]");

  const VariantRequest v = parse_variant("flex[ bwd_path = sm80 , dbias=atomic ]", "f", "/p");
  CHECK(v.backend == "flex");
  REQUIRE(v.options.size() == 2);
  CHECK(v.options[0] == std::make_pair(std::string("bwd_path"), std::string("sm80")));
  CHECK(v.options[1] == std::make_pair(std::string("dbias"), std::string("atomic")));
  CHECK(parse_variant("cpu[]", "f", "/p").options.empty());

  CHECK(has(error_of([] { parse_variant("cpu[threads=1", "f", "/p"); }), "'[' without ']'"));
  CHECK(has(error_of([] { parse_variant("cpu[threads]", "f", "/p"); }), "has no '='"));
  CHECK(has(error_of([] { parse_variant("cpu[a=1,a=2]", "f", "/p"); }), "given twice"));
  CHECK(has(error_of([] { parse_variant("[a=1]", "f", "/p"); }), "no backend name"));
  CHECK(has(error_of([] { parse_variant("cpu[a=1]x", "f", "/p"); }), "text after ']'"));
}

TEST_CASE("options: resolution fills defaults; the label lists non-defaults sorted; explicit defaults are the plain name") {
  const OptionSpecs specs = fused::flex_option_specs();
  const OptionValues d = resolve_options("flex", specs, {}, "f", "/p");
  CHECK(d.all().size() == 9);
  CHECK(d.text("block") == "128");
  CHECK(d.text("dbias") == "deterministic");
  CHECK(variant_label("flex", specs, d) == "flex");

  const OptionValues same = resolve_options("flex", specs, {{"block", "128"}, {"bwd_path", "auto"}}, "f", "/p");
  CHECK(same == d);
  CHECK(variant_label("flex", specs, same) == "flex");

  const OptionValues v = resolve_options("flex", specs, {{"dbias", "atomic"}, {"bwd_path", "sm80"}}, "f", "/p");
  CHECK(variant_label("flex", specs, v) == "flex[bwd_path=sm80,dbias=atomic]");
  CHECK(v.integer("block") == 128);
  const nlohmann::json j = options_json(specs, v);
  CHECK(j == nlohmann::json(
                 {{"fwd_path", "auto"}, {"bwd_path", "sm80"}, {"block", "128"}, {"dbias", "atomic"}, {"schedule", "auto"},
                  {"persistent", "auto"}, {"pingpong", "off"},
                  {"tile_order", "l2_groups"}, {"next_tile", "late"}}));
  // the typed JSON reads back to the same resolved set
  CHECK(resolve_options("flex", specs, option_pairs_from_json(j), "f", "/p") == v);

  const std::string e = error_of([&] { resolve_options("flex", specs, {{"blocks", "64"}}, "f", "/p"); });
  CHECK(has(e, "backend \"flex\" has no option \"blocks\""));
  CHECK(has(e, "value \"64\""));
  CHECK(has(e, "fwd_path, bwd_path, block, dbias, schedule"));
  CHECK(has(error_of([&] { resolve_options("flex", specs, {{"block", "96"}}, "f", "/p"); }), "option block=\"96\""));
}

TEST_CASE("options: the fused backends' declarations (flash, varlen, flex)") {
  CHECK(fused::parse_kernel_path("auto") == fused::KernelPath::automatic);
  CHECK(fused::parse_kernel_path("sm80") == fused::KernelPath::sm80);
  CHECK(fused::parse_kernel_path("sm90") == fused::KernelPath::sm90);
  CHECK_THROWS_AS(fused::parse_kernel_path("sm9"), std::invalid_argument);
  const fused::KernelPaths kp = fused::kernel_paths(
      resolve_options("flash", fused::flash_option_specs(), {{"bwd_path", "sm80"}}, "f", "/p"));
  CHECK(kp.fwd == fused::KernelPath::automatic);
  CHECK(kp.bwd == fused::KernelPath::sm80);
  auto names = [](const OptionSpecs& s) {
    std::vector<std::string> out;
    for (const auto& o : s) out.push_back(o.name);
    return out;
  };
  CHECK(names(fused::flash_option_specs()) ==
        std::vector<std::string>{"fwd_path", "bwd_path", "fwd_rows", "deterministic", "dq_direct", "persistent",
                                 "pingpong", "tile_order", "next_tile"});
  CHECK(names(fused::varlen_option_specs()) ==
        std::vector<std::string>{"fwd_path", "bwd_path", "fwd_rows", "deterministic", "dq_direct", "persistent",
                                 "pingpong", "tile_order", "next_tile", "pack"});
  CHECK(names(fused::flex_option_specs()) ==
        std::vector<std::string>{"fwd_path", "bwd_path", "block", "dbias", "schedule", "persistent", "pingpong",
                                 "tile_order", "next_tile"});
  CHECK(resolve_options("flash", fused::flash_option_specs(), {}, "f", "/p").text("pingpong") == "off");
  CHECK(resolve_options("varlen", fused::varlen_option_specs(), {}, "f", "/p").text("next_tile") == "late");
  CHECK(resolve_options("flex", fused::flex_option_specs(), {{"next_tile", "early"}}, "f", "/p").text("next_tile") ==
        "early");
  CHECK(has(error_of([] { resolve_options("flash", fused::flash_option_specs(), {{"next_tile", "soon"}}, "f", "/p"); }),
            "option next_tile=\"soon\""));
  CHECK(fused::parse_tile_order("l2_groups") == fused::TileOrder::l2_groups);
  CHECK(fused::parse_tile_order("sequences") == fused::TileOrder::sequences);
  CHECK(fused::parse_tile_order("longest_first") == fused::TileOrder::longest_first);
  CHECK_THROWS_AS(fused::parse_tile_order("l2"), std::invalid_argument);
  CHECK(has(error_of([] { resolve_options("flash", fused::flash_option_specs(), {{"pingpong", "yes"}}, "f", "/p"); }),
            "option pingpong=\"yes\""));
  CHECK(resolve_options("flex", fused::flex_option_specs(), {}, "f", "/p").text("persistent") == "auto");
  CHECK(has(error_of([] { resolve_options("varlen", fused::varlen_option_specs(), {{"persistent", "1"}}, "f", "/p"); }),
            "option persistent=\"1\""));
  CHECK(fused::parse_auto_on_off("auto") == std::nullopt);
  CHECK(fused::parse_auto_on_off("on") == std::optional<bool>(true));
  CHECK(fused::parse_auto_on_off("off") == std::optional<bool>(false));
  CHECK(resolve_options("varlen", fused::varlen_option_specs(), {}, "f", "/p").text("dq_direct") == "auto");
  CHECK(has(error_of([] { resolve_options("flash", fused::flash_option_specs(), {{"dq_direct", "yes"}}, "f", "/p"); }),
            "option dq_direct=\"yes\""));
  CHECK(fused::parse_fwd_rows("auto") == 0);
  CHECK(fused::parse_fwd_rows("64") == 64);
  CHECK(fused::parse_fwd_rows("128") == 128);
  CHECK(resolve_options("flex", fused::flex_option_specs(), {{"schedule", "documents"}}, "f", "/p").text("schedule") ==
        "documents");
  CHECK(has(error_of([] { resolve_options("flash", fused::flash_option_specs(), {{"fwd_rows", "96"}}, "f", "/p"); }),
            "option fwd_rows=\"96\""));
  const OptionValues v = resolve_options("varlen", fused::varlen_option_specs(), {{"pack", "2"}, {"deterministic", "1"}},
                                         "f", "/p");
  CHECK(v.integer("pack") == 2);
  CHECK(v.flag("deterministic"));
  CHECK(variant_label("varlen", fused::varlen_option_specs(), v) == "varlen[deterministic=true,pack=2]");
  CHECK(has(error_of([] { resolve_options("varlen", fused::varlen_option_specs(), {{"pack", "3"}}, "f", "/p"); }),
            "allowed: 0|1|2|4"));
}

TEST_CASE("options: the registry binds variants; the cpu backend declares threads") {
  const auto plain = BackendRegistry::create("cpu");
  REQUIRE(plain);
  CHECK(plain->variant() == "cpu");
  CHECK(plain->options_json() == nlohmann::json({{"threads", 0}}));
  const auto one = BackendRegistry::create_variant("cpu[threads=1]");
  REQUIRE(one);
  CHECK(one->name() == "cpu");
  CHECK(one->variant() == "cpu[threads=1]");
  CHECK(one->option_values().integer("threads") == 1);
  CHECK(BackendRegistry::create_variant("nope[x=1]") == nullptr);

  CHECK(BackendRegistry::resolve_variants({"cpu", "cpu[threads=1]", "cpu[threads=2]"}, "f", "/p") ==
        std::vector<std::string>{"cpu", "cpu[threads=1]", "cpu[threads=2]"});
  const std::string dup = error_of([] { BackendRegistry::resolve_variants({"cpu", "cpu[threads=0]"}, "f", "/p"); });
  CHECK(has(dup, "listed more than once"));
  CHECK(has(dup, "\"cpu[threads=0]\" is that variant"));
  CHECK(has(error_of([] { BackendRegistry::resolve_variants({"cpux"}, "f", "/p"); }), "unknown backend \"cpux\""));
  CHECK(has(error_of([] { BackendRegistry::resolve_variants({"cpu[threads=-1]"}, "f", "/p"); }),
            "option threads=\"-1\": out of range"));
}

TEST_CASE("options: cpu threads=1 gives bitwise the same outputs as every thread") {
  Problem p = test::with_causal(test::make_problem(2, 4, 2, 96, 96, 64, DType::bf16));
  const ProblemData in = make_inputs(p);
  auto run = [&](const std::string& variant) {
    auto b = BackendRegistry::create_variant(variant);
    auto inst = b->prepare(p, in);
    inst->poison_outputs();
    inst->forward();
    inst->backward();
    return inst->read_outputs(true);
  };
  const AttentionOutputs a = run("cpu"), b = run("cpu[threads=1]");
  REQUIRE(a.o.data.size() == static_cast<size_t>(2 * 4 * 96 * 64));
  CHECK(a.o.data == b.o.data);
  CHECK(a.dq.data == b.dq.data);
  CHECK(a.dk.data == b.dk.data);
  // the scratch accounting follows the option: one worker's scratch is the least
  CHECK(BackendRegistry::create_variant("cpu[threads=1]")->workspace_bytes(p) <=
        BackendRegistry::create("cpu")->workspace_bytes(p));
}

TEST_CASE("options: a scenario's backends list, strings and the sweep form") {
  const nlohmann::json j = {
      {"base", {{"batch", 1}, {"heads_q", 2}, {"heads_kv", 2}, {"seq", 64}, {"head_dim", 64}, {"dtype", "bf16"},
                {"mask", nlohmann::json::array({{{"kind", "causal"}}})}}},
      {"axes", {{"seq", {64}}}},
      {"backends",
       {"cpu", "flex[block=64]",
        {{"backend", "flex"}, {"options", {{"bwd_path", "sm80"}}}, {"sweep", {{"block", {64, 128}}, {"dbias", {"atomic"}}}}}}}};
  const Scenario s = scenario_from_json(j, "s.json");
  CHECK(s.backends == std::vector<std::string>{"cpu", "flex[block=64]", "flex[bwd_path=sm80,block=64,dbias=atomic]",
                                               "flex[bwd_path=sm80,block=128,dbias=atomic]"});
  nlohmann::json bad = j;
  bad["backends"] = {{{"backend", "flex"}, {"sweep", {{"block", nlohmann::json::array()}}}}};
  CHECK(has(error_of([&] { scenario_from_json(bad, "s.json"); }), "s.json: /backends/0/sweep/block"));
  bad["backends"] = {{{"backend", "flex"}, {"options", {{"block", 1.5}}}}};
  CHECK(has(error_of([&] { scenario_from_json(bad, "s.json"); }), "/backends/0/options/block"));
  bad["backends"] = nlohmann::json::array();
  CHECK(has(error_of([&] { scenario_from_json(bad, "s.json"); }), "s.json: /backends"));
}

TEST_CASE("options: report rows are keyed by variant; rows without one are the backend at defaults") {
  ReportRow r;
  r.case_id = "c";
  r.backend = "cpu";
  r.status = RowStatus::pass;
  nlohmann::json a = r.to_json();
  CHECK(a["variant"] == "cpu");
  CHECK(a["options"] == nlohmann::json::object());
  r.variant = "cpu[threads=1]";
  r.options = {{"threads", 1}};
  nlohmann::json b = r.to_json();
  CHECK(ReportRow::from_json(b).variant == "cpu[threads=1]");
  CHECK(row_key(a) == "c|cpu");
  CHECK(row_key(b) == "c|cpu[threads=1]");
  nlohmann::json old = a;
  old.erase("variant");
  old.erase("options");
  CHECK(row_variant(old) == "cpu");
  CHECK(ReportRow::from_json(old).variant == "cpu");

  // a version 1 report (no variants) loads as version 3, every row its backend at defaults
  const nlohmann::json up = load_report(std::string(ATTNBENCH_SOURCE_DIR) + "/ci/baselines/example-h100.json");
  CHECK(up["schema_version"] == 3);
  CHECK(up["upgraded_from"] == 1);
  REQUIRE(!up["results"].empty());
  for (const auto& row : up["results"]) {
    CHECK(row["variant"] == row["backend"]);
    CHECK(row["options"] == nlohmann::json::object());
  }

  // two variants of one case are two rows for summary
  nlohmann::json rep = {{"results", nlohmann::json::array({a, b})}};
  const ReportSummary sum = summarize_report(rep);
  CHECK(sum.backends.size() == 2);
  CHECK(sum.backends.count("cpu[threads=1]") == 1);
}

TEST_CASE("options: `run --backends cpu,cpu[threads=1]` on scenarios/default.json writes two variants per case") {
  namespace cli = attnbench::test::cli;
  cli::TempDir t;
  const std::string scenario = std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios/default.json";
  const std::string out = (t.path / "o").string();
  const cli::Result r = cli::run("run '" + scenario + "' --backends 'cpu,cpu[threads=1]' --out '" + out +
                                     "' --no-backward --no-determinism --max-seconds 0.01 --min-samples 1",
                                 t);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json rep = load_report(out + "/report.json");
  CHECK(rep["backends"] == nlohmann::json({"cpu", "cpu[threads=1]"}));
  const auto& rows = rep["results"];
  REQUIRE(rows.size() == 16);  // 8 cases x 2 variants
  for (size_t i = 0; i < rows.size(); i += 2) {
    CHECK(rows[i]["case_id"] == rows[i + 1]["case_id"]);
    CHECK(rows[i]["backend"] == "cpu");
    CHECK(rows[i + 1]["backend"] == "cpu");
    CHECK(rows[i]["variant"] == "cpu");
    CHECK(rows[i + 1]["variant"] == "cpu[threads=1]");
    CHECK(rows[i]["options"] == nlohmann::json({{"threads", 0}}));
    CHECK(rows[i + 1]["options"] == nlohmann::json({{"threads", 1}}));
    CHECK(rows[i]["status"] == "pass");
    CHECK(rows[i + 1]["status"] == "pass");
    CHECK(rows[i + 1]["timing"]["fwd"]["median_ms"].get<double>() > 0.0);
  }

  // summary: one line per variant, 8 passing cases each
  const ReportSummary sum = summarize_report(rep);
  REQUIRE(sum.backends.size() == 2);
  CHECK(sum.backends.at("cpu").pass == 8);
  CHECK(sum.backends.at("cpu[threads=1]").pass == 8);
  const cli::Result s = cli::run("summary '" + out + "/report.json'", t);
  CHECK(s.code == 0);
  CHECK(cli::contains(s.out, "cpu[threads=1]"));

  // compare: a base without the threads=1 variant sees its 8 rows as added, the
  // cpu rows compared with themselves
  nlohmann::json base = rep;
  base["results"] = nlohmann::json::array();
  for (const auto& row : rows)
    if (row["variant"] == "cpu") base["results"].push_back(row);
  const Comparison c = compare_reports(base, rep, "base.json", "new.json");
  CHECK(c.rows_compared == 8);
  REQUIRE(c.added.size() == 8);
  for (const auto& key : c.added) CHECK(key.find("|cpu[threads=1]") != std::string::npos);
  CHECK(c.missing.empty());
  const Comparison self = compare_reports(rep, rep, "a", "a");
  CHECK(self.rows_compared == 16);

  // a bad option exits 2 before anything is written
  const std::string out2 = (t.path / "o2").string();
  const cli::Result bad = cli::run("run '" + scenario + "' --backends 'cpu[threads=many]' --out '" + out2 + "'", t);
  CHECK(bad.code == 2);
  CHECK(cli::contains(bad.err, "backend \"cpu\": option threads=\"many\""));
  CHECK_FALSE(std::filesystem::exists(out2));

  // list backends --options prints the declaration
  const cli::Result l = cli::run("list backends --options", t);
  CHECK(l.code == 0);
  CHECK(cli::contains(l.out, "threads"));
  CHECK(cli::contains(l.out, "0..4096"));
}

TEST_CASE("options: --gpus shards and isolated children receive the variant, not an environment") {
  namespace cli = attnbench::test::cli;
  cli::TempDir t;
  const std::string scenario = std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios/default.json";
  const std::string out = (t.path / "g").string();
  // Two fake GPUs: each shard is a child `attnbench run --shard k/2` given the same --backends text.
  const cli::Result r = cli::run("run '" + scenario + "' --gpus 0,1 --cases 'full-S256|causal-S384|alibi' "
                                 "--backends 'cpu,cpu[threads=1]' --no-timing --no-determinism --out '" + out + "'",
                                 t, "ATTNBENCH_FAKE_GPUS=2");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json rep = load_report(out + "/report.json");
  REQUIRE(rep["results"].size() == 6);  // 3 cases x 2 variants, merged from the shards
  int ones = 0;
  for (const auto& row : rep["results"]) {
    CHECK(row["status"] == "pass");
    if (row["variant"] == "cpu[threads=1]") {
      ++ones;
      CHECK(row["options"] == nlohmann::json({{"threads", 1}}));
    }
  }
  CHECK(ones == 3);

  // --isolate on: each unit runs in a child `attnbench __unit`, whose request holds the options.
  const std::string iso = (t.path / "i").string();
  const cli::Result ri = cli::run("run '" + scenario + "' --cases full-S256 --backends 'cpu[threads=1]' --isolate on "
                                  "--no-timing --no-determinism --out '" + iso + "'",
                                  t);
  INFO(ri.err);
  REQUIRE(ri.code == 0);
  const nlohmann::json ir = load_report(iso + "/report.json");
  REQUIRE(ir["results"].size() == 1);
  CHECK(ir["results"][0]["variant"] == "cpu[threads=1]");
  CHECK(ir["results"][0]["options"] == nlohmann::json({{"threads", 1}}));
  CHECK(ir["results"][0]["extra"].contains("isolation"));
  CHECK(ir["results"][0]["status"] == "pass");
}
