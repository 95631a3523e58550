// GPU tests of the naive backend against the float64 reference (gold) and the
// low-precision emulation (lp) under the correctness rule of docs/semantics.md section 7.
//
// Every case: poison -> forward -> backward -> check_outputs (O, LSE, dQ, dK, dV,
// dBias), no NaN anywhere, fully masked rows exactly 0 with LSE = -inf, guard
// bands intact, and a second run (with a repeated backward) bitwise equal.
// Sizes are small (B, H <= 2 mostly) so that the CPU reference keeps the suite
// well under two minutes on an H100 host.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backends/naive/naive.hpp"
#include "harness/check/check.hpp"
#include "harness/device/buffer.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"
#include "reference/reference.hpp"
#include "tests/gpu/gpu_check.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using naive::NaiveBackend;
using naive::NaiveInstanceApi;
using namespace attnbench::test;

namespace {

/// tests/test_util.hpp's make_problem with this suite's default seed (1).
Problem make(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, DType dt,
             Layout layout = Layout::bshd, uint64_t seed = 1) {
  return make_problem(B, Hq, Hkv, Sq, Sk, D, dt, layout, seed);
}

Problem with_mod(Problem p, ScoreMod::Kind k, double cap = 0, int64_t m = 0, int64_t size = 0) {
  p.score_mod.kind = k;
  p.score_mod.cap = cap;
  p.score_mod.max_distance = m;
  p.score_mod.size = size;
  return p;
}

void run_case(const Problem& p) {
  const std::string what = case_label(p);
  INFO(what);
  REQUIRE_NOTHROW(validate(p));
  NaiveBackend be;
  const Support sup = be.supports(p);
  REQUIRE_MESSAGE(sup.ok, sup.reason);
  const ProblemData in = make_inputs(p);

  std::unique_ptr<BackendInstance> inst = be.prepare(p, in);
  REQUIRE(inst);
  CHECK(inst->executed_pairs() == p.batch * p.heads_q * p.seq_q * p.seq_k);
  CHECK(inst->stream() != nullptr);
  CHECK(inst->allocated_bytes() == naive::plan_memory(p).total_bytes);

  inst->poison_outputs();
  inst->forward();
  inst->backward();
  inst->synchronize();
  const AttentionOutputs got = inst->read_outputs(true);

  // Shapes.
  REQUIRE(got.o.shape == std::vector<int64_t>{p.batch, p.heads_q, p.seq_q, p.head_dim_v});
  REQUIRE(got.lse.shape == std::vector<int64_t>{p.batch, p.heads_q, p.seq_q});
  REQUIRE(got.dq.shape == std::vector<int64_t>{p.batch, p.heads_q, p.seq_q, p.head_dim});
  REQUIRE(got.dk.shape == std::vector<int64_t>{p.batch, p.heads_kv, p.seq_k, p.head_dim});
  REQUIRE(got.dv.shape == std::vector<int64_t>{p.batch, p.heads_kv, p.seq_k, p.head_dim_v});
  REQUIRE(static_cast<int64_t>(got.dbias.size()) == p.bias_numel());

  // No NaN anywhere; no Inf except LSE = -inf on fully masked rows.
  CHECK(count_nonfinite(got.o.data, true) == 0);
  CHECK(count_nonfinite(got.lse.data, true) == 0);
  CHECK(count_nonfinite(got.dq.data, true) == 0);
  CHECK(count_nonfinite(got.dk.data, true) == 0);
  CHECK(count_nonfinite(got.dv.data, true) == 0);
  CHECK(count_nonfinite(got.dbias, true) == 0);
  CHECK(count_nonfinite(got.o.data, false) + count_nonfinite(got.dq.data, false) +
            count_nonfinite(got.dk.data, false) + count_nonfinite(got.dv.data, false) +
            count_nonfinite(got.dbias, false) ==
        0);

  // Fully masked rows (from the mask itself): LSE = -inf, O and dQ exactly 0.
  int64_t masked_rows = 0;
  const int64_t bad_rows = bad_masked_rows(p, got, &masked_rows);
  CAPTURE(masked_rows);
  CHECK(bad_rows == 0);

  // The correctness rule against gold and lp.
  const AttentionOutputs gold = reference::gold(p, in, true);
  const AttentionOutputs lp = reference::lp(p, in, true);
  const CheckResult r = check_outputs(p, got, gold, lp, be.rule(), reference::SliceSet::every());
  INFO("check: " << r.to_json().dump());
  CHECK(r.pass);

  // A loose bound, independent of the rule.
  CHECK(loosely_close(got.o.data, gold.o.data, lp.o.data, p.dtype));
  CHECK(loosely_close(got.dq.data, gold.dq.data, lp.dq.data, p.dtype));
  CHECK(loosely_close(got.dk.data, gold.dk.data, lp.dk.data, p.dtype));
  CHECK(loosely_close(got.dv.data, gold.dv.data, lp.dv.data, p.dtype));
  if (p.has_learnable_bias()) CHECK(loosely_close(got.dbias, gold.dbias, lp.dbias, p.dtype));

  // Guard bands of every device buffer intact.
  const auto* api = dynamic_cast<const NaiveInstanceApi*>(inst.get());
  REQUIRE(api != nullptr);
  CHECK(api->guards_intact());

  // Determinism and idempotence: a second run (backward twice: dP reuses the S
  // buffer) is bitwise equal.
  inst->poison_outputs();
  inst->forward();
  inst->backward();
  inst->backward();
  const AttentionOutputs again = inst->read_outputs(true);
  check_same_bits(got, again, true);
}

}  // namespace

TEST_CASE("naive: backend registry and availability") {
  std::unique_ptr<Backend> be = BackendRegistry::create("naive");
  REQUIRE(be);
  CHECK(be->name() == "naive");
  CHECK(be->device() == Device::cuda);
  std::string why;
  CHECK_MESSAGE(be->available(&why), why);
  CHECK(be->deterministic());
}

TEST_CASE("naive: sequence lengths 1, 17, 127, 128, 129, 1000, 1013") {
  for (int64_t L : {1, 17, 127, 128, 129, 1000, 1013}) {
    for (DType t : {DType::fp16, DType::bf16}) {
      const int64_t B = L >= 1000 ? 1 : 2;
      run_case(make(B, 2, 1, L, L, 64, t, Layout::bshd, 10 + static_cast<uint64_t>(L)));
      run_case(with_causal(make(B, 2, 2, L, L, 64, t, Layout::bhsd, 20 + static_cast<uint64_t>(L))));
    }
  }
}

TEST_CASE("naive: Sq != Sk in both directions, both causal alignments") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{100, 300}, {300, 100}, {1, 129}, {129, 1}, {17, 1000}};
  for (auto [sq, sk] : shapes)
    for (CausalAlign a : {CausalAlign::top_left, CausalAlign::bottom_right})
      for (DType t : {DType::fp16, DType::bf16}) {
        run_case(with_causal(make(2, 2, 1, sq, sk, 64, t, Layout::bshd, 30), a));
        run_case(make(1, 2, 2, sq, sk, 64, t, Layout::bhsd, 31));
      }
}

TEST_CASE("naive: GQA 4:1, 7:1 and MQA in both layouts") {
  const std::vector<std::pair<int64_t, int64_t>> heads = {{8, 2}, {14, 2}, {7, 1}, {6, 1}};
  for (auto [hq, hkv] : heads)
    for (Layout l : {Layout::bshd, Layout::bhsd})
      for (DType t : {DType::fp16, DType::bf16}) {
        run_case(with_causal(make(2, hq, hkv, 150, 150, 64, t, l, 40)));
        run_case(make(1, hq, hkv, 90, 200, 64, t, l, 41));
      }
}

TEST_CASE("naive: head dims 64, 128, 96, 256 and Dqk != Dv") {
  for (int64_t d : {64, 128, 96, 256})
    for (DType t : {DType::fp16, DType::bf16}) {
      run_case(with_causal(make(1, 2, 1, 200, 200, d, t, Layout::bshd, 50)));
      run_case(make(1, 2, 2, 130, 200, d, t, Layout::bhsd, 51));
    }
  for (DType t : {DType::fp16, DType::bf16}) {
    Problem p = make(2, 4, 2, 160, 160, 128, t, Layout::bshd, 52);
    p.head_dim_v = 64;
    run_case(with_causal(p));
    Problem q = make(1, 2, 1, 160, 96, 64, t, Layout::bhsd, 53);
    q.head_dim_v = 128;
    run_case(q);
  }
}

TEST_CASE("naive: sliding windows (0,0), (W,0), two-sided, wider than Sk") {
  for (DType t : {DType::fp16, DType::bf16}) {
    run_case(with_window(make(1, 2, 1, 300, 300, 64, t, Layout::bshd, 60), 0, 0));
    run_case(with_window(make(1, 2, 1, 300, 300, 64, t, Layout::bhsd, 61), 32, 0));
    run_case(with_window(make(1, 2, 1, 300, 300, 64, t, Layout::bshd, 62), 5, 7));
    run_case(with_window(make(1, 2, 1, 300, 300, 64, t, Layout::bshd, 63), 5000, 0));
    run_case(with_window(make(1, 2, 1, 300, 300, 64, t, Layout::bhsd, 64), 5000, 5000));
    run_case(with_window(make(2, 2, 1, 100, 300, 64, t, Layout::bshd, 65), 32, 0));
    run_case(with_window(make(2, 2, 1, 300, 100, 64, t, Layout::bhsd, 66), 32, 0));  // fully masked rows
    run_case(with_causal(with_window(make(1, 2, 1, 257, 257, 64, t, Layout::bshd, 67), 64, -1)));
  }
}

TEST_CASE("naive: fully masked rows from padding") {
  for (DType t : {DType::fp16, DType::bf16})
    for (Layout l : {Layout::bshd, Layout::bhsd}) {
      // Row 2 keeps one key (with bottom-right causal: only its last query row
      // attends, to a single key); row 3 has no valid query at all.
      Problem p = make(4, 2, 1, 128, 160, 64, t, l, 70);
      p.mask.push_back(PaddingTerm{{120, 37, 128, 0}, {90, 160, 1, 50}});
      run_case(p);
      run_case(with_causal(p));  // per-row bottom-right alignment: rows i < 30 of batch 0 are empty too
      run_case(with_causal(p, CausalAlign::top_left));
    }
}

TEST_CASE("naive: documents with padding and zero-length documents") {
  for (DType t : {DType::fp16, DType::bf16})
    for (Layout l : {Layout::bshd, Layout::bhsd}) {
      Problem p = make(2, 4, 2, 128, 128, 64, t, l, 80);
      p = with_documents(p, {{40, 0, 25, 0, 30}, {0, 64, 30, 0}});  // 33 and 34 padding tokens
      run_case(p);
      run_case(with_causal(p));  // block-causal packed training mask
    }
  // Non-contiguous ids (no lengths), with padding ids in the middle.
  for (DType t : {DType::fp16, DType::bf16}) {
    Problem p = make(1, 2, 1, 200, 200, 64, t, Layout::bshd, 81);
    DocumentTerm d;
    std::vector<int32_t> ids(200);
    for (int64_t i = 0; i < 200; ++i) ids[static_cast<size_t>(i)] = (i % 7 == 3) ? -1 : static_cast<int32_t>(i % 3);
    d.doc_ids.push_back(ids);
    p.mask.push_back(d);
    run_case(p);
  }
  // A row that is all padding.
  run_case(with_documents(make(2, 2, 2, 64, 64, 64, DType::bf16, Layout::bshd, 82), {{64}, {0, 0}}));
}

TEST_CASE("naive: every score mod, learnable biases included") {
  for (DType t : {DType::fp16, DType::bf16})
    for (Layout l : {Layout::bshd, Layout::bhsd}) {
      const Problem base = make(2, 4, 2, 150, 150, 64, t, l, 90);
      run_case(with_mod(base, ScoreMod::Kind::softcap, 1.5));
      run_case(with_causal(with_mod(base, ScoreMod::Kind::softcap, 30.0)));
      run_case(with_mod(base, ScoreMod::Kind::alibi));
      run_case(with_causal(with_mod(base, ScoreMod::Kind::alibi)));
      run_case(with_mod(base, ScoreMod::Kind::rel_bias, 0, 16));
      run_case(with_causal(with_mod(base, ScoreMod::Kind::rel_bias, 0, 0)));
      run_case(with_mod(base, ScoreMod::Kind::rel_bias, 0, 400));  // m beyond every |i - j|
      run_case(with_mod(base, ScoreMod::Kind::offset_bias, 0, 0, 7));
      run_case(with_causal(with_mod(base, ScoreMod::Kind::offset_bias, 0, 0, 300)));  // unused entries
    }
  // Learnable biases with fully masked rows (padding and documents) and Sq != Sk.
  for (DType t : {DType::fp16, DType::bf16}) {
    Problem p = make(2, 2, 1, 100, 140, 64, t, Layout::bshd, 91);
    p.mask.push_back(PaddingTerm{{60, 100}, {140, 20}});
    run_case(with_causal(with_mod(p, ScoreMod::Kind::rel_bias, 0, 8)));
    run_case(with_mod(p, ScoreMod::Kind::offset_bias, 0, 0, 5));
    Problem d = with_documents(make(2, 2, 2, 96, 96, 64, t, Layout::bhsd, 92), {{30, 0, 40}, {96}});
    run_case(with_mod(d, ScoreMod::Kind::rel_bias, 0, 4));
    run_case(with_causal(with_mod(d, ScoreMod::Kind::softcap, 2.0)));
  }
}

TEST_CASE("naive: prefix_lm, block_sparse, explicit scale") {
  for (DType t : {DType::fp16, DType::bf16}) {
    Problem p = make(1, 2, 1, 200, 200, 64, t, Layout::bshd, 100);
    p.mask.push_back(PrefixLmTerm{37});
    run_case(p);
    Problem b = make(1, 2, 1, 300, 300, 64, t, Layout::bhsd, 101);
    b.mask.push_back(BlockSparseTerm{0.5, 9});
    run_case(b);
    Problem s = make(1, 2, 2, 120, 120, 64, t, Layout::bshd, 102);
    s.scale = 0.3;
    run_case(with_causal(s));
  }
}

TEST_CASE("naive: fp32 (dS and dP share the score buffer; softcap keeps S)") {
  run_case(with_causal(make(1, 2, 1, 150, 150, 64, DType::fp32, Layout::bshd, 110)));
  run_case(with_mod(make(1, 4, 2, 130, 170, 64, DType::fp32, Layout::bhsd, 111), ScoreMod::Kind::softcap, 2.0));
  run_case(with_mod(make(1, 2, 1, 100, 100, 64, DType::fp32, Layout::bshd, 112), ScoreMod::Kind::rel_bias, 0, 8));
}

TEST_CASE("naive: unsupported cases carry a reason") {
  NaiveBackend be;
  SUBCASE("THD layout") {
    const Problem p = make(2, 2, 1, 64, 64, 64, DType::bf16, Layout::thd);
    const Support s = be.supports(p);
    CHECK_FALSE(s.ok);
    CHECK(s.reason.find("THD") != std::string::npos);
    CHECK_THROWS_AS(be.prepare(p, make_inputs(p)), Unsupported);
  }
  SUBCASE("over an explicit budget") {
    const Problem p = make(1, 2, 1, 1024, 1024, 64, DType::bf16);
    const naive::MemoryPlan plan = naive::plan_memory(p);
    CHECK(plan.pairs == 2 * 1024 * 1024);
    CHECK(plan.score_bytes >= static_cast<size_t>(plan.pairs) * 8);  // S f32 + P + dS (bf16)
    be.set_memory_budget(plan.total_bytes - 1);
    const Support s = be.supports(p);
    CHECK_FALSE(s.ok);
    INFO(s.reason);
    CHECK(s.reason.find(std::to_string(plan.total_bytes)) != std::string::npos);
    CHECK(s.reason.find("budget") != std::string::npos);
    CHECK_THROWS_AS(be.prepare(p, make_inputs(p)), Unsupported);
    be.set_memory_budget(plan.total_bytes);
    CHECK(be.supports(p).ok);
  }
  SUBCASE("over the default budget (fraction of free device memory)") {
    const Problem p = make(8, 64, 8, 65536, 65536, 128, DType::bf16);  // ~2^41 pairs, never allocated
    const Support s = be.supports(p);
    CHECK_FALSE(s.ok);
    INFO(s.reason);
    CHECK(s.reason.find("free on device") != std::string::npos);
  }
  SUBCASE("prepare rejects inputs of the wrong shape") {
    const Problem p = make(1, 2, 1, 64, 64, 64, DType::fp16);
    ProblemData in = make_inputs(make(1, 2, 1, 64, 65, 64, DType::fp16));
    CHECK_THROWS_AS(be.prepare(p, in), std::invalid_argument);
  }
}

TEST_CASE("naive: poisoned outputs read back as NaN before any pass") {
  const Problem p = with_mod(make(1, 2, 1, 33, 47, 64, DType::bf16), ScoreMod::Kind::rel_bias, 0, 3);
  NaiveBackend be;
  auto inst = be.prepare(p, make_inputs(p));
  inst->poison_outputs();
  const AttentionOutputs out = inst->read_outputs(true);
  CHECK(count_nonfinite(out.o.data, true) == static_cast<int64_t>(out.o.data.size()));
  CHECK(count_nonfinite(out.lse.data, true) == static_cast<int64_t>(out.lse.data.size()));
  CHECK(count_nonfinite(out.dq.data, true) == static_cast<int64_t>(out.dq.data.size()));
  CHECK(count_nonfinite(out.dk.data, true) == static_cast<int64_t>(out.dk.data.size()));
  CHECK(count_nonfinite(out.dv.data, true) == static_cast<int64_t>(out.dv.data.size()));
  CHECK(count_nonfinite(out.dbias, true) == static_cast<int64_t>(out.dbias.size()));
  CHECK(out.dbias.size() == static_cast<size_t>(p.bias_numel()));
}

TEST_CASE("naive: device memory is released with the instance") {
  const Problem p = with_causal(make(2, 4, 2, 256, 256, 64, DType::fp16));
  const size_t before = device::tracked_memory().current_bytes;
  {
    NaiveBackend be;
    auto inst = be.prepare(p, make_inputs(p));
    CHECK(device::tracked_memory().current_bytes - before == inst->allocated_bytes());
    CHECK(inst->allocated_bytes() == naive::plan_memory(p).total_bytes);
    CHECK(be.workspace_bytes(p) > 0);
  }
  CHECK(device::tracked_memory().current_bytes == before);
}
