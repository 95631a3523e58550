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

/// Q tiles of the Hopper forward at tile width D with kWG consumer warpgroups:
/// two in the 128-row kernel where a CTA loops over query tiles
/// (persistent_head_dim), so that the next tile's Q loads while this tile runs; one
/// at 256 (one tile per CTA) and in the 64-row kernel (below).
template <int D, int kWG>
constexpr int fwd_sm90_q_bufs() {
  return kWG == 2 && persistent_head_dim(D) ? 2 : 1;
}

/// K / V stages of the Hopper forward at tile width D with kWG consumer
/// warpgroups and kBlockN-key steps. K and V have barriers of their own
/// (sm90::FwdStageStorage), so two stages give each load about a step of slack
/// (K_{t+1} fills K_{t-1}'s buffer once S_{t-1} has retired, V_{t+1} V_{t-1}'s once
/// P_{t-1} V_{t-1} has, in step t; V_{t+1} is read in step t + 2). 128-row CTAs:
/// as many as shared memory holds beside the Q buffers, up to 4: 2 at head_dim 128
/// with 128-key steps (Q 2 x 32 KB + 2 x 64 KB), 4 with flex's 64-key steps, 2 at
/// 256 (Q 64 KB + 2 x 64 KB). 64-row CTAs (two per SM): 3, 2 at 256, with one Q
/// buffer, as before session 26 (two stages and two Q buffers made the packed
/// CodeAlpaca forward, which runs them, 4% slower: H200, session 26, call D).
template <int D, int kWG, int kBlockN>
constexpr int fwd_sm90_stages() {
  if (kWG == 1) return D > 128 ? 2 : 3;
  constexpr int kQBytes = fwd_sm90_q_bufs<D, kWG>() * 64 * kWG * D * 2, kStageBytes = 2 * kBlockN * D * 2;
  constexpr int kBudget = (227 - 4) * 1024;  // less barriers, spans, queue and flex's bias stages
  constexpr int n = (kBudget - kQBytes) / kStageBytes;
  return n < 2 ? 2 : n > 4 ? 4 : n;
}

/// Whether the Hopper forward passes its GEMMs' shared addresses through
/// sm90::warp_uniform: in the 128-row kernel (kWG 2), where it measured 1-3%
/// faster (session 26); the 64-row kernel keeps per-thread addresses (with both
/// changes together its packed forward was slower, and the two were not measured
/// apart).
template <int kWG>
constexpr bool fwd_sm90_uniform_addresses() {
  return kWG == 2;
}

namespace sm90 {

/// Shared memory of attn_fwd_sm90_kernel: kQBufs Q tiles of kBlockM x D
/// (fwd_sm90_q_bufs: tile j uses buffer j % kQBufs), K and V tiles of kBlockN x D
/// in kStages stages with barriers of their own (FlashAttention-3's separate K and
/// V pipelines: a K tile is released once its S = Q K^T has retired, a V tile once
/// its P V has), each consumer warp's KeySpan twice (a tile loop alternates them)
/// and the tile queue; every tile in the 128-byte swizzled Sw128Tile layout at a
/// multiple of 1024 bytes. sizeof is the launch's dynamic shared memory before
/// flex's bias stages.
template <int kQBufs_, int kBlockM, int kBlockN, int D, int kStages, int kSpanWarps>
struct FwdStageStorage
    : StageStorageBase<FwdStageStorage<kQBufs_, kBlockM, kBlockN, D, kStages, kSpanWarps>, kBlockM, kBlockN, D> {
  static constexpr bool kSplitKv = true;  ///< K and V on barriers of their own (produce_kv_tiles)
  static constexpr int kQBufs = kQBufs_;
  uint16_t rows[kQBufs][kBlockM * D];  ///< Q
  uint16_t k[kStages][kBlockN * D];
  uint16_t v[kStages][kBlockN * D];
  uint64_t full_k[kStages];   ///< K loaded (TMA transaction bytes; flex with a learnable bias: and the step's terms)
  uint64_t empty_k[kStages];  ///< K read by every consumer thread
  uint64_t full_v[kStages];   ///< V loaded
  uint64_t empty_v[kStages];  ///< V (and the step's bias terms) read by every consumer thread
  uint64_t rows_full[kQBufs];   ///< Q loaded by TMA
  uint64_t rows_empty[kQBufs];  ///< Q read by every consumer thread
  int span[2][2 * kSpanWarps];  ///< consumer warp w's KeySpan: [.][2 w] = lo, [.][2 w + 1] = hi
  TileQueue<QueryTile> queue;   ///< the CTA's tiles, from the claiming thread to the other roles

  /// Thread 0 initialises the barriers (full_k: `k_producers` arrivals, the copy
  /// thread's with the bytes, and flex's bias lanes; empty_k / empty_v /
  /// rows_empty: `consumers`; the queue's: `queue_readers`) and fences them for
  /// the TMA unit; the caller's CTA-wide barrier follows.
  __device__ __forceinline__ void init_barriers(int consumers, int k_producers, int queue_readers) {
    for (int st = 0; st < kStages; ++st) {
      mbar_init(&full_k[st], k_producers);
      mbar_init(&empty_k[st], consumers);
      mbar_init(&full_v[st], 1);
      mbar_init(&empty_v[st], consumers);
    }
    for (int i = 0; i < kQBufs; ++i) {
      mbar_init(&rows_full[i], 1);
      mbar_init(&rows_empty[i], consumers);
    }
    queue.init(queue_readers);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the TMA unit too
  }
};

}  // namespace sm90

/// Shared memory of attn_fwd_sm90_kernel (sm90::FwdStageStorage): 192 KB at
/// head_dim 128 with 128-row, 128-key tiles (the H100 allows 227 KB per CTA); 112 KB
/// with 64-row, 64-key tiles (two CTAs per SM); 192 KB at 256 with 128-row,
/// 64-key tiles.
template <int D, int kWG, int kBlockN>
using FwdSm90Storage =
    sm90::FwdStageStorage<fwd_sm90_q_bufs<D, kWG>(), 64 * kWG, kBlockN, D, fwd_sm90_stages<D, kWG, kBlockN>(), 4 * kWG>;
/// Shared memory of sm_90: 227 KB of dynamic shared memory at most per CTA, and
/// what each of two CTAs on one SM may take (228 KB per SM, 1 KB of it reserved per
/// CTA; CUDA C++ Programming Guide, compute capability 9.0).
constexpr size_t kSm90SmemPerCta = 227 * 1024;
constexpr size_t kSm90SmemTwoCtas = 228 * 1024 / 2 - 1024;
/// Dynamic shared memory of attn_fwd_sm90_kernel: the FwdSm90Storage, and on the
/// flex path after it each stage's staged bias terms (sm90::kBiasStageFloats).
template <int D, int kWG, int kBlockN, bool kFlex = false>
constexpr size_t fwd_sm90_smem_bytes() {
  return sizeof(FwdSm90Storage<D, kWG, kBlockN>) +
         (kFlex ? sm90::bias_stage_bytes<64 * kWG, kBlockN>(fwd_sm90_stages<D, kWG, kBlockN>()) : 0);
}

namespace sm90 {

/// Issue S (m64 x kNt * 8) = Q K^T of warpgroup `wg` for one K tile: D / 16
/// wgmmas, the first overwriting S (scale-d 0), as one commit group.
/// (The forward's 128-row kernel passes warp-uniform addresses, warp_uniform, and
/// wg 0 with Q's address at its warpgroup's rows: so the descriptors live in
/// uniform registers.)
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
/// The dQ kernel (dS K) skips steps so; the forward, whose K and V have barriers
/// of their own, with fwd_skip_step.
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

/// A shared address for the forward's GEMMs: broadcast from lane 0 (warp_uniform)
/// when kUniform (fwd_sm90_uniform_addresses), else as it is.
template <bool kUniform>
__device__ __forceinline__ uint32_t gemm_addr(uint32_t a) {
  if constexpr (kUniform) return warp_uniform(a);
  return a;
}

/// The forward's P V of pipeline step `pv_step` (P in `pa`): wait for its V tile,
/// issue and retire the product, release the V buffer. kUniform: gemm_addr.
template <int D, bool Bf16, int kBlockN, int kStages, bool kUniform, int kNp, int kDt, class Storage>
__device__ __forceinline__ void fwd_pv_retire(Storage& sm, int pv_step, const uint32_t (&pa)[kNp][4],
                                              uint32_t v_base, Acc (&o)[kDt]) {
  const PipelineState<kStages> ps{pv_step};
  mbar_wait(&sm.full_v[ps.stage()], ps.phase());
  pv_retire<D, Bf16, kBlockN>(pa, gemm_addr<kUniform>(v_base + ps.stage() * Storage::kTileBytes), o);
  mbar_arrive(&sm.empty_v[ps.stage()]);
}

/// skip_step of the forward (FwdStageStorage): a key step (pipeline step `step`,
/// its K tile waited for) that no row of the consumer warpgroup sees. Retires a
/// pending P V (pv_step >= 0; pv_step becomes -1), releases the step's K and,
/// once it has landed (a buffer is refilled only after its loads completed), its
/// V, and after the tile's last step (`last`) Q buffer `qbuf`.
template <int D, bool Bf16, int kBlockN, int kStages, bool kUniform, int kNp, int kDt, class Storage>
__device__ __forceinline__ void fwd_skip_step(Storage& sm, int step, bool last, int qbuf, int& pv_step,
                                              const uint32_t (&pa)[kNp][4], uint32_t v_base, Acc (&o)[kDt]) {
  if (pv_step >= 0) {
    fwd_pv_retire<D, Bf16, kBlockN, kStages, kUniform>(sm, pv_step, pa, v_base, o);
    pv_step = -1;
  }
  const PipelineState<kStages> ps{step};
  mbar_arrive(&sm.empty_k[ps.stage()]);
  mbar_wait(&sm.full_v[ps.stage()], ps.phase());
  mbar_arrive(&sm.empty_v[ps.stage()]);
  if (last) mbar_arrive(&sm.rows_empty[qbuf]);
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
/// this CTA, in Q buffer j % kQBufs; its key steps are pipeline steps first_step
/// ..): stage the warps' KeySpans, wait for the Q tile (rows_full), run the key
/// steps (see attn_fwd_sm90_kernel), release each K tile once its S has retired,
/// Q (rows_empty) after the last one (every thread arrives once per tile), each V
/// tile once its P V has, and store O and LSE.
/// `turns`: the warpgroups' GEMM turns (GemmTurns), one per key step.
/// Returns the tile's key steps.
template <int DH, bool Bf16, int kWG, int kBlockN, bool kFlex, class Storage>
__device__ __forceinline__ int fwd_consume_tile(const AttnParams& p, const QueryTile& qt, Storage& sm,
                                                const float* s_bias, bool stage_bias, int first_step, int j,
                                                const GemmTurns& turns) {
  constexpr int D = tile_dim(DH), kBlockM = 64 * kWG, kStages = fwd_sm90_stages<D, kWG, kBlockN>();
  constexpr int kNt = kBlockN / 8, kDt = D / 8;
  constexpr bool kUniform = fwd_sm90_uniform_addresses<kWG>();
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
  const int qbuf = j % Storage::kQBufs;
  // The GEMMs' shared addresses (kUniform: broadcast from lane 0, so that ptxas keeps
  // their descriptors in uniform registers; per-thread, each wgmma waited for three R2UR
  // moves: SASS and ncu stall samples, session 26. The dense D128 forward ran 1-3% faster
  // so, H200; the backward measured 1.5-3% slower with the same change in its products
  // and keeps per-thread addresses.)
  const uint32_t q_addr = smem_u32(sm.rows[qbuf]) + wg * 64 * 128;  // this warpgroup's rows of Q
  const uint32_t k_addr = smem_u32(sm.k[0]), v_addr = smem_u32(sm.v[0]);
  mbar_wait(&sm.rows_full[qbuf], (j / Storage::kQBufs) & 1);

  Acc o[kDt];
  zero_acc(o);
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  uint32_t pa[kNt / 2][4];
  int pv_step = -1;  // the pipeline step whose P is in pa and whose P V is not issued yet

  for (int tile = 0; tile < n_tiles; ++tile) {
    const PipelineState<kStages> ps{first_step + tile};
    const int stage = ps.stage();
    mbar_wait(&sm.full_k[stage], ps.phase());
    int n0;
    bool full_tile;
    steps.at(p, si, tile, &n0, &full_tile);
    if (!full_tile && !span.meets(n0, kBlockN)) {  // no row of this warpgroup sees these keys
      turns.wait();
      turns.pass();
      fwd_skip_step<D, Bf16, kBlockN, kStages, kUniform>(sm, ps.step, tile == n_tiles - 1, qbuf, pv_step, pa, v_addr,
                                                         o);
      continue;
    }
    Acc s[kNt];
    turns.wait();
    scores<D, Bf16, kBlockM, kBlockN>(gemm_addr<kUniform>(q_addr), gemm_addr<kUniform>(k_addr + stage * kStageBytes),
                                      0, s);
    const PipelineState<kStages> pv_ps{pv_step};
    if (pv_step >= 0) {
      mbar_wait(&sm.full_v[pv_ps.stage()], pv_ps.phase());
      pv<D, Bf16, kBlockN>(pa, gemm_addr<kUniform>(v_addr + pv_ps.stage() * kStageBytes), o);
      turns.pass();
      wgmma_wait<1>();  // S_t retired; P_{t-1} V_{t-1} may still run
    } else {
      turns.pass();
      wgmma_wait<0>();
    }
    fence_acc(s);
    mbar_arrive(&sm.empty_k[stage]);  // S_t has retired: K_t is read
    // The tile's last S = Q K^T has retired: release Q (the next tile's Q is in
    // the other buffer, or loads during this softmax, the last P V and the stores).
    if (tile == n_tiles - 1) mbar_arrive(&sm.rows_empty[qbuf]);
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
    if (pv_step >= 0) mbar_arrive(&sm.empty_v[pv_ps.stage()]);  // V of the previous step is read
    rescale_o<kDt>(o, corr);
    p_operand<Bf16>(s, pa);
    pv_step = ps.step;
  }
  if (n_tiles == 0) mbar_arrive(&sm.rows_empty[qbuf]);  // (no key step: Q unread)
  if (pv_step >= 0) fwd_pv_retire<D, Bf16, kBlockN, kStages, kUniform>(sm, pv_step, pa, v_addr, o);
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
/// `next_tile_early` (persistent launches, LaunchShape::next_tile_early): the
/// K / V thread claims, decodes and publishes the CTA's next tile right after
/// issuing this tile's first K / V loads instead of after its last, so that the
/// next tile's Q (second Q buffer) loads sooner and the consumers find the tile
/// published at the boundary.
///
/// Warp specialization (FlashAttention-3, section 3.1): the last warpgroup is
/// the producer (its registers handed to the consumers with setmaxnreg); a thread
/// of its warp 0 claims the CTA's tiles and hands them on (sm90::TileQueue), one
/// of its warp 2 loads each tile's Q by TMA into its Q buffer (fwd_sm90_q_bufs:
/// two in the 128-row kernel, so the next tile's Q loads while this one runs)
/// once the consumers of the tile before in that buffer released it (rows_full /
/// rows_empty), a thread of
/// its warp 0 streams the K and V tiles through fwd_sm90_stages() stages with TMA
/// bulk tensor copies (`maps`, 128-byte swizzled boxes that land in the Sw128Tile
/// layout), K and V each completing a `full` barrier of their own by transaction
/// bytes (sm90::FwdStageStorage); the pipeline's steps run on across the CTA's
/// tiles, so the next tile's Q, K and V load while this tile's last products,
/// softmax and stores run. Without `pingpong` the consumer warpgroups never wait
/// for each other. Per key tile t they wait for K_t, issue S_t = Q K_t^T and then
/// (V_{t-1} landed) O += P_{t-1} V_{t-1}, wait for S_t only and release K_t, run
/// the softmax of S_t while the tensor cores finish P_{t-1} V_{t-1} (section
/// 3.2); with `pingpong` they take turns to issue a step's GEMMs, so that one's
/// softmax also runs beside the other's GEMMs (section 3.1), then wait, release
/// V_{t-1}, rescale O and turn P_t into the A operands of the next step
/// (sm90::fwd_consume_tile). A partial tile outside the KeySpan of a
/// warpgroup's rows is skipped by that warpgroup (it only releases K and V,
/// after issuing a pending P V). Rows past a sequence's keys that a box reads
/// (the next sequence's tokens in THD, padding rows, or zeros past the tensor)
/// are masked like any key past lk; query rows past it are never stored.
template <int DH, bool Bf16, int kWG, int kBlockN, bool kFlex = false>
__global__ void __launch_bounds__(fwd_sm90_threads<kWG>(), kWG == 1 ? 2 : 1)
    attn_fwd_sm90_kernel(const AttnParams p, const WorkItem* __restrict__ items, int64_t tiles, int pack,
                         int* counters, bool pingpong, bool next_tile_early,
                         const __grid_constant__ FwdTensorMaps maps) {
#if ATTNBENCH_SM90A
  constexpr int D = sm90::tile_dim(DH);  // tiles of whole swizzle chunks; DH columns exist in memory
  constexpr int kConsumers = kWG * 128, kBlockM = 64 * kWG, kStages = fwd_sm90_stages<D, kWG, kBlockN>();
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
    bool ahead = false;         // the K / V thread published tile j in the iteration before (next_tile_early)
#pragma unroll 1
    for (;; ++j) {  // (as the consumers' loop: only j, step, next and ahead live across tiles)
      QueryTile qt;
      const bool more = !kv     ? sm.queue.take(j, biases, qt)
                        : ahead ? sm.queue.published(j, qt)
                                : sm90::publish_tile(p, sched, next, pack, kBlockM, j, sm.queue, qt);
      if (!more) break;
      if (q) {  // its own warp: waiting for the consumers to release Q never holds up the K / V stages
        const int buf = j % Storage::kQBufs;
        if (j >= Storage::kQBufs) sm90::mbar_wait(&sm.rows_empty[buf], (j / Storage::kQBufs - 1) & 1);
        const CUtensorMap* const q_map[1] = {&maps.q};
        uint16_t* const q_tile[1] = {sm.rows[buf]};
        sm90::produce_row_tiles<kBlockM, D, 1>(p, qt, q_map, q_tile, &sm.rows_full[buf]);
        if constexpr (!persistent_head_dim(DH)) break;
        continue;
      }
      const KeySteps<kFlex> steps(p, qt.si, qt.b, qt.m0, qt.Mq, kBlockN);
      if (kv) {
        if constexpr (persistent_head_dim(DH)) next = TileScheduler::claim(counters);  // its latency hides in the loads
        if (persistent_head_dim(DH) && next_tile_early) {  // the next tile published after this one's first loads
          sm90::produce_kv_tiles<kBlockN, D, kStages>(p, qt.si, qt.b, qt.kvh, steps, maps.kv, sm, step, 0, 1);
          QueryTile nt;
          sm90::publish_tile(p, sched, next, pack, kBlockM, j + 1, sm.queue, nt);
          ahead = true;
          sm90::produce_kv_tiles<kBlockN, D, kStages>(p, qt.si, qt.b, qt.kvh, steps, maps.kv, sm, step, 1);
        } else {
          sm90::produce_kv_tiles<kBlockN, D, kStages>(p, qt.si, qt.b, qt.kvh, steps, maps.kv, sm, step);
        }
      } else {  // the terms are read by the softmax: staged with K_t, released with V_t
        sm90::produce_bias_terms<kBlockM, kBlockN, kStages>(p, qt.si, qt.b, qt.h0, qt.m0, steps, sm.full_k,
                                                            sm.empty_v, s_bias, lane, step);
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
  (void)next_tile_early;
  __trap();  // built without sm_90a: the host never launches this (fwd_sm90_usable)
#endif
}

}  // namespace attnbench::kernels
