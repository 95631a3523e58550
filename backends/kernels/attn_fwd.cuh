// The forward kernel of the fused attention family (FlashAttention-2's algorithm,
// Dao 2023, "FlashAttention-2", Algorithm 1), portable path: mma.sync m16n8k16,
// ldmatrix, cp.async double buffering (sm_80 and up).
//
// A CTA of kWarps warps owns kBlockM = 16 * kMT * kWarps query rows. Row r of the
// CTA is query head h0 + r / Mq at position m0 + r % Mq, with Mq = kBlockM / pack:
// with pack > 1 the query heads that share one KV head are folded into the tile's
// rows (GQA packing), so each K/V tile is loaded once for `pack` heads. Each warp
// owns 16 * kMT rows of one head. The mainloop walks the KV tiles [n0, n0 + kBlockN) that the
// rows' key intervals touch (key_tiles), computes S = Q K^T, applies the score mod in the exp2 domain, masks only tiles that are
// not fully inside every row's interval, updates the online softmax (running max
// m, running sum l), and adds P V with P converted in registers to the A operand.
// The epilogue writes O = acc / l and LSE = ln 2 * (m + log2 l); rows with no
// allowed key (l = 0) and padding rows write O = 0, LSE = -inf.
#pragma once

#include "backends/kernels/attn_tile_ops.cuh"

namespace attnbench::kernels {

/// Shared memory of attn_fwd_kernel: Q tile plus two stages of K and V tiles.
template <int D, int kWarps, int kBlockN, int kMT>
constexpr size_t fwd_smem_bytes() {
  return 2u * (static_cast<size_t>(16 * kMT * kWarps) * D + 4u * kBlockN * D);
}

/// S = Q K^T for the warp's kMT m-tiles against one K tile (Q fragments from
/// shared memory, each K fragment used kMT times).
template <int D, bool Bf16, int kMT, int kNt>
__device__ __forceinline__ void fwd_scores(const uint16_t* sQ, const uint16_t* tK, int warp, int lane,
                                           Acc (&s)[kMT][kNt]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) zero_acc(s[mt]);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t qa[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) load_a<D>(sQ, (warp * kMT + mt) * 16, ks, lane, qa[mt]);
#pragma unroll
    for (int nt = 0; nt < kNt; nt += 2) {
      uint32_t bb[4];
      load_b_nk<D>(tK, nt * 8, ks, lane, bb);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma16816<Bf16>(s[mt][nt], qa[mt], bb[0], bb[1]);
        mma16816<Bf16>(s[mt][nt + 1], qa[mt], bb[2], bb[3]);
      }
    }
  }
}

/// One m-tile's online-softmax step on the key tile at n0, up to O: score mod in
/// the exp2 domain, the mask on partial tiles (row interval; flex: mask_allowed
/// bits for documents / block_sparse), the running max m and sum l, and S
/// replaced by P; `corr` receives the factor O must be rescaled by (rescale_o;
/// the Hopper kernel applies it once the previous P V has retired). row0 / row1:
/// this thread's two query rows; `rows_rb`: their row_bounds() when the caller
/// computed them once for every tile (null: computed here, per partial tile);
/// `sb`: the step's learnable-bias terms where the caller staged them.
/// kMaskAlone (the Hopper forward, off the flex path): partial steps without a
/// score mod take their own loop, the scale and the row interval per score;
/// otherwise they share the score-mod loop, whose per-score branch on the kind
/// was a sixth of the Hopper forward's consumer samples on packed documents
/// (ncu, H200; the portable kernels keep one loop: registers).
template <bool kFlex, int kNt, bool kMaskAlone = false>
__device__ __forceinline__ void fwd_softmax_p(const AttnParams& p, const SeqInfo& si, int b, const ScoreMod2& mod,
                                              bool full, int n0, int qd, int row0, int row1, Acc (&s)[kNt],
                                              float (&m_run)[2], float (&l_run)[2], float (&corr)[2],
                                              const RowBounds* rows_rb = nullptr, StagedBias sb = {}) {
  float mx[2] = {-INFINITY, -INFINITY};
  // The scores' factor in the exp2 below: scale_log2 where S is still the raw Q K^T (the common
  // case), 1 where the loops below replaced it by the scaled, modded, masked score.
  float s_factor = 1.f;
  if (mod.kind == ModKind::none && full) {  // the common case: no instruction per score before the max
    // The max of the raw scores, in two chains per row (half the dependent fmaxf latency); times
    // scale_log2 > 0 (docs/semantics.md: a positive scale) it is the max of the scaled scores, as
    // rounding is monotonic. The scale folds into the exp2's argument, one FFMA per score
    // (FlashAttention-3, hopper/softmax.h, scale_apply_exp2).
    float m2[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) m2[e >> 1][nt & 1] = fmaxf(m2[e >> 1][nt & 1], s[nt].c[e]);
    mx[0] = fmaxf(m2[0][0], m2[0][1]) * mod.scale_log2;
    mx[1] = fmaxf(m2[1][0], m2[1][1]) * mod.scale_log2;
    s_factor = mod.scale_log2;
  } else if (kMaskAlone && !kFlex && mod.kind == ModKind::none) {  // a partial step: the row intervals decide
    const RowBounds rb[2] = {rows_rb ? rows_rb[0] : row_bounds<kFlex>(p, si, b, row0),
                             rows_rb ? rows_rb[1] : row_bounds<kFlex>(p, si, b, row1)};
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, j = n0 + nt * 8 + 2 * qd + (e & 1);
        const float x = rb[r].allows(j) ? mod.apply_as<ModKind::none>(s[nt].c[e], 0, j) : -INFINITY;
        s[nt].c[e] = x;
        mx[r] = fmaxf(mx[r], x);
      }
  } else {
    const RowBounds rb[2] = {rows_rb ? rows_rb[0] : row_bounds<kFlex>(p, si, b, row0),
                             rows_rb ? rows_rb[1] : row_bounds<kFlex>(p, si, b, row1)};
    const RowPairBits<kFlex, kNt> pairs(p, si, b, full, n0, qd, row0, row1);  // documents / block_sparse
    with_score_mod<kFlex>(mod, sb, [&](const auto& score, const auto&) {
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1, j = n0 + nt * 8 + 2 * qd + (e & 1);
          float x = score(s[nt].c[e], r ? row1 : row0, j);
          const bool ok = full || (rb[r].allows(j) && pairs.allows(r, nt, e & 1));
          if (!ok) x = -INFINITY;
          s[nt].c[e] = x;
          mx[r] = fmaxf(mx[r], x);
        }
      }
    });
  }
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m_run[r], quad_max(mx[r]));
    base[r] = m_new == -INFINITY ? 0.f : m_new;
    corr[r] = fast_exp2(m_run[r] - base[r]);
    m_run[r] = m_new;
    l_run[r] *= corr[r];
  }
#pragma unroll
  for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pe = fast_exp2(fmaf(s[nt].c[e], s_factor, -base[e >> 1]));  // s_factor 1: exact, s - base
      s[nt].c[e] = pe;
      l_run[e >> 1] += pe;
    }
  }
}

/// O *= corr per row (the online softmax's rescale of the accumulator).
template <int kDt>
__device__ __forceinline__ void rescale_o(Acc (&o)[kDt], const float (&corr)[2]) {
#pragma unroll
  for (int dt = 0; dt < kDt; ++dt) {
    o[dt].c[0] *= corr[0];
    o[dt].c[1] *= corr[0];
    o[dt].c[2] *= corr[1];
    o[dt].c[3] *= corr[1];
  }
}

/// One m-tile's full online-softmax step (fwd_softmax_p, then O rescaled).
template <bool kFlex, int kNt, int kDt>
__device__ __forceinline__ void fwd_softmax(const AttnParams& p, const SeqInfo& si, int b, const ScoreMod2& mod,
                                            bool full, int n0, int qd, int row0, int row1, Acc (&s)[kNt],
                                            Acc (&o)[kDt], float (&m_run)[2], float (&l_run)[2]) {
  float corr[2];
  fwd_softmax_p<kFlex, kNt>(p, si, b, mod, full, n0, qd, row0, row1, s, m_run, l_run, corr);
  rescale_o<kDt>(o, corr);
}

/// O += P V with P from registers; each V fragment used kMT times.
template <int D, bool Bf16, int kMT, int kNt, int kDt>
__device__ __forceinline__ void fwd_pv(const Acc (&s)[kMT][kNt], const uint16_t* tV, int lane, Acc (&o)[kMT][kDt]) {
#pragma unroll
  for (int kt = 0; kt < kNt / 2; ++kt) {
    uint32_t pa[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) acc_to_a<Bf16>(s[mt][2 * kt], s[mt][2 * kt + 1], pa[mt]);
#pragma unroll
    for (int dt = 0; dt < kDt; dt += 2) {
      uint32_t bb[4];
      load_b_kn<D>(tV, kt * 16, dt, lane, bb);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma16816<Bf16>(o[mt][dt], pa[mt], bb[0], bb[1]);
        mma16816<Bf16>(o[mt][dt + 1], pa[mt], bb[2], bb[3]);
      }
    }
  }
}

/// Epilogue of one query row t of head h (half r of the thread's accumulator
/// rows): O = acc / l and LSE = ln 2 * (m + log2 l); O = 0 and LSE = -inf for rows
/// with no allowed key (l = 0) and padding rows; nothing past store_q.
template <bool Bf16, int kDt, int kDtStore = kDt>
__device__ __forceinline__ void fwd_store_row(const AttnParams& p, const SeqInfo& si, int b, int t, int h, int qd,
                                              const Acc (&o)[kDt], int r, float m_run, float l_part) {
  const float l = quad_sum(l_part);
  const bool live = t < si.lq && l > 0.f;
  const float inv = live ? 1.f / l : 0.f;
  if (t >= si.store_q) return;
  uint16_t* orow = static_cast<uint16_t*>(p.o) + o_off(p, si, b, t, h);
#pragma unroll
  for (int dt = 0; dt < kDtStore; ++dt)
    *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * qd) = pack2<Bf16>(o[dt].c[2 * r] * inv, o[dt].c[2 * r + 1] * inv);
  if (qd == 0) p.lse[lse_off(p, si, b, t, h)] = live ? (m_run + log2f(l)) * kLn2 : -INFINITY;
}

/// kMT: 16-row m-tiles per warp (2: every K / V fragment read from shared memory
/// feeds two MMAs; 1: 16-row warps for GQA-packed short tiles). kFlex: the key
/// tiles come from the BlockMask lists of the CTA's query block (p.bm, one
/// query block per CTA: kBlockM == q_block, pack 1) and partial tiles evaluate
/// mask_allowed(); otherwise from the rows' key intervals.
template <int D, bool Bf16, int kWarps, int kBlockN, int kMT, bool kFlex = false>
__global__ void __launch_bounds__(kWarps * 32)
    attn_fwd_kernel(const AttnParams p, const WorkItem* __restrict__ items, int pack) {
  constexpr int kThreads = kWarps * 32, kBlockM = 16 * kMT * kWarps;
  constexpr int kNt = kBlockN / 8;   // n-tiles of S
  constexpr int kDt = D / 8;         // n-tiles of O
  static_assert(kNt % 2 == 0 && kDt % 2 == 0, "tiles come in pairs");
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sK = sQ + kBlockM * D;
  uint16_t* sV = sK + 2 * kBlockN * D;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const QueryTile qt = QueryTile::of(p, items, pack, kBlockM, 0);  // (L2 head groups: the Hopper kernels')
  const int h0 = qt.h0, kvh = qt.kvh, b = qt.b, m0 = qt.m0, Mq = qt.Mq;
  const SeqInfo si = qt.si;

  // Q tile (padding rows zero-filled), then the first K / V tile.
  load_packed_rows<kBlockM, D, kThreads>(sQ, static_cast<const uint16_t*>(p.q), m0, Mq, si.lq, h0,
                                         [&](int t, int h) { return q_off(p, si, b, t, h); }, tid);
  // Key tiles of this CTA's rows: (first key, whether no pair of it is masked).
  const KeySteps<kFlex> steps(p, si, b, m0, Mq, kBlockN);
  const int n_tiles = steps.count;
  const uint16_t* k_base = static_cast<const uint16_t*>(p.k) + k_off(p, si, b, 0, kvh);
  const uint16_t* v_base = static_cast<const uint16_t*>(p.v) + v_off(p, si, b, 0, kvh);
  auto load_kv = [&](int tile, int stage) {
    int n0;
    bool full_unused;
    steps.at(p, si, tile, &n0, &full_unused);
    load_kv_tile<kBlockN, D, kThreads>(sK + stage * kBlockN * D, sV + stage * kBlockN * D, k_base, v_base,
                                       p.k_row_stride, p.v_row_stride, n0, si.lk, tid);
  };
  if (n_tiles > 0) load_kv(0, 0);
  cp_async_commit();

  // This warp's head and rows; this thread's rows g and g + 8 of each m-tile.
  const int wh = h0 + (warp * 16 * kMT) / Mq;
  const int wt0 = m0 + (warp * 16 * kMT) % Mq;
  const int g = lane / 4, qd = lane % 4;
  // Row t of m-tile mt, half r (registers are scarce at two m-tiles: recomputed).
  auto row_of = [&](int mt, int r) { return wt0 + mt * 16 + g + 8 * r; };
  const ScoreMod2 mod = ScoreMod2::of(p, wh);

  Acc o[kMT][kDt];
  float m_run[kMT][2], l_run[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    zero_acc(o[mt]);
    m_run[mt][0] = m_run[mt][1] = -INFINITY;
    l_run[mt][0] = l_run[mt][1] = 0.f;
  }

  for (int tile = 0; tile < n_tiles; ++tile) {
    const int stage = tile & 1;
    if (tile + 1 < n_tiles) {
      load_kv(tile + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    int n0;
    bool full;
    steps.at(p, si, tile, &n0, &full);
    Acc s[kMT][kNt];
    fwd_scores<D, Bf16, kMT, kNt>(sQ, sK + stage * kBlockN * D, warp, lane, s);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
      fwd_softmax<kFlex, kNt, kDt>(p, si, b, mod, full, n0, qd, row_of(mt, 0), row_of(mt, 1), s[mt], o[mt], m_run[mt],
                                   l_run[mt]);
    fwd_pv<D, Bf16, kMT, kNt, kDt>(s, sV + stage * kBlockN * D, lane, o);
    __syncthreads();  // this stage is refilled two tiles later
  }
  if (n_tiles == 0) cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      fwd_store_row<Bf16, kDt>(p, si, b, row_of(mt, r), wh, qd, o[mt], r, m_run[mt][r], l_run[mt][r]);
}

}  // namespace attnbench::kernels
