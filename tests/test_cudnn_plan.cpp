// Host-only tests of the cudnn backend's plan analysis (backends/cudnn/cudnn_plan.*):
// how the masks of docs/semantics.md section 3 map to cuDNN's diagonal band, ragged sequences and fix-up
// lists, the executed-pair estimate, the length-class split of ragged cases and
// the version gates, all with a fake Env. No GPU needed: this runs in CI wherever
// the cudnn backend is built (CUDA toolkit + cuDNN headers). The GPU half of the
// backend's tests is tests/gpu/test_cudnn.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <string>
#include <variant>
#include <vector>

#include "backends/cudnn/cudnn_plan.hpp"
#include "harness/model/mask.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
using namespace attnbench::cudnn_sdpa;
using namespace attnbench::test;

namespace {

Env fake_env(int64_t version, int sm = 90) {
  Env e;
  e.version = version;
  e.sm = sm;
  e.device = 0;
  return e;
}

CasePlan plan_ok(const Problem& p, const Env& env) {
  auto r = plan_case(p, env);
  if (auto* why = std::get_if<std::string>(&r)) {
    FAIL("plan_case refused: " << *why);
    return {};
  }
  return std::get<CasePlan>(r);
}

std::string plan_reason(const Problem& p, const Env& env) {
  auto r = plan_case(p, env);
  if (auto* why = std::get_if<std::string>(&r)) return *why;
  return {};
}

}  // namespace

TEST_CASE("cudnn plan: bands map the masks of docs/semantics.md to one cuDNN alignment (left bound = left + 1)") {
  const Env env = fake_env(91900);
  SUBCASE("window(64, 0), Sq == Sk: top-left, R = 0, L = 65") {
    CasePlan c = plan_ok(with_window(make_problem(1, 2, 2, 300, 300, 64, DType::bf16), 64, 0), env);
    CHECK(c.fwd.band.align == Align::top_left);
    CHECK(c.fwd.band.has_right);
    CHECK(c.fwd.band.right == 0);
    CHECK(c.fwd.band.has_left);
    CHECK(c.fwd.band.left_bound == 65);
    CHECK_FALSE(c.fwd.padded);
  }
  SUBCASE("causal bottom_right, Sq < Sk: bottom-right, no sequence lengths") {
    CasePlan c = plan_ok(with_causal(make_problem(1, 2, 2, 100, 300, 64, DType::bf16), CausalAlign::bottom_right), env);
    CHECK(c.fwd.band.align == Align::bottom_right);
    CHECK(c.fwd.band.right == 0);
    CHECK_FALSE(c.fwd.band.has_left);
    CHECK_FALSE(c.fwd.padded);
    CHECK(c.dead_q.unit.empty());
  }
  SUBCASE("causal bottom_right, Sq > Sk: sequence lengths, and the first Sq - Sk rows are fixed up") {
    CasePlan c = plan_ok(with_causal(make_problem(2, 2, 2, 300, 100, 64, DType::bf16), CausalAlign::bottom_right), env);
    CHECK(c.fwd.band.align == Align::bottom_right);
    CHECK(c.fwd.padded);
    CHECK(c.dead_q.unit.size() == 2 * 200);
    CHECK(c.stats_dead.unit.size() == 2 * 200);
    CHECK(c.lse_src.size() == 2 * 300);
  }
  SUBCASE("causal top_left with Sq != Sk stays top-left") {
    CasePlan c = plan_ok(with_causal(make_problem(1, 2, 2, 300, 100, 64, DType::fp16), CausalAlign::top_left), env);
    CHECK(c.fwd.band.align == Align::top_left);
    CHECK_FALSE(c.fwd.padded);
  }
  SUBCASE("window wider than Sk keeps its (inactive) left bound") {
    CasePlan c = plan_ok(with_window(make_problem(1, 2, 2, 300, 300, 64, DType::bf16), 5000, 0), env);
    CHECK(c.fwd.band.left_bound == 5001);
  }
  SUBCASE("causal top_left + window with Sq != Sk needs two alignments: refused") {
    Problem p = with_window(with_causal(make_problem(1, 2, 2, 200, 300, 64, DType::bf16), CausalAlign::top_left), 32, 0);
    CHECK(plan_reason(p, env).find("two diagonal alignments") != std::string::npos);
  }
}

TEST_CASE("cudnn plan: executed pairs estimate 128 x 128 tiles") {
  const Env env = fake_env(91900);
  // Causal 256 x 256: tiles (0,0), (1,0), (1,1) of 128 x 128, two heads.
  CasePlan c = plan_ok(with_causal(make_problem(1, 2, 2, 256, 256, 64, DType::bf16), CausalAlign::top_left), env);
  CHECK(c.executed_pairs == 3 * 128 * 128 * 2);
  // No mask: everything.
  CasePlan d = plan_ok(make_problem(2, 3, 3, 200, 300, 64, DType::bf16), env);
  CHECK(d.executed_pairs == 2 * 3 * 200 * 300);
  // Window (0, 0) on 300 x 300: diagonal tiles only (128, 128, 44 rows).
  CasePlan w = plan_ok(with_window(make_problem(1, 1, 1, 300, 300, 64, DType::bf16), 0, 0), env);
  CHECK(w.executed_pairs == 128 * 128 + 128 * 128 + 44 * 44);
}

TEST_CASE("cudnn plan: documents become ragged sequences; padding tokens and empty documents get no token row") {
  const Env env = fake_env(91900);
  Problem p = with_causal(with_documents(make_problem(2, 4, 2, 300, 300, 64, DType::bf16), {{100, 0, 150}, {40, 40, 40, 100}}),
                          CausalAlign::bottom_right);
  validate(p);
  CasePlan c = plan_ok(p, env);
  CHECK(c.storage == Storage::tokens);
  CHECK(c.fwd.ragged);
  CHECK(c.fwd.padded);
  CHECK(c.fwd.n == 6);  // the zero-length document is dropped
  CHECK(c.fwd.sq == 150);
  CHECK(c.fwd.band.align == Align::top_left);  // per document s_q == s_kv
  REQUIRE(c.seqs.size() == 6);
  CHECK(c.seqs[1].q_pos == 100);
  CHECK(c.seqs[1].q_len == 150);
  CHECK(c.seqs[1].q_row == 100);
  CHECK(c.seqs[2].q_row == 250);  // batch row 1 starts after row 0's 250 document tokens
  CHECK(c.rag_q[1] == 100 * 4 * 64);
  CHECK(c.rag_k[1] == 100 * 2 * 64);
  CHECK(c.rag_stats[1] == 100 * 4);
  // The padding tokens of both rows (50 + 80) are not stored: nothing to fix up,
  // their LSE is -inf and their rows read back as zeros.
  CHECK(c.q_rows == 250 + 220 + kRowSlack);
  CHECK(c.k_rows == 250 + 220 + kRowSlack);
  CHECK(c.q_row_of[249] == 249);
  CHECK(c.q_row_of[250] == -1);
  CHECK(c.q_row_of[300] == 250);
  CHECK(c.k_row_of[300 + 219] == 469);
  CHECK(c.k_row_of[300 + 220] == -1);
  CHECK(c.dead_q.unit.empty());
  CHECK(c.dead_k.unit.empty());
  CHECK(c.stats_dead.unit.empty());
  REQUIRE(c.lse_src.size() == 600);
  CHECK(c.lse_src[0] == 0);
  CHECK(c.lse_src[260] == -1);
  CHECK(c.lse_src[300 + 1] == 251 * 4);
  // lse_from_stats: -inf for the padding rows, head h at + h for token-major stats.
  std::vector<double> stats(static_cast<size_t>(c.stats_elems));
  for (size_t i = 0; i < stats.size(); ++i) stats[i] = 0.5 * static_cast<double>(i);
  HostTensor lse = lse_from_stats(c, stats, 2, 4, 300);
  CHECK(lse.data[static_cast<size_t>((0 * 4 + 3) * 300 + 10)] == 0.5 * (10 * 4 + 3));
  CHECK(lse.data[static_cast<size_t>((1 * 4 + 2) * 300 + 1)] == 0.5 * (251 * 4 + 2));
  CHECK(std::isinf(lse.data[static_cast<size_t>((0 * 4 + 1) * 300 + 260)]));
  CHECK(lse.data[static_cast<size_t>((0 * 4 + 1) * 300 + 260)] < 0);
  CHECK_THROWS_AS(lse_from_stats(c, std::vector<double>(10), 2, 4, 300), std::out_of_range);
  // 1D sequence work: causal per document.
  CHECK(c.executed_pairs > 0);
  CHECK(c.executed_pairs >= count_allowed_pairs(p) * 4);

  SUBCASE("sequence order: the ragged offsets list the documents longest first; rows do not move") {
    Env e2 = env;
    e2.seq_order = SeqOrder::long_first;
    CasePlan l = plan_ok(p, e2);
    CHECK(l.q_row_of == c.q_row_of);
    REQUIRE(l.seqs.size() == 6);
    CHECK(l.seqs[0].q_len == 150);
    CHECK(l.rag_q == std::vector<int64_t>{100 * 256, 0, 370 * 256, 250 * 256, 290 * 256, 330 * 256, 470 * 256});
    CHECK(l.seq_len_q == std::vector<int32_t>{150, 100, 100, 40, 40, 40});
    CHECK(l.executed_pairs == c.executed_pairs);
    e2.seq_order = SeqOrder::short_first;
    CHECK(plan_ok(p, e2).seq_len_q == std::vector<int32_t>{40, 40, 40, 100, 100, 150});
  }
  SUBCASE("only padding left: no graph, every row is fixed up") {
    Problem q = with_padding(make_problem(2, 2, 2, 64, 64, 64, DType::fp16), {0, 0}, {64, 0});
    CasePlan e = plan_ok(q, env);
    CHECK_FALSE(e.has_graph);
    CHECK(e.dead_q.unit.size() == 2 * 64);
    CHECK(e.dead_k.unit.size() == 2 * 64);
    CHECK(e.lse_src.size() == 2 * 64);
  }
  SUBCASE("non-contiguous document ids are refused") {
    Problem q = make_problem(1, 2, 2, 8, 8, 64, DType::bf16);
    DocumentTerm d;
    d.doc_ids = {{0, 0, 1, 1, 0, 0, -1, -1}};
    q.mask.push_back(d);
    CHECK(plan_reason(q, env).find("not contiguous") != std::string::npos);
  }
}

TEST_CASE("cudnn plan: backward graph forms (token-major full-head dK/dV, dQ without the accumulator)") {
  Env env = fake_env(91900);
  CHECK(env.fullhead_tokens);
  CHECK(env.dq_direct == -1);
  // GQA 4:2 documents: ragged, so both forms by default.
  Problem docs = with_causal(with_documents(make_problem(2, 4, 2, 300, 300, 64, DType::bf16), {{100, 0, 150}, {40, 40, 40, 100}}),
                             CausalAlign::bottom_right);
  validate(docs);
  CasePlan c = plan_ok(docs, env);
  CHECK(c.bwd.fullhead_tokens);
  CHECK(c.bwd.dq_direct);
  CHECK_FALSE(c.fwd.fullhead_tokens);  // backward only
  CHECK_FALSE(c.fwd.dq_direct);
  CHECK(dp_workspace_estimate(c.bwd) == 6 * 4 * 192 * 256 * 2);  // n=6, s=150 -> 192 x 256
  CHECK(c.bwd.describe().find("fullhead-thd dq-direct") != std::string::npos);
  // Dense: neither (the full-head tensors stay virtual, dQ goes through dQ_accum).
  Problem dense = with_causal(make_problem(2, 4, 2, 256, 256, 64, DType::bf16), CausalAlign::top_left);
  CasePlan d = plan_ok(dense, env);
  CHECK_FALSE(d.bwd.fullhead_tokens);
  CHECK_FALSE(d.bwd.dq_direct);
  // Forced on for dense; off; over the workspace limit; MHA has no full-head tensors.
  env.dq_direct = 1;
  CHECK(plan_ok(dense, env).bwd.dq_direct);
  env.dq_direct = 0;
  CHECK_FALSE(plan_ok(docs, env).bwd.dq_direct);
  env.dq_direct = -1;
  env.dp_workspace_limit = 6 * 4 * 192 * 256 * 2 - 1;
  CHECK_FALSE(plan_ok(docs, env).bwd.dq_direct);
  env.dp_workspace_limit = 6 * 4 * 192 * 256 * 2;
  CHECK(plan_ok(docs, env).bwd.dq_direct);
  env.fullhead_tokens = false;
  CHECK_FALSE(plan_ok(docs, env).bwd.fullhead_tokens);
  Problem mha = with_causal(with_documents(make_problem(1, 2, 2, 128, 128, 64, DType::bf16), {{64, 64}}),
                            CausalAlign::bottom_right);
  CHECK_FALSE(plan_ok(mha, fake_env(91900)).bwd.fullhead_tokens);
  // Every form is its own plan-cache entry.
  CasePlan a = plan_ok(docs, fake_env(91900));
  GraphSpec b = a.bwd;
  b.dq_direct = false;
  CHECK(a.bwd.key() != b.key());
  b = a.bwd;
  b.fullhead_tokens = false;
  CHECK(a.bwd.key() != b.key());
}

TEST_CASE("cudnn plan: ragged sequences are split into length classes, one graph each") {
  Env env = fake_env(91900);
  CHECK(env.split_by_length);  // on unless ATTNBENCH_CUDNN_SPLIT=0
  CHECK(env.split_streams);
  CHECK(env.split_long_first);
  env.split_long_first = false;  // class 0 first below
  // Documents 100, 150 | 40, 40, 40, 100 (row 0 ends in 50 padding tokens): lengths
  // <= 128 form class 0 (5 sequences, 1 query tile each), 150 forms class 1 (2
  // tiles). One graph would launch 6 x 2 tiles per head, the split 5 + 2.
  Problem p = with_causal(with_documents(make_problem(2, 4, 2, 300, 300, 64, DType::bf16), {{100, 0, 150}, {40, 40, 40, 100}}),
                          CausalAlign::bottom_right);
  validate(p);
  env.split_forward = true;  // the forward runs the classes too
  CasePlan c = plan_ok(p, env);
  REQUIRE(c.parts.size() == 2);
  const GraphPart& a = c.parts[0];
  const GraphPart& b = c.parts[1];
  CHECK(a.run_fwd);
  CHECK(a.run_bwd);
  CHECK(a.fwd.n == 5);
  CHECK(a.fwd.sq == 100);
  CHECK(a.fwd.sk == 100);
  CHECK(a.bwd.backward);
  CHECK(a.bwd.n == 5);
  CHECK(a.fwd.q_stride[0] == 100 * 4 * 64);  // the n stride follows the part's s_max
  CHECK(a.seq_len_q == std::vector<int32_t>{100, 40, 40, 40, 100});
  // Offsets point into the shared token buffers: rows 0, 250, 290, 330, 370 (row 0
  // stores its 250 document tokens, no padding).
  CHECK(a.rag_q == std::vector<int64_t>{0, 250 * 256, 290 * 256, 330 * 256, 370 * 256, 470 * 256});
  CHECK(a.rag_k == std::vector<int64_t>{0, 250 * 128, 290 * 128, 330 * 128, 370 * 128, 470 * 128});
  CHECK(a.rag_stats == std::vector<int64_t>{0, 250 * 4, 290 * 4, 330 * 4, 370 * 4, 470 * 4});
  CHECK(b.fwd.n == 1);
  CHECK(b.fwd.sq == 150);
  CHECK(b.seq_len_kv == std::vector<int32_t>{150});
  CHECK(b.rag_o == std::vector<int64_t>{100 * 256, 250 * 256});
  CHECK(a.tiles + b.tiles == (5 + 2) * 4);
  // The one-graph description of the case is unchanged.
  CHECK(c.fwd.n == 6);
  CHECK(c.fwd.sq == 150);
  bool noted = false;
  for (const auto& n : c.notes) noted = noted || n.find("2 length classes") != std::string::npos;
  CHECK(noted);

  SUBCASE("default: the forward stays one graph, the backward runs the classes") {
    env.split_forward = false;
    CasePlan f = plan_ok(p, env);
    REQUIRE(f.parts.size() == 3);
    CHECK(f.parts[0].run_fwd);
    CHECK_FALSE(f.parts[0].run_bwd);
    CHECK(f.parts[0].fwd.key() == f.fwd.key());
    CHECK(f.parts[0].rag_q == f.rag_q);
    for (int i : {1, 2}) {
      CHECK_FALSE(f.parts[static_cast<size_t>(i)].run_fwd);
      CHECK(f.parts[static_cast<size_t>(i)].run_bwd);
    }
    CHECK(f.parts[1].bwd.n == 5);
    CHECK(f.parts[2].bwd.n == 1);
    SUBCASE("long-first puts the class of the longest sequences first") {
      env.split_long_first = true;
      CasePlan l = plan_ok(p, env);
      REQUIRE(l.parts.size() == 3);
      CHECK(l.parts[1].bwd.n == 1);
      CHECK(l.parts[1].bwd.sq == 150);
      CHECK(l.parts[2].bwd.n == 5);
    }
  }
  SUBCASE("class bounds from the environment") {
    // Bound 40: the three 40-token documents, then everything longer (100, 150, 100).
    env.split_bounds = parse_split_bounds("40");
    CasePlan f = plan_ok(p, env);
    REQUIRE(f.parts.size() == 2);
    CHECK(f.parts[0].fwd.n == 3);
    CHECK(f.parts[0].fwd.sq == 40);
    CHECK(f.parts[1].fwd.n == 3);
    CHECK(f.parts[1].fwd.sq == 150);
    CHECK(parse_split_bounds("128,256,1024") == std::vector<int64_t>{128, 256, 1024});
    CHECK_THROWS_WITH_AS(parse_split_bounds("128,64"), doctest::Contains("must increase"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_split_bounds("0"), doctest::Contains("positive"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_split_bounds("12x"), doctest::Contains("ATTNBENCH_CUDNN_SPLIT_BOUNDS=\"12x\""),
                         std::invalid_argument);
    CHECK_THROWS_AS(parse_split_bounds(""), std::invalid_argument);
  }
  SUBCASE("turned off: one part equal to the whole") {
    env.split_by_length = false;
    CasePlan one = plan_ok(p, env);
    REQUIRE(one.parts.size() == 1);
    CHECK(one.parts[0].fwd.key() == one.fwd.key());
    CHECK(one.parts[0].bwd.key() == one.bwd.key());
    CHECK(one.parts[0].rag_q == one.rag_q);
    CHECK(one.parts[0].seq_len_q == one.seq_len_q);
  }
  SUBCASE("one length class: no split") {
    Problem q = with_documents(make_problem(1, 2, 2, 256, 256, 64, DType::bf16), {{100, 28, 128}});
    validate(q);
    CHECK(plan_ok(q, env).parts.size() == 1);
  }
  SUBCASE("a split that saves too few tiles is not taken") {
    // 400 | 1000 x 3: classes 2 and 3; one graph 4 x 8 tiles, split 4 + 3 x 8 = 28 > 0.75 x 32.
    Problem q = with_documents(make_problem(1, 2, 2, 3400, 3400, 64, DType::bf16), {{400, 1000, 1000, 1000}});
    validate(q);
    CHECK(plan_ok(q, env).parts.size() == 1);
  }
  SUBCASE("dense cases have one part") {
    CasePlan d = plan_ok(make_problem(2, 2, 2, 300, 300, 64, DType::bf16), env);
    REQUIRE(d.parts.size() == 1);
    CHECK(d.parts[0].fwd.key() == d.fwd.key());
  }
}

TEST_CASE("cudnn plan: version gates (fake Env)") {
  const Problem plain = make_problem(1, 2, 2, 300, 300, 64, DType::bf16);
  CHECK(plan_reason(plain, fake_env(89000)).find("9.0") != std::string::npos);
  CHECK(plan_reason(plain, fake_env(91000)).find("9.10.0") != std::string::npos);
  CHECK(plan_reason(plain, fake_env(91001)).find("9.10.0") != std::string::npos);
  CHECK(plan_reason(plain, fake_env(91002)).empty());
  // 9.14.0: non-causal sliding window with s_kv > 1024.
  const Problem win = with_window(make_problem(1, 2, 2, 2048, 2048, 64, DType::bf16), 100, -1);
  CHECK(plan_reason(win, fake_env(91400)).find("9.14.0") != std::string::npos);
  CHECK(plan_reason(win, fake_env(91401)).empty());
  // Ragged needs 9.6.
  const Problem thd = make_problem(1, 2, 2, 300, 300, 64, DType::bf16, Layout::thd);
  CHECK(plan_reason(thd, fake_env(90500)).find("9.6.0") != std::string::npos);
  CHECK(plan_reason(thd, fake_env(90600)).empty());
  // <= 9.15.0: backward gets sequence lengths when s_kv % 128 != 0.
  CasePlan old = plan_ok(plain, fake_env(91500));
  CHECK_FALSE(old.fwd.padded);
  CHECK(old.bwd.padded);
  CasePlan now = plan_ok(plain, fake_env(91900));
  CHECK_FALSE(now.bwd.padded);
  // < 9.10: the mask value is the lowest float instead of -inf.
  CHECK(plan_ok(plain, fake_env(90900)).fwd.neg_inf_lowest);
  CHECK_FALSE(now.fwd.neg_inf_lowest);
  // Head dims per architecture.
  const Problem d256 = make_problem(1, 2, 2, 128, 128, 256, DType::bf16);
  CHECK(plan_reason(d256, fake_env(91900, 90)).empty());
  CHECK_FALSE(plan_reason(d256, fake_env(91900, 80)).empty());
}

#else

TEST_CASE("cudnn plan tests not built") {
  MESSAGE("SKIPPED: the cudnn backend is not built (no CUDA toolkit or cuDNN at configure time)");
}

#endif  // ATTNBENCH_HAVE_CUDNN
