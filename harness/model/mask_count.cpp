// Exact useful-pair counts and per-row allowed intervals (mask.hpp), computed
// from the interval decomposition of mask_interval.hpp: never materialises
// Sq x Sk and never evaluates mask_allowed pair by pair.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "harness/model/mask.hpp"
#include "harness/model/mask_interval.hpp"

namespace attnbench {
namespace {

/// Guard against descriptors whose arrays do not match the problem's shape
/// (a problem that skipped validate()); reading past them would be undefined.
void check_arrays(const Problem& p, const MaskArrays& a) {
  if (!a.doc_ids.empty() && static_cast<int64_t>(a.doc_ids.size()) != p.batch * p.seq_q)
    throw std::invalid_argument("mask: document ids hold " + std::to_string(a.doc_ids.size()) +
                                " entries, expected batch * seq_q = " + std::to_string(p.batch * p.seq_q));
  if (!a.seq_lens_q.empty() && (static_cast<int64_t>(a.seq_lens_q.size()) != p.batch ||
                                static_cast<int64_t>(a.seq_lens_k.size()) != p.batch))
    throw std::invalid_argument("mask: padding lengths must have batch = " + std::to_string(p.batch) + " entries");
}

/// True when the ids [0, n) of one row form contiguous runs (every id >= 0 in
/// one maximal run). O(n + R log R).
bool ids_contiguous(const int32_t* ids, int64_t n) {
  std::vector<int32_t> run_ids;
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] >= 0 && (i == 0 || ids[i] != ids[i - 1])) run_ids.push_back(ids[i]);
  std::sort(run_ids.begin(), run_ids.end());
  return std::adjacent_find(run_ids.begin(), run_ids.end()) == run_ids.end();
}

}  // namespace

std::vector<int64_t> count_allowed_pairs_per_batch(const Problem& p) {
  MaskArrays arrays;
  const MaskDesc m = make_mask_desc(p, arrays);
  check_arrays(p, arrays);
  std::vector<int64_t> out(static_cast<size_t>(p.batch), 0);
  // Only the document and padding terms depend on the batch row.
  const bool per_batch = m.doc_ids != nullptr || m.seq_lens_q != nullptr;
  const int64_t nb = per_batch ? p.batch : std::min<int64_t>(p.batch, 1);
  detail::RowSegmenter seg(m);
  for (int64_t b = 0; b < nb; ++b) {
    seg.set_batch(b);
    int64_t n = 0;
    for (int64_t i = 0; i < p.seq_q; ++i) n += seg.count(i);
    out[static_cast<size_t>(b)] = n;
  }
  if (!per_batch)
    for (auto& v : out) v = out[0];
  return out;
}

int64_t count_allowed_pairs(const Problem& p) {
  int64_t n = 0;
  for (auto v : count_allowed_pairs_per_batch(p)) n += v;
  return n;
}

std::optional<std::pair<int64_t, int64_t>> row_interval(const Problem& /*p*/, const MaskDesc& m,
                                                        int64_t b, int64_t i) {
  return RowIntervals(m).at(b, i);
}

RowIntervals::RowIntervals(const MaskDesc& m) : m_(m) {}
RowIntervals::~RowIntervals() = default;

std::optional<std::pair<int64_t, int64_t>> RowIntervals::at(int64_t b, int64_t i) {
  // Interval masks: O(1). Documents: the row's id runs come from the runs of
  // batch row b (built when b changes, O(Sq log)); block_sparse: O(Sk / 128)
  // hashes. The answer is exact: a value iff the row's allowed set is empty or
  // one interval.
  if (!m_.doc_ids && m_.block_density < 0.0) {
    const detail::Interval r = detail::base_row_interval(m_, b, i);
    return std::pair<int64_t, int64_t>{r.lo, r.hi};
  }
  if (!seg_) seg_ = std::make_unique<detail::RowSegmenter>(m_);
  if (b != b_) {
    seg_->set_batch(b);
    b_ = b;
  }
  std::vector<detail::Interval> segs;
  seg_->segments(i, segs);
  if (segs.empty()) return std::pair<int64_t, int64_t>{0, -1};
  if (segs.size() == 1) return std::pair<int64_t, int64_t>{segs[0].lo, segs[0].hi};
  return std::nullopt;
}

bool mask_is_interval(const Problem& p) {
  if (p.find_mask<BlockSparseTerm>()) return false;
  if (const auto* d = p.find_mask<DocumentTerm>())
    for (const auto& row : d->doc_ids)
      if (!ids_contiguous(row.data(), static_cast<int64_t>(row.size()))) return false;
  return true;
}

}  // namespace attnbench
