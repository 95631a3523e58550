#include "harness/hunt/generate.hpp"

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

#include "harness/model/budget.hpp"
#include "harness/model/mask_desc.hpp"

namespace attnbench::hunt {

uint64_t Rng::next() {
  state_ += UINT64_C(0x9E3779B97F4A7C15);
  return splitmix64(state_);
}
int64_t Rng::uniform(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  return lo + static_cast<int64_t>(next() % span);
}
bool Rng::chance(double p) { return unit() < p; }
double Rng::unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

int64_t problem_work(const Problem& p) {
  const auto w = checked_product({p.batch, p.heads_q, p.seq_q, p.seq_k, p.head_dim + p.head_dim_v});
  return w ? *w / 128 : INT64_MAX;
}

namespace {

/// One of `choices` (value, weight), by weight.
template <class T>
T weighted(Rng& r, std::initializer_list<std::pair<T, double>> choices) {
  double total = 0;
  for (const auto& c : choices) total += c.second;
  double u = r.unit() * total;
  for (const auto& c : choices) {
    if (u < c.second) return c.first;
    u -= c.second;
  }
  return choices.begin()->first;
}

/// A sequence length in [1, max_seq]: mostly an edge (1, 2, tile sizes +-1,
/// primes), else uniform.
int64_t pick_seq(Rng& r, int64_t max_seq) {
  static const int64_t edges[] = {1,   2,   3,   5,   7,   8,   13,  15,  16,  17,  31,  32,  33,
                                  61,  63,  64,  65,  97,  127, 128, 129, 131, 191, 192, 193, 251,
                                  255, 256, 257, 383, 384, 385, 509, 511, 512, 513, 767, 768,
                                  769, 1021, 1023, 1024, 1025};
  std::vector<int64_t> fit;
  for (int64_t e : edges)
    if (e <= max_seq) fit.push_back(e);
  if (!fit.empty() && r.chance(0.7)) return fit[static_cast<size_t>(r.uniform(0, static_cast<int64_t>(fit.size()) - 1))];
  return r.uniform(1, std::max<int64_t>(1, max_seq));
}

/// A window bound for sequences of length about `s`: unbounded, 0, 1, inside, or past the end.
int64_t pick_bound(Rng& r, int64_t s) {
  switch (weighted<int>(r, {{0, 0.3}, {1, 0.15}, {2, 0.1}, {3, 0.3}, {4, 0.15}})) {
    case 0: return -1;
    case 1: return 0;
    case 2: return 1;
    case 3: return r.uniform(2, std::max<int64_t>(2, s));
    default: return s + r.uniform(0, 10);
  }
}

/// A length in [0, full]: empty, one, full, or uniform.
int64_t pick_len(Rng& r, int64_t full) {
  switch (weighted<int>(r, {{0, 0.15}, {1, 0.1}, {2, 0.35}, {3, 0.4}})) {
    case 0: return 0;
    case 1: return std::min<int64_t>(1, full);
    case 2: return full;
    default: return r.uniform(0, full);
  }
}

/// Document lengths of one row of `seq` tokens: zero-length and one-token
/// documents among longer ones, sometimes stopping short (trailing padding, id -1).
std::vector<int64_t> pick_doc_lengths(Rng& r, int64_t seq) {
  std::vector<int64_t> out;
  int64_t left = seq;
  const int64_t typical = std::max<int64_t>(2, seq / r.uniform(1, 6));
  while (left > 0) {
    if (r.chance(0.08)) break;  // the rest is padding
    int64_t len = weighted<int>(r, {{0, 0.12}, {1, 0.18}, {2, 0.7}}) == 0 ? 0 : 1;
    if (len == 1 && r.chance(0.8)) len = r.uniform(2, typical);
    len = std::min(len, left);
    out.push_back(len);
    left -= len;
  }
  if (r.chance(0.1)) out.push_back(0);  // a trailing empty document
  return out;
}

/// The document term of a row set: contiguous runs from lengths (mostly), or
/// scattered ids in [-1, 3] (documents need not be contiguous).
DocumentTerm pick_documents(Rng& r, int64_t batch, int64_t seq) {
  if (r.chance(0.85)) {
    std::vector<std::vector<int64_t>> lengths;
    for (int64_t b = 0; b < batch; ++b) lengths.push_back(pick_doc_lengths(r, seq));
    return document_term_from_lengths(lengths, seq);
  }
  DocumentTerm d;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < seq; ++t) ids.push_back(static_cast<int32_t>(r.uniform(-1, 3)));
    d.doc_ids.push_back(std::move(ids));
  }
  return d;
}

/// Which mask kinds a problem gets (before its sizes are known).
struct MaskPlan {
  bool causal, window, document, prefix, padding, sparse;
};

/// Batch, heads, head dims and sequence lengths, then shrunk into the work budget.
void pick_sizes(Rng& r, const GenLimits& lim, const MaskPlan& plan, Problem& p) {
  p.batch = std::min(lim.max_batch, weighted<int64_t>(r, {{1, 0.4}, {2, 0.3}, {3, 0.15}, {4, 0.15}}));
  p.heads_kv = weighted<int64_t>(r, {{1, 0.4}, {2, 0.3}, {3, 0.1}, {4, 0.2}});
  int64_t group = weighted<int64_t>(r, {{1, 0.4}, {2, 0.2}, {3, 0.1}, {4, 0.15}, {8, 0.15}});
  p.heads_kv = std::min(p.heads_kv, std::max<int64_t>(1, lim.max_heads_q));
  while (group > 1 && p.heads_kv * group > lim.max_heads_q) --group;
  p.heads_q = p.heads_kv * group;
  p.head_dim = weighted<int64_t>(r, {{64, 0.35}, {128, 0.3}, {0, 0.35}});
  if (p.head_dim == 0) p.head_dim = weighted<int64_t>(r, {{1, 0.1}, {8, 0.15}, {16, 0.15}, {32, 0.2}, {40, 0.1},
                                                            {80, 0.1}, {96, 0.1}, {256, 0.1}});
  p.head_dim_v = r.chance(0.85) ? p.head_dim : weighted<int64_t>(r, {{16, 0.2}, {32, 0.2}, {64, 0.3}, {128, 0.3}});
  const int64_t max_seq = std::max<int64_t>(1, lim.max_seq);
  p.seq_q = pick_seq(r, max_seq);
  p.seq_k = plan.document || r.chance(0.4) ? p.seq_q : pick_seq(r, max_seq);
  const int64_t budget = std::max<int64_t>(1, lim.max_work);
  while (problem_work(p) > budget) {
    if (p.batch > 1 && r.chance(0.5)) {
      p.batch = (p.batch + 1) / 2;
    } else if (p.heads_q > 1 && r.chance(0.5)) {
      const int64_t g = p.heads_q / p.heads_kv;
      if (p.heads_kv > 1) p.heads_kv = (p.heads_kv + 1) / 2;
      p.heads_q = p.heads_kv * (p.heads_kv > 1 ? g : std::max<int64_t>(1, g / 2));
    } else if (p.seq_q > 1 || p.seq_k > 1) {
      const bool q = p.seq_q >= p.seq_k;
      int64_t& s = q ? p.seq_q : p.seq_k;
      s = pick_seq(r, std::max<int64_t>(1, s / 2));
      if (plan.document) p.seq_k = p.seq_q = s;
    } else {
      p.head_dim = std::max<int64_t>(1, p.head_dim / 2);
      p.head_dim_v = std::max<int64_t>(1, p.head_dim_v / 2);
    }
  }
}

/// The mask entries of `plan`, in a random order (the list is an AND).
void pick_mask(Rng& r, const MaskPlan& plan, Problem& p) {
  const int64_t s = std::max(p.seq_q, p.seq_k);
  if (plan.causal) p.mask.push_back(CausalTerm{r.chance(0.5) ? CausalAlign::top_left : CausalAlign::bottom_right});
  if (plan.window) p.mask.push_back(SlidingWindowTerm{pick_bound(r, s), pick_bound(r, s)});
  if (plan.document) p.mask.push_back(pick_documents(r, p.batch, p.seq_q));
  if (plan.prefix) {
    const int64_t len = weighted<int>(r, {{0, 0.2}, {1, 0.2}, {2, 0.4}, {3, 0.1}, {4, 0.1}});
    p.mask.push_back(PrefixLmTerm{len == 0 ? 0 : len == 1 ? 1 : len == 2 ? r.uniform(0, p.seq_k) : len == 3 ? p.seq_k : p.seq_k + 5});
  }
  if (plan.padding) {
    PaddingTerm t;
    for (int64_t b = 0; b < p.batch; ++b) {
      t.seq_lens_q.push_back(pick_len(r, p.seq_q));
      t.seq_lens_k.push_back(pick_len(r, p.seq_k));
    }
    p.mask.push_back(std::move(t));
  }
  if (plan.sparse) {
    const double d = weighted<double>(r, {{0.0, 0.2}, {1.0, 0.2}, {-1.0, 0.6}});
    p.mask.push_back(BlockSparseTerm{d < 0 ? r.unit() : d, r.next() >> 40});
  }
  for (size_t i = p.mask.size(); i > 1; --i)
    std::swap(p.mask[i - 1], p.mask[static_cast<size_t>(r.uniform(0, static_cast<int64_t>(i) - 1))]);
}

ScoreMod pick_score_mod(Rng& r) {
  ScoreMod s;
  s.kind = weighted<ScoreMod::Kind>(r, {{ScoreMod::Kind::none, 0.5},
                                        {ScoreMod::Kind::softcap, 0.15},
                                        {ScoreMod::Kind::alibi, 0.12},
                                        {ScoreMod::Kind::rel_bias, 0.12},
                                        {ScoreMod::Kind::offset_bias, 0.11}});
  if (s.kind == ScoreMod::Kind::softcap) s.cap = weighted<double>(r, {{1.0, 0.25}, {5.0, 0.25}, {20.0, 0.25}, {50.0, 0.25}});
  if (s.kind == ScoreMod::Kind::rel_bias) s.max_distance = weighted<int64_t>(r, {{0, 0.25}, {1, 0.25}, {-1, 0.5}});
  if (s.max_distance < 0) s.max_distance = r.uniform(2, 64);
  if (s.kind == ScoreMod::Kind::offset_bias) s.size = r.chance(0.3) ? 1 : r.uniform(2, 64);
  return s;
}

}  // namespace

Problem generate_problem(uint64_t seed, uint64_t index, const GenLimits& limits) {
  Rng r(splitmix64(seed ^ splitmix64(index + UINT64_C(0x632BE59BD9B4E019))));
  MaskPlan plan{};
  plan.causal = r.chance(0.35);
  plan.window = r.chance(0.3);
  plan.document = r.chance(0.25);
  plan.prefix = r.chance(0.12);
  plan.padding = !plan.document && r.chance(0.25);
  plan.sparse = r.chance(0.12);
  Problem p;
  pick_sizes(r, limits, plan, p);
  p.dtype = weighted<DType>(r, {{DType::bf16, 0.4}, {DType::fp16, 0.4}, {DType::fp32, 0.2}});
  p.layout = weighted<Layout>(r, {{Layout::bshd, 0.5}, {Layout::bhsd, 0.25}, {Layout::thd, 0.25}});
  if (r.chance(0.2)) p.scale = weighted<double>(r, {{0.05, 0.25}, {0.3, 0.25}, {1.0, 0.25}, {2.0, 0.25}});
  pick_mask(r, plan, p);
  p.score_mod = pick_score_mod(r);
  p.seed = r.next() >> 33;
  return canonical(p);
}

Problem canonical(const Problem& p) { return problem_from_json(to_json(p), "<generated problem>"); }

}  // namespace attnbench::hunt
