// The kernels' score mod (ScoreMod2, backends/kernels/score_mod.hpp: the exp2 domain
// with folded constants) pinned to the one definition of every score mod
// (score_mod_apply / score_mod_grad / score_mod_bias_index of
// harness/model/mask_desc.hpp) for every kind, on seeded random scores, heads and
// positions: values to float rounding, bias indices exactly.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backends/kernels/score_mod.hpp"
#include "harness/model/mask_desc.hpp"

using namespace attnbench;
using namespace attnbench::kernels;

namespace {

constexpr int kHeads = 8, kMaxDistance = 5, kKeys = 300, kBiasSize = 7;
constexpr double kLog2eD = 1.4426950408889634;

/// One problem's constants with score mod `kind`: the kernels' AttnParams and the
/// reference's ScoreModDesc over the same bias tensors.
struct Pair {
  AttnParams p;
  ScoreModDesc s;
};

Pair make(ModKind kind, const std::vector<float>& bias, const std::vector<int32_t>& offset) {
  Pair r;
  r.p.mod = kind;
  r.p.scale = 0.125f;  // 1 / sqrt(64)
  r.p.scale_log2 = static_cast<float>(0.125 * kLog2eD);
  r.p.softcap = 20.f;
  r.p.heads_q = kHeads;
  r.p.max_distance = kMaxDistance;
  r.p.bias = bias.data();
  r.p.bias_offset = offset.data();
  r.p.seq_k = kKeys;
  r.s.kind = kind;  // the kernels' ModKind is ScoreModKind
  r.s.cap = 20.0;
  r.s.max_distance = kMaxDistance;
  r.s.heads_q = kHeads;
  r.s.bias = bias.data();
  r.s.offset = offset.data();
  return r;
}

}  // namespace

TEST_CASE("ScoreMod2 equals log2(e) * score_mod_apply(scale * x) for every kind") {
  std::mt19937 rng(20261127);
  std::uniform_real_distribution<float> score(-60.f, 60.f), weight(-3.f, 3.f);
  std::uniform_int_distribution<int> head(0, kHeads - 1), pos(0, kKeys - 1), entry(0, kBiasSize - 1);
  std::vector<float> rel(static_cast<size_t>(kHeads * (2 * kMaxDistance + 1))), table(kBiasSize);
  for (float& b : rel) b = weight(rng);
  for (float& b : table) b = weight(rng);
  std::vector<int32_t> offset(kKeys);
  for (int32_t& o : offset) o = entry(rng);
  struct Kind {
    ModKind k;
    const std::vector<float>* bias;
  };
  const Kind kinds[] = {{ModKind::none, &rel},
                        {ModKind::softcap, &rel},
                        {ModKind::alibi, &rel},
                        {ModKind::rel_bias, &rel},
                        {ModKind::offset_bias, &table}};
  for (const Kind& kd : kinds) {
    INFO("kind " << static_cast<int>(kd.k));
    const Pair pr = make(kd.k, *kd.bias, offset);
    int checked = 0;
    for (int t = 0; t < 20000; ++t) {
      const float x = score(rng);
      const int h = head(rng), i = pos(rng), j = pos(rng);
      const ScoreMod2 m = ScoreMod2::of(pr.p, h);
      const double ref = kLog2eD * score_mod_apply<double>(pr.s, 0.125 * static_cast<double>(x), h, i, j);
      const float got = m.apply<true>(x, i, j);
      // Float rounding of the folded products: a few ulps of the largest term.
      const double terms = std::fabs(0.125 * kLog2eD * x) + std::fabs(ref) + 1.0;
      REQUIRE(std::fabs(static_cast<double>(got) - ref) <= terms * 1e-6);
      if (kd.k == ModKind::none || kd.k == ModKind::softcap || kd.k == ModKind::alibi)
        REQUIRE(m.apply<false>(x, i, j) == got);  // the bias-free instantiation is the same function there
      const double gref = score_mod_grad<double>(pr.s, 0.125 * static_cast<double>(x));
      REQUIRE(std::fabs(static_cast<double>(m.grad(x)) - gref) <= 1e-6);
      if (kd.k == ModKind::rel_bias)
        REQUIRE(h * (2 * kMaxDistance + 1) + m.bias_index(i, j) == score_mod_bias_index(pr.s, h, i, j));
      if (kd.k == ModKind::offset_bias) REQUIRE(m.bias_index(i, j) == score_mod_bias_index(pr.s, h, i, j));
      ++checked;
    }
    CHECK(checked == 20000);
  }
}

TEST_CASE("ScoreMod2: softcap saturates at cap, alibi is linear in |i - j|") {
  const std::vector<float> none_bias;
  const std::vector<int32_t> none_offset;
  const Pair sc = make(ModKind::softcap, none_bias, none_offset);
  const ScoreMod2 m = ScoreMod2::of(sc.p, 0);
  CHECK(m.apply<false>(1e6f, 0, 0) == doctest::Approx(20.0 * kLog2eD).epsilon(1e-6));
  CHECK(m.grad(1e6f) == doctest::Approx(0.0).epsilon(1e-6));
  const Pair al = make(ModKind::alibi, none_bias, none_offset);
  const ScoreMod2 a = ScoreMod2::of(al.p, 3);
  const double slope = std::exp2(-8.0 * 4 / kHeads);
  CHECK(a.apply<false>(0.f, 10, 3) == doctest::Approx(-7.0 * slope * kLog2eD).epsilon(1e-6));
  CHECK(a.apply<false>(0.f, 3, 10) == a.apply<false>(0.f, 10, 3));
}

TEST_CASE("with_score_mod: each kind's specialised score and grad, and the staged bias terms, equal apply / grad") {
  std::mt19937 rng(20261128);
  std::uniform_real_distribution<float> score(-60.f, 60.f), weight(-3.f, 3.f);
  std::uniform_int_distribution<int> entry(0, kBiasSize - 1);
  std::vector<float> rel(static_cast<size_t>(kHeads * (2 * kMaxDistance + 1))), table(kBiasSize);
  for (float& b : rel) b = weight(rng);
  for (float& b : table) b = weight(rng);
  std::vector<int32_t> offset(kKeys);
  for (int32_t& o : offset) o = entry(rng);
  constexpr int kRows = 64, kCols = 64, m0 = 128, n0 = 64, h = 5;  // one key step of a tile, as the kernels stage it
  for (ModKind k : {ModKind::none, ModKind::softcap, ModKind::alibi, ModKind::rel_bias, ModKind::offset_bias}) {
    INFO("kind " << static_cast<int>(k));
    const Pair pr = make(k, k == ModKind::offset_bias ? table : rel, offset);
    const ScoreMod2 m = ScoreMod2::of(pr.p, h);
    // The staged terms as BiasTerms (pipeline_sm90.cuh) writes them: by key, or by distance from d_lo.
    const bool by_key = k == ModKind::offset_bias;
    const int d_lo = m0 - n0 - (kCols - 1);
    const bool learnable = k == ModKind::rel_bias || by_key;
    std::vector<float> v(kRows + kCols - 1);
    for (int e = 0; learnable && e < static_cast<int>(v.size()); ++e)
      v[e] = by_key ? (e < kCols ? m.bias_term(0, n0 + e) : 0.f) : m.bias_term(d_lo + e, 0);
    const StagedBias staged{v.data(), by_key ? n0 : d_lo, by_key};
    int loops = 0;
    for (bool use_staged : {false, true}) {
      auto check = [&](const auto& score_of, const auto& grad_of) {
        ++loops;
        for (int i = m0; i < m0 + kRows; ++i)
          for (int j = n0; j < n0 + kCols; ++j) {
            const float x = score(rng);
            REQUIRE(score_of(x, i, j) == doctest::Approx(m.apply<true>(x, i, j)).epsilon(1e-6));
            REQUIRE(grad_of(x) == m.grad(x));
          }
      };
      if (use_staged)
        with_score_mod<true>(m, staged, check);
      else
        with_score_mod<true>(m, NoStagedBias{}, check);
      with_score_mod<false>(m, NoStagedBias{}, [&](const auto& score_of, const auto&) {
        const float x = score(rng);
        if (k != ModKind::rel_bias && k != ModKind::offset_bias) CHECK(score_of(x, 3, 9) == m.apply<false>(x, 3, 9));
      });
    }
    CHECK(loops == 2);
  }
}
