// BlockMask construction (block_mask.hpp) from the per-row interval
// decomposition of mask_interval.hpp.
//
// Classification of the tiles of one q-block (rows r0..r1-1) in one pass over its
// rows: every row yields its allowed keys as maximal segments [lo, hi]. A segment
// touches the kv-blocks lo / KB .. hi / KB and covers completely the kv-blocks
// ceil(lo / KB) .. (hi + 1) / KB - 1. Two difference arrays over the kv-blocks
// count, per block, the rows touching it and the rows covering it (a row covers a
// block through at most one segment, since its segments are disjoint):
//   empty   iff no row touches the block;
//   full    iff every row covers it and neither the q- nor the kv-block is a tail
//           block (the cover range never reaches the kv tail, since hi < Sk);
//   partial otherwise.
// Cost per (b, q-block): O(rows * segments per row + nKV); one segment per row for
// interval masks, so O(B * (Sq + nQ * nKV)) in all. Exact for every mask kind,
// block_sparse included at any tile size (its 128x128 pattern enters through the
// segments), and for non-contiguous documents (through the runs of each id).
#include "harness/model/block_mask.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "harness/model/mask.hpp"
#include "harness/model/mask_interval.hpp"

namespace attnbench {
namespace {

/// ceil(a / b) for a >= 0, b > 0.
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Division of non-negative positions by the block size: a shift when the size
/// is a power of two (the common case), else a plain division. 64-bit division
/// dominated the segment loop for masks with many short segments per row.
struct BlockDiv {
  int64_t size;
  int shift = -1;
  explicit BlockDiv(int64_t s) : size(s) {
    if ((s & (s - 1)) == 0) {
      shift = 0;
      while ((INT64_C(1) << shift) < s) ++shift;
    }
  }
  int64_t operator()(int64_t x) const { return shift >= 0 ? x >> shift : x / size; }
};

/// True when x is among the first n entries of the ascending list at v[base].
bool listed(const std::vector<int32_t>& v, int64_t base, int32_t n, int64_t x) {
  const auto first = v.begin() + base;
  return std::binary_search(first, first + n, static_cast<int32_t>(x));
}

}  // namespace

BlockKind BlockMask::kind(int64_t b, int64_t h, int64_t qb, int64_t kb) const {
  if (b < 0 || h < 0 || qb < 0 || qb >= num_q_blocks || kb < 0 || kb >= num_kv_blocks)
    throw std::out_of_range("BlockMask::kind: tile (b=" + std::to_string(b) + ", h=" + std::to_string(h) +
                            ", qb=" + std::to_string(qb) + ", kb=" + std::to_string(kb) + ") out of range (nQ=" +
                            std::to_string(num_q_blocks) + ", nKV=" + std::to_string(num_kv_blocks) + ")");
  const int64_t r = row(b, h, qb);
  const int64_t base = r * num_kv_blocks;
  if (listed(full_kv_indices, base, full_kv_num_blocks[static_cast<size_t>(r)], kb)) return BlockKind::full;
  if (listed(kv_indices, base, kv_num_blocks[static_cast<size_t>(r)], kb)) return BlockKind::partial;
  return BlockKind::empty;
}

int64_t BlockMask::executed_pairs_per_head(int64_t batch) const {
  if (batch < 1) throw std::invalid_argument("BlockMask::executed_pairs_per_head: batch must be >= 1");
  if (B != 1 && batch != B)
    throw std::invalid_argument("BlockMask::executed_pairs_per_head: batch " + std::to_string(batch) +
                                " does not match the stored batch " + std::to_string(B));
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t qb = 0; qb < num_q_blocks; ++qb) {
      const int64_t rows = std::min(seq_q, (qb + 1) * q_block) - qb * q_block;
      int64_t cols = 0;
      for_each_tile(*this, b, 0, qb,
                    [&](int64_t kb, bool) { cols += std::min(seq_k, (kb + 1) * kv_block) - kb * kv_block; });
      total += rows * cols;
    }
  return B == 1 ? total * batch : total;
}

int64_t BlockMask::num_partial() const {
  int64_t n = 0;
  for (auto v : kv_num_blocks) n += v;
  return n;
}

int64_t BlockMask::num_full() const {
  int64_t n = 0;
  for (auto v : full_kv_num_blocks) n += v;
  return n;
}

BlockMask build_block_mask(const Problem& p, int64_t q_block, int64_t kv_block) {
  if (q_block <= 0 || kv_block <= 0)
    throw std::invalid_argument("build_block_mask: block sizes must be positive, got (" + std::to_string(q_block) +
                                ", " + std::to_string(kv_block) + ")");
  MaskArrays arrays;
  const MaskDesc m = make_mask_desc(p, arrays);
  if (!arrays.doc_ids.empty() && static_cast<int64_t>(arrays.doc_ids.size()) != p.batch * p.seq_q)
    throw std::invalid_argument("build_block_mask: document ids do not have batch * seq_q entries");
  if (!arrays.seq_lens_q.empty() && (static_cast<int64_t>(arrays.seq_lens_q.size()) != p.batch ||
                                     static_cast<int64_t>(arrays.seq_lens_k.size()) != p.batch))
    throw std::invalid_argument("build_block_mask: padding lengths do not have batch entries");

  BlockMask bm;
  bm.q_block = q_block;
  bm.kv_block = kv_block;
  bm.seq_q = p.seq_q;
  bm.seq_k = p.seq_k;
  bm.B = (m.doc_ids || m.seq_lens_q) ? p.batch : 1;  // only document / padding depend on b
  bm.H = 1;                                           // no mask kind depends on h
  const int64_t nq = ceil_div(p.seq_q, q_block), nkv = ceil_div(p.seq_k, kv_block);
  if (nq > std::numeric_limits<int32_t>::max() || nkv > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("build_block_mask: block counts exceed int32");
  bm.num_q_blocks = nq;
  bm.num_kv_blocks = nkv;
  const auto rows_n = static_cast<size_t>(bm.B * nq), cols_n = static_cast<size_t>(bm.B * nkv);
  const auto tiles_n = static_cast<size_t>(bm.B * nq * nkv);
  bm.kv_num_blocks.assign(rows_n, 0);
  bm.full_kv_num_blocks.assign(rows_n, 0);
  bm.kv_indices.assign(tiles_n, 0);
  bm.full_kv_indices.assign(tiles_n, 0);
  bm.q_num_blocks.assign(cols_n, 0);
  bm.full_q_num_blocks.assign(cols_n, 0);
  bm.q_indices.assign(tiles_n, 0);
  bm.full_q_indices.assign(tiles_n, 0);

  detail::RowSegmenter seg(m);
  std::vector<detail::Interval> segs;
  std::vector<int32_t> touch(static_cast<size_t>(nkv + 1)), cover(static_cast<size_t>(nkv + 1));
  const BlockDiv kdiv(kv_block);
  for (int64_t b = 0; b < bm.B; ++b) {
    seg.set_batch(b);
    for (int64_t qb = 0; qb < nq; ++qb) {
      const int64_t r0 = qb * q_block, r1 = std::min(p.seq_q, r0 + q_block);
      const bool q_tail = r0 + q_block > p.seq_q;
      std::fill(touch.begin(), touch.end(), 0);
      std::fill(cover.begin(), cover.end(), 0);
      for (int64_t i = r0; i < r1; ++i) {
        seg.segments(i, segs);
        for (const auto& s : segs) {
          // Touched: lo / KB .. hi / KB; covered: ceil(lo / KB) .. (hi + 1) / KB - 1.
          const int64_t t0 = kdiv(s.lo), e1 = kdiv(s.hi + 1);
          const int64_t t1 = e1 * kv_block == s.hi + 1 ? e1 - 1 : e1;
          ++touch[static_cast<size_t>(t0)];
          --touch[static_cast<size_t>(t1 + 1)];
          const int64_t f0 = t0 * kv_block == s.lo ? t0 : t0 + 1, f1 = e1 - 1;
          if (f0 <= f1) {
            ++cover[static_cast<size_t>(f0)];
            --cover[static_cast<size_t>(f1 + 1)];
          }
        }
      }
      const auto r = static_cast<size_t>(bm.row(b, 0, qb));
      const size_t kv_base = r * static_cast<size_t>(nkv);
      int32_t t = 0, c = 0;
      for (int64_t kb = 0; kb < nkv; ++kb) {
        t += touch[static_cast<size_t>(kb)];
        c += cover[static_cast<size_t>(kb)];
        if (t == 0) continue;
        const size_t col = static_cast<size_t>(bm.col(b, 0, kb));
        const size_t q_base = col * static_cast<size_t>(nq);
        if (!q_tail && c == r1 - r0) {
          bm.full_kv_indices[kv_base + static_cast<size_t>(bm.full_kv_num_blocks[r]++)] = static_cast<int32_t>(kb);
          bm.full_q_indices[q_base + static_cast<size_t>(bm.full_q_num_blocks[col]++)] = static_cast<int32_t>(qb);
        } else {
          bm.kv_indices[kv_base + static_cast<size_t>(bm.kv_num_blocks[r]++)] = static_cast<int32_t>(kb);
          bm.q_indices[q_base + static_cast<size_t>(bm.q_num_blocks[col]++)] = static_cast<int32_t>(qb);
        }
      }
    }
  }
  return bm;
}

std::string render_block_mask(const BlockMask& bm, int64_t b, int64_t h) {
  if (b < 0 || h < 0) throw std::out_of_range("render_block_mask: negative batch or head index");
  std::string out;
  out.reserve(static_cast<size_t>(bm.num_q_blocks * (bm.num_kv_blocks + 1)));
  for (int64_t qb = 0; qb < bm.num_q_blocks; ++qb) {
    for (int64_t kb = 0; kb < bm.num_kv_blocks; ++kb) {
      switch (bm.kind(b, h, qb, kb)) {
        case BlockKind::full: out += '#'; break;
        case BlockKind::partial: out += '+'; break;
        case BlockKind::empty: out += '.'; break;
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace attnbench
