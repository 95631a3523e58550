// Host-side mask services built on mask_desc.hpp: descriptor construction,
// dense materialisation (small problems), exact useful-pair counts without
// materialising Sq x Sk, and per-row allowed intervals.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "harness/model/mask_desc.hpp"
#include "harness/model/problem.hpp"

namespace attnbench {

/// Host arrays a MaskDesc / ScoreModDesc points into. Keep alive while the
/// descriptors are used.
struct MaskArrays {
  std::vector<int32_t> doc_ids;     ///< [B * Sq] (empty if no document mask)
  std::vector<int32_t> seq_lens_q;  ///< [B] (empty if no padding mask)
  std::vector<int32_t> seq_lens_k;  ///< [B]
};

/// Flatten p.mask into `arrays` and a descriptor pointing into them.
MaskDesc make_mask_desc(const Problem& p, MaskArrays& arrays);

/// Score-mod descriptor; `bias` ([bias_numel()] floats) and `offset` ([Sk]) may be
/// null when the mod has no learnable bias.
ScoreModDesc make_score_mod_desc(const Problem& p, const float* bias, const int32_t* offset);

/// mask(b, h, i, j) for a Problem (convenience; builds the descriptor each call,
/// so use MaskDesc in loops).
bool allowed(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j);

/// Dense mask [B][Sq][Sk] (row-major, 1 = allowed). Throws std::length_error if
/// B * Sq * Sk exceeds `max_elements` (default 2^28).
std::vector<uint8_t> materialize_mask(const Problem& p, int64_t max_elements = INT64_C(1) << 28);

/// Exact number of allowed (i, j) pairs of one head, summed over the batch
/// (useful work per head; multiply by Hq for all heads). Never materialises Sq x Sk:
/// O(B * Sq) for interval masks and contiguous documents, plus O(kept blocks) for
/// block_sparse; only non-contiguous doc ids fall back to per-row scans.
int64_t count_allowed_pairs(const Problem& p);

/// Allowed pairs of each batch row of one head: [B].
std::vector<int64_t> count_allowed_pairs_per_batch(const Problem& p);

/// Closed interval [lo, hi] of allowed j for row (b, i), or nullopt when the
/// allowed set of that row is not one interval (block_sparse; documents with
/// non-contiguous ids). An empty row returns lo > hi.
std::optional<std::pair<int64_t, int64_t>> row_interval(const Problem& p, const MaskDesc& m,
                                                        int64_t b, int64_t i);

namespace detail {
class RowSegmenter;
}

/// row_interval() for many rows of one descriptor: a document mask's runs of a
/// batch row are built once when the row changes (O(Sq log Sq)), then each
/// query is O(log) (row_interval() builds them on every call: O(Sq) per row,
/// seconds for the rows of a 32k-token pack). Same answers as row_interval().
/// Not thread-safe; `m` (and its arrays) must outlive it.
class RowIntervals {
 public:
  explicit RowIntervals(const MaskDesc& m);
  ~RowIntervals();
  RowIntervals(const RowIntervals&) = delete;
  RowIntervals& operator=(const RowIntervals&) = delete;
  std::optional<std::pair<int64_t, int64_t>> at(int64_t b, int64_t i);

 private:
  const MaskDesc& m_;
  std::unique_ptr<detail::RowSegmenter> seg_;
  int64_t b_ = -1;
};

/// True when every row's allowed set is an interval (no block_sparse, and doc ids,
/// if any, form contiguous runs).
bool mask_is_interval(const Problem& p);

/// The document term in its interval form (the form the flex kernels evaluate on
/// partial tiles, docs/semantics.md section 3): `doc_ids` is [batch * seq] (row-major,
/// -1 = padding). When every id >= 0 of each batch row occupies one contiguous run of
/// positions (packing always produces this), fills `first` / `last` ([batch * seq]
/// each) with the first and last position of the run holding each position, and
/// first = 0, last = -1 (an empty interval) where the id is < 0, so that for every
/// (b, i, j) with i, j < seq
///   doc_ids[b, i] >= 0 && doc_ids[b, i] == doc_ids[b, j]  <=>  first[b, i] <= j <= last[b, i],
/// the document clause of mask_allowed() (harness/model/mask_desc.hpp; pinned by
/// tests/test_mask.cpp and the flex GPU suite). Returns false, with `first` and
/// `last` unspecified, when an id of some row occupies two runs (no interval form).
/// Throws std::invalid_argument when doc_ids.size() != batch * seq or seq >= 2^31.
bool document_spans(const std::vector<int32_t>& doc_ids, int64_t batch, int64_t seq, std::vector<int32_t>* first,
                    std::vector<int32_t>* last);

}  // namespace attnbench
