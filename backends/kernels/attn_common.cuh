// Device helpers shared by the forward and backward kernels of the fused family:
// where a sequence lives (SeqInfo), the query tile of a CTA, the BlockMask walk and
// key spans. Tile spans are in attn_tiles.hpp and the score mod in the exp2 domain
// (ScoreMod2) in score_mod.hpp (both shared with the host, which tests them).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "backends/kernels/attn_params.hpp"
#include "backends/kernels/tile_scheduler.cuh"
#include "backends/kernels/attn_tiles.hpp"
#include "backends/kernels/score_mod.hpp"
#include "backends/kernels/mma_sm80.cuh"

namespace attnbench::kernels {

constexpr float kLn2 = 0.6931471805599453f;

/// Lengths and token offsets of one sequence (see AttnParams, "Lengths").
struct SeqInfo {
  int lq = 0, lk = 0;              ///< valid lengths
  int store_q = 0, store_k = 0;    ///< positions whose outputs are written
  int64_t tok0_q = 0, tok0_k = 0;  ///< THD token offset of position 0
};

__device__ __forceinline__ SeqInfo seq_info(const AttnParams& p, int b) {
  SeqInfo s;
  if (p.cu_seqlens_q) {
    s.tok0_q = p.cu_seqlens_q[b];
    s.tok0_k = p.cu_seqlens_k[b];
    s.lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    s.lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    s.store_q = s.lq;
    s.store_k = s.lk;
  } else {
    s.lq = p.seqlens_q ? p.seqlens_q[b] : p.seq_q;
    s.lk = p.seqlens_k ? p.seqlens_k[b] : p.seq_k;
    s.store_q = p.seq_q;
    s.store_k = p.seq_k;
  }
  return s;
}

/// The query tile a CTA of the forward and dQ kernels works on: a
/// TileScheduler tile of `items` with Hq / pack head chunks, query heads h0 ..
/// h0 + pack - 1 (GQA packing; all of KV head kvh), positions m0 .. m0 + Mq - 1
/// of sequence b, with Mq = rows / pack positions per head.
struct QueryTile {
  int h0 = 0, kvh = 0, b = 0, m0 = 0, Mq = 0;
  SeqInfo si;

  /// The tile of scheduler tile `w` (valid).
  __device__ __forceinline__ static QueryTile at(const AttnParams& p, const WorkTile& w, int pack, int rows) {
    QueryTile t;
    t.h0 = w.head_chunk * pack;
    t.kvh = t.h0 / p.group;
    t.b = w.item.seq;
    t.m0 = w.item.start;
    t.Mq = rows / pack;
    t.si = seq_info(p, t.b);
    return t;
  }
  /// The tile of a kernel launched with one tile per CTA; head_group: the L2
  /// head groups of its order (p.q_head_group, or 0: the portable kernels,
  /// whose registers spilled more with the grouped decode).
  __device__ __forceinline__ static QueryTile of(const AttnParams& p, const WorkItem* items, int pack, int rows,
                                                 int head_group) {
    return at(p, TileScheduler::own_tile(items, p.heads_q / pack, head_group), pack, rows);
  }
};

/// The key tile a CTA of the dK/dV kernels owns: the TileScheduler's tile of
/// `items` with one head chunk per KV head: keys n0 .. of sequence b, KV head kvh.
struct KeyTile {
  int kvh = 0, b = 0, n0 = 0;
  SeqInfo si;

  /// head_group: p.kv_head_group, or 0 (the portable dK/dV kernel: spilled more
  /// with the grouped decode, ptxas).
  __device__ __forceinline__ static KeyTile of(const AttnParams& p, const WorkItem* items, int head_group) {
    const WorkTile w = TileScheduler::own_tile(items, p.heads_kv, head_group);
    KeyTile t;
    t.kvh = w.head_chunk;
    t.b = w.item.seq;
    t.n0 = w.item.start;
    t.si = seq_info(p, t.b);
    return t;
  }
};

/// Element offsets of (b, position t, head h) in the Q-, K-, V-, O- and
/// LSE-strided tensors.
__device__ __forceinline__ int64_t q_off(const AttnParams& p, const SeqInfo& s, int b, int t, int h) {
  return b * p.q_batch_stride + (s.tok0_q + t) * p.q_row_stride + h * p.q_head_stride;
}
__device__ __forceinline__ int64_t k_off(const AttnParams& p, const SeqInfo& s, int b, int t, int h) {
  return b * p.k_batch_stride + (s.tok0_k + t) * p.k_row_stride + h * p.k_head_stride;
}
__device__ __forceinline__ int64_t v_off(const AttnParams& p, const SeqInfo& s, int b, int t, int h) {
  return b * p.v_batch_stride + (s.tok0_k + t) * p.v_row_stride + h * p.v_head_stride;
}
__device__ __forceinline__ int64_t o_off(const AttnParams& p, const SeqInfo& s, int b, int t, int h) {
  return b * p.o_batch_stride + (s.tok0_q + t) * p.o_row_stride + h * p.o_head_stride;
}
__device__ __forceinline__ int64_t lse_off(const AttnParams& p, const SeqInfo& s, int b, int t, int h) {
  return b * p.lse_batch_stride + (s.tok0_q + t) * p.lse_row_stride + h * p.lse_head_stride;
}

/// The tiles one CTA visits under a BlockMask (flex path): the blocks of the
/// partial list, then those of the full list, each cut into steps of `step`
/// positions (block = a multiple of step). The loop that rebuilds the lists:
///   for t in [0, count): at(t) -> (first position of the step, whether it is full)
struct BlockWalk {
  const int32_t* part = nullptr;  ///< partial block indices
  const int32_t* full = nullptr;  ///< full block indices
  int n_part = 0;                 ///< steps from partial blocks
  int count = 0;                  ///< all steps
  int sub = 1;                    ///< steps per block
  int block = 0, step = 0;

  __device__ __forceinline__ void at(int t, int* start, bool* is_full) const {
    const bool f = t >= n_part;
    const int u = f ? t - n_part : t;
    *start = __ldg((f ? full : part) + u / sub) * block + (u % sub) * step;
    *is_full = f;
  }
};

/// The walk over line `line` of a BlockMask's lists (num, idx: partial;
/// full_num, full_idx: full; `len` entries per line) in steps of `step` positions
/// of blocks of `block`.
__device__ __forceinline__ BlockWalk block_walk(const int32_t* num, const int32_t* idx, const int32_t* full_num,
                                                const int32_t* full_idx, int64_t line, int len, int block, int step) {
  BlockWalk w;
  w.sub = block / step;
  w.block = block;
  w.step = step;
  w.part = idx + line * len;
  w.full = full_idx + line * len;
  w.n_part = __ldg(num + line) * w.sub;
  w.count = w.n_part + __ldg(full_num + line) * w.sub;
  return w;
}

/// Key steps of `step` keys for query block qb of sequence b (forward, dQ).
__device__ __forceinline__ BlockWalk kv_walk(const BlockMaskView& bm, int b, int qb, int step) {
  return block_walk(bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices,
                    static_cast<int64_t>(b % bm.batch) * bm.num_q_blocks + qb, bm.num_kv_blocks, bm.kv_block, step);
}

/// Query steps of `step` rows for key block kb of sequence b (dK / dV).
__device__ __forceinline__ BlockWalk q_walk(const BlockMaskView& bm, int b, int kb, int step) {
  return block_walk(bm.q_num_blocks, bm.q_indices, bm.full_q_num_blocks, bm.full_q_indices,
                    static_cast<int64_t>(b % bm.batch) * bm.num_kv_blocks + kb, bm.num_q_blocks, bm.q_block, step);
}

/// The key tiles of `step` keys that the query tile [m0, m0 + rows) of sequence b
/// visits, as (first key, whether no pair of it is masked): the BlockMask lists of
/// its query block on the flex path, else the rows' key intervals (key_tiles,
/// tile_full). Shared by the forward and the dQ kernel. Off the flex path the
/// full steps are those whose keys lie in [full_lo, full_hi] (tile_full's two row
/// intervals, found once per tile instead of once per step).
template <bool kFlex>
struct KeySteps {
  BlockWalk walk;
  int n_first = 0, count = 0, step = 0, full_lo = 0, full_hi = 0;

  __device__ __forceinline__ KeySteps(const AttnParams& p, const SeqInfo& si, int b, int m0, int rows, int step_)
      : step(step_) {
    if constexpr (kFlex) {
      walk = kv_walk(p.bm, b, m0 / p.bm.q_block, step);
      count = walk.count;
    } else {
      count = key_tiles(p.mask, si.lq, si.lk, m0, rows, step, &n_first);
      tile_full_keys(p.mask, si.lq, si.lk, m0, rows, &full_lo, &full_hi);
    }
  }
  __device__ __forceinline__ void at(const AttnParams&, const SeqInfo&, int t, int* n0, bool* full) const {
    if constexpr (kFlex) {
      walk.at(t, n0, full);
    } else {
      *n0 = n_first + t * step;
      *full = *n0 >= full_lo && *n0 + step - 1 <= full_hi;
    }
  }
};

/// The query tiles of `rows` rows that the key tile [n0, n0 + keys) of sequence b
/// meets, as (first row, whether no pair of it is masked): the BlockMask lists of
/// its KV block on the flex path, else the keys' query interval (query_tiles,
/// tile_full). Shared by the portable and the Hopper dK/dV kernels.
template <bool kFlex>
struct QuerySteps {
  BlockWalk walk;
  int m_first = 0, count = 0, n0 = 0, keys = 0, rows = 0;

  __device__ __forceinline__ QuerySteps(const AttnParams& p, const SeqInfo& si, int b, int n0_, int keys_, int rows_)
      : n0(n0_), keys(keys_), rows(rows_) {
    if constexpr (kFlex) {
      walk = q_walk(p.bm, b, n0 / p.bm.kv_block, rows);
      count = walk.count;
    } else {
      count = query_tiles(p.mask, si.lq, si.lk, n0, keys, rows, &m_first);
    }
  }
  __device__ __forceinline__ void at(const AttnParams& p, const SeqInfo& si, int t, int* m0, bool* full) const {
    if constexpr (kFlex) {
      walk.at(t, m0, full);
    } else {
      *m0 = m_first + t * rows;
      *full = tile_full(p.mask, si.lq, si.lk, *m0, rows, n0, keys);
    }
  }
};

/// The allowed keys [lo, hi] of query row i of sequence b: RowBounds::of, and on
/// the flex path flex_row_bounds() (the row's document run too, for contiguous
/// documents).
template <bool kFlex>
__device__ __forceinline__ RowBounds row_bounds(const AttnParams& p, const SeqInfo& si, int b, int i) {
  if constexpr (kFlex)
    return flex_row_bounds(p.mask, p.doc_first, p.doc_last, b, i, si.lq, si.lk);
  else
    return RowBounds::of(p.mask, i, si.lq, si.lk);
}

/// A superset of the keys some rows may see: the union [lo, hi] of their key
/// intervals (row_bounds; empty rows ignored; empty when lo > hi). The Hopper
/// kernels skip the partial key (query) steps that lie outside the span of the
/// rows a warpgroup owns, so that tiles of a block mostly masked for those rows
/// (a 128 x 128 block across document boundaries) cost no products there.
struct KeySpan {
  int lo = INT_MAX, hi = -1;
  __device__ __forceinline__ void add(const RowBounds& r) {
    if (r.lo <= r.hi) {
      lo = min(lo, r.lo);
      hi = max(hi, r.hi);
    }
  }
  /// Whether keys [n0, n0 + n) meet the span.
  __device__ __forceinline__ bool meets(int n0, int n) const { return n0 <= hi && n0 + n - 1 >= lo; }
  /// The span over the 32 lanes of the warp (every lane gets it).
  __device__ __forceinline__ void warp_reduce() {
    lo = __reduce_min_sync(0xffffffffu, lo);
    hi = __reduce_max_sync(0xffffffffu, hi);
  }
};

/// The KeySpan of one thread's two rows (rb), reduced over its warp; lane 0 leaves
/// it in scratch[2 warp], [2 warp + 1] for warpgroup_span() after a barrier.
__device__ __forceinline__ void stage_warp_span(const RowBounds (&rb)[2], int* scratch, int warp, int lane) {
  KeySpan span;
  span.add(rb[0]);
  span.add(rb[1]);
  span.warp_reduce();
  if (lane == 0) {
    scratch[2 * warp] = span.lo;
    scratch[2 * warp + 1] = span.hi;
  }
}

/// The span of the rows of the 4 warps of a warpgroup (w0 = its first warp):
/// each warp's lane 0 leaves its warp_reduce()d span in scratch[2 w], [2 w + 1];
/// call after a barrier that orders those stores.
__device__ __forceinline__ KeySpan warpgroup_span(const int* scratch, int w0) {
  KeySpan s;
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    s.lo = min(s.lo, scratch[2 * (w0 + w)]);
    s.hi = max(s.hi, scratch[2 * (w0 + w) + 1]);
  }
  return s;
}

/// The flex path's mask of one thread's share of a partial tile, as bits: bit k
/// is set when pair pair_at(k) = (i, j) of sequence b is inside the valid lengths
/// and mask_allowed() (harness/model/mask_desc.hpp, the one definition of every
/// mask kind) allows it. A rolled loop: the general mask is evaluated once per
/// pair without unrolling its code into the tile's register-heavy loops.
template <int kBits, class PairAt>
__device__ __forceinline__ uint32_t flex_mask_bits(const AttnParams& p, const SeqInfo& si, int b, PairAt pair_at) {
  static_assert(kBits <= 32, "one 32-bit word per call");
  uint32_t bits = 0;
#pragma unroll 1
  for (int k = 0; k < kBits; ++k) {
    int i, j;
    pair_at(k, &i, &j);
    if (i < si.lq && j < si.lk && mask_allowed(p.mask, b, 0, i, j)) bits |= 1u << k;
  }
  return bits;
}

/// The flex pair mask of one thread's share of a partial query-row tile (its
/// rows row0 / row1 against keys n0 + 8 nt + 2 qd + c of kNt n-tiles, the m16n8
/// accumulator layout of the forward and dQ kernels): bit r * 2 kNt + 2 nt + c.
/// Off the flex path, on full tiles and for interval masks every pair is
/// allowed (the row interval RowBounds decides).
template <bool kFlex, int kNt>
struct RowPairBits {
  static_assert(!kFlex || kNt <= 8, "flex: one 32-bit word of mask bits per thread (4 kNt pairs)");
  uint32_t bits = ~0u;

  __device__ __forceinline__ RowPairBits(const AttnParams& p, const SeqInfo& si, int b, bool full, int n0, int qd,
                                         int row0, int row1) {
    if constexpr (kFlex) {
      if (!full && mask_needs_pairs(p.mask))
        bits = flex_mask_bits<4 * kNt>(p, si, b, [&](int k, int* i, int* j) {
          *i = k / (2 * kNt) ? row1 : row0;
          *j = n0 + (k % (2 * kNt)) / 2 * 8 + 2 * qd + k % 2;
        });
    }
  }
  /// Whether pair (row r, key n0 + 8 nt + 2 qd + c) is allowed.
  __device__ __forceinline__ bool allows(int r, int nt, int c) const {
    if constexpr (kFlex)
      return (bits >> (r * 2 * kNt + 2 * nt + c)) & 1u;
    else
      return true;
  }
};

}  // namespace attnbench::kernels
