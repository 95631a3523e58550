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

#include "backends/kernels/attn_common.cuh"

namespace attnbench::kernels {

/// Shared memory of attn_fwd_kernel: Q tile plus two stages of K and V tiles.
template <int D, int kWarps, int kBlockN, int kMT>
constexpr size_t fwd_smem_bytes() {
  return 2u * (static_cast<size_t>(16 * kMT * kWarps) * D + 4u * kBlockN * D);
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
  constexpr int kKs = D / 16;        // k-slices of Q K^T
  constexpr int kNt = kBlockN / 8;   // n-tiles of S
  constexpr int kDt = D / 8;         // n-tiles of O
  static_assert(kNt % 2 == 0 && kDt % 2 == 0, "tiles come in pairs");
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sK = sQ + kBlockM * D;
  uint16_t* sV = sK + 2 * kBlockN * D;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int head_chunks = p.heads_q / pack;
  const WorkItem item = items[blockIdx.x / head_chunks];
  const int h0 = (blockIdx.x % head_chunks) * pack;
  const int kvh = h0 / p.group;
  const int b = item.seq, m0 = item.start;
  const int Mq = kBlockM / pack;
  const SeqInfo si = seq_info(p, b);
  const uint16_t* Q = static_cast<const uint16_t*>(p.q);
  const uint16_t* K = static_cast<const uint16_t*>(p.k);
  const uint16_t* V = static_cast<const uint16_t*>(p.v);

  // Q tile (padding rows zero-filled).
  load_tile_async<kBlockM, D, kThreads>(
      sQ,
      [&](int r) -> const uint16_t* {
        const int t = m0 + r % Mq;
        return t < si.lq ? Q + q_off(p, si, b, t, h0 + r / Mq) : nullptr;
      },
      tid);
  // Key tiles of this CTA's rows: (first key, whether no pair of it is masked).
  const KeySteps<kFlex> steps(p, si, b, m0, Mq, kBlockN);
  const int n_tiles = steps.count;
  auto tile_at = [&](int tile, int* n0, bool* full) { steps.at(p, si, tile, n0, full); };
  const uint16_t* k_base = K + k_off(p, si, b, 0, kvh);
  const uint16_t* v_base = V + v_off(p, si, b, 0, kvh);
  auto load_kv = [&](int tile, int stage) {
    int n0;
    bool full_unused;
    tile_at(tile, &n0, &full_unused);
    load_tile_async<kBlockN, D, kThreads>(
        sK + stage * kBlockN * D,
        [&](int r) -> const uint16_t* { return n0 + r < si.lk ? k_base + (n0 + r) * p.k_row_stride : nullptr; },
        tid);
    load_tile_async<kBlockN, D, kThreads>(
        sV + stage * kBlockN * D,
        [&](int r) -> const uint16_t* { return n0 + r < si.lk ? v_base + (n0 + r) * p.v_row_stride : nullptr; },
        tid);
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
#pragma unroll
    for (int i = 0; i < kDt; ++i) o[mt][i] = Acc{{0.f, 0.f, 0.f, 0.f}};
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
    const uint16_t* tK = sK + stage * kBlockN * D;
    const uint16_t* tV = sV + stage * kBlockN * D;
    int n0;
    bool full;
    tile_at(tile, &n0, &full);

    // S = Q K^T (Q fragments from shared memory, each K fragment used kMT times).
    Acc s[kMT][kNt];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int i = 0; i < kNt; ++i) s[mt][i] = Acc{{0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int ks = 0; ks < kKs; ++ks) {
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

    // Score mod (exp2 domain), mask on partial tiles, online softmax.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      float mx[2] = {-INFINITY, -INFINITY};
      if (mod.kind == ModKind::none && full) {  // the common case: one multiply per score
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[mt][nt].c[e] *= mod.scale_log2;
            mx[e >> 1] = fmaxf(mx[e >> 1], s[mt][nt].c[e]);
          }
      } else {
        const RowBounds rb[2] = {RowBounds::of(p.mask, row_of(mt, 0), si.lq, si.lk),
                                 RowBounds::of(p.mask, row_of(mt, 1), si.lq, si.lk)};
        // flex with documents / block_sparse: bit r * 2 kNt + 2 nt + c for pair (row r, key nt * 8 + 2 qd + c)
        uint32_t bits = ~0u;
        if constexpr (kFlex) {
          if (!full && mask_needs_pairs(p.mask))
            bits = flex_mask_bits<4 * kNt>(p, si, b, [&](int k, int* i, int* j) {
              *i = row_of(mt, k / (2 * kNt));
              *j = n0 + (k % (2 * kNt)) / 2 * 8 + 2 * qd + k % 2;
            });
        }
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e >> 1, j = n0 + nt * 8 + 2 * qd + (e & 1);
            float x = mod.template apply<kFlex>(s[mt][nt].c[e], row_of(mt, r), j);
            const bool ok = full || (rb[r].allows(j) && ((bits >> (r * 2 * kNt + 2 * nt + (e & 1))) & 1u));
            if (!ok) x = -INFINITY;
            s[mt][nt].c[e] = x;
            mx[r] = fmaxf(mx[r], x);
          }
        }
      }
      float corr[2], base[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_new = fmaxf(m_run[mt][r], quad_max(mx[r]));
        base[r] = m_new == -INFINITY ? 0.f : m_new;
        corr[r] = fast_exp2(m_run[mt][r] - base[r]);
        m_run[mt][r] = m_new;
        l_run[mt][r] *= corr[r];
      }
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pe = fast_exp2(s[mt][nt].c[e] - base[e >> 1]);
          s[mt][nt].c[e] = pe;
          l_run[mt][e >> 1] += pe;
        }
      }
#pragma unroll
      for (int dt = 0; dt < kDt; ++dt) {
        o[mt][dt].c[0] *= corr[0];
        o[mt][dt].c[1] *= corr[0];
        o[mt][dt].c[2] *= corr[1];
        o[mt][dt].c[3] *= corr[1];
      }
    }

    // O += P V, P from registers; each V fragment used kMT times.
#pragma unroll
    for (int kt = 0; kt < kBlockN / 16; ++kt) {
      uint32_t pa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        pa[mt][0] = pack2<Bf16>(s[mt][2 * kt].c[0], s[mt][2 * kt].c[1]);
        pa[mt][1] = pack2<Bf16>(s[mt][2 * kt].c[2], s[mt][2 * kt].c[3]);
        pa[mt][2] = pack2<Bf16>(s[mt][2 * kt + 1].c[0], s[mt][2 * kt + 1].c[1]);
        pa[mt][3] = pack2<Bf16>(s[mt][2 * kt + 1].c[2], s[mt][2 * kt + 1].c[3]);
      }
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
    __syncthreads();  // this stage is refilled two tiles later
  }
  if (n_tiles == 0) cp_async_wait<0>();

  // Epilogue.
  uint16_t* O = static_cast<uint16_t*>(p.o);
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int t = row_of(mt, r);
      const float l = quad_sum(l_run[mt][r]);
      const bool live = t < si.lq && l > 0.f;
      const float inv = live ? 1.f / l : 0.f;
      if (t >= si.store_q) continue;
      uint16_t* orow = O + o_off(p, si, b, t, wh);
#pragma unroll
      for (int dt = 0; dt < kDt; ++dt) {
        const uint32_t v = pack2<Bf16>(o[mt][dt].c[2 * r] * inv, o[mt][dt].c[2 * r + 1] * inv);
        *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * qd) = v;
      }
      if (qd == 0) p.lse[lse_off(p, si, b, t, wh)] = live ? (m_run[mt][r] + log2f(l)) * kLn2 : -INFINITY;
    }
}

}  // namespace attnbench::kernels
