// Which keys a query row sees and which tiles a CTA visits: host and device (the
// kernels and the host planner call the same functions with the same tile shapes,
// attn_params.hpp's fwd_block_n / bwd_block_m). Built on mask_row_bounds() of
// harness/model/mask_desc.hpp, the one definition of the interval masks.
#pragma once

#include <climits>
#include <cstdint>

#include "harness/model/hd.hpp"
#include "harness/model/mask_desc.hpp"

namespace attnbench::kernels {

/// The allowed keys [lo, hi] of query row i of a sequence with valid lengths
/// lq, lk (empty when lo > hi), clipped to [0, lk - 1]; rows at or past lq are empty.
struct RowBounds {
  int lo = 0;
  int hi = -1;
  ATTNBENCH_HD static RowBounds of(const MaskDesc& m, int i, int lq, int lk) {
    int64_t lo, hi;
    mask_row_bounds(m, i, lq, lk, &lo, &hi);
    RowBounds r;
    r.lo = static_cast<int>(lo < 0 ? 0 : (lo > lk ? lk : lo));
    r.hi = static_cast<int>(hi >= lk ? lk - 1 : (hi < -1 ? -1 : hi));
    return r;
  }
  ATTNBENCH_HD bool allows(int j) const { return j >= lo && j <= hi; }
};

/// The flex path's key interval of query row i of batch row b: RowBounds::of and,
/// when `first` is set (documents that are contiguous runs; document_spans() of
/// harness/model/mask.hpp builds first / last [batch x m.seq_q]), the row's
/// document run, the interval form of mask_allowed()'s document clause. Host and
/// device: the flex kernels' row_bounds() (attn_common.cuh) calls it.
ATTNBENCH_HD RowBounds flex_row_bounds(const MaskDesc& m, const int32_t* first, const int32_t* last, int b, int i,
                                       int lq, int lk) {
  RowBounds r = RowBounds::of(m, i, lq, lk);
  if (first != nullptr && i < lq) {
    const int64_t at = static_cast<int64_t>(b) * m.seq_q + i;
    if (first[at] > r.lo) r.lo = first[at];
    if (last[at] < r.hi) r.hi = last[at];
  }
  return r;
}

/// Whether the flex path's partial tiles must evaluate mask_allowed() pair by pair:
/// only for terms that are neither a row interval nor decided by the BlockMask
/// (document ids that are not contiguous runs; block_sparse on blocks that do not
/// divide its 128 x 128 pattern). flex_mask_form() (attn_plan.hpp) clears the others.
ATTNBENCH_HD bool mask_needs_pairs(const MaskDesc& m) {
  return m.doc_ids != nullptr || m.block_density >= 0.0;
}

/// Key positions [*begin, *end) that the valid rows among [i0, i1] may see: the
/// union of their intervals (both bounds are monotone in i, so the union's span
/// is [lo(i0), hi(last valid row)]). Empty (0, 0) when no row is valid.
ATTNBENCH_HD void key_span(const MaskDesc& m, int lq, int lk, int i0, int i1, int* begin, int* end) {
  if (i1 >= lq) i1 = lq - 1;
  if (i1 < i0) {
    *begin = 0;
    *end = 0;
    return;
  }
  const RowBounds a = RowBounds::of(m, i0, lq, lk), z = RowBounds::of(m, i1, lq, lk);
  *begin = a.lo;
  *end = z.hi + 1 > a.lo ? z.hi + 1 : a.lo;
}

/// Query positions [*begin, *end) whose intervals meet keys [j0, j1]: the rows with
/// hi(i) >= j0 and lo(i) <= j1, contiguous because both bounds are monotone in i
/// (two binary searches over [0, lq)).
ATTNBENCH_HD void query_span(const MaskDesc& m, int lq, int lk, int j0, int j1, int* begin, int* end) {
  int lo = 0, hi = lq;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (RowBounds::of(m, mid, lq, lk).hi >= j0) hi = mid; else lo = mid + 1;
  }
  const int first = lo;
  hi = lq;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (RowBounds::of(m, mid, lq, lk).lo > j1) hi = mid; else lo = mid + 1;
  }
  *begin = first;
  *end = lo > first ? lo : first;
}

/// The key tiles of width block_n that a query tile [m0, m0 + rows) visits: the
/// first tile start in *n_first, the count returned (0 when its rows see no key).
ATTNBENCH_HD int key_tiles(const MaskDesc& m, int lq, int lk, int m0, int rows, int block_n, int* n_first) {
  int begin, end;
  key_span(m, lq, lk, m0, m0 + rows - 1, &begin, &end);
  *n_first = begin / block_n * block_n;
  return end > begin ? (end - *n_first + block_n - 1) / block_n : 0;
}

/// The query tiles of height block_m that a key tile [n0, n0 + block_n) visits
/// (backward): the first query position in *m_first, the count returned.
ATTNBENCH_HD int query_tiles(const MaskDesc& m, int lq, int lk, int n0, int block_n, int block_m, int* m_first) {
  const int last = (n0 + block_n < lk ? n0 + block_n : lk) - 1;
  int begin = 0, end = 0;
  if (last >= n0) query_span(m, lq, lk, n0, last, &begin, &end);
  *m_first = begin;
  return end > begin ? (end - begin + block_m - 1) / block_m : 0;
}

/// The first key of the one key block of width block_n (blocks start at key 0 of
/// the sequence) that holds every allowed key of a row with interval rb, or -1
/// when the interval is empty or spans two blocks: whether the row meets exactly
/// one key tile (key_tiles of a one-row tile). The Hopper backward with atomic dQ
/// stores such a row's dQ once, directly in the element type, from the one CTA
/// (head_dim 64: the one warpgroup) whose keys are that block; its preprocess and
/// its conversion skip the row (attn_bwd_sm90.cuh). On packed CodeAlpaca
/// documents (mean 175 tokens, causal) 71% of the rows are direct at block_n = 128.
ATTNBENCH_HD int dq_direct_block(const RowBounds& rb, int block_n) {
  if (rb.lo > rb.hi) return -1;
  const int first = rb.lo / block_n * block_n;
  return rb.hi < first + block_n ? first : -1;
}

/// dq_direct_block() of query row t of a sequence with valid lengths lq, lk
/// (rows at or past lq: -1).
ATTNBENCH_HD int dq_row_direct_block(const MaskDesc& m, int t, int lq, int lk, int block_n) {
  if (t < 0 || t >= lq) return -1;
  return dq_direct_block(RowBounds::of(m, t, lq, lk), block_n);
}

/// The query rows [*d0, *d1) whose intervals lie inside the key block
/// [n0, n0 + block_n): lo(i) >= n0 and hi(i) < n0 + block_n (two binary searches
/// over [0, lq), both bounds being monotone in i). It holds every row whose
/// dq_direct_block() is n0, and possibly rows with an empty interval, whose dQ is
/// zero. The Hopper dK/dV kernel computes it once per CTA (warpgroup at head_dim
/// 64) to store those rows' dQ directly without a per-row interval.
ATTNBENCH_HD void direct_rows(const MaskDesc& m, int lq, int lk, int n0, int block_n, int* d0, int* d1) {
  int lo = 0, hi = lq;
  while (lo < hi) {  // the first row with lo(i) >= n0
    const int mid = (lo + hi) >> 1;
    if (RowBounds::of(m, mid, lq, lk).lo >= n0) hi = mid; else lo = mid + 1;
  }
  *d0 = lo;
  hi = lq;
  while (lo < hi) {  // the first row at or after d0 with hi(i) >= n0 + block_n
    const int mid = (lo + hi) >> 1;
    if (RowBounds::of(m, mid, lq, lk).hi >= n0 + block_n) hi = mid; else lo = mid + 1;
  }
  *d1 = lo;
}

/// The keys [*lo, *hi] that every valid row of the query tile [m0, m0 + rows)
/// allows (rows past lq are ignored; none valid: every key): the intersection of
/// the rows' intervals, whose bounds are monotone in the row, so the last valid
/// row's lo and the first row's hi.
ATTNBENCH_HD void tile_full_keys(const MaskDesc& m, int lq, int lk, int m0, int rows, int* lo, int* hi) {
  const int last = (m0 + rows < lq ? m0 + rows : lq) - 1;
  if (last < m0) {
    *lo = INT_MIN;
    *hi = INT_MAX;
    return;
  }
  *lo = RowBounds::of(m, last, lq, lk).lo;
  *hi = RowBounds::of(m, m0, lq, lk).hi;
}

/// True when every valid row of the query tile [m0, m0 + rows) allows every key
/// of [n0, n0 + block_n) (no per-element mask needed; rows past lq are ignored).
/// The same bounds as tile_full_keys (tests/test_attn_plan.cpp compares them), for
/// one key tile: the dK / dV kernels' query steps, whose tile moves every step.
/// (Written through tile_full_keys it made the Hopper dK/dV kernel 192
/// instructions longer and 6-11% slower: docs/results/2026-11-29-h200-session23.md.)
ATTNBENCH_HD bool tile_full(const MaskDesc& m, int lq, int lk, int m0, int rows, int n0, int block_n) {
  const int last = (m0 + rows < lq ? m0 + rows : lq) - 1;
  if (last < m0) return true;
  return n0 >= RowBounds::of(m, last, lq, lk).lo && n0 + block_n - 1 <= RowBounds::of(m, m0, lq, lk).hi;
}

}  // namespace attnbench::kernels
