// Shared-library backends (docs/plugins.md): the C header's helpers agree with
// the harness's own mask and dtype code, the C view of a problem, loading errors
// through the real binary (missing entry point, ABI version mismatch, name clash,
// missing file: exit 2 naming the file), and plugin backends in a real run (the
// example-cpu plugin passes the rule on every mask kind and layout; a plugin
// whose forward fails gives `error` rows, one that declines gives `unsupported`).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include <attnbench/plugin.h>
#include <nlohmann/json.hpp>

#include "backends/plugin/plugin_backend.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/tensors.hpp"
#include "reports/report.hpp"
#include "test_util.hpp"

namespace {

using namespace attnbench;
using namespace attnbench::test;

struct Result {
  int code = -1;
  std::string out, err;
};

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Run `env attnbench ARGS` in a scratch directory, capturing stdout, stderr and the exit code.
Result run(const std::string& args, const std::string& env = "") {
  const auto out = scratch_path("plugin", "stdout.txt"), err = scratch_path("plugin", "stderr.txt");
  const std::string cmd = env + (env.empty() ? "" : " ") + "'" + std::string(ATTNBENCH_BINARY) + "' " + args +
                          " >'" + out.string() + "' 2>'" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

/// Problems covering every mask kind (and combinations) for the helper checks.
std::vector<Problem> mask_problems() {
  std::vector<Problem> ps;
  const Problem base = make_problem(2, 2, 1, 160, 160, 16, DType::bf16);
  ps.push_back(with_causal(base, CausalAlign::top_left));
  ps.push_back(with_causal(make_problem(2, 2, 1, 70, 150, 16, DType::bf16), CausalAlign::bottom_right));
  ps.push_back(with_window(with_causal(base), 17, 0));
  ps.push_back(with_window(make_problem(1, 2, 2, 90, 40, 16, DType::fp16), 5, 9));
  ps.push_back(with_documents(base, {{30, 0, 100}, {160}}));
  ps.push_back(with_padding(with_causal(base), {160, 77}, {150, 90}));
  Problem prefix = base;
  prefix.mask.push_back(PrefixLmTerm{40});
  ps.push_back(prefix);
  Problem sparse = make_problem(1, 1, 1, 300, 260, 16, DType::fp32);
  sparse.mask.push_back(BlockSparseTerm{0.5, 11});
  ps.push_back(sparse);
  return ps;
}

std::string plugin_scenario() {
  return R"({"name": "plugin-test", "description": "every mask kind and layout on a tiny problem",
  "base": {"batch": 2, "heads_q": 4, "heads_kv": 2, "head_dim": 16, "dtype": "bf16", "layout": "bshd",
           "seq": 96, "mask": [], "score_mod": {"kind": "none"}, "seed": 3},
  "parts": [
    {"name": "fp32-bhsd-causal-tl-cross", "base": {"dtype": "fp32", "layout": "bhsd", "seq_q": 48, "seq_k": 80,
      "mask": [{"kind": "causal", "align": "top_left"}]}},
    {"name": "thd-padding-causal", "base": {"layout": "thd",
      "mask": [{"kind": "causal"}, {"kind": "padding", "seq_lens_q": [96, 41], "seq_lens_k": [96, 41]}]}},
    {"name": "fp16-documents-prefix", "base": {"dtype": "fp16",
      "mask": [{"kind": "document", "doc_lengths": [[30, 0, 50, 16], [96]]}, {"kind": "prefix_lm", "prefix_len": 20}]}},
    {"name": "block-sparse", "base": {"seq": 260, "batch": 1, "mask": [{"kind": "block_sparse", "density": 0.5, "seed": 5}]}},
    {"name": "window-alibi", "base": {"mask": [{"kind": "causal"}, {"kind": "sliding_window", "left": 24, "right": 0}],
      "score_mod": {"kind": "alibi"}}},
    {"name": "softcap", "base": {"score_mod": {"kind": "softcap", "cap": 5}}},
    {"name": "rel-bias", "base": {"score_mod": {"kind": "rel_bias", "max_distance": 8}}}
  ]})";
}

/// Rows of a report, keyed by case id (one backend per report here).
std::map<std::string, nlohmann::json> rows_by_case(const std::filesystem::path& report) {
  std::map<std::string, nlohmann::json> out;
  const auto doc = nlohmann::json::parse(slurp(report));
  for (const auto& r : doc.at("results")) out[r.at("case_id").get<std::string>()] = r;
  return out;
}

}  // namespace

TEST_CASE("plugin.h: attnb_mask_allowed equals mask_allowed on every mask kind") {
  for (const Problem& p : mask_problems()) {
    CAPTURE(describe_mask(p));
    validate(p);
    plugin::CProblem cp(p);
    MaskArrays arrays;
    const MaskDesc m = make_mask_desc(p, arrays);
    int64_t allowed_count = 0, mismatches = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t i = 0; i < p.seq_q; ++i)
        for (int64_t j = 0; j < p.seq_k; ++j) {
          const bool want = mask_allowed(m, b, 0, i, j);
          allowed_count += want;
          mismatches += want != (attnb_mask_allowed(&cp.view(), b, i, j) != 0);
        }
    CHECK(mismatches == 0);
    CHECK(allowed_count == count_allowed_pairs(p));  // the walk covered the problem
  }
}

TEST_CASE("plugin.h: attnb_store rounds like round_to and attnb_load reads back exactly") {
  Rng rng{42};
  std::vector<double> values = {0.0, -0.0, 1.0, -2.5, 65504.0, 65519.0, 65520.0, 1e-8, 5.960464477539063e-08,
                                3.0e-5, 6.1e-5, 1.0009765625, 1.00048828125, 3.3895313892515355e+38, 1e39};
  for (int k = 0; k < 2000; ++k) {
    const double mag = std::ldexp(1.0, static_cast<int>(rng.uniform(-26, 17)));
    values.push_back((static_cast<double>(rng.next() >> 11) / 9007199254740992.0 - 0.5) * mag);
  }
  for (auto [dt, ct] : {std::pair{DType::fp16, ATTNB_FP16}, {DType::bf16, ATTNB_BF16}, {DType::fp32, ATTNB_FP32}}) {
    CAPTURE(to_string(dt));
    int bad = 0;
    for (double v : values) {
      const float f = static_cast<float>(v);
      uint32_t buf = 0;
      attnb_store(&buf, ct, 0, f);
      const double got = attnb_load(&buf, ct, 0);
      const double want = round_to(dt, f);
      if (!(got == want || (std::isnan(got) && std::isnan(want)))) {
        if (bad++ < 5) MESSAGE("value ", v, ": got ", got, ", want ", want);
      }
    }
    CHECK(bad == 0);
    uint32_t nan_buf = 0;
    attnb_store(&nan_buf, ct, 0, std::nanf(""));
    CHECK(std::isnan(attnb_load(&nan_buf, ct, 0)));
  }
}

TEST_CASE("CProblem: the C view carries sizes, scale, mask kinds, documents, padding and THD offsets") {
  Problem p = with_padding(with_window(with_causal(make_problem(2, 4, 2, 64, 64, 32, DType::fp16, Layout::thd)), 9, 0),
                           {64, 20}, {64, 20});
  p.score_mod.kind = ScoreMod::Kind::softcap;
  p.score_mod.cap = 30.0;
  plugin::CProblem cp(p);
  const attnb_problem& v = cp.view();
  CHECK(v.batch == 2);
  CHECK(v.heads_q == 4);
  CHECK(v.heads_kv == 2);
  CHECK(v.dtype == ATTNB_FP16);
  CHECK(v.layout == ATTNB_LAYOUT_THD);
  CHECK(v.scale == doctest::Approx(1.0 / std::sqrt(32.0)));
  CHECK(v.mask_kinds == (ATTNB_MASK_CAUSAL_BOTTOM_RIGHT | ATTNB_MASK_SLIDING_WINDOW | ATTNB_MASK_PADDING));
  CHECK(v.window_left == 9);
  CHECK(v.window_right == 0);
  CHECK(v.upper_br == 0);
  CHECK(v.lower_br == -9);
  REQUIRE(v.seq_lens_q != nullptr);
  CHECK(v.seq_lens_q[1] == 20);
  REQUIRE(v.cu_seqlens_q != nullptr);
  CHECK(v.cu_seqlens_q[0] == 0);
  CHECK(v.cu_seqlens_q[1] == 64);
  CHECK(v.cu_seqlens_q[2] == 84);
  CHECK(v.doc_ids == nullptr);
  CHECK(v.score_mod == ATTNB_MOD_SOFTCAP);
  CHECK(v.softcap == 30.0);

  plugin::CProblem docs(with_documents(make_problem(2, 1, 1, 50, 50, 16, DType::bf16), {{20, 0, 25}, {50}}));
  const attnb_problem& d = docs.view();
  CHECK(d.mask_kinds == ATTNB_MASK_DOCUMENT);
  REQUIRE(d.doc_offsets != nullptr);
  CHECK(d.doc_offsets[0] == 0);
  CHECK(d.doc_offsets[1] == 3);
  CHECK(d.doc_offsets[2] == 4);
  CHECK(d.doc_lengths[2] == 25);
  CHECK(d.doc_ids[44] == 2);  // document 2 holds tokens 20..44; 45.. is padding
  CHECK(d.doc_ids[45] == -1);
  CHECK(d.cu_seqlens_q == nullptr);
}

TEST_CASE("loading errors exit 2 and name the file") {
  struct Bad {
    const char* path;
    const char* says;
  };
  const Bad bad[] = {
      {ATTNBENCH_TEST_PLUGIN_NO_ENTRY, "missing entry point attnbench_plugin_entry"},
      {ATTNBENCH_TEST_PLUGIN_BAD_ABI, "plugin ABI version 999, but this attnbench speaks versions 1 to 2"},
      {ATTNBENCH_TEST_PLUGIN_CLASH, "backend name \"cpu\" is already registered"},
      {"/nonexistent/libnothing.so", "plugin file not found"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.path);
    const Result r = run(std::string("list backends --plugin '") + b.path + "'");
    CHECK(r.code == 2);
    CHECK(contains(r.err, b.path));
    CHECK(contains(r.err, b.says));
  }
  // The same errors through ATTNBENCH_PLUGIN_PATH, before any case runs.
  const Result r = run(std::string("run default --backends cpu --out '") +
                           scratch_path("plugin", "never").string() + "'",
                       std::string("ATTNBENCH_PLUGIN_PATH='") + ATTNBENCH_TEST_PLUGIN_BAD_ABI + "'");
  CHECK(r.code == 2);
  CHECK(contains(r.err, ATTNBENCH_TEST_PLUGIN_BAD_ABI));
  CHECK_FALSE(std::filesystem::exists(scratch_path("plugin", "never") / "report.json"));
}

TEST_CASE("list backends shows plugins from --plugin and from ATTNBENCH_PLUGIN_PATH folders") {
  const Result r = run(std::string("list backends --plugin '") + ATTNBENCH_TEST_PLUGIN_FAILING + "'");
  CHECK(r.code == 0);
  CHECK(contains(r.out, "test-failing"));
  CHECK(contains(r.out, "test plugin whose forward always fails"));
  // A folder entry loads every *.so in it; the same file twice loads once.
  const auto dir = scratch_path("plugin", "plugin_dir");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(ATTNBENCH_EXAMPLE_CPU_PLUGIN, dir / "libexample_cpu.so",
                             std::filesystem::copy_options::overwrite_existing);
  const Result e = run("list backends --plugin '" + (dir / "libexample_cpu.so").string() + "'",
                       "ATTNBENCH_PLUGIN_PATH='/nonexistent-empty-entry::" + dir.string() + "'");
  CHECK(e.code == 2);  // the missing folder entry is named
  CHECK(contains(e.err, "/nonexistent-empty-entry"));
  const Result ok = run("list backends --plugin '" + (dir / "libexample_cpu.so").string() + "'",
                        "ATTNBENCH_PLUGIN_PATH='" + dir.string() + "'");
  CHECK(ok.code == 0);
  CHECK(contains(ok.out, "example-cpu"));
}

TEST_CASE("example-cpu plugin passes the rule on every mask kind, layout and dtype it claims") {
  const auto scen = scratch_path("plugin", "plugin_scenario.json");
  std::ofstream(scen) << plugin_scenario();
  const auto out = scratch_path("plugin", "run_example");
  const Result r = run("run '" + scen.string() + "' --backends example-cpu --no-timing --out '" + out.string() +
                       "' --plugin '" + ATTNBENCH_EXAMPLE_CPU_PLUGIN + "'");
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.code == 0);
  const auto rows = rows_by_case(out / "report.json");
  REQUIRE(rows.size() == 7);
  for (const auto& [id, row] : rows) {
    CAPTURE(id);
    CHECK(row.at("backend") == "example-cpu");
    if (contains(id, "rel-bias")) {
      CHECK(row.at("status") == "unsupported");
      CHECK(contains(row.at("reason").get<std::string>(), "learnable-bias score mods"));
    } else {
      CHECK(row.at("status") == "pass");
    }
  }
}

TEST_CASE("plugin options (ABI version 2): example-cpu's order variants both pass; version 1 plugins load") {
  const auto scen = scratch_path("plugin", "plugin_scenario_options.json");
  std::ofstream(scen) << plugin_scenario();
  const auto out = scratch_path("plugin", "run_example_options");
  const std::string plugin = std::string(" --plugin '") + ATTNBENCH_EXAMPLE_CPU_PLUGIN + "'";
  const Result r = run("run '" + scen.string() + "' --backends 'example-cpu,example-cpu[order=descending]' "
                       "--no-timing --out '" + out.string() + "'" + plugin);
  CAPTURE(r.err);
  CHECK(r.code == 0);
  const nlohmann::json rep = load_report((out / "report.json").string());
  REQUIRE(rep["results"].size() == 14);  // 7 cases x 2 variants, each in an isolated child
  int descending_pass = 0;
  for (const auto& row : rep["results"]) {
    CHECK(row["backend"] == "example-cpu");
    const bool desc = row["variant"] == "example-cpu[order=descending]";
    CHECK((desc || row["variant"] == "example-cpu"));
    CHECK(row["options"] == nlohmann::json({{"order", desc ? "descending" : "ascending"}}));
    if (desc && row["status"] == "pass") ++descending_pass;
  }
  CHECK(descending_pass == 6);  // all but the rel_bias case, which it declines

  const Result l = run("list backends --options" + plugin);
  CHECK(l.code == 0);
  CHECK(contains(l.out, "ascending|descending"));
  const Result bad = run("run default --backends 'example-cpu[order=sideways]' --out '" +
                         scratch_path("plugin", "never2").string() + "'" + plugin);
  CHECK(bad.code == 2);
  CHECK(contains(bad.err, "backend \"example-cpu\": option order=\"sideways\""));

  // An ABI version 1 table (no options) still loads, and takes no option.
  const std::string v1 = std::string(" --plugin '") + ATTNBENCH_TEST_PLUGIN_V1 + "'";
  const Result lv1 = run("list backends --options" + v1);
  CHECK(lv1.code == 0);
  CHECK(contains(lv1.out, "test-v1"));
  const Result opt = run("run default --backends 'test-v1[x=1]' --out '" + scratch_path("plugin", "never3").string() +
                         "'" + v1);
  CHECK(opt.code == 2);
  CHECK(contains(opt.err, "backend \"test-v1\" has no option \"x\""));
}

TEST_CASE("a plugin whose forward fails gives error rows; one that declines gives unsupported rows") {
  const auto scen = scratch_path("plugin", "plugin_scenario.json");
  std::ofstream(scen) << plugin_scenario();
  const auto out = scratch_path("plugin", "run_failing");
  const Result r = run("run '" + scen.string() + "' --backends test-failing,cpu --no-timing --out '" + out.string() +
                       "' --plugin '" + ATTNBENCH_TEST_PLUGIN_FAILING + "'");
  CHECK(r.code == 1);  // error rows fail the run (docs/semantics.md section 12)
  const auto doc = nlohmann::json::parse(slurp(out / "report.json"));
  int errors = 0, unsupported = 0, cpu_pass = 0;
  for (const auto& row : doc.at("results")) {
    const std::string status = row.at("status"), backend = row.at("backend"), id = row.at("case_id");
    CAPTURE(id);
    if (backend == "cpu") {
      cpu_pass += status == "pass";  // the sweep went on
    } else if (contains(id, "cross")) {
      CHECK(status == "unsupported");
      CHECK(contains(row.at("reason").get<std::string>(), "declined on purpose"));
      ++unsupported;
    } else {
      CHECK(status == "error");
      CHECK(contains(row.value("message", ""), "deliberate failure in forward"));
      CHECK(contains(row.value("message", ""), ATTNBENCH_TEST_PLUGIN_FAILING));
      ++errors;
    }
  }
  CHECK(errors == 6);
  CHECK(unsupported == 1);
  CHECK(cpu_pass == 7);
}

TEST_CASE("docs/plugins.md shows examples/plugins/tiny/tiny.c verbatim, and it passes the rule forward-only") {
  const std::string doc = slurp(std::string(ATTNBENCH_SOURCE_DIR) + "/docs/plugins.md");
  const std::string code = slurp(std::string(ATTNBENCH_SOURCE_DIR) + "/examples/plugins/tiny/tiny.c");
  REQUIRE(code.size() > 500);
  CHECK(contains(doc, "```c\n" + code + "```\n"));

  const auto scen = scratch_path("plugin", "plugin_scenario.json");
  std::ofstream(scen) << plugin_scenario();
  const auto out = scratch_path("plugin", "run_tiny");
  const Result r = run("run '" + scen.string() + "' --backends tiny --no-backward --no-timing --out '" + out.string() +
                       "' --plugin '" + ATTNBENCH_TEST_PLUGIN_TINY + "'");
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.code == 0);
  const auto rows = rows_by_case(out / "report.json");
  REQUIRE(rows.size() == 7);
  int pass = 0, declined = 0;
  for (const auto& [id, row] : rows) {
    CAPTURE(id);
    if (contains(id, "alibi") || contains(id, "softcap") || contains(id, "rel-bias")) {
      CHECK(row.at("status") == "unsupported");
      declined += contains(row.at("reason").get<std::string>(), "score mods");
    } else {
      CHECK(row.at("status") == "pass");
      ++pass;
    }
  }
  CHECK(pass == 4);
  CHECK(declined == 3);
}

TEST_CASE("a plugin that reports success but writes nothing fails the check (outputs are NaN-poisoned)") {
  const auto scen = scratch_path("plugin", "plugin_scenario.json");
  std::ofstream(scen) << plugin_scenario();
  const auto out = scratch_path("plugin", "run_lazy");
  const Result r = run("run '" + scen.string() + "' --backends test-lazy --no-backward --no-timing --out '" +
                       out.string() + "' --plugin '" + ATTNBENCH_TEST_PLUGIN_LAZY + "'");
  CHECK(r.code == 1);
  int failed = 0;
  for (const auto& [id, row] : rows_by_case(out / "report.json")) {
    CAPTURE(id);
    if (contains(id, "cross")) continue;  // declined by the shared test supports()
    CHECK(row.at("status") == "fail");
    for (const auto& t : row.at("check").at("tensors"))
      if (t.at("name") == "O") {
        CHECK_FALSE(t.at("pass").get<bool>());
        CHECK(t.value("unwritten", 0) + t.value("nan_mismatch", 0) > 0);
      }
    ++failed;
  }
  CHECK(failed == 6);
}
