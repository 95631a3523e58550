// The deterministic dQ kernel of the fused attention family, Hopper path
// (sm_90a): attn_bwd_dq_kernel's algorithm (one CTA per query tile walks the key
// tiles its rows see and accumulates dQ in registers, so no atomics and a fixed
// order: bitwise reproducible) with its three GEMMs on warpgroup MMAs, fed like
// the Hopper forward (attn_fwd_sm90.cuh): a producer warpgroup streams K / V
// tiles by TMA, one consumer warpgroup of 64 query rows computes
//   S  = Q K^T        SS, m64n64 (Q from shared memory, K K-major)
//   dP = dO V^T       SS, m64n64 (dO from shared memory, V K-major)
//   dS = P (dP - Dsum) score_mod'   in registers (dq_ds: masks, score mods)
//   dQ += dS K        RS, m64nD (dS from registers, K MN-major)
// With the Hopper dK / dV kernel in its kDq = false form this is the
// deterministic Hopper backward (7 GEMM-sized products instead of 5, no dQ
// accumulator, zeroing or conversion pass).
#pragma once

#include "backends/kernels/attn_bwd.cuh"
#include "backends/kernels/attn_fwd_sm90.cuh"  // sm90::scores, sm90::pv, sm90::p_operand
#include "backends/kernels/attn_launch.hpp"
#include "backends/kernels/pipeline_sm90.cuh"
#include "backends/kernels/wgmma_sm90.cuh"

namespace attnbench::kernels {

/// Query rows per CTA (one consumer warpgroup; the plan's dq_items, kDqBlockM) and
/// keys per step of attn_dq_sm90_kernel.
constexpr int kDqSm90BlockM = kDqBlockM;
constexpr int kDqSm90BlockN = kDqBlockN;  // make_bwd_tensor_maps encodes dq_kv with these boxes
/// K / V stages: three at head_dim 64; two at 128, where three would not leave
/// room for two CTAs per SM (Q and dO 32 KB + 3 x 32 KB).
template <int D>
constexpr int dq_sm90_stages() {
  return D == 64 ? 3 : 2;
}
static_assert(kDqSm90BlockM == 64, "one consumer warpgroup of 64 rows");

/// Shared memory of attn_dq_sm90_kernel (sm90::KvStageStorage): the Q and dO
/// tiles, dq_sm90_stages<D>() stages of K and V tiles, the stages' full / empty
/// barriers, the consumer warps' KeySpans. 96 KB at head_dim 128 (two CTAs per SM),
/// 64 KB at 64.
template <int D>
using DqSm90Storage = sm90::KvStageStorage<2, kDqSm90BlockM, kDqSm90BlockN, D, dq_sm90_stages<D>(), 4>;
/// Dynamic shared memory of attn_dq_sm90_kernel: the DqSm90Storage, and on the
/// flex path after it each stage's staged bias terms (sm90::kBiasStageFloats).
template <int D, bool kFlex = false>
constexpr size_t dq_sm90_smem_bytes() {
  return sizeof(DqSm90Storage<D>) +
         (kFlex ? sm90::bias_stage_bytes<kDqSm90BlockM, kDqSm90BlockN>(dq_sm90_stages<D>()) : 0);
}
constexpr int kDqSm90Threads = 2 * 128;  ///< the consumer warpgroup and the producer warpgroup
/// Registers after setmaxnreg, two CTAs per SM: the producer's tile loop
/// (QueryTile, KeySteps) needs 48; the consumers take the rest.
constexpr int kDqSm90ProducerRegs = 48;
constexpr int kDqSm90ConsumerRegs = 208;
static_assert(128 * (kDqSm90ProducerRegs + kDqSm90ConsumerRegs) <= 65536 / 2,
              "two CTAs per SM: consumer + producer registers exceed half the register file");

namespace sm90 {

/// Consumer role of attn_dq_sm90_kernel for query tile `qt`, the j-th tile of
/// this CTA (its key steps are pipeline steps first_step ..): stage the warps'
/// KeySpans, read the rows' LSE and Dsum, wait for Q and dO (rows_full), run the
/// key steps, release Q and dO (rows_empty) once the last step's S and dP have
/// retired (one arrival per thread per tile) and every K / V stage once its dQ
/// product has, and store dQ. Returns the tile's key steps.
template <int DH, bool Bf16, bool kFlex, class Storage>
__device__ __forceinline__ int dq_consume_tile(const AttnParams& p, const QueryTile& qt, Storage& sm,
                                               const float* s_bias, bool stage_bias, int first_step, int j) {
  constexpr int D = tile_dim(DH);
  constexpr int kBlockM = kDqSm90BlockM, kBlockN = kDqSm90BlockN, kStages = dq_sm90_stages<D>();
  constexpr int kNt = kBlockN / 8, kDt = D / 8;
  constexpr uint32_t kStageBytes = Storage::kTileBytes;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int b = qt.b, m0 = qt.m0, Mq = qt.Mq;
  const SeqInfo& si = qt.si;
  const KeySteps<kFlex> steps(p, si, b, m0, Mq, kBlockN);
  const int n_tiles = steps.count;
  const int wh = qt.h0 + (warp * 16) / Mq;
  const int wt0 = m0 + (warp * 16) % Mq;
  const int g = lane / 4, qd = lane % 4;
  const int row_t[2] = {wt0 + g, wt0 + g + 8};
  const RowBounds rb[2] = {row_bounds<kFlex>(p, si, b, row_t[0]), row_bounds<kFlex>(p, si, b, row_t[1])};
  int* span_buf = sm.span[j & 1];  // alternating buffers: one barrier per tile orders writes and reads
  stage_warp_span(rb, span_buf, warp, lane);  // partial steps outside the tile's span are skipped
  named_barrier(1, 128);
  const KeySpan span = warpgroup_span(span_buf, 0);
  // LSE loaded here, put in the exp2 domain after the wait for Q and dO: converted at
  // once (lse2_of, whose branch held the product next to the load), the consumers
  // stalled on the load (ncu, packed Llama-3-8B rows: 5% of their samples).
  const float lse[2] = {lse_of(p, si, b, row_t[0], wh), lse_of(p, si, b, row_t[1], wh)};
  const float dsum[2] = {dsum_of(p, si, b, row_t[0], wh), dsum_of(p, si, b, row_t[1], wh)};
  const ScoreMod2 mod = ScoreMod2::of(p, wh);
  const uint32_t q_addr = smem_u32(sm.rows[0]), do_addr = smem_u32(sm.rows[1]), k_addr = smem_u32(sm.k[0]),
                 v_addr = smem_u32(sm.v[0]);
  mbar_wait(&sm.rows_full, j & 1);
  const float lse2[2] = {lse2_from(lse[0]), lse2_from(lse[1])};

  Acc dq[kDt];
  zero_acc(dq);
  uint32_t dsa[kNt / 2][4];  // dS of the tile in stage ds_stage, as A operands
  int ds_stage = -1;         // the stage whose dQ += dS K is not issued yet
  for (int tile = 0; tile < n_tiles; ++tile) {
    int n0;
    bool full_tile;
    const int stage = wait_step<kStages>(p, si, steps, sm, first_step, tile, &n0, &full_tile);
    if (!full_tile && !span.meets(n0, kBlockN)) {  // no row of the tile sees these keys
      skip_step<D, Bf16, kBlockN>(sm, stage, tile == n_tiles - 1, ds_stage, dsa, k_addr, dq);
      continue;
    }
    Acc s[kNt], dp[kNt];
    scores<D, Bf16, kBlockM, kBlockN>(q_addr, k_addr + stage * kStageBytes, 0, s);    // S = Q K^T
    scores<D, Bf16, kBlockM, kBlockN>(do_addr, v_addr + stage * kStageBytes, 0, dp);  // dP = dO V^T
    if (ds_stage >= 0) {  // dQ += dS K of the previous tile runs while this tile's dS is computed
      pv<D, Bf16, kBlockN>(dsa, k_addr + ds_stage * kStageBytes, dq);
      wgmma_wait<1>();  // S and dP retired (groups retire in order)
    } else {
      wgmma_wait<0>();
    }
    fence_acc(s);
    fence_acc(dp);
    if (tile == n_tiles - 1) mbar_arrive(&sm.rows_empty);  // the tile's last reads of Q and dO have retired
    StagedBias sb;
    if (stage_bias) sb = staged_bias<kBlockN>(p, s_bias, stage, m0, n0);
    dq_ds<kFlex, kNt, true>(p, si, b, mod, full_tile, n0, qd, row_t, rb, lse2, dsum, s, dp, sb);
    wgmma_wait<0>();  // the previous dQ product has read dsa and K
    fence_acc(dq);
    if (ds_stage >= 0) mbar_arrive(&sm.empty[ds_stage]);
    p_operand<Bf16>(dp, dsa);
    ds_stage = stage;
  }
  if (n_tiles == 0) mbar_arrive(&sm.rows_empty);  // (no key step: Q and dO unread)
  if (ds_stage >= 0) {
    pv_retire<D, Bf16, kBlockN>(dsa, k_addr + ds_stage * kStageBytes, dq);
    mbar_arrive(&sm.empty[ds_stage]);
  }
  dq_store_rows<Bf16, kDt, DH / 8>(p, si, b, wh, row_t, qd, dq);
  return n_tiles;
}

}  // namespace sm90

/// dQ of the query tiles of `items` (`tiles` = TileScheduler::ctas(items, Hq /
/// pack); QueryTile: `pack` heads of one KV head x 64 / pack positions), scaled by
/// p.scale and written in the element type for positions < store_q. Same items,
/// masks, score mods and results as attn_bwd_dq_kernel (kFlex: the key steps of
/// the BlockMask lists of the tile's query block). `maps`: K and V with
/// kDqSm90BlockN-row boxes, Q and dO with the tile's boxes (make_bwd_tensor_maps'
/// dq). Needs Dsum and LSE. The CTA runs tile blockIdx.x and then the tiles its
/// scheduler thread (warp 7) claims from `counters` (as the Hopper forward: one tile per CTA
/// when launched with `tiles` CTAs, persistent when launched with fewer:
/// LaunchShape::persistent).
///
/// The producer warpgroup (setmaxnreg 48): one thread streams K / V tile pairs
/// through dq_sm90_stages<D>() stages (full barriers complete by transaction
/// bytes, empty ones when the consumer warpgroup has retired the products that
/// read them), the steps running on across the CTA's tiles; one thread of warp 2
/// loads each tile's Q and dO by TMA once the previous tile released them.
/// Per key tile the consumers issue S and dP as two commit groups and the
/// previous tile's dQ += dS K as a third, wait for S and dP only, and turn dP into
/// dS in registers while the tensor cores run that dQ product (the forward's P V
/// overlap, FlashAttention-3 section 3.2); partial tiles outside the KeySpan of the
/// tile's rows are skipped. A stage is released once the dQ product that reads its
/// K retires. Rows a box reads past a sequence (padding, the next THD sequence)
/// are masked (P = dS = 0), so they must be finite.
template <int DH, bool Bf16, bool kFlex = false>
__global__ void __launch_bounds__(kDqSm90Threads, 2)
    attn_dq_sm90_kernel(const AttnParams p, const WorkItem* __restrict__ items, int64_t tiles, int pack,
                        int* counters, const __grid_constant__ DqTensorMaps maps) {
#if ATTNBENCH_SM90A
  constexpr int D = sm90::tile_dim(DH);  // tiles of whole swizzle chunks; DH columns exist in memory
  constexpr int kBlockM = kDqSm90BlockM, kBlockN = kDqSm90BlockN, kStages = dq_sm90_stages<D>(), kConsumers = 128;
  using Storage = DqSm90Storage<D>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  Storage& sm = Storage::at(smem_raw);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // flex with a learnable bias: producer warp 1 stages each step's bias terms (StagedBias)
  const bool stage_bias = kFlex && learnable_bias(p.mod);
  float* s_bias = reinterpret_cast<float*>(smem_raw + sizeof(Storage));  // kFlex: dq_sm90_smem_bytes
  // the queue's readers: the four consumer warps, the K / V and Q / dO threads, the bias warp
  if (tid == 0) sm.init_barriers(kConsumers, stage_bias ? 1 + 32 : 1, 4 + 2 + (stage_bias ? 1 : 0));
  __syncthreads();  // the only CTA-wide barrier

  int step = 0, j = 0;  // the pipeline step of the tile's first key step; the CTA's tile count
  if (warp >= 4) {      // producer warpgroup: warp 4 copies K / V, 5 stages bias terms, 6 Q and dO, 7 schedules
    sm90::regs_dec<kDqSm90ProducerRegs>();
    const int role = lane == 0 ? warp - 4 : -1;  // one thread per role
    const bool kv = role == 0, biases = stage_bias && warp == 5, rows = role == 2;
    if (role == 3) {  // claims and decodes the CTA's tiles (TileScheduler, TileQueue)
      sm90::schedule_tiles<true>(p, TileScheduler{items, p.heads_q / pack, tiles, p.q_head_group}, counters, pack,
                                 kBlockM, sm.queue);
      return;
    }
    if (!kv && !biases && !rows) return;
#pragma unroll 1
    for (;; ++j) {  // only j and step live across tiles
      QueryTile qt;
      if (!sm.queue.take(j, biases, qt)) break;
      if (rows) {  // its own warp: waiting for the consumers to release Q and dO never holds up K / V
        if (j > 0) sm90::mbar_wait(&sm.rows_empty, (j - 1) & 1);
        const CUtensorMap* const row_maps[2] = {&maps.q, &maps.dout};
        uint16_t* const row_tiles[2] = {sm.rows[0], sm.rows[1]};
        sm90::produce_row_tiles<kBlockM, D, 2>(p, qt, row_maps, row_tiles, &sm.rows_full);
        continue;
      }
      const KeySteps<kFlex> steps(p, qt.si, qt.b, qt.m0, qt.Mq, kBlockN);
      if (kv) {
        sm90::produce_kv_tiles<kBlockN, D, kStages>(p, qt.si, qt.b, qt.kvh, steps, maps.kv, sm, step);
      } else {  // (flex: pack 1, the tile's rows are one head)
        sm90::produce_bias_terms<kBlockM, kBlockN, kStages>(p, qt.si, qt.b, qt.h0, qt.m0, steps, sm.full, sm.empty,
                                                            s_bias, lane, step);
      }
      step += steps.count;
    }
  } else {  // the consumer warpgroup
    sm90::regs_inc<kDqSm90ConsumerRegs>();
#pragma unroll 1
    for (;; ++j) {
      QueryTile qt;
      if (!sm.queue.take(j, true, qt)) break;
      step += sm90::dq_consume_tile<DH, Bf16, kFlex>(p, qt, sm, s_bias, stage_bias, step, j);
    }
  }
#else
  (void)p;
  (void)items;
  (void)tiles;
  (void)pack;
  (void)counters;
  __trap();  // built without sm_90a: the host never launches this (fwd_sm90_usable)
#endif
}

}  // namespace attnbench::kernels
