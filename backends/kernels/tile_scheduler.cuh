// Which tile each CTA of the fused attention kernels works on: the
// TileScheduler of the family (CUTLASS's and FlashAttention-3's term,
// hopper/tile_scheduler.hpp there), with the static schedule as its first
// implementation.
//
// The concept. A scheduler is built from the plan's work list (`items`, ordered
// longest work first by attn_plan.cpp) and the head chunks per item (query
// heads / pack for the forward and dQ kernels, KV heads for dK/dV), and offers
//   host:   static int64_t ctas(n_items, head_chunks)   CTAs to launch (0: none)
//   device: WorkTile initial() const                    this CTA's first tile
//           WorkTile next(const WorkTile&) const        the tile after it; invalid when done
// A persistent scheduler (one CTA per SM walking the list, FlashAttention-3's
// StaticPersistentTileScheduler / its varlen LPT scheduler) implements the same
// three with ctas() = the SM count and next() striding by it; the kernels then
// loop `for (w = s.initial(); w.valid; w = s.next(w))` over their tile body.
// Today every kernel runs the tile of initial() alone.
#pragma once

#include <cstdint>

#include "backends/kernels/attn_params.hpp"

namespace attnbench::kernels {

/// One tile of work: the plan's work item (sequence, first position of its
/// query or key tile) and the head chunk (query heads chunk * pack .. + pack - 1
/// of the forward and dQ kernels; the KV head of the dK/dV kernels).
struct WorkTile {
  WorkItem item;
  int head_chunk = 0;
  bool valid = false;
};

/// The static schedule: one CTA per (item, head chunk), blockIdx.x = item *
/// head_chunks + head_chunk, so the longest items start in the first wave.
struct StaticTileScheduler {
  const WorkItem* items = nullptr;
  int head_chunks = 1;

  /// CTAs of a launch over n_items items of head_chunks chunks each.
  static int64_t ctas(int64_t n_items, int head_chunks) { return n_items * head_chunks; }

#if defined(__CUDACC__)
  __device__ __forceinline__ WorkTile initial() const {
    WorkTile w;
    w.item = items[blockIdx.x / head_chunks];
    w.head_chunk = blockIdx.x % head_chunks;
    w.valid = true;
    return w;
  }
  __device__ __forceinline__ WorkTile next(const WorkTile&) const { return WorkTile{}; }
#endif
};

/// The family's scheduler.
using TileScheduler = StaticTileScheduler;

}  // namespace attnbench::kernels
