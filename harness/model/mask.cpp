#include "harness/model/mask.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace attnbench {

MaskDesc make_mask_desc(const Problem& p, MaskArrays& arrays) {
  MaskDesc m;
  m.seq_q = p.seq_q;
  m.seq_k = p.seq_k;
  arrays = MaskArrays{};
  for (const auto& term : p.mask) {
    if (auto* c = std::get_if<CausalTerm>(&term)) {
      if (c->align == CausalAlign::top_left) m.upper_tl = std::min<int64_t>(m.upper_tl, 0);
      else m.upper_br = std::min<int64_t>(m.upper_br, 0);
    } else if (auto* w = std::get_if<SlidingWindowTerm>(&term)) {
      if (w->right >= 0) m.upper_br = std::min<int64_t>(m.upper_br, w->right);
      if (w->left >= 0) m.lower_br = std::max<int64_t>(m.lower_br, -w->left);
    } else if (auto* d = std::get_if<DocumentTerm>(&term)) {
      arrays.doc_ids.reserve(static_cast<size_t>(p.batch * p.seq_q));
      for (const auto& row : d->doc_ids) arrays.doc_ids.insert(arrays.doc_ids.end(), row.begin(), row.end());
    } else if (auto* pl = std::get_if<PrefixLmTerm>(&term)) {
      m.prefix_len = pl->prefix_len;
    } else if (auto* pad = std::get_if<PaddingTerm>(&term)) {
      for (auto v : pad->seq_lens_q) arrays.seq_lens_q.push_back(static_cast<int32_t>(v));
      for (auto v : pad->seq_lens_k) arrays.seq_lens_k.push_back(static_cast<int32_t>(v));
    } else if (auto* bs = std::get_if<BlockSparseTerm>(&term)) {
      m.block_density = bs->density;
      m.block_seed = bs->seed;
    }
  }
  if (!arrays.doc_ids.empty()) m.doc_ids = arrays.doc_ids.data();
  if (!arrays.seq_lens_q.empty()) {
    m.seq_lens_q = arrays.seq_lens_q.data();
    m.seq_lens_k = arrays.seq_lens_k.data();
  }
  return m;
}

ScoreModDesc make_score_mod_desc(const Problem& p, const float* bias, const int32_t* offset) {
  ScoreModDesc s;
  s.kind = static_cast<ScoreModKind>(static_cast<int32_t>(p.score_mod.kind));
  s.cap = p.score_mod.cap;
  s.max_distance = p.score_mod.max_distance;
  s.heads_q = p.heads_q;
  s.bias = bias;
  s.offset = offset;
  return s;
}

bool allowed(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  MaskArrays arrays;
  MaskDesc m = make_mask_desc(p, arrays);
  return mask_allowed(m, b, h, i, j);
}

std::vector<uint8_t> materialize_mask(const Problem& p, int64_t max_elements) {
  const int64_t n = p.batch * p.seq_q * p.seq_k;
  if (n > max_elements)
    throw std::length_error("materialize_mask: B*Sq*Sk = " + std::to_string(n) + " exceeds the limit of " +
                            std::to_string(max_elements));
  MaskArrays arrays;
  MaskDesc m = make_mask_desc(p, arrays);
  std::vector<uint8_t> out(static_cast<size_t>(n));
  size_t idx = 0;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.seq_q; ++i)
      for (int64_t j = 0; j < p.seq_k; ++j) out[idx++] = mask_allowed(m, b, 0, i, j) ? 1 : 0;
  return out;
}

bool document_spans(const std::vector<int32_t>& doc_ids, int64_t batch, int64_t seq, std::vector<int32_t>* first,
                    std::vector<int32_t>* last) {
  if (batch < 0 || seq < 0 || seq > std::numeric_limits<int32_t>::max() ||
      static_cast<int64_t>(doc_ids.size()) != batch * seq)
    throw std::invalid_argument("document_spans: " + std::to_string(doc_ids.size()) + " document ids for batch " +
                                std::to_string(batch) + " x seq " + std::to_string(seq));
  first->assign(doc_ids.size(), 0);
  last->assign(doc_ids.size(), -1);
  std::unordered_set<int32_t> seen;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* ids = doc_ids.data() + b * seq;
    seen.clear();
    for (int64_t i = 0; i < seq;) {
      int64_t e = i;
      while (e < seq && ids[e] == ids[i]) ++e;  // the run [i, e)
      if (ids[i] >= 0) {
        if (!seen.insert(ids[i]).second) return false;  // a second run of this id
        std::fill(first->begin() + b * seq + i, first->begin() + b * seq + e, static_cast<int32_t>(i));
        std::fill(last->begin() + b * seq + i, last->begin() + b * seq + e, static_cast<int32_t>(e - 1));
      }
      i = e;
    }
  }
  return true;
}

}  // namespace attnbench
