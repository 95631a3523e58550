// Tests of the "cudnn" backend (backends/cudnn/): cuDNN SDPA forward and backward
// against the float64 reference under docs/semantics.md section 7's rule, the support
// surface (every unsupported combination has a reason and never crashes) and
// instance facts (plan cache, workspace, guards). The host-side plan analysis is
// tested without a GPU in tests/test_cudnn_plan.cpp.
//
// Runs on a GPU machine (tests/gpu/gpu_test_main.cpp skips without a device).
// Problems are small so that the whole suite, CPU reference included, stays
// well under two minutes on an H100. Every failure prints the case label, the
// cuDNN graph description and the full check verdict.
#include <doctest/doctest.h>

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <variant>
#include <vector>

#include "backends/cudnn/cudnn_backend.hpp"
#include "backends/cudnn/cudnn_graph.hpp"
#include "backends/cudnn/cudnn_plan.hpp"
#include "harness/check/check.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/tensors.hpp"
#include "reference/reference.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using namespace attnbench::cudnn_sdpa;
using namespace attnbench::test;

namespace {

std::string label(const Problem& p) {
  return std::string(to_string(p.dtype)) + " B=" + std::to_string(p.batch) + " Hq=" + std::to_string(p.heads_q) +
         " Hkv=" + std::to_string(p.heads_kv) + " S=" + std::to_string(p.seq_q) + "x" + std::to_string(p.seq_k) +
         " D=" + std::to_string(p.head_dim) + " " + to_string(p.layout) + " mask=" + describe_mask(p) +
         " mod=" + describe_score_mod(p.score_mod);
}

/// The cudnn backend's variant with `options` ("split=false,seq_order=long-first";
/// "" = the defaults).
std::unique_ptr<Backend> cudnn_variant(const std::string& options) {
  auto be = BackendRegistry::create_variant(options.empty() ? "cudnn" : "cudnn[" + options + "]");
  REQUIRE(be);
  return be;
}

/// Run forward + backward on cuDNN (the variant with `options`) and check every
/// output against gold / lp.
void run_and_check(const Problem& p_in, const std::string& options = "") {
  Problem p = p_in;
  validate(p);
  const std::string what = label(p);
  INFO("case: " << what << " options: " << options);
  const auto backend = cudnn_variant(options);
  Backend& be = *backend;
  std::string why;
  REQUIRE_MESSAGE(be.available(&why), "cudnn backend not available: " << why);
  const Support s = be.supports(p);
  REQUIRE_MESSAGE(s.ok, "unexpectedly unsupported: " << s.reason);

  const ProblemData in = make_inputs(p);
  auto inst = be.prepare(p, in);
  auto* api = dynamic_cast<CudnnInstanceApi*>(inst.get());
  REQUIRE(api != nullptr);
  INFO("cuDNN: " << inst->extra().dump());
  const bool graphs = be.option_values().flag("cuda_graph");
  if (graphs) {  // capture + first launch here; the checked pass below replays the graphs
    inst->forward();
    inst->backward();
  }
  inst->poison_outputs();
  inst->forward();
  inst->backward();
  inst->synchronize();
  const AttentionOutputs got = inst->read_outputs(true);
  if (graphs) {
    const auto ex = inst->extra();
    CHECK_MESSAGE(ex["cuda_graph"]["forward"] == "replayed", ex["cuda_graph"].dump());
    CHECK_MESSAGE(ex["cuda_graph"]["backward"] == "replayed", ex["cuda_graph"].dump());
  }

  const AttentionOutputs gold = reference::gold(p, in, true);
  const AttentionOutputs lp = reference::lp(p, in, true);
  const CheckResult cr = check_outputs(p, got, gold, lp, be.rule(), reference::SliceSet::every());
  CHECK_MESSAGE(cr.pass, "check verdict: " << cr.to_json().dump(1));
  CHECK_MESSAGE(api->guards_intact(), "a device buffer was written out of bounds");
  // The tiles cuDNN computes cover every allowed pair.
  CHECK(inst->executed_pairs() >= count_allowed_pairs(p) * p.heads_q);
  CHECK(inst->allocated_bytes() >= static_cast<size_t>(api->plan_workspace_bytes()));
}

/// The problem must be refused with a reason by supports() and by prepare().
void expect_unsupported(const Problem& p, const char* reason_part = nullptr) {
  INFO("case: " << label(p));
  CudnnBackend be;
  const Support s = be.supports(p);
  CHECK_FALSE(s.ok);
  CHECK_FALSE(s.reason.empty());
  if (reason_part) CHECK_MESSAGE(s.reason.find(reason_part) != std::string::npos, "reason: " << s.reason);
  MESSAGE("unsupported as expected: " << s.reason);
}

}  // namespace

// ------------------------------------------------------------------ unsupported surface (GPU)

TEST_CASE("cudnn: unsupported combinations return a reason and never crash") {
  const Problem base = make_problem(1, 2, 2, 130, 130, 64, DType::bf16);
  CudnnBackend be;

  expect_unsupported(make_problem(1, 2, 2, 130, 130, 64, DType::fp32), "fp32");
  {
    Problem p = base;
    p.mask.push_back(PrefixLmTerm{16});
    expect_unsupported(p, "prefix_lm");
  }
  {
    Problem p = base;
    p.mask.push_back(BlockSparseTerm{0.5, 3});
    expect_unsupported(p, "block_sparse");
  }
  {
    Problem p = base;
    p.score_mod.kind = ScoreMod::Kind::rel_bias;
    p.score_mod.max_distance = 8;
    expect_unsupported(p, "rel_bias");
  }
  {
    Problem p = base;
    p.score_mod.kind = ScoreMod::Kind::offset_bias;
    p.score_mod.size = 16;
    expect_unsupported(p, "offset_bias");
  }
  {
    Problem p = with_causal(base, CausalAlign::top_left);
    p.score_mod.kind = ScoreMod::Kind::softcap;
    p.score_mod.cap = 30.0;
    expect_unsupported(p, "softcap");
  }
  {
    Problem p = base;
    p.score_mod.kind = ScoreMod::Kind::alibi;
    expect_unsupported(p, "alibi");
  }
  expect_unsupported(with_window(with_causal(make_problem(1, 2, 2, 100, 200, 64, DType::bf16), CausalAlign::top_left), 16, 0),
                     "two diagonal alignments");
  expect_unsupported(make_problem(1, 2, 2, 1, 1, 64, DType::bf16), "s_q = s_kv = 1");
  expect_unsupported(make_problem(1, 2, 2, 64, 64, 20, DType::bf16), "multiples of 8");
  expect_unsupported(make_problem(1, 2, 2, 64, 64, 264, DType::bf16));

  // prepare() refuses too, with attnbench::Unsupported.
  Problem p32 = make_problem(1, 2, 2, 64, 64, 64, DType::fp32);
  const ProblemData in = make_inputs(p32);
  CHECK_THROWS_AS(be.prepare(p32, in), Unsupported);
}

// ------------------------------------------------------------------ correctness (GPU)

TEST_CASE("cudnn: sequence lengths x dtypes, no mask and causal") {
  const std::vector<int64_t> lengths = {17, 127, 128, 129, 1000, 1013};
  for (int64_t S : lengths) {
    if (S < 1000) {
      for (DType t : {DType::fp16, DType::bf16}) {
        run_and_check(make_problem(1, 4, 4, S, S, 64, t));
        run_and_check(with_causal(make_problem(1, 4, 4, S, S, 64, t), CausalAlign::bottom_right));
      }
    } else {  // long rows: each dtype once, masks alternating, to bound the reference's cost
      const bool odd = S % 2 == 1;
      run_and_check(make_problem(1, 2, 2, S, S, 64, odd ? DType::bf16 : DType::fp16));
      run_and_check(with_causal(make_problem(1, 2, 2, S, S, 64, odd ? DType::fp16 : DType::bf16), CausalAlign::bottom_right));
    }
  }
  // Length 1 on one side (decode-like and single key).
  run_and_check(make_problem(2, 4, 4, 1, 17, 64, DType::bf16));
  run_and_check(make_problem(2, 4, 4, 17, 1, 64, DType::fp16));
  run_and_check(with_causal(make_problem(2, 4, 4, 1, 17, 64, DType::bf16), CausalAlign::bottom_right));
}

TEST_CASE("cudnn: Sq != Sk in both directions with both causal alignments") {
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{100, 300}, {300, 100}}) {
    for (CausalAlign a : {CausalAlign::top_left, CausalAlign::bottom_right}) {
      run_and_check(with_causal(make_problem(2, 4, 4, sq, sk, 64, DType::bf16), a));
      run_and_check(with_causal(make_problem(1, 4, 4, sq, sk, 128, DType::fp16), a));
    }
    run_and_check(make_problem(2, 4, 4, sq, sk, 64, DType::fp16));
  }
}

TEST_CASE("cudnn: GQA 4:1, 7:1 and MQA, both dense layouts") {
  run_and_check(with_causal(make_problem(2, 8, 2, 200, 200, 64, DType::bf16), CausalAlign::bottom_right));
  run_and_check(with_causal(make_problem(1, 14, 2, 200, 200, 64, DType::fp16), CausalAlign::top_left));
  run_and_check(with_causal(make_problem(1, 8, 1, 200, 200, 128, DType::bf16), CausalAlign::bottom_right));
  run_and_check(make_problem(1, 7, 1, 150, 250, 64, DType::fp16, Layout::bhsd));
  run_and_check(with_causal(make_problem(2, 8, 2, 200, 200, 64, DType::fp16, Layout::bhsd), CausalAlign::bottom_right));
}

TEST_CASE("cudnn: head dims 64 and 128, and 96 / 256 where supported") {
  run_and_check(with_causal(make_problem(1, 4, 4, 160, 160, 64, DType::bf16), CausalAlign::bottom_right));
  run_and_check(with_causal(make_problem(1, 4, 4, 160, 160, 128, DType::fp16), CausalAlign::bottom_right));
  CudnnBackend be;
  for (int64_t d : {96, 256}) {
    const Problem p = with_causal(make_problem(1, 4, 4, 160, 160, d, DType::bf16), CausalAlign::bottom_right);
    const Support s = be.supports(p);
    if (s.ok) {
      run_and_check(p);
    } else {
      MESSAGE("head dim " << d << " unsupported here: " << s.reason);
      CHECK_FALSE(s.reason.empty());
    }
  }
}

TEST_CASE("cudnn: sliding windows") {
  const Problem base = make_problem(1, 4, 4, 300, 300, 64, DType::bf16);
  run_and_check(with_window(base, 0, 0));
  run_and_check(with_window(base, 64, 0));
  run_and_check(with_window(base, 5000, 0));  // wider than Sk
  run_and_check(with_window(base, 16, 16));
  run_and_check(with_window(base, 40, -1));   // left bound only
  run_and_check(with_window(base, -1, 0));    // = causal bottom-right
  run_and_check(with_window(with_causal(base, CausalAlign::top_left), 48, 8));
  // Bottom-right windows with Sq != Sk (both directions).
  run_and_check(with_window(make_problem(1, 4, 4, 200, 300, 64, DType::fp16), 64, 0));
  run_and_check(with_window(make_problem(1, 4, 4, 300, 200, 64, DType::fp16), 64, 0));
}

TEST_CASE("cudnn: padding masks with fully masked rows") {
  // Rows past seq_lens_q are fully masked; row 1 has vq > vk, so its first
  // vq - vk rows are fully masked by the bottom-right causal mask too.
  run_and_check(with_causal(with_padding(make_problem(3, 4, 4, 200, 200, 64, DType::bf16), {200, 150, 37}, {180, 90, 37}),
                            CausalAlign::bottom_right));
  run_and_check(with_padding(make_problem(2, 4, 2, 129, 257, 64, DType::fp16, Layout::bhsd), {100, 129}, {257, 1}));
  // Zero valid lengths (the row is dropped from cuDNN's sequences).
  run_and_check(with_padding(make_problem(3, 4, 4, 128, 128, 64, DType::bf16), {0, 120, 50}, {100, 0, 128}));
  // Nothing valid at all: no cuDNN call, fix-ups only (O = 0, LSE = -inf, gradients 0).
  run_and_check(with_padding(make_problem(2, 2, 2, 64, 64, 64, DType::fp16), {0, 0}, {64, 0}));
  // THD layout: rows of different lengths, causal per row.
  run_and_check(with_causal(with_padding(make_problem(3, 4, 2, 200, 200, 64, DType::bf16, Layout::thd), {200, 73, 130},
                                         {200, 150, 64}),
                            CausalAlign::bottom_right));
}

TEST_CASE("cudnn: packed documents through THD ragged offsets") {
  const std::vector<std::vector<int64_t>> docs = {{100, 0, 150}, {40, 40, 40, 100}};  // row 0: 50 padding tokens
  for (Layout l : {Layout::bshd, Layout::thd, Layout::bhsd}) {
    run_and_check(with_causal(with_documents(make_problem(2, 4, 2, 300, 300, 64, DType::bf16, l), docs),
                              CausalAlign::bottom_right));
  }
  run_and_check(with_documents(make_problem(2, 4, 4, 300, 300, 64, DType::fp16), docs));
  run_and_check(with_window(with_documents(make_problem(2, 4, 4, 300, 300, 64, DType::fp16), docs), 32, 0));
  run_and_check(with_causal(with_documents(make_problem(1, 4, 1, 256, 256, 128, DType::fp16), {{0, 1, 127, 0, 128}}),
                            CausalAlign::top_left));
}

TEST_CASE("cudnn: length classes (several graphs per pass) and one graph agree with the reference") {
  // Documents of 20..700 tokens: classes <= 128, <= 256, <= 512, <= 1024, so a split
  // plan runs four graphs per pass over disjoint sequences sharing the buffers
  // (plus the whole-case forward unless the forward is split too).
  const std::vector<std::vector<int64_t>> docs = {{20, 700, 33, 128, 129, 190}, {300, 77, 513, 1, 64, 45}};
  const Problem p = with_causal(with_documents(make_problem(2, 8, 2, 1200, 1200, 128, DType::bf16), docs),
                                CausalAlign::bottom_right);
  struct Variant {
    const char* options;
    int graphs;
    bool concurrent;
  };
  const Variant variants[] = {
      {"split=false", 1, false},
      {"", 5, true},  // the defaults: whole forward, classes longest first on their own streams
      {"split_streams=false", 5, false},
      {"split_streams=false,split_forward=true", 4, false},
      {"split_forward=true,split_order=short-first", 4, true},
      {"split_bounds=200", 3, true},
      {"split=false,seq_order=long-first", 1, false},
      {"seq_order=short-first", 5, true},
      {"cuda_graph=true", 5, true},  // each pass replayed as one CUDA graph
      {"cuda_graph=true,split=false", 1, false},
  };
  for (const Variant& v : variants) {
    INFO(v.options);
    run_and_check(p, v.options);
    auto inst = cudnn_variant(v.options)->prepare(p, make_inputs(p));
    const auto ex = inst->extra();
    CHECK(ex["graphs"].get<int>() == v.graphs);
    CHECK(ex["concurrent_parts"].get<bool>() == v.concurrent);
    CHECK(ex["backward"].is_object());
    CHECK(ex["forward"].is_object());
  }
}

TEST_CASE("cudnn: ragged backward forms and autotuning agree with the reference") {
  // GQA 8:2 documents: the default backward is fullhead-thd + dq-direct; the older
  // forms stay reachable through the environment and must stay correct too.
  const std::vector<std::vector<int64_t>> docs = {{20, 300, 33, 128, 129}, {300, 77, 1, 64, 45}};
  const Problem p = with_causal(with_documents(make_problem(2, 8, 2, 700, 700, 128, DType::bf16), docs),
                                CausalAlign::bottom_right);
  struct Form {
    const char* options;
    const char* graph_has;      // expected in the backward graph description
    const char* graph_lacks;
  };
  const Form forms[] = {{"", "fullhead-thd dq-direct", nullptr},
                        {"fullhead=padded", "dq-direct", "fullhead-thd"},
                        {"dq_direct=off", "fullhead-thd", "dq-direct"},
                        {"autotune=true", "fullhead-thd dq-direct", nullptr}};
  for (const Form& f : forms) {
    INFO(f.options);
    run_and_check(p, f.options);
    auto inst = cudnn_variant(f.options)->prepare(p, make_inputs(p));
    const auto ex = inst->extra();
    const std::string g = ex["backward"]["graph"].get<std::string>();
    CHECK_MESSAGE(g.find(f.graph_has) != std::string::npos, g);
    if (f.graph_lacks) CHECK_MESSAGE(g.find(f.graph_lacks) == std::string::npos, g);
    if (std::string(f.options) == "autotune=true") {
      REQUIRE(ex.contains("autotune"));
      for (const char* pass : {"forward", "backward"}) {
        // the first part that runs this pass (with length classes the whole-case
        // forward comes first and the classes run the backward)
        nlohmann::json t;
        for (const auto& part : ex["autotune"])
          if (t.is_null() && part.contains(pass)) t = part[pass];
        REQUIRE_FALSE(t.is_null());
        CHECK_FALSE(t["chosen"].get<std::string>().empty());
        REQUIRE(t["candidates"].size() >= 1);
        CHECK(t["candidates"][0]["plan"] == "heuristics");
        CHECK(t["candidates"][0]["ms"].get<double>() > 0);
      }
      MESSAGE("autotune: " << ex["autotune"].dump());
      MESSAGE("knobs: fwd " << ex["forward"]["knobs"].dump() << " bwd " << ex["backward"]["knobs"].dump());
    }
  }
}

TEST_CASE("cudnn: score mods softcap and alibi") {
  Problem soft = make_problem(2, 4, 4, 257, 257, 64, DType::bf16);
  soft.score_mod.kind = ScoreMod::Kind::softcap;
  soft.score_mod.cap = 2.0;  // small cap so that the tanh matters
  run_and_check(soft);
  for (int64_t hq : {8, 6}) {  // power of two and not
    Problem ali = with_causal(make_problem(1, hq, hq, 200, 200, 64, DType::fp16), CausalAlign::top_left);
    ali.score_mod.kind = ScoreMod::Kind::alibi;
    run_and_check(ali);
  }
}

TEST_CASE("cudnn: plan cache, setup time, workspace, forward determinism") {
  CudnnBackend be;
  const Problem p = with_causal(make_problem(1, 4, 4, 192, 192, 64, DType::bf16), CausalAlign::bottom_right);
  REQUIRE(be.supports(p).ok);  // builds the plans
  const ProblemData in = make_inputs(p);
  auto a = be.prepare(p, in);
  auto b = be.prepare(p, in);
  auto* api = dynamic_cast<CudnnInstanceApi*>(b.get());
  REQUIRE(api);
  CHECK(api->plan_cache_hit());
  CHECK(a->setup_ms() > 0.0);
  CHECK(a->allocated_bytes() >= static_cast<size_t>(api->plan_workspace_bytes()));
  const auto ex = a->extra();
  CHECK(ex.contains("forward"));
  CHECK(ex["forward"].contains("engine_global_index"));
  MESSAGE("cuDNN instance: " << ex.dump());

  a->poison_outputs();
  a->forward();
  const AttentionOutputs first = a->read_outputs(false);
  a->poison_outputs();
  a->forward();
  const AttentionOutputs second = a->read_outputs(false);
  CHECK(bitwise_equal(first, second));
  CHECK_FALSE(be.deterministic());  // the backward accumulates dQ with atomics
}

#else

TEST_CASE("cudnn backend not built") {
  MESSAGE("cuDNN was not found at configure time: the cudnn backend is not built and its tests do not run");
}

#endif  // ATTNBENCH_HAVE_CUDNN
