// Internal helpers of the mask services (not a shared contract header): the
// allowed key positions of one query row as a few closed intervals, computed
// without evaluating mask_allowed pair by pair. Used by the exact pair counts
// (mask_count.cpp) and the BlockMask builder (block_mask.cpp); other components
// may use RowSegmenter to walk the rows of a problem quickly.
//
// Decomposition (docs/semantics.md section 3; mask_desc.hpp is the single source of truth
// and every function here must agree with mask_allowed exactly):
//   allowed(b, i) = base(b, i) ∩ docset(b, i) ∩ blockset(i / 128)
// where
//   base     = the interval left by padding, causal (both alignments), sliding window
//              and prefix_lm, all of which bound j from below or above
//              (prefix_lm: j < P or j <= i  <=>  j <= max(P - 1, i));
//   docset   = the union of the maximal runs of the row's document id (one run when
//              the ids are contiguous; nothing for id -1);
//   blockset = the union of the maximal runs of kept 128-wide key blocks of the
//              block_sparse pattern for the 128-row query block of i.
// Each family consists of disjoint, non-adjacent intervals, so their intersection
// is again disjoint and non-adjacent (two touching pieces would need two touching
// runs of one family): the segments returned are the maximal runs of allowed j.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "harness/model/mask_desc.hpp"

namespace attnbench::detail {

/// Closed interval [lo, hi] of key positions; empty when lo > hi.
struct Interval {
  int64_t lo = 0;
  int64_t hi = -1;
  /// True when no position lies in the interval.
  bool empty() const { return lo > hi; }
  /// Number of positions (0 when empty).
  int64_t size() const { return lo > hi ? 0 : hi - lo + 1; }
};

/// Intersection of two closed intervals (possibly empty, not normalised).
inline Interval intersect(Interval a, Interval b) {
  return {std::max(a.lo, b.lo), std::min(a.hi, b.hi)};
}

/// Interval of keys j allowed in row (b, i) by every term except document and
/// block_sparse: padding (i < Lq(b), j < Lk(b)), causal top_left (j - i <= upper_tl),
/// causal bottom_right and window (off + lower_br <= j - i <= off + upper_br with
/// off = Lk(b) - Lq(b), the valid lengths under padding, else Sk - Sq) and
/// prefix_lm (j <= max(prefix_len - 1, i)). i must lie in [0, m.seq_q).
/// An empty row is returned as {0, -1}. O(1).
inline Interval base_row_interval(const MaskDesc& m, int64_t b, int64_t i) {
  Interval r;
  mask_row_bounds(m, i, mask_valid_q(m, b), mask_valid_k(m, b), &r.lo, &r.hi);
  if (r.lo > r.hi) return {};
  return r;
}

/// Maximal runs of equal document id of one batch row, grouped by id, so that
/// the allowed keys of a query row (same id) are found without scanning the row.
class DocRuns {
 public:
  /// Build from ids[0, n) (n = Sq; -1 = padding). O(n + R log R) for R runs.
  void build(const int32_t* ids, int64_t n) {
    run_of_.resize(static_cast<size_t>(n));
    std::vector<Interval> runs;
    std::vector<int32_t> run_id;
    for (int64_t i = 0; i < n; ++i) {
      if (i == 0 || ids[i] != ids[i - 1]) {
        runs.push_back({i, i});
        run_id.push_back(ids[i]);
      } else {
        runs.back().hi = i;
      }
      run_of_[static_cast<size_t>(i)] = static_cast<int32_t>(runs.size() - 1);
    }
    // Runs of real documents ordered by (id, position).
    std::vector<int32_t> order;
    order.reserve(runs.size());
    for (size_t r = 0; r < runs.size(); ++r)
      if (run_id[r] >= 0) order.push_back(static_cast<int32_t>(r));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return run_id[static_cast<size_t>(a)] != run_id[static_cast<size_t>(b)]
                 ? run_id[static_cast<size_t>(a)] < run_id[static_cast<size_t>(b)]
                 : a < b;
    });
    grouped_.resize(order.size());
    group_begin_.assign(runs.size(), 0);
    group_end_.assign(runs.size(), 0);
    contiguous_ = true;
    for (size_t g0 = 0; g0 < order.size();) {
      size_t g1 = g0 + 1;
      while (g1 < order.size() && run_id[static_cast<size_t>(order[g1])] == run_id[static_cast<size_t>(order[g0])]) ++g1;
      if (g1 - g0 > 1) contiguous_ = false;
      for (size_t g = g0; g < g1; ++g) {
        const auto r = static_cast<size_t>(order[g]);
        grouped_[g] = runs[r];
        group_begin_[r] = static_cast<int32_t>(g0);
        group_end_[r] = static_cast<int32_t>(g1);
      }
      g0 = g1;
    }
  }
  /// True when every id >= 0 of the row forms a single run.
  bool contiguous() const { return contiguous_; }
  /// The runs (ascending, disjoint, non-adjacent) of the id at position i, as a
  /// [first, last) pointer range; empty for id -1.
  std::pair<const Interval*, const Interval*> runs_of(int64_t i) const {
    const auto r = static_cast<size_t>(run_of_[static_cast<size_t>(i)]);
    const Interval* base = grouped_.data();
    return {base + group_begin_[r], base + group_end_[r]};
  }

 private:
  std::vector<int32_t> run_of_;       // [n] positional run index of each position
  std::vector<int32_t> group_begin_;  // per positional run: its id's slice of grouped_
  std::vector<int32_t> group_end_;
  std::vector<Interval> grouped_;     // runs of ids >= 0 sorted by (id, position)
  bool contiguous_ = true;
};

/// The kept key blocks of the block_sparse pattern for one 128-row query block
/// (kBlockSparseBlock), as flags, prefix counts and maximal runs of key positions
/// clipped to [0, Sk). Recomputed (O(Sk / 128) hashes) only when the block changes.
class BlockSparseRow {
 public:
  /// Pattern of `m` (m.block_density >= 0 expected).
  explicit BlockSparseRow(const MaskDesc& m)
      : seed_(m.block_seed), density_(m.block_density), seq_k_(m.seq_k),
        nkb_((m.seq_k + kBlockSparseBlock - 1) / kBlockSparseBlock) {}

  /// Make query block qb (= i / 128) current.
  void select(int64_t qb) {
    if (qb == qb_) return;
    qb_ = qb;
    kept_.resize(static_cast<size_t>(nkb_));
    prefix_.resize(static_cast<size_t>(nkb_ + 1));
    runs_.clear();
    prefix_[0] = 0;
    for (int64_t kb = 0; kb < nkb_; ++kb) {
      const bool k = block_sparse_keep(seed_, qb, kb, density_);
      kept_[static_cast<size_t>(kb)] = k;
      prefix_[static_cast<size_t>(kb + 1)] = prefix_[static_cast<size_t>(kb)] + (k ? 1 : 0);
      if (!k) continue;
      const int64_t lo = kb * kBlockSparseBlock;
      const int64_t hi = std::min(seq_k_, lo + kBlockSparseBlock) - 1;
      if (kb > 0 && kept_[static_cast<size_t>(kb - 1)]) runs_.back().hi = hi;
      else runs_.push_back({lo, hi});
    }
  }
  /// Maximal runs of kept key positions of the current query block, ascending.
  const std::vector<Interval>& runs() const { return runs_; }
  /// Number of kept positions inside x (x within [0, Sk)). O(1).
  int64_t count(Interval x) const {
    if (x.empty()) return 0;
    const int64_t k0 = x.lo / kBlockSparseBlock, k1 = x.hi / kBlockSparseBlock;
    if (k0 == k1) return kept_[static_cast<size_t>(k0)] ? x.size() : 0;
    int64_t c = 0;
    if (kept_[static_cast<size_t>(k0)]) c += (k0 + 1) * kBlockSparseBlock - x.lo;
    if (kept_[static_cast<size_t>(k1)]) c += x.hi - k1 * kBlockSparseBlock + 1;
    c += kBlockSparseBlock * (prefix_[static_cast<size_t>(k1)] - prefix_[static_cast<size_t>(k0 + 1)]);
    return c;
  }

 private:
  uint64_t seed_;
  double density_;
  int64_t seq_k_;
  int64_t nkb_;
  int64_t qb_ = -1;
  std::vector<uint8_t> kept_;
  std::vector<int64_t> prefix_;
  std::vector<Interval> runs_;
};

/// Walks the query rows of one batch row at a time and gives, for each row, its
/// allowed keys as maximal segments (or just their number), exactly equal to
/// { j : mask_allowed(m, b, h, i, j) } for every h. Cost per row: O(1) for
/// interval masks; O(log R + runs of the row's id that meet the base interval)
/// for non-contiguous documents; plus O(kept-block runs met) for segments() of
/// block_sparse masks (count() stays O(1) per piece). The descriptor's arrays
/// must outlive the segmenter.
class RowSegmenter {
 public:
  /// Segmenter for descriptor m (see make_mask_desc).
  explicit RowSegmenter(const MaskDesc& m) : m_(m), bs_(m) {}

  /// Make batch row b current: builds its document runs, O(Sq + R log R).
  void set_batch(int64_t b) {
    b_ = b;
    if (m_.doc_ids) docs_.build(m_.doc_ids + b * m_.seq_q, m_.seq_q);
  }
  /// True when the current batch row's document ids (if any) are contiguous runs.
  bool docs_contiguous() const { return !m_.doc_ids || docs_.contiguous(); }

  /// Calls f(Interval) for each piece of base ∩ docset of row i (ascending,
  /// disjoint, non-adjacent, non-empty), before block_sparse is applied.
  template <class F>
  void for_each_piece(int64_t i, F&& f) const {
    const Interval r = base_row_interval(m_, b_, i);
    if (r.empty()) return;
    if (!m_.doc_ids) {
      f(r);
      return;
    }
    auto [first, last] = docs_.runs_of(i);
    first = std::partition_point(first, last, [&](const Interval& x) { return x.hi < r.lo; });
    for (; first != last && first->lo <= r.hi; ++first) f(intersect(*first, r));
  }

  /// Number of allowed keys of row i of the current batch row.
  int64_t count(int64_t i) {
    int64_t n = 0;
    if (m_.block_density >= 0.0) {
      bs_.select(i / kBlockSparseBlock);
      for_each_piece(i, [&](Interval x) { n += bs_.count(x); });
    } else {
      for_each_piece(i, [&](Interval x) { n += x.size(); });
    }
    return n;
  }

  /// Replace `out` by the allowed keys of row i of the current batch row as
  /// maximal segments (ascending, disjoint, non-adjacent).
  void segments(int64_t i, std::vector<Interval>& out) {
    out.clear();
    if (m_.block_density >= 0.0) {
      bs_.select(i / kBlockSparseBlock);
      const auto& runs = bs_.runs();
      for_each_piece(i, [&](Interval x) {
        auto it = std::partition_point(runs.begin(), runs.end(), [&](const Interval& k) { return k.hi < x.lo; });
        for (; it != runs.end() && it->lo <= x.hi; ++it) out.push_back(intersect(*it, x));
      });
    } else {
      for_each_piece(i, [&](Interval x) { out.push_back(x); });
    }
  }

 private:
  MaskDesc m_;
  BlockSparseRow bs_;
  DocRuns docs_;
  int64_t b_ = 0;
};

}  // namespace attnbench::detail
