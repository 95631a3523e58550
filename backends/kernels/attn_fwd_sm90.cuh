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
// functions. K / V tiles of kBlockN keys come through three cp.async stages;
// each stage is made visible to the tensor cores with fence.proxy.async before
// the barrier that publishes it.
#pragma once

#include "backends/kernels/attn_fwd.cuh"
#include "backends/kernels/wgmma_sm90.cuh"

namespace attnbench::kernels {

/// K / V stages of the Hopper forward: tile t + 1 loads while tile t computes and
/// the P V of tile t - 1 is still reading its V, so three.
constexpr int kFwdSm90Stages = 3;

/// Shared memory of attn_fwd_sm90_kernel: the Q tile and kFwdSm90Stages stages of
/// K and V tiles (16-bit elements), plus 1 KB to align the tiles to 1024 bytes
/// (the 128-byte swizzle repeats every 8 rows of 128 bytes). 225 KB at head_dim
/// 128 with 128-row, 128-key tiles (the H100 allows 227 KB per CTA).
template <int D, int kWG, int kBlockN>
constexpr size_t fwd_sm90_smem_bytes() {
  return 1024u + 2u * (static_cast<size_t>(64 * kWG) * D + 2u * kFwdSm90Stages * kBlockN * D);
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
/// (transposed) from its Sw128Tile.
template <int D, bool Bf16, int kBlockN, int kNp, int kDt>
__device__ __forceinline__ void pv(const uint32_t (&pa)[kNp][4], uint32_t v_addr, Acc (&o)[kDt]) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kNp; ++kk) {
    const uint64_t b = desc_mn_major(v_addr, Sw128Tile<kBlockN, D>::kChunkBytes, kk);
    if constexpr (kDt == 16)
      wgmma_rs_n128<Bf16, 1>(o, pa[kk], b, 1);
    else
      wgmma_rs_n64<Bf16, 1>(o, pa[kk], b, 1);
  }
  wgmma_commit();
}

}  // namespace sm90

/// kWG: warpgroups per CTA (2: 128 rows, the dense tile; 1: 64 rows, the
/// GQA-packed tile of short documents). kBlockN: keys per mainloop step (64 or
/// 128). Same arguments and work lists as attn_fwd_kernel (non-flex).
///
/// Mainloop, per key tile t (FlashAttention-3's overlap of the softmax of one
/// tile with the P V of the one before, section 3.2): wait for tile t's loads and
/// start tile t + 1's; issue S_t = Q K_t^T, then O += P_{t-1} V_{t-1}; wait for S_t
/// only; the softmax of S_t (P_t kept in float until O is free) runs while the
/// tensor cores finish P_{t-1} V_{t-1}; then wait, rescale O and turn P_t into
/// the A operands of the next step.
template <int D, bool Bf16, int kWG, int kBlockN>
__global__ void __launch_bounds__(kWG * 128, kWG == 1 ? 2 : 1)
    attn_fwd_sm90_kernel(const AttnParams p, const WorkItem* __restrict__ items, int pack) {
#if ATTNBENCH_SM90A
  constexpr int kThreads = kWG * 128, kBlockM = 64 * kWG, kStages = kFwdSm90Stages;
  constexpr int kNt = kBlockN / 8, kDt = D / 8;
  static_assert((kNt == 8 || kNt == 16) && (kDt == 8 || kDt == 16), "wgmma n64 / n128 shapes");
  using QTile = sm90::Sw128Tile<kBlockM, D>;
  using KVTile = sm90::Sw128Tile<kBlockN, D>;
  extern __shared__ uint8_t smem_raw[];
  uint16_t* sQ = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint16_t* sK = sQ + kBlockM * D;
  uint16_t* sV = sK + kStages * kBlockN * D;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
  const int head_chunks = p.heads_q / pack;
  const WorkItem item = items[blockIdx.x / head_chunks];
  const int h0 = (blockIdx.x % head_chunks) * pack;
  const int kvh = h0 / p.group;
  const int b = item.seq, m0 = item.start;
  const int Mq = kBlockM / pack;
  const SeqInfo si = seq_info(p, b);

  load_packed_rows<kBlockM, D, kThreads, QTile>(sQ, static_cast<const uint16_t*>(p.q), m0, Mq, si.lq, h0,
                                                [&](int t, int h) { return q_off(p, si, b, t, h); }, tid);
  const KeySteps<false> steps(p, si, b, m0, Mq, kBlockN);
  const int n_tiles = steps.count;
  const uint16_t* k_base = static_cast<const uint16_t*>(p.k) + k_off(p, si, b, 0, kvh);
  const uint16_t* v_base = static_cast<const uint16_t*>(p.v) + v_off(p, si, b, 0, kvh);
  auto load_kv = [&](int tile) {
    int n0;
    bool full_unused;
    steps.at(p, si, tile, &n0, &full_unused);
    const int stage = tile % kStages;
    load_kv_tile<kBlockN, D, kThreads, KVTile>(sK + stage * kBlockN * D, sV + stage * kBlockN * D, k_base, v_base,
                                               p.k_row_stride, p.v_row_stride, n0, si.lk, tid);
  };
  if (n_tiles > 0) load_kv(0);
  cp_async_commit();

  const int wh = h0 + (warp * 16) / Mq;
  const int wt0 = m0 + (warp * 16) % Mq;
  const int g = lane / 4, qd = lane % 4;
  const int row0 = wt0 + g, row1 = wt0 + g + 8;
  const ScoreMod2 mod = ScoreMod2::of(p, wh);
  const uint32_t q_addr = smem_u32(sQ), k_addr = smem_u32(sK), v_addr = smem_u32(sV);
  constexpr uint32_t kStageBytes = 2u * kBlockN * D;

  Acc o[kDt];
  zero_acc(o);
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  uint32_t pa[kNt / 2][4];

  for (int tile = 0; tile < n_tiles; ++tile) {
    // Tile t is in shared memory for every thread; the stage tile t + 1 refills
    // held tile t - 2, whose P V every warpgroup waited for in the last step.
    cp_async_wait<0>();
    sm90::fence_proxy_async();
    __syncthreads();
    if (tile + 1 < n_tiles) load_kv(tile + 1);
    cp_async_commit();
    int n0;
    bool full;
    steps.at(p, si, tile, &n0, &full);
    Acc s[kNt];
    sm90::scores<D, Bf16, kBlockM, kBlockN>(q_addr, k_addr + (tile % kStages) * kStageBytes, wg, s);
    if (tile > 0) {
      sm90::pv<D, Bf16, kBlockN>(pa, v_addr + ((tile - 1) % kStages) * kStageBytes, o);
      sm90::wgmma_wait<1>();  // S_t retired; P_{t-1} V_{t-1} may still run
    } else {
      sm90::wgmma_wait<0>();
    }
    sm90::fence_acc(s);
    float corr[2];
    fwd_softmax_p<false, kNt>(p, si, b, mod, full, n0, qd, row0, row1, s, m_run, l_run, corr);
    sm90::wgmma_wait<0>();
    sm90::fence_acc(o);
    rescale_o<kDt>(o, corr);
    sm90::p_operand<Bf16>(s, pa);
  }
  if (n_tiles > 0) {
    sm90::pv<D, Bf16, kBlockN>(pa, v_addr + ((n_tiles - 1) % kStages) * kStageBytes, o);
    sm90::wgmma_wait<0>();
    sm90::fence_acc(o);
  } else {
    cp_async_wait<0>();
  }

  fwd_store_row<Bf16, kDt>(p, si, b, row0, wh, qd, o, 0, m_run[0], l_run[0]);
  fwd_store_row<Bf16, kDt>(p, si, b, row1, wh, qd, o, 1, m_run[1], l_run[1]);
#else
  (void)p;
  (void)items;
  (void)pack;
  __trap();  // built without sm_90a: the host never launches this (fwd_sm90_usable)
#endif
}

}  // namespace attnbench::kernels
