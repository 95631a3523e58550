#include "harness/hunt/shrink.hpp"

#include "harness/hunt/generate.hpp"

#include <algorithm>
#include <exception>
#include <set>
#include <utility>

namespace attnbench::hunt {

namespace {

/// Document runs (a change of id starts one), padding tokens and zero-length documents.
int64_t document_measure(const DocumentTerm& d) {
  int64_t m = 0;
  for (const auto& row : d.doc_ids) {
    int32_t prev = -2;
    for (int32_t id : row) {
      if (id == -1 || id != prev) ++m;
      prev = id;
    }
  }
  for (const auto& row : d.doc_lengths)
    for (int64_t l : row) m += l == 0 ? 1 : 0;
  return m;
}

int64_t term_measure(const Problem& p, const MaskTerm& t) {
  int64_t m = 4;  // being there at all
  if (auto* c = std::get_if<CausalTerm>(&t)) m += c->align == CausalAlign::top_left ? 1 : 0;
  if (auto* w = std::get_if<SlidingWindowTerm>(&t)) m += (w->left + 1) + (w->right + 1);
  if (auto* d = std::get_if<DocumentTerm>(&t)) m += document_measure(*d);
  if (auto* pl = std::get_if<PrefixLmTerm>(&t)) m += pl->prefix_len;
  if (auto* pad = std::get_if<PaddingTerm>(&t))
    for (size_t b = 0; b < pad->seq_lens_q.size(); ++b) m += (p.seq_q - pad->seq_lens_q[b]) + (p.seq_k - pad->seq_lens_k[b]);
  if (auto* bs = std::get_if<BlockSparseTerm>(&t)) m += (bs->density != 0.0 && bs->density != 1.0 ? 1 : 0) + (bs->seed != 0 ? 1 : 0);
  return m;
}

/// Rows [b0, b1) of p (per-row mask data sliced).
Problem keep_rows(const Problem& p, int64_t b0, int64_t b1) {
  Problem q = p;
  q.batch = b1 - b0;
  auto slice = [&](auto& v) { v = std::decay_t<decltype(v)>(v.begin() + b0, v.begin() + b1); };
  for (auto& t : q.mask) {
    if (auto* pad = std::get_if<PaddingTerm>(&t)) {
      slice(pad->seq_lens_q);
      slice(pad->seq_lens_k);
    } else if (auto* d = std::get_if<DocumentTerm>(&t)) {
      slice(d->doc_ids);
      if (!d->doc_lengths.empty()) slice(d->doc_lengths);
    }
  }
  return q;
}

/// p with Sq = sq and Sk = sk: padding lengths clamped, document rows cut.
Problem with_seq(const Problem& p, int64_t sq, int64_t sk) {
  Problem q = p;
  q.seq_q = sq;
  q.seq_k = sk;
  for (auto& t : q.mask) {
    if (auto* pad = std::get_if<PaddingTerm>(&t)) {
      for (auto& l : pad->seq_lens_q) l = std::min(l, sq);
      for (auto& l : pad->seq_lens_k) l = std::min(l, sk);
    } else if (auto* d = std::get_if<DocumentTerm>(&t)) {
      for (auto& row : d->doc_ids) row.resize(static_cast<size_t>(sq), -1);
      for (auto& row : d->doc_lengths) {
        std::vector<int64_t> cut;
        int64_t left = sq;
        for (int64_t l : row) {
          if (left <= 0 && l > 0) break;
          cut.push_back(std::min(l, left));
          left -= cut.back();
        }
        row = std::move(cut);
      }
    }
  }
  return q;
}

/// p with Sq = sq and Sk = sk, each row's padding lengths shortened by as much
/// (so a row with padding keeps some).
Problem with_seq_keeping_padding(const Problem& p, int64_t sq, int64_t sk) {
  Problem q = with_seq(p, sq, sk);
  const PaddingTerm* was = p.find_mask<PaddingTerm>();
  PaddingTerm* pad = q.find_mask<PaddingTerm>();
  for (size_t b = 0; b < pad->seq_lens_q.size(); ++b) {
    pad->seq_lens_q[b] = std::max<int64_t>(0, was->seq_lens_q[b] - (p.seq_q - sq));
    pad->seq_lens_k[b] = std::max<int64_t>(0, was->seq_lens_k[b] - (p.seq_k - sk));
  }
  return q;
}

/// p under a document mask with Sq = Sk = s, each row keeping its last s tokens
/// (so trailing padding and the last documents stay; leading documents shrink).
Problem with_seq_from_end(const Problem& p, int64_t s) {
  Problem q = with_seq(p, s, s);
  const DocumentTerm* was = p.find_mask<DocumentTerm>();
  DocumentTerm* d = q.find_mask<DocumentTerm>();
  const int64_t cut = p.seq_q - s;
  for (size_t b = 0; b < d->doc_ids.size(); ++b) {
    const auto& row = was->doc_ids[b];
    d->doc_ids[b].assign(row.begin() + cut, row.end());
  }
  for (size_t b = 0; b < d->doc_lengths.size(); ++b) {
    std::vector<int64_t> lengths = was->doc_lengths[b];
    int64_t drop = cut;
    for (auto& l : lengths) {
      const int64_t take = std::min(l, drop);
      l -= take;
      drop -= take;
    }
    d->doc_lengths[b] = lengths;
    d->doc_ids[b] = doc_ids_from_lengths(lengths, s);  // ids renumbered as the lengths say
  }
  return q;
}

/// p with mask entry i replaced by `t`.
Problem with_term(const Problem& p, size_t i, MaskTerm t) {
  Problem q = p;
  q.mask[i] = std::move(t);
  return q;
}

/// Smaller values than v (>= lo), the smallest first: lo, then v - d for d
/// halving from (v - lo) / 2 down to 1.
std::vector<int64_t> smaller_values(int64_t v, int64_t lo) {
  std::vector<int64_t> out;
  if (v <= lo) return out;
  out.push_back(lo);
  for (int64_t d = (v - lo) / 2; d >= 1; d /= 2)
    if (v - d > lo && (out.empty() || out.back() != v - d)) out.push_back(v - d);
  return out;
}

void batch_and_head_candidates(const Problem& p, std::vector<Problem>& out) {
  if (p.batch > 1) {
    for (int64_t b = 0; b < p.batch; ++b) out.push_back(keep_rows(p, b, b + 1));
    out.push_back(keep_rows(p, 0, p.batch / 2));
    out.push_back(keep_rows(p, p.batch / 2, p.batch));
  }
  const int64_t g = p.group_size();
  auto heads = [&](int64_t hkv, int64_t group) {
    Problem q = p;
    q.heads_kv = hkv;
    q.heads_q = hkv * group;
    out.push_back(q);
  };
  if (p.heads_kv > 1) heads(1, g);
  if (g > 1) heads(p.heads_kv, 1);
  for (int64_t v : smaller_values(g, 1)) heads(p.heads_kv, v);
  for (int64_t v : smaller_values(p.heads_kv, 1)) heads(v, g);
}

void seq_candidates(const Problem& p, std::vector<Problem>& out) {
  const bool tied = p.find_mask<DocumentTerm>() != nullptr;  // document: Sq = Sk
  if (tied) {
    for (int64_t v : smaller_values(p.seq_q, 1)) out.push_back(with_seq(p, v, v));
    for (int64_t v : smaller_values(p.seq_q, 1)) out.push_back(with_seq_from_end(p, v));
    return;
  }
  if (p.seq_q > 1 && p.seq_k > 1) out.push_back(with_seq(p, 1, 1));
  for (int64_t v : smaller_values(p.seq_q, 1)) out.push_back(with_seq(p, v, p.seq_k));
  for (int64_t v : smaller_values(p.seq_k, 1)) out.push_back(with_seq(p, p.seq_q, v));
  if (p.find_mask<PaddingTerm>()) {  // shorter, each row keeping its padding
    for (int64_t v : smaller_values(p.seq_q, 1)) out.push_back(with_seq_keeping_padding(p, v, p.seq_k));
    for (int64_t v : smaller_values(p.seq_k, 1)) out.push_back(with_seq_keeping_padding(p, p.seq_q, v));
  }
}

void head_dim_candidates(const Problem& p, std::vector<Problem>& out) {
  std::set<int64_t> dims = {1, 8, 16, 32, 64};
  for (int64_t d : smaller_values(p.head_dim, 1)) dims.insert(d);
  for (int64_t d : dims) {
    if (d < std::max(p.head_dim, p.head_dim_v)) {  // both (backends that need Dqk = Dv)
      Problem q = p;
      q.head_dim = q.head_dim_v = d;
      out.push_back(q);
    }
    if (d < p.head_dim) {
      Problem q = p;
      q.head_dim = d;
      out.push_back(q);
    }
    if (d < p.head_dim_v) {
      Problem q = p;
      q.head_dim_v = d;
      out.push_back(q);
    }
  }
}

/// Simpler documents: one per row, no zero-length ones, padding given to the
/// last document, neighbours merged.
void document_candidates(const Problem& p, size_t i, const DocumentTerm& d, std::vector<Problem>& out) {
  out.push_back(with_term(p, i, document_term_from_lengths(std::vector<std::vector<int64_t>>(
                                                               static_cast<size_t>(p.batch), {p.seq_q}),
                                                           p.seq_q)));
  if (d.doc_lengths.empty()) return;
  auto rebuild = [&](auto&& edit) {
    std::vector<std::vector<int64_t>> lengths = d.doc_lengths;
    for (auto& row : lengths) edit(row);
    out.push_back(with_term(p, i, document_term_from_lengths(lengths, p.seq_q)));
  };
  rebuild([](std::vector<int64_t>& row) { row.erase(std::remove(row.begin(), row.end(), 0), row.end()); });
  rebuild([&](std::vector<int64_t>& row) {
    int64_t sum = 0;
    for (int64_t l : row) sum += l;
    if (row.empty()) row.push_back(0);
    row.back() += p.seq_q - sum;
  });
  rebuild([](std::vector<int64_t>& row) {
    std::vector<int64_t> merged;
    for (size_t k = 0; k < row.size(); k += 2) merged.push_back(row[k] + (k + 1 < row.size() ? row[k + 1] : 0));
    row = std::move(merged);
  });
}

void mask_parameter_candidates(const Problem& p, std::vector<Problem>& out) {
  for (size_t i = 0; i < p.mask.size(); ++i) {
    const MaskTerm& t = p.mask[i];
    if (auto* c = std::get_if<CausalTerm>(&t); c && c->align == CausalAlign::top_left)
      out.push_back(with_term(p, i, CausalTerm{CausalAlign::bottom_right}));
    if (auto* w = std::get_if<SlidingWindowTerm>(&t)) {
      for (int64_t v : smaller_values(w->left, -1)) out.push_back(with_term(p, i, SlidingWindowTerm{v, w->right}));
      for (int64_t v : smaller_values(w->right, -1)) out.push_back(with_term(p, i, SlidingWindowTerm{w->left, v}));
    }
    if (auto* d = std::get_if<DocumentTerm>(&t)) document_candidates(p, i, *d, out);
    if (auto* pl = std::get_if<PrefixLmTerm>(&t))
      for (int64_t v : smaller_values(pl->prefix_len, 0)) out.push_back(with_term(p, i, PrefixLmTerm{v}));
    if (auto* pad = std::get_if<PaddingTerm>(&t)) {
      PaddingTerm full_q = *pad, full_k = *pad;
      std::fill(full_q.seq_lens_q.begin(), full_q.seq_lens_q.end(), p.seq_q);
      std::fill(full_k.seq_lens_k.begin(), full_k.seq_lens_k.end(), p.seq_k);
      out.push_back(with_term(p, i, full_q));
      out.push_back(with_term(p, i, full_k));
      for (size_t b = 0; b < pad->seq_lens_q.size(); ++b) {
        PaddingTerm row = *pad;
        row.seq_lens_q[b] = p.seq_q;
        row.seq_lens_k[b] = p.seq_k;
        out.push_back(with_term(p, i, row));
      }
    }
    if (auto* bs = std::get_if<BlockSparseTerm>(&t)) {
      out.push_back(with_term(p, i, BlockSparseTerm{1.0, 0}));
      out.push_back(with_term(p, i, BlockSparseTerm{0.0, 0}));
      out.push_back(with_term(p, i, BlockSparseTerm{1.0, bs->seed}));
      out.push_back(with_term(p, i, BlockSparseTerm{0.0, bs->seed}));
      out.push_back(with_term(p, i, BlockSparseTerm{bs->density, 0}));
    }
  }
}

void score_mod_and_rest_candidates(const Problem& p, std::vector<Problem>& out) {
  auto edit = [&](auto&& f) {
    Problem q = p;
    f(q);
    out.push_back(std::move(q));
  };
  if (p.score_mod.kind == ScoreMod::Kind::rel_bias)
    for (int64_t v : smaller_values(p.score_mod.max_distance, 0)) edit([&](Problem& q) { q.score_mod.max_distance = v; });
  if (p.score_mod.kind == ScoreMod::Kind::offset_bias)
    for (int64_t v : smaller_values(p.score_mod.size, 1)) edit([&](Problem& q) { q.score_mod.size = v; });
  if (p.layout != Layout::bshd) edit([](Problem& q) { q.layout = Layout::bshd; });
  if (p.scale) edit([](Problem& q) { q.scale.reset(); });
  if (p.seed != 0) edit([](Problem& q) { q.seed = 0; });
}

}  // namespace

int64_t shrink_measure(const Problem& p) {
  int64_t m = p.batch + p.heads_q + p.heads_kv + p.seq_q + p.seq_k + p.head_dim + p.head_dim_v;
  for (const auto& t : p.mask) m += term_measure(p, t);
  if (p.score_mod.kind != ScoreMod::Kind::none) m += 4 + p.score_mod.max_distance + std::max<int64_t>(0, p.score_mod.size - 1);
  m += (p.layout != Layout::bshd ? 1 : 0) + (p.scale ? 1 : 0) + (p.seed != 0 ? 1 : 0);
  return m;
}

std::vector<Problem> shrink_candidates(const Problem& p) {
  std::vector<Problem> raw;
  batch_and_head_candidates(p, raw);
  seq_candidates(p, raw);
  for (size_t i = 0; i < p.mask.size(); ++i) {
    Problem q = p;
    q.mask.erase(q.mask.begin() + static_cast<std::ptrdiff_t>(i));
    raw.push_back(std::move(q));
  }
  if (p.score_mod.kind != ScoreMod::Kind::none) {
    Problem q = p;
    q.score_mod = ScoreMod{};
    raw.push_back(std::move(q));
  }
  head_dim_candidates(p, raw);
  mask_parameter_candidates(p, raw);
  score_mod_and_rest_candidates(p, raw);
  const int64_t m = shrink_measure(p);
  std::vector<Problem> out;
  for (auto& q : raw) {
    if (shrink_measure(q) >= m) continue;
    try {
      q = canonical(q);  // validates; the form its problem file has
    } catch (const std::exception&) {
      continue;
    }
    if (shrink_measure(q) >= m) continue;
    out.push_back(std::move(q));
  }
  return out;
}

ShrinkResult shrink(const Problem& p, const std::function<bool(const Problem&)>& still_fails,
                    const std::function<bool()>& stop) {
  ShrinkResult r;
  r.problem = p;
  for (;;) {
    bool replaced = false;
    for (const Problem& q : shrink_candidates(r.problem)) {
      if (stop()) return r;
      ++r.tried;
      if (still_fails(q)) {
        r.problem = q;
        ++r.steps;
        replaced = true;
        break;
      }
    }
    if (!replaced) {
      r.complete = true;
      return r;
    }
  }
}

}  // namespace attnbench::hunt
