// PLACEHOLDER (owned by the masks/BlockMask work): brute-force versions so the tree links.
#include "harness/mask.hpp"

namespace attnbench {

std::vector<int64_t> count_allowed_pairs_per_batch(const Problem& p) {
  MaskArrays arrays;
  MaskDesc m = make_mask_desc(p, arrays);
  std::vector<int64_t> out(static_cast<size_t>(p.batch), 0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.seq_q; ++i)
      for (int64_t j = 0; j < p.seq_k; ++j) out[static_cast<size_t>(b)] += mask_allowed(m, b, 0, i, j);
  return out;
}

int64_t count_allowed_pairs(const Problem& p) {
  int64_t n = 0;
  for (auto v : count_allowed_pairs_per_batch(p)) n += v;
  return n;
}

std::optional<std::pair<int64_t, int64_t>> row_interval(const Problem&, const MaskDesc&, int64_t, int64_t) {
  return std::nullopt;
}
bool mask_is_interval(const Problem&) { return false; }

}  // namespace attnbench
