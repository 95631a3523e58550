// `attnbench hunt` (harness/hunt/, docs/hunt.md): the generator covers the problem
// space within its size budget and is deterministic; the shrinker only offers
// smaller valid problems and finds the smallest that still fails; a hunt finds
// the planted defects of backends/testing/planted_backends.cpp and shrinks each to
// what its condition needs; a bounded hunt of the cpu backend finds nothing; the
// corpus replays; the CLI survives a crashing backend and refuses bad input.
#include <doctest/doctest.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <set>
#include <variant>
#include <string>

#include "backends/cudnn/cudnn_plan.hpp"
#include "backends/testing/planted_backends.hpp"
#include "cli_util.hpp"
#include "harness/hunt/generate.hpp"
#include "harness/hunt/hunt.hpp"
#include "harness/hunt/shrink.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/run/process.hpp"

namespace {

using namespace attnbench;
using namespace attnbench::hunt;
namespace fs = std::filesystem;

/// What the first `n` problems of `seed` hold, by feature.
std::map<std::string, int> features(uint64_t seed, int n, const GenLimits& lim) {
  std::map<std::string, int> f;
  for (int i = 0; i < n; ++i) {
    const Problem p = generate_problem(seed, static_cast<uint64_t>(i), lim);
    for (const auto& t : p.mask) ++f[mask_kind_name(t)];
    ++f[std::string("mod:") + to_string(p.score_mod.kind)];
    ++f[std::string("dtype:") + to_string(p.dtype)];
    ++f[std::string("layout:") + to_string(p.layout)];
    if (p.seq_q != p.seq_k) ++f["sq!=sk"];
    if (p.seq_q == 1) ++f["sq=1"];
    if (p.seq_q == 129 || p.seq_k == 129) ++f["s=129"];
    if (p.group_size() > 1) ++f["gqa"];
    if (p.heads_kv > 1) ++f["hkv>1"];
    if (p.batch > 1) ++f["batch>1"];
    if (p.head_dim != p.head_dim_v) ++f["dqk!=dv"];
    if (p.scale) ++f["scale"];
    if (auto* w = p.find_mask<SlidingWindowTerm>()) {
      for (int64_t x : {w->left, w->right}) ++f[x < 0 ? "window:-1" : x == 0 ? "window:0" : "window:>0"];
    }
    if (auto* d = p.find_mask<DocumentTerm>()) {
      for (const auto& row : d->doc_lengths)
        for (int64_t l : row) ++f[l == 0 ? "doc:0" : l == 1 ? "doc:1" : "doc:>1"];
      if (d->doc_lengths.empty()) ++f["doc:scattered"];
      for (const auto& row : d->doc_ids)
        if (!row.empty() && row.back() == -1) ++f["doc:padding"];
    }
    if (auto* pad = p.find_mask<PaddingTerm>())
      for (int64_t l : pad->seq_lens_q) ++f[l == 0 ? "pad:empty" : "pad:nonempty"];
    if (auto* bs = p.find_mask<BlockSparseTerm>()) ++f[bs->density == 0 ? "sparse:0" : bs->density == 1 ? "sparse:1" : "sparse:mid"];
  }
  return f;
}

/// The first index of `seed` whose problem satisfies `pred` (or n).
template <class Pred>
uint64_t first_index(uint64_t seed, uint64_t n, const GenLimits& lim, Pred pred) {
  for (uint64_t i = 0; i < n; ++i)
    if (pred(generate_problem(seed, i, lim))) return i;
  return n;
}

/// A fresh scratch folder for one hunt.
fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("attnbench_test_hunt_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// The checks every shrunk problem here must meet: one batch row, one head, the
/// given lengths, head dims 1, no score mod, the default layout and seed.
void check_minimal(const Problem& m, int64_t seq_q, int64_t seq_k) {
  CAPTURE(to_json(m).dump());
  CHECK(m.batch == 1);
  CHECK(m.heads_q == 1);
  CHECK(m.heads_kv == 1);
  CHECK(m.seq_q == seq_q);
  CHECK(m.seq_k == seq_k);
  CHECK(m.head_dim == 1);
  CHECK(m.head_dim_v == 1);
  CHECK(m.score_mod.kind == ScoreMod::Kind::none);
  CHECK(m.layout == Layout::bshd);
  CHECK(m.seed == 0);
}

HuntOptions in_process(const std::string& backend, const fs::path& out) {
  HuntOptions o;
  o.backends = {backend};
  o.isolate = RunOptions::Isolate::off;
  o.out_dir = out.string();
  o.quiet = true;
  o.budget_s = 120;  // bounded by max_problems below
  o.limits.max_work = 1 << 15;
  o.limits.max_seq = 300;
  return o;
}

/// An in-process hunt of planted backend `backend` (registered here) over the
/// first `max_problems` problems of `seed`.
HuntSummary hunt_planted(const std::string& backend, uint64_t seed, int64_t max_problems) {
  register_planted_backends();
  HuntOptions o = in_process(backend, scratch(backend));
  o.seed = seed;
  o.max_problems = max_problems;
  return run_hunt(o);
}

}  // namespace

TEST_CASE("generated problems are valid, within the size budget, deterministic and cover the space") {
  GenLimits lim;
  lim.max_work = 1 << 16;
  lim.max_seq = 300;
  for (uint64_t i = 0; i < 400; ++i) {
    const Problem p = generate_problem(3, i, lim);
    CAPTURE(i);
    CHECK_NOTHROW(validate(p));
    CHECK(problem_work(p) <= lim.max_work);
    CHECK(p.seq_q <= lim.max_seq);
    CHECK(p.seq_k <= lim.max_seq);
    CHECK(p.batch <= lim.max_batch);
    CHECK(to_json(p) == to_json(generate_problem(3, i, lim)));  // a pure function of (seed, index)
    // The problem file round-trips through the parser `reference --problem` uses,
    // and the problem is already in the form it reads back (canonical).
    CHECK(to_json(problem_from_json(to_json(p), "gen")) == to_json(p));
    if (auto* d = p.find_mask<DocumentTerm>())
      for (const auto& row : d->doc_lengths) {
        int64_t sum = 0;
        for (int64_t l : row) sum += l;
        CHECK(sum == p.seq_q);  // lengths kept only where they fill the row, as in a file
      }
  }
  CHECK(to_json(generate_problem(3, 0, lim)) != to_json(generate_problem(4, 0, lim)));
  const auto f = features(3, 2000, lim);
  for (const char* k : {"causal", "sliding_window", "document", "prefix_lm", "padding", "block_sparse", "mod:none",
                        "mod:softcap", "mod:alibi", "mod:rel_bias", "mod:offset_bias", "dtype:fp32", "dtype:fp16",
                        "dtype:bf16", "layout:bshd", "layout:bhsd", "layout:thd", "sq!=sk", "sq=1", "s=129", "gqa",
                        "hkv>1", "batch>1", "dqk!=dv", "scale", "window:-1", "window:0", "window:>0", "doc:0",
                        "doc:1", "doc:>1", "doc:scattered", "doc:padding", "pad:empty", "pad:nonempty", "sparse:0",
                        "sparse:1", "sparse:mid"}) {
    CAPTURE(k);
    CHECK(f.count(k) == 1);
  }
  // Weighted toward edges: far more 129s than a uniform length in [1, 300] gives (2000 * 2 / 300 ~ 13).
  CHECK(f.at("s=129") > 30);
}

#if defined(ATTNBENCH_HAVE_CUDNN)  // plan_case is built with the cudnn backend (CUDA + cuDNN builds)
TEST_CASE("cuDNN's host analysis answers every generated problem (a plan or a reason), never throws") {
  // What the GPU hunt of `cudnn` asks first for every problem; on the CPU here.
  cudnn_sdpa::Env env;
  env.version = 91900;
  env.sm = 90;
  int plans = 0, refusals = 0;
  for (uint64_t i = 0; i < 1500; ++i) {
    const Problem p = generate_problem(21, i, GenLimits{});
    CAPTURE(to_json(p).dump());
    std::variant<cudnn_sdpa::CasePlan, std::string> r;
    REQUIRE_NOTHROW(r = cudnn_sdpa::plan_case(p, env));
    ++(std::holds_alternative<std::string>(r) ? refusals : plans);
  }
  CHECK(plans > 100);     // the generator reaches what cuDNN supports
  CHECK(refusals > 100);  // and beyond it
}
#endif

TEST_CASE("shrink candidates are valid and strictly smaller") {
  GenLimits lim;
  lim.max_work = 1 << 14;
  lim.max_seq = 200;
  int64_t total = 0;
  for (uint64_t i = 0; i < 60; ++i) {
    const Problem p = generate_problem(11, i, lim);
    const int64_t m = shrink_measure(p);
    for (const Problem& q : shrink_candidates(p)) {
      CAPTURE(to_json(q).dump());
      CHECK_NOTHROW(validate(q));
      CHECK(shrink_measure(q) < m);
      ++total;
    }
  }
  CHECK(total > 600);
  // The smallest problem has nothing left to shrink.
  Problem tiny;
  tiny.head_dim = tiny.head_dim_v = 1;
  CHECK(shrink_candidates(tiny).empty());
}

TEST_CASE("shrink finds the smallest problem that still fails") {
  Problem p;
  p.batch = 3;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.seq_q = p.seq_k = 300;
  p.head_dim = 128;
  p.head_dim_v = 128;
  p.layout = Layout::thd;
  p.scale = 0.5;
  p.seed = 42;
  p.score_mod.kind = ScoreMod::Kind::softcap;
  p.score_mod.cap = 20;
  p.mask = {SlidingWindowTerm{17, 3}, CausalTerm{CausalAlign::top_left},
            document_term_from_lengths({{0, 1, 100, 199}, {300}, {5, 0, 290}}, 300)};
  // "Fails" when Sq >= 100 under a causal mask: the minimum is Sq = Sk = 100 (Sq
  // is tied to Sk while the document mask stays), causal alone, everything else minimal.
  int64_t calls = 0;
  const auto fails = [&](const Problem& q) {
    ++calls;
    return q.seq_q >= 100 && q.find_mask<CausalTerm>() != nullptr;
  };
  const ShrinkResult r = shrink(p, fails, [] { return false; });
  CHECK(r.complete);
  CHECK(r.tried == calls);
  CHECK(r.steps > 5);
  const Problem& m = r.problem;
  check_minimal(m, 100, 1);
  REQUIRE(m.mask.size() == 1);
  REQUIRE(m.find_mask<CausalTerm>());
  CHECK(m.find_mask<CausalTerm>()->align == CausalAlign::bottom_right);
  CHECK(!m.scale);
  // A stop request ends the shrink at once, with the problem as it was.
  const ShrinkResult s = shrink(p, fails, [] { return true; });
  CHECK(!s.complete);
  CHECK(s.tried == 0);
  CHECK(to_json(s.problem) == to_json(p));
}

TEST_CASE("failure classes of report rows") {
  ReportRow row;
  row.status = RowStatus::pass;
  CHECK(failure_class(row) == "");
  row.extra = {{"deterministic", false}, {"expected_deterministic", false}};
  CHECK(failure_class(row) == "");
  row.extra["expected_deterministic"] = true;
  CHECK(failure_class(row) == "nondeterministic");
  row.status = RowStatus::unsupported;
  CHECK(failure_class(row) == "");
  row.status = RowStatus::crashed;
  CHECK(failure_class(row) == "crashed");
  row.status = RowStatus::timeout;
  CHECK(failure_class(row) == "timeout");
  row.status = RowStatus::fail;
  CheckFigures c;
  c.failure_class = "numerics";
  TensorCheckFigures o, dq;
  o.name = "O";
  o.pass = true;
  dq.name = "dQ";
  c.tensors = {dq, o};
  row.check = c;
  CHECK(failure_class(row) == "numerics-dQ");
  row.check->tensors[0].nan_mismatch = 3;
  CHECK(failure_class(row) == "nonfinite-dQ");
  row.check->tensors[0].unwritten = 1;
  CHECK(failure_class(row) == "unwritten-dQ");
}

TEST_CASE("durations") {
  CHECK(parse_duration("90", "--budget") == 90);
  CHECK(parse_duration("90s", "--budget") == 90);
  CHECK(parse_duration("10m", "--budget") == 600);
  CHECK(parse_duration("1.5h", "--budget") == 5400);
  for (const char* bad : {"", "0", "-5m", "m", "10x", "nan", "inf"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_duration(bad, "--budget"), InputError);
  }
}

TEST_CASE("a bounded hunt of the cpu backend finds nothing") {
  const fs::path out = scratch("cpu");
  HuntOptions o = in_process("cpu", out);
  o.max_problems = 40;
  const HuntSummary s = run_hunt(o);
  CHECK(s.counts.generated == 40);
  CHECK(s.counts.run == 40);
  CHECK(s.counts.passed == 40);
  CHECK(s.counts.failed == 0);
  CHECK(s.failures.empty());
  CHECK(s.exit_code() == 0);
  const auto j = jsonu::load_file((out / "hunt.json").string());
  CHECK(j["counts"]["passed"] == 40);
  CHECK(!j["finished"].is_null());
  CHECK(!fs::exists(out / "corpus"));
}

TEST_CASE("a hunt finds the planted Sq = 129 window defect and shrinks it to that condition") {
  register_planted_backends();
  const fs::path out = scratch("window129");
  HuntOptions o = in_process("test-planted-window129", out);
  o.seed = 5;
  // The generator reaches the condition early (edges are weighted), and the hunt
  // passes every problem before it.
  const uint64_t first = first_index(o.seed, 400, o.limits, [](const Problem& p) {
    return p.seq_q == 129 && p.find_mask<SlidingWindowTerm>();
  });
  CHECK(first < 150);
  o.max_problems = static_cast<int64_t>(first) + 1;
  const HuntSummary s = run_hunt(o);
  CHECK(s.counts.passed == static_cast<int64_t>(first));
  CHECK(s.counts.failed == 1);
  CHECK(s.exit_code() == 1);
  REQUIRE(s.failures.size() == 1);
  const HuntFailure& f = s.failures[0];
  CHECK(f.failure_class == "numerics-O");
  CHECK(f.shrink_complete);
  const Problem& m = f.minimal;
  check_minimal(m, 129, 1);  // Sq = 129 is the condition itself: nothing shorter fails
  REQUIRE(m.mask.size() == 1);
  REQUIRE(m.find_mask<SlidingWindowTerm>());
  CHECK(m.find_mask<SlidingWindowTerm>()->left == -1);
  CHECK(m.find_mask<SlidingWindowTerm>()->right == -1);
  // The corpus holds the minimal problem (a problem file), its row and the repro line.
  const Problem back = problem_from_json(jsonu::load_file(f.problem_file), f.problem_file);
  CHECK(to_json(back) == to_json(m));
  const auto row = jsonu::load_file(f.row_file);
  CHECK(row["backend"] == "test-planted-window129");
  CHECK(row["row"]["status"] == "fail");
  CHECK(f.repro.find("attnbench run '" + fs::absolute(f.problem_file).string() + "' --backends 'test-planted-window129'") !=
        std::string::npos);
  const auto state = jsonu::load_file((out / "hunt.json").string());
  CHECK(state["failures"].size() == 1);
  CHECK(state["failures"][0]["class"] == "numerics-O");

  // Replay: the corpus fails again on its own backend, passes on the cpu backend.
  HuntOptions r = in_process("", out / "replay");
  r.backends.clear();
  const HuntSummary again = replay_corpus((out / "corpus").string(), r);
  CHECK(again.counts.failed == 1);
  CHECK(again.exit_code() == 1);
  r.backends = {"cpu"};
  const HuntSummary fixed = replay_corpus((out / "corpus").string(), r);
  CHECK(fixed.counts.run == 1);
  CHECK(fixed.counts.passed == 1);
  CHECK(fixed.exit_code() == 0);
  CHECK(jsonu::load_file((out / "replay" / "replay.json").string())["units"][0]["status"] == "pass");
}

TEST_CASE("a hunt finds the planted fully-masked-row defect and shrinks it to one empty row") {
  const HuntSummary s = hunt_planted("test-planted-masked-rows", 1, 30);
  REQUIRE(s.failures.size() == 1);  // later failures of the same class are counted, not shrunk again
  CHECK(s.counts.failed >= 1);
  CHECK(static_cast<int64_t>(s.repeats.size()) == s.counts.failed - 1);
  const HuntFailure& f = s.failures[0];
  CHECK(f.failure_class == "fully_masked_rows-O");
  CHECK(f.shrink_complete);
  check_minimal(f.minimal, 1, 1);
  CHECK(f.minimal.mask.size() == 1);  // one entry that empties the only row
}

TEST_CASE("a hunt finds planted nondeterminism under GQA and shrinks it to two query heads on one kv head") {
  const HuntSummary s = hunt_planted("test-planted-nondeterministic-gqa", 2, 20);
  REQUIRE(s.failures.size() == 1);
  CHECK(s.failures[0].failure_class == "nondeterministic");
  CHECK(s.failures[0].row["status"] == "pass");  // right numbers, not repeatable
  const Problem& m = s.failures[0].minimal;
  CAPTURE(to_json(m).dump());
  CHECK(m.batch == 1);
  CHECK(m.heads_q == 2);
  CHECK(m.heads_kv == 1);
  CHECK(m.seq_q == 1);
  CHECK(m.seq_k == 1);
  CHECK(m.mask.empty());
}

TEST_CASE("unsupported problems are skipped and counted; the shrink stays inside what the backend supports") {
  const HuntSummary s = hunt_planted("test-planted-narrow-tile64", 4, 40);
  CHECK(s.counts.generated == 40);
  CHECK(s.counts.unsupported > 5);  // refused by supports(), never run, never failures
  CHECK(s.counts.unsupported + s.counts.run == 40);
  CHECK(s.per_backend.at("test-planted-narrow-tile64").unsupported == s.counts.unsupported);
  REQUIRE(s.failures.size() == 1);
  CHECK(s.failures[0].failure_class == "numerics-O");
  const Problem& m = s.failures[0].minimal;
  CAPTURE(to_json(m).dump());
  CHECK(m.batch == 1);
  CHECK(m.heads_q == 1);
  CHECK(m.seq_q == 65);  // one past the first tile
  CHECK(m.seq_k == 1);
  CHECK(m.head_dim == 64);  // smaller head dims are unsupported, so they never "still fail"
  CHECK(m.head_dim_v == 64);
  CHECK(m.dtype != DType::fp32);
  CHECK(m.mask.empty());
}

TEST_CASE("attnbench hunt: a crashing backend is found under isolation and shrunk to the smallest problem") {
  using namespace attnbench::test::cli;
  TempDir t;
  const std::string out = (t.path / "out").string();
  const Result r = run("hunt --backends test-crash --isolate on --budget 60s --max-problems 1 --seed 2 --max-work 4096 --out '" +
                           out + "'",
                       t, "ATTNBENCH_TEST_BACKENDS=1");
  CAPTURE(r.err);
  CHECK(r.code == 1);
  CHECK(contains(r.out, "1 generated, 1 run, 0 unsupported, 0 passed, 1 failed"));
  CHECK(contains(r.out, "test-crash crashed"));
  CHECK(contains(r.out, "reproduce: ATTNBENCH_TEST_BACKENDS=1 attnbench run '"));
  const auto j = attnbench::jsonu::load_file(out + "/hunt.json");
  REQUIRE(j["failures"].size() == 1);
  const auto& m = j["failures"][0]["minimal"];
  CHECK(m["batch"] == 1);
  CHECK(m["heads_q"] == 1);
  CHECK(m["seq_q"] == 1);
  CHECK(m["seq_k"] == 1);
  CHECK(m["head_dim"] == 1);
  CHECK(m["mask"].empty());
  CHECK(m["score_mod"]["kind"] == "none");
  CHECK(j["failures"][0]["shrink"]["complete"] == true);
  CHECK(contains(j["failures"][0]["message"].get<std::string>(), "SIGSEGV"));
  // Bad input is refused before anything runs.
  const std::string bad = " --out '" + (t.path / "bad").string() + "'";
  CHECK(run("hunt --backends cpu --budget 0" + bad, t).code == 2);
  CHECK(run("hunt --backends nope --budget 5s" + bad, t).code == 2);
  CHECK(run("hunt --backends cpu,cpu --budget 5s" + bad, t).code == 2);
  CHECK(run("hunt --budget 5s" + bad, t).code == 2);
  CHECK(!fs::exists(t.path / "bad"));
}

TEST_CASE("the regression corpus tests/data/hunt passes on the cpu backend") {
  const fs::path out = scratch("corpus");
  HuntOptions o = in_process("cpu", out);
  const HuntSummary s = replay_corpus(std::string(ATTNBENCH_TEST_DATA_DIR) + "/hunt", o);
  CHECK(s.counts.generated == 6);
  CHECK(s.counts.run == 6);
  CHECK(s.counts.passed == 6);
  CHECK(s.exit_code() == 0);
  CHECK(s.line() == "6 problems, 6 run, 0 unsupported, 6 passed, 0 failed");
  // A corpus without row files needs --backends.
  HuntOptions none = in_process("", out / "none");
  none.backends.clear();
  CHECK_THROWS_AS(replay_corpus(std::string(ATTNBENCH_TEST_DATA_DIR) + "/hunt", none), InputError);
}

TEST_CASE("attnbench hunt: a hang is a timeout failure; a shrink out of time keeps the smallest so far") {
  using namespace attnbench::test::cli;
  TempDir t;
  const std::string out = (t.path / "out").string();
  // Budget and shrink time of one second: the first problem hangs (killed after
  // 1 s), its shrink gets about one candidate and stops incomplete.
  const Result r = run("hunt --backends test-hang --budget 1s --shrink-time 1s --case-timeout 1 --max-problems 1 "
                       "--max-work 4096 --quiet --out '" + out + "'",
                       t, "ATTNBENCH_TEST_BACKENDS=1", 60);
  CAPTURE(r.err);
  CHECK(r.code == 1);
  const auto j = attnbench::jsonu::load_file(out + "/hunt.json");
  REQUIRE(j["failures"].size() == 1);
  CHECK(j["failures"][0]["class"] == "timeout");
  CHECK(j["failures"][0]["shrink"]["complete"] == false);
  CHECK(j["failures"][0]["shrink"]["tried"].get<int>() <= 2);
  CHECK(fs::exists(j["failures"][0]["problem_file"].get<std::string>()));
}

TEST_CASE("attnbench hunt: Ctrl-C stops the hunt, keeping its counts and findings") {
  using namespace attnbench::test::cli;
  TempDir t;
  const std::string out = (t.path / "out").string();
  attnbench::ChildProcess child({ATTNBENCH_BINARY, "hunt", "--backends", "cpu", "--budget", "10m", "--quiet", "--out", out},
                                {}, (t.path / "stdout.txt").string(), (t.path / "stderr.txt").string());
  // SIGINT once the hunt has written its state with a problem done (at most 60 s).
  bool started = false;
  for (int i = 0; i < 600 && !started; ++i) {
    try {
      started = attnbench::jsonu::load_file(out + "/hunt.json")["counts"]["generated"].get<int>() > 0;
    } catch (const std::exception&) {
    }
    if (!started) REQUIRE(!child.wait_for(100));  // still running
  }
  REQUIRE(started);
  child.signal_group(SIGINT);
  const auto st = child.wait_for(60000);
  REQUIRE(st);
  CAPTURE(slurp(t.path / "stderr.txt"));
  CHECK(st->exited);
  CHECK(st->exit_code == 130);
  const auto j = attnbench::jsonu::load_file(out + "/hunt.json");
  CHECK(j["interrupted"] == "SIGINT");
  CHECK(!j["finished"].is_null());
  CHECK(j["counts"]["generated"].get<int>() > 0);
  CHECK(j["counts"]["failed"] == 0);
  CHECK(contains(slurp(t.path / "stdout.txt"), "interrupted by SIGINT"));
}
