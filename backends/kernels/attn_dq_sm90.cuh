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
constexpr int kDqSm90ProducerRegs = 40;
constexpr int kDqSm90ConsumerRegs = 216;
static_assert(128 * (kDqSm90ProducerRegs + kDqSm90ConsumerRegs) <= 65536 / 2,
              "two CTAs per SM: consumer + producer registers exceed half the register file");

/// dQ of the query tile of work item blockIdx.x / (Hq / pack) (QueryTile: `pack`
/// heads of one KV head x 64 / pack positions), scaled by p.scale and written in
/// the element type for positions < store_q. Same items, masks, score mods and
/// results as attn_bwd_dq_kernel (kFlex: the key steps of the BlockMask lists of
/// the tile's query block). `maps`: K and V with kDqSm90BlockN-row boxes
/// (make_bwd_tensor_maps' dq_kv). Needs Dsum and LSE.
///
/// The producer warpgroup (setmaxnreg 40) has one thread stream K / V tile pairs
/// through dq_sm90_stages<D>() stages (full barriers complete by transaction bytes, empty
/// ones when the consumer warpgroup has retired the products that read them).
/// Per key tile the consumers issue S and dP as two commit groups and the
/// previous tile's dQ += dS K as a third, wait for S and dP only, and turn dP into
/// dS in registers while the tensor cores run that dQ product (the forward's P V
/// overlap, FlashAttention-3 section 3.2); partial tiles outside the KeySpan of the
/// tile's rows are skipped. A stage is released once the dQ product that reads its K
/// retires. Rows a box reads past a sequence
/// (padding, the next THD sequence) are masked (P = dS = 0), so they must be finite.
template <int DH, bool Bf16, bool kFlex = false>
__global__ void __launch_bounds__(kDqSm90Threads, 2)
    attn_dq_sm90_kernel(const AttnParams p, const WorkItem* __restrict__ items, int pack,
                        const __grid_constant__ KvTensorMaps maps) {
#if ATTNBENCH_SM90A
  constexpr int D = sm90::tile_dim(DH);  // tiles of whole swizzle chunks; DH columns exist in memory
  constexpr int kBlockM = kDqSm90BlockM, kBlockN = kDqSm90BlockN, kStages = dq_sm90_stages<D>(), kConsumers = 128;
  constexpr int kNt = kBlockN / 8, kDt = D / 8;
  using RowTile = sm90::Sw128Tile<kBlockM, D>;
  using Storage = DqSm90Storage<D>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  Storage& sm = Storage::at(smem_raw);
  uint16_t* sQ = sm.rows[0];
  uint16_t* sdO = sm.rows[1];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const QueryTile qt = QueryTile::of(p, items, pack, kBlockM);
  const int h0 = qt.h0, kvh = qt.kvh, b = qt.b, m0 = qt.m0, Mq = qt.Mq;
  const SeqInfo si = qt.si;
  const KeySteps<kFlex> steps(p, si, b, m0, Mq, kBlockN);
  const int n_tiles = steps.count;
  constexpr uint32_t kStageBytes = Storage::kTileBytes;
  // flex with a learnable bias: producer warp 1 stages each step's bias terms (StagedBias)
  const bool stage_bias = kFlex && learnable_bias(p.mod);
  float* s_bias = reinterpret_cast<float*>(smem_raw + sizeof(Storage));  // kFlex: dq_sm90_smem_bytes
  if (tid == 0) sm.init_barriers(kConsumers, stage_bias ? 1 + 32 : 1);
  __syncthreads();  // the only CTA-wide barrier

  if (warp >= 4) {  // producer warpgroup
    sm90::regs_dec<kDqSm90ProducerRegs>();
    if (tid == kConsumers) sm90::produce_kv_tiles<kBlockN, D, kStages>(p, si, b, kvh, steps, maps, sm);
    if (stage_bias && warp == 5)  // (flex: pack 1, the tile's rows are one head)
      sm90::produce_bias_terms<kBlockM, kBlockN, kStages>(p, si, b, h0, m0, steps, sm, s_bias, lane);
  } else {  // the consumer warpgroup
    sm90::regs_inc<kDqSm90ConsumerRegs>();
    load_packed_rows<kBlockM, D, kConsumers, RowTile, DH>(sQ, static_cast<const uint16_t*>(p.q), m0, Mq, si.lq, h0,
                                                      [&](int t, int h) { return q_off(p, si, b, t, h); }, tid);
    load_packed_rows<kBlockM, D, kConsumers, RowTile, DH>(sdO, static_cast<const uint16_t*>(p.dout), m0, Mq, si.lq, h0,
                                                      [&](int t, int h) { return o_off(p, si, b, t, h); }, tid);
    const int wh = h0 + (warp * 16) / Mq;
    const int wt0 = m0 + (warp * 16) % Mq;
    const int g = lane / 4, qd = lane % 4;
    const int row_t[2] = {wt0 + g, wt0 + g + 8};
    const RowBounds rb[2] = {row_bounds<kFlex>(p, si, b, row_t[0]), row_bounds<kFlex>(p, si, b, row_t[1])};
    stage_warp_span(rb, sm.span[0], warp, lane);  // partial steps outside the tile's span are skipped
    cp_async_commit();
    cp_async_wait<0>();
    sm90::fence_proxy_async();  // the rows' stores, before wgmma reads them
    sm90::named_barrier(1, kConsumers);
    const KeySpan span = warpgroup_span(sm.span[0], 0);
    const float lse2[2] = {lse2_of(p, si, b, row_t[0], wh), lse2_of(p, si, b, row_t[1], wh)};
    const float dsum[2] = {dsum_of(p, si, b, row_t[0], wh), dsum_of(p, si, b, row_t[1], wh)};
    const ScoreMod2 mod = ScoreMod2::of(p, wh);
    const uint32_t q_addr = smem_u32(sQ), do_addr = smem_u32(sdO), k_addr = smem_u32(sm.k[0]), v_addr = smem_u32(sm.v[0]);

    Acc dq[kDt];
    zero_acc(dq);
    uint32_t dsa[kNt / 2][4];  // dS of the tile in stage ds_stage, as A operands
    int ds_stage = -1;         // the stage whose dQ += dS K is not issued yet
    for (int tile = 0; tile < n_tiles; ++tile) {
      const sm90::PipelineState<kStages> ps{tile};
      const int stage = ps.stage();
      sm90::mbar_wait(&sm.full[stage], ps.phase());
      int n0;
      bool full_tile;
      steps.at(p, si, tile, &n0, &full_tile);
      if (!full_tile && !span.meets(n0, kBlockN)) {  // no row of the tile sees these keys
        if (ds_stage >= 0) {
          sm90::pv_retire<D, Bf16, kBlockN>(dsa, k_addr + ds_stage * kStageBytes, dq);
          sm90::mbar_arrive(&sm.empty[ds_stage]);
          ds_stage = -1;
        }
        sm90::mbar_arrive(&sm.empty[stage]);
        continue;
      }
      Acc s[kNt], dp[kNt];
      sm90::scores<D, Bf16, kBlockM, kBlockN>(q_addr, k_addr + stage * kStageBytes, 0, s);    // S = Q K^T
      sm90::scores<D, Bf16, kBlockM, kBlockN>(do_addr, v_addr + stage * kStageBytes, 0, dp);  // dP = dO V^T
      if (ds_stage >= 0) {  // dQ += dS K of the previous tile runs while this tile's dS is computed
        sm90::pv<D, Bf16, kBlockN>(dsa, k_addr + ds_stage * kStageBytes, dq);
        sm90::wgmma_wait<1>();  // S and dP retired (groups retire in order)
      } else {
        sm90::wgmma_wait<0>();
      }
      sm90::fence_acc(s);
      sm90::fence_acc(dp);
      StagedBias sb;
      if (stage_bias)
        sb = sm90::staged_bias<kBlockN>(p, s_bias, stage, m0, n0);
      dq_ds<kFlex, kNt>(p, si, b, mod, full_tile, n0, qd, row_t, rb, lse2, dsum, s, dp, sb);
      sm90::wgmma_wait<0>();  // the previous dQ product has read dsa and K
      sm90::fence_acc(dq);
      if (ds_stage >= 0) sm90::mbar_arrive(&sm.empty[ds_stage]);
      sm90::p_operand<Bf16>(dp, dsa);
      ds_stage = stage;
    }
    if (ds_stage >= 0) {
      sm90::pv_retire<D, Bf16, kBlockN>(dsa, k_addr + ds_stage * kStageBytes, dq);
    }
    dq_store_rows<Bf16, kDt, DH / 8>(p, si, b, wh, row_t, qd, dq);
  }
#else
  (void)p;
  (void)items;
  (void)pack;
  __trap();  // built without sm_90a: the host never launches this (fwd_sm90_usable)
#endif
}

}  // namespace attnbench::kernels
