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

#include <cstdio>
#include <sstream>
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
  CHECK(env.split_by_length);  // on unless the option split=false
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
    CHECK(parse_split_bounds("128/256") == std::vector<int64_t>{128, 256});  // the option form
    CHECK_THROWS_WITH_AS(parse_split_bounds("128,64"), doctest::Contains("must increase"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_split_bounds("0"), doctest::Contains("positive"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(parse_split_bounds("12x"), doctest::Contains("split_bounds=\"12x\""),
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

namespace {

/// FNV-1a (64-bit) of `text`, as 16 hex digits.
std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

template <typename T>
void put(std::ostringstream& o, const char* name, const std::vector<T>& v) {
  o << name << '[' << v.size() << "]:";
  for (const auto& x : v) o << x << ',';
  o << ';';
}

void put(std::ostringstream& o, const char* name, const RowList& r) {
  o << name << " heads=" << r.heads << " stride=" << r.head_stride << ' ';
  put(o, "unit", r.unit);
}

/// Every field of `c` as text (GraphSpec::key() covers every field of a graph).
std::string serialize(const CasePlan& c) {
  std::ostringstream o;
  o << static_cast<int>(c.storage) << c.has_graph << '|' << c.fwd.key() << '|' << c.bwd.key() << '|';
  for (const auto& s : c.seqs)
    o << s.b << ',' << s.q_pos << ',' << s.k_pos << ',' << s.q_len << ',' << s.k_len << ',' << s.q_row << ','
      << s.k_row << ';';
  put(o, "slq", c.seq_len_q);
  put(o, "slk", c.seq_len_kv);
  for (const auto* r : {&c.rag_q, &c.rag_k, &c.rag_v, &c.rag_o, &c.rag_stats}) put(o, "rag", *r);
  for (const auto& part : c.parts) {
    o << "part " << part.fwd.key() << '|' << part.bwd.key() << '|' << part.run_fwd << part.run_bwd << " tiles=" << part.tiles;
    put(o, "slq", part.seq_len_q);
    put(o, "slk", part.seq_len_kv);
    for (const auto* r : {&part.rag_q, &part.rag_k, &part.rag_v, &part.rag_o, &part.rag_stats}) put(o, "rag", *r);
  }
  put(o, "qrow", c.q_row_of);
  put(o, "krow", c.k_row_of);
  o << c.q_rows << ',' << c.k_rows << ',' << c.stats_elems << ';';
  put(o, "dq", c.dead_q);
  put(o, "dk", c.dead_k);
  put(o, "sd", c.stats_dead);
  put(o, "lse", c.lse_src);
  o << c.lse_head_stride << ';';
  put(o, "alibi", c.alibi_slopes);
  o << c.executed_pairs << ';';
  put(o, "notes", c.notes);
  return o.str();
}

/// Readable digest of a plan (or "refused: <reason>") plus the hash of every
/// field, so that a table row pins plan_case's whole result.
std::string fingerprint(const Problem& p, const Env& env) {
  auto r = plan_case(p, env);
  if (auto* why = std::get_if<std::string>(&r)) return "refused: " + *why;
  const CasePlan& c = std::get<CasePlan>(r);
  std::ostringstream o;
  o << c.fwd.describe() << " | " << c.bwd.describe() << " | parts=" << c.parts.size() << " seqs=" << c.seqs.size()
    << " dead_q=" << c.dead_q.unit.size() << " dead_k=" << c.dead_k.unit.size()
    << " stats_dead=" << c.stats_dead.unit.size() << " lse_src=" << c.lse_src.size()
    << " rows=" << c.q_rows << "/" << c.k_rows << " stats=" << c.stats_elems << " pairs=" << c.executed_pairs
    << " notes=" << c.notes.size() << " #" << fnv1a_hex(serialize(c));
  return o.str();
}

Problem with_mod(Problem p, ScoreMod::Kind kind, double cap = 0.0) {
  p.score_mod.kind = kind;
  p.score_mod.cap = cap;
  return p;
}

Problem with_dims(Problem p, int64_t dqk, int64_t dv) {
  p.head_dim = dqk;
  p.head_dim_v = dv;
  return p;
}

struct PlanRow {
  const char* name;
  Problem problem;
  Env env;
  const char* expected;
};

}  // namespace

// Characterization of plan_case over a table of representative problems, one per
// branch of its steps (library gates, score mods, mask terms, storage and
// sequences, band, score-mod surface, graph gates, graph specs, parts, fix-ups,
// estimates). Each row pins the readable digest and a hash of every field of the
// plan, or the full refusal reason. The expected values were produced by
// plan_case before it was split into steps (issue 18); after an intended change,
// the failing CHECK prints the new fingerprint to review and paste.
TEST_CASE("cudnn plan: characterization table (every field of the plan or the refusal reason)") {
  const Env e = fake_env(91900);
  auto env_with = [&](auto&& edit) {
    Env x = e;
    edit(x);
    return x;
  };
  const Problem base = make_problem(2, 4, 2, 300, 300, 64, DType::bf16);
  const Problem docs = with_documents(make_problem(2, 4, 2, 300, 300, 64, DType::bf16), {{100, 0, 150}, {40, 40, 40, 100}});
  Problem noncontig = make_problem(1, 2, 2, 8, 8, 64, DType::bf16);
  {
    DocumentTerm d;
    d.doc_ids = {{0, 0, 1, 1, 0, 0, -1, -1}};
    noncontig.mask.push_back(d);
  }
  Problem prefix = base;
  prefix.mask.push_back(PrefixLmTerm{100});
  Problem sparse = base;
  sparse.mask.push_back(BlockSparseTerm{0.5, 1});
  const std::vector<PlanRow> rows = {
      // library gates
      {"cuDNN 8.9", base, fake_env(89000),
       "refused: requires cuDNN >= 9.0 (the runtime library reports 8.90.0)"},
      {"cuDNN 9.10.1", base, fake_env(91001),
       "refused: cuDNN 9.10.0 and 9.10.1 have known SDPA fp16/bf16 forward and backward bugs"
       " (cudnn-frontend refuses them); use 9.10.2 or newer"},
      {"sm 75", base, fake_env(91900, 75),
       "refused: cuDNN SDPA fp16/bf16 needs compute capability >= 8.0"},
      {"fp32", make_problem(1, 2, 2, 64, 64, 64, DType::fp32), e,
       "refused: fp32 is not supported: cuDNN's fused SDPA engines take fp16 or bf16 Q/K/V/O (float32"
       " only for accumulation and softmax statistics)"},
      {"head dim 20", make_problem(1, 2, 2, 64, 64, 20, DType::bf16), e,
       "refused: head dims must be multiples of 8 for cuDNN SDPA (16-byte aligned rows); got Dqk=20,"
       " Dv=20"},
      {"Hopper head dim 512", make_problem(1, 2, 2, 64, 64, 512, DType::bf16), e,
       "refused: cuDNN SDPA on Hopper supports head dims up to 256; got Dqk=512, Dv=512"},
      {"9.11 Hopper 160/96", with_dims(base, 160, 96), fake_env(91100),
       "refused: cuDNN 9.11-9.12 backward on Hopper has a known bug for 128 < Dqk <= 192 with 64 < Dv <"
       " 128 (fixed in 9.13)"},
      {"Blackwell 256", make_problem(1, 2, 2, 64, 64, 256, DType::bf16), fake_env(91900, 100),
       "refused: cuDNN SDPA backward on Blackwell supports head dims up to 128 (or Dqk=192 with Dv=128);"
       " got Dqk=256, Dv=256"},
      {"Ampere 192", make_problem(1, 2, 2, 64, 64, 192, DType::bf16), fake_env(91900, 80),
       "refused: cuDNN SDPA backward on compute capability 80 supports head dims up to 128; got Dqk=192,"
       " Dv=192"},
      // score mods and mask terms refused up front
      {"rel_bias", with_mod(base, ScoreMod::Kind::rel_bias), e,
       "refused: rel_bias is not expressible: cuDNN's SDPA bias is a dense [B|1, H, Sq, Sk] tensor (with"
       " a dense dBias); the [Hq, 2m+1] table would have to be materialised to Sq x Sk"},
      {"offset_bias", with_mod(base, ScoreMod::Kind::offset_bias), e,
       "refused: offset_bias is not expressible: cuDNN's SDPA bias is a dense [B|1, H, Sq, Sk] tensor"
       " (with a dense dBias); the gathered bias[offset[j]] and its scatter-add gradient are not SDPA"
       " graph operations"},
      {"prefix_lm", prefix, e,
       "refused: prefix_lm (j < prefix_len or j <= i) is not a diagonal band: cuDNN SDPA masks are"
       " sequence lengths plus one diagonal band"},
      {"block_sparse", sparse, e,
       "refused: block_sparse: cuDNN's tile block masks (9.14+) exist only for the unified forward SDPA"
       " operation (no backward, 128 x 128 tiles only); not expressed by this backend"},
      // dense
      {"dense GQA bshd", base, e,
       "fwd bf16 n=2 hq=4 hkv=2 s=300x300 d=64/64 bshd | bwd bf16 n=2 hq=4 hkv=2 s=300x300 d=64/64 bshd"
       " | parts=1 seqs=2 dead_q=0 dead_k=0 stats_dead=0 lse_src=0 rows=0/0 stats=2400 pairs=720000"
       " notes=0 #7952c6d74bd112dd"},
      {"dense bhsd causal br Sq > Sk", with_causal(make_problem(2, 4, 2, 300, 100, 64, DType::fp16, Layout::bhsd)), e,
       "fwd fp16 n=2 hq=4 hkv=2 s=300x100 d=64/64 bhsd seqlens band(br,R=0) | bwd fp16 n=2 hq=4 hkv=2"
       " s=300x100 d=64/64 bhsd seqlens band(br,R=0) | parts=1 seqs=2 dead_q=400 dead_k=0 stats_dead=400"
       " lse_src=600 rows=0/0 stats=2400 pairs=137600 notes=1 #03f1fbaeac59dcf8"},
      {"dense causal tl Sq < Sk (dead keys)", with_causal(make_problem(1, 2, 1, 100, 300, 64, DType::bf16), CausalAlign::top_left), e,
       "fwd bf16 n=1 hq=2 hkv=1 s=100x300 d=64/64 bshd band(tl,R=0) | bwd bf16 n=1 hq=2 hkv=1 s=100x300"
       " d=64/64 bshd band(tl,R=0) | parts=1 seqs=1 dead_q=0 dead_k=200 stats_dead=0 lse_src=0 rows=0/0"
       " stats=200 pairs=25600 notes=0 #159cef4d7caa1960"},
      {"dense window Sq > Sk (seq lens)", with_window(make_problem(1, 2, 2, 256, 128, 64, DType::bf16), 32, 0), e,
       "fwd bf16 n=1 hq=2 hkv=2 s=256x128 d=64/64 bshd seqlens band(br,R=0,L=33) | bwd bf16 n=1 hq=2"
       " hkv=2 s=256x128 d=64/64 bshd seqlens band(br,R=0,L=33) | parts=1 seqs=1 dead_q=128 dead_k=0"
       " stats_dead=128 lse_src=256 rows=0/0 stats=512 pairs=32768 notes=1 #2177fcb0051f014a"},
      {"dense tl causal + window Sq != Sk", with_window(with_causal(make_problem(1, 2, 2, 200, 300, 64, DType::bf16), CausalAlign::top_left), 32, 0), e,
       "refused: causal top_left combined with bottom-right bounds (a bottom_right causal or a sliding"
       " window) when Sq != Sk needs two diagonal alignments; a cuDNN SDPA graph has one"},
      {"padded causal br, unequal lengths", with_causal(with_padding(base, {300, 200}, {250, 300})), e,
       "fwd bf16 n=2 hq=4 hkv=2 s=300x300 d=64/64 bshd seqlens band(br,R=0) | bwd bf16 n=2 hq=4 hkv=2"
       " s=300x300 d=64/64 bshd seqlens band(br,R=0) | parts=1 seqs=2 dead_q=150 dead_k=50"
       " stats_dead=150 lse_src=600 rows=0/0 stats=2400 pairs=455008 notes=0 #c489730d64819df4"},
      {"padded window, zero offset", with_window(with_padding(base, {300, 120}, {300, 120}), 16, 0), e,
       "fwd bf16 n=2 hq=4 hkv=2 s=300x300 d=64/64 bshd seqlens band(tl,R=0,L=17) | bwd bf16 n=2 hq=4"
       " hkv=2 s=300x300 d=64/64 bshd seqlens band(tl,R=0,L=17) | parts=1 seqs=2 dead_q=180 dead_k=180"
       " stats_dead=180 lse_src=600 rows=0/0 stats=2400 pairs=284480 notes=0 #2550dafe9923a9c1"},
      {"padded row of zero length", with_causal(with_padding(base, {300, 0}, {300, 0})), e,
       "fwd bf16 n=1 hq=4 hkv=2 s=300x300 d=64/64 thd-ragged seqlens band(tl,R=0) | bwd bf16 n=1 hq=4"
       " hkv=2 s=300x300 d=64/64 thd-ragged seqlens fullhead-thd dq-direct band(tl,R=0) | parts=1 seqs=1"
       " dead_q=300 dead_k=300 stats_dead=300 lse_src=600 rows=728/728 stats=2912 pairs=249408 notes=1"
       " #efd26755f8202456"},
      {"only padding", with_padding(make_problem(2, 2, 2, 64, 64, 64, DType::fp16), {0, 0}, {64, 0}), e,
       "fwd fp16 n=0 hq=2 hkv=2 s=0x0 d=64/64 thd-ragged seqlens | bwd fp16 n=0 hq=2 hkv=2 s=0x0 d=64/64"
       " thd-ragged seqlens dq-direct | parts=0 seqs=0 dead_q=128 dead_k=128 stats_dead=128 lse_src=128"
       " rows=256/256 stats=512 pairs=0 notes=1 #36ffd239cb512872"},
      // ragged
      {"THD GQA causal padded", with_causal(with_padding(make_problem(3, 4, 2, 256, 256, 64, DType::bf16, Layout::thd), {256, 100, 30}, {256, 100, 30})), e,
       "fwd bf16 n=3 hq=4 hkv=2 s=256x256 d=64/64 thd-ragged seqlens band(tl,R=0) | bwd bf16 n=3 hq=4"
       " hkv=2 s=256x256 d=64/64 thd-ragged seqlens fullhead-thd dq-direct band(tl,R=0) | parts=3 seqs=3"
       " dead_q=0 dead_k=0 stats_dead=0 lse_src=768 rows=514/514 stats=2056 pairs=240208 notes=2"
       " #0d50c59ad07eba26"},
      {"THD head dim 72", make_problem(1, 2, 2, 256, 256, 72, DType::bf16, Layout::thd), e,
       "refused: THD / document layouts need head dims that are multiples of 16: cuDNN's ragged backward"
       " workspaces have a known functional issue otherwise (cudnn-frontend disables them)"},
      {"THD on sm 80 before 9.18.1", make_problem(1, 2, 2, 256, 256, 64, DType::bf16, Layout::thd), fake_env(91800, 80),
       "refused: ragged (THD) SDPA needs compute capability >= 9.0 before cuDNN 9.18.1"},
      {"THD on sm 80 at 9.18.1", make_problem(1, 2, 2, 256, 256, 64, DType::bf16, Layout::thd), fake_env(91801, 80),
       "fwd bf16 n=1 hq=2 hkv=2 s=256x256 d=64/64 thd-ragged seqlens | bwd bf16 n=1 hq=2 hkv=2 s=256x256"
       " d=64/64 thd-ragged seqlens dq-direct | parts=1 seqs=1 dead_q=0 dead_k=0 stats_dead=0"
       " lse_src=256 rows=384/384 stats=768 pairs=131072 notes=0 #3cec7e92e843aec6"},
      {"THD 9.5", make_problem(1, 2, 2, 256, 256, 64, DType::bf16, Layout::thd), fake_env(90500),
       "refused: THD / document layouts need cuDNN >= 9.6.0 (ragged GQA and ragged workspaces)"},
      {"documents causal (split, forward whole)", with_causal(docs), e,
       "fwd bf16 n=6 hq=4 hkv=2 s=150x150 d=64/64 thd-ragged seqlens band(tl,R=0) | bwd bf16 n=6 hq=4"
       " hkv=2 s=150x150 d=64/64 thd-ragged seqlens fullhead-thd dq-direct band(tl,R=0) | parts=3 seqs=6"
       " dead_q=0 dead_k=0 stats_dead=0 lse_src=600 rows=598/598 stats=2392 pairs=177936 notes=2"
       " #ef8a0056d018622d"},
      {"documents causal, split forward, short first", with_causal(docs), env_with([](Env& x) { x.split_forward = true; x.split_long_first = false; }),
       "fwd bf16 n=6 hq=4 hkv=2 s=150x150 d=64/64 thd-ragged seqlens band(tl,R=0) | bwd bf16 n=6 hq=4"
       " hkv=2 s=150x150 d=64/64 thd-ragged seqlens fullhead-thd dq-direct band(tl,R=0) | parts=2 seqs=6"
       " dead_q=0 dead_k=0 stats_dead=0 lse_src=600 rows=598/598 stats=2392 pairs=177936 notes=1"
       " #b3679e4b52f69f52"},
      {"documents window, long-first order, no split", with_window(docs, 16, 0), env_with([](Env& x) { x.split_by_length = false; x.seq_order = SeqOrder::long_first; }),
       "fwd bf16 n=6 hq=4 hkv=2 s=150x150 d=64/64 thd-ragged seqlens band(tl,R=0,L=17) | bwd bf16 n=6"
       " hq=4 hkv=2 s=150x150 d=64/64 thd-ragged seqlens fullhead-thd dq-direct band(tl,R=0,L=17) |"
       " parts=1 seqs=6 dead_q=0 dead_k=0 stats_dead=0 lse_src=600 rows=598/598 stats=2392 pairs=177936"
       " notes=0 #86e00f2a5f31c237"},
      {"documents, dq_direct off, fullhead padded", docs, env_with([](Env& x) { x.dq_direct = 0; x.fullhead_tokens = false; }),
       "fwd bf16 n=6 hq=4 hkv=2 s=150x150 d=64/64 thd-ragged seqlens | bwd bf16 n=6 hq=4 hkv=2 s=150x150"
       " d=64/64 thd-ragged seqlens | parts=3 seqs=6 dead_q=0 dead_k=0 stats_dead=0 lse_src=600"
       " rows=598/598 stats=2392 pairs=189200 notes=2 #80b876ffbdde4c2c"},
      {"documents causal with unequal padding", with_causal(with_padding(docs, {250, 220}, {240, 220})), e,
       "refused: document mask with causal / sliding window and padding lengths seq_lens_q !="
       " seq_lens_k: the band is aligned to the row's valid lengths, which per-document cuDNN sequences"
       " cannot express"},
      {"documents not contiguous", noncontig, e,
       "refused: document ids of batch row 0 are not contiguous (id 0 appears in two runs): a cuDNN"
       " sequence is one contiguous token range"},
      // graph gates
      {"1 x 1", make_problem(1, 2, 2, 1, 1, 64, DType::bf16), e,
       "refused: s_q = s_kv = 1: cuDNN SDPA backward rejects it (cudnn-frontend known issue)"},
      {"left-only window 9.9", with_window(base, 100, -1), fake_env(90900),
       "refused: a sliding window without a right bound needs cuDNN >= 9.10.2"},
      {"left-only window 9.14.0 s_kv 2048", with_window(make_problem(1, 2, 2, 2048, 2048, 64, DType::bf16), 100, -1), fake_env(91400),
       "refused: cuDNN 9.14.0 known bug: sliding window without a causal bound and s_kv > 1024 (fixed in"
       " 9.14.1)"},
      {"br window s_q == s_kv on Hopper 9.9", with_window(with_padding(make_problem(2, 2, 2, 256, 256, 64, DType::bf16), {256, 200}, {256, 256}), 32, 0), fake_env(90900),
       "refused: cuDNN <= 9.9 on Hopper: bottom-right sliding window with s_q == s_kv is not supported"},
      {"br causal 9.5 s not multiple of 64", with_causal(make_problem(1, 2, 2, 100, 300, 64, DType::bf16)), fake_env(90500),
       "refused: bottom-right bands need s_q and s_kv multiples of 64 before cuDNN 9.6.0"},
      {"br window 9.5 s_q != s_kv", with_window(make_problem(1, 2, 2, 128, 256, 64, DType::bf16), 32, 0), fake_env(90500),
       "refused: bottom-right sliding windows need s_q == s_kv before cuDNN 9.6.0"},
      {"decode causal 9.9", with_causal(make_problem(1, 2, 2, 1, 256, 64, DType::bf16)), fake_env(90900),
       "refused: decode (s_q = 1) with a causal bound needs cuDNN >= 9.10"},
      {"decode causal 9.19", with_causal(make_problem(1, 2, 2, 1, 256, 64, DType::bf16)), e,
       "fwd bf16 n=1 hq=2 hkv=2 s=1x256 d=64/64 bshd band(br,R=0) | bwd bf16 n=1 hq=2 hkv=2 s=1x256"
       " d=64/64 bshd band(br,R=0) | parts=1 seqs=1 dead_q=0 dead_k=0 stats_dead=0 lse_src=0 rows=0/0"
       " stats=2 pairs=512 notes=0 #42d50ed2a6b9947c"},
      // score-mod surface
      {"softcap dense", with_mod(base, ScoreMod::Kind::softcap, 30.0), e,
       "fwd bf16 n=2 hq=4 hkv=2 s=300x300 d=64/64 bshd softcap(30) | bwd bf16 n=2 hq=4 hkv=2 s=300x300"
       " d=64/64 bshd softcap(30) | parts=1 seqs=2 dead_q=0 dead_k=0 stats_dead=0 lse_src=0 rows=0/0"
       " stats=2400 pairs=720000 notes=0 #f16205d8a08c96c1"},
      {"softcap causal", with_mod(with_causal(base), ScoreMod::Kind::softcap, 30.0), e,
       "refused: softcap is a cuDNN score modifier, and cuDNN (cudnn-frontend's support surface)"
       " disables causal / window bands, padding, THD and document layouts when a score modifier is"
       " present"},
      {"alibi causal tl", with_mod(with_causal(base, CausalAlign::top_left), ScoreMod::Kind::alibi), e,
       "fwd bf16 n=2 hq=4 hkv=2 s=300x300 d=64/64 bshd band(tl,R=0) alibi | bwd bf16 n=2 hq=4 hkv=2"
       " s=300x300 d=64/64 bshd band(tl,R=0) alibi | parts=1 seqs=2 dead_q=0 dead_k=0 stats_dead=0"
       " lse_src=0 rows=0/0 stats=2400 pairs=498816 notes=0 #31bedc270ba7c95a"},
      {"alibi no mask", with_mod(base, ScoreMod::Kind::alibi), e,
       "refused: alibi needs exactly a causal mask aligned top-left (or Sq == Sk): cuDNN's ALiBi adds"
       " slope * (j - i), which equals docs/semantics.md's -slope * |i - j| only where j <= i, and cuDNN"
       " requires right bound 0 without bottom-right alignment"},
      {"alibi padded", with_mod(with_causal(with_padding(base, {300, 200}, {300, 200}), CausalAlign::top_left), ScoreMod::Kind::alibi), e,
       "refused: alibi with padding, THD or document masks is not expressed (cuDNN applies ALiBi to"
       " dense graphs with a top-left causal mask only)"},
      // graph-spec forms
      {"9.15 bwd seq lens", base, fake_env(91500),
       "fwd bf16 n=2 hq=4 hkv=2 s=300x300 d=64/64 bshd | bwd bf16 n=2 hq=4 hkv=2 s=300x300 d=64/64 bshd"
       " seqlens | parts=1 seqs=2 dead_q=0 dead_k=0 stats_dead=0 lse_src=0 rows=0/0 stats=2400"
       " pairs=720000 notes=1 #f589f9564c30b3c1"},
      {"9.9 lowest mask value", with_causal(base), fake_env(90900),
       "fwd bf16 n=2 hq=4 hkv=2 s=300x300 d=64/64 bshd band(tl,R=0) | bwd bf16 n=2 hq=4 hkv=2 s=300x300"
       " d=64/64 bshd seqlens band(tl,R=0) | parts=1 seqs=2 dead_q=0 dead_k=0 stats_dead=0 lse_src=0"
       " rows=0/0 stats=2400 pairs=498816 notes=1 #23c5480743d1c4ea"},
      {"dense dq_direct forced", with_causal(base), env_with([](Env& x) { x.dq_direct = 1; }),
       "fwd bf16 n=2 hq=4 hkv=2 s=300x300 d=64/64 bshd band(tl,R=0) | bwd bf16 n=2 hq=4 hkv=2 s=300x300"
       " d=64/64 bshd dq-direct band(tl,R=0) | parts=1 seqs=2 dead_q=0 dead_k=0 stats_dead=0 lse_src=0"
       " rows=0/0 stats=2400 pairs=498816 notes=0 #240d2cc83ed9cb18"},
      {"documents over the dP limit", with_causal(docs), env_with([](Env& x) { x.dp_workspace_limit = 1000; }),
       "fwd bf16 n=6 hq=4 hkv=2 s=150x150 d=64/64 thd-ragged seqlens band(tl,R=0) | bwd bf16 n=6 hq=4"
       " hkv=2 s=150x150 d=64/64 thd-ragged seqlens fullhead-thd band(tl,R=0) | parts=3 seqs=6 dead_q=0"
       " dead_k=0 stats_dead=0 lse_src=600 rows=598/598 stats=2392 pairs=177936 notes=2"
       " #db854ab327471b85"},
  };
  for (const auto& row : rows) {
    const std::string name = row.name;
    CAPTURE(name);
    CHECK(fingerprint(row.problem, row.env) == row.expected);
  }
}

#else

TEST_CASE("cudnn plan tests not built") {
  MESSAGE("SKIPPED: the cudnn backend is not built (no CUDA toolkit or cuDNN at configure time)");
}

#endif  // ATTNBENCH_HAVE_CUDNN
