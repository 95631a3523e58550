// Which tiles each CTA of the fused attention kernels works on: the
// TileScheduler of the family (CUTLASS's and FlashAttention-3's term,
// hopper/tile_scheduler.hpp there).
//
// The concept. A scheduler is built from the plan's work list (`items`, ordered
// longest work first by attn_plan.cpp), the head chunks per item (query
// heads / pack for the forward and dQ kernels, KV heads for dK/dV) and the
// number of tiles (items x head chunks), and offers
//   host:   static int64_t ctas(n_items, head_chunks)   tiles of a launch (0: none)
//   device: WorkTile round(int j) const                 this CTA's j-th tile; invalid when done
// Tile t is (item t / head_chunks, head chunk t % head_chunks), so the longest
// items come first. Round j of CTA c (of G = gridDim.x) is tile j G + c for even
// j and j G + G - 1 - c for odd j (a serpentine order). A launch of ctas() CTAs
// runs one tile per CTA (round 0, tile blockIdx.x; the hardware's block
// scheduler hands a freed SM the next tile). A launch of fewer CTAs is
// persistent (FlashAttention-3's StaticPersistentTileScheduler, whose stride is
// plain c + j G): every CTA takes one tile of each band of G lengths of the
// longest-first list, and the serpentine pairs a band's longest tile with the
// next band's shortest, so that the CTAs' sums of work stay close (with c + j G,
// CTA 0 would take the longest tile of every band). A kernel written as
// `for (j = 0; (w = s.round(j)).valid; ++j)` overlaps a tile's epilogue with the
// next tile's loads. The Hopper forward and the Hopper dQ kernel are written so
// (option `persistent`, LaunchShape::persistent); the other kernels take
// own_tile() and are launched with ctas() CTAs.
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

/// The family's scheduler: tile t = (item t / head_chunks, chunk t % head_chunks)
/// of `tiles` = items x head_chunks; CTA c runs the tiles of its rounds
/// (round_tile).
struct TileScheduler {
  const WorkItem* items = nullptr;
  int head_chunks = 1;
  int64_t tiles = 0;

  /// Tiles of a launch over n_items items of head_chunks chunks each: the CTAs of
  /// a launch with one tile per CTA, the bound of a persistent one.
  static int64_t ctas(int64_t n_items, int head_chunks) { return n_items * head_chunks; }
  /// The tile of round j of CTA c in a launch of G CTAs: j G + c (j even) or
  /// j G + G - 1 - c (j odd). Host and device (pinned by tests/test_attn_plan.cpp).
  ATTNBENCH_HD static int64_t round_tile(int j, int c, int G) {
    return static_cast<int64_t>(j) * G + ((j & 1) ? G - 1 - c : c);
  }

#if defined(__CUDACC__)
  /// The tile of a kernel launched with one tile per CTA (ctas() CTAs): tile
  /// blockIdx.x, valid, decoded in 32-bit arithmetic without a bounds test (the
  /// dK/dV kernel's prologue as it was before the tile loop: its backward ran
  /// 4-5% slower with at()'s 64-bit decode in front of it on the H200).
  __device__ __forceinline__ static WorkTile own_tile(const WorkItem* items, int head_chunks) {
    WorkTile w;
    const unsigned chunks = static_cast<unsigned>(head_chunks);
    w.item = items[blockIdx.x / chunks];
    w.head_chunk = static_cast<int>(blockIdx.x % chunks);
    w.valid = true;
    return w;
  }
  /// Tile t (invalid past the last one).
  __device__ __forceinline__ WorkTile at(int64_t t) const {
    WorkTile w;
    w.valid = t < tiles;
    if (w.valid) {
      w.item = items[t / head_chunks];
      w.head_chunk = static_cast<int>(t % head_chunks);
    }
    return w;
  }
  /// The CTA's j-th tile (serpentine rounds: see the file comment); a tile loop
  /// carries j alone.
  __device__ __forceinline__ WorkTile round(int j) const {
    return at(round_tile(j, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x)));
  }
#endif
};

}  // namespace attnbench::kernels
