// Which tiles each CTA of the fused attention kernels works on: the
// TileScheduler of the family (CUTLASS's and FlashAttention-3's term,
// hopper/tile_scheduler.hpp there).
//
// The concept. A scheduler is built from the plan's work list (`items`, ordered
// longest work first by attn_plan.cpp; for the Hopper kernels then sequence by
// sequence, group_by_sequence, option tile_order), the head chunks per item (query
// heads / pack for the forward and dQ kernels, KV heads for dK/dV) and the
// number of tiles (items x head chunks), and offers
//   host:   static int64_t ctas(n_items, head_chunks)   tiles of a launch (0: none)
//   device: WorkTile at(int64_t t) const                tile t; invalid past the last
// Tile t is (item t / head_chunks, head chunk t % head_chunks), so the items
// come in list order; with L2 head groups (head_group > 0, FlashAttention-3's
// L2-aware tile order) the chunks are taken head_group at a time: every item of
// chunks 0 .. head_group - 1 first, then the next group (decode()), so the CTAs
// running at once stream the K / V (dK/dV: Q / dO) of few heads, which stay in
// L2. A launch of ctas() CTAs runs one tile per CTA (own_tile(),
// tile blockIdx.x; the hardware's block scheduler hands a freed SM the next
// tile). A launch of fewer CTAs is persistent and dynamic (FlashAttention-3's
// DynamicPersistentTileScheduler): CTA c starts with tile c and then claims
// the next unclaimed tile of the list from a counter in global
// memory (claim()), so a CTA that drew short tiles takes more of them and
// the CTAs finish together; the CTA that retires last resets the counter for
// the next launch (retire()). One thread of the CTA claims and hands the tile
// to its other roles (sm90::TileQueue). The Hopper forward and the Hopper dQ
// kernel are written so (option `persistent`, LaunchShape::persistent); the
// other kernels take own_tile() and are launched with ctas() CTAs.
//
// Measured against the static order it replaced (CTA c took tile j G + c, or
// j G + G - 1 - c in odd rounds: every CTA one tile of each band of G lengths):
// ncu of the packed CodeAlpaca Llama-3-8B forward on the H200 put every SM
// busy for 90.6% of the kernel with it (cuDNN's 98.7%): the CTAs' sums of work
// drifted apart (docs/results/2026-11-29-h200-session21.md).
#pragma once

#include <cstdint>

#include "backends/kernels/attn_params.hpp"
#include "harness/model/hd.hpp"

namespace attnbench::kernels {

/// One tile of work: the plan's work item (sequence, first position of its
/// query or key tile) and the head chunk (query heads chunk * pack .. + pack - 1
/// of the forward and dQ kernels; the KV head of the dK/dV kernels).
struct WorkTile {
  WorkItem item;
  int head_chunk = 0;
  bool valid = false;
};

/// The family's scheduler: tile t of `tiles` = items x head_chunks, decode()d
/// into (item, chunk); a CTA runs own_tile(), or (persistent) tile blockIdx.x
/// and then the tiles it claim()s.
struct TileScheduler {
  const WorkItem* items = nullptr;
  int head_chunks = 1;
  int64_t tiles = 0;
  int head_group = 0;  ///< chunks per L2 group (AttnParams::q_head_group / kv_head_group); 0 = all

  /// Tile t of n_items x head_chunks tiles as (item index, head chunk): with
  /// head_group g in [1, head_chunks) the chunks go g at a time, group-major
  /// (group k holds chunks k g .. min(k g + g, head_chunks) - 1, all items of
  /// it in list order, chunks fastest); otherwise item t / head_chunks, chunk
  /// t % head_chunks. A bijection onto [0, n_items) x [0, head_chunks) either
  /// way (tests/test_attn_plan.cpp). I: the integer type of the arithmetic
  /// (unsigned 32 bits in own_tile()).
  template <class I>
  ATTNBENCH_HD static void decode(I t, I n_items, I head_chunks, I head_group, I* item, I* chunk) {
    if (head_group <= 0 || head_group >= head_chunks) {
      *item = t / head_chunks;
      *chunk = t % head_chunks;
      return;
    }
    const I span = n_items * head_group;  // tiles of a whole group
    const I g = t / span, r = t - g * span;
    const I first = g * head_group;
    const I width = head_chunks - first < head_group ? head_chunks - first : head_group;
    *item = r / width;
    *chunk = first + r % width;
  }

  /// Tiles of a launch over n_items items of head_chunks chunks each: the CTAs of
  /// a launch with one tile per CTA (exactly this many: own_tile() derives the
  /// item count from gridDim.x), the bound of a persistent one.
  static int64_t ctas(int64_t n_items, int head_chunks) { return n_items * head_chunks; }
#if defined(__CUDACC__)
  /// The tile of a kernel launched with one tile per CTA (ctas() CTAs): tile
  /// blockIdx.x, valid, decoded in 32-bit arithmetic without a bounds test (the
  /// dK/dV kernel's prologue as it was before the tile loop: its backward ran
  /// 4-5% slower with at()'s 64-bit decode in front of it on the H200).
  __device__ __forceinline__ static WorkTile own_tile(const WorkItem* items, int head_chunks, int head_group) {
    WorkTile w;
    const unsigned chunks = static_cast<unsigned>(head_chunks);
    unsigned item, chunk;
    decode<unsigned>(blockIdx.x, gridDim.x / chunks, chunks, static_cast<unsigned>(head_group), &item, &chunk);
    w.item = items[item];
    w.head_chunk = static_cast<int>(chunk);
    w.valid = true;
    return w;
  }
  /// Tile t (invalid past the last one).
  __device__ __forceinline__ WorkTile at(int64_t t) const {
    WorkTile w;
    w.valid = t < tiles;
    if (w.valid) {
      int64_t item, chunk;
      decode<int64_t>(t, tiles / head_chunks, head_chunks, head_group, &item, &chunk);
      w.item = items[item];
      w.head_chunk = static_cast<int>(chunk);
    }
    return w;
  }
  /// The tile a persistent CTA runs after its first (blockIdx.x): the next
  /// unclaimed one, gridDim.x + an atomic increment of counters[0]. `counters`:
  /// two ints of global memory, zero before the launch (retire() leaves them so).
  __device__ __forceinline__ static int64_t claim(int* counters) {
    return static_cast<int64_t>(gridDim.x) + atomicAdd(&counters[0], 1);
  }
  /// After the CTA's last claim (one past the last tile): counts the CTA out in
  /// counters[1]; the last CTA out zeroes both counters, since every claim of
  /// the launch has then been made.
  __device__ __forceinline__ static void retire(int* counters) {
    __threadfence();  // this CTA's claims before its count
    if (atomicAdd(&counters[1], 1) == static_cast<int>(gridDim.x) - 1) {
      atomicExch(&counters[0], 0);
      atomicExch(&counters[1], 0);
    }
  }
#endif
};

}  // namespace attnbench::kernels
