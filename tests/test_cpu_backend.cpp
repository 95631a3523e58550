// The cpu backend (backends/cpu): correctness against the float64 reference under
// the rule of docs/semantics.md section 7 for every mask kind, score mod, head mapping,
// layout and odd length, in fp32, fp16 and bf16; broken variants must fail the
// rule; poisoning, determinism, executed pairs and the interface.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "harness/backend/backend.hpp"
#include "harness/model/block_mask.hpp"
#include "harness/check/check.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/mask_desc.hpp"
#include "harness/model/problem.hpp"
#include "harness/workloads/scenario.hpp"
#include "harness/model/tensors.hpp"
#include "reference/reference.hpp"

using namespace attnbench;

namespace {

constexpr DType kAllDtypes[] = {DType::fp32, DType::fp16, DType::bf16};

/// A validated problem (seed 11, dtype set later by verify()).
Problem make_problem(int64_t B, int64_t hq, int64_t hkv, int64_t sq, int64_t sk, int64_t d, int64_t dv,
                     std::vector<MaskTerm> mask = {}, ScoreMod mod = {}, Layout layout = Layout::bshd) {
  Problem p;
  p.batch = B;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seq_q = sq;
  p.seq_k = sk;
  p.head_dim = d;
  p.head_dim_v = dv;
  p.mask = std::move(mask);
  p.score_mod = mod;
  p.layout = layout;
  p.seed = 11;
  validate(p);
  return p;
}

/// Score mod of `kind` with test parameters: softcap cap 2, rel_bias m = 9,
/// offset_bias size 7.
ScoreMod mod_of(ScoreMod::Kind kind) {
  ScoreMod m;
  m.kind = kind;
  m.cap = 2.0;
  m.max_distance = 9;
  m.size = 7;
  return m;
}

/// Outcome of the correctness rule on one case.
struct Verdict {
  bool pass = true;
  CheckResult result;
  std::string detail;  ///< the case and the CheckResult as JSON, for failure messages
  /// Whether tensor `name` ("O", "LSE", "dQ", ...) passed.
  bool tensor_pass(const std::string& name) const {
    for (const auto& t : result.tensors)
      if (t.name == name) return t.pass;
    FAIL("no tensor " << name);
    return false;
  }
};

/// Poison, forward (and backward), read back.
AttentionOutputs run(BackendInstance& inst, bool grads) {
  inst.poison_outputs();
  inst.forward();
  if (grads) inst.backward();
  inst.synchronize();
  return inst.read_outputs(grads);
}

/// Run `backend` on `p` in `dtype` (poisoned outputs, forward + backward) and apply
/// the correctness rule: check_outputs against reference::gold and reference::lp.
Verdict verify(Backend& backend, Problem p, DType dtype) {
  p.dtype = dtype;
  const ProblemData in = make_inputs(p);
  auto inst = backend.prepare(p, in);
  const AttentionOutputs got = run(*inst, true);
  const auto slices = reference::SliceSet::every();
  const AttentionOutputs gold = reference::gold(p, in, true, slices);
  const AttentionOutputs lp = reference::lp(p, in, true, slices);
  const CheckResult r = check_outputs(p, got, gold, lp, backend.rule(), slices);
  Verdict v;
  v.pass = r.pass;
  v.result = r;
  v.detail = describe_mask(p) + " " + describe_score_mod(p.score_mod) + " " + to_string(dtype) + " " +
             to_string(p.layout) + ": " + r.to_json().dump();
  return v;
}

/// The registered backend passes the rule on `p` in fp32, fp16 and bf16.
void expect_pass(const Problem& p) {
  CpuBackend backend;
  REQUIRE(backend.supports(p).ok);
  for (DType t : kAllDtypes) {
    const Verdict v = verify(backend, p, t);
    INFO(v.detail);
    CHECK(v.pass);
  }
}

}  // namespace

TEST_CASE("cpu backend: registered, deterministic, describes itself") {
  auto b = BackendRegistry::create("cpu");
  REQUIRE(b != nullptr);
  CHECK(b->name() == "cpu");
  CHECK(b->device() == Device::cpu);
  CHECK(b->deterministic());
  CHECK(b->description().find("64x64") != std::string::npos);
  Problem bad = make_problem(1, 2, 1, 8, 8, 16, 16);
  bad.heads_kv = 3;
  CHECK_FALSE(b->supports(bad).ok);
  CHECK(b->supports(make_problem(1, 2, 1, 8, 8, 16, 16)).ok);
}

TEST_CASE("cpu backend: causal, both alignments, Sq != Sk") {
  for (auto align : {CausalAlign::top_left, CausalAlign::bottom_right}) {
    expect_pass(make_problem(2, 2, 2, 100, 170, 32, 32, {CausalTerm{align}}));
    expect_pass(make_problem(1, 2, 1, 170, 100, 32, 32, {CausalTerm{align}}));
  }
}

TEST_CASE("cpu backend: sliding window") {
  expect_pass(make_problem(1, 2, 2, 200, 200, 32, 32, {SlidingWindowTerm{40, 5}}));
  expect_pass(make_problem(1, 2, 1, 150, 230, 32, 32, {CausalTerm{}, SlidingWindowTerm{70, -1}}));
}

TEST_CASE("cpu backend: document-causal packs with padding and zero-length documents") {
  const int64_t S = 150;
  DocumentTerm d = document_term_from_lengths({{30, 0, 70, 20}, {0, 150}}, S);
  expect_pass(make_problem(2, 2, 1, S, S, 32, 32, {d, CausalTerm{}}));
  expect_pass(make_problem(2, 2, 1, S, S, 32, 32, {d}));
}

TEST_CASE("cpu backend: a real CodeAlpaca pack (scenario packing, document-causal, GQA 4:1)") {
  // The packed_codealpaca scenario's packer and data at a CPU-test size: 2 packs of
  // 2048 tokens of real CodeAlpaca document lengths (Python-shuffle seed 1, greedy),
  // 8 query heads over 2 KV heads, head dim 64, every dtype, checked completely.
  const nlohmann::json j = {
      {"name", "cpu_codealpaca"},
      {"base",
       {{"batch", 2}, {"seq", 2048}, {"heads_q", 8}, {"heads_kv", 2}, {"head_dim", 64}, {"dtype", "bf16"},
        {"layout", "bshd"}, {"mask", {{{"kind", "causal"}}}}, {"seed", 1},
        {"packing",
         {{"source", {{"kind", "empirical"}, {"file", "data/codealpaca.json"}}}, {"shuffle", "python"}, {"seed", 1},
          {"strategy", "greedy"}, {"max_seq_len", 2048}, {"num_packs", 2}, {"fill", 1.0}, {"pad_to", "max_seq_len"}}}}}};
  const Scenario sc = scenario_from_json(j, std::string(ATTNBENCH_SOURCE_DIR) + "/scenarios/cpu_codealpaca.json");
  REQUIRE(sc.cases.size() == 1);
  const Case& c = sc.cases[0];
  REQUIRE(c.packing.has_value());
  const DocumentTerm* docs = c.problem.find_mask<DocumentTerm>();
  REQUIRE(docs != nullptr);
  size_t n_docs = 0;
  for (const auto& row : docs->doc_lengths) n_docs += row.size();
  INFO("documents: " << n_docs << ", packing ratio " << c.packing->packing_ratio);
  CHECK(n_docs >= 10);                  // real short documents, not one long one
  CHECK(c.packing->packing_ratio > 0.9);  // greedy packing of short documents fills the packs
  CHECK(c.packing->docs == static_cast<int64_t>(n_docs));
  // Document-causal: the allowed pairs are the documents' triangles, a small
  // fraction of the causal square.
  CHECK(count_allowed_pairs(c.problem) < 2 * 2048 * 2049 / 2 / 4);
  expect_pass(c.problem);
}

TEST_CASE("cpu backend: prefix_lm") {
  expect_pass(make_problem(1, 2, 1, 130, 130, 32, 32, {PrefixLmTerm{50}}));
}

TEST_CASE("cpu backend: padding with fully masked rows") {
  PaddingTerm pad{{100, 37, 0}, {129, 60, 20}};
  expect_pass(make_problem(3, 2, 1, 129, 140, 32, 32, {pad}));
  expect_pass(make_problem(3, 2, 1, 129, 140, 32, 32, {pad, CausalTerm{CausalAlign::bottom_right}}));
}

TEST_CASE("cpu backend: block_sparse") {
  expect_pass(make_problem(1, 2, 1, 300, 300, 32, 32, {BlockSparseTerm{0.5, 3}}));
}

TEST_CASE("cpu backend: every score mod, learnable biases with dBias") {
  for (auto kind : {ScoreMod::Kind::softcap, ScoreMod::Kind::alibi, ScoreMod::Kind::rel_bias,
                    ScoreMod::Kind::offset_bias}) {
    expect_pass(make_problem(2, 4, 2, 90, 110, 32, 32, {CausalTerm{}}, mod_of(kind)));
  }
}

TEST_CASE("cpu backend: dBias whose exact value is zero") {
  // One bias entry shared by every pair of a row: its gradient is
  // sum_ij P_ij (dP_ij - D_i) = sum_i (D_i - D_i) = 0, so dBias is pure rounding
  // error. D taken from O rounded to the dtype fails the rule here (bf16 dBias
  // 3-7x lp), as does D from a float32 O in fp32 (11x lp).
  ScoreMod one_entry = mod_of(ScoreMod::Kind::offset_bias);
  one_entry.size = 1;
  expect_pass(make_problem(2, 2, 1, 89, 89, 32, 16, {PrefixLmTerm{41}}, one_entry, Layout::thd));
  // rel_bias with every pair clamped to distance m: Sq - Sk >= m under bottom-right causal.
  ScoreMod clamped = mod_of(ScoreMod::Kind::rel_bias);
  clamped.max_distance = 22;
  expect_pass(make_problem(3, 1, 1, 108, 33, 64, 40,
                           {PaddingTerm{{88, 78, 88}, {2, 26, 30}}, CausalTerm{}}, clamped, Layout::thd));
}

TEST_CASE("cpu backend: few query rows in fp32 (P concentrated on one key)") {
  // Rows with a dominant key are where a float32 LSE or float32 accumulation
  // leaves the backend at 3-6x lp in fp32 (lp computes P = exp(s - max) / l).
  for (int64_t sq : {1, 2, 3, 5}) expect_pass(make_problem(1, 2, 1, sq, 17 + 9 * sq, 24, 40, {}, {}, Layout::bhsd));
}

TEST_CASE("cpu backend: seeded random problems") {
  // Every mask kind, score mod, layout, dtype, GQA ratio and odd sizes, drawn from a
  // fixed generator (the same 36 problems on every run).
  CpuBackend backend;
  for (uint64_t n = 0; n < 36; ++n) {
    auto pick = [&](uint64_t field, int64_t count) {
      return static_cast<int64_t>(splitmix64(n * 64 + field) % static_cast<uint64_t>(count));
    };
    const int64_t B = 1 + pick(1, 3), hkv = 1 + pick(2, 2), hq = hkv * (1 + pick(3, 4));
    const int64_t sq = 1 + pick(4, 140), sk = pick(5, 3) == 0 ? sq : 1 + pick(6, 140);
    const int64_t d = 8 * (1 + pick(7, 8)), dv = pick(8, 2) ? d : 8 * (1 + pick(9, 8));
    std::vector<MaskTerm> mask;
    switch (pick(10, 6)) {
      case 1: mask = {CausalTerm{pick(11, 2) ? CausalAlign::top_left : CausalAlign::bottom_right}}; break;
      case 2: mask = {SlidingWindowTerm{pick(12, 40) - 1, pick(13, 40) - 1}}; break;
      case 3: mask = {PrefixLmTerm{pick(14, 60)}}; break;
      case 4: {
        PaddingTerm pad;
        for (int64_t b = 0; b < B; ++b) {
          pad.seq_lens_q.push_back(pick(20 + static_cast<uint64_t>(b), sq + 1));
          pad.seq_lens_k.push_back(pick(30 + static_cast<uint64_t>(b), sk + 1));
        }
        mask = {pad, CausalTerm{}};
        break;
      }
      case 5: mask = {BlockSparseTerm{0.5, n}}; break;
      default: break;
    }
    ScoreMod mod = mod_of(static_cast<ScoreMod::Kind>(pick(15, 5)));
    mod.cap = 1.0 + static_cast<double>(pick(16, 20));
    mod.max_distance = pick(17, 30);
    mod.size = 1 + pick(18, 20);
    Problem p = make_problem(B, hq, hkv, sq, sk, d, dv, mask, mod, static_cast<Layout>(pick(19, 3)));
    p.seed = n;
    const Verdict v = verify(backend, p, static_cast<DType>(pick(40, 3)));
    INFO("random problem " << n << ": " << to_json(p, true).dump() << " -> " << v.detail);
    CHECK(v.pass);
  }
}

TEST_CASE("cpu backend: GQA 4:1 and MQA") {
  expect_pass(make_problem(1, 8, 2, 100, 100, 32, 32, {CausalTerm{}}));
  expect_pass(make_problem(2, 4, 1, 70, 90, 32, 32, {SlidingWindowTerm{20, 20}}));
}

TEST_CASE("cpu backend: layouts bshd, bhsd, thd") {
  for (auto layout : {Layout::bshd, Layout::bhsd, Layout::thd}) {
    expect_pass(make_problem(2, 4, 2, 80, 80, 32, 32, {CausalTerm{}}, {}, layout));
    expect_pass(make_problem(3, 4, 2, 90, 100, 32, 32, {PaddingTerm{{90, 33, 0}, {100, 1, 17}}, CausalTerm{}}, {},
                             layout));
  }
}

TEST_CASE("cpu backend: odd lengths 1, 17, 129 and Dqk != Dv") {
  expect_pass(make_problem(1, 2, 1, 1, 17, 24, 40));
  expect_pass(make_problem(1, 2, 1, 17, 1, 24, 40, {CausalTerm{CausalAlign::top_left}}));
  expect_pass(make_problem(1, 2, 1, 129, 129, 40, 24, {CausalTerm{}}));
  expect_pass(make_problem(1, 2, 2, 1, 1, 8, 8));
}

TEST_CASE("cpu backend: broken variants fail the rule") {
  // Each defect must fail already in the forward output O, in every dtype.
  const Problem causal = make_problem(1, 2, 1, 150, 150, 32, 32, {CausalTerm{}});
  for (DType t : kAllDtypes) {
    CpuBackendOptions drop;
    drop.drop_mask = true;  // masked pairs attended
    const Verdict v1 = verify(*std::make_unique<CpuBackend>(drop), causal, t);
    INFO(v1.detail);
    CHECK_FALSE(v1.pass);
    CHECK_FALSE(v1.tensor_pass("O"));

    CpuBackendOptions wrong_scale;
    wrong_scale.scale_factor = 1.05;
    const Verdict v2 = verify(*std::make_unique<CpuBackend>(wrong_scale), causal, t);
    INFO(v2.detail);
    CHECK_FALSE(v2.pass);
    CHECK_FALSE(v2.tensor_pass("O"));

    // Without a mask, q-block 0 has three tiles: dropping the first leaves its rows
    // finite but wrong.
    CpuBackendOptions skip;
    skip.skip_one_block = true;
    const Verdict v3 = verify(*std::make_unique<CpuBackend>(skip), make_problem(1, 2, 1, 150, 150, 32, 32), t);
    INFO(v3.detail);
    CHECK_FALSE(v3.pass);
    CHECK_FALSE(v3.tensor_pass("O"));
  }
  // In fp32 the rule resolves a scale error of 1e-4.
  CpuBackendOptions tiny;
  tiny.scale_factor = 1.0001;
  const Verdict v4 = verify(*std::make_unique<CpuBackend>(tiny), causal, DType::fp32);
  INFO(v4.detail);
  CHECK_FALSE(v4.tensor_pass("O"));
  // The correct backend on the same cases, for contrast.
  CpuBackend good;
  CHECK(verify(good, causal, DType::fp32).pass);
  CHECK(verify(good, make_problem(1, 2, 1, 150, 150, 32, 32), DType::bf16).pass);
}

namespace {
/// Bitwise equality of two double vectors (NaN payloads included).
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}
int64_t count_nan(const std::vector<double>& v) {
  int64_t n = 0;
  for (double x : v) n += std::isnan(x) ? 1 : 0;
  return n;
}
}  // namespace

TEST_CASE("cpu backend: poison then forward/backward leaves no NaN; masked rows are exactly zero") {
  // THD with padding: rows past the valid length are not stored, one batch row is
  // empty; causal makes some rows of the second batch row fully masked too.
  for (auto layout : {Layout::bshd, Layout::thd}) {
    Problem p = make_problem(3, 4, 2, 70, 90, 16, 24, {PaddingTerm{{70, 40, 0}, {90, 5, 12}}, CausalTerm{CausalAlign::top_left}},
                             mod_of(ScoreMod::Kind::rel_bias), layout);
    p.dtype = DType::bf16;
    const ProblemData in = make_inputs(p);
    CpuBackend backend;
    auto inst = backend.prepare(p, in);
    const AttentionOutputs got = run(*inst, true);
    CHECK(count_nan(got.o.data) == 0);
    CHECK(count_nan(got.lse.data) == 0);
    CHECK(count_nan(got.dq.data) == 0);
    CHECK(count_nan(got.dk.data) == 0);
    CHECK(count_nan(got.dv.data) == 0);
    CHECK(count_nan(got.dbias) == 0);
    // Batch row 1: valid Sq = 40, Sk = 5, top-left causal: rows 0..39 see j <= min(i, 4);
    // every row has j = 0. Rows 40.. are padding: fully masked.
    // Batch row 2: no valid query at all.
    int64_t masked_rows = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < p.seq_q; ++i) {
          if (i < p.valid_q(b)) {
            CHECK(std::isfinite(got.lse.data[static_cast<size_t>((b * p.heads_q + h) * p.seq_q + i)]));
            continue;
          }
          ++masked_rows;
          CHECK(got.lse.data[static_cast<size_t>((b * p.heads_q + h) * p.seq_q + i)] ==
                -std::numeric_limits<double>::infinity());
          for (int64_t d = 0; d < p.head_dim_v; ++d) CHECK(got.o.at4(b, h, i, d) == 0.0);
          for (int64_t d = 0; d < p.head_dim; ++d) CHECK(got.dq.at4(b, h, i, d) == 0.0);
        }
    CHECK(masked_rows == p.heads_q * (30 + 70));
    // Keys past the valid length are never attended: dK = dV = 0 there.
    for (int64_t g = 0; g < p.heads_kv; ++g)
      for (int64_t j = 5; j < p.seq_k; ++j) {
        for (int64_t d = 0; d < p.head_dim; ++d) CHECK(got.dk.at4(1, g, j, d) == 0.0);
        for (int64_t d = 0; d < p.head_dim_v; ++d) CHECK(got.dv.at4(1, g, j, d) == 0.0);
      }
  }
}

TEST_CASE("cpu backend: two runs are bitwise identical") {
  Problem p = make_problem(2, 4, 1, 150, 150, 32, 32, {document_term_from_lengths({{60, 0, 50}, {150}}, 150), CausalTerm{}},
                           mod_of(ScoreMod::Kind::offset_bias));
  p.dtype = DType::fp16;
  const ProblemData in = make_inputs(p);
  CpuBackend backend;
  auto a = backend.prepare(p, in);
  auto b = backend.prepare(p, in);
  const AttentionOutputs first = run(*a, true);
  const AttentionOutputs again = run(*a, true);
  const AttentionOutputs other = run(*b, true);
  for (const AttentionOutputs* x : {&again, &other}) {
    CHECK(same_bits(first.o.data, x->o.data));
    CHECK(same_bits(first.lse.data, x->lse.data));
    CHECK(same_bits(first.dq.data, x->dq.data));
    CHECK(same_bits(first.dk.data, x->dk.data));
    CHECK(same_bits(first.dv.data, x->dv.data));
    CHECK(same_bits(first.dbias, x->dbias));
  }
  CHECK(first.dbias.size() == 7);
}

TEST_CASE("cpu backend: executed pairs equal the BlockMask count") {
  // Hand count, causal 150 x 150 with 64 x 64 tiles (rows 64, 64, 22):
  // q-block 0: tile 0 (64 x 64); q-block 1: tiles 0, 1 (64 x 128);
  // q-block 2: tiles 0, 1, 2 (22 x 150). Per head 4096 + 8192 + 3300 = 15588.
  const Problem causal = make_problem(1, 2, 1, 150, 150, 16, 16, {CausalTerm{}});
  CpuBackend backend;
  auto inst = backend.prepare(causal, make_inputs(causal));
  CHECK(inst->executed_pairs() == 2 * 15588);
  CHECK(inst->setup_ms() >= 0.0);

  for (const Problem& p : {make_problem(2, 4, 2, 300, 300, 16, 16, {BlockSparseTerm{0.4, 5}}),
                           make_problem(2, 2, 1, 150, 150, 16, 16, {document_term_from_lengths({{30, 0, 70, 20}, {0, 150}}, 150)}),
                           make_problem(3, 2, 1, 129, 140, 16, 16, {PaddingTerm{{100, 37, 0}, {129, 60, 20}}}),
                           make_problem(1, 2, 2, 17, 1, 16, 16)}) {
    auto i2 = backend.prepare(p, make_inputs(p));
    const BlockMask bm = build_block_mask(p, kCpuQBlock, kCpuKVBlock);
    CHECK(i2->executed_pairs() == bm.executed_pairs_per_head(p.batch) * p.heads_q);
    // Never fewer than the useful pairs, never more than the dense square.
    CHECK(i2->executed_pairs() >= count_allowed_pairs(p) * p.heads_q);
    CHECK(i2->executed_pairs() <= p.batch * p.heads_q * p.seq_q * p.seq_k);
  }
}

TEST_CASE("cpu backend: interface contract") {
  const Problem p = make_problem(2, 4, 2, 33, 65, 16, 8, {CausalTerm{}}, mod_of(ScoreMod::Kind::rel_bias), Layout::bhsd);
  const ProblemData in = make_inputs(p);
  CpuBackend backend;
  auto inst = backend.prepare(p, in);
  // backward() needs a forward since the last poison.
  inst->poison_outputs();
  CHECK_THROWS_AS(inst->backward(), std::logic_error);
  // Poisoned outputs read back as NaN everywhere.
  const AttentionOutputs poisoned = inst->read_outputs(true);
  CHECK(count_nan(poisoned.o.data) == p.o_numel());
  CHECK(count_nan(poisoned.lse.data) == p.lse_numel());
  CHECK(count_nan(poisoned.dk.data) == p.k_numel());
  CHECK(count_nan(poisoned.dbias) == p.bias_numel());
  // Shapes of what read_outputs returns.
  const AttentionOutputs out = run(*inst, false);
  CHECK(out.o.shape == std::vector<int64_t>{2, 4, 33, 8});
  CHECK(out.lse.shape == std::vector<int64_t>{2, 4, 33});
  CHECK_FALSE(out.has_grads());
  const AttentionOutputs grads = run(*inst, true);
  CHECK(grads.dq.shape == std::vector<int64_t>{2, 4, 33, 16});
  CHECK(grads.dk.shape == std::vector<int64_t>{2, 2, 65, 16});
  CHECK(grads.dv.shape == std::vector<int64_t>{2, 2, 65, 8});
  CHECK(grads.dbias.size() == static_cast<size_t>(p.bias_numel()));
  // Memory: at least the float32 inputs and outputs.
  const size_t io = 4 * static_cast<size_t>(2 * p.q_numel() + 2 * p.k_numel() + 2 * p.v_numel() + 2 * p.o_numel() +
                                            p.lse_numel() + 2 * p.bias_numel());
  CHECK(inst->allocated_bytes() >= io);
  CHECK(backend.workspace_bytes(p) > 0);
  // Shape mismatches are rejected at prepare().
  ProblemData wrong = in;
  wrong.k = HostTensor({2, 2, 64, 16});
  CHECK_THROWS_AS(backend.prepare(p, wrong), std::invalid_argument);
  wrong = in;
  wrong.bias.pop_back();
  CHECK_THROWS_AS(backend.prepare(p, wrong), std::invalid_argument);
}
