// Device helpers shared by the forward and backward kernels of the fused family:
// where a sequence lives (SeqInfo), and the score mod in the
// exp2 domain (ScoreMod2). Tile spans are in attn_tiles.hpp (shared with the host).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/kernels/attn_params.hpp"
#include "backends/kernels/attn_tiles.hpp"
#include "backends/kernels/mma_sm80.cuh"

namespace attnbench::kernels {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// Lengths and token offsets of one sequence (see AttnParams, "Lengths").
struct SeqInfo {
  int lq = 0, lk = 0;              ///< valid lengths
  int store_q = 0, store_k = 0;    ///< positions whose outputs are written
  int64_t tok0_q = 0, tok0_k = 0;  ///< THD token offset of position 0
};

__device__ __forceinline__ SeqInfo seq_info(const AttnParams& p, int b) {
  SeqInfo s;
  if (p.cu_seqlens_q) {
    s.tok0_q = p.cu_seqlens_q[b];
    s.tok0_k = p.cu_seqlens_k[b];
    s.lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    s.lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    s.store_q = s.lq;
    s.store_k = s.lk;
  } else {
    s.lq = p.seqlens_q ? p.seqlens_q[b] : p.seq_q;
    s.lk = p.seqlens_k ? p.seqlens_k[b] : p.seq_k;
    s.store_q = p.seq_q;
    s.store_k = p.seq_k;
  }
  return s;
}

/// Element offsets of (b, position t, head h) in the Q-, K-, V-, O- and
/// LSE-strided tensors.
__device__ __forceinline__ int64_t q_off(const AttnParams& p, const SeqInfo& s, int b, int t, int h) {
  return b * p.q_batch_stride + (s.tok0_q + t) * p.q_row_stride + h * p.q_head_stride;
}
__device__ __forceinline__ int64_t k_off(const AttnParams& p, const SeqInfo& s, int b, int t, int h) {
  return b * p.k_batch_stride + (s.tok0_k + t) * p.k_row_stride + h * p.k_head_stride;
}
__device__ __forceinline__ int64_t v_off(const AttnParams& p, const SeqInfo& s, int b, int t, int h) {
  return b * p.v_batch_stride + (s.tok0_k + t) * p.v_row_stride + h * p.v_head_stride;
}
__device__ __forceinline__ int64_t o_off(const AttnParams& p, const SeqInfo& s, int b, int t, int h) {
  return b * p.o_batch_stride + (s.tok0_q + t) * p.o_row_stride + h * p.o_head_stride;
}
__device__ __forceinline__ int64_t lse_off(const AttnParams& p, const SeqInfo& s, int b, int t, int h) {
  return b * p.lse_batch_stride + (s.tok0_q + t) * p.lse_row_stride + h * p.lse_head_stride;
}

/// The score pipeline of docs/semantics.md ("Score pipeline") in the exp2 domain
/// for one query head: x = raw dot product q.k; returns log2(e) * score_mod(scale * x)
/// (the mask is applied by the caller). grad() gives d score_mod / d s for the
/// backward (softcap: 1 - tanh^2; 1 otherwise).
struct ScoreMod2 {
  ModKind kind = ModKind::none;
  float scale_log2 = 0.f;  ///< scale * log2(e)
  float cap_inv = 0.f;     ///< softcap: scale / cap
  float cap_log2 = 0.f;    ///< softcap: cap * log2(e)
  float slope_log2 = 0.f;  ///< alibi: slope_h * log2(e)

  __device__ __forceinline__ static ScoreMod2 of(const AttnParams& p, int h) {
    ScoreMod2 m;
    m.kind = p.mod;
    m.scale_log2 = p.scale_log2;
    if (p.mod == ModKind::softcap) {
      m.cap_inv = p.scale / p.softcap;
      m.cap_log2 = p.softcap * kLog2e;
    }
    if (p.mod == ModKind::alibi) m.slope_log2 = alibi_slope<float>(h, p.heads_q) * kLog2e;
    return m;
  }
  __device__ __forceinline__ float apply(float x, int i, int j) const {
    if (kind == ModKind::none) return x * scale_log2;
    if (kind == ModKind::softcap) return cap_log2 * tanhf(x * cap_inv);
    return x * scale_log2 - slope_log2 * static_cast<float>(i > j ? i - j : j - i);
  }
  /// d score_mod / d s at raw dot product x.
  __device__ __forceinline__ float grad(float x) const {
    if (kind != ModKind::softcap) return 1.f;
    const float t = tanhf(x * cap_inv);
    return 1.f - t * t;
  }
};

}  // namespace attnbench::kernels
