#include "backends/kernels/attn_plan.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <numeric>
#include <stdexcept>
#include <string>

#include "backends/kernels/attn_tiles.hpp"
#include "backends/kernels/can_implement.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/thread_pool.hpp"

namespace attnbench::kernels {

namespace {

/// Stable order of items by descending cost.
std::vector<WorkItem> longest_first(std::vector<WorkItem> items, const std::vector<int64_t>& cost) {
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<WorkItem> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(items[i]);
  return out;
}

}  // namespace

int fwd_cta_rows(const MaskDesc& m, const SeqLengths& s, int pack, FwdPath path, int fwd_rows, int head_dim) {
  if (fwd_rows != 0) {
    if (const std::string why = fwd_rows_reason(pack, fwd_rows, false, 0, head_dim, path); !why.empty())
      throw std::invalid_argument("plan_tiles: " + why);
    return fwd_rows;
  }
  if (pack != 1 || path != FwdPath::sm90) return fwd_block_m(pack, head_dim, path);
  const int wide_keys = fwd_block_n(kFwdBlockMWide, path, head_dim);
  // Pairs the 128-row tiles (128-key steps) and the 64-row tiles (64-key steps) execute.
  int64_t wide = 0, narrow = 0;
  for (size_t b = 0; b < s.lq.size(); ++b) {
    int first;
    for (int m0 = 0; m0 < s.store_q[b]; m0 += kFwdBlockMWide)
      wide += int64_t{key_tiles(m, s.lq[b], s.lk[b], m0, kFwdBlockMWide, wide_keys, &first)} * kFwdBlockMWide *
              wide_keys;
    for (int m0 = 0; m0 < s.store_q[b]; m0 += kFwdBlockM)
      narrow += int64_t{key_tiles(m, s.lq[b], s.lk[b], m0, kFwdBlockM, kFwdBlockN, &first)} * kFwdBlockM * kFwdBlockN;
  }
  return wide > 0 && narrow * 100 <= wide * kNarrowFwdPairsPercent ? kFwdBlockM : kFwdBlockMWide;
}

TilePlan plan_tiles(const MaskDesc& m, const SeqLengths& s, int heads_q, int group, int pack, int head_dim,
                    FwdPath path, BwdPath bwd, int fwd_rows) {
  if (const std::string why = pack_reason(pack, group); !why.empty()) throw std::invalid_argument("plan_tiles: " + why);
  const int rows = fwd_cta_rows(m, s, pack, path, fwd_rows, head_dim);
  TilePlan t;
  t.pack = pack;
  t.tile_rows = rows / pack;
  t.tile_keys = fwd_block_n(rows, path, head_dim);
  t.dq_tile_rows = kDqBlockM / pack;
  t.bwd_tile_keys = bwd_block_n(bwd);
  const int bwd_rows = bwd_block_m(head_dim, bwd);
  const size_t n = s.lq.size();
  std::vector<WorkItem> q, dq, k;
  std::vector<int64_t> qc, dqc, kc;
  for (size_t b = 0; b < n; ++b) {
    const int lq = s.lq[b], lk = s.lk[b];
    int first;
    for (int m0 = 0; m0 < s.store_q[b]; m0 += t.tile_rows) {
      const int tiles = key_tiles(m, lq, lk, m0, t.tile_rows, t.tile_keys, &first);
      q.push_back({static_cast<int32_t>(b), m0});
      qc.push_back(tiles);
      t.fwd_tiles += tiles;
      t.executed_pairs += static_cast<int64_t>(tiles) * t.tile_keys * t.tile_rows * heads_q;
    }
    for (int m0 = 0; m0 < s.store_q[b]; m0 += t.dq_tile_rows) {
      dq.push_back({static_cast<int32_t>(b), m0});
      dqc.push_back(key_tiles(m, lq, lk, m0, t.dq_tile_rows, kDqBlockN, &first));
    }
    for (int n0 = 0; n0 < s.store_k[b]; n0 += t.bwd_tile_keys) {
      k.push_back({static_cast<int32_t>(b), n0});
      kc.push_back(static_cast<int64_t>(query_tiles(m, lq, lk, n0, t.bwd_tile_keys, bwd_rows, &first)));
    }
    if (bwd == BwdPath::sm90) {
      t.query_rows += lq;
      for (int i = 0; i < lq; ++i) t.dq_direct_rows += dq_row_direct_block(m, i, lq, lk, dq_direct_block_n(head_dim)) >= 0;
    }
  }
  t.q_items = longest_first(std::move(q), qc);
  t.dq_items = longest_first(std::move(dq), dqc);
  t.k_items = longest_first(std::move(k), kc);
  return t;
}

void group_by_sequence(std::vector<WorkItem>& items) {
  int32_t last = -1;
  for (const WorkItem& w : items) last = std::max(last, w.seq);
  std::vector<size_t> rank(static_cast<size_t>(last + 1), items.size());  // sequence -> index of its first item
  for (size_t i = 0; i < items.size(); ++i) rank[items[i].seq] = std::min(rank[items[i].seq], i);
  std::stable_sort(items.begin(), items.end(),
                   [&](const WorkItem& a, const WorkItem& b) { return rank[a.seq] < rank[b.seq]; });
}

int l2_head_group(int64_t budget_bytes, int64_t kv_head_bytes, int chunks_per_kv_head, int head_chunks) {
  if (kv_head_bytes <= 0 || chunks_per_kv_head <= 0 || head_chunks <= 0)
    throw std::invalid_argument("l2_head_group: kv_head_bytes " + std::to_string(kv_head_bytes) +
                                ", chunks_per_kv_head " + std::to_string(chunks_per_kv_head) + " and head_chunks " +
                                std::to_string(head_chunks) + " must be positive");
  const int64_t fit = std::max<int64_t>(1, budget_bytes / kv_head_bytes);
  const int64_t kv_heads = (head_chunks + chunks_per_kv_head - 1) / chunks_per_kv_head;
  if (fit >= kv_heads) return 0;
  const int64_t groups = (kv_heads + fit - 1) / fit;  // as few groups as fit, of even sizes
  const int64_t chunks = (kv_heads + groups - 1) / groups * chunks_per_kv_head;
  return chunks >= head_chunks ? 0 : static_cast<int>(chunks);
}

int flex_fwd_rows(const BlockMask& bm, FwdPath path, int head_dim) {
  const int rows = flex_block_rows(static_cast<int>(bm.q_block), head_dim, path);
  if (rows != bm.q_block || path != FwdPath::sm90 || bm.q_block != kFwdBlockMWide || bm.kv_num_blocks.empty())
    return rows;
  int64_t blocks = 0;
  for (size_t r = 0; r < bm.kv_num_blocks.size(); ++r) blocks += bm.kv_num_blocks[r] + bm.full_kv_num_blocks[r];
  const int64_t steps = blocks * (bm.kv_block / kFwdBlockN);
  return steps <= static_cast<int64_t>(kFlexShortWalkSteps) * static_cast<int64_t>(bm.kv_num_blocks.size())
             ? kFwdBlockM
             : static_cast<int>(bm.q_block);
}

TilePlan plan_block_tiles(const BlockMask& bm, int64_t batch, int heads_q, BwdPath bwd, int fwd_rows, int head_dim) {
  if (const std::string why = block_sizes_reason(static_cast<int>(bm.q_block), static_cast<int>(bm.kv_block));
      !why.empty())
    throw std::invalid_argument("plan_block_tiles: " + why);
  if (bm.B != 1 && bm.B != batch)
    throw std::invalid_argument("plan_block_tiles: BlockMask batch " + std::to_string(bm.B) +
                                " does not match the problem's " + std::to_string(batch));
  TilePlan t;
  t.bwd_tile_keys = bwd_block_n(bwd);
  if (bm.kv_block % t.bwd_tile_keys != 0)
    throw std::invalid_argument("plan_block_tiles: dK/dV tiles of " + std::to_string(t.bwd_tile_keys) +
                                " keys do not fit KV blocks of " + std::to_string(bm.kv_block));
  if (fwd_rows == 0) fwd_rows = flex_fwd_rows(bm, FwdPath::sm80, head_dim);
  // The plan does not know the path: rows the Hopper forward allows (the launch asks can_implement).
  if (const std::string why = fwd_rows_reason(1, fwd_rows, true, static_cast<int>(bm.q_block), head_dim, FwdPath::sm90);
      !why.empty())
    throw std::invalid_argument("plan_block_tiles: " + why);
  t.tile_rows = fwd_rows;
  t.tile_keys = fwd_block_n(kFwdBlockM);  // 64-key steps of the BlockMask's blocks on either path
  t.dq_tile_rows = kDqBlockM;
  auto row_blocks = [&](int64_t b, int64_t qb) -> int64_t {
    const int64_t r = bm.row(b, 0, qb);
    return bm.kv_num_blocks[static_cast<size_t>(r)] + bm.full_kv_num_blocks[static_cast<size_t>(r)];
  };
  auto col_blocks = [&](int64_t b, int64_t kb) -> int64_t {
    const int64_t c = bm.col(b, 0, kb);
    return bm.q_num_blocks[static_cast<size_t>(c)] + bm.full_q_num_blocks[static_cast<size_t>(c)];
  };
  std::vector<WorkItem> q, dq, k;
  std::vector<int64_t> qc, dqc, kc;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t qb = 0; qb < bm.num_q_blocks; ++qb) {
      for (int64_t m0 = qb * bm.q_block; m0 < (qb + 1) * bm.q_block; m0 += fwd_rows) {
        q.push_back({static_cast<int32_t>(b), static_cast<int32_t>(m0)});
        qc.push_back(row_blocks(b, qb));
        t.fwd_tiles += row_blocks(b, qb) * (bm.kv_block / t.tile_keys);
      }
    }
    for (int64_t m0 = 0; m0 < bm.seq_q; m0 += kDqBlockM) {
      dq.push_back({static_cast<int32_t>(b), static_cast<int32_t>(m0)});
      dqc.push_back(row_blocks(b, m0 / bm.q_block));
    }
    for (int64_t n0 = 0; n0 < bm.seq_k; n0 += t.bwd_tile_keys) {
      k.push_back({static_cast<int32_t>(b), static_cast<int32_t>(n0)});
      kc.push_back(col_blocks(b, n0 / bm.kv_block));
    }
  }
  t.q_items = longest_first(std::move(q), qc);
  t.dq_items = longest_first(std::move(dq), dqc);
  t.k_items = longest_first(std::move(k), kc);
  t.executed_pairs = bm.executed_pairs_per_head(batch) * heads_q;
  return t;
}

void offset_keys_csr(const std::vector<int32_t>& offset, int64_t size, std::vector<int32_t>* ptr,
                     std::vector<int32_t>* keys) {
  ptr->assign(static_cast<size_t>(size) + 1, 0);
  for (size_t j = 0; j < offset.size(); ++j) {
    if (offset[j] < 0 || offset[j] >= size)
      throw std::invalid_argument("offset_keys_csr: offset[" + std::to_string(j) + "] = " + std::to_string(offset[j]) +
                                  " outside [0, " + std::to_string(size) + ")");
    ++(*ptr)[static_cast<size_t>(offset[j]) + 1];
  }
  for (size_t e = 0; e < static_cast<size_t>(size); ++e) (*ptr)[e + 1] += (*ptr)[e];
  keys->assign(offset.size(), 0);
  std::vector<int32_t> fill(ptr->begin(), ptr->end() - 1);
  for (size_t j = 0; j < offset.size(); ++j) (*keys)[static_cast<size_t>(fill[static_cast<size_t>(offset[j])]++)] = static_cast<int32_t>(j);
}

int choose_pack(int group, double mean_seq_len) {
  if (mean_seq_len >= 4 * kFwdBlockM) return 1;
  for (int p : {4, 2})
    if (group % p == 0 && kFwdWarps % p == 0) return p;
  return 1;
}

bool document_runs(const DocumentTerm& d, size_t b, int64_t seq, std::vector<std::pair<int64_t, int64_t>>* out) {
  out->clear();
  if (b < d.doc_lengths.size() && !d.doc_lengths[b].empty()) {
    int64_t pos = 0;
    for (int64_t len : d.doc_lengths[b]) {
      out->push_back({pos, len});
      pos += len;
    }
    return true;
  }
  const std::vector<int32_t>& ids = d.doc_ids[b];
  std::set<int32_t> seen;
  for (int64_t i = 0; i < seq;) {
    int64_t j = i;
    while (j < seq && ids[static_cast<size_t>(j)] == ids[static_cast<size_t>(i)]) ++j;
    const int32_t id = ids[static_cast<size_t>(i)];
    if (id >= 0) {
      if (!seen.insert(id).second) return false;
      out->push_back({i, j - i});
    }
    i = j;
  }
  return true;
}

Sequences document_sequences(const Problem& p) {
  const DocumentTerm* d = p.find_mask<DocumentTerm>();
  if (!d) throw std::invalid_argument("document_sequences: the problem has no document mask");
  Sequences s;
  s.cu_q.push_back(0);
  std::vector<std::pair<int64_t, int64_t>> runs;
  for (int64_t b = 0; b < p.batch; ++b) {
    if (!document_runs(*d, static_cast<size_t>(b), p.seq_q, &runs))
      throw std::invalid_argument("document ids of row " + std::to_string(b) + " are not contiguous");
    for (const auto& [start, len] : runs) {
      s.row.push_back(static_cast<int32_t>(b));
      s.start_q.push_back(static_cast<int32_t>(start));
      s.cu_q.push_back(s.cu_q.back() + static_cast<int32_t>(len));
    }
  }
  s.start_k = s.start_q;
  s.cu_k = s.cu_q;
  return s;
}

Sequences row_sequences(const Problem& p) {
  Sequences s;
  s.cu_q.push_back(0);
  s.cu_k.push_back(0);
  for (int64_t b = 0; b < p.batch; ++b) {
    s.row.push_back(static_cast<int32_t>(b));
    s.start_q.push_back(0);
    s.start_k.push_back(0);
    s.cu_q.push_back(s.cu_q.back() + static_cast<int32_t>(p.valid_q(b)));
    s.cu_k.push_back(s.cu_k.back() + static_cast<int32_t>(p.valid_k(b)));
  }
  return s;
}

namespace {

/// Packed tokens of one task of for_each_token_row (per head): a long document
/// spreads over the pool, and many short ones share a task.
constexpr int64_t kTokensPerTask = 256;

/// fn(logical, packed) for every stored token row of a [B, H, S, D] tensor of
/// shape `shape` packed by `s` (the q side: cu_q / start_q; the k side: cu_k /
/// start_k): the element offsets of its D values in the logical and the packed
/// [T, H, D] buffer. (block of kTokensPerTask tokens, head) pairs run as tasks of
/// the pass pool (rows are disjoint): the one walk of gather, scatter, encode and
/// decode.
template <class Fn>
void for_each_token_row(const std::vector<int64_t>& shape, const Sequences& s, bool k_side, Fn&& fn) {
  const int64_t H = shape[1], S = shape[2], D = shape[3];
  const std::vector<int32_t>& cu = k_side ? s.cu_k : s.cu_q;
  const std::vector<int32_t>& start = k_side ? s.start_k : s.start_q;
  const int64_t T = cu.back(), blocks = (T + kTokensPerTask - 1) / kTokensPerTask;
  parallel_pass(blocks * H, [&](int64_t task) {
    const int64_t h = task % H, t0 = task / H * kTokensPerTask, t1 = std::min(T, t0 + kTokensPerTask);
    // The sequence holding token t0 (the last one starting at or before it: zero-length ones are skipped).
    int64_t q = std::upper_bound(cu.begin(), cu.end(), static_cast<int32_t>(t0)) - cu.begin() - 1;
    for (int64_t tok = t0; tok < t1; ++tok) {
      while (tok >= cu[static_cast<size_t>(q + 1)]) ++q;
      const int64_t pos = start[static_cast<size_t>(q)] + (tok - cu[static_cast<size_t>(q)]);
      fn(static_cast<size_t>(((s.row[static_cast<size_t>(q)] * H + h) * S + pos) * D), static_cast<size_t>((tok * H + h) * D));
    }
  });
}

size_t packed_numel(const std::vector<int64_t>& shape, const Sequences& s, bool k_side) {
  return static_cast<size_t>((k_side ? s.cu_k : s.cu_q).back() * shape[1] * shape[3]);
}

}  // namespace

std::vector<double> gather_tokens(const HostTensor& t, const Sequences& s, bool k_side) {
  std::vector<double> out(packed_numel(t.shape, s, k_side));
  const size_t D = static_cast<size_t>(t.shape[3]);
  for_each_token_row(t.shape, s, k_side, [&](size_t logical, size_t packed) {
    std::copy_n(t.data.data() + logical, D, out.data() + packed);
  });
  return out;
}

HostTensor scatter_tokens(const std::vector<double>& packed, std::vector<int64_t> shape, const Sequences& s, bool k_side,
                          double fill) {
  HostTensor t(std::move(shape), fill);
  const size_t D = static_cast<size_t>(t.shape[3]);
  for_each_token_row(t.shape, s, k_side, [&](size_t logical, size_t at) {
    std::copy_n(packed.data() + at, D, t.data.data() + logical);
  });
  return t;
}

EncodedBuffer encode_tokens(const HostTensor& t, const Sequences& s, bool k_side, DType dt) {
  EncodedBuffer out(packed_numel(t.shape, s, k_side), dt);
  const size_t D = static_cast<size_t>(t.shape[3]);
  for_each_token_row(t.shape, s, k_side, [&](size_t logical, size_t packed) {
    encode_span(t.data.data() + logical, D, dt, out.data(), packed);
  });
  return out;
}

HostTensor decode_tokens(const EncodedBuffer& packed, std::vector<int64_t> shape, const Sequences& s, bool k_side,
                         double fill) {
  if (packed.count != packed_numel(shape, s, k_side))
    throw std::invalid_argument("decode_tokens: " + std::to_string(packed.count) + " packed elements, the sequences hold " +
                                std::to_string(packed_numel(shape, s, k_side)));
  HostTensor t(std::move(shape), fill);
  const size_t D = static_cast<size_t>(t.shape[3]);
  for_each_token_row(t.shape, s, k_side, [&](size_t logical, size_t at) {
    decode_span(packed.data(), at, D, packed.dtype, t.data.data() + logical);
  });
  return t;
}

std::string describe(const TilePlan& t, int heads_q, int heads_kv) {
  return "q tiles " + std::to_string(t.tile_rows) + "x" + std::to_string(t.tile_keys) + " (pack " +
         std::to_string(t.pack) + "): " + std::to_string(t.q_items.size() * static_cast<size_t>(heads_q / t.pack)) +
         " CTAs; k tiles " + std::to_string(t.bwd_tile_keys) + ": " +
         std::to_string(t.k_items.size() * static_cast<size_t>(heads_kv)) + " CTAs";
}

FlexMaskForm flex_mask_form(const Problem& p, MaskArrays& arrays, const BlockMask& bm) {
  FlexMaskForm f;
  f.mask = make_mask_desc(p, arrays);
  if (!arrays.doc_ids.empty() && document_spans(arrays.doc_ids, p.batch, p.seq_q, &f.doc_first, &f.doc_last)) {
    f.mask.doc_ids = nullptr;
  } else {
    f.doc_first.clear();
    f.doc_last.clear();
  }
  if (kBlockSparseBlock % bm.q_block == 0 && kBlockSparseBlock % bm.kv_block == 0) f.mask.block_density = -1.0;
  return f;
}

}  // namespace attnbench::kernels
