// The forward kernel of the fused attention family, Hopper path (sm_90a): the
// algorithm of attn_fwd.cuh (FlashAttention-2's Algorithm 1) with its two GEMMs
// on warpgroup MMAs (wgmma_sm90.cuh), as FlashAttention-3 (Shah et al. 2024,
// "FlashAttention-3", section 3) runs them: S = Q K^T with both operands in
// 128-byte swizzled shared memory, O += P V with P from registers and V read
// transposed from shared memory.
//
// A CTA of kWG warpgroups (4 warps each) owns kBlockM = 64 * kWG query rows; the
// row -> (head, position) map, the GQA packing and the register layout of S and
// O are those of the portable kernel with one 16-row m-tile per warp, so the
// online softmax (fwd_softmax), the score mods, the mask policy (KeySteps /
// RowBounds) and the epilogue (fwd_store_row) are the portable kernel's own
// functions. A producer warpgroup loads Q and streams the K / V tiles of kBlockN
// keys by TMA through full / empty barriers, over the query tiles the
// TileScheduler gives the CTA (see the kernel).
#pragma once

#include "backends/kernels/attn_fwd.cuh"
#include "backends/kernels/attn_launch.hpp"
#include "backends/kernels/pipeline_sm90.cuh"
#include "backends/kernels/wgmma_sm90.cuh"

namespace attnbench::kernels {

/// K / V stages of the Hopper forward at tile width D: tile t + 1 loads while tile
/// t computes and the P V of tile t - 1 is still reading its V, so three; two
/// above 128 (at 256, Q 64 KB + 3 x 64 KB would not fit the 227 KB of a CTA).
template <int D>
constexpr int fwd_sm90_stages() {
  return D > 128 ? 2 : 3;
}

/// Shared memory of attn_fwd_sm90_kernel (sm90::KvStageStorage): the Q tile,
/// fwd_sm90_stages<D>() stages of K and V tiles, the stages' full / empty
/// barriers and each consumer warp's KeySpan. 224 KB at head_dim 128 with 128-row,
/// 128-key tiles (the H100 allows 227 KB per CTA); 112 KB with 64-row, 64-key
/// tiles (two CTAs per SM); 192 KB at 256 with 128-row, 64-key tiles.
template <int D, int kWG, int kBlockN>
using FwdSm90Storage = sm90::KvStageStorage<1, 64 * kWG, kBlockN, D, fwd_sm90_stages<D>(), 4 * kWG>;
/// Dynamic shared memory of attn_fwd_sm90_kernel: the FwdSm90Storage, and on the
/// flex path after it each stage's staged bias terms (sm90::kBiasStageFloats).
template <int D, int kWG, int kBlockN, bool kFlex = false>
constexpr size_t fwd_sm90_smem_bytes() {
  return sizeof(FwdSm90Storage<D, kWG, kBlockN>) +
         (kFlex ? sm90::bias_stage_bytes<64 * kWG, kBlockN>(fwd_sm90_stages<D>()) : 0);
}

namespace sm90 {

/// Issue S (m64 x kNt * 8) = Q K^T of warpgroup `wg` for one K tile: D / 16
/// wgmmas, the first overwriting S (scale-d 0), as one commit group.
template <int D, bool Bf16, int kBlockM, int kBlockN, int kNt>
__device__ __forceinline__ void scores(uint32_t q_addr, uint32_t k_addr, int wg, Acc (&s)[kNt]) {
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const uint64_t a = desc_k_major(q_addr, Sw128Tile<kBlockM, D>::kChunkBytes, wg * 64, ks);
    const uint64_t b = desc_k_major(k_addr, Sw128Tile<kBlockN, D>::kChunkBytes, 0, ks);
    if constexpr (kNt == 16)
      wgmma_ss_n128<Bf16, 0>(s, a, b, ks > 0);
    else
      wgmma_ss_n64<Bf16, 0>(s, a, b, ks > 0);
  }
  wgmma_commit();
}

/// P (the kNt accumulator n-tiles of S after the softmax) as kNt / 2 A operands.
template <bool Bf16, int kNt>
__device__ __forceinline__ void p_operand(const Acc (&s)[kNt], uint32_t (&pa)[kNt / 2][4]) {
#pragma unroll
  for (int kk = 0; kk < kNt / 2; ++kk) acc_to_a<Bf16>(s[2 * kk], s[2 * kk + 1], pa[kk]);
}

/// Issue O (m64 x D) += P V for one V tile as one commit group: P from registers
/// (they must stay unchanged until the group retires), V read MN-major
/// (transposed) from its Sw128Tile. D 256: two m64n128 products per k-step, on
/// O's column halves (V's chunks 0-1 and 2-3).
template <int D, bool Bf16, int kBlockN, int kNp, int kDt>
__device__ __forceinline__ void pv(const uint32_t (&pa)[kNp][4], uint32_t v_addr, Acc (&o)[kDt]) {
  static_assert(kDt == 8 || kDt == 16 || kDt == 32, "O of 64, 128 or 256 columns");
  constexpr int kChunkBytes = Sw128Tile<kBlockN, D>::kChunkBytes;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kNp; ++kk) {
    const uint64_t b = desc_mn_major(v_addr, kChunkBytes, kk);
    if constexpr (kDt == 32) {
      wgmma_rs_n128<Bf16, 1>(*reinterpret_cast<Acc(*)[16]>(&o[0]), pa[kk], b, 1);
      wgmma_rs_n128<Bf16, 1>(*reinterpret_cast<Acc(*)[16]>(&o[16]), pa[kk],
                             desc_mn_major(v_addr + 2 * kChunkBytes, kChunkBytes, kk), 1);
    } else if constexpr (kDt == 16) {
      wgmma_rs_n128<Bf16, 1>(o, pa[kk], b, 1);
    } else {
      wgmma_rs_n64<Bf16, 1>(o, pa[kk], b, 1);
    }
  }
  wgmma_commit();
}

}  // namespace sm90

namespace sm90 {

/// O (m64 x D) += A B as pv() issues it, then wait until it retires: the last (or a
/// flushed) product of a pipeline whose A registers are about to be reused.
template <int D, bool Bf16, int kBlockN, int kNp, int kDt>
__device__ __forceinline__ void pv_retire(const uint32_t (&pa)[kNp][4], uint32_t b_addr, Acc (&o)[kDt]) {
  pv<D, Bf16, kBlockN>(pa, b_addr, o);
  wgmma_wait<0>();
  fence_acc(o);
}

/// A key step that no row of the consumer warpgroup sees, in a tile loop whose
/// product of the previous step (A operands `pa` from registers, B in stage
/// `pending` at b_base + pending * kStageBytes) is not issued yet: issue and
/// retire that product, release its stage and this one (`stage`), and after the
/// tile's last step (`last`) the row tiles (rows_empty). pending becomes -1.
/// The forward (P V) and the dQ kernel (dS K) skip steps so.
template <int D, bool Bf16, int kBlockN, int kNp, int kDt, class Storage>
__device__ __forceinline__ void skip_step(Storage& sm, int stage, bool last, int& pending,
                                          const uint32_t (&pa)[kNp][4], uint32_t b_base, Acc (&acc)[kDt]) {
  if (pending >= 0) {
    pv_retire<D, Bf16, kBlockN>(pa, b_base + pending * Storage::kTileBytes, acc);
    mbar_arrive(&sm.empty[pending]);
    pending = -1;
  }
  mbar_arrive(&sm.empty[stage]);
  if (last) mbar_arrive(&sm.rows_empty);
}

}  // namespace sm90

namespace sm90 {

/// Ping-pong of the two consumer warpgroups of a 128-row CTA (FlashAttention-3,
/// Shah et al. 2024, section 3.1; hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp's
/// warp_scheduler_barrier_sync / _arrive): the warpgroups issue a key step's
/// GEMMs (S_t and P_{t-1} V_{t-1}) in turn, so that one warpgroup's softmax runs
/// while the other's GEMMs hold the tensor cores. (The P V that skip_step flushes
/// and a tile's last one, pv_retire, are issued outside the turns.) Warpgroup w waits for its turn
/// on named barrier kFirstId + w and passes it by arriving on the other's;
/// warpgroup 1 gives warpgroup 0 the first turn (start). Both warpgroups walk
/// the same key steps of the same tiles and take one turn per step, skipped
/// steps included, so the turns stay paired; the CTA ends with one unmatched
/// arrival, as FlashAttention-3's. `on` false: every call is a no-op (one
/// warpgroup per CTA, or the option pingpong=off).
struct GemmTurns {
  static constexpr int kFirstId = 3;  // named barriers 1 and 2: the warpgroups' KeySpan barriers
  bool on;
  int wg;
  __device__ __forceinline__ void start() const {
    if (on && wg == 1) named_arrive(kFirstId, 256);
  }
  __device__ __forceinline__ void wait() const {
    if (on) named_barrier(kFirstId + wg, 256);
  }
  __device__ __forceinline__ void pass() const {
    if (on) named_arrive(kFirstId + 1 - wg, 256);
  }
};

}  // namespace sm90

/// Threads of attn_fwd_sm90_kernel: kWG consumer warpgroups and one producer
/// warpgroup (registers are allocated per warpgroup: a lone producer warp would
/// cost as much; setmaxnreg moves its registers to the consumers).
template <int kWG>
constexpr int fwd_sm90_threads() {
  return (kWG + 1) * 128;
}
/// Registers per thread after setmaxnreg (multiples of 8): the consumers take
/// the rest of the 64 K of the SM (kWG = 2, one CTA per SM: 2 x 128 x 224 + 128 x
/// 56) or of half of it (kWG = 1, two CTAs per SM: 128 x 208 + 128 x 48). The
/// producer's tile loop (QueryTile, KeySteps, the BlockWalk) spilled 4-44 bytes
/// at 40 registers; at 224 / 208 the consumers do not spill up to head_dim
/// 128. At 256 (one tile per CTA): 232 / 216 and 40, the consumers' O needs them.
template <int kWG, int D>
constexpr int fwd_sm90_producer_regs() {
  return !persistent_head_dim(D) ? 40 : kWG == 2 ? 56 : 48;
}
template <int kWG, int D>
constexpr int fwd_sm90_consumer_regs() {
  if (!persistent_head_dim(D)) return kWG == 2 ? 232 : 216;
  return kWG == 2 ? 224 : 208;
}

namespace sm90 {

/// Consumer role of the Hopper forward for one query tile `qt` (the j-th tile of
/// this CTA; its key steps are pipeline steps first_step ..): stage the warps'
/// KeySpans, wait for the Q tile (rows_full), run the key steps (see
/// attn_fwd_sm90_kernel), release Q (rows_empty) once the last step's S has
/// retired (every thread arrives once per tile) and every K / V stage once its
/// P V has, and store O and LSE.
/// `turns`: the warpgroups' GEMM turns (GemmTurns), one per key step.
/// Returns the tile's key steps.
template <int DH, bool Bf16, int kWG, int kBlockN, bool kFlex, class Storage>
__device__ __forceinline__ int fwd_consume_tile(const AttnParams& p, const QueryTile& qt, Storage& sm,
                                                const float* s_bias, bool stage_bias, int first_step, int j,
                                                const GemmTurns& turns) {
  constexpr int D = tile_dim(DH), kBlockM = 64 * kWG, kStages = fwd_sm90_stages<D>();
  constexpr int kNt = kBlockN / 8, kDt = D / 8;
  constexpr uint32_t kStageBytes = Storage::kTileBytes;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
  const int b = qt.b, m0 = qt.m0, Mq = qt.Mq;
  const SeqInfo& si = qt.si;
  const KeySteps<kFlex> steps(p, si, b, m0, Mq, kBlockN);
  const int n_tiles = steps.count;
  const int wh = qt.h0 + (warp * 16) / Mq;
  const int wt0 = m0 + (warp * 16) % Mq;
  const int g = lane / 4, qd = lane % 4;
  const int row0 = wt0 + g, row1 = wt0 + g + 8;
  const RowBounds rb[2] = {row_bounds<kFlex>(p, si, b, row0), row_bounds<kFlex>(p, si, b, row1)};
  int* span_buf = sm.span[j & 1];  // alternating buffers: one barrier per tile orders writes and reads
  stage_warp_span(rb, span_buf, warp, lane);  // partial steps outside the warpgroup's span are skipped
  named_barrier(1 + wg, 128);                 // the warpgroup's spans are in shared memory
  const KeySpan span = warpgroup_span(span_buf, 4 * wg);
  const ScoreMod2 mod = ScoreMod2::of(p, wh);
  const uint32_t q_addr = smem_u32(sm.rows[0]), k_addr = smem_u32(sm.k[0]), v_addr = smem_u32(sm.v[0]);
  mbar_wait(&sm.rows_full, j & 1);

  Acc o[kDt];
  zero_acc(o);
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  uint32_t pa[kNt / 2][4];
  int p_stage = -1;  // the stage of the tile whose P is in pa and whose P V is not issued yet

  for (int tile = 0; tile < n_tiles; ++tile) {
    int n0;
    bool full_tile;
    const int stage = wait_step<kStages>(p, si, steps, sm, first_step, tile, &n0, &full_tile);
    if (!full_tile && !span.meets(n0, kBlockN)) {  // no row of this warpgroup sees these keys
      turns.wait();
      turns.pass();
      skip_step<D, Bf16, kBlockN>(sm, stage, tile == n_tiles - 1, p_stage, pa, v_addr, o);  // (Q release: below)
      continue;
    }
    Acc s[kNt];
    turns.wait();
    scores<D, Bf16, kBlockM, kBlockN>(q_addr, k_addr + stage * kStageBytes, wg, s);
    if (p_stage >= 0) {
      pv<D, Bf16, kBlockN>(pa, v_addr + p_stage * kStageBytes, o);
      turns.pass();
      wgmma_wait<1>();  // S_t retired; P_{t-1} V_{t-1} may still run
    } else {
      turns.pass();
      wgmma_wait<0>();
    }
    fence_acc(s);
    // The tile's last S = Q K^T has retired: release Q, so that the next tile's Q
    // loads during this softmax, the last P V and the stores.
    if (tile == n_tiles - 1) mbar_arrive(&sm.rows_empty);
    float corr[2];
    StagedBias sb;
    if (stage_bias) sb = staged_bias<kBlockN>(p, s_bias, stage, m0, n0);
    // The mask-alone loop of partial steps (kMaskAlone) on every tile shape: measured faster
    // with it than without on every dense D128 row (H200, session 21: causal S8192 forward
    // 0.967 against 1.038 ms, full S8192 1.845 against 1.894; it cost a 28-byte spill at head
    // dims 96 / 128 until the scale moved into the exp2, session 23).
    fwd_softmax_p<kFlex, kNt, true>(p, si, b, mod, full_tile, n0, qd, row0, row1, s, m_run, l_run, corr, rb, sb);
    wgmma_wait_after<0>(l_run[0], l_run[1]);  // the softmax's exp2 (summed in l_run) run beside P V
    fence_acc(o);
    if (p_stage >= 0) mbar_arrive(&sm.empty[p_stage]);  // K / V of the previous tile are read
    rescale_o<kDt>(o, corr);
    p_operand<Bf16>(s, pa);
    p_stage = stage;
  }
  if (n_tiles == 0) mbar_arrive(&sm.rows_empty);  // (no key step: Q unread)
  if (p_stage >= 0) {
    pv_retire<D, Bf16, kBlockN>(pa, v_addr + p_stage * kStageBytes, o);
    mbar_arrive(&sm.empty[p_stage]);
  }
  fwd_store_row<Bf16, kDt, DH / 8>(p, si, b, row0, wh, qd, o, 0, m_run[0], l_run[0]);
  fwd_store_row<Bf16, kDt, DH / 8>(p, si, b, row1, wh, qd, o, 1, m_run[1], l_run[1]);
  return n_tiles;
}

}  // namespace sm90

/// kWG: consumer warpgroups per CTA (2: 128 rows, the dense tile; 1: 64 rows,
/// the GQA-packed tile of short documents). kBlockN: keys per mainloop step (64
/// or 128). kFlex: the key steps come from the BlockMask (64 keys, one query
/// block of 64 * kWG rows per CTA) and partial tiles evaluate mask_allowed(), as
/// in attn_fwd_kernel. Same work lists as attn_fwd_kernel: `tiles` =
/// TileScheduler::ctas(items, heads_q / pack) query tiles; the CTA runs tile
/// blockIdx.x and (head dims up to 128) the tiles it claims from `counters`
/// (two ints, zero before the launch and after it: TileScheduler::claim /
/// retire) until none is left, so a launch of `tiles` CTAs runs one tile each
/// and a launch of fewer is persistent. `pingpong` (kWG = 2, head dims up to
/// 128): the consumer warpgroups issue their GEMMs in turn (sm90::GemmTurns).
///
/// Warp specialization (FlashAttention-3, section 3.1): the last warpgroup is
/// the producer (its registers handed to the consumers with setmaxnreg); a thread
/// of its warp 0 claims the CTA's tiles and hands them on (sm90::TileQueue), one
/// of its warp 2 loads each tile's Q by TMA once the previous tile's consumers
/// released it (rows_full / rows_empty), a thread of its warp 0 streams the K / V
/// tiles through fwd_sm90_stages<D>() stages with TMA bulk tensor copies (`maps`, 128-byte
/// swizzled boxes that land in the Sw128Tile layout), each stage completing its
/// `full` barrier by transaction bytes; the pipeline's steps run on across the
/// CTA's tiles, so the next tile's Q, K and V load while this tile's last
/// products, softmax and stores run. Without `pingpong` the consumer warpgroups
/// never wait for each other. Per key tile t they wait for `full`, issue S_t = Q K_t^T and then O +=
/// P_{t-1} V_{t-1}, wait for S_t only, run the softmax of S_t while the tensor
/// cores finish P_{t-1} V_{t-1} (section 3.2); with `pingpong` they take turns
/// to issue a step's GEMMs, so that one's softmax also runs beside the other's
/// GEMMs (section 3.1), then wait, release stage t - 1 on
/// its `empty` barrier, rescale O and turn P_t into the A operands of the next
/// step (sm90::fwd_consume_tile). A partial tile outside the KeySpan of a
/// warpgroup's rows is skipped by that warpgroup (it only releases the stage,
/// after issuing a pending P V). Rows past a sequence's keys that a box reads
/// (the next sequence's tokens in THD, padding rows, or zeros past the tensor)
/// are masked like any key past lk; query rows past it are never stored.
template <int DH, bool Bf16, int kWG, int kBlockN, bool kFlex = false>
__global__ void __launch_bounds__(fwd_sm90_threads<kWG>(), kWG == 1 ? 2 : 1)
    attn_fwd_sm90_kernel(const AttnParams p, const WorkItem* __restrict__ items, int64_t tiles, int pack,
                         int* counters, bool pingpong, const __grid_constant__ FwdTensorMaps maps) {
#if ATTNBENCH_SM90A
  constexpr int D = sm90::tile_dim(DH);  // tiles of whole swizzle chunks; DH columns exist in memory
  constexpr int kConsumers = kWG * 128, kBlockM = 64 * kWG, kStages = fwd_sm90_stages<D>();
  static_assert((kBlockN == 64 || kBlockN == 128) && (D == 64 || D == 128 || D == 256), "wgmma n64 / n128 shapes");
  using Storage = FwdSm90Storage<D, kWG, kBlockN>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  Storage& sm = Storage::at(smem_raw);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
  // flex with a learnable bias: producer warp 1 stages each step's bias terms (StagedBias)
  const bool stage_bias = kFlex && learnable_bias(p.mod);
  float* s_bias = reinterpret_cast<float*>(smem_raw + sizeof(Storage));  // kFlex: fwd_sm90_smem_bytes
  // the queue's readers: every consumer warp, the Q thread, the bias warp
  if (tid == 0) sm.init_barriers(kConsumers, stage_bias ? 1 + 32 : 1, kConsumers / 32 + 1 + (stage_bias ? 1 : 0));
  __syncthreads();  // the only CTA-wide barrier

  // The CTA's tiles: the K / V thread claims each (TileScheduler::claim, one
  // tile ahead), decodes it and hands it to the Q thread, the bias warp and the
  // consumer warps through sm.queue; each role walks the same tiles j = 0, 1, ...
  // (A thread of its own, sm90::schedule_tiles as in the dQ kernel, measured
  // slower here: dense D128 forward 2.7-6.6% on the H200, session 21, calls B / D.)
  const TileScheduler sched{items, p.heads_q / pack, tiles, p.q_head_group};
  int step = 0, j = 0;  // the pipeline step of the tile's first key step; the CTA's tile count
  if (wg == kWG) {      // producer warpgroup: warp 0 copies K / V, warp 1 stages bias terms, warp 2 copies Q
    sm90::regs_dec<fwd_sm90_producer_regs<kWG, D>()>();
    const int role = tid % 32 == 0 ? tid / 32 - kConsumers / 32 : -1;  // one thread per role
    const bool kv = role == 0, biases = stage_bias && tid / 32 == kConsumers / 32 + 1, q = role == 2;
    if (!kv && !biases && !q) return;
    int64_t next = blockIdx.x;  // the K / V thread's claim of tile j
#pragma unroll 1
    for (;; ++j) {  // (as the consumers' loop: only j, step and next live across tiles)
      QueryTile qt;
      const bool more = kv ? sm90::publish_tile(p, sched, next, pack, kBlockM, j, sm.queue, qt)
                           : sm.queue.take(j, biases, qt);
      if (!more) break;
      if (q) {  // its own warp: waiting for the consumers to release Q never holds up the K / V stages
        if (j > 0) sm90::mbar_wait(&sm.rows_empty, (j - 1) & 1);
        const CUtensorMap* const q_map[1] = {&maps.q};
        sm90::produce_row_tiles<kBlockM, D, 1>(p, qt, q_map, sm);
        if constexpr (!persistent_head_dim(DH)) break;
        continue;
      }
      const KeySteps<kFlex> steps(p, qt.si, qt.b, qt.m0, qt.Mq, kBlockN);
      if (kv) {
        if constexpr (persistent_head_dim(DH)) next = TileScheduler::claim(counters);  // its latency hides in the loads
        sm90::produce_kv_tiles<kBlockN, D, kStages>(p, qt.si, qt.b, qt.kvh, steps, maps.kv, sm, step);
      } else {
        sm90::produce_bias_terms<kBlockM, kBlockN, kStages>(p, qt.si, qt.b, qt.h0, qt.m0, steps, sm, s_bias, lane,
                                                            step);
      }
      step += steps.count;
      if constexpr (!persistent_head_dim(DH)) break;
    }
    if (kv && persistent_head_dim(DH)) TileScheduler::retire(counters);
  } else {  // consumer warpgroups
    sm90::regs_inc<fwd_sm90_consumer_regs<kWG, D>()>();
    // (up to head_dim 128: at 256 the flex consumers spilled 36 bytes with the turns compiled in, ptxas)
    const sm90::GemmTurns turns{kWG == 2 && persistent_head_dim(DH) && pingpong, wg};
    turns.start();
#pragma unroll 1
    for (;; ++j) {  // only j and step live across tiles: the consumers sit at their register limit
      QueryTile qt;
      if (!sm.queue.take(j, true, qt)) break;
      step += sm90::fwd_consume_tile<DH, Bf16, kWG, kBlockN, kFlex>(p, qt, sm, s_bias, stage_bias, step, j, turns);
      if constexpr (!persistent_head_dim(DH)) break;  // one tile per CTA: no state across tiles
    }
  }
#else
  (void)p;
  (void)items;
  (void)tiles;
  (void)pack;
  (void)counters;
  (void)pingpong;
  __trap();  // built without sm_90a: the host never launches this (fwd_sm90_usable)
#endif
}

}  // namespace attnbench::kernels
