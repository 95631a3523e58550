// The single source of truth for mask and score-mod semantics (docs/semantics.md
// sections 2-4, NORMATIVE), as plain-old-data descriptors and inline functions that
// compile for the host (reference, CPU backend, BlockMask builder, pair counts)
// and for CUDA kernels alike.
//
// A MaskDesc borrows its arrays (doc ids, padding lengths): build it with
// make_mask_desc() from host vectors, or fill the pointers with device copies.
#pragma once

#include <cmath>
#include <cstdint>

#include "harness/model/hd.hpp"

namespace attnbench {

/// Sentinel for "no bound" in MaskDesc diagonal bounds.
constexpr int64_t kNoBound = INT64_C(1) << 60;
/// Block size of the block_sparse mask pattern (docs/semantics.md section 3).
constexpr int64_t kBlockSparseBlock = 128;

/// The AND of a problem's mask list, flattened.
/// Positions are 0-based indices into the (padded) sequence. With a padding mask,
/// off = valid_k(b) - valid_q(b); without, off = Sk - Sq. Then
///   causal top_left     : j - i <= upper_tl (= 0)
///   causal bottom_right : j - i <= off + upper_br (= 0)
///   window(left, right) : off - left <= j - i <= off + right  (-1 = unbounded)
struct MaskDesc {
  int64_t seq_q = 0;              ///< padded Sq
  int64_t seq_k = 0;              ///< padded Sk
  int64_t upper_tl = kNoBound;    ///< bound on j - i, top-left aligned
  int64_t upper_br = kNoBound;    ///< bound on j - i - off
  int64_t lower_br = -kNoBound;   ///< bound on j - i - off (lower)
  int64_t prefix_len = -1;        ///< prefix_lm: j < prefix_len or j <= i; -1 = no prefix_lm
  const int32_t* doc_ids = nullptr;     ///< [B, Sq] document ids, -1 = padding; null = no document mask
  const int32_t* seq_lens_q = nullptr;  ///< [B] valid query lengths; null = no padding mask
  const int32_t* seq_lens_k = nullptr;  ///< [B] valid key lengths
  double block_density = -1.0;          ///< block_sparse keep probability; < 0 = no block_sparse
  uint64_t block_seed = 0;
};

/// splitmix64 finaliser (Steele, Lea, Flood 2014; public-domain reference by
/// S. Vigna): a bijective 64-bit mix used for seeded, order-free hashing.
ATTNBENCH_HD uint64_t splitmix64(uint64_t x) {
  x += UINT64_C(0x9E3779B97F4A7C15);
  x = (x ^ (x >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  x = (x ^ (x >> 27)) * UINT64_C(0x94D049BB133111EB);
  return x ^ (x >> 31);
}

/// Whether the 128x128 block (qb, kb) of a block_sparse{density, seed} mask is
/// kept: uniform u in [0, 1) from splitmix64 of (seed, qb, kb), kept iff u < density.
/// The pattern is the same for every batch row and head.
ATTNBENCH_HD bool block_sparse_keep(uint64_t seed, int64_t qb, int64_t kb, double density) {
  uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(qb) * UINT64_C(0x100000001B3) +
                                            static_cast<uint64_t>(kb)));
  double u = static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
  return u < density;
}

/// Valid query length of batch row b.
ATTNBENCH_HD int64_t mask_valid_q(const MaskDesc& m, int64_t b) {
  return m.seq_lens_q ? m.seq_lens_q[b] : m.seq_q;
}
/// Valid key length of batch row b.
ATTNBENCH_HD int64_t mask_valid_k(const MaskDesc& m, int64_t b) {
  return m.seq_lens_k ? m.seq_lens_k[b] : m.seq_k;
}

/// The keys allowed in one query row by the terms that bound j from below or
/// above (padding lengths, causal in both alignments, sliding window, prefix_lm),
/// as the closed interval [*lo, *hi] (empty when *lo > *hi). Document and
/// block_sparse terms are not applied here. `lq` / `lk` are the row's valid
/// lengths (the padding lengths, else Sq / Sk), i in [0, lq) (a row at or past lq
/// is empty). With off = lk - lq:
///   hi = min(lk - 1, i + upper_tl, i + off + upper_br, max(prefix_len - 1, i))
///   lo = max(0, i + off + lower_br)
/// Every bound is in the units of MaskDesc; |bounds| <= 2^60 and lengths < 2^32
/// cannot overflow int64. Host and device (the fused kernels derive their
/// per-row key bounds from this function; mask_allowed() agrees with it on
/// every (i, j) of a problem without document / block_sparse terms).
ATTNBENCH_HD void mask_row_bounds(const MaskDesc& m, int64_t i, int64_t lq, int64_t lk, int64_t* lo,
                                  int64_t* hi) {
  if (i >= lq) {
    *lo = 0;
    *hi = -1;
    return;
  }
  const int64_t off = lk - lq;
  int64_t h = lk - 1, l = 0;
  if (i + m.upper_tl < h) h = i + m.upper_tl;
  if (i + off + m.upper_br < h) h = i + off + m.upper_br;
  if (m.prefix_len >= 0) {
    const int64_t p = m.prefix_len - 1 > i ? m.prefix_len - 1 : i;
    if (p < h) h = p;
  }
  if (i + off + m.lower_br > l) l = i + off + m.lower_br;
  *lo = l;
  *hi = h;
}

/// mask(b, h, i, j) of docs/semantics.md section 3: true where attention is allowed.
/// No mask kind depends on h. i in [0, Sq), j in [0, Sk).
ATTNBENCH_HD bool mask_allowed(const MaskDesc& m, int64_t b, int64_t /*h*/, int64_t i, int64_t j) {
  int64_t sq = m.seq_q, sk = m.seq_k;
  if (m.seq_lens_q) {
    sq = m.seq_lens_q[b];
    sk = m.seq_lens_k[b];
    if (i >= sq || j >= sk) return false;
  }
  const int64_t d = j - i;
  const int64_t off = sk - sq;
  if (d > m.upper_tl) return false;
  if (d - off > m.upper_br) return false;
  if (d - off < m.lower_br) return false;
  if (m.prefix_len >= 0 && !(j < m.prefix_len || j <= i)) return false;
  if (m.doc_ids) {
    const int32_t di = m.doc_ids[b * m.seq_q + i];
    if (di < 0 || di != m.doc_ids[b * m.seq_q + j]) return false;
  }
  if (m.block_density >= 0.0 &&
      !block_sparse_keep(m.block_seed, i / kBlockSparseBlock, j / kBlockSparseBlock, m.block_density))
    return false;
  return true;
}

/// Score-mod kinds (mirror of ScoreMod::Kind, usable in device code).
enum class ScoreModKind : int32_t { none = 0, softcap = 1, alibi = 2, rel_bias = 3, offset_bias = 4 };

/// A problem's score mod, flattened. `bias` / `offset` borrow host or device arrays.
struct ScoreModDesc {
  ScoreModKind kind = ScoreModKind::none;
  double cap = 0.0;             ///< softcap
  int64_t max_distance = 0;     ///< rel_bias m
  int64_t heads_q = 1;          ///< Hq (alibi slopes, rel_bias rows)
  const float* bias = nullptr;  ///< rel_bias [Hq, 2m+1] or offset_bias [size]
  const int32_t* offset = nullptr;  ///< offset_bias [Sk], values in [0, size)
};

/// ALiBi slope of query head h: 2^(-8 (h + 1) / Hq) (Press et al. 2022, "Train
/// Short, Test Long", section 3, generalised to any head count as in docs/semantics.md section 4).
template <class T>
ATTNBENCH_HD T alibi_slope(int64_t h, int64_t heads_q) {
  return static_cast<T>(exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(heads_q)));
}

/// Index into the learnable bias used by (h, i, j), or -1 when the mod has none.
ATTNBENCH_HD int64_t score_mod_bias_index(const ScoreModDesc& s, int64_t h, int64_t i, int64_t j) {
  if (s.kind == ScoreModKind::rel_bias) {
    int64_t r = i - j;
    r = r < -s.max_distance ? -s.max_distance : (r > s.max_distance ? s.max_distance : r);
    return h * (2 * s.max_distance + 1) + r + s.max_distance;
  }
  if (s.kind == ScoreModKind::offset_bias) return s.offset[j];
  return -1;
}

/// score_mod(s, b, h, i, j) on the scaled score s (FlexAttention semantics).
template <class T>
ATTNBENCH_HD T score_mod_apply(const ScoreModDesc& s, T x, int64_t h, int64_t i, int64_t j) {
  switch (s.kind) {
    case ScoreModKind::none: return x;
    case ScoreModKind::softcap: {
      const T cap = static_cast<T>(s.cap);
      return cap * tanh(x / cap);
    }
    case ScoreModKind::alibi: {
      const int64_t dist = i > j ? i - j : j - i;
      return x - alibi_slope<T>(h, s.heads_q) * static_cast<T>(dist);
    }
    case ScoreModKind::rel_bias:
    case ScoreModKind::offset_bias:
      return x + static_cast<T>(s.bias[score_mod_bias_index(s, h, i, j)]);
  }
  return x;
}

/// d score_mod / d s at the unmodified scaled score x (chain rule factor for dS).
/// The derivative with respect to a learnable bias entry is 1 (additive bias).
template <class T>
ATTNBENCH_HD T score_mod_grad(const ScoreModDesc& s, T x) {
  if (s.kind == ScoreModKind::softcap) {
    const T t = tanh(x / static_cast<T>(s.cap));
    return T(1) - t * t;
  }
  return T(1);
}

}  // namespace attnbench
