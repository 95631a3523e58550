// Host-side analysis for the cuDNN SDPA backend (see cudnn_plan.hpp).
#include "backends/cudnn/cudnn_plan.hpp"

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <map>
#include <set>
#include <sstream>

#include "harness/model/mask.hpp"
#include "harness/model/mask_desc.hpp"

namespace attnbench::cudnn_sdpa {

namespace {

std::string version_string(int64_t v) {
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

void set_strides(int64_t (&st)[4], int64_t a, int64_t b, int64_t c, int64_t d) {
  st[0] = a;
  st[1] = b;
  st[2] = c;
  st[3] = d;
}

/// Strides of a logical [n, h, s, d] tensor stored token-major (BSHD / THD).
void token_major(int64_t (&st)[4], int64_t s, int64_t h, int64_t d) { set_strides(st, s * h * d, d, h * d, 1); }
/// Strides of a logical [n, h, s, d] tensor stored BHSD.
void head_major(int64_t (&st)[4], int64_t s, int64_t h, int64_t d) { set_strides(st, h * s * d, s * d, d, 1); }

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

/// Head-dimension limits of cuDNN's fp16/bf16 SDPA forward and backward by
/// architecture (cudnn-frontend's support surface): empty when supported.
std::string head_dim_reason(int64_t dqk, int64_t dv, int sm, int64_t v) {
  if (dqk % 8 != 0 || dv % 8 != 0)
    return "head dims must be multiples of 8 for cuDNN SDPA (16-byte aligned rows); got Dqk=" +
           std::to_string(dqk) + ", Dv=" + std::to_string(dv);
  const int major = sm / 10;
  if (major == 9) {
    if (dqk > 256 || dv > 256)
      return "cuDNN SDPA on Hopper supports head dims up to 256; got Dqk=" + std::to_string(dqk) +
             ", Dv=" + std::to_string(dv);
    if (v >= 91100 && v < 91300 && dqk > 128 && dqk <= 192 && dv > 64 && dv <= 128 && dv != 128 && dqk != 192)
      return "cuDNN 9.11-9.12 backward on Hopper has a known bug for 128 < Dqk <= 192 with 64 < Dv < 128 "
             "(fixed in 9.13)";
    return {};
  }
  if (major == 10 && v >= 91100) {
    if ((dqk <= 128 && dv <= 128) || (dqk == 192 && dv == 128)) return {};
    return "cuDNN SDPA backward on Blackwell supports head dims up to 128 (or Dqk=192 with Dv=128); got Dqk=" +
           std::to_string(dqk) + ", Dv=" + std::to_string(dv);
  }
  if (dqk > 128 || dv > 128)
    return "cuDNN SDPA backward on compute capability " + std::to_string(sm) +
           " supports head dims up to 128; got Dqk=" + std::to_string(dqk) + ", Dv=" + std::to_string(dv);
  return {};
}

/// Executed pairs of one sequence: for each 128-row query tile, the 128-wide key
/// tiles between the smallest allowed key and the largest allowed key of its rows
/// (rows and columns clipped to the sequence), as the tile-skipping kernels do.
int64_t sequence_tiles_pairs(RowIntervals& rows, const Sequence& s) {
  int64_t pairs = 0;
  for (int64_t t0 = 0; t0 < s.q_len; t0 += kTile) {
    const int64_t t1 = std::min(s.q_len, t0 + kTile);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t r = t0; r < t1; ++r) {
      auto iv = rows.at(s.b, s.q_pos + r);
      if (!iv || iv->first > iv->second) continue;
      lo = std::min(lo, std::max<int64_t>(iv->first - s.k_pos, 0));
      hi = std::max(hi, std::min<int64_t>(iv->second - s.k_pos, s.k_len - 1));
    }
    if (lo > hi) continue;
    const int64_t k0 = (lo / kTile) * kTile;
    const int64_t k1 = std::min(s.k_len, (hi / kTile + 1) * kTile);
    pairs += (t1 - t0) * (k1 - k0);
  }
  return pairs;
}

/// Sets the sequence dims of `g` and the strides that depend on them.
void set_graph_dims(GraphSpec& g, int64_t n, int64_t sq, int64_t sk) {
  g.n = n;
  g.sq = sq;
  g.sk = sk;
  if (g.storage == Storage::bhsd) {
    head_major(g.q_stride, sq, g.hq, g.dqk);
    head_major(g.k_stride, sk, g.hkv, g.dqk);
    head_major(g.v_stride, sk, g.hkv, g.dv);
    head_major(g.o_stride, sq, g.hq, g.dv);
  } else {
    token_major(g.q_stride, sq, g.hq, g.dqk);
    token_major(g.k_stride, sk, g.hkv, g.dqk);
    token_major(g.v_stride, sk, g.hkv, g.dv);
    token_major(g.o_stride, sq, g.hq, g.dv);
  }
  if (g.ragged) set_strides(g.stats_stride, sq * g.hq, 1, g.hq, 1);
  else set_strides(g.stats_stride, g.hq * sq, sq, 1, 1);
}

/// Length class of a ragged sequence. Without bounds: 0 for len <= kTile, then
/// ceil(log2(ceil(len / kTile))) (1: <= 256, 2: <= 512, ...). With bounds: the
/// index of the first bound >= len, or bounds.size().
int length_class(int64_t len, const std::vector<int64_t>& bounds) {
  if (!bounds.empty())
    return static_cast<int>(std::lower_bound(bounds.begin(), bounds.end(), len) - bounds.begin());
  int c = 0;
  for (int64_t tiles = (len + kTile - 1) / kTile; (int64_t{1} << c) < tiles;) ++c;
  return c;
}

/// The graph pair over `seqs` (all sequences of the case, or one length class of
/// a ragged case) with its per-sequence tensors: sequence lengths when a graph is
/// padded, ragged offsets (in elements, [n + 1]) when ragged.
GraphPart make_part(const GraphSpec& fwd, const GraphSpec& bwd, const std::vector<Sequence>& seqs, const Problem& p) {
  GraphPart part;
  part.fwd = fwd;
  part.bwd = bwd;
  if (fwd.ragged) {
    int64_t sq = 0, sk = 0;
    for (const auto& s : seqs) {
      sq = std::max(sq, s.q_len);
      sk = std::max(sk, s.k_len);
    }
    set_graph_dims(part.fwd, static_cast<int64_t>(seqs.size()), sq, sk);
    set_graph_dims(part.bwd, static_cast<int64_t>(seqs.size()), sq, sk);
  }
  if (part.fwd.padded || part.bwd.padded) {
    for (const auto& s : seqs) {
      part.seq_len_q.push_back(static_cast<int32_t>(s.q_len));
      part.seq_len_kv.push_back(static_cast<int32_t>(s.k_len));
    }
  }
  if (fwd.ragged) {
    auto offsets = [&](bool q_side, int64_t per_row) {
      std::vector<int64_t> off;
      for (const auto& s : seqs) off.push_back((q_side ? s.q_row : s.k_row) * per_row);
      // The last entry is the end of the token rows the sequences cover (the end of
      // the last sequence when they are in row order).
      int64_t end = 0;
      for (const auto& s : seqs) end = std::max(end, q_side ? s.q_row + s.q_len : s.k_row + s.k_len);
      off.push_back(end * per_row);
      return off;
    };
    part.rag_q = offsets(true, p.heads_q * p.head_dim);
    part.rag_k = offsets(false, p.heads_kv * p.head_dim);
    part.rag_v = offsets(false, p.heads_kv * p.head_dim_v);
    part.rag_o = offsets(true, p.heads_q * p.head_dim_v);
    part.rag_stats = offsets(true, p.heads_q);
  }
  part.tiles = part.fwd.n * ((part.fwd.sq + kTile - 1) / kTile) * part.fwd.hq;
  return part;
}

}  // namespace

std::string GraphSpec::key() const {
  std::ostringstream o;
  o << (backward ? "bwd" : "fwd") << '|' << static_cast<int>(dtype) << '|' << n << ',' << hq << ',' << hkv << ','
    << sq << ',' << sk << ',' << dqk << ',' << dv << '|';
  for (const auto* st : {q_stride, k_stride, v_stride, o_stride, stats_stride})
    o << st[0] << ',' << st[1] << ',' << st[2] << ',' << st[3] << ';';
  o << '|' << static_cast<int>(storage) << ragged << padded << fullhead_tokens << dq_direct << '|' << band.has_right << ',' << band.right << ',' << band.has_left << ','
    << band.left_bound << ',' << static_cast<int>(band.align) << '|' << float_bits(scale) << '|'
    << static_cast<int>(mod) << ',' << float_bits(cap) << '|' << neg_inf_lowest << '|' << version << '|' << device;
  return o.str();
}

int64_t dp_workspace_estimate(const GraphSpec& g) {
  auto up = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  return g.n * g.hq * up(g.sq, 64) * up(g.sk, 128) * 2;
}

std::string GraphSpec::describe() const {
  std::ostringstream o;
  o << (backward ? "bwd " : "fwd ") << to_string(dtype) << " n=" << n << " hq=" << hq << " hkv=" << hkv
    << " s=" << sq << "x" << sk << " d=" << dqk << "/" << dv;
  o << (storage == Storage::tokens ? " thd-ragged" : (storage == Storage::bhsd ? " bhsd" : " bshd"));
  if (padded) o << " seqlens";
  if (fullhead_tokens) o << " fullhead-thd";
  if (dq_direct) o << " dq-direct";
  if (band.any()) {
    o << " band(" << (band.align == Align::top_left ? "tl" : "br");
    if (band.has_right) o << ",R=" << band.right;
    if (band.has_left) o << ",L=" << band.left_bound;
    o << ")";
  }
  if (mod == ScoreMod::Kind::softcap) o << " softcap(" << cap << ")";
  if (mod == ScoreMod::Kind::alibi) o << " alibi";
  return o.str();
}

std::vector<int64_t> parse_split_bounds(const std::string& text) {
  std::vector<int64_t> out;
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("split_bounds=\"" + text + "\": " + why);
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find_first_of(",/", pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      throw bad("\"" + item + "\" is not an integer");
    }
    if (used != item.size()) throw bad("\"" + item + "\" is not an integer");
    if (v <= 0) throw bad("bounds must be positive");
    if (!out.empty() && v <= out.back()) throw bad("bounds must increase");
    out.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

HostTensor lse_from_stats(const CasePlan& plan, const std::vector<double>& stats, int64_t B, int64_t Hq,
                          int64_t Sq) {
  HostTensor lse({B, Hq, Sq});
  const auto n = static_cast<size_t>(B * Hq * Sq);
  if (plan.lse_src.empty()) {
    if (stats.size() < n) throw std::out_of_range("lse_from_stats: stats has fewer than B * Hq * Sq entries");
    std::copy(stats.begin(), stats.begin() + static_cast<std::ptrdiff_t>(n), lse.data.begin());
    return lse;
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t src = plan.lse_src.at(static_cast<size_t>(b * Sq + i));
        lse.data[static_cast<size_t>((b * Hq + h) * Sq + i)] =
            src < 0 ? -std::numeric_limits<double>::infinity()
                    : stats.at(static_cast<size_t>(src + h * plan.lse_head_stride));
      }
  return lse;
}

namespace {

// The steps of plan_case, in the order it runs them. A step that can refuse the
// case returns the reason (a non-empty string, or the string alternative of a
// variant); plan_case returns the first reason it gets, so the order of the
// steps is the order of precedence of the reasons.

/// Support surface that does not depend on the mask geometry: library version
/// and compute capability gates, dtype and head dims (head_dim_reason), score
/// mods that cuDNN cannot express (rel_bias, offset_bias) and mask terms that are
/// not a diagonal band (prefix_lm, block_sparse). Empty when supported.
std::string support_reason(const Problem& p, const Env& env) {
  const int64_t v = env.version;
  // ---------------------------------------------------------------- library gates
  if (v < 90000)
    return "requires cuDNN >= 9.0 (the runtime library reports " + version_string(v) + ")";
  if (v == 91000 || v == 91001)
    return "cuDNN 9.10.0 and 9.10.1 have known SDPA fp16/bf16 forward and backward bugs (cudnn-frontend refuses "
           "them); use 9.10.2 or newer";
  if (env.sm > 0 && env.sm < 80) return "cuDNN SDPA fp16/bf16 needs compute capability >= 8.0";
  if (p.dtype == DType::fp32)
    return "fp32 is not supported: cuDNN's fused SDPA engines take fp16 or bf16 Q/K/V/O (float32 only for "
           "accumulation and softmax statistics)";
  if (auto why = head_dim_reason(p.head_dim, p.head_dim_v, env.sm, v); !why.empty()) return why;

  // ---------------------------------------------------------------- score mods
  switch (p.score_mod.kind) {
    case ScoreMod::Kind::rel_bias:
      return "rel_bias is not expressible: cuDNN's SDPA bias is a dense [B|1, H, Sq, Sk] tensor (with a dense "
             "dBias); the [Hq, 2m+1] table would have to be materialised to Sq x Sk";
    case ScoreMod::Kind::offset_bias:
      return "offset_bias is not expressible: cuDNN's SDPA bias is a dense [B|1, H, Sq, Sk] tensor (with a dense "
             "dBias); the gathered bias[offset[j]] and its scatter-add gradient are not SDPA graph operations";
    default: break;
  }

  // ---------------------------------------------------------------- mask terms
  if (p.find_mask<PrefixLmTerm>())
    return "prefix_lm (j < prefix_len or j <= i) is not a diagonal band: cuDNN SDPA masks are sequence lengths "
           "plus one diagonal band";
  if (p.find_mask<BlockSparseTerm>())
    return "block_sparse: cuDNN's tile block masks (9.14+) exist only for the unified forward SDPA operation "
           "(no backward, 128 x 128 tiles only); not expressed by this backend";
  return {};
}

/// Storage mode of the case (cudnn_plan.hpp, "Storage modes"): ragged (token-major
/// rows) for document masks, the THD layout, and padding masks with a batch row
/// of zero valid length (with a note); otherwise the problem's BSHD or BHSD
/// layout. Sets plan.storage and returns whether the case is ragged.
bool choose_storage(CasePlan& plan, const Problem& p, const DocumentTerm* doc, const PaddingTerm* pad) {
  bool ragged = doc != nullptr || p.layout == Layout::thd;
  if (!ragged && pad) {
    for (int64_t b = 0; b < p.batch; ++b)
      if (p.valid_q(b) == 0 || p.valid_k(b) == 0) ragged = true;
    if (ragged)
      plan.notes.push_back("a batch row has a zero valid length: token-major storage with that row dropped "
                           "from the cuDNN sequences");
  }
  plan.storage = ragged ? Storage::tokens : (p.layout == Layout::bhsd ? Storage::bhsd : Storage::bshd);
  return ragged;
}

/// The cuDNN sequences of `p` before token rows are assigned: one per document
/// (each contiguous run of a non-negative id, lengths clipped to the row's valid
/// lengths, possibly 0) with a document mask, else one per batch row (its valid
/// lengths with a padding mask, else Sq and Sk). Refuses (returns the reason)
/// when a document id appears in two runs of one batch row.
std::variant<std::vector<Sequence>, std::string> make_sequences(const Problem& p, const DocumentTerm* doc,
                                                                const PaddingTerm* pad) {
  const int64_t B = p.batch, Sq = p.seq_q, Sk = p.seq_k;
  std::vector<Sequence> seqs;
  if (doc) {
    for (int64_t b = 0; b < B; ++b) {
      const auto& ids = doc->doc_ids.at(static_cast<size_t>(b));
      const int64_t vq = p.valid_q(b), vk = p.valid_k(b);
      std::set<int32_t> seen;
      for (int64_t s = 0; s < Sq;) {
        const int32_t id = ids[static_cast<size_t>(s)];
        int64_t e = s;
        while (e < Sq && ids[static_cast<size_t>(e)] == id) ++e;
        if (id >= 0) {
          if (!seen.insert(id).second)
            return "document ids of batch row " + std::to_string(b) + " are not contiguous (id " +
                   std::to_string(id) + " appears in two runs): a cuDNN sequence is one contiguous token range";
          Sequence q;
          q.b = b;
          q.q_pos = q.k_pos = s;
          q.q_len = std::max<int64_t>(0, std::min(e, vq) - s);
          q.k_len = std::max<int64_t>(0, std::min(e, vk) - s);
          seqs.push_back(q);
        }
        s = e;
      }
    }
  } else {
    for (int64_t b = 0; b < B; ++b) {
      Sequence q;
      q.b = b;
      q.q_len = pad ? p.valid_q(b) : Sq;
      q.k_len = pad ? p.valid_k(b) : Sk;
      seqs.push_back(q);
    }
  }
  return seqs;
}

/// Token rows of a ragged case: fills plan.q_row_of / k_row_of ([B * Sq], [B *
/// Sk], -1 where not stored) and plan.q_rows / k_rows (with kRowSlack), drops the
/// sequences with an empty side, gives the others their first token rows, and
/// orders them by env.seq_order (rows do not move).
void assign_token_rows(CasePlan& plan, std::vector<Sequence>& seqs, const Problem& p, bool doc, const Env& env) {
  const int64_t B = p.batch, Sq = p.seq_q, Sk = p.seq_k;
  // Token rows. Without documents: every position of a row up to its valid length
  // (THD) or the whole row. With documents: only the tokens of the cuDNN
  // sequences, so padding tokens, zero-length documents and positions past a
  // row's valid length have no row at all (their rows are fully masked, so
  // read_outputs gives them O = 0, LSE = -inf and zero gradients, and the timed
  // passes fix nothing up for them).
  std::vector<char> q_in(static_cast<size_t>(B * Sq), 0), k_in(static_cast<size_t>(B * Sk), 0);
  for (int64_t b = 0; b < B && !doc; ++b) {
    std::fill_n(q_in.begin() + b * Sq, p.layout == Layout::thd ? p.valid_q(b) : Sq, 1);
    std::fill_n(k_in.begin() + b * Sk, p.layout == Layout::thd ? p.valid_k(b) : Sk, 1);
  }
  for (const auto& s : seqs) {
    if (!doc || s.q_len == 0 || s.k_len == 0) continue;
    std::fill_n(q_in.begin() + s.b * Sq + s.q_pos, s.q_len, 1);
    std::fill_n(k_in.begin() + s.b * Sk + s.k_pos, s.k_len, 1);
  }
  plan.q_row_of.assign(static_cast<size_t>(B * Sq), -1);
  plan.k_row_of.assign(static_cast<size_t>(B * Sk), -1);
  int64_t rq = 0, rk = 0;
  for (size_t i = 0; i < q_in.size(); ++i)
    if (q_in[i]) plan.q_row_of[i] = rq++;
  for (size_t i = 0; i < k_in.size(); ++i)
    if (k_in[i]) plan.k_row_of[i] = rk++;
  plan.q_rows = rq + kRowSlack;
  plan.k_rows = rk + kRowSlack;
  std::vector<Sequence> kept;
  for (auto s : seqs) {
    if (s.q_len == 0 || s.k_len == 0) continue;  // fully masked rows / keys: not stored, or fixed up
    s.q_row = plan.q_row_of[static_cast<size_t>(s.b * Sq + s.q_pos)];
    s.k_row = plan.k_row_of[static_cast<size_t>(s.b * Sk + s.k_pos)];
    kept.push_back(s);
  }
  seqs.swap(kept);
  if (env.seq_order != SeqOrder::natural) {
    const bool longest = env.seq_order == SeqOrder::long_first;
    std::stable_sort(seqs.begin(), seqs.end(), [longest](const Sequence& a, const Sequence& b) {
      const int64_t la = std::max(a.q_len, a.k_len), lb = std::max(b.q_len, b.k_len);
      return longest ? la > lb : la < lb;
    });
  }
}

/// The one diagonal band of the case's graphs (cudnn_plan.hpp, "Diagonal band")
/// from the causal / window bounds of `m`: where every row with work has s_q ==
/// s_kv both alignments coincide (top-left, right bound = the tighter one);
/// otherwise top-left for a top-left causal alone, bottom-right for bottom-right
/// bounds alone. Refuses a top-left causal combined with bottom-right bounds
/// (two alignments), and a band on a document mask whose padding lengths differ
/// (the band would be aligned to the row, not to the documents).
std::variant<Band, std::string> diagonal_band(const Problem& p, const MaskDesc& m, bool doc, bool pad) {
  const int64_t B = p.batch, Sq = p.seq_q, Sk = p.seq_k;
  const bool tl = m.upper_tl < kNoBound;
  const bool br_hi = m.upper_br < kNoBound;
  const bool br_lo = m.lower_br > -kNoBound;
  bool zero_off = true;  // s_kv - s_q == 0 for every row that has work
  for (int64_t b = 0; b < B; ++b) {
    const int64_t vq = pad ? p.valid_q(b) : Sq, vk = pad ? p.valid_k(b) : Sk;
    if (vq > 0 && vk > 0 && vq != vk) zero_off = false;
  }
  if (doc && (tl || br_hi || br_lo) && !zero_off)
    return "document mask with causal / sliding window and padding lengths seq_lens_q != seq_lens_k: the band "
           "is aligned to the row's valid lengths, which per-document cuDNN sequences cannot express";
  Band band;
  if (tl || br_hi || br_lo) {
    if (zero_off) {
      band.align = Align::top_left;  // s_q == s_kv: both alignments coincide
      int64_t r = kNoBound;
      if (tl) r = std::min(r, m.upper_tl);
      if (br_hi) r = std::min(r, m.upper_br);
      if (r < kNoBound) {
        band.has_right = true;
        band.right = r;
      }
    } else if (tl && !br_hi && !br_lo) {
      band.align = Align::top_left;
      band.has_right = true;
      band.right = m.upper_tl;
    } else if (!tl) {
      band.align = Align::bottom_right;
      if (br_hi) {
        band.has_right = true;
        band.right = m.upper_br;
      }
    } else {
      return "causal top_left combined with bottom-right bounds (a bottom_right causal or a sliding window) when "
             "Sq != Sk needs two diagonal alignments; a cuDNN SDPA graph has one";
    }
    if (br_lo) {
      band.has_left = true;
      band.left_bound = -m.lower_br + 1;  // cuDNN's left bound counts the diagonal
    }
  }
  return band;
}

/// Score mods against the band and sequence lengths: softcap only on graphs
/// with neither, alibi only on dense graphs with exactly a top-left causal band
/// (right bound 0, no left bound). Empty when supported.
std::string score_mod_reason(const Problem& p, const Band& band, bool padded) {
  if (p.score_mod.kind == ScoreMod::Kind::softcap && (band.any() || padded))
    return "softcap is a cuDNN score modifier, and cuDNN (cudnn-frontend's support surface) disables causal / "
           "window bands, padding, THD and document layouts when a score modifier is present";
  if (p.score_mod.kind == ScoreMod::Kind::alibi) {
    if (padded)
      return "alibi with padding, THD or document masks is not expressed (cuDNN applies ALiBi to dense graphs "
             "with a top-left causal mask only)";
    if (!(band.has_right && band.right == 0 && !band.has_left && band.align == Align::top_left))
      return "alibi needs exactly a causal mask aligned top-left (or Sq == Sk): cuDNN's ALiBi adds slope * (j - i), "
             "which equals docs/semantics.md's -slope * |i - j| only where j <= i, and cuDNN requires right bound 0 without "
             "bottom-right alignment";
  }
  return {};
}

/// Version and architecture gates of a graph with sequence dims sq x sk (max
/// lengths when ragged) and `band`: 1 x 1, ragged (cuDNN >= 9.6, compute
/// capability >= 9.0 before 9.18.1, head dims multiples of 16), sliding-window
/// and bottom-right band bugs, decode with a causal bound. Empty when supported.
std::string graph_reason(const Problem& p, const Env& env, const Band& band, bool ragged, int64_t sq, int64_t sk) {
  const int64_t v = env.version;
  if (sq == 1 && sk == 1) return "s_q = s_kv = 1: cuDNN SDPA backward rejects it (cudnn-frontend known issue)";
  if (ragged) {
    if (v < 90600) return "THD / document layouts need cuDNN >= 9.6.0 (ragged GQA and ragged workspaces)";
    if (env.sm > 0 && env.sm < 90 && v < 91801)
      return "ragged (THD) SDPA needs compute capability >= 9.0 before cuDNN 9.18.1";
    if (p.head_dim % 16 != 0 || p.head_dim_v % 16 != 0)
      return "THD / document layouts need head dims that are multiples of 16: cuDNN's ragged backward "
             "workspaces have a known functional issue otherwise (cudnn-frontend disables them)";
  }
  if (band.has_left && !band.has_right && v < 91002)
    return "a sliding window without a right bound needs cuDNN >= 9.10.2";
  if (v == 91400 && band.has_left && !band.has_right && sk > 1024)
    return "cuDNN 9.14.0 known bug: sliding window without a causal bound and s_kv > 1024 (fixed in 9.14.1)";
  if (v <= 90900 && env.sm / 10 == 9 && band.has_left && band.align == Align::bottom_right && sq == sk)
    return "cuDNN <= 9.9 on Hopper: bottom-right sliding window with s_q == s_kv is not supported";
  if (v < 90600 && band.align == Align::bottom_right && band.any() && (sq % 64 != 0 || sk % 64 != 0))
    return "bottom-right bands need s_q and s_kv multiples of 64 before cuDNN 9.6.0";
  if (v < 90600 && band.align == Align::bottom_right && band.has_left && sq != sk)
    return "bottom-right sliding windows need s_q == s_kv before cuDNN 9.6.0";
  if (v <= 90900 && sq == 1 && band.has_right) return "decode (s_q = 1) with a causal bound needs cuDNN >= 9.10";
  return {};
}

/// plan.fwd and plan.bwd for graph dims n x sq x sk: the common fields from `p`,
/// `env` and `band`, then the backward forms (fullhead_tokens and dq_direct, see
/// Env) and the cuDNN <= 9.15.0 workaround (backward sequence lengths when s_kv %
/// 128 != 0, with a note).
void set_graph_specs(CasePlan& plan, const Problem& p, const Env& env, const Band& band, bool ragged, bool padded,
                     int64_t n, int64_t sq, int64_t sk) {
  const int64_t v = env.version;
  GraphSpec g;
  g.dtype = p.dtype;
  g.hq = p.heads_q;
  g.hkv = p.heads_kv;
  g.dqk = p.head_dim;
  g.dv = p.head_dim_v;
  g.storage = plan.storage;
  g.ragged = ragged;
  g.band = band;
  g.scale = static_cast<float>(p.softmax_scale());
  g.mod = p.score_mod.kind;
  g.cap = static_cast<float>(p.score_mod.cap);
  g.neg_inf_lowest = v < 91000;
  g.version = v;
  g.device = env.device;
  set_graph_dims(g, n, sq, sk);
  plan.fwd = g;
  plan.fwd.padded = padded;
  plan.bwd = g;
  plan.bwd.backward = true;
  plan.bwd.padded = padded;
  // cudnn-frontend gates max_total_seq_len on cuDNN >= 9.6 and D % 16 == 0
  plan.bwd.fullhead_tokens = env.fullhead_tokens && ragged && p.heads_q != p.heads_kv && v >= 90600 &&
                             p.head_dim % 16 == 0 && p.head_dim_v % 16 == 0;
  if (env.dq_direct != 0 && (ragged || env.dq_direct == 1) &&
      dp_workspace_estimate(plan.bwd) <= env.dp_workspace_limit)
    plan.bwd.dq_direct = true;
  if (!padded && v <= 91500 && sk % 128 != 0) {
    plan.bwd.padded = true;
    plan.notes.push_back("backward uses sequence-length tensors: cuDNN <= 9.15.0 workaround for s_kv % 128 != 0");
  }
}

/// The per-sequence tensors of the whole case (plan.seqs, seq_len_*, rag_*) and
/// plan.parts: the whole case as one part, or (ragged, Env::split_by_length, more
/// than one length class, no 1 x 1 class, at most kSplitMaxTileFraction of the
/// query tiles) its length classes, with notes; then plan.stats_elems.
void set_parts(CasePlan& plan, const std::vector<Sequence>& seqs, const Problem& p, const Env& env, bool ragged) {
  plan.seqs = seqs;
  GraphPart whole = make_part(plan.fwd, plan.bwd, seqs, p);
  plan.seq_len_q = whole.seq_len_q;
  plan.seq_len_kv = whole.seq_len_kv;
  plan.rag_q = whole.rag_q;
  plan.rag_k = whole.rag_k;
  plan.rag_v = whole.rag_v;
  plan.rag_o = whole.rag_o;
  plan.rag_stats = whole.rag_stats;
  if (ragged && env.split_by_length && seqs.size() > 1) {
    std::map<int, std::vector<Sequence>> classes;
    for (const auto& s : seqs) classes[length_class(std::max(s.q_len, s.k_len), env.split_bounds)].push_back(s);
    std::vector<GraphPart> split;
    int64_t tiles = 0;
    bool ok = classes.size() > 1;
    for (const auto& [cls, members] : classes) {
      split.push_back(make_part(plan.fwd, plan.bwd, members, p));
      tiles += split.back().tiles;
      if (split.back().fwd.sq == 1 && split.back().fwd.sk == 1) ok = false;  // cuDNN's backward rejects 1 x 1
    }
    if (ok && static_cast<double>(tiles) <= kSplitMaxTileFraction * static_cast<double>(whole.tiles)) {
      plan.notes.push_back("ragged sequences split into " + std::to_string(split.size()) +
                           " length classes (one graph each): " + std::to_string(tiles) + " query tiles instead of " +
                           std::to_string(whole.tiles));
      if (env.split_long_first) std::reverse(split.begin(), split.end());
      if (!env.split_forward) {
        for (auto& part : split) part.run_fwd = false;
        whole.run_bwd = false;
        split.insert(split.begin(), std::move(whole));
        plan.notes.push_back("the forward runs one graph over every sequence, the backward the length classes");
      }
      plan.parts = std::move(split);
    }
  }
  if (plan.parts.empty() && plan.has_graph) plan.parts.push_back(std::move(whole));
  if (ragged) {
    plan.stats_elems = plan.q_rows * p.heads_q;
  } else {
    plan.stats_elems = p.batch * p.heads_q * p.seq_q;
  }
}

/// Fix-up lists of the plan (CasePlan::dead_q, dead_k, stats_dead) and the LSE
/// gather (lse_src, set when ragged or some row is fully masked), from the row
/// intervals of the mask: a stored query row with an empty interval is dead, a
/// stored key no live row covers is dead. Returns a reason only if a mask row is
/// not one interval (excluded by the earlier steps).
std::string set_fixups(CasePlan& plan, const Problem& p, const MaskDesc& m, bool ragged) {
  const int64_t B = p.batch, Sq = p.seq_q, Sk = p.seq_k, Hq = p.heads_q, Hkv = p.heads_kv;
  plan.dead_q.heads = Hq;
  plan.dead_k.heads = Hkv;
  plan.stats_dead.heads = Hq;
  switch (plan.storage) {
    case Storage::bshd:
    case Storage::tokens:
      plan.dead_q.head_stride = 1;
      plan.dead_k.head_stride = 1;
      break;
    case Storage::bhsd:
      plan.dead_q.head_stride = Sq;
      plan.dead_k.head_stride = Sk;
      break;
  }
  plan.stats_dead.head_stride = ragged ? 1 : Sq;
  plan.lse_head_stride = ragged ? 1 : Sq;
  std::vector<int64_t> lse_src(static_cast<size_t>(B * Sq), -1);
  bool any_dead = false;
  RowIntervals rows(m);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> cover(static_cast<size_t>(Sk + 1), 0);
    for (int64_t i = 0; i < Sq; ++i) {
      const int64_t row = ragged ? plan.q_row_of[static_cast<size_t>(b * Sq + i)] : 0;
      const bool stored = !ragged || row >= 0;
      auto iv = rows.at(b, i);
      if (!iv) return "internal: a mask row is not one interval";  // excluded above (contiguous documents)
      const bool dead = iv->first > iv->second;
      const int64_t q_unit = plan.storage == Storage::bshd   ? (b * Sq + i) * Hq
                             : plan.storage == Storage::bhsd ? b * Hq * Sq + i
                                                             : row * Hq;
      const int64_t stats_unit = ragged ? row * Hq : b * Hq * Sq + i;
      if (dead) {
        any_dead = true;
        if (stored) {
          plan.dead_q.unit.push_back(q_unit);
          plan.stats_dead.unit.push_back(stats_unit);
        }
      } else {
        lse_src[static_cast<size_t>(b * Sq + i)] = stats_unit;
        cover[static_cast<size_t>(iv->first)] += 1;
        cover[static_cast<size_t>(iv->second + 1)] -= 1;
      }
    }
    int64_t running = 0;
    for (int64_t j = 0; j < Sk; ++j) {
      running += cover[static_cast<size_t>(j)];
      if (running > 0) continue;
      const int64_t row = ragged ? plan.k_row_of[static_cast<size_t>(b * Sk + j)] : 0;
      if (ragged && row < 0) continue;  // not stored (THD past the valid length)
      plan.dead_k.unit.push_back(plan.storage == Storage::bshd   ? (b * Sk + j) * Hkv
                                 : plan.storage == Storage::bhsd ? b * Hkv * Sk + j
                                                                 : row * Hkv);
    }
  }
  if (ragged || any_dead) plan.lse_src = std::move(lse_src);
  return {};
}

}  // namespace

std::variant<CasePlan, std::string> plan_case(const Problem& p, const Env& env) {
  if (auto why = support_reason(p, env); !why.empty()) return why;
  const DocumentTerm* doc = p.find_mask<DocumentTerm>();
  const PaddingTerm* pad = p.find_mask<PaddingTerm>();
  CasePlan plan;
  MaskArrays arrays;
  const MaskDesc m = make_mask_desc(p, arrays);

  // ---------------------------------------------------------------- storage and sequences
  const bool ragged = choose_storage(plan, p, doc, pad);
  auto made = make_sequences(p, doc, pad);
  if (auto* why = std::get_if<std::string>(&made)) return *why;
  std::vector<Sequence> seqs = std::move(std::get<std::vector<Sequence>>(made));
  if (ragged) assign_token_rows(plan, seqs, p, doc != nullptr, env);

  // ---------------------------------------------------------------- diagonal band
  auto banded = diagonal_band(p, m, doc != nullptr, pad != nullptr);
  if (auto* why = std::get_if<std::string>(&banded)) return *why;
  const Band band = std::get<Band>(banded);
  bool padded = ragged || pad != nullptr;
  if (!ragged && !padded && p.seq_q > p.seq_k &&
      (band.has_left || (band.has_right && band.align == Align::bottom_right))) {
    padded = true;
    plan.notes.push_back("Sq > Sk with a bottom-right band or a left bound: cuDNN needs sequence-length tensors "
                         "(set to Sq and Sk)");
  }

  // ---------------------------------------------------------------- score mod surface
  if (auto why = score_mod_reason(p, band, padded); !why.empty()) return why;

  // ---------------------------------------------------------------- graph dims and gates
  int64_t n = p.batch, sq = p.seq_q, sk = p.seq_k;
  if (ragged) {
    n = static_cast<int64_t>(seqs.size());
    sq = sk = 0;
    for (const auto& s : seqs) {
      sq = std::max(sq, s.q_len);
      sk = std::max(sk, s.k_len);
    }
  }
  plan.has_graph = n > 0;
  if (plan.has_graph)
    if (auto why = graph_reason(p, env, band, ragged, sq, sk); !why.empty()) return why;

  // ---------------------------------------------------------------- graph specs, parts, fix-ups
  set_graph_specs(plan, p, env, band, ragged, padded, n, sq, sk);
  set_parts(plan, seqs, p, env, ragged);
  if (auto why = set_fixups(plan, p, m, ragged); !why.empty()) return why;

  // ---------------------------------------------------------------- estimates and extras
  RowIntervals rows(m);
  for (const auto& s : seqs) plan.executed_pairs += sequence_tiles_pairs(rows, s) * p.heads_q;
  if (p.score_mod.kind == ScoreMod::Kind::alibi)
    for (int64_t h = 0; h < p.heads_q; ++h) plan.alibi_slopes.push_back(alibi_slope<float>(h, p.heads_q));
  return plan;
}

}  // namespace attnbench::cudnn_sdpa

#endif  // ATTNBENCH_HAVE_CUDNN
