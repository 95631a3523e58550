// The dK / dV / dQ kernel of the fused attention family, Hopper path (sm_90a):
// the algorithm of attn_bwd_dkdv_kernel (FlashAttention-2's Algorithm 2, the key
// tile outer, atomic dQ) with its five GEMMs on warpgroup MMAs
// (wgmma_sm90.cuh), laid out as FlashAttention-3 (Shah et al. 2024, section 3
// and appendix B.2) runs its backward: K and V stay in shared memory, Q / dO
// tiles stream in by TMA, two consumer warpgroups own 64 keys each.
//
// Per query tile (64 rows of one query head) and warpgroup w (keys 64 w ..):
//   S^T  = K_w Q^T        SS, m64n64, K-major A (K) and B (Q)
//   dP^T = V_w dO^T       SS, m64n64
//   P^T, dS^T in registers (partial steps: dkdv_probs_p while dP^T runs, then
//                         dkdv_probs_ds; full steps: dkdv_probs; masks, score
//                         mods, LSE / Dsum)
//   dV  += P^T dO         RS, m64nD, dO MN-major
//   dK  += dS^T Q         RS, m64nD, Q MN-major
//   dQ  += dS K           SS, m64n64, dS^T (stored as [keys][queries]) and K
//                         both MN-major; at head_dim 128 warpgroup w takes
//                         columns 64 w .. over all 128 keys (every dQ element
//                         added once per tile), at 64 its own 64 keys; each warp's
//                         m16 x 64 fragment goes to a float32 shared-memory tile
//                         and into p.dq_accum by one TMA reduce-add
//                         (bwd_reduce_dq; the rel_bias instance, which has no
//                         room for the tiles, keeps float2 atomics).
// The register layouts of S^T / dP^T are the portable kernel's (one 16-key
// m-tile per warp), so the dkdv_probs halves and dkdv_store are shared with it.
#pragma once

#include "backends/kernels/attn_bwd.cuh"
#include "backends/kernels/attn_fwd_sm90.cuh"  // sm90::pv (the RS product with an MN-major B)
#include "backends/kernels/attn_launch.hpp"
#include "backends/kernels/pipeline_sm90.cuh"
#include "backends/kernels/wgmma_sm90.cuh"

namespace attnbench::kernels {

/// Query rows per step of the Hopper dK/dV kernel (keys per CTA: kBwdSm90BlockN, attn_params.hpp).
constexpr int kBwdSm90BlockM = bwd_block_m(128, BwdPath::sm90);
static_assert(kBwdSm90BlockN == 128 && kBwdSm90BlockM == 64, "two warpgroups of 64 keys, m64 query steps");
/// Q / dO stages: the tile of step t + 1 loads while step t computes.
constexpr int kBwdSm90Stages = 2;

/// Shared memory of attn_bwd_sm90_kernel: K and V tiles, kBwdSm90Stages stages of
/// Q and dO tiles and of the rows' LSE / Dsum, two dS^T tiles (dQ of step t
/// reads one while step t + 1 writes the other), the barriers, each stage's
/// KeySpan and its rows' key intervals. The 16-bit tiles are Sw128Tiles at
/// 1024-byte offsets; sizeof is the deterministic mode's dynamic shared memory,
/// 162 KB at head_dim 128, 98 KB at 64 (the atomic mode adds BwdSm90DqTiles or
/// BwdSm90RelTiles: bwd_sm90_smem_bytes(rel, dq_tiles)).
template <int D>
struct BwdSm90Storage {
  static constexpr int kN = kBwdSm90BlockN, kM = kBwdSm90BlockM, kStages = kBwdSm90Stages;
  uint16_t k[kN * D];
  uint16_t v[kN * D];
  uint16_t q[kStages][kM * D];
  uint16_t dout[kStages][kM * D];
  uint16_t ds[2][kN * kM];      ///< dS^T, [keys][queries]
  float lse[kStages][kM];       ///< the step rows' LSE (log2 domain)
  float dsum[kStages][kM];      ///< the step rows' Dsum
  uint64_t kv_bar;              ///< K and V loaded
  uint64_t full[kStages];       ///< stage loaded (TMA bytes + the rows warp)
  uint64_t empty[kStages];      ///< stage read by every consumer thread
  int span[kStages][2];         ///< the step rows' KeySpan (lo, hi)
  int2 rb[kStages][kM];         ///< the step rows' row_bounds()
  int2 dq_at[kStages];          ///< the step's first accumulator row (tok0_q + m0) and query head (bwd_reduce_dq)
  static_assert((2u * kN * D) % 1024 == 0 && (2u * kM * D) % 1024 == 0 && (2u * kN * kM) % 1024 == 0,
                "tiles at 1024-byte offsets");
  /// Without dQ (the deterministic mode) the dS^T tiles are unused: the stages of
  /// a flex step's learnable-bias terms (sm90::BiasTerms) live there.
  __device__ __forceinline__ float* bias_terms() { return reinterpret_cast<float*>(ds[0]); }
  static_assert(kStages * sm90::kBiasStageFloats * sizeof(float) <= sizeof(ds), "bias stages in the dS^T tiles");
};
template <int D>
constexpr size_t bwd_sm90_smem_bytes() {
  return sizeof(BwdSm90Storage<D>);
}

/// Shared memory of rel_bias dBias in attn_bwd_sm90_kernel (flex), after
/// BwdSm90Storage at bwd_sm90_rel_offset(), present only in launches that compute
/// it: per warpgroup two float32 dS tiles [64 keys][64 queries] (step t stores
/// one while the diagonals of step t - 1 are read from the other) and the
/// clamped ends' per-warp partials. Element (key k, query column c) sits at
/// k * 64 + (c ^ 8 (k % 4)): the float2 stores of a warp's accumulator fragment
/// (keys g, g + 8, columns 8 nt + 2 qd) and the diagonal reads (32 consecutive
/// columns of one key) are both free of bank conflicts.
struct BwdSm90RelTiles {
  static constexpr int kKeys = 64, kRows = kBwdSm90BlockM;
  float ds[2][2][kKeys * kRows];  ///< [warpgroup][buffer][offset(k, c)]
  float ends[2][2][8];            ///< [warpgroup][head parity]: lo sums of warps 0..3, then hi sums
  __host__ __device__ static constexpr int offset(int k, int c) { return k * kRows + (c ^ ((k & 3) << 3)); }
};
template <int D>
constexpr size_t bwd_sm90_rel_offset() {
  return (sizeof(BwdSm90Storage<D>) + 15) / 16 * 16;
}
/// Shared memory of the dQ reduce-adds in attn_bwd_sm90_kernel (atomic dQ without
/// rel_bias dBias), after BwdSm90Storage at bwd_sm90_dq_offset(): one float32
/// tile per consumer warp, its m16 x 64-column dQ fragment as the box of
/// BwdTensorMaps::dq_accum lands (line 2 r + c of 128 bytes for row r, column
/// group c, 16-byte chunks swizzled by the line's low three bits), written by the
/// warp and added into the accumulator by one TMA reduce (bwd_reduce_dq).
struct BwdSm90DqTiles {
  static constexpr int kRows = 16, kCols = 64, kWarps = 8;
  float t[kWarps][kRows * kCols];
};
template <int D>
constexpr size_t bwd_sm90_dq_offset() {
  return (sizeof(BwdSm90Storage<D>) + 1023) / 1024 * 1024;  // the swizzle pattern repeats every 1024 bytes
}
/// Dynamic shared memory of attn_bwd_sm90_kernel: with `rel` (flex, rel_bias
/// dBias) the BwdSm90RelTiles too (226 KB at head_dim 128); with `dq_tiles` (the
/// other atomic-dQ instances) the BwdSm90DqTiles (195 KB at head_dim 128).
template <int D>
constexpr size_t bwd_sm90_smem_bytes(bool rel, bool dq_tiles) {
  return rel        ? bwd_sm90_rel_offset<D>() + sizeof(BwdSm90RelTiles)
         : dq_tiles ? bwd_sm90_dq_offset<D>() + sizeof(BwdSm90DqTiles)
                    : bwd_sm90_smem_bytes<D>();
}
static_assert(bwd_sm90_smem_bytes<128>(true, false) <= 227u * 1024u, "rel_bias dBias tiles fit beside head_dim 128's");
static_assert(bwd_sm90_smem_bytes<128>(false, true) <= 227u * 1024u, "dQ tiles fit beside head_dim 128's");
constexpr int kBwdSm90Threads = 3 * 128;  ///< two consumer warpgroups and the producer warpgroup
constexpr int kBwdSm90ProducerRegs = 24;
constexpr int kBwdSm90ConsumerRegs = 240;
/// setmaxnreg moves registers inside the CTA's allocation at launch: 384 threads
/// x 168 (the __launch_bounds__(384, 1) cap, a multiple of 8); asking for more
/// would hang in setmaxnreg.inc instead of failing.
static_assert(2 * 128 * kBwdSm90ConsumerRegs + 128 * kBwdSm90ProducerRegs <= kBwdSm90Threads * 168,
              "consumer + producer registers exceed the CTA's allocation");

namespace sm90 {

/// Issue the m64n64 product of warpgroup `wg`'s 64 rows of the [128][D] K-major
/// tile at `a_tile` with the [64][D] K-major tile at `b_tile` (S^T = K Q^T,
/// dP^T = V dO^T), D / 16 wgmmas overwriting `acc`.
template <int D, bool Bf16>
__device__ __forceinline__ void bwd_scores(uint32_t a_tile, uint32_t b_tile, int wg, Acc (&acc)[8]) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const uint64_t a = desc_k_major(a_tile, Sw128Tile<kBwdSm90BlockN, D>::kChunkBytes, wg * 64, ks);
    const uint64_t b = desc_k_major(b_tile, Sw128Tile<kBwdSm90BlockM, D>::kChunkBytes, 0, ks);
    wgmma_ss_n64<Bf16, 0>(acc, a, b, ks > 0);
  }
}

/// Store the warp's dS^T fragments (A-operand form, 16 keys x 64 queries) into
/// the [128 keys][64 queries] Sw128Tile at sdS (1024-byte aligned): key rows
/// `r0` .. r0 + 15 (r0 a multiple of 8). Four stmatrix.x4, one per 16 query
/// columns kk: matrix 2 half + rr is key rows r0 + 8 rr .., 16-byte unit
/// 2 kk + half, register sa[kk][2 half + rr] (instead of 16 four-byte stores and
/// their addresses). Unit u of row r lies at r * 128 + ((u ^ (r % 8)) << 4) bytes,
/// and (2 kk + half) ^ j = 2 kk ^ (half ^ j).
__device__ __forceinline__ void store_ds_t(uint16_t* sdS, const uint32_t (&sa)[4][4], int r0, int lane) {
  const int j = lane & 7, rr = (lane >> 3) & 1, half = lane >> 4;
  const uint32_t row = smem_u32(sdS) + (r0 + 8 * rr + j) * 128, unit = (half ^ j) << 4;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) stmatrix_x4(row + (unit ^ (kk << 5)), sa[kk]);
}

/// Issue dQ (m64 queries x 64 columns) = dS K for warpgroup `wg`: head_dim 128,
/// columns 64 wg .. over the 128 keys; head_dim 64, all columns over keys 64 wg ...
template <int D, bool Bf16>
__device__ __forceinline__ void bwd_dq(uint32_t ds_tile, uint32_t k_tile, int wg, Acc (&dq)[8]) {
  using KTile = Sw128Tile<kBwdSm90BlockN, D>;
  using DsTile = Sw128Tile<kBwdSm90BlockN, kBwdSm90BlockM>;
  constexpr int kSteps = D == 128 ? kBwdSm90BlockN / 16 : 4;
  const int k0 = D == 128 ? 0 : 4 * wg;
  const uint32_t b_tile = k_tile + (D == 128 ? wg * KTile::kChunkBytes : 0);
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    const uint64_t a = desc_mn_major(ds_tile, DsTile::kChunkBytes, k0 + kk);
    const uint64_t b = desc_mn_major(b_tile, KTile::kChunkBytes, k0 + kk);
    wgmma_ss_n64<Bf16, 1, 1>(dq, a, b, kk > 0);
  }
}

/// The consumers' per-step barrier after the dS^T stores: head_dim 128, both
/// warpgroups (each reads all 128 keys of dS^T for its dQ columns); 64, this
/// warpgroup only (it reads its own keys). Constant ids, so that ptxas reserves
/// only these (a run-time id reserves all 16).
template <int D>
__device__ __forceinline__ void ds_barrier(int wg) {
  if constexpr (D == 128)
    named_barrier(1, 256);
  else if (wg == 0)
    named_barrier(2, 128);
  else
    named_barrier(3, 128);
}

/// A barrier of warpgroup `wg`'s 128 threads alone: ids kId (warpgroup 0) and
/// kId + 1 (constant ids, as ds_barrier).
template <int kId>
__device__ __forceinline__ void wg_barrier(int wg) {
  if (wg == 0)
    named_barrier(kId, 128);
  else
    named_barrier(kId + 1, 128);
}

/// Store the warp's float32 dS^T fragment (keys wrow + g, + 8 of the warpgroup's
/// 64, query columns 8 nt + 2 qd ..+1) into a BwdSm90RelTiles tile.
__device__ __forceinline__ void rel_store_ds(float* tile, const Acc (&dpt)[8], int wrow, int g, int qd) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      *reinterpret_cast<float2*>(tile + BwdSm90RelTiles::offset(wrow + g + 8 * r, nt * 8 + 2 * qd)) =
          make_float2(dpt[nt].c[2 * r], dpt[nt].c[2 * r + 1]);
}

/// Add a diagonal's sum s (distance d) to slot clamp(d, -m, m) + m of `row`:
/// a read-modify-write of `old` (its value read before, deterministic mode) or
/// a float32 atomic (atomic mode), or into acc.lo / acc.hi where d is clamped to
/// an end (rel_stage_ends, rel_add_ends).
__device__ __forceinline__ void rel_bias_add(int d, int m, float s, float old, float* row, bool atomic,
                                             DbiasAcc& acc) {
  if (d <= -m)
    acc.lo += s;
  else if (d >= m)
    acc.hi += s;
  else if (!atomic)
    __stcg(row + d + m, old + s);
  else if (s != 0.f)
    atomicAdd(row + d + m, s);
}

/// rel_bias dBias of one query step of a warpgroup (after the step's dS tile is
/// in `tile` and a barrier of the warpgroup). Thread u < 64 sums, in key order,
/// the wrapped diagonal of the tile whose column is (key + u) mod 64: diagonal
/// column - key = u (distance d0 + u) and diagonal u - 64 (distance d0 + u - 64;
/// empty at u = 0), 64 reads for two diagonals with no idle lanes, where one
/// thread per diagonal read 64 slots for 64 - |column - key| values. d0 = m0 -
/// the warpgroup's first key. Each sum goes to its distance's slot of `row`
/// (rel_bias_add): the head's dBias row in the atomic mode, the (sequence,
/// 64-key tile, head) scratch row in the deterministic mode, owned by this
/// warpgroup alone (a plain read-modify-write in L2, ordered across steps by the
/// warpgroup's barriers). The definition is flush_rel_bias's (attn_bwd.cuh), the
/// portable kernel's.
__device__ __forceinline__ void rel_bias_step(const float* tile, int wt, int d0, int m, float* row, bool atomic,
                                              DbiasAcc& acc) {
  const int u = wt;
  if (u >= 64) return;
  const int da = d0 + u, db = d0 + u - 64;
  const float olda = da > -m && da < m && !atomic ? __ldcg(row + da + m) : 0.f;
  const float oldb = u > 0 && db > -m && db < m && !atomic ? __ldcg(row + db + m) : 0.f;
  float sa = 0.f, sb = 0.f;
#pragma unroll 8
  for (int k = 0; k < 64; ++k) {
    const float v = tile[BwdSm90RelTiles::offset(k, (k + u) & 63)];
    if (k + u < 64)
      sa += v;
    else
      sb += v;
  }
  rel_bias_add(da, m, sa, olda, row, atomic, acc);
  if (u > 0) rel_bias_add(db, m, sb, oldb, row, atomic, acc);
}

/// Stage the clamped ends of a head's rel_bias row after its last step: the
/// warpgroup's acc.lo / acc.hi summed per warp into ends[0..3] / ends[4..7] by
/// lane 0 (no barrier here; rel_add_ends reads them after the next one).
__device__ __forceinline__ void rel_stage_ends(float* ends, int wt, DbiasAcc& acc) {
  const float lo = warp_sum(acc.lo), hi = warp_sum(acc.hi);
  acc.lo = acc.hi = 0.f;
  if (wt % 32 == 0) {
    ends[wt / 32] = lo;
    ends[4 + wt / 32] = hi;
  }
}

/// Add staged ends (warps in order) to slots 0 and 2m of `row`; thread 0 of the
/// warpgroup, after a barrier of it that follows rel_stage_ends.
__device__ __forceinline__ void rel_add_ends(const float* ends, int m, float* row, bool atomic) {
  const float l = ((ends[0] + ends[1]) + ends[2]) + ends[3], u = ((ends[4] + ends[5]) + ends[6]) + ends[7];
  float* last = row + 2 * m;
  if (atomic) {
    if (l != 0.f) atomicAdd(row, l);
    if (u != 0.f) atomicAdd(last, u);
  } else {
    __stcg(row, __ldcg(row) + l);
    __stcg(last, __ldcg(last) + u);
  }
}

/// A consumer warpgroup's rel_bias dBias in attn_bwd_sm90_kernel<..., kRel>: its
/// 64 keys from n0w, its thread wt, its BwdSm90RelTiles; per step rel_bias_step
/// on tile(step); the clamped ends of head h staged after its last step
/// (head_end: buffer by the head's parity) and added by thread 0 after the
/// warpgroup's next barrier (flush). row(): the head's dBias row (atomic mode)
/// or the warpgroup's scratch row (deterministic).
struct RelDbias {
  BwdSm90RelTiles* tiles;
  int b, n0w, wg, wt;
  bool atomic;
  int pending = -1;  ///< the head whose staged ends wait for flush(), or -1
  __device__ __forceinline__ RelDbias(const AttnParams& p, BwdSm90RelTiles* t, int b_, int n0w_, int wg_, int wt_)
      : tiles(t), b(b_), n0w(n0w_), wg(wg_), wt(wt_), atomic(p.dbias_mode == DbiasMode::atomic) {}
  __device__ __forceinline__ float* row(const AttnParams& p, int h) const {
    const int64_t slots = 2 * p.max_distance + 1;
    return atomic ? p.dbias + h * slots
                  : p.dbias_scratch + ((static_cast<int64_t>(b) * p.dbias_tiles + n0w / 64) * p.heads_q + h) * slots;
  }
  __device__ __forceinline__ float* tile(int step) const { return tiles->ds[wg][step & 1]; }
  __device__ __forceinline__ void step(const AttnParams& p, const float* t, int m0, int h, DbiasAcc& acc) const {
    rel_bias_step(t, wt, m0 - n0w, p.max_distance, row(p, h), atomic, acc);
  }
  __device__ __forceinline__ void head_end(int h, DbiasAcc& acc) {
    rel_stage_ends(tiles->ends[wg][h & 1], wt, acc);
    pending = h;
  }
  __device__ __forceinline__ void flush(const AttnParams& p) {
    if (pending >= 0 && wt == 0) rel_add_ends(tiles->ends[wg][pending & 1], p.max_distance, row(p, pending), atomic);
    pending = -1;
  }
};

}  // namespace sm90

/// dq_direct_block_n (attn_params.hpp) of head dim DH, for the kernels' templates.
template <int DH>
constexpr int bwd_sm90_direct_n() {
  static_assert(sm90::tile_dim(DH) == (DH <= 64 ? 64 : 128), "the direct width follows the tile width");
  return dq_direct_block_n(DH);
}

/// This warp's m64n64 dQ fragment (rows t0 + g, t0 + g + 8 of query head h,
/// columns c0 ..) out of the Hopper dK/dV kernel; rows past lq and columns past
/// the head dim DH (a tile wider than it) are skipped. Per row:
/// - in [d0, d1) (kDirectN > 0: direct_rows() of this warpgroup's key block, the
///   rows whose keys all lie in it): dQ = scale * fragment, stored in the element
///   type (no other CTA or warpgroup adds to the row; rows there that see no key
///   store their zero). 4-byte stores in the fragment's layout: regrouping a row
///   within its quad into 16-byte stores (three rounds of shuffles) made the
///   kernel spill and measured slower on the H200 (packed CodeAlpaca 8B dK/dV
///   kernel 1340 us against 1270);
/// - otherwise (kAtomics): float2 atomics into p.dq_accum (zeroed by the preprocess,
///   converted after; sm_90 only, where they exist). A row that is direct for
///   another block adds zeros here into an accumulator row nobody reads.
/// kDirectN = 0 (the flex path, whose tiles come from a BlockMask; atomic dQ
/// without direct rows): every row takes the atomics. kAtomics = false (the
/// instances whose dQ goes by TMA reduce-adds, bwd_reduce_dq): the direct rows'
/// stores alone.
template <int DH, bool Bf16, int kDirectN, bool kAtomics = true>
__device__ __forceinline__ void bwd_write_dq(const AttnParams& p, const SeqInfo& si, int b, int h, int t0, int c0,
                                             int d0, int d1, int g, int qd, const Acc (&dq)[8]) {
#if ATTNBENCH_SM90A
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = t0 + g + 8 * r;
    if (t >= si.lq) continue;
    const int64_t off = q_off(p, si, b, t, h) + c0 + 2 * qd;
    if (kDirectN > 0 && t >= d0 && t < d1) {
      uint16_t* drow = static_cast<uint16_t*>(p.dq) + off;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        if constexpr (DH % 64 != 0)
          if (c0 + nt * 8 >= DH) break;
        *reinterpret_cast<uint32_t*>(drow + nt * 8) =
            pack2<Bf16>(dq[nt].c[2 * r] * p.scale, dq[nt].c[2 * r + 1] * p.scale);
      }
      continue;
    }
    if constexpr (!kAtomics) continue;
    float* row = p.dq_accum + off;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      if constexpr (DH % 64 != 0)
        if (c0 + nt * 8 >= DH) break;
      atomicAdd(reinterpret_cast<float2*>(row + nt * 8), make_float2(dq[nt].c[2 * r], dq[nt].c[2 * r + 1]));
    }
  }
#else
  (void)p, (void)si, (void)b, (void)h, (void)t0, (void)c0, (void)d0, (void)d1, (void)g, (void)qd, (void)dq;
  __trap();  // the Hopper backward only
#endif
}

/// This warp's m16 x 64 part of its warpgroup's m64n64 dQ fragment (rows
/// at.x + wrow + g, + 8 of the accumulator's row coordinate, wrow the warp's 16
/// rows; query head at.y; batch coordinate bq; columns 64 w .. of warpgroup w at
/// head_dim 128, all 64 at 64) added into p.dq_accum by one TMA reduce (BwdTensorMaps::dq_accum) from
/// the warp's BwdSm90DqTiles tile, in place of 16 float2 atomics per thread
/// (FlashAttention-3 adds its dQ by bulk reduce-adds from shared memory too,
/// hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp). Lane 0 first waits until its
/// previous reduce has read the tile. Rows past the sequence add the zeros their
/// dS gives (into the next THD sequence's rows, or padding rows), rows past the
/// tensor are skipped, and direct rows (bwd_write_dq) add into accumulator rows
/// that nobody reads. Lane 0 must call bulk_wait<0>() before the CTA exits.
/// `at` is in shared memory (BwdSm90Storage::dq_at, from the rows warp): the
/// coordinates kept in registers across the step made the consumers spill.
template <int D>
__device__ __forceinline__ void bwd_reduce_dq(const CUtensorMap* map, float* tile, int lane, const int2* at, int bq,
                                              int g, int qd, const Acc (&dq)[8]) {
#if ATTNBENCH_SM90A
  if (lane == 0) sm90::bulk_wait_read<0>();  // the previous step's reduce has read the tile
  __syncwarp();
  // Element (row g + 8 r, column 32 hb + 8 n + 2 qd) sits at line l = 2 (g + 8 r) + hb, 16-byte chunk
  // (2 n + qd / 2) ^ (l & 7): byte 256 g + 2048 r + 128 hb + 32 (n ^ (g & 3)) + 16 ((qd / 2) ^ hb)
  // + 8 (qd & 1). The base is opaque per call, so that the compiler does not hoist the eight
  // per-thread addresses out of the step loop (they made the consumers spill).
  uint32_t base = smem_u32(tile) + 256 * g + 8 * (qd & 1);
  asm volatile("" : "+r"(base));
#pragma unroll
  for (int hb = 0; hb < 2; ++hb)
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const uint32_t a = base + 128 * hb + 32 * (n ^ (g & 3)) + 16 * ((qd >> 1) ^ hb);
      const Acc& f = dq[4 * hb + n];
#pragma unroll
      for (int r = 0; r < 2; ++r)
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a + 2048 * r), "f"(f.c[2 * r]), "f"(f.c[2 * r + 1]));
    }
  sm90::fence_proxy_async();  // the stores, before the async proxy reads them
  __syncwarp();
  if (lane == 0) {
    const int2 a = *at;
    uint32_t tid;  // c0 / 32 kept live across the step also made the consumers spill: recomputed here
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
    const int group = D == 128 ? 2 * static_cast<int>(tid / 128) : 0, wrow = 16 * static_cast<int>(tid / 32 % 4);
    sm90::tma_reduce_add_5d(map, tile, 0, group, a.x + wrow, a.y, bq);
    sm90::bulk_commit();
  }
#else
  (void)map, (void)tile, (void)lane, (void)at, (void)bq, (void)g, (void)qd, (void)dq;
  __trap();
#endif
}

/// This warp's dQ fragment of one step (rows t0 + g, t0 + g + 8 of query head h,
/// warpgroup wg's columns) out of attn_bwd_sm90_kernel: with kReduceDq the direct
/// rows' stores (kDirectN > 0, bwd_write_dq) and one TMA reduce-add of the tile
/// (bwd_reduce_dq), none when the warp's rows are all direct or past lq;
/// otherwise bwd_write_dq's stores and float2 atomics.
template <int DH, bool Bf16, int kDirectN, bool kReduceDq>
__device__ __forceinline__ void bwd_add_dq(const AttnParams& p, const SeqInfo& si, const BwdTensorMaps& maps,
                                           float* dq_tile, const int2* at, int b, int h, int t0, int wg, int d0,
                                           int d1, int lane, const Acc (&dq)[8]) {
  constexpr int D = sm90::tile_dim(DH);
  const int g = lane / 4, qd = lane % 4, c0 = D == 128 ? wg * 64 : 0;
  if constexpr (kReduceDq) {
    bool reduce = true;
    if constexpr (kDirectN > 0) {
      bwd_write_dq<DH, Bf16, kDirectN, false>(p, si, b, h, t0, c0, d0, d1, g, qd, dq);
      // On packed documents most warps' rows are direct (the packed CodeAlpaca Llama-3-8B dK/dV
      // kernel took 919 us with their adds, H200).
      reduce = !(t0 >= d0 && min(t0 + 15, si.lq - 1) < d1);
    }
    if (reduce) bwd_reduce_dq<D>(&maps.dq_accum, dq_tile, lane, at, p.q_batch_stride == 0 ? 0 : b, g, qd, dq);
  } else {
    bwd_write_dq<DH, Bf16, kDirectN>(p, si, b, h, t0, c0, d0, d1, g, qd, dq);
  }
}

/// The producer's row warp's share of one query step (rows m0 .. m0 + kBlockM - 1
/// of query head h): each row's log2(e) LSE and Dsum into tLse / tDsum, its key
/// interval (row_bounds) into tRb (read by the consumers' partial steps in place of
/// row_bounds() per column: on the packed CodeAlpaca Llama-3-8B row ncu put about
/// a tenth of the kernel's samples in that 64-bit interval arithmetic); without dQ
/// (kDq = false) the KeySpan of the rows into span[0..1] (lane 0, after a warp
/// reduction).
template <bool kFlex, bool kDq, int kBlockM>
__device__ __forceinline__ void bwd_stage_rows(const AttnParams& p, const SeqInfo& si, int b, int m0, int h, int lane,
                                               float* tLse, float* tDsum, int2* tRb, int* span_out) {
  KeySpan span;
  for (int r = lane; r < kBlockM; r += 32) {
    tLse[r] = lse2_of(p, si, b, m0 + r, h);
    tDsum[r] = dsum_of(p, si, b, m0 + r, h);
    const RowBounds rb = row_bounds<kFlex>(p, si, b, m0 + r);
    tRb[r] = make_int2(rb.lo, rb.hi);
    if constexpr (!kDq) span.add(rb);
  }
  if constexpr (!kDq) {
    span.warp_reduce();
    if (lane == 0) {
      span_out[0] = span.lo;
      span_out[1] = span.hi;
    }
  }
}

/// The producer warpgroup of attn_bwd_sm90_kernel (thread ptid of it): thread 0
/// loads K / V once on kv_bar and each step's Q and dO tiles by TMA on the
/// stage's full barrier; warp 1 writes each step's rows (bwd_stage_rows) and,
/// with `stage_bias`, its learnable-bias terms (sm90::BiasTerms, into the unused
/// dS^T tiles), its 32 lanes arriving on full too. Steps: the CTA's query steps
/// of each query head of KV head kvh's group, heads outer.
template <int D, bool kFlex, bool kDq>
__device__ __forceinline__ void bwd_sm90_produce(const AttnParams& p, const SeqInfo& si, int b, int kvh, int n0,
                                                 const QuerySteps<kFlex>& q_steps, int iters,
                                                 const BwdTensorMaps& maps, BwdSm90Storage<D>& sm, bool stage_bias,
                                                 int ptid) {
  constexpr int kBlockN = kBwdSm90BlockN, kBlockM = kBwdSm90BlockM, kStages = kBwdSm90Stages;
  constexpr uint32_t kTileBytes = 2u * kBlockM * D;
  const int lane = ptid % 32, n_qt = q_steps.count;
  const bool tma = ptid == 0, rows = ptid / 32 == 1;  // the copy thread; the LSE / Dsum warp
  const int kb = p.k_batch_stride == 0 ? 0 : b, vb = p.v_batch_stride == 0 ? 0 : b;
  const int qb = p.q_batch_stride == 0 ? 0 : b, ob = p.o_batch_stride == 0 ? 0 : b;
  const int q_row = static_cast<int>(si.tok0_q);
  if (tma && iters > 0) {
    sm90::mbar_arrive_expect_tx(&sm.kv_bar, 2u * 2u * kBlockN * D);
    sm90::tma_load_tile_pair<kBlockN, D>(sm.k, &maps.k, kb, sm.v, &maps.v, vb, static_cast<int>(si.tok0_k) + n0, kvh,
                                         &sm.kv_bar);
  }
  float* s_bias = sm.bias_terms();
  for (int it = 0; (tma || rows) && it < iters; ++it) {
    const sm90::PipelineState<kStages> ps{it};
    const int stage = ps.stage();
    const int h = kvh * p.group + it / n_qt;
    int m0;
    bool full_unused;
    q_steps.at(p, si, it % n_qt, &m0, &full_unused);
    if (ps.refill()) sm90::mbar_wait(&sm.empty[stage], ps.refill_phase());
    if (tma) {
      sm90::mbar_arrive_expect_tx(&sm.full[stage], 2 * kTileBytes);  // Q and dO
      sm90::tma_load_tile_pair<kBlockM, D>(sm.q[stage], &maps.q, qb, sm.dout[stage], &maps.dout, ob, q_row + m0, h,
                                           &sm.full[stage]);
    } else {
      bwd_stage_rows<kFlex, kDq, kBlockM>(p, si, b, m0, h, lane, sm.lse[stage], sm.dsum[stage], sm.rb[stage],
                                          sm.span[stage]);
      if (stage_bias)
        sm90::BiasTerms<kBlockM, kBlockN>::copy(s_bias + stage * sm90::kBiasStageFloats, ScoreMod2::of(p, h),
                                                p.mod == ModKind::offset_bias, m0, n0, lane);
      if (kDq && lane == 0) sm.dq_at[stage] = make_int2(q_row + m0, h);
      sm90::mbar_arrive(&sm.full[stage]);
    }
  }
}

/// Item-lists, arguments and results of attn_bwd_dkdv_kernel<..., kAtomicDq =
/// true>: blockIdx.x = tile (item, KV head) of the TileScheduler (KeyTile::of,
/// p.kv_head_group), items of kBwdSm90BlockN keys.
/// kFlex: the query steps come from the BlockMask's query lists of the CTA's key
/// block (kv_block must be kBwdSm90BlockN), partial steps evaluate the pair mask
/// in dkdv_probs, and an offset_bias dBias (p.dbias_mode) leaves the CTA as in
/// the portable kernel. kRel (flex with a rel_bias dBias, p.dbias_mode not none):
/// each step's float32 dS tile of a warpgroup goes to shared memory
/// (BwdSm90RelTiles, after the storage: the launch adds its bytes) and its
/// diagonals into the dBias row or the same scratch rows, one per 64-key tile, as
/// the portable kernel's (sm90::rel_bias_step); its own instance, since the flex
/// consumers have no registers to spare, and without skipping steps. `maps`: K / V with 128-row boxes, Q / dO with 64-row
/// boxes (make_bwd_tensor_maps).
///
/// Warp specialization: the producer warpgroup (setmaxnreg 24) has one thread
/// issue the TMA copies (K and V once on `kv_bar`; per step the Q and dO tiles
/// of the stage on `full`) and one warp write the stage's LSE (log2 domain), Dsum
/// and key interval (row_bounds) rows (with dQ also the step's first accumulator
/// row and head, `dq_at`), its 32 lanes arriving on `full` too (count 33). The consumers
/// release a stage on `empty` after its last read. The two consumer warpgroups
/// meet once per step, after both stored their dS^T (head_dim 128: each reads
/// all 128 keys of dS for its dQ columns); dS^T is double-buffered, so that one
/// barrier also orders step t + 2's writes after step t's dQ reads. Each consumer
/// warp adds its dQ fragment by a TMA reduce from its own BwdSm90DqTiles tile
/// (bwd_reduce_dq; kRel: float2 atomics, bwd_write_dq).
///
/// Rows a TMA box reads past a sequence (padding positions, the next THD
/// sequence; zeros only past the tensor) get P = dS = 0, so they must hold finite
/// values (0 x NaN = NaN in the MMAs): true of every buffer attnbench makes, as in
/// the Hopper forward. CTAs with no query step skip the K / V loads and store
/// zero dK / dV.
///
/// kDirect (atomic dQ off the flex path, LaunchShape::dq_direct): the rows whose
/// keys lie in one key block (dq_direct_block at bwd_sm90_direct_n) get their dQ
/// stored in the element type by the CTA (warpgroup at head_dim 64) of that
/// block instead of adding it (bwd_write_dq, over the block's direct_rows() found
/// once per CTA; a warp whose rows are all direct skips its reduce); the host
/// zeroes and converts only the other rows (attn_bwd_dsum_zero_kernel,
/// attn_bwd_dq_rows_convert_kernel).
///
/// kDq = false (the deterministic mode): dK / dV only, no dS^T stores, barrier or
/// dQ products; attn_dq_sm90_kernel (attn_dq_sm90.cuh) computes dQ without atomics.
/// There the LSE / Dsum warp also leaves the KeySpan of each step's rows, and a
/// warpgroup skips the partial steps whose rows see none of its 64 keys (with kDq
/// the two warpgroups meet once per step, so they never skip).
template <int DH, bool Bf16, bool kFlex = false, bool kDq = true, bool kDirect = false, bool kRel = false>
__global__ void __launch_bounds__(kBwdSm90Threads, 1)
    attn_bwd_sm90_kernel(const AttnParams p, const WorkItem* __restrict__ items,
                         const __grid_constant__ BwdTensorMaps maps) {
#if ATTNBENCH_SM90A
  constexpr int D = sm90::tile_dim(DH);  // tiles of whole swizzle chunks; DH columns exist in memory
  constexpr int kBlockN = kBwdSm90BlockN, kBlockM = kBwdSm90BlockM, kStages = kBwdSm90Stages;
  static_assert(!kDirect || (kDq && !kFlex), "direct dQ rows: atomic dQ off the flex path");
  static_assert(!kRel || kFlex, "rel_bias dBias: the flex path");
  constexpr int kDirectN = kDirect ? bwd_sm90_direct_n<DH>() : 0;  // direct dQ rows (bwd_write_dq)
  // dQ by TMA reduce-adds from BwdSm90DqTiles (bwd_reduce_dq); with the rel_bias tiles they do not
  // fit, and that instance keeps the float2 atomics.
  constexpr bool kReduceDq = kDq && !kRel;
  constexpr int kConsumers = 256, kDt = D / 8;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  if (smem_u32(smem_raw) % 1024 != 0) __trap();  // the swizzle needs 1024-byte aligned tiles
  BwdSm90Storage<D>& sm = *reinterpret_cast<BwdSm90Storage<D>*>(smem_raw);
  uint16_t *sK = sm.k, *sV = sm.v, *sQ = sm.q[0], *sdO = sm.dout[0], *sdS = sm.ds[0];  // stage s at + s * tile
  float *sLse = sm.lse[0], *sDsum = sm.dsum[0];
  uint64_t *kv_bar = &sm.kv_bar, *full = sm.full, *empty = sm.empty;
  int* sSpan = sm.span[0];
  int2* sRb = sm.rb[0];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
  const KeyTile kt = KeyTile::of(p, items, p.kv_head_group);
  const int kvh = kt.kvh, b = kt.b, n0 = kt.n0;
  const SeqInfo si = kt.si;
  const QuerySteps<kFlex> q_steps(p, si, b, n0, kBlockN, kBlockM);
  const int n_qt = q_steps.count;
  const int iters = n_qt * p.group;
  // Step it: query head kvh * group + it / n_qt, its (it % n_qt)-th query tile.
  auto head_of = [&](int it) { return kvh * p.group + it / n_qt; };
  constexpr uint32_t kTileBytes = 2u * kBlockM * D;
  // P^T computed while dP^T runs (dkdv_probs_p, partial steps): off the flex path, whose consumers
  // spilled up to 56 more bytes per thread with it (head_dim 128, ptxas); there one wait covers both.
  constexpr bool kPBeforeDp = !kFlex;
  // flex with a learnable bias, deterministic mode (kDq false, the dS^T tiles unused): the rows warp
  // stages each step's bias terms (sm90::BiasTerms) in the dS^T tiles' shared memory
  const bool stage_bias = kFlex && !kDq && learnable_bias(p.mod);
  float* s_bias = sm.bias_terms();

  if (tid == 0) {
    sm90::mbar_init(kv_bar, 1);
    for (int st = 0; st < kStages; ++st) {
      sm90::mbar_init(&full[st], 1 + 32);
      sm90::mbar_init(&empty[st], kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // the only CTA-wide barrier

  if (wg == 2) {  // producer warpgroup
    sm90::regs_dec<kBwdSm90ProducerRegs>();
    bwd_sm90_produce<D, kFlex, kDq>(p, si, b, kvh, n0, q_steps, iters, maps, sm, stage_bias, tid - kConsumers);
  } else {  // consumer warpgroups
    sm90::regs_inc<kBwdSm90ConsumerRegs>();
    const int g = lane / 4, qd = lane % 4, wrow = (warp % 4) * 16;  // the warp's 16 rows of a warpgroup tile
    const int key_row[2] = {n0 + wg * 64 + wrow + g, n0 + wg * 64 + wrow + g + 8};
    const uint32_t k_addr = smem_u32(sK), v_addr = smem_u32(sV), q_addr = smem_u32(sQ), do_addr = smem_u32(sdO);
    Acc dk[kDt], dv[kDt];
    zero_acc(dk);
    zero_acc(dv);
    DbiasAcc dbias;  // flex dBias: offset_bias per-key sums, rel_bias clamped ends
    // kRel: rel_bias dBias. Compile-time on, also in a warpgroup past the keys (its dS are zero;
    // its scratch row exists): a run-time switch here made ptxas spill the consumers' accumulators.
    constexpr bool rel = kRel;
    sm90::RelDbias rel_dbias(p, reinterpret_cast<BwdSm90RelTiles*>(smem_raw + bwd_sm90_rel_offset<D>()), b,
                             n0 + wg * 64, wg, tid % 128);
    float* dq_tile = reinterpret_cast<BwdSm90DqTiles*>(smem_raw + bwd_sm90_dq_offset<D>())->t[warp];  // kReduceDq
    int d0 = 0, d1 = 0;  // kDirect: the rows whose dQ this CTA (warpgroup at head_dim 64) stores (direct_rows)
    if constexpr (kDirectN > 0) direct_rows(p.mask, si.lq, si.lk, D == 128 ? n0 : n0 + wg * 64, kDirectN, &d0, &d1);
    if (iters > 0) sm90::mbar_wait(kv_bar, 0);

    for (int it = 0; it < iters; ++it) {
      const sm90::PipelineState<kStages> ps{it};
      const int stage = ps.stage();
      const int h = head_of(it);
      int m0;
      bool full_tile;
      q_steps.at(p, si, it % n_qt, &m0, &full_tile);
      const ScoreMod2 mod = ScoreMod2::of(p, h);
      const uint32_t tq = q_addr + stage * kTileBytes, tdo = do_addr + stage * kTileBytes;
      sm90::mbar_wait(&full[stage], ps.phase());
      if constexpr (!kDq) {  // partial steps whose rows see none of this warpgroup's 64 keys are skipped
        KeySpan span;
        span.lo = sSpan[2 * stage];
        span.hi = sSpan[2 * stage + 1];
        if (!kRel && !full_tile && !span.meets(n0 + wg * 64, 64)) {  // (kRel: every step has a barrier)
          sm90::mbar_arrive(&empty[stage]);
          continue;
        }
      }

      // S^T and dP^T in two commit groups. On partial steps P^T (mask, score mod, exp2) is computed
      // while dP^T is on the tensor cores (FlashAttention-3's bwd_step order); full steps wait for
      // both and run the one-pass dkdv_probs, which measured faster there (H200, dense full
      // S8192 D128 backward 6.36 ms against 6.77 with the split on every step).
      Acc st[8], dpt[8];
      sm90::wgmma_fence();
      sm90::bwd_scores<D, Bf16>(k_addr, tq, wg, st);
      sm90::wgmma_commit();
      sm90::bwd_scores<D, Bf16>(v_addr, tdo, wg, dpt);
      sm90::wgmma_commit();
      const float *t_lse = sLse + stage * kBlockM, *t_dsum = sDsum + stage * kBlockM;
      if (kPBeforeDp && !full_tile && probs_before_dp(mod)) {
        sm90::wgmma_wait<1>();  // S^T
        sm90::fence_acc(st);
        dkdv_probs_p<kFlex, 8, kBlockM>(p, si, b, mod, m0, n0, key_row, qd, t_lse, st, sRb + stage * kBlockM);
        sm90::wgmma_wait<0>();  // dP^T
        sm90::fence_acc(dpt);
        dkdv_probs_ds<kFlex, 8, kBlockM>(p, mod, n0, key_row, qd, t_dsum, false, nullptr, dbias, st, dpt);
      } else {  // full steps; softcap (dS reads S, its derivative); the flex path
        sm90::wgmma_wait<0>();
        sm90::fence_acc(st);
        sm90::fence_acc(dpt);
        dkdv_probs<kFlex, 8, kBlockM>(p, si, b, mod, full_tile, m0, n0, key_row, qd, t_lse, t_dsum, false, nullptr,
                                      dbias, st, dpt, kFlex ? sRb + stage * kBlockM : nullptr,
                                      stage_bias ? sm90::staged_bias<kBlockN>(p, s_bias, stage, m0, n0) : StagedBias{});
      }
      float* rel_tile = rel_dbias.tile(it);
      if (rel) sm90::rel_store_ds(rel_tile, dpt, wrow, g, qd);  // read after the barrier below
      uint32_t pa[4][4], sa[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        acc_to_a<Bf16>(st[2 * kk], st[2 * kk + 1], pa[kk]);
        acc_to_a<Bf16>(dpt[2 * kk], dpt[2 * kk + 1], sa[kk]);
      }
      // Three commit groups, as FlashAttention-3 orders them (hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp,
      // bwd_step): dV first, so that it runs across the dS^T stores and the barrier; then dQ and
      // dK; the dQ adds wait for dQ only (wgmma_wait<1>) and run while dK is on the tensor cores.
      sm90::pv<D, Bf16, kBlockM>(pa, tdo, dv);  // dV += P^T dO (group 1)
      if constexpr (kDq) {
        uint16_t* ds_buf = sdS + (it & 1) * kBlockN * kBlockM;
        sm90::store_ds_t(ds_buf, sa, wg * 64 + wrow, lane);
        sm90::fence_proxy_async();  // the dS^T stores, before wgmma reads them
        sm90::ds_barrier<D>(wg);
        if (rel) rel_dbias.flush(p);

        Acc dq[8];
        sm90::wgmma_fence();
        sm90::bwd_dq<D, Bf16>(smem_u32(ds_buf), k_addr, wg, dq);  // dQ = dS K (group 2)
        sm90::wgmma_commit();
        sm90::pv<D, Bf16, kBlockM>(sa, tq, dk);  // dK += dS^T Q (group 3)
        sm90::wgmma_wait<1>();                   // groups 1 and 2 retired
        sm90::fence_acc(dq);
        bwd_add_dq<DH, Bf16, kDirectN, kReduceDq>(p, si, maps, dq_tile, &sm.dq_at[stage], b, h, m0 + wrow, wg, d0, d1,
                                                  lane, dq);
      } else {
        sm90::pv<D, Bf16, kBlockM>(sa, tq, dk);  // dK += dS^T Q (group 2)
        if (rel) {
          sm90::wg_barrier<2>(wg);  // the rel tile is stored
          rel_dbias.flush(p);
        }
      }
      // rel_bias dBias while dK runs on the tensor cores. One barrier per step suffices: the
      // tile written at step t + 2 was last read before step t + 1's barrier.
      if (rel) rel_dbias.step(p, rel_tile, m0, h, dbias);
      sm90::wgmma_wait<0>();
      sm90::fence_acc(dk);
      sm90::fence_acc(dv);
      sm90::mbar_arrive(&empty[stage]);  // Q, dO, LSE, Dsum of this stage are read
      if (rel && (it + 1 == iters || (it + 1) / n_qt != it / n_qt)) {  // the last step of head h
        rel_dbias.head_end(h, dbias);
      }
    }
    if constexpr (kReduceDq)
      if (lane == 0) sm90::bulk_wait<0>();  // every reduce has completed (read its tile, added) before the CTA exits
    if (rel_dbias.pending >= 0) {
      sm90::wg_barrier<4>(wg);
      rel_dbias.flush(p);
    }
    if constexpr (kFlex) {
      if (p.dbias_mode != DbiasMode::none && p.mod == ModKind::offset_bias)
        flush_offset_bias(p, si, b, kvh, key_row, qd, dbias);
    }
    dkdv_store<Bf16, kDt, DH / 8>(p, si, b, kvh, key_row, qd, dk, dv);
  }
#else
  (void)p;
  (void)items;
  __trap();  // built without sm_90a: the host never launches this (fwd_sm90_usable)
#endif
}

}  // namespace attnbench::kernels
