// The backward kernels of the fused attention family (FlashAttention-2's
// backward, Dao 2023, Algorithm 2, with the GQA group folded into the key tile):
//
//   attn_bwd_dsum_kernel  Dsum = rowsum(dO * O) in float32 (LSE's layout)
//   attn_bwd_dsum_zero_kernel  the same, and the zeroing of the dQ accumulator's
//                         rows that the Hopper dK/dV kernel does not store
//                         directly (LaunchShape::dq_direct)
//   attn_dbias_*_reduce_kernel  the ordered dBias reductions of the flex path
//   attn_bwd_dkdv_kernel  one CTA per (key tile, KV head): K, V stay in shared
//                         memory; the loop runs over every query head of the
//                         group and every query tile that meets the keys, so dK
//                         and dV accumulate in registers with no atomics. With
//                         kAtomicDq it also adds dQ = dS K for its keys into the
//                         float32 accumulator (atomics: fast, not bitwise
//                         reproducible).
//   attn_bwd_dq_kernel    the deterministic dQ: one CTA per query tile walks the
//                         key tiles like the forward and accumulates dS K in
//                         registers (recomputes S and dP: 7 instead of 5 GEMMs).
//   attn_bwd_dq_convert_kernel  dQ = scale * accumulator, to the element type
//                         (attn_bwd_dq_rows_convert_kernel: the rows that are not direct).
//
// Per element: P = exp2(log2e * score_mod(scale * s) - log2e * LSE) (0 on masked
// pairs and on rows whose LSE is -inf), dS = P * (dP - Dsum) * score_mod'(s),
// dQ = scale * dS K, dK = scale * dS^T Q, dV = P^T dO.
#pragma once

#include "backends/kernels/attn_tile_ops.cuh"

namespace attnbench::kernels {

/// Threads per row of attn_bwd_dsum_kernel: D / 8 16-byte chunks rounded up to a
/// power of two (a shuffle tree), at most a warp (D = 96: 16 threads, 12 with a
/// chunk; D = 256: 32 threads, one chunk each).
__host__ __device__ constexpr int dsum_threads_per_row(int head_dim) {
  int t = 1;
  while (t < head_dim / 8 && t < 32) t *= 2;
  return t;
}

/// THD sequence starts for the row kernels' searches (attn_bwd_dsum_zero_kernel,
/// attn_bwd_dq_rows_convert_kernel): cu_seqlens_q[0 .. num_seqs]
/// copied into shared memory by the whole block (one coalesced load instead of a
/// chain of dependent global loads per thread, which on the packed CodeAlpaca 8B
/// row cost as much as the memset it replaces), or the global array when there
/// are more than kCap sequences. Call from every thread of the block.
struct SeqStarts {
  static constexpr int kCap = 2048;
  const int32_t* cu = nullptr;  ///< the sequences' first tokens (shared or global memory), null off THD

  __device__ __forceinline__ static SeqStarts stage(const AttnParams& p, int32_t* smem) {
    SeqStarts s;
    if (!p.cu_seqlens_q) return s;
    if (p.num_seqs > kCap) {
      s.cu = p.cu_seqlens_q;
      return s;
    }
    for (int i = threadIdx.x; i <= p.num_seqs; i += blockDim.x) smem[i] = p.cu_seqlens_q[i];
    __syncthreads();
    s.cu = smem;
    return s;
  }
};

/// Row r of the Q-shaped buffers (dQ and its float32 accumulator, Q's strides):
/// the offset of its first element at head 0, and whether the
/// Hopper backward stores its dQ directly (dq_row_direct_block at key blocks of
/// kDirectN > 0). Rows are numbered as in attn_bwd_dsum_kernel: THD tokens (the
/// sequence found by binary search of `starts`; a token past the last sequence is
/// never direct), else num_seqs * seq_q rows.
template <int kDirectN>
__device__ __forceinline__ int64_t dq_row_at(const AttnParams& p, const SeqStarts& starts, int64_t r, bool* direct) {
  static_assert(kDirectN > 0, "only the Hopper backward's passes ask");
  int b = 0, t = 0;
  *direct = false;
  if (starts.cu) {
    if (r >= starts.cu[p.num_seqs]) return r * p.q_row_stride;
    int lo = 0, hi = p.num_seqs - 1;  // the last sequence whose first token is <= r
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (starts.cu[mid] <= r) lo = mid; else hi = mid - 1;
    }
    b = lo;
    t = static_cast<int>(r - starts.cu[b]);
  } else {
    b = static_cast<int>(r / p.seq_q);
    t = static_cast<int>(r % p.seq_q);
  }
  const SeqInfo si = seq_info(p, b);
  *direct = dq_row_direct_block(p.mask, t, si.lq, si.lk, kDirectN) >= 0;
  return q_off(p, si, b, t, 0);
}

/// sum over the 8 element pairs of one 16-byte chunk of O and of dO of o * do, in float32.
template <bool Bf16>
__device__ __forceinline__ float dot_chunk(const uint4& a, const uint4& e) {
  const uint32_t av[4] = {a.x, a.y, a.z, a.w}, ev[4] = {e.x, e.y, e.z, e.w};
  float acc = 0.f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 x = unpack2<Bf16>(av[k]), y = unpack2<Bf16>(ev[k]);
    acc += x.x * y.x + x.y * y.y;
  }
  return acc;
}

/// Row r of the O / dO- and LSE-strided buffers as the Dsum kernels number rows
/// (`rows` = tokens in THD, every one valid; else num_seqs * seq_q, row r being
/// position r % seq_q of sequence r / seq_q): its offsets at head 0 in O's and
/// LSE's strides, and whether it is a valid position (false past the sequence's
/// length and for r >= rows).
struct DsumRow {
  int64_t o = 0, lse = 0;
  bool valid = false;

  __device__ __forceinline__ static DsumRow of(const AttnParams& p, int64_t r, int64_t rows) {
    DsumRow w;
    if (r >= rows) return w;
    if (p.cu_seqlens_q) {
      w.o = r * p.o_row_stride;
      w.lse = r * p.lse_row_stride;
      w.valid = true;
    } else {
      const int b = static_cast<int>(r / p.seq_q), t = static_cast<int>(r % p.seq_q);
      w.o = b * p.o_batch_stride + t * p.o_row_stride;
      w.lse = b * p.lse_batch_stride + t * p.lse_row_stride;
      w.valid = t < (p.seqlens_q ? p.seqlens_q[b] : p.seq_q);
    }
    return w;
  }
};

/// Dsum = rowsum(dO * O) in float32 for every stored row of head blockIdx.y.
/// Rows are numbered over the whole buffer: `rows` = tokens in THD (every token
/// is a valid row) or num_seqs * seq_q in the padded layouts (row r is position
/// r % seq_q of sequence r / seq_q; positions past its valid length get 0).
/// dsum_threads_per_row(D) consecutive threads share a row, each loading 16-byte
/// chunks of O and of dO (coalesced; thread c takes chunks c, c + kT, ...), and
/// reduce with shuffles: the kernel streams O and dO once.
template <int D, bool Bf16>
__global__ void __launch_bounds__(256) attn_bwd_dsum_kernel(const AttnParams p, int64_t rows) {
  constexpr int kT = dsum_threads_per_row(D);
  static_assert(32 % kT == 0, "a row's threads stay in one warp");
  const int h = blockIdx.y;
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kT;
  const int c = threadIdx.x % kT;
  const DsumRow row = DsumRow::of(p, r, rows);
  const bool valid = row.valid, store = r < rows;  // invalid stored rows get Dsum 0
  const int64_t o_off = row.o + h * p.o_head_stride, l_off = row.lse + h * p.lse_head_stride;
  float acc = 0.f;
#pragma unroll
  for (int cc = c; cc < D / 8; cc += kT) {
    if (!valid) break;
    const uint4 a = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.o) + o_off + 8 * cc);
    const uint4 e = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.dout) + o_off + 8 * cc);
    acc += dot_chunk<Bf16>(a, e);
  }
#pragma unroll
  for (int o = kT / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (store && c == 0) p.dsum[l_off] = acc;
}

/// Heads per group of the head loops of attn_bwd_dsum_zero_kernel and
/// attn_bwd_dq_rows_convert_kernel: the loads of a group are issued together.
constexpr int kRowHeadGroup = 4;

/// The Hopper backward's preprocess with direct dQ rows (LaunchShape::dq_direct):
/// Dsum as attn_bwd_dsum_kernel (same rows, threads per row and chunks) and the
/// zeroing of the float32 dQ accumulator rows that are not direct (dq_row_at),
/// in place of a memset of the whole accumulator; the direct rows' dQ is stored
/// by the dK/dV kernel. A block covers its rows for every query head (grid.y = 1):
/// the row's sequence is found once (a search of the sequence starts staged in
/// shared memory), and the loads of kRowHeadGroup heads are in flight together.
template <int D, bool Bf16, int kDirectN>
__global__ void __launch_bounds__(256) attn_bwd_dsum_zero_kernel(const AttnParams p, int64_t rows) {
  constexpr int kT = dsum_threads_per_row(D), kG = kRowHeadGroup;
  static_assert(32 % kT == 0 && D / 8 <= kT, "a row's threads stay in one warp, one 16-byte chunk each");
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kT;
  const int c = threadIdx.x % kT;
  const bool has_chunk = c < D / 8;
  const DsumRow row = DsumRow::of(p, r, rows);
  __shared__ int32_t s_cu[SeqStarts::kCap + 1];
  const SeqStarts starts = SeqStarts::stage(p, s_cu);
  bool direct = false;
  const int64_t q_row = r < rows ? dq_row_at<kDirectN>(p, starts, r, &direct) + 8 * c : 0;
  for (int h0 = 0; h0 < p.heads_q; h0 += kG) {
    uint4 a[kG], e[kG];  // the group's O and dO chunks, loaded before any is used
#pragma unroll
    for (int k = 0; k < kG; ++k) {
      a[k] = e[k] = make_uint4(0u, 0u, 0u, 0u);
      if (row.valid && has_chunk && h0 + k < p.heads_q) {
        const int64_t off = row.o + (h0 + k) * p.o_head_stride + 8 * c;
        a[k] = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.o) + off);
        e[k] = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.dout) + off);
      }
    }
#pragma unroll
    for (int k = 0; k < kG; ++k) {
      const int h = h0 + k;
      if (h >= p.heads_q) break;  // uniform over the block: the shuffles below stay whole-warp
      float acc = dot_chunk<Bf16>(a[k], e[k]);
#pragma unroll
      for (int o = kT / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (r < rows && c == 0) p.dsum[row.lse + h * p.lse_head_stride] = acc;
      if (r < rows && !direct && has_chunk) {
        float4* z = reinterpret_cast<float4*>(p.dq_accum + q_row + h * p.q_head_stride);
        z[0] = make_float4(0.f, 0.f, 0.f, 0.f);
        z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  }
}

/// Deterministic rel_bias dBias: entry (h, e) = the sum of the scratch rows of
/// every (sequence, key tile) in that order (flex path, DbiasMode::deterministic).
/// static: one copy per head-dimension translation unit.
static __global__ void attn_dbias_rel_reduce_kernel(const AttnParams p) {
  const int64_t n = static_cast<int64_t>(p.heads_q) * (2 * p.max_distance + 1);
  const int64_t rows = static_cast<int64_t>(p.num_seqs) * p.dbias_tiles;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int64_t r = 0; r < rows; ++r) acc += p.dbias_scratch[r * n + idx];
    p.dbias[idx] = acc;
  }
}

/// Deterministic offset_bias dBias: entry e = the sum over the keys j with
/// offset[j] = e (ascending) of the per-(sequence, KV head) key sums, in that order.
static __global__ void attn_dbias_offset_reduce_kernel(const AttnParams p) {
  const int64_t groups = static_cast<int64_t>(p.num_seqs) * p.heads_kv;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < p.bias_size;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int c = p.offset_keys_ptr[e]; c < p.offset_keys_ptr[e + 1]; ++c) {
      const int j = p.offset_keys[c];
      for (int64_t g = 0; g < groups; ++g) acc += p.dbias_scratch[g * p.seq_k + j];
    }
    p.dbias[e] = acc;
  }
}

/// dq[i] = element type of (scale * accum[i]), n elements (vectorised by 4).
template <bool Bf16>
__global__ void attn_bwd_dq_convert_kernel(const float* __restrict__ accum, uint16_t* __restrict__ dq, int64_t n,
                                           float scale) {
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * 4; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x * 4) {
    if (i + 4 <= n) {
      const float4 a = *reinterpret_cast<const float4*>(accum + i);
      uint2 out;
      out.x = pack2<Bf16>(a.x * scale, a.y * scale);
      out.y = pack2<Bf16>(a.z * scale, a.w * scale);
      *reinterpret_cast<uint2*>(dq + i) = out;
    } else {
      for (int64_t k = i; k < n; ++k) {
        const uint32_t v = pack2<Bf16>(accum[k] * scale, 0.f);
        dq[k] = static_cast<uint16_t>(v & 0xffffu);
      }
    }
  }
}

/// dQ = scale * accumulator in the element type for the rows that are not
/// direct (dq_row_at; the Hopper backward stored those), every query head of
/// them, with attn_bwd_dsum_zero_kernel's row numbering, thread layout and head
/// groups: each thread converts one 8-float chunk of a row per head (two float4
/// loads, one 16-byte store).
template <int D, bool Bf16, int kDirectN>
__global__ void __launch_bounds__(256) attn_bwd_dq_rows_convert_kernel(const AttnParams p, int64_t rows) {
  constexpr int kT = dsum_threads_per_row(D), kG = kRowHeadGroup;
  static_assert(D / 8 <= kT, "one 16-byte chunk per thread");
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kT;
  const int c = threadIdx.x % kT;
  __shared__ int32_t s_cu[SeqStarts::kCap + 1];
  const SeqStarts starts = SeqStarts::stage(p, s_cu);
  if (r >= rows || c >= D / 8) return;
  bool direct;
  const int64_t q_row = dq_row_at<kDirectN>(p, starts, r, &direct) + 8 * c;
  if (direct) return;
  for (int h0 = 0; h0 < p.heads_q; h0 += kG) {
    float4 a[kG][2];
#pragma unroll
    for (int k = 0; k < kG; ++k)
      if (h0 + k < p.heads_q) {
        const float4* src = reinterpret_cast<const float4*>(p.dq_accum + q_row + (h0 + k) * p.q_head_stride);
        a[k][0] = src[0];
        a[k][1] = src[1];
      }
#pragma unroll
    for (int k = 0; k < kG; ++k)
      if (h0 + k < p.heads_q) {
        uint4 v;
        v.x = pack2<Bf16>(a[k][0].x * p.scale, a[k][0].y * p.scale);
        v.y = pack2<Bf16>(a[k][0].z * p.scale, a[k][0].w * p.scale);
        v.z = pack2<Bf16>(a[k][1].x * p.scale, a[k][1].y * p.scale);
        v.w = pack2<Bf16>(a[k][1].z * p.scale, a[k][1].w * p.scale);
        *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.dq) + q_row + (h0 + k) * p.q_head_stride) = v;
      }
  }
}

/// lse2_of in two halves, so that a kernel can issue the load long before its
/// use: the row's LSE (lse_of: -inf past lq), then lse2_from(LSE).
__device__ __forceinline__ float lse_of(const AttnParams& p, const SeqInfo& si, int b, int t, int h) {
  return t < si.lq ? p.lse[lse_off(p, si, b, t, h)] : -INFINITY;
}
__device__ __forceinline__ float lse2_from(float l) { return l == -INFINITY ? INFINITY : l * kLog2e; }
/// log2(e) * LSE of a row, +inf for rows with no allowed key (LSE = -inf) and
/// padding rows, so that exp2(s - lse2) = 0 there. (It keeps its branch:
/// written as lse2_from(lse_of()) it made the flex dK/dV kernels, whose rows
/// warp calls it with 24 registers, spill 16-20 bytes more.)
__device__ __forceinline__ float lse2_of(const AttnParams& p, const SeqInfo& si, int b, int t, int h) {
  if (t >= si.lq) return INFINITY;
  return lse2_from(p.lse[lse_off(p, si, b, t, h)]);
}
__device__ __forceinline__ float dsum_of(const AttnParams& p, const SeqInfo& si, int b, int t, int h) {
  return t < si.lq ? p.dsum[lse_off(p, si, b, t, h)] : 0.f;
}

/// Shared memory of attn_bwd_dkdv_kernel: K, V tiles, two stages of Q and dO
/// tiles, two stages of per-row LSE and Dsum, and the dS^T tile (atomic dQ).
template <int D, int kWarps, int kBlockM, bool kAtomicDq>
constexpr size_t dkdv_smem_bytes() {
  const size_t n = 16u * kWarps;
  return 2u * (2u * n * D + 4u * kBlockM * D + (kAtomicDq ? n * kBlockM : 0u)) + 4u * 4u * kBlockM;
}

/// Sum over the 32 lanes of a warp.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// dBias in the dK/dV kernel (flex path). dS of a pair is the gradient of its
/// score, and a learnable bias enters the score additively, so dBias[e] = the
/// sum of dS over the pairs that read entry e. Every sum below runs in an order
/// fixed by the schedule (no atomics until a CTA's result leaves it), so the
/// deterministic mode is bitwise reproducible:
///   offset_bias: e = offset[j] depends on the key only: each thread sums dS per
///                key over every row and head it sees (key_sum), the quad's four
///                sums are combined by shuffles, and one value per key leaves the CTA.
///   rel_bias:    e = (h, clamp(i - j, -m, m) + m). Each step stores its float dS
///                tile in shared memory; thread t then sums diagonal t of the tile
///                (fixed key order) into the head's row of 2m + 1 slots (one writer
///                per slot and step), or into its registers lo / hi when the
///                diagonal is clamped to an end. The row leaves the CTA once per
///                head (flush_rel_bias).
struct DbiasAcc {
  float key_sum[2] = {0.f, 0.f};
  float lo = 0.f, hi = 0.f;
};

/// Shared memory of the rel_bias dBias path (floats): the head's row, the float dS
/// tile (row stride kBlockM + 1: conflict-free diagonals), one partial per warp.
template <int kBlockN, int kBlockM, int kWarps>
constexpr int rel_bias_smem_floats(int max_distance) {
  return 2 * max_distance + 1 + kBlockN * (kBlockM + 1) + 2 * kWarps;
}

/// Sum the diagonals of the step's dS tile sT [kBlockN keys][kBlockM + 1] (query
/// rows m0.., keys n0..) into the rel_bias row / the clamped ends.
template <int kBlockN, int kBlockM, int kThreads>
__device__ __forceinline__ void rel_bias_diagonals(int max_distance, DbiasAcc& acc, const float* sT, float* s_rel,
                                                   int m0, int n0) {
  for (int q = threadIdx.x; q < kBlockN + kBlockM - 1; q += kThreads) {
    const int qq = q - (kBlockN - 1);  // column - key inside the tile
    const int k0 = qq < 0 ? -qq : 0, k1 = qq > kBlockM - kBlockN ? kBlockM - 1 - qq : kBlockN - 1;
    float sum = 0.f;
    for (int k = k0; k <= k1; ++k) sum += sT[k * (kBlockM + 1) + k + qq];
    const int d = m0 - n0 + qq;
    if (d <= -max_distance) acc.lo += sum;
    else if (d >= max_distance) acc.hi += sum;
    else s_rel[d + max_distance] += sum;
  }
}

/// Move the rel_bias row of head h out of shared memory (the clamped ends joined
/// first, warps in order): float32 atomics into dBias (one per non-zero entry), or
/// plain stores into this (sequence, key tile, head)'s scratch row
/// (deterministic). Called by every thread of the CTA.
template <int kThreads>
__device__ void flush_rel_bias(const AttnParams& p, DbiasAcc& acc, float* s_rel, float* s_warp, int b, int key_tile,
                               int h) {
  constexpr int kWarps = kThreads / 32;
  const int tid = threadIdx.x;
  const int slots = 2 * p.max_distance + 1;
  const float lo = warp_sum(acc.lo), hi = warp_sum(acc.hi);
  acc.lo = acc.hi = 0.f;
  if (tid % 32 == 0) {
    s_warp[tid / 32] = lo;
    s_warp[kWarps + tid / 32] = hi;
  }
  __syncthreads();
  if (tid == 0) {
    float l = 0.f, u = 0.f;
    for (int w = 0; w < kWarps; ++w) {
      l += s_warp[w];
      u += s_warp[kWarps + w];
    }
    s_rel[0] += l;
    s_rel[slots - 1] += u;
  }
  __syncthreads();
  const bool atomic = p.dbias_mode == DbiasMode::atomic;
  float* dst = atomic ? p.dbias + static_cast<int64_t>(h) * slots
                      : p.dbias_scratch + ((static_cast<int64_t>(b) * p.dbias_tiles + key_tile) * p.heads_q + h) * slots;
  for (int e = tid; e < slots; e += kThreads) {
    const float v = s_rel[e];
    s_rel[e] = 0.f;
    if (!atomic) dst[e] = v;
    else if (v != 0.f) atomicAdd(dst + e, v);
  }
  __syncthreads();
}

/// S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys against one query tile.
template <int D, bool Bf16, int kQt>
__device__ __forceinline__ void dkdv_scores(const uint16_t* sK, const uint16_t* sV, const uint16_t* tQ,
                                            const uint16_t* tdO, int warp, int lane, Acc (&st)[kQt],
                                            Acc (&dpt)[kQt]) {
  zero_acc(st);
  zero_acc(dpt);
  // Not unrolled: unrolling hoists every fragment load and spills registers.
#pragma unroll 1
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t ka[4], va[4];
    load_a<D>(sK, warp * 16, ks, lane, ka);
    load_a<D>(sV, warp * 16, ks, lane, va);
#pragma unroll
    for (int nt = 0; nt < kQt; nt += 2) {
      uint32_t bq[4], bo[4];
      load_b_nk<D>(tQ, nt * 8, ks, lane, bq);
      load_b_nk<D>(tdO, nt * 8, ks, lane, bo);
      mma16816<Bf16>(st[nt], ka, bq[0], bq[1]);
      mma16816<Bf16>(st[nt + 1], ka, bq[2], bq[3]);
      mma16816<Bf16>(dpt[nt], va, bo[0], bo[1]);
      mma16816<Bf16>(dpt[nt + 1], va, bo[2], bo[3]);
    }
  }
}

/// Whether dS = P (dP - Dsum) needs nothing of S but P: every score mod whose
/// derivative is 1 (all but softcap, whose derivative 1 - tanh^2 reads S). Then
/// P can be computed before dP is known (dkdv_probs_p, dkdv_probs_ds).
__device__ __forceinline__ bool probs_before_dp(const ScoreMod2& mod) { return mod.kind != ModKind::softcap; }

/// The flex path's dBias terms of one dS value (key row r of the thread's two,
/// query column col): into the float dS tile sT (rel_bias) or the key's sum
/// (offset_bias).
template <bool kFlex, int kBlockM>
__device__ __forceinline__ void dkdv_dbias_term(bool rel_dbias, bool key_sums, float* sT, DbiasAcc& dbias,
                                                int key_row, int n0, int col, int r, float ds) {
  if constexpr (kFlex) {
    if (rel_dbias) sT[(key_row - n0) * (kBlockM + 1) + col] = ds;
    else if (key_sums) dbias.key_sum[r] += ds;
  } else {
    (void)rel_dbias, (void)key_sums, (void)sT, (void)dbias, (void)key_row, (void)n0, (void)col, (void)r, (void)ds;
  }
}

/// The general case of dkdv_probs: mask on partial tiles, score mod (and, with
/// kWithDs, its derivative and dS), dBias on the flex path. Without kWithDs only
/// P^T in place of S^T (dpt untouched: dP^T may still be on the tensor cores).
template <bool kFlex, bool kWithDs, int kQt, int kBlockM, class Staged>
__device__ __forceinline__ void dkdv_probs_masked(const AttnParams& p, const SeqInfo& si, int b, const ScoreMod2& mod,
                                                  bool full, int m0, int n0, const int (&key_row)[2], int qd,
                                                  const float* tLse, const float* tDsum, bool rel_dbias, float* sT,
                                                  DbiasAcc& dbias, Acc (&st)[kQt], Acc (&dpt)[kQt],
                                                  const int2* tRb, const Staged& sb) {
  // flex with documents / block_sparse: bit (2 nt + c) * 2 + r for pair (query nt * 8 + 2 qd + c, key row r)
  uint32_t bits = ~0u;
  if constexpr (kFlex) {
    if (!full && mask_needs_pairs(p.mask))
      bits = flex_mask_bits<4 * kQt>(p, si, b, [&](int k, int* i, int* j) {
        *i = m0 + (k / 4) * 8 + 2 * qd + (k / 2) % 2;
        *j = key_row[k % 2];
      });
  }
  const bool key_sums = kFlex && p.dbias_mode != DbiasMode::none && mod.kind == ModKind::offset_bias;
  with_score_mod<kFlex>(mod, sb, [&](const auto& score, const auto& grad) {
#pragma unroll
    for (int nt = 0; nt < kQt; ++nt) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = nt * 8 + 2 * qd + c, i = m0 + col;
        const RowBounds rb = full ? RowBounds{}
                             : tRb ? RowBounds{tRb[col].x, tRb[col].y}
                                   : row_bounds<kFlex>(p, si, b, i);
        const float lse2 = tLse[col];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int e = 2 * r + c;
          const float x = st[nt].c[e];
          const bool ok = full || (rb.allows(key_row[r]) && ((bits >> ((2 * nt + c) * 2 + r)) & 1u));
          float pe;
          if constexpr (kWithDs)
            pe = ok ? fast_exp2(score(x, i, key_row[r]) - lse2) : 0.f;
          else  // without a branch per score (ptxas made one of the select): exp2(-inf) = +0
            pe = fast_exp2(ok ? score(x, i, key_row[r]) - lse2 : -INFINITY);
          st[nt].c[e] = pe;
          if constexpr (kWithDs) {
            dpt[nt].c[e] = pe * (dpt[nt].c[e] - tDsum[col]) * grad(x);
            dkdv_dbias_term<kFlex, kBlockM>(rel_dbias, key_sums, sT, dbias, key_row[r], n0, col, r, dpt[nt].c[e]);
          }
        }
      }
    }
  });
}

/// The first half of dkdv_probs on a partial step (one that needs the mask) where
/// probs_before_dp(mod): P^T in place of S^T. Reads st only, so that the Hopper
/// kernel runs it while dP^T is on the tensor cores. Arguments as dkdv_probs.
template <bool kFlex, int kQt, int kBlockM, class Staged = NoStagedBias>
__device__ __forceinline__ void dkdv_probs_p(const AttnParams& p, const SeqInfo& si, int b, const ScoreMod2& mod,
                                             int m0, int n0, const int (&key_row)[2], int qd, const float* tLse,
                                             Acc (&st)[kQt], const int2* tRb = nullptr, const Staged& sb = {}) {
  if (!kFlex && mod.kind == ModKind::none && tRb) {  // the row intervals alone: no per-score branch on the kind
#pragma unroll
    for (int nt = 0; nt < kQt; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = nt * 8 + 2 * qd + c;
        const RowBounds rb{tRb[col].x, tRb[col].y};
        const float lse2 = tLse[col];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int e = 2 * r + c;
          const float x = mod.apply_as<ModKind::none>(st[nt].c[e], m0 + col, key_row[r]) - lse2;
          st[nt].c[e] = fast_exp2(rb.allows(key_row[r]) ? x : -INFINITY);
        }
      }
    return;
  }
  DbiasAcc unused_acc;
  dkdv_probs_masked<kFlex, false, kQt, kBlockM>(p, si, b, mod, false, m0, n0, key_row, qd, tLse, nullptr, false,
                                                nullptr, unused_acc, st, st, tRb, sb);
}

/// The second half of dkdv_probs where probs_before_dp(mod), after dkdv_probs_p:
/// dS^T = P^T (dP^T - Dsum) in place of dP^T and the flex path's dBias terms.
/// Arguments as dkdv_probs.
template <bool kFlex, int kQt, int kBlockM>
__device__ __forceinline__ void dkdv_probs_ds(const AttnParams& p, const ScoreMod2& mod, int n0,
                                              const int (&key_row)[2], int qd, const float* tDsum, bool rel_dbias,
                                              float* sT, DbiasAcc& dbias, const Acc (&st)[kQt], Acc (&dpt)[kQt]) {
  const bool key_sums = kFlex && p.dbias_mode != DbiasMode::none && mod.kind == ModKind::offset_bias;
#pragma unroll
  for (int nt = 0; nt < kQt; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = nt * 8 + 2 * qd + (e & 1), r = e / 2;
      dpt[nt].c[e] = st[nt].c[e] * (dpt[nt].c[e] - tDsum[col]);
      dkdv_dbias_term<kFlex, kBlockM>(rel_dbias, key_sums, sT, dbias, key_row[r], n0, col, r, dpt[nt].c[e]);
    }
}

/// P^T and dS^T in place of S^T and dP^T for the thread's two keys key_row and
/// the query tile at m0 (tLse / tDsum: its rows' log2(e) LSE and Dsum; tRb, when
/// not null, their row_bounds() as (lo, hi), staged once per tile; sb: the
/// step's learnable-bias terms where the caller staged them, StagedBias). On the
/// flex path dS also feeds dBias: the float dS tile sT (rel_bias) or the per-key
/// sums (offset_bias). In one pass over the tile; dkdv_probs_p and dkdv_probs_ds
/// compute the same in two, where probs_before_dp.
template <bool kFlex, int kQt, int kBlockM, class Staged = NoStagedBias>
__device__ __forceinline__ void dkdv_probs(const AttnParams& p, const SeqInfo& si, int b, const ScoreMod2& mod,
                                           bool full, int m0, int n0, const int (&key_row)[2], int qd,
                                           const float* tLse, const float* tDsum, bool rel_dbias, float* sT,
                                           DbiasAcc& dbias, Acc (&st)[kQt], Acc (&dpt)[kQt],
                                           const int2* tRb = nullptr, const Staged& sb = {}) {
  if (mod.kind == ModKind::none && full) {  // the common case: no mask, no score-mod derivative
#pragma unroll
    for (int nt = 0; nt < kQt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * qd + (e & 1);
        const float pe = fast_exp2(st[nt].c[e] * mod.scale_log2 - tLse[col]);
        st[nt].c[e] = pe;
        dpt[nt].c[e] = pe * (dpt[nt].c[e] - tDsum[col]);
      }
  } else {
    dkdv_probs_masked<kFlex, true, kQt, kBlockM>(p, si, b, mod, full, m0, n0, key_row, qd, tLse, tDsum, rel_dbias,
                                                 sT, dbias, st, dpt, tRb, sb);
  }
}

/// dV += P^T dO, dK += dS^T Q with the A operands from registers, for the kDt
/// column n-tiles of dK / dV from 16-byte chunk c0 on (0: all of them; a column
/// split CTA: its half); with kAtomicDq the warp's dS^T rows also go to shared
/// memory (sdS) for dQ.
template <int D, bool Bf16, int kBlockM, int kDt, bool kAtomicDq>
__device__ __forceinline__ void dkdv_accumulate(const Acc (&st)[kBlockM / 8], const Acc (&dpt)[kBlockM / 8],
                                                const uint16_t* tQ, const uint16_t* tdO, uint16_t* sdS, int warp,
                                                int lane, Acc (&dk)[kDt], Acc (&dv)[kDt], int c0 = 0) {
  const int g = lane / 4, qd = lane % 4;
#pragma unroll
  for (int kt = 0; kt < kBlockM / 16; ++kt) {
    uint32_t pa[4], sa[4];
    acc_to_a<Bf16>(st[2 * kt], st[2 * kt + 1], pa);
    acc_to_a<Bf16>(dpt[2 * kt], dpt[2 * kt + 1], sa);
    if constexpr (kAtomicDq) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int ntile = 2 * kt + half;
        const int r0 = warp * 16 + g;
        *reinterpret_cast<uint32_t*>(sdS + SwizzledTile<kBlockM>::offset(r0, ntile) + 2 * qd) = sa[2 * half];
        *reinterpret_cast<uint32_t*>(sdS + SwizzledTile<kBlockM>::offset(r0 + 8, ntile) + 2 * qd) = sa[2 * half + 1];
      }
    }
#pragma unroll
    for (int dt = 0; dt < kDt; dt += 2) {
      uint32_t bo[4], bq[4];
      load_b_kn<D>(tdO, kt * 16, c0 + dt, lane, bo);
      load_b_kn<D>(tQ, kt * 16, c0 + dt, lane, bq);
      mma16816<Bf16>(dv[dt], pa, bo[0], bo[1]);
      mma16816<Bf16>(dv[dt + 1], pa, bo[2], bo[3]);
      mma16816<Bf16>(dk[dt], sa, bq[0], bq[1]);
      mma16816<Bf16>(dk[dt + 1], sa, bq[2], bq[3]);
    }
  }
}

/// Atomic dQ mode: dQ[kBlockM, D] += dS[kBlockM, kBlockN] K[kBlockN, D] for the
/// query tile at m0 of head h, float32 atomics into p.dq_accum; with kSplit > 1
/// only the columns of split `split` (D / kSplit from split * D / kSplit). Warp ->
/// 16 query rows x (those columns) / (column groups), in passes of 32 columns (few
/// live registers beside dK and dV). Called after a barrier (sdS complete).
template <int D, bool Bf16, int kWarps, int kBlockM, int kSplit = 1>
__device__ __forceinline__ void dkdv_atomic_dq(const AttnParams& p, const SeqInfo& si, int b, int h, int m0,
                                               const uint16_t* sdS, const uint16_t* sK, int warp, int lane,
                                               int split = 0) {
  constexpr int kBlockN = 16 * kWarps;
  constexpr int kRowGroups = kBlockM / 16, kColGroups = kWarps / kRowGroups, kDw = D / kSplit / kColGroups;
  constexpr int kPass = kDw % 32 == 0 ? 32 : 16;  // 16 at head_dim 96 (48 columns per group)
  static_assert(kDw % kPass == 0, "whole passes");
  const int rg = warp % kRowGroups, cg = warp / kRowGroups;
  const int g = lane / 4, qd = lane % 4;
  const int cs = kSplit == 1 ? 0 : split * (D / kSplit);  // the split's first column
#pragma unroll 1
  for (int c0 = cs + cg * kDw; c0 < cs + (cg + 1) * kDw; c0 += kPass) {
    Acc dq[kPass / 8];
    zero_acc(dq);
#pragma unroll 1
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[4];
      load_a_t<kBlockM>(sdS, kk * 16, rg * 2, lane, a);
#pragma unroll
      for (int dt = 0; dt < kPass / 8; dt += 2) {
        uint32_t bk[4];
        load_b_kn<D>(sK, kk * 16, c0 / 8 + dt, lane, bk);
        mma16816<Bf16>(dq[dt], a, bk[0], bk[1]);
        mma16816<Bf16>(dq[dt + 1], a, bk[2], bk[3]);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int t = m0 + rg * 16 + g + 8 * r;
      if (t >= si.lq) continue;
      float* row = p.dq_accum + q_off(p, si, b, t, h) + c0;
#pragma unroll
      for (int dt = 0; dt < kPass / 8; ++dt) {
        atomicAdd(row + dt * 8 + 2 * qd, dq[dt].c[2 * r]);
        atomicAdd(row + dt * 8 + 2 * qd + 1, dq[dt].c[2 * r + 1]);
      }
    }
  }
}

/// The offset_bias dBias of the CTA's keys leaves the CTA (flex path): the quad's
/// per-key sums combined, then one float32 atomic per key into dBias[offset[j]],
/// or one store into this (sequence, KV head)'s scratch row (deterministic).
__device__ __forceinline__ void flush_offset_bias(const AttnParams& p, const SeqInfo& si, int b, int kvh,
                                                  const int (&key_row)[2], int qd, const DbiasAcc& acc) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float v = quad_sum(acc.key_sum[r]);
    const int j = key_row[r];
    if (qd != 0 || j >= si.lk) continue;
    if (p.dbias_mode == DbiasMode::atomic) {
      if (v != 0.f) atomicAdd(p.dbias + __ldg(p.bias_offset + j), v);
    } else {
      p.dbias_scratch[(static_cast<int64_t>(b) * p.heads_kv + kvh) * p.seq_k + j] = v;
    }
  }
}

/// dK = scale * acc and dV = acc for the thread's two keys, the kDtStore n-tiles
/// from column col0 on; keys past lk hold zeros (nothing accumulated), nothing is
/// written past store_k.
template <bool Bf16, int kDt, int kDtStore = kDt>
__device__ __forceinline__ void dkdv_store(const AttnParams& p, const SeqInfo& si, int b, int kvh,
                                           const int (&key_row)[2], int qd, const Acc (&dk)[kDt],
                                           const Acc (&dv)[kDt], int col0 = 0) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key_row[r];
    if (j >= si.store_k) continue;
    uint16_t* krow = static_cast<uint16_t*>(p.dk) + k_off(p, si, b, j, kvh) + col0;
    uint16_t* vrow = static_cast<uint16_t*>(p.dv) + v_off(p, si, b, j, kvh) + col0;
#pragma unroll
    for (int dt = 0; dt < kDtStore; ++dt) {
      *reinterpret_cast<uint32_t*>(krow + dt * 8 + 2 * qd) =
          pack2<Bf16>(dk[dt].c[2 * r] * p.scale, dk[dt].c[2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(vrow + dt * 8 + 2 * qd) = pack2<Bf16>(dv[dt].c[2 * r], dv[dt].c[2 * r + 1]);
    }
  }
}

/// kFlex: query tiles from the BlockMask lists of the CTA's key block (p.bm),
/// partial tiles evaluate mask_allowed(), and dBias of a learnable bias
/// accumulates here when p.dbias_mode is set (dynamic shared memory then holds
/// rel_bias_smem_floats() more floats for rel_bias).
///
/// kSplit > 1 (head dims above 128): the dK / dV columns are split over kSplit
/// CTAs per key tile (blockIdx.y), each computing S^T and dP^T over the whole head
/// dim and accumulating its D / kSplit columns of dK and dV (and of dQ in the
/// atomic mode): 2 x D / kSplit accumulator floats per thread instead of 2 x D,
/// which at D = 256 would spill about 1 KB per thread, for S^T and dP^T computed
/// kSplit times. dBias is the first split's alone.
template <int D, bool Bf16, int kWarps, int kBlockM, bool kAtomicDq, bool kFlex = false, int kSplit = 1>
__global__ void __launch_bounds__(kWarps * 32) attn_bwd_dkdv_kernel(const AttnParams p,
                                                                    const WorkItem* __restrict__ items) {
  constexpr int kThreads = kWarps * 32, kBlockN = 16 * kWarps;
  constexpr int kQt = kBlockM / 8;     // n-tiles of S^T (query columns)
  constexpr int kDt = D / 8 / kSplit;  // n-tiles of this CTA's dK, dV columns
  static_assert(D % (8 * kSplit) == 0 && kDt % 2 == 0, "whole n-tile pairs per split");
  const int split = kSplit > 1 ? static_cast<int>(blockIdx.y) : 0;
  const int c0 = split * kDt;          // this split's first 16-byte column chunk
  static_assert(kBlockM % 16 == 0 && kWarps % (kBlockM / 16) == 0, "dQ tile split over the warps");
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sK = smem;
  uint16_t* sV = sK + kBlockN * D;
  uint16_t* sQ = sV + kBlockN * D;        // [2][kBlockM][D]
  uint16_t* sdO = sQ + 2 * kBlockM * D;   // [2][kBlockM][D]
  uint16_t* sdS = sdO + 2 * kBlockM * D;  // [kBlockN][kBlockM] (kAtomicDq)
  float* sLse = reinterpret_cast<float*>(sdS + (kAtomicDq ? kBlockN * kBlockM : 0));  // [2][kBlockM]
  float* sDsum = sLse + 2 * kBlockM;                                                  // [2][kBlockM]
  // Flex rel_bias dBias (rel_bias_smem_floats): the row [2m + 1], the float dS
  // tile [kBlockN][kBlockM + 1], per-warp partials [2 kWarps].
  float* sRel = sDsum + 2 * kBlockM;
  float* sT = sRel + 2 * p.max_distance + 1;
  float* sWarp = sT + kBlockN * (kBlockM + 1);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const KeyTile kt = KeyTile::of(p, items, 0);  // longest first: the L2 head groups are the Hopper kernels'
  const int kvh = kt.kvh, b = kt.b, n0 = kt.n0;
  const SeqInfo si = kt.si;
  load_kv_tile<kBlockN, D, kThreads>(sK, sV, static_cast<const uint16_t*>(p.k) + k_off(p, si, b, 0, kvh),
                                     static_cast<const uint16_t*>(p.v) + v_off(p, si, b, 0, kvh), p.k_row_stride,
                                     p.v_row_stride, n0, si.lk, tid);

  const QuerySteps<kFlex> q_steps(p, si, b, n0, kBlockN, kBlockM);  // the query tiles of this CTA's keys
  const int n_qt = q_steps.count;
  const int iters = n_qt * p.group;
  auto load_q = [&](int it, int stage) {
    const int h = kvh * p.group + it / n_qt;
    int m0;
    bool full_unused;
    q_steps.at(p, si, it % n_qt, &m0, &full_unused);
    const uint16_t* q_base = static_cast<const uint16_t*>(p.q) + q_off(p, si, b, m0, h);
    const uint16_t* o_base = static_cast<const uint16_t*>(p.dout) + o_off(p, si, b, m0, h);
    load_tile_async<kBlockM, D, kThreads>(
        sQ + stage * kBlockM * D,
        [&](int r) -> const uint16_t* { return m0 + r < si.lq ? q_base + r * p.q_row_stride : nullptr; }, tid);
    load_tile_async<kBlockM, D, kThreads>(
        sdO + stage * kBlockM * D,
        [&](int r) -> const uint16_t* { return m0 + r < si.lq ? o_base + r * p.o_row_stride : nullptr; }, tid);
    for (int r = tid; r < kBlockM; r += kThreads) {
      sLse[stage * kBlockM + r] = lse2_of(p, si, b, m0 + r, h);
      sDsum[stage * kBlockM + r] = dsum_of(p, si, b, m0 + r, h);
    }
  };
  if (iters > 0) load_q(0, 0);
  cp_async_commit();

  const int g = lane / 4, qd = lane % 4;
  const int key_row[2] = {n0 + warp * 16 + g, n0 + warp * 16 + g + 8};
  Acc dk[kDt], dv[kDt];
  zero_acc(dk);
  zero_acc(dv);
  DbiasAcc dbias;
  bool rel_dbias = false;
  if constexpr (kFlex) {
    rel_dbias = p.dbias_mode != DbiasMode::none && p.mod == ModKind::rel_bias && split == 0;
    if (rel_dbias)
      for (int e = tid; e < 2 * p.max_distance + 1; e += kThreads) sRel[e] = 0.f;  // read after the loop's first barrier
  }

  for (int it = 0; it < iters; ++it) {
    const int stage = it & 1;
    if (it + 1 < iters) {
      load_q(it + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int h = kvh * p.group + it / n_qt;
    int m0;
    bool full;
    q_steps.at(p, si, it % n_qt, &m0, &full);
    const uint16_t* tQ = sQ + stage * kBlockM * D;
    const uint16_t* tdO = sdO + stage * kBlockM * D;
    const ScoreMod2 mod = ScoreMod2::of(p, h);

    Acc st[kQt], dpt[kQt];
    dkdv_scores<D, Bf16, kQt>(sK, sV, tQ, tdO, warp, lane, st, dpt);
    dkdv_probs<kFlex, kQt, kBlockM>(p, si, b, mod, full, m0, n0, key_row, qd, sLse + stage * kBlockM,
                                    sDsum + stage * kBlockM, rel_dbias, sT, dbias, st, dpt);
    dkdv_accumulate<D, Bf16, kBlockM, kDt, kAtomicDq>(st, dpt, tQ, tdO, sdS, warp, lane, dk, dv, c0);
    if constexpr (kAtomicDq) {
      __syncthreads();
      dkdv_atomic_dq<D, Bf16, kWarps, kBlockM, kSplit>(p, si, b, h, m0, sdS, sK, warp, lane, split);
    }
    if constexpr (kFlex) {
      if (rel_dbias) {  // (mod.kind is rel_bias: dkdv_probs wrote the whole dS tile)
        __syncthreads();  // the dS tile is complete
        rel_bias_diagonals<kBlockN, kBlockM, kThreads>(p.max_distance, dbias, sT, sRel, m0, n0);
      }
    }
    __syncthreads();  // this stage (and dS^T, the dS tile) is rewritten next
    if constexpr (kFlex) {
      if (rel_dbias && (it + 1 == iters || (it + 1) / n_qt != it / n_qt))  // the last tile of head h
        flush_rel_bias<kThreads>(p, dbias, sRel, sWarp, b, n0 / kBlockN, h);
    }
  }
  if (iters == 0) cp_async_wait<0>();
  if constexpr (kFlex) {
    if (p.dbias_mode != DbiasMode::none && p.mod == ModKind::offset_bias && split == 0)
      flush_offset_bias(p, si, b, kvh, key_row, qd, dbias);
  }
  dkdv_store<Bf16, kDt>(p, si, b, kvh, key_row, qd, dk, dv, 8 * c0);
}

/// Shared memory of attn_bwd_dq_kernel: Q and dO tiles, two stages of K and V.
template <int D, int kWarps, int kBlockN>
constexpr size_t dq_smem_bytes() {
  return 2u * (2u * static_cast<size_t>(16 * kWarps) * D + 4u * kBlockN * D);
}

/// S = Q K^T and dP = dO V^T for the warp's 16 query rows against one key tile.
template <int D, bool Bf16, int kNt>
__device__ __forceinline__ void dq_scores(const uint16_t* sQ, const uint16_t* sdO, const uint16_t* tK,
                                          const uint16_t* tV, int warp, int lane, Acc (&s)[kNt], Acc (&dp)[kNt]) {
  zero_acc(s);
  zero_acc(dp);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t qa[4], oa[4];
    load_a<D>(sQ, warp * 16, ks, lane, qa);
    load_a<D>(sdO, warp * 16, ks, lane, oa);
#pragma unroll
    for (int nt = 0; nt < kNt; nt += 2) {
      uint32_t bk[4], bv[4];
      load_b_nk<D>(tK, nt * 8, ks, lane, bk);
      load_b_nk<D>(tV, nt * 8, ks, lane, bv);
      mma16816<Bf16>(s[nt], qa, bk[0], bk[1]);
      mma16816<Bf16>(s[nt + 1], qa, bk[2], bk[3]);
      mma16816<Bf16>(dp[nt], oa, bv[0], bv[1]);
      mma16816<Bf16>(dp[nt + 1], oa, bv[2], bv[3]);
    }
  }
}

/// dS in place of dP for the thread's rows row_t (interval rb, log2(e) LSE lse2,
/// Dsum dsum) against the key tile at n0; `sb`: the step's learnable-bias terms
/// where the caller staged them (the Hopper dQ kernel). kMaskAlone (the Hopper
/// dQ kernel off the flex path): partial steps without a score mod take their
/// own loop, without the per-score branch on the kind (as fwd_softmax_p).
template <bool kFlex, int kNt, bool kMaskAlone = false>
__device__ __forceinline__ void dq_ds(const AttnParams& p, const SeqInfo& si, int b, const ScoreMod2& mod, bool full,
                                      int n0, int qd, const int (&row_t)[2], const RowBounds (&rb)[2],
                                      const float (&lse2)[2], const float (&dsum)[2], const Acc (&s)[kNt],
                                      Acc (&dp)[kNt], StagedBias sb = {}) {
  if (mod.kind == ModKind::none && full) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        dp[nt].c[e] = fast_exp2(s[nt].c[e] * mod.scale_log2 - lse2[r]) * (dp[nt].c[e] - dsum[r]);
      }
    return;
  }
  if (kMaskAlone && !kFlex && mod.kind == ModKind::none) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, j = n0 + nt * 8 + 2 * qd + (e & 1);
        const float x = mod.apply_as<ModKind::none>(s[nt].c[e], row_t[r], j) - lse2[r];
        dp[nt].c[e] = fast_exp2(rb[r].allows(j) ? x : -INFINITY) * (dp[nt].c[e] - dsum[r]);
      }
    return;
  }
  const RowPairBits<kFlex, kNt> pairs(p, si, b, full, n0, qd, row_t[0], row_t[1]);  // documents / block_sparse
  with_score_mod<kFlex>(mod, sb, [&](const auto& score, const auto& grad) {
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, j = n0 + nt * 8 + 2 * qd + (e & 1);
        const float x = s[nt].c[e];
        const bool ok = full || (rb[r].allows(j) && pairs.allows(r, nt, e & 1));
        const float pe = ok ? fast_exp2(score(x, row_t[r], j) - lse2[r]) : 0.f;
        dp[nt].c[e] = pe * (dp[nt].c[e] - dsum[r]) * grad(x);
      }
    }
  });
}

/// dQ += dS K with dS from registers.
template <int D, bool Bf16, int kNt, int kDt>
__device__ __forceinline__ void dq_accumulate(const Acc (&ds)[kNt], const uint16_t* tK, int lane, Acc (&dq)[kDt]) {
#pragma unroll
  for (int kt = 0; kt < kNt / 2; ++kt) {
    uint32_t sa[4];
    acc_to_a<Bf16>(ds[2 * kt], ds[2 * kt + 1], sa);
#pragma unroll
    for (int dt = 0; dt < kDt; dt += 2) {
      uint32_t bk[4];
      load_b_kn<D>(tK, kt * 16, dt, lane, bk);
      mma16816<Bf16>(dq[dt], sa, bk[0], bk[1]);
      mma16816<Bf16>(dq[dt + 1], sa, bk[2], bk[3]);
    }
  }
}

/// dQ = scale * acc of the thread's two rows row_t of query head h (the m16n8
/// accumulator layout: columns 8 dt + 2 qd ..+1) in the element type, for rows
/// before store_q. The epilogue of both deterministic dQ kernels.
template <bool Bf16, int kDt, int kDtStore = kDt>
__device__ __forceinline__ void dq_store_rows(const AttnParams& p, const SeqInfo& si, int b, int h,
                                              const int (&row_t)[2], int qd, const Acc (&dq)[kDt]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = row_t[r];
    if (t >= si.store_q) continue;
    uint16_t* row = static_cast<uint16_t*>(p.dq) + q_off(p, si, b, t, h);
#pragma unroll
    for (int dt = 0; dt < kDtStore; ++dt)
      *reinterpret_cast<uint32_t*>(row + dt * 8 + 2 * qd) =
          pack2<Bf16>(dq[dt].c[2 * r] * p.scale, dq[dt].c[2 * r + 1] * p.scale);
  }
}

/// kFlex: key tiles from the BlockMask lists of the tile's query block (see attn_fwd_kernel).
template <int D, bool Bf16, int kWarps, int kBlockN, bool kFlex = false>
__global__ void __launch_bounds__(kWarps * 32)
    attn_bwd_dq_kernel(const AttnParams p, const WorkItem* __restrict__ items, int pack) {
  constexpr int kThreads = kWarps * 32, kBlockM = 16 * kWarps;
  constexpr int kNt = kBlockN / 8, kDt = D / 8;
  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* sQ = smem;
  uint16_t* sdO = sQ + kBlockM * D;
  uint16_t* sK = sdO + kBlockM * D;
  uint16_t* sV = sK + 2 * kBlockN * D;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const QueryTile qt = QueryTile::of(p, items, pack, kBlockM, 0);  // (as the dK/dV kernel)
  const int h0 = qt.h0, kvh = qt.kvh, b = qt.b, m0 = qt.m0, Mq = qt.Mq;
  const SeqInfo si = qt.si;

  load_packed_rows<kBlockM, D, kThreads>(sQ, static_cast<const uint16_t*>(p.q), m0, Mq, si.lq, h0,
                                         [&](int t, int h) { return q_off(p, si, b, t, h); }, tid);
  load_packed_rows<kBlockM, D, kThreads>(sdO, static_cast<const uint16_t*>(p.dout), m0, Mq, si.lq, h0,
                                         [&](int t, int h) { return o_off(p, si, b, t, h); }, tid);
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

  const int wh = h0 + (warp * 16) / Mq;
  const int wt0 = m0 + (warp * 16) % Mq;
  const int g = lane / 4, qd = lane % 4;
  const int row_t[2] = {wt0 + g, wt0 + g + 8};
  const RowBounds rb[2] = {row_bounds<kFlex>(p, si, b, row_t[0]), row_bounds<kFlex>(p, si, b, row_t[1])};
  const float lse2[2] = {lse2_of(p, si, b, row_t[0], wh), lse2_of(p, si, b, row_t[1], wh)};
  const float dsum[2] = {dsum_of(p, si, b, row_t[0], wh), dsum_of(p, si, b, row_t[1], wh)};
  const ScoreMod2 mod = ScoreMod2::of(p, wh);

  Acc dq[kDt];
  zero_acc(dq);
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
    int n0;
    bool full;
    steps.at(p, si, tile, &n0, &full);
    Acc s[kNt], dp[kNt];
    dq_scores<D, Bf16, kNt>(sQ, sdO, tK, sV + stage * kBlockN * D, warp, lane, s, dp);
    dq_ds<kFlex, kNt>(p, si, b, mod, full, n0, qd, row_t, rb, lse2, dsum, s, dp);
    dq_accumulate<D, Bf16, kNt, kDt>(dp, tK, lane, dq);
    __syncthreads();
  }
  if (n_tiles == 0) cp_async_wait<0>();

  dq_store_rows<Bf16, kDt>(p, si, b, wh, row_t, qd, dq);
}

}  // namespace attnbench::kernels
