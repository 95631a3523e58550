// The float64 reference (gold), the lp emulation and `attnbench reference`.
//
// gold is checked four independent ways: central finite differences of
// loss = sum(O * dO) for every mask kind and score mod (dQ, dK, dV, dBias); an
// independent float64 implementation written plainly below from docs/semantics.md
// sections 2-4 (its own mask evaluation; only the seeded block_sparse pattern comes
// from block_sparse_keep, the hash that docs/semantics.md section 3 spells out);
// exact identities (GQA = head repetition, Q = 0 gives uniform attention,
// invariance to the order of packed documents); and the fully-masked-row rules.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "harness/check/check.hpp"
#include "harness/model/mask_desc.hpp"
#include "harness/model/npy.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"
#include "reference/reference.hpp"

using namespace attnbench;
namespace ref = attnbench::reference;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ------------------------------------------------------------------ problems

Problem base_problem(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, int64_t Dv,
                     uint64_t seed = 11) {
  Problem p;
  p.batch = B, p.heads_q = Hq, p.heads_kv = Hkv, p.seq_q = Sq, p.seq_k = Sk;
  p.head_dim = D, p.head_dim_v = Dv, p.dtype = DType::fp32, p.seed = seed;
  return p;
}

CausalTerm causal(CausalAlign a) { return CausalTerm{a}; }

DocumentTerm documents(const std::vector<std::vector<int32_t>>& ids) {
  DocumentTerm d;
  d.doc_ids = ids;
  return d;
}

ScoreMod mod_of(ScoreMod::Kind k) {
  ScoreMod s;
  s.kind = k;
  if (k == ScoreMod::Kind::softcap) s.cap = 1.5;
  if (k == ScoreMod::Kind::rel_bias) s.max_distance = 4;
  if (k == ScoreMod::Kind::offset_bias) s.size = 7;
  return s;
}

const ScoreMod::Kind kAllMods[] = {ScoreMod::Kind::none, ScoreMod::Kind::softcap, ScoreMod::Kind::alibi,
                                   ScoreMod::Kind::rel_bias, ScoreMod::Kind::offset_bias};

/// Named mask configurations covering every kind, both alignments, Sq != Sk, odd
/// lengths and fully masked rows. Each has its own shape.
struct MaskCase {
  std::string name;
  Problem p;
};

std::vector<MaskCase> mask_cases() {
  std::vector<MaskCase> out;
  auto add = [&](std::string name, Problem p, std::vector<MaskTerm> mask) {
    p.mask = std::move(mask);
    validate(p);
    out.push_back({std::move(name), std::move(p)});
  };
  add("dense", base_problem(2, 4, 2, 37, 37, 8, 5), {});
  add("dense Sq<Sk", base_problem(1, 3, 1, 23, 41, 6, 7), {});
  add("causal top_left Sq<Sk", base_problem(2, 2, 2, 37, 53, 8, 5), {causal(CausalAlign::top_left)});
  add("causal top_left Sq>Sk", base_problem(2, 2, 1, 53, 37, 8, 5), {causal(CausalAlign::top_left)});
  add("causal bottom_right Sq<Sk", base_problem(2, 2, 1, 37, 53, 8, 5), {causal(CausalAlign::bottom_right)});
  add("causal bottom_right Sq>Sk (masked rows)", base_problem(2, 4, 2, 53, 37, 8, 5),
      {causal(CausalAlign::bottom_right)});
  add("window(5,3)", base_problem(1, 2, 1, 70, 70, 8, 8), {SlidingWindowTerm{5, 3}});
  add("window(7,0)+causal br Sq<Sk", base_problem(2, 2, 2, 40, 71, 8, 5),
      {SlidingWindowTerm{7, 0}, causal(CausalAlign::bottom_right)});
  add("window(-1,2) Sq>Sk", base_problem(1, 2, 2, 61, 45, 4, 6), {SlidingWindowTerm{-1, 2}});
  add("window(3,-1) Sq>Sk", base_problem(1, 2, 1, 61, 45, 4, 6), {SlidingWindowTerm{3, -1}});
  add("document (non-contiguous, padding)", base_problem(2, 2, 1, 50, 50, 8, 5),
      {documents({doc_ids_from_lengths({10, 25, 8}, 50),
                  [] {
                    std::vector<int32_t> ids(50);
                    for (int i = 0; i < 50; ++i) ids[static_cast<size_t>(i)] = i % 7 == 6 ? -1 : (i / 3) % 4;
                    return ids;
                  }()})});
  add("document+causal", base_problem(2, 4, 2, 67, 67, 8, 5),
      {documents({doc_ids_from_lengths({30, 1, 20, 16}, 67), doc_ids_from_lengths({7, 50}, 67)}), causal(CausalAlign::bottom_right)});
  add("prefix_lm(10)", base_problem(1, 2, 1, 45, 45, 8, 5), {PrefixLmTerm{10}});
  add("prefix_lm(20)+window(12,-1) Sq<Sk (masked rows)", base_problem(1, 2, 1, 33, 47, 8, 5),
      {PrefixLmTerm{20}, SlidingWindowTerm{12, -1}});
  add("padding+causal br (per-row alignment)", base_problem(2, 2, 1, 33, 41, 8, 5),
      {PaddingTerm{{30, 17}, {25, 41}}, causal(CausalAlign::bottom_right)});
  add("padding+causal tl+window", base_problem(2, 2, 2, 33, 41, 8, 5),
      {PaddingTerm{{33, 9}, {12, 40}}, causal(CausalAlign::top_left), SlidingWindowTerm{6, 6}});
  add("block_sparse(0.5)", base_problem(1, 2, 1, 300, 290, 4, 3), {BlockSparseTerm{0.5, 3}});
  add("block_sparse(0.6)+causal tl", base_problem(1, 2, 2, 270, 300, 4, 3),
      {BlockSparseTerm{0.6, 5}, causal(CausalAlign::top_left)});
  return out;
}

// ------------------------------------------------------------------ plain implementation

/// mask(b, h, i, j) written directly from the docs/semantics.md section 3 text.
bool plain_allowed(const Problem& p, int64_t b, int64_t i, int64_t j) {
  int64_t sq = p.seq_q, sk = p.seq_k;
  for (const auto& t : p.mask)
    if (auto* pad = std::get_if<PaddingTerm>(&t)) {
      sq = pad->seq_lens_q[static_cast<size_t>(b)];
      sk = pad->seq_lens_k[static_cast<size_t>(b)];
      if (!(i < sq && j < sk)) return false;
    }
  for (const auto& t : p.mask) {
    if (auto* c = std::get_if<CausalTerm>(&t)) {
      if (c->align == CausalAlign::top_left && !(j <= i)) return false;
      if (c->align == CausalAlign::bottom_right && !(j <= i + sk - sq)) return false;
    } else if (auto* w = std::get_if<SlidingWindowTerm>(&t)) {
      if (w->left != -1 && !(i + sk - sq - w->left <= j)) return false;
      if (w->right != -1 && !(j <= i + sk - sq + w->right)) return false;
    } else if (auto* d = std::get_if<DocumentTerm>(&t)) {
      const int32_t di = d->doc_ids[static_cast<size_t>(b)][static_cast<size_t>(i)];
      const int32_t dj = d->doc_ids[static_cast<size_t>(b)][static_cast<size_t>(j)];
      if (di == -1 || dj == -1 || di != dj) return false;
    } else if (auto* pl = std::get_if<PrefixLmTerm>(&t)) {
      if (!(j < pl->prefix_len || j <= i)) return false;
    } else if (auto* bs = std::get_if<BlockSparseTerm>(&t)) {
      if (!block_sparse_keep(bs->seed, i / 128, j / 128, bs->density)) return false;
    }
  }
  return true;
}

/// score_mod(s, b, h, i, j) and its derivative in s, from the docs/semantics.md section 4 text.
double plain_mod(const Problem& p, const ProblemData& in, double s, int64_t h, int64_t i, int64_t j,
                 double* dmod) {
  *dmod = 1.0;
  switch (p.score_mod.kind) {
    case ScoreMod::Kind::none: return s;
    case ScoreMod::Kind::softcap: {
      const double t = std::tanh(s / p.score_mod.cap);
      *dmod = 1 - t * t;
      return p.score_mod.cap * t;
    }
    case ScoreMod::Kind::alibi:
      return s - std::pow(2.0, -8.0 * static_cast<double>(h + 1) / static_cast<double>(p.heads_q)) *
                     static_cast<double>(std::abs(i - j));
    case ScoreMod::Kind::rel_bias: {
      const int64_t m = p.score_mod.max_distance;
      return s + in.bias[static_cast<size_t>(h * (2 * m + 1) + std::clamp(i - j, -m, m) + m)];
    }
    case ScoreMod::Kind::offset_bias:
      return s + in.bias[static_cast<size_t>(in.offset[static_cast<size_t>(j)])];
  }
  return s;
}

int64_t plain_bias_index(const Problem& p, const ProblemData& in, int64_t h, int64_t i, int64_t j) {
  const int64_t m = p.score_mod.max_distance;
  if (p.score_mod.kind == ScoreMod::Kind::rel_bias) return h * (2 * m + 1) + std::clamp(i - j, -m, m) + m;
  return in.offset[static_cast<size_t>(j)];
}

/// Straightforward loops over (b, h, i, j): softmax over the allowed scores of a
/// row; backward with D_i = sum_j P_ij dP_ij (the softmax Jacobian form, not the
/// dO . O form gold uses). `dbias_abs` (optional) receives, per bias entry, the sum
/// of the absolute values of its contributions: the scale of its rounding error
/// (every row of dS' sums to zero, so a bucket fed by whole rows cancels to ~0).
AttentionOutputs plain(const Problem& p, const ProblemData& in, std::vector<double>* dbias_abs = nullptr) {
  const int64_t B = p.batch, Hq = p.heads_q, Sq = p.seq_q, Sk = p.seq_k, D = p.head_dim, Dv = p.head_dim_v;
  const int64_t G = p.heads_q / p.heads_kv;
  const double scale = p.softmax_scale();
  AttentionOutputs o;
  o.o = HostTensor({B, Hq, Sq, Dv});
  o.lse = HostTensor({B, Hq, Sq});
  o.dq = HostTensor({B, Hq, Sq, D});
  o.dk = HostTensor({B, p.heads_kv, Sk, D});
  o.dv = HostTensor({B, p.heads_kv, Sk, Dv});
  o.dbias.assign(static_cast<size_t>(p.bias_numel()), 0.0);
  if (dbias_abs) dbias_abs->assign(o.dbias.size(), 0.0);
  std::vector<double> s(static_cast<size_t>(Sk)), x(static_cast<size_t>(Sk)), dm(static_cast<size_t>(Sk)),
      P(static_cast<size_t>(Sk)), dP(static_cast<size_t>(Sk));
  std::vector<char> ok(static_cast<size_t>(Sk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t g = h / G;
      for (int64_t i = 0; i < Sq; ++i) {
        double mx = -kInf;
        for (int64_t j = 0; j < Sk; ++j) {
          ok[j] = plain_allowed(p, b, i, j);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += in.q.at4(b, h, i, d) * in.k.at4(b, g, j, d);
          x[j] = scale * dot;
          s[j] = plain_mod(p, in, x[j], h, i, j, &dm[j]);
          if (ok[j]) mx = std::max(mx, s[j]);
        }
        if (mx == -kInf) {  // fully masked row: O = 0, LSE = -inf, no gradient
          o.lse.data[static_cast<size_t>((b * Hq + h) * Sq + i)] = -kInf;
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < Sk; ++j) sum += ok[j] ? std::exp(s[j] - mx) : 0.0;
        o.lse.data[static_cast<size_t>((b * Hq + h) * Sq + i)] = mx + std::log(sum);
        for (int64_t j = 0; j < Sk; ++j) P[j] = ok[j] ? std::exp(s[j] - mx) / sum : 0.0;
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < Sk; ++j) acc += P[j] * in.v.at4(b, g, j, d);
          o.o.at4(b, h, i, d) = acc;
        }
        double Di = 0;
        for (int64_t j = 0; j < Sk; ++j) {
          dP[j] = 0;
          for (int64_t d = 0; d < Dv; ++d) dP[j] += in.d_o.at4(b, h, i, d) * in.v.at4(b, g, j, d);
          Di += P[j] * dP[j];
        }
        for (int64_t j = 0; j < Sk; ++j) {
          if (!ok[j]) continue;
          const double dsp = P[j] * (dP[j] - Di);
          const double ds = dsp * dm[j];
          if (p.has_learnable_bias()) {
            const size_t bi = static_cast<size_t>(plain_bias_index(p, in, h, i, j));
            o.dbias[bi] += dsp;
            if (dbias_abs) (*dbias_abs)[bi] += std::abs(dsp);
          }
          for (int64_t d = 0; d < D; ++d) {
            o.dq.at4(b, h, i, d) += scale * ds * in.k.at4(b, g, j, d);
            o.dk.at4(b, g, j, d) += scale * ds * in.q.at4(b, h, i, d);
          }
          for (int64_t d = 0; d < Dv; ++d) o.dv.at4(b, g, j, d) += P[j] * in.d_o.at4(b, h, i, d);
        }
      }
    }
  return o;
}

// ------------------------------------------------------------------ comparisons

/// max |a - b| / max |b|; -inf must match -inf exactly (else returns +inf); any NaN
/// returns +inf.
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return kInf;
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return kInf;
      continue;
    }
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return den > 0 ? num / den : num;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && a[i] == b[i]) continue;
    m = std::max(m, std::abs(a[i] - b[i]));
    if (std::isnan(a[i]) != std::isnan(b[i])) m = kInf;
  }
  return m;
}

bool any_nan(const AttentionOutputs& o) {
  for (const auto* t : {&o.o, &o.lse, &o.dq, &o.dk, &o.dv})
    for (double v : t->data)
      if (std::isnan(v)) return true;
  for (double v : o.dbias)
    if (std::isnan(v)) return true;
  return false;
}

/// Relative agreement of every output; dBias relative to `dbias_scale` (the
/// largest absolute contribution sum) when given, else to max |dBias|.
void check_against(const AttentionOutputs& got, const AttentionOutputs& want, double tol,
                   double dbias_scale = 0) {
  CHECK(rel_err(got.o.data, want.o.data) <= tol);
  CHECK(rel_err(got.lse.data, want.lse.data) <= tol);
  CHECK(rel_err(got.dq.data, want.dq.data) <= tol);
  CHECK(rel_err(got.dk.data, want.dk.data) <= tol);
  CHECK(rel_err(got.dv.data, want.dv.data) <= tol);
  REQUIRE(got.dbias.size() == want.dbias.size());
  if (want.dbias.empty()) return;
  if (dbias_scale > 0) CHECK(max_abs_diff(got.dbias, want.dbias) <= tol * dbias_scale);
  else CHECK(rel_err(got.dbias, want.dbias) <= tol);
}

double loss(const Problem& p, const ProblemData& in) {
  const AttentionOutputs o = ref::gold(p, in, false);
  double l = 0;
  for (size_t i = 0; i < o.o.data.size(); ++i) l += o.o.data[i] * in.d_o.data[i];
  return l;
}

/// Central differences of loss = sum(O * dO) for up to `max_each` elements of each
/// of q, k, v (and bias) against gold's analytic gradients.
void finite_difference_check(const Problem& p, int max_each) {
  ProblemData in = make_inputs(p);
  const AttentionOutputs an = ref::gold(p, in, true);
  REQUIRE_FALSE(any_nan(an));
  const double h = 1e-5;
  auto probe = [&](std::vector<double>& param, const std::vector<double>& grad, const char* name) {
    const size_t n = param.size();
    const size_t step = std::max<size_t>(1, n / static_cast<size_t>(max_each));
    double worst = 0, gmax = 0;
    for (double g : grad) gmax = std::max(gmax, std::abs(g));
    for (size_t e = 0; e < n; e += step) {
      const double saved = param[e];
      param[e] = saved + h;
      const double lp = loss(p, in);
      param[e] = saved - h;
      const double lm = loss(p, in);
      param[e] = saved;
      const double fd = (lp - lm) / (2 * h);
      worst = std::max(worst, std::abs(fd - grad[e]));
    }
    INFO(name << ": max |fd - analytic| = " << worst << ", max |grad| = " << gmax);
    CHECK(worst <= 1e-7 * std::max(1.0, gmax));
    return gmax;
  };
  const double gq = probe(in.q.data, an.dq.data, "dQ");
  const double gk = probe(in.k.data, an.dk.data, "dK");
  const double gv = probe(in.v.data, an.dv.data, "dV");
  CHECK(gq > 0);  // the check is not vacuous
  CHECK(gk > 0);
  CHECK(gv > 0);
  if (p.has_learnable_bias()) {
    REQUIRE(an.dbias.size() == in.bias.size());
    CHECK(probe(in.bias, an.dbias, "dBias") > 0);
  }
}

}  // namespace

// ------------------------------------------------------------------ finite differences

TEST_CASE("gold gradients match central finite differences for every mask kind") {
  for (const auto& mc : mask_cases()) {
    Problem p = mc.p;
    // Keep the probes cheap: the plain forward is called twice per probed element.
    SUBCASE(mc.name.c_str()) {
      p.score_mod = mod_of(ScoreMod::Kind::rel_bias);
      p.score_mod.max_distance = 40;  // distinct buckets: no bucket collects whole rows
      finite_difference_check(p, 12);
    }
  }
}

TEST_CASE("gold gradients match central finite differences for every score mod") {
  for (ScoreMod::Kind k : kAllMods) {
    SUBCASE(to_string(k)) {
      Problem p = base_problem(1, 4, 2, 19, 23, 5, 3);
      p.mask = {causal(CausalAlign::bottom_right), SlidingWindowTerm{9, 2}};
      p.score_mod = mod_of(k);
      finite_difference_check(p, 40);
    }
  }
}

// ------------------------------------------------------------------ independent implementation

TEST_CASE("gold equals a plain float64 implementation for every mask and score mod") {
  for (const auto& mc : mask_cases()) {
    for (ScoreMod::Kind k : kAllMods) {
      Problem p = mc.p;
      p.score_mod = mod_of(k);
      CAPTURE(mc.name);
      const std::string mod_name = to_string(k);
      CAPTURE(mod_name);
      const ProblemData in = make_inputs(p);
      std::vector<double> dbias_abs;
      const AttentionOutputs want = plain(p, in, &dbias_abs);
      const double scale = dbias_abs.empty() ? 0.0 : *std::max_element(dbias_abs.begin(), dbias_abs.end());
      if (p.has_learnable_bias()) CHECK(scale > 0);
      check_against(ref::gold(p, in, true), want, 1e-10, scale);
      // Small tiles: many partial, full and tail tiles.
      ref::Options small;
      small.q_block = 8;
      small.kv_block = 16;
      check_against(ref::gold(p, in, true, ref::SliceSet::every(), small), want, 1e-10, scale);
    }
  }
}

TEST_CASE("panels and runs: gold equals the plain implementation across many q-groups, runs and dK/dV groups") {
  // S = 600 at the default 32 x 32 tiles: forward / dQ units of 128 rows (4 q-blocks
  // for MHA, 2 for GQA 2:1, the last one short), runs of 256 keys cut at document
  // gaps, dK / dV groups of 128 keys; lines whose tiles differ make partial unions.
  for (int64_t hkv : {4, 2}) {
    Problem p = base_problem(1, 4, hkv, 600, 600, 16, 8);
    p.mask = {documents({doc_ids_from_lengths({70, 300, 5, 225}, 600)}), causal(CausalAlign::top_left),
              SlidingWindowTerm{290, -1}};
    p.score_mod = mod_of(ScoreMod::Kind::alibi);
    CAPTURE(hkv);
    const ProblemData in = make_inputs(p);
    const AttentionOutputs want = plain(p, in);
    check_against(ref::gold(p, in, true), want, 1e-10);
    ref::Options one;
    one.threads = 1;
    CHECK(bitwise_equal(ref::gold(p, in, true), ref::gold(p, in, true, ref::SliceSet::every(), one)));
  }
}

// ------------------------------------------------------------------ identities

TEST_CASE("GQA equals explicit head repetition with group sums") {
  Problem p = base_problem(2, 6, 2, 45, 52, 8, 6);
  p.mask = {causal(CausalAlign::bottom_right)};
  p.score_mod = mod_of(ScoreMod::Kind::rel_bias);
  const ProblemData in = make_inputs(p);
  Problem r = p;
  r.heads_kv = p.heads_q;
  ProblemData rin = in;
  rin.k = HostTensor({p.batch, r.heads_kv, p.seq_k, p.head_dim});
  rin.v = HostTensor({p.batch, r.heads_kv, p.seq_k, p.head_dim_v});
  const int64_t G = p.group_size();
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < r.heads_kv; ++h)
      for (int64_t j = 0; j < p.seq_k; ++j) {
        for (int64_t d = 0; d < p.head_dim; ++d) rin.k.at4(b, h, j, d) = in.k.at4(b, h / G, j, d);
        for (int64_t d = 0; d < p.head_dim_v; ++d) rin.v.at4(b, h, j, d) = in.v.at4(b, h / G, j, d);
      }
  const AttentionOutputs a = ref::gold(p, in, true), e = ref::gold(r, rin, true);
  CHECK(max_abs_diff(a.o.data, e.o.data) <= 1e-13);
  CHECK(max_abs_diff(a.lse.data, e.lse.data) <= 1e-13);
  CHECK(max_abs_diff(a.dq.data, e.dq.data) <= 1e-13);
  CHECK(max_abs_diff(a.dbias, e.dbias) <= 1e-12);
  HostTensor dk_sum({p.batch, p.heads_kv, p.seq_k, p.head_dim}), dv_sum({p.batch, p.heads_kv, p.seq_k, p.head_dim_v});
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < r.heads_kv; ++h)
      for (int64_t j = 0; j < p.seq_k; ++j) {
        for (int64_t d = 0; d < p.head_dim; ++d) dk_sum.at4(b, h / G, j, d) += e.dk.at4(b, h, j, d);
        for (int64_t d = 0; d < p.head_dim_v; ++d) dv_sum.at4(b, h / G, j, d) += e.dv.at4(b, h, j, d);
      }
  CHECK(max_abs_diff(a.dk.data, dk_sum.data) <= 1e-12);
  CHECK(max_abs_diff(a.dv.data, dv_sum.data) <= 1e-12);
  double norm = 0;
  for (double v : a.dk.data) norm = std::max(norm, std::abs(v));
  CHECK(norm > 0.1);
}

TEST_CASE("Q = 0 gives uniform attention over the allowed keys") {
  Problem p = base_problem(1, 2, 1, 40, 60, 8, 5);
  p.mask = {causal(CausalAlign::top_left), SlidingWindowTerm{-1, 10}, PaddingTerm{{37}, {50}}};
  ProblemData in = make_inputs(p);
  std::fill(in.q.data.begin(), in.q.data.end(), 0.0);
  const AttentionOutputs o = ref::gold(p, in, false);
  int masked_rows = 0;
  for (int64_t h = 0; h < p.heads_q; ++h)
    for (int64_t i = 0; i < p.seq_q; ++i) {
      std::vector<double> mean(static_cast<size_t>(p.head_dim_v), 0.0);
      int64_t n = 0;
      for (int64_t j = 0; j < p.seq_k; ++j)
        if (plain_allowed(p, 0, i, j)) {
          ++n;
          for (int64_t d = 0; d < p.head_dim_v; ++d) mean[static_cast<size_t>(d)] += in.v.at4(0, 0, j, d);
        }
      const double lse = o.lse.data[static_cast<size_t>(h * p.seq_q + i)];
      if (n == 0) {
        ++masked_rows;
        CHECK(lse == -kInf);
        continue;
      }
      CHECK(lse == doctest::Approx(std::log(static_cast<double>(n))).epsilon(1e-14));
      for (int64_t d = 0; d < p.head_dim_v; ++d)
        CHECK(std::abs(o.o.at4(0, h, i, d) - mean[static_cast<size_t>(d)] / static_cast<double>(n)) <= 1e-14);
    }
  CHECK(masked_rows == 2 * 3);  // rows 37..39 are padding
}

TEST_CASE("each document's outputs are invariant to the order of documents in a pack") {
  const std::vector<int64_t> lens = {5, 9, 3, 12};
  const std::vector<int> order = {2, 0, 3, 1};  // pack B holds the documents in this order
  const int64_t S = 32;                         // 29 tokens + 3 padding
  Problem a = base_problem(1, 4, 2, S, S, 8, 6, 5);
  a.mask = {documents({doc_ids_from_lengths(lens, S)}), causal(CausalAlign::bottom_right)};
  a.score_mod = mod_of(ScoreMod::Kind::rel_bias);
  Problem b = a;
  std::vector<int64_t> lens_b;
  for (int d : order) lens_b.push_back(lens[static_cast<size_t>(d)]);
  b.mask = {documents({doc_ids_from_lengths(lens_b, S)}), causal(CausalAlign::bottom_right)};

  // Position of each token of pack A in pack B.
  std::vector<int64_t> start_a(lens.size()), start_b(lens.size());
  for (size_t d = 1; d < lens.size(); ++d) start_a[d] = start_a[d - 1] + lens[d - 1];
  int64_t pos = 0;
  for (int d : order) {
    start_b[static_cast<size_t>(d)] = pos;
    pos += lens[static_cast<size_t>(d)];
  }
  std::vector<int64_t> perm(static_cast<size_t>(S));
  for (size_t d = 0; d < lens.size(); ++d)
    for (int64_t t = 0; t < lens[d]; ++t) perm[static_cast<size_t>(start_a[d] + t)] = start_b[d] + t;
  for (int64_t t = pos; t < S; ++t) perm[static_cast<size_t>(t)] = t;  // padding stays

  const ProblemData ina = make_inputs(a);
  ProblemData inb = ina;
  auto permute = [&](const HostTensor& src, HostTensor& dst) {
    for (int64_t h = 0; h < src.shape[1]; ++h)
      for (int64_t t = 0; t < S; ++t)
        for (int64_t d = 0; d < src.shape[3]; ++d) dst.at4(0, h, perm[static_cast<size_t>(t)], d) = src.at4(0, h, t, d);
  };
  permute(ina.q, inb.q), permute(ina.k, inb.k), permute(ina.v, inb.v), permute(ina.d_o, inb.d_o);
  const AttentionOutputs oa = ref::gold(a, ina, true), ob = ref::gold(b, inb, true);
  HostTensor back_o = oa.o, back_dq = oa.dq, back_dk = oa.dk, back_dv = oa.dv;
  permute(oa.o, back_o), permute(oa.dq, back_dq), permute(oa.dk, back_dk), permute(oa.dv, back_dv);
  CHECK(max_abs_diff(back_o.data, ob.o.data) <= 1e-13);
  CHECK(max_abs_diff(back_dq.data, ob.dq.data) <= 1e-13);
  CHECK(max_abs_diff(back_dk.data, ob.dk.data) <= 1e-13);
  CHECK(max_abs_diff(back_dv.data, ob.dv.data) <= 1e-13);
  CHECK(max_abs_diff(oa.dbias, ob.dbias) <= 1e-12);
  for (int64_t h = 0; h < a.heads_q; ++h)
    for (int64_t t = 0; t < S; ++t) {
      const double la = oa.lse.data[static_cast<size_t>(h * S + t)];
      const double lb = ob.lse.data[static_cast<size_t>(h * S + perm[static_cast<size_t>(t)])];
      if (t >= 29) CHECK((la == -kInf && lb == -kInf));  // padding rows
      else CHECK(std::abs(la - lb) <= 1e-14 * std::abs(lb));
    }
}

TEST_CASE("fully masked rows: O = 0, LSE = -inf, zero gradients, no NaN anywhere") {
  Problem p = base_problem(2, 4, 2, 40, 30, 8, 5);
  // Row 0: queries 0..9 see no key (bottom-right causal, Sq > Sk); row 1: padding
  // rows past 25 and padding keys past 20.
  p.mask = {causal(CausalAlign::bottom_right), PaddingTerm{{40, 25}, {30, 20}}};
  p.score_mod = mod_of(ScoreMod::Kind::offset_bias);
  const ProblemData in = make_inputs(p);
  for (int lp_run = 0; lp_run < 2; ++lp_run) {
    CAPTURE(lp_run);
    const AttentionOutputs o = lp_run ? ref::lp(p, in, true) : ref::gold(p, in, true);
    CHECK_FALSE(any_nan(o));
    int64_t masked = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t i = 0; i < p.seq_q; ++i) {
          const bool empty = b == 0 ? i < 10 : (i < 5 || i >= 25);  // per-row alignment: off = 20 - 25
          const double lse = o.lse.data[static_cast<size_t>((b * p.heads_q + h) * p.seq_q + i)];
          if (!empty) {
            CHECK(std::isfinite(lse));
            continue;
          }
          ++masked;
          CHECK(lse == -kInf);
          for (int64_t d = 0; d < p.head_dim_v; ++d) CHECK(o.o.at4(b, h, i, d) == 0.0);
          for (int64_t d = 0; d < p.head_dim; ++d) CHECK(o.dq.at4(b, h, i, d) == 0.0);
        }
    CHECK(masked == 4 * 10 + 4 * 20);
    // Keys past the padding length are never attended: their gradients are 0.
    for (int64_t g = 0; g < p.heads_kv; ++g)
      for (int64_t j = 20; j < 30; ++j) {
        for (int64_t d = 0; d < p.head_dim; ++d) CHECK(o.dk.at4(1, g, j, d) == 0.0);
        for (int64_t d = 0; d < p.head_dim_v; ++d) CHECK(o.dv.at4(1, g, j, d) == 0.0);
      }
  }
}

TEST_CASE("a problem whose every row is masked gives zeros and -inf only") {
  Problem p = base_problem(1, 2, 1, 16, 16, 4, 4);
  p.mask = {documents({std::vector<int32_t>(16, -1)})};
  p.score_mod = mod_of(ScoreMod::Kind::rel_bias);
  const ProblemData in = make_inputs(p);
  const AttentionOutputs o = ref::gold(p, in, true);
  CHECK_FALSE(any_nan(o));
  for (double v : o.lse.data) CHECK(v == -kInf);
  for (const auto* t : {&o.o, &o.dq, &o.dk, &o.dv})
    for (double v : t->data) CHECK(v == 0.0);
  for (double v : o.dbias) CHECK(v == 0.0);
}

// ------------------------------------------------------------------ slices, determinism, cost

TEST_CASE("slices: selected ones equal the full run, the rest stay NaN, dBias needs all") {
  Problem p = base_problem(2, 4, 2, 70, 70, 8, 8);
  p.mask = {causal(CausalAlign::bottom_right)};
  p.score_mod = mod_of(ScoreMod::Kind::rel_bias);
  const ProblemData in = make_inputs(p);
  const ref::SliceSet sel = ref::SliceSet::of(2, 2, {{0, 1}, {1, 0}});
  CHECK(sel.count(2, 2) == 2);
  for (int lp_run = 0; lp_run < 2; ++lp_run) {
    CAPTURE(lp_run);
    const AttentionOutputs full = lp_run ? ref::lp(p, in, true) : ref::gold(p, in, true);
    const AttentionOutputs part = lp_run ? ref::lp(p, in, true, sel) : ref::gold(p, in, true, sel);
    CHECK(part.dbias.empty());
    CHECK(full.dbias.size() == static_cast<size_t>(p.bias_numel()));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 4; ++h) {
        const bool on = sel.contains(b, h / 2, 2);
        for (int64_t i = 0; i < p.seq_q; ++i)
          for (int64_t d = 0; d < p.head_dim; ++d) {
            if (on) CHECK(part.dq.at4(b, h, i, d) == full.dq.at4(b, h, i, d));
            else CHECK(std::isnan(part.dq.at4(b, h, i, d)));
          }
      }
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t g = 0; g < 2; ++g)
        for (int64_t j = 0; j < p.seq_k; ++j) {
          const bool on = sel.contains(b, g, 2);
          if (on) CHECK(part.dk.at4(b, g, j, 3) == full.dk.at4(b, g, j, 3));
          else CHECK(std::isnan(part.dv.at4(b, g, j, 3)));
        }
  }
  CHECK(ref::SliceSet::of(2, 2, {{0, 0}, {0, 1}, {1, 0}, {1, 1}}).all);
  CHECK_THROWS_AS(ref::SliceSet::of(2, 2, {{2, 0}}), std::invalid_argument);
}

TEST_CASE("gold and lp are bitwise independent of the thread count; tiles change only rounding") {
  Problem p = base_problem(2, 4, 1, 150, 150, 16, 8);
  p.mask = {documents({doc_ids_from_lengths({40, 70, 20}, 150), doc_ids_from_lengths({150}, 150)}), causal(CausalAlign::bottom_right)};
  p.score_mod = mod_of(ScoreMod::Kind::rel_bias);
  const ProblemData in = make_inputs(p);
  ref::Options one, three;
  one.threads = 1;
  three.threads = 3;
  const AttentionOutputs a = ref::gold(p, in, true, ref::SliceSet::every(), one);
  CHECK(bitwise_equal(a, ref::gold(p, in, true, ref::SliceSet::every(), three)));
  CHECK(bitwise_equal(ref::lp(p, in, true, ref::SliceSet::every(), one),
                      ref::lp(p, in, true, ref::SliceSet::every(), three)));
  ref::Options tiles;
  tiles.q_block = 32;
  tiles.kv_block = 128;
  check_against(ref::gold(p, in, true, ref::SliceSet::every(), tiles), a, 1e-13, /*dbias_scale=*/1.0);
}

TEST_CASE("cost follows the allowed pairs: excluded tiles are never computed") {
  // Four 64-token documents on 64x64 tiles: only the 4 diagonal tiles of the 16.
  Problem p = base_problem(1, 2, 1, 256, 256, 8, 8);
  p.mask = {documents({doc_ids_from_lengths({64, 64, 64, 64}, 256)})};
  const ProblemData in = make_inputs(p);
  ref::Options t64;
  t64.q_block = t64.kv_block = 64;
  ref::Stats st;
  ref::gold(p, in, false, ref::SliceSet::every(), t64, &st);
  CHECK(st.full_tiles == 2 * 4);
  CHECK(st.partial_tiles == 0);
  CHECK(st.executed_pairs == 2 * 4 * 64 * 64);
  CHECK(st.useful_pairs == st.executed_pairs);
  // Block-causal: the diagonal tiles become partial (mask evaluated), no more tiles.
  p.mask.push_back(causal(CausalAlign::bottom_right));
  ref::gold(p, in, false, ref::SliceSet::every(), t64, &st);
  CHECK(st.full_tiles == 0);
  CHECK(st.partial_tiles == 2 * 4);
  CHECK(st.useful_pairs == 2 * 4 * (64 * 65 / 2));
  // Dense causal over the same length computes 10 of 16 tiles per head.
  p.mask = {causal(CausalAlign::bottom_right)};
  ref::gold(p, in, false, ref::SliceSet::every(), t64, &st);
  CHECK(st.full_tiles + st.partial_tiles == 2 * 10);
  CHECK(st.partial_tiles == 2 * 4);
  CHECK(st.executed_pairs == 2 * 10 * 64 * 64);
  // Unaligned documents [0,50) [50,150) [150,156) [156,256) on 32x32 tiles: the
  // union of the blocks {0,1}^2, {1..4}^2 and {4..7}^2 (the 6-token document lies in
  // tile (4,4)), 4 + 16 + 16 - 2 shared = 34 tiles per head out of 64.
  p.mask = {documents({doc_ids_from_lengths({50, 100, 6, 100}, 256)})};
  ref::Options t32;
  t32.q_block = t32.kv_block = 32;
  ref::gold(p, in, false, ref::SliceSet::every(), t32, &st);
  CHECK(st.useful_pairs == 2 * (50 * 50 + 100 * 100 + 6 * 6 + 100 * 100));
  CHECK(st.executed_pairs == 2 * 34 * 32 * 32);
}

TEST_CASE("estimated_flops follows the docs/semantics.md convention") {
  Problem p = base_problem(2, 4, 2, 100, 100, 16, 8);
  p.mask = {causal(CausalAlign::top_left)};
  const double pairs = 2.0 * (100 * 101 / 2);
  CHECK(ref::estimated_flops(p, false) == doctest::Approx(2 * pairs * 24 * 4));
  CHECK(ref::estimated_flops(p, true) == doctest::Approx(3.5 * 2 * pairs * 24 * 4));
}

TEST_CASE("gold rejects inputs that do not fit the problem") {
  Problem p = base_problem(1, 2, 1, 10, 10, 4, 4);
  p.score_mod = mod_of(ScoreMod::Kind::offset_bias);
  ProblemData in = make_inputs(p);
  ProblemData bad = in;
  bad.k.data.pop_back();
  CHECK_THROWS_AS(ref::gold(p, bad, false), std::invalid_argument);
  bad = in;
  bad.offset[3] = 7;  // size is 7
  CHECK_THROWS_AS(ref::gold(p, bad, false), std::invalid_argument);
  bad = in;
  bad.bias.push_back(0);
  CHECK_THROWS_AS(ref::lp(p, bad, true), std::invalid_argument);
}

// ------------------------------------------------------------------ lp emulation

TEST_CASE("lp error is positive and bounded for bf16/fp16, tiny for fp32") {
  struct Bound {
    DType t;
    double lo, o_hi, grad_hi;
  };
  // Measured (S = 256, D = 64, causal, softcap 20): e(O) = 0.014 / 0.0017 / 5.5e-7
  // and e(grads) <= 0.019 / 0.0024 / 1.6e-6 for bf16 / fp16 / fp32, i.e. a few units
  // of each dtype's epsilon (2^-8, 2^-11, 2^-24) at the tensors' magnitudes (max |O|
  // ~ 2, gradients ~ 4). The bounds allow about 2x either way: an lp that skipped a
  // rounding step (too small) or rounded in a coarser type (too large) fails.
  for (const Bound& bd : {Bound{DType::bf16, 4e-3, 3e-2, 5e-2}, Bound{DType::fp16, 5e-4, 4e-3, 6e-3},
                          Bound{DType::fp32, 1e-7, 2e-6, 5e-6}}) {
    const std::string dtype_name = to_string(bd.t);
    CAPTURE(dtype_name);
    Problem p = base_problem(1, 2, 1, 256, 256, 64, 64, 3);
    p.dtype = bd.t;
    p.mask = {causal(CausalAlign::bottom_right)};
    p.score_mod = mod_of(ScoreMod::Kind::softcap);
    p.score_mod.cap = 20;
    const ProblemData in = make_inputs(p);
    const AttentionOutputs g = ref::gold(p, in, true), l = ref::lp(p, in, true);
    CHECK_FALSE(any_nan(l));
    const double eo = max_abs_diff(l.o.data, g.o.data), else_ = max_abs_diff(l.lse.data, g.lse.data);
    const double edq = max_abs_diff(l.dq.data, g.dq.data), edk = max_abs_diff(l.dk.data, g.dk.data),
                 edv = max_abs_diff(l.dv.data, g.dv.data);
    INFO("e(O) " << eo << " e(LSE) " << else_ << " e(dQ) " << edq << " e(dK) " << edk << " e(dV) " << edv);
    CHECK(eo > bd.lo);
    CHECK(edq > bd.lo);
    CHECK(edk > bd.lo);
    CHECK(edv > bd.lo);
    CHECK(eo < bd.o_hi);
    CHECK(else_ < bd.o_hi);
    CHECK(edq < bd.grad_hi);
    CHECK(edk < bd.grad_hi);
    CHECK(edv < bd.grad_hi);
    if (bd.t != DType::fp32) {  // lp outputs are representable in the dtype
      for (size_t i = 0; i < l.o.data.size(); i += 97) CHECK(round_to(bd.t, l.o.data[i]) == l.o.data[i]);
      for (size_t i = 0; i < l.dk.data.size(); i += 97) CHECK(round_to(bd.t, l.dk.data[i]) == l.dk.data[i]);
    }
  }
}

TEST_CASE("lp with learnable biases: dBias close to gold, rounding error visible in bf16") {
  Problem p = base_problem(1, 4, 2, 96, 96, 32, 32, 9);
  p.dtype = DType::bf16;
  p.mask = {documents({doc_ids_from_lengths({50, 46}, 96)}), causal(CausalAlign::bottom_right)};
  p.score_mod = mod_of(ScoreMod::Kind::rel_bias);
  const ProblemData in = make_inputs(p);
  const AttentionOutputs g = ref::gold(p, in, true), l = ref::lp(p, in, true);
  const double e = max_abs_diff(l.dbias, g.dbias);
  double gmax = 0;
  for (double v : g.dbias) gmax = std::max(gmax, std::abs(v));
  INFO("e(dBias) " << e << " max|dBias| " << gmax);
  CHECK(e > 0);
  CHECK(e < 0.05 * gmax);
}

// ------------------------------------------------------------------ CLI

namespace {

namespace fs = std::filesystem;

struct CmdResult {
  int code;
  std::string err;
};

CmdResult run_cli(const std::string& args, const fs::path& scratch) {
  const fs::path errf = scratch / "stderr.txt";
  const std::string cmd = std::string(ATTNBENCH_BINARY) + " " + args + " > " + (scratch / "stdout.txt").string() +
                          " 2> " + errf.string();
  const int st = std::system(cmd.c_str());
  std::ifstream in(errf);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, ss.str()};
}

fs::path scratch_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("attnbench_test_reference_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<double> load(const fs::path& dir, const std::string& name, const std::vector<int64_t>& shape) {
  const npy::Array a = npy::read((dir / (name + ".npy")).string());
  CHECK(a.dtype == npy::Dtype::f8);
  CHECK(a.shape == shape);
  return a.to_double();
}

}  // namespace

TEST_CASE("attnbench reference writes the contract's files and --inputs round-trips") {
  const fs::path dir = scratch_dir("cli");
  const std::string problem_json = R"({"batch": 2, "heads_q": 4, "heads_kv": 2, "seq_q": 45, "seq_k": 60,
    "head_dim": 16, "head_dim_v": 8, "dtype": "bf16", "layout": "bshd",
    "mask": [{"kind": "causal", "align": "bottom_right"}, {"kind": "sliding_window", "left": 20, "right": 0}],
    "score_mod": {"kind": "offset_bias", "size": 5}, "seed": 3})";
  {
    std::ofstream(dir / "p.json") << problem_json;
  }
  const Problem p = problem_from_json(nlohmann::json::parse(problem_json), "p.json");
  const fs::path out1 = dir / "out1", out2 = dir / "out2", out3 = dir / "out3", in3 = dir / "in32";

  CmdResult r = run_cli("reference --problem " + (dir / "p.json").string() + " --out " + out1.string(), dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::vector<int64_t> qs = {2, 4, 45, 16}, ks = {2, 2, 60, 16}, vs = {2, 2, 60, 8}, os = {2, 4, 45, 8},
                             ls = {2, 4, 45};
  const ProblemData in = make_inputs(p);
  const AttentionOutputs want = ref::gold(p, in, true);
  CHECK(load(out1, "q", qs) == in.q.data);
  CHECK(load(out1, "k", ks) == in.k.data);
  CHECK(load(out1, "v", vs) == in.v.data);
  CHECK(load(out1, "do", os) == in.d_o.data);
  CHECK(load(out1, "bias", {5}) == in.bias);
  const npy::Array off = npy::read((out1 / "offset.npy").string());
  CHECK(off.dtype == npy::Dtype::i8);
  CHECK(off.shape == std::vector<int64_t>{60});
  CHECK(off.to_int64() == std::vector<int64_t>(in.offset.begin(), in.offset.end()));
  const std::vector<double> o1 = load(out1, "o", os), lse1 = load(out1, "lse", ls), dq1 = load(out1, "dq", qs),
                            dk1 = load(out1, "dk", ks), dv1 = load(out1, "dv", vs), db1 = load(out1, "dbias", {5});
  CHECK(o1 == want.o.data);
  CHECK(lse1 == want.lse.data);
  CHECK(dq1 == want.dq.data);
  CHECK(dk1 == want.dk.data);
  CHECK(dv1 == want.dv.data);
  CHECK(db1 == want.dbias);
  int inf_rows = 0;  // Sq < Sk with a window: no fully masked rows here
  for (double v : lse1) inf_rows += std::isinf(v);
  CHECK(inf_rows == 0);

  SUBCASE("--inputs with the written float64 files reproduces the outputs") {
    r = run_cli("reference --problem " + (dir / "p.json").string() + " --out " + out2.string() + " --inputs " +
                    out1.string(),
                dir);
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(load(out2, "o", os) == o1);
    CHECK(load(out2, "dq", qs) == dq1);
    CHECK(load(out2, "dk", ks) == dk1);
    CHECK(load(out2, "dbias", {5}) == db1);
  }
  SUBCASE("float32 inputs are used as given (no rounding to bf16)") {
    fs::create_directories(in3);
    ProblemData in32 = in;
    for (auto* t : {&in32.q, &in32.k, &in32.v, &in32.d_o})
      for (size_t i = 0; i < t->data.size(); ++i) t->data[i] = round_to(DType::fp32, t->data[i] * 1.001 + 1e-3);
    auto put32 = [&](const char* name, const HostTensor& t) {
      std::vector<float> f(t.data.begin(), t.data.end());
      npy::write((in3 / (std::string(name) + ".npy")).string(), t.shape, f.data());
    };
    put32("q", in32.q), put32("k", in32.k), put32("v", in32.v), put32("do", in32.d_o);
    std::vector<float> bias32(in.bias.begin(), in.bias.end());
    npy::write((in3 / "bias.npy").string(), {5}, bias32.data());
    std::vector<int64_t> off64(in.offset.begin(), in.offset.end());
    npy::write((in3 / "offset.npy").string(), {60}, off64.data());
    r = run_cli("reference --problem " + (dir / "p.json").string() + " --out " + out3.string() + " --inputs " +
                    in3.string(),
                dir);
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(load(out3, "q", qs) == in32.q.data);  // not rounded to bf16
    const AttentionOutputs w32 = ref::gold(p, in32, true);
    CHECK(load(out3, "o", os) == w32.o.data);
    CHECK(load(out3, "dv", vs) == w32.dv.data);
    CHECK(max_abs_diff(w32.o.data, want.o.data) > 1e-4);  // the inputs really differed
  }
  SUBCASE("bad inputs exit 2 naming the file and field") {
    fs::create_directories(in3);
    for (const char* n : {"q", "k", "v", "do", "bias", "offset"})
      fs::copy_file(out1 / (std::string(n) + ".npy"), in3 / (std::string(n) + ".npy"),
                    fs::copy_options::overwrite_existing);
    const std::string base = "reference --problem " + (dir / "p.json").string() + " --out " + out3.string() +
                             " --inputs " + in3.string();
    fs::remove(in3 / "do.npy");
    r = run_cli(base, dir);
    CHECK(r.code == 2);
    CHECK(r.err.find("do.npy") != std::string::npos);
    CHECK(r.err.find("missing input file") != std::string::npos);

    std::vector<double> wrong(2 * 4 * 45 * 7, 0.5);
    npy::write((in3 / "do.npy").string(), {2, 4, 45, 7}, wrong.data());
    r = run_cli(base, dir);
    CHECK(r.code == 2);
    CHECK(r.err.find("do.npy: do: shape (2, 4, 45, 7)") != std::string::npos);

    std::vector<int64_t> ints(2 * 4 * 45 * 8, 1);
    npy::write((in3 / "do.npy").string(), {2, 4, 45, 8}, ints.data());
    r = run_cli(base, dir);
    CHECK(r.code == 2);
    CHECK(r.err.find("do.npy: do: dtype '<i8'") != std::string::npos);

    fs::copy_file(out1 / "do.npy", in3 / "do.npy", fs::copy_options::overwrite_existing);
    std::vector<int64_t> off(60, 5);  // outside [0, 5)
    npy::write((in3 / "offset.npy").string(), {60}, off.data());
    r = run_cli(base, dir);
    CHECK(r.code == 2);
    CHECK(r.err.find("offset.npy: offset: offset[0] = 5") != std::string::npos);

    {
      std::ofstream(in3 / "offset.npy") << "not a numpy file";
    }
    r = run_cli(base, dir);
    CHECK(r.code == 2);
    CHECK(r.err.find("offset.npy") != std::string::npos);
  }
  SUBCASE("a malformed problem file exits 2") {
    {
      std::ofstream(dir / "bad.json") << R"({"batch": 0, "heads_q": 1, "seq_q": 4, "head_dim": 4})";
    }
    r = run_cli("reference --problem " + (dir / "bad.json").string() + " --out " + out3.string(), dir);
    CHECK(r.code == 2);
    CHECK(r.err.find("/batch") != std::string::npos);
    r = run_cli("reference --out " + out3.string(), dir);
    CHECK(r.code == 2);
  }
  std::error_code ec;
  fs::remove_all(dir.parent_path(), ec);
}

TEST_CASE("attnbench reference writes -inf LSE and zero rows for fully masked queries") {
  const fs::path dir = scratch_dir("cli_masked");
  {
    std::ofstream(dir / "p.json") << R"({"batch": 1, "heads_q": 2, "heads_kv": 1, "seq_q": 12, "seq_k": 12,
      "head_dim": 4, "dtype": "fp16", "mask": [{"kind": "document",
      "doc_ids": [[0, 0, 0, 0, 0, 1, 1, 1, 1, -1, -1, -1]]}], "seed": 1})";
  }
  const CmdResult r = run_cli("reference --problem " + (dir / "p.json").string() + " --out " + (dir / "o").string(), dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::vector<double> lse = load(dir / "o", "lse", {1, 2, 12});
  const std::vector<double> o = load(dir / "o", "o", {1, 2, 12, 4});
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 12; ++i) {
      const double v = lse[static_cast<size_t>(h * 12 + i)];
      if (i >= 9) {
        CHECK(v == -kInf);
        for (int64_t d = 0; d < 4; ++d) CHECK(o[static_cast<size_t>((h * 12 + i) * 4 + d)] == 0.0);
      } else {
        CHECK(std::isfinite(v));
      }
    }
  std::error_code ec;
  fs::remove_all(dir.parent_path(), ec);
}
