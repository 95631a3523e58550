// Pipeline vocabulary of the Hopper kernels of the fused family (CUTLASS's and
// FlashAttention-3's terms): the position in a circular pipeline of stages
// (PipelineState), the shared memory of a kernel as one struct whose size is the
// launch's dynamic shared memory (StageStorageBase; KvStageStorage, the dQ
// kernel's), and the producer roles that stream K / V tiles by TMA into the
// stages (produce_kv_tiles), load a tile's row tiles (produce_row_tiles) and stage
// a flex key step's learnable-bias terms (produce_bias_terms), shared by the
// forward (attn_fwd_sm90.cuh, whose storage FwdStageStorage is its own) and the
// deterministic dQ kernel (attn_dq_sm90.cuh).
#pragma once

#include <climits>
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

/// The tiles of a persistent CTA (TileScheduler), decoded once: the one thread
/// that claims them (the forward's K / V thread; the dQ kernel's schedule_tiles
/// thread) decodes tile j (a QueryTile: its sequence's
/// offsets and lengths are global loads) and hands it to the CTA's other roles
/// through kSlots shared-memory slots, slot j % kSlots, whose `full` barrier the
/// claiming thread completes and whose `empty` barrier completes once every
/// reader (one arrival per reading warp, or per reading thread of a
/// single-thread role) has taken it. The readers' tile prologue so holds no
/// global load (ncu of the packed Llama-3-8B forward: the consumers' own decode,
/// two dependent loads, was a fifth of their samples).
template <class Tile, int kSlots = 4>
struct TileQueue {
  uint64_t full[kSlots];
  uint64_t empty[kSlots];
  Tile tile[kSlots];
  int more[kSlots];  ///< 0: the CTA's tiles are done

  /// Thread 0, with the kernel's other barriers: `readers` arrivals empty a slot.
  __device__ __forceinline__ void init(int readers) {
    for (int i = 0; i < kSlots; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], readers);
    }
  }
  /// The claiming thread: `t` is the CTA's j-th tile (valid), or none is left
  /// (!valid). Waits for slot j % kSlots to be taken by every reader of tile j -
  /// kSlots.
  __device__ __forceinline__ void publish(int j, bool valid, const Tile& t) {
    const int i = j % kSlots;
    if (j >= kSlots) mbar_wait(&empty[i], (j / kSlots - 1) & 1);
    if (valid) tile[i] = t;
    more[i] = valid;
    mbar_arrive(&full[i]);  // release: the slot's values before the arrival
  }
  /// The claiming thread: the CTA's j-th tile as it published it (no wait: its
  /// own write; the slot is refilled only with tile j + kSlots), false when none
  /// is left. For a claimant that publishes tile j a tile ahead (next_tile=early).
  __device__ __forceinline__ bool published(int j, Tile& t) const {
    const int i = j % kSlots;
    if (more[i] != 0) t = tile[i];
    return more[i] != 0;
  }
  /// A reader: the CTA's j-th tile into `t`; false when none is left.
  /// whole_warp: every lane of the warp reads it and lane 0 arrives for the
  /// warp; otherwise the calling thread arrives.
  __device__ __forceinline__ bool take(int j, bool whole_warp, Tile& t) {
    const int i = j % kSlots;
    mbar_wait(&full[i], (j / kSlots) & 1);
    const bool valid = more[i] != 0;
    if (valid) t = tile[i];
    if (whole_warp) {
      __syncwarp();
      if (threadIdx.x % 32 == 0) mbar_arrive(&empty[i]);
    } else {
      mbar_arrive(&empty[i]);
    }
    return valid;
  }
};

/// The claiming thread's step for the CTA's j-th tile, tile `t` of `sched`:
/// decodes it into `qt` (QueryTile::at(p, tile, pack, rows)) and publishes it in
/// `queue`; past the last tile, publishes that none is left and returns false.
template <class Queue>
__device__ __forceinline__ bool publish_tile(const AttnParams& p, const TileScheduler& sched, int64_t t, int pack,
                                             int rows, int j, Queue& queue, QueryTile& qt) {
  const WorkTile w = sched.at(t);
  if (w.valid) qt = QueryTile::at(p, w, pack, rows);
  queue.publish(j, w.valid, qt);
  return w.valid;
}

/// The scheduler role of the persistent Hopper dQ kernel (one thread of the
/// producer warpgroup that loads nothing): publishes tile blockIdx.x and then
/// (kPersistent) each tile it claims from `counters` (TileScheduler::claim),
/// decoded as QueryTile::at(p, tile, pack, rows), up to kSlots tiles ahead of
/// the slowest reader, until none is left; then retires from the counters. Its
/// own thread, so that neither the claim's nor the decode's latency sits on the
/// K / V thread, which waits for free stages (the dQ kernel has two): with the
/// claims on that thread the dQ kernel's consumers waited for their next tile.
template <bool kPersistent, class Queue>
__device__ __forceinline__ void schedule_tiles(const AttnParams& p, const TileScheduler& sched, int* counters,
                                               int pack, int rows, Queue& queue) {
  int64_t t = blockIdx.x;
#pragma unroll 1
  for (int j = 0;; ++j) {
    QueryTile qt;
    if (!publish_tile(p, sched, t, pack, rows, j, queue, qt) || !kPersistent) break;
    t = TileScheduler::claim(counters);
  }
  if constexpr (kPersistent) TileScheduler::retire(counters);
}

/// What a kernel's shared-memory struct `Self` (KvStageStorage, FwdStageStorage:
/// row tiles of kBlockM x D, K / V tiles of kBlockN x D, 16-bit elements) shares, as
/// an empty base: the bytes of one K (or V) tile, the check that every tile starts
/// at a multiple of 1024 bytes, and the struct at the kernel's dynamic shared memory
/// (traps unless 1024-byte aligned, as the swizzle needs).
template <class Self, int kBlockM, int kBlockN, int D>
struct StageStorageBase {
  static constexpr uint32_t kTileBytes = 2u * kBlockN * D;  ///< one K (or V) tile
  static_assert((2u * kBlockM * D) % 1024 == 0 && kTileBytes % 1024 == 0, "tiles at 1024-byte offsets");
  __device__ __forceinline__ static Self& at(uint8_t* smem) {
    if (smem_u32(smem) % 1024 != 0) __trap();
    return *reinterpret_cast<Self*>(smem);
  }
};

/// Shared memory of a kernel that holds kRowTiles row tiles of kBlockM x D (Q; Q
/// and dO) and streams K / V tiles of kBlockN x D through kStages stages, all in
/// the 128-byte swizzled Sw128Tile layout (16-bit elements), then each stage's
/// full / empty barrier, the row tiles' (the persistent dQ kernel's Q and dO by TMA) and
/// each of kSpanWarps consumer warps' KeySpan, twice (a tile loop alternates
/// them, so one barrier per tile orders writes and reads). Every tile
/// starts at a multiple of 1024 bytes from the (1024-byte aligned) start, as the
/// swizzle needs; sizeof is the launch's dynamic shared memory. The dQ kernel's
/// storage (the forward's, with K and V on barriers of their own and two Q
/// buffers: FwdStageStorage of attn_fwd_sm90.cuh).
template <int kRowTiles, int kBlockM, int kBlockN, int D, int kStages, int kSpanWarps>
struct KvStageStorage
    : StageStorageBase<KvStageStorage<kRowTiles, kBlockM, kBlockN, D, kStages, kSpanWarps>, kBlockM, kBlockN, D> {
  static constexpr bool kSplitKv = false;  ///< a stage's K and V share its barriers (produce_kv_tiles)
  uint16_t rows[kRowTiles][kBlockM * D];
  uint16_t k[kStages][kBlockN * D];
  uint16_t v[kStages][kBlockN * D];
  uint64_t full[kStages];   ///< stage loaded (completed by TMA transaction bytes)
  uint64_t empty[kStages];  ///< stage read by every consumer thread
  uint64_t rows_full;        ///< the row tiles loaded by TMA (the persistent dQ kernel's Q and dO)
  uint64_t rows_empty;       ///< the row tiles read by every consumer thread
  int span[2][2 * kSpanWarps];  ///< consumer warp w's KeySpan: [.][2 w] = lo, [.][2 w + 1] = hi
  TileQueue<QueryTile> queue;   ///< a persistent kernel's tiles, from the claiming thread to the other roles

  /// Thread 0 initialises the barriers (full: `producers` arrivals, the copy
  /// thread's with the bytes; empty: `consumers` arrivals; the queue's:
  /// `queue_readers`) and fences them for the TMA unit; the caller's CTA-wide
  /// barrier follows.
  __device__ __forceinline__ void init_barriers(int consumers, int producers, int queue_readers) {
    for (int st = 0; st < kStages; ++st) {
      mbar_init(&full[st], producers);
      mbar_init(&empty[st], consumers);
    }
    mbar_init(&rows_full, 1);
    mbar_init(&rows_empty, consumers);
    queue.init(queue_readers);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the TMA unit too
  }
};

/// Producer role (one thread): for each key step of `steps` (KeySteps of the
/// tile's rows), wait until its stage is free, then load the K and V tiles of
/// kBlockN keys at the step's first key by TMA (`maps`, boxes of kBlockN rows)
/// into the stage, completing its full barrier by transaction bytes. With K and V
/// on barriers of their own (Storage::kSplitKv, the forward's FwdStageStorage): K
/// once its buffer is free (empty_k), completing full_k, then V likewise (empty_v,
/// full_v). b: the sequence; kvh: the KV head; first_step: the pipeline step of the
/// first key step (a persistent kernel's steps continue over its tiles); only the
/// key steps from .. to - 1 (default all: the forward's next_tile=early splits a
/// tile's loads around the next tile's claim).
template <int kBlockN, int D, int kStages, class Steps, class Storage>
__device__ __forceinline__ void produce_kv_tiles(const AttnParams& p, const SeqInfo& si, int b, int kvh,
                                                 const Steps& steps, const KvTensorMaps& maps, Storage& s,
                                                 int first_step = 0, int from = 0, int to = INT_MAX) {
  const int row_base = static_cast<int>(si.tok0_k);
  const int kb = p.k_batch_stride == 0 ? 0 : b, vb = p.v_batch_stride == 0 ? 0 : b;
  const int end = to < steps.count ? to : steps.count;
  for (int tile = from; tile < end; ++tile) {
    const PipelineState<kStages> ps{first_step + tile};
    const int stage = ps.stage();
    if constexpr (Storage::kSplitKv) {
      int n0;
      bool full_unused;
      steps.at(p, si, tile, &n0, &full_unused);
      if (ps.refill()) mbar_wait(&s.empty_k[stage], ps.refill_phase());
      mbar_arrive_expect_tx(&s.full_k[stage], Storage::kTileBytes);
#pragma unroll 1
      for (int c = 0; c < D / 64; ++c)  // rolled: the producer thread has 40-56 registers
        tma_load_4d(s.k[stage] + c * kBlockN * 64, &maps.k, c * 64, row_base + n0, kvh, kb, &s.full_k[stage]);
      if (ps.refill()) mbar_wait(&s.empty_v[stage], ps.refill_phase());
      mbar_arrive_expect_tx(&s.full_v[stage], Storage::kTileBytes);
#pragma unroll 1
      for (int c = 0; c < D / 64; ++c)
        tma_load_4d(s.v[stage] + c * kBlockN * 64, &maps.v, c * 64, row_base + n0, kvh, vb, &s.full_v[stage]);
    } else {
      if (ps.refill()) mbar_wait(&s.empty[stage], ps.refill_phase());
      int n0;
      bool full_unused;
      steps.at(p, si, tile, &n0, &full_unused);
      mbar_arrive_expect_tx(&s.full[stage], 2 * Storage::kTileBytes);  // K and V
#pragma unroll 1
      for (int c = 0; c < D / 64; ++c) {  // rolled: the producer thread has 40-56 registers
        tma_load_4d(s.k[stage] + c * kBlockN * 64, &maps.k, c * 64, row_base + n0, kvh, kb, &s.full[stage]);
        tma_load_4d(s.v[stage] + c * kBlockN * 64, &maps.v, c * 64, row_base + n0, kvh, vb, &s.full[stage]);
      }
    }
  }
}

/// Producer role (one thread) of a persistent kernel: load the row tiles of
/// query tile `qt` (kBlockM rows: qt.Mq positions from qt.m0 of each of the
/// kBlockM / qt.Mq heads from qt.h0, head-major as the maps' boxes land) by TMA,
/// tile i from maps[i] into dst[i] (the forward's Q; the dQ kernel's Q and dO),
/// completing `full` by transaction bytes. Rows past the sequence read the
/// next sequence's tokens (THD), padding rows or zeros past the tensor; the
/// kernels never store them. The caller has waited for rows_empty.
template <int kBlockM, int D, int kTiles>
__device__ __forceinline__ void produce_row_tiles(const AttnParams& p, const QueryTile& qt,
                                                  const CUtensorMap* const (&maps)[kTiles],
                                                  uint16_t* const (&dst)[kTiles], uint64_t* full) {
  const int qb = p.q_batch_stride == 0 ? 0 : qt.b;  // (O's batch stride is 0 exactly when Q's is: THD)
  mbar_arrive_expect_tx(full, 2u * kBlockM * D * kTiles);
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int c = 0; c < D / 64; ++c)
      tma_load_4d(dst[i] + c * kBlockM * 64, maps[i], c * 64, static_cast<int>(qt.si.tok0_q) + qt.m0, qt.h0, qb, full);
}

/// A consumer's wait for key step `tile` of a query tile whose steps are
/// pipeline steps first_step ..: waits for the step's stage to be full and
/// returns it, with the step's first key (n0) and whether no pair of it is
/// masked (full).
template <int kStages, class Steps, class Storage>
__device__ __forceinline__ int wait_step(const AttnParams& p, const SeqInfo& si, const Steps& steps, Storage& sm,
                                         int first_step, int tile, int* n0, bool* full) {
  const PipelineState<kStages> ps{first_step + tile};
  mbar_wait(&sm.full[ps.stage()], ps.phase());
  steps.at(p, si, tile, n0, full);
  return ps.stage();
}

/// Floats per stage of a key step's staged learnable-bias terms (StagedBias,
/// produce_bias_terms): rel_bias needs one per query-key distance of the step,
/// kBlockM + kBlockN - 1.
constexpr int kBiasStageFloats = 256;
/// Bytes of `stages` bias stages for steps of kBlockM rows x kBlockN keys.
template <int kBlockM, int kBlockN>
constexpr size_t bias_stage_bytes(int stages) {
  static_assert(kBlockM + kBlockN - 1 <= kBiasStageFloats, "a step's distances fit a bias stage");
  return sizeof(float) * kBiasStageFloats * stages;
}

/// A key step's learnable-bias terms (rows m0 .. m0 + kBlockM - 1, keys n0 ..
/// n0 + kBlockN - 1) as StagedBias reads them: entry k is the term of key n0 + k
/// (offset_bias, `count` kBlockN entries) or of distance d_lo + k (rel_bias,
/// kBlockM + kBlockN - 1 entries; d_lo = m0 - n0 - kBlockN + 1, the step's least
/// i - j). An object holds one warp lane's entries lane + 32 u, loaded (load) and
/// later written to a stage (store), so that a wait can sit between.
template <int kBlockM, int kBlockN>
struct BiasTerms {
  static constexpr int kPerLane = (kBlockM + kBlockN - 1 + 31) / 32;
  float t[kPerLane];
  int count = 0;
  __device__ __forceinline__ static int entries(bool by_key) { return by_key ? kBlockN : kBlockM + kBlockN - 1; }
  __device__ __forceinline__ static int d_lo(int m0, int n0) { return m0 - n0 - (kBlockN - 1); }
  /// Entry k of the step at (m0, n0).
  __device__ __forceinline__ static float term(const ScoreMod2& mod, bool by_key, int m0, int n0, int k) {
    return by_key ? mod.bias_term(0, n0 + k) : mod.bias_term(d_lo(m0, n0) + k, 0);
  }
  __device__ __forceinline__ void load(const ScoreMod2& mod, bool by_key, int m0, int n0, int lane) {
    count = entries(by_key);
#pragma unroll
    for (int u = 0; u < kPerLane; ++u) {
      const int k = lane + 32 * u;
      t[u] = k >= count ? 0.f : term(mod, by_key, m0, n0, k);
    }
  }
  __device__ __forceinline__ void store(float* v, int lane) const {
#pragma unroll
    for (int u = 0; u < kPerLane; ++u)
      if (lane + 32 * u < count) v[lane + 32 * u] = t[u];
  }
  /// load() and store() one value at a time, for a warp with few registers (the
  /// dK/dV kernel's rows warp: 24).
  __device__ __forceinline__ static void copy(float* v, const ScoreMod2& mod, bool by_key, int m0, int n0, int lane) {
    const int n = entries(by_key);
#pragma unroll 1
    for (int k = lane; k < n; k += 32) v[k] = term(mod, by_key, m0, n0, k);
  }
};

/// Producer role (one warp, flex with a learnable bias): for each key step of
/// `steps` (rows m0 .. of query head h), the step's BiasTerms, loaded before the
/// wait for the stage (its barrier in `empty`, kStages of them) and written into
/// its kBiasStageFloats floats at `bias` once it is free; each lane then arrives
/// on the stage's barrier in `full` (whose count includes the 32). The dQ kernel
/// passes its stages' full / empty barriers, the forward its K tiles' full and its
/// V tiles' empty ones (the terms are read by the softmax, after the step's S and
/// before its P V retires). first_step as produce_kv_tiles.
template <int kBlockM, int kBlockN, int kStages, class Steps>
__device__ __forceinline__ void produce_bias_terms(const AttnParams& p, const SeqInfo& si, int b, int h, int m0,
                                                   const Steps& steps, uint64_t* full, uint64_t* empty, float* bias,
                                                   int lane, int first_step = 0) {
  const ScoreMod2 mod = ScoreMod2::of(p, h);
  const bool by_key = p.mod == ModKind::offset_bias;
  for (int tile = 0; tile < steps.count; ++tile) {
    const PipelineState<kStages> ps{first_step + tile};
    const int stage = ps.stage();
    int n0;
    bool full_unused;
    steps.at(p, si, tile, &n0, &full_unused);
    BiasTerms<kBlockM, kBlockN> terms;
    terms.load(mod, by_key, m0, n0, lane);  // before the wait for the stage: the loads' latency hides in it
    if (ps.refill()) mbar_wait(&empty[stage], ps.refill_phase());
    terms.store(bias + stage * kBiasStageFloats, lane);
    mbar_arrive(&full[stage]);
  }
}

/// The consumers' view of the bias terms staged at stage `stage` of `bias`
/// (BiasTerms) for the step of rows from m0 and kBlockN keys from n0.
template <int kBlockN>
__device__ __forceinline__ StagedBias staged_bias(const AttnParams& p, const float* bias, int stage, int m0, int n0) {
  const bool by_key = p.mod == ModKind::offset_bias;
  return {bias + stage * kBiasStageFloats, by_key ? n0 : BiasTerms<1, kBlockN>::d_lo(m0, n0), by_key};
}

}  // namespace attnbench::kernels::sm90
