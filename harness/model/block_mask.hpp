// BlockMask with FlexAttention semantics (docs/semantics.md section 6, NORMATIVE;
// PyTorch torch/nn/attention/flex_attention.py, class BlockMask).
//
// The (Sq x Sk) score matrix is cut into tiles of Q_BLOCK x KV_BLOCK. For each
// (b, h, q-block) the BlockMask lists the kv-blocks that must be computed:
//   - partial blocks (kv_num_blocks / kv_indices): some pairs allowed, some not;
//     the kernel evaluates the mask inside;
//   - full blocks (full_kv_num_blocks / full_kv_indices): every pair allowed; the
//     mask is skipped (score_mod still applied).
// Empty blocks appear in neither list and are never computed. A tail block (at a
// length that is not a multiple of the block size) is always partial.
// The transposed lists (q_num_blocks / q_indices / full_q_*) give, for each
// kv-block, the q-blocks that touch it, for the backward pass (dK, dV).
// B or H of size 1 broadcasts (used when the mask does not depend on them).
//
// Equivalent loop (what the arrays encode):
//   for b, h, qb:
//     for n in 0..kv_num_blocks[b,h,qb]:      kb = kv_indices[b,h,qb,n]      (masked tile)
//     for n in 0..full_kv_num_blocks[b,h,qb]: kb = full_kv_indices[b,h,qb,n] (unmasked tile)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/model/problem.hpp"

namespace attnbench {

/// Classification of one tile.
enum class BlockKind : uint8_t { empty = 0, partial = 1, full = 2 };

/// int32 BlockMask arrays, row-major. Index helpers below give the flat offsets.
struct BlockMask {
  int64_t q_block = 128;   ///< Q_BLOCK
  int64_t kv_block = 128;  ///< KV_BLOCK
  int64_t seq_q = 0, seq_k = 0;
  int64_t B = 1, H = 1;    ///< 1 when broadcast over that dimension
  int64_t num_q_blocks = 0;   ///< nQ = ceil(Sq / Q_BLOCK)
  int64_t num_kv_blocks = 0;  ///< nKV = ceil(Sk / KV_BLOCK)

  std::vector<int32_t> kv_num_blocks;       ///< [B, H, nQ]
  std::vector<int32_t> kv_indices;          ///< [B, H, nQ, nKV] (first kv_num_blocks valid, ascending)
  std::vector<int32_t> full_kv_num_blocks;  ///< [B, H, nQ]
  std::vector<int32_t> full_kv_indices;     ///< [B, H, nQ, nKV]
  std::vector<int32_t> q_num_blocks;        ///< [B, H, nKV]
  std::vector<int32_t> q_indices;           ///< [B, H, nKV, nQ]
  std::vector<int32_t> full_q_num_blocks;   ///< [B, H, nKV]
  std::vector<int32_t> full_q_indices;      ///< [B, H, nKV, nQ]

  /// Flat index of (b, h, qb) into kv_num_blocks; b and h are reduced modulo broadcast.
  int64_t row(int64_t b, int64_t h, int64_t qb) const {
    return ((b % B) * H + (h % H)) * num_q_blocks + qb;
  }
  /// Flat index of (b, h, kb) into q_num_blocks.
  int64_t col(int64_t b, int64_t h, int64_t kb) const {
    return ((b % B) * H + (h % H)) * num_kv_blocks + kb;
  }
  /// Kind of tile (b, h, qb, kb), from the lists.
  BlockKind kind(int64_t b, int64_t h, int64_t qb, int64_t kb) const;
  /// Pairs (i, j) inside computed tiles (partial + full, clipped to Sq x Sk),
  /// for one head, summed over the real batch `batch` (broadcast expanded).
  int64_t executed_pairs_per_head(int64_t batch) const;
  /// Counts of partial and full tiles over (b, h) as stored (not expanded).
  int64_t num_partial() const;
  int64_t num_full() const;
};

namespace detail {
/// Line `line` of a pair of BlockMask lists (`num` / `idx`: partial, `full_num` /
/// `full_idx`: full; `len` index entries per line) as fn(block, full): the partial
/// entries, then the full ones, each in stored (ascending) order.
template <class Fn>
void walk_line(const std::vector<int32_t>& num, const std::vector<int32_t>& idx, const std::vector<int32_t>& full_num,
               const std::vector<int32_t>& full_idx, int64_t line, int64_t len, Fn&& fn) {
  const auto l = static_cast<size_t>(line);
  const int32_t* part = idx.data() + line * len;
  const int32_t* full = full_idx.data() + line * len;
  for (int32_t t = 0; t < num[l]; ++t) fn(static_cast<int64_t>(part[t]), false);
  for (int32_t t = 0; t < full_num[l]; ++t) fn(static_cast<int64_t>(full[t]), true);
}
}  // namespace detail

/// The one BlockMask tile walk (host side; the GPU kernels' device-side walk is
/// BlockWalk in backends/kernels/attn_common.cuh, in the same order). Visits the
/// computed kv-blocks of query block `qb` of (b, h) as fn(kb, full): first the
/// partial tiles (kv_indices, mask evaluated), then the full ones (full_kv_indices,
/// mask skipped), each list in its stored ascending order: FlexAttention's order.
/// b and h are reduced modulo the broadcast dimensions (BlockMask::row).
template <class Fn>
void for_each_tile(const BlockMask& bm, int64_t b, int64_t h, int64_t qb, Fn&& fn) {
  detail::walk_line(bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices, bm.row(b, h, qb),
                    bm.num_kv_blocks, fn);
}

/// The transposed walk for the backward pass (dK, dV): the query blocks that touch
/// kv-block `kb` of (b, h), as fn(qb, full), partial tiles (q_indices) first, then
/// full ones (full_q_indices), each ascending.
template <class Fn>
void for_each_tile_of_col(const BlockMask& bm, int64_t b, int64_t h, int64_t kb, Fn&& fn) {
  detail::walk_line(bm.q_num_blocks, bm.q_indices, bm.full_q_num_blocks, bm.full_q_indices, bm.col(b, h, kb),
                    bm.num_q_blocks, fn);
}

/// Build the BlockMask of problem `p` with tile size (q_block, kv_block).
/// Exact: a tile is full iff every (i, j) in it (and inside Sq x Sk) is allowed and
/// it is not a tail tile; empty iff none is allowed. Broadcasts over B when the mask
/// does not depend on the batch row (no document / padding mask) and always over H
/// (no mask kind depends on h). Cost O(B * nQ * nKV * q_block) for interval masks.
/// Throws std::invalid_argument for non-positive block sizes.
BlockMask build_block_mask(const Problem& p, int64_t q_block = 128, int64_t kv_block = 128);

/// Compact text rendering for debugging: one line per q-block of (b, h), one
/// character per kv-block: '#' full, '+' partial, '.' empty.
std::string render_block_mask(const BlockMask& bm, int64_t b = 0, int64_t h = 0);

}  // namespace attnbench
