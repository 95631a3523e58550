// Pipeline vocabulary of the Hopper kernels of the fused family (CUTLASS's and
// FlashAttention-3's terms): the position in a circular pipeline of stages
// (PipelineState), the shared memory of a kernel as one struct whose size is the
// launch's dynamic shared memory (SharedStorage), and the producer role that
// streams K / V tiles by TMA into the stages (produce_kv_tiles), shared by the
// forward (attn_fwd_sm90.cuh) and the deterministic dQ kernel (attn_dq_sm90.cuh).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/kernels/attn_common.cuh"
#include "backends/kernels/attn_launch.hpp"
#include "backends/kernels/wgmma_sm90.cuh"

namespace attnbench::kernels::sm90 {

/// Step `step` of a circular pipeline of kStages stages: the stage it fills or
/// reads, the parity its consumers wait for on the stage's full barrier, and
/// (from the second round on) the parity the producer waits for on the stage's
/// empty barrier before refilling it.
template <int kStages>
struct PipelineState {
  int step = 0;
  __device__ __forceinline__ int stage() const { return step % kStages; }
  __device__ __forceinline__ int phase() const { return (step / kStages) & 1; }
  __device__ __forceinline__ bool refill() const { return step >= kStages; }
  __device__ __forceinline__ int refill_phase() const { return (step / kStages - 1) & 1; }
};

/// Shared memory of a kernel that holds kRowTiles row tiles of kBlockM x D (Q; Q
/// and dO) and streams K / V tiles of kBlockN x D through kStages stages, all in
/// the 128-byte swizzled Sw128Tile layout (16-bit elements), then each stage's
/// full / empty barrier and each of kSpanWarps consumer warps' KeySpan. Every tile
/// starts at a multiple of 1024 bytes from the (1024-byte aligned) start, as the
/// swizzle needs; sizeof is the launch's dynamic shared memory.
template <int kRowTiles, int kBlockM, int kBlockN, int D, int kStages, int kSpanWarps>
struct KvStageStorage {
  uint16_t rows[kRowTiles][kBlockM * D];
  uint16_t k[kStages][kBlockN * D];
  uint16_t v[kStages][kBlockN * D];
  uint64_t full[kStages];   ///< stage loaded (completed by TMA transaction bytes)
  uint64_t empty[kStages];  ///< stage read by every consumer thread
  int span[2 * kSpanWarps];  ///< consumer warp w's KeySpan: [2 w] = lo, [2 w + 1] = hi

  static constexpr uint32_t kTileBytes = 2u * kBlockN * D;  ///< one K (or V) tile
  static_assert((2u * kBlockM * D) % 1024 == 0 && kTileBytes % 1024 == 0, "tiles at 1024-byte offsets");

  /// The storage at the kernel's dynamic shared memory (traps unless 1024-byte aligned).
  __device__ __forceinline__ static KvStageStorage& at(uint8_t* smem) {
    if (smem_u32(smem) % 1024 != 0) __trap();  // the swizzle needs 1024-byte aligned tiles
    return *reinterpret_cast<KvStageStorage*>(smem);
  }
  /// Thread 0 initialises the barriers (full: one producer arrival plus bytes;
  /// empty: `consumers` arrivals) and fences them for the TMA unit; the caller's
  /// CTA-wide barrier follows.
  __device__ __forceinline__ void init_barriers(int consumers) {
    for (int st = 0; st < kStages; ++st) {
      mbar_init(&full[st], 1);
      mbar_init(&empty[st], consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the TMA unit too
  }
};

/// Producer role (one thread): for each key step of `steps` (KeySteps of the
/// tile's rows), wait until its stage is free, then load the K and V tiles of
/// kBlockN keys at the step's first key by TMA (`maps`, boxes of kBlockN rows)
/// into the stage, completing its full barrier by transaction bytes. b: the
/// sequence; kvh: the KV head.
template <int kBlockN, int D, int kStages, class Steps, class Storage>
__device__ __forceinline__ void produce_kv_tiles(const AttnParams& p, const SeqInfo& si, int b, int kvh,
                                                 const Steps& steps, const KvTensorMaps& maps, Storage& s) {
  const int row_base = static_cast<int>(si.tok0_k);
  const int kb = p.k_batch_stride == 0 ? 0 : b, vb = p.v_batch_stride == 0 ? 0 : b;
  for (int tile = 0; tile < steps.count; ++tile) {
    const PipelineState<kStages> ps{tile};
    const int stage = ps.stage();
    if (ps.refill()) mbar_wait(&s.empty[stage], ps.refill_phase());
    int n0;
    bool full_unused;
    steps.at(p, si, tile, &n0, &full_unused);
    mbar_arrive_expect_tx(&s.full[stage], 2 * Storage::kTileBytes);  // K and V
    tma_load_tile_pair<kBlockN, D>(s.k[stage], &maps.k, kb, s.v[stage], &maps.v, vb, row_base + n0, kvh,
                                   &s.full[stage]);
  }
}

}  // namespace attnbench::kernels::sm90
