// The score mods of the fused kernels in the exp2 domain (ScoreMod2): the form the
// forward and backward kernels evaluate per score, with the softmax scale and
// log2(e) folded into per-head constants. Host and device code (ATTNBENCH_HD):
// tests/test_score_mod.cpp pins it on the CPU to the one definition of every
// score mod, score_mod_apply() / score_mod_grad() / score_mod_bias_index() of
// harness/model/mask_desc.hpp (docs/semantics.md section 4), for every kind.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/kernels/attn_params.hpp"
#include "harness/model/hd.hpp"
#include "harness/model/mask_desc.hpp"

namespace attnbench::kernels {

constexpr float kLog2e = 1.4426950408889634f;

/// *p through the read-only data cache on the device (__ldg), a plain load on the host.
template <class T>
ATTNBENCH_HD T load_readonly(const T* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(p);
#else
  return *p;
#endif
}

/// The score pipeline of docs/semantics.md ("Score pipeline") in the exp2 domain
/// for one query head h: x = raw dot product q.k (float32); apply() returns
/// log2(e) * score_mod(scale * x, h, i, j) (the mask is applied by the caller), that
/// is score_mod_apply() of mask_desc.hpp times log2(e), with the constants folded
/// (none: x * scale log2(e); softcap: cap log2(e) tanh(x scale / cap); alibi:
/// x scale log2(e) - slope_h log2(e) |i - j|; rel_bias / offset_bias: x scale log2(e)
/// + log2(e) bias[index]). grad() gives d score_mod / d s for the backward
/// (softcap: 1 - tanh^2; 1 otherwise, the learnable biases included: they are
/// additive). Agrees with mask_desc.hpp to float rounding (tests/test_score_mod.cpp),
/// not bitwise: the folded constants round differently from the unfolded product.
struct ScoreMod2 {
  ModKind kind = ModKind::none;
  float scale_log2 = 0.f;  ///< scale * log2(e)
  float cap_inv = 0.f;     ///< softcap: scale / cap
  float cap_log2 = 0.f;    ///< softcap: cap * log2(e)
  float slope_log2 = 0.f;  ///< alibi: slope_h * log2(e)
  const float* bias = nullptr;      ///< rel_bias: row h of [Hq, 2m+1]; offset_bias: the table
  const int32_t* offset = nullptr;  ///< offset_bias: [seq_k]
  int max_distance = 0;             ///< rel_bias m
  int num_keys = 0;                 ///< offset_bias: seq_k (keys past it read no offset)

  /// The constants of query head h of problem p (p.mod, p.scale, p.softcap, the
  /// bias tensors).
  ATTNBENCH_HD static ScoreMod2 of(const AttnParams& p, int h) {
    ScoreMod2 m;
    m.kind = p.mod;
    m.scale_log2 = p.scale_log2;
    if (p.mod == ModKind::softcap) {
      m.cap_inv = p.scale / p.softcap;
      m.cap_log2 = p.softcap * kLog2e;
    }
    if (p.mod == ModKind::alibi) m.slope_log2 = alibi_slope<float>(h, p.heads_q) * kLog2e;
    if (p.mod == ModKind::rel_bias) {
      m.max_distance = p.max_distance;
      m.bias = p.bias + static_cast<int64_t>(h) * (2 * p.max_distance + 1);
    }
    if (p.mod == ModKind::offset_bias) {
      m.bias = p.bias;
      m.offset = p.bias_offset;
      m.num_keys = p.seq_k;
    }
    return m;
  }
  /// Index of the learnable bias entry (i, j) adds (rel_bias: into this head's row;
  /// score_mod_bias_index() minus the row's start).
  ATTNBENCH_HD int bias_index(int i, int j) const {
    if (kind == ModKind::offset_bias) return j < num_keys ? load_readonly(offset + j) : 0;
    const int d = i - j;
    return (d < -max_distance ? -max_distance : (d > max_distance ? max_distance : d)) + max_distance;
  }
  /// The learnable bias's term of pair (i, j) in the exp2 domain, log2(e) *
  /// bias[bias_index(i, j)]: rel_bias reads only i - j, offset_bias only j (the
  /// flex Hopper kernels stage these per key step: StagedBias below).
  ATTNBENCH_HD float bias_term(int i, int j) const { return kLog2e * load_readonly(bias + bias_index(i, j)); }
  /// apply() of a learnable bias given its bias_term() t.
  ATTNBENCH_HD float apply_bias_term(float x, float t) const { return x * scale_log2 + t; }
  /// apply() for the kind K known at compile time (rel_bias: both learnable
  /// biases), without a branch on `kind`.
  template <ModKind K>
  ATTNBENCH_HD float apply_as(float x, int i, int j) const {
    if constexpr (K == ModKind::none)
      return x * scale_log2;
    else if constexpr (K == ModKind::softcap)
      return cap_log2 * tanhf(x * cap_inv);
    else if constexpr (K == ModKind::alibi)
      return x * scale_log2 - slope_log2 * static_cast<float>(i > j ? i - j : j - i);
    else
      return apply_bias_term(x, bias_term(i, j));
  }
  /// kBias: whether the learnable biases can occur (the flex path); without,
  /// their code and registers are compiled out.
  template <bool kBias>
  ATTNBENCH_HD float apply(float x, int i, int j) const {
    if (kind == ModKind::none) return apply_as<ModKind::none>(x, i, j);
    if (kind == ModKind::softcap) return apply_as<ModKind::softcap>(x, i, j);
    if (!kBias || kind == ModKind::alibi) return apply_as<ModKind::alibi>(x, i, j);
    return apply_as<ModKind::rel_bias>(x, i, j);
  }
  /// d score_mod / d s at raw dot product x.
  ATTNBENCH_HD float grad(float x) const {
    if (kind != ModKind::softcap) return 1.f;
    const float t = tanhf(x * cap_inv);
    return 1.f - t * t;
  }
};

/// A key step's learnable-bias terms (ScoreMod2::bias_term) staged in shared
/// memory by the producer of a flex Hopper kernel that walks key steps (forward,
/// deterministic dQ; sm90::produce_bias_terms): offset_bias (by_key) v[j - off]
/// with off the step's first key, rel_bias v[(i - j) - off] with off its least
/// query-key distance. v null: nothing staged, apply() loads the bias per score.
struct StagedBias {
  static constexpr bool kCanStage = true;
  const float* v = nullptr;
  int off = 0;
  bool by_key = false;
  ATTNBENCH_HD float key(int j) const { return v[j - off]; }
  ATTNBENCH_HD float distance(int i, int j) const { return v[i - j - off]; }
};
/// with_score_mod's `staged` where no kernel stages the bias terms.
struct NoStagedBias {
  static constexpr bool kCanStage = false;
};

/// Run `loop(score, grad)` with score(x, i, j) = mod.apply<kBias>(x, i, j) and
/// grad(x) = mod.grad(x). kBias (the flex kernels): once per kind, specialised
/// (ScoreMod2::apply_as), so that the loop over a tile's scores carries no
/// per-score branch on the kind (on the H200 those branches were a quarter of the
/// biased flex forward's instructions), and with staged.v (StagedBias; or
/// NoStagedBias) the bias terms from shared memory instead
/// of per-score loads, by key or by distance (no per-score select between the
/// two: a thread's 2 rows then read the same or constant-offset words). Without
/// kBias one loop, as before (four copies made the portable kernels spill more).
template <bool kBias, class Loop, class Staged>
ATTNBENCH_HD void with_score_mod(const ScoreMod2& mod, const Staged& staged, Loop&& loop) {
  if constexpr (!kBias) {
    (void)staged;
    loop([&](float x, int i, int j) { return mod.apply<false>(x, i, j); }, [&](float x) { return mod.grad(x); });
    return;
  }
  const auto one = [](float) { return 1.f; };  // d score_mod / d s of every kind but softcap
  if (mod.kind == ModKind::none) {
    loop([&](float x, int i, int j) { return mod.apply_as<ModKind::none>(x, i, j); }, one);
  } else if (mod.kind == ModKind::softcap) {
    loop([&](float x, int i, int j) { return mod.apply_as<ModKind::softcap>(x, i, j); },
         [&](float x) { return mod.grad(x); });
  } else if (mod.kind == ModKind::alibi) {
    loop([&](float x, int i, int j) { return mod.apply_as<ModKind::alibi>(x, i, j); }, one);
  } else {
    if constexpr (Staged::kCanStage) {
      if (staged.v && staged.by_key) {
        loop([&](float x, int, int j) { return mod.apply_bias_term(x, staged.key(j)); }, one);
        return;
      }
      if (staged.v) {
        loop([&](float x, int i, int j) { return mod.apply_bias_term(x, staged.distance(i, j)); }, one);
        return;
      }
    }
    loop([&](float x, int i, int j) { return mod.apply_as<ModKind::rel_bias>(x, i, j); }, one);
  }
}

}  // namespace attnbench::kernels
