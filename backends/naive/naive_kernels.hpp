// Kernels of the naive backend (naive_kernels.cu): row softmax forward and
// backward over materialised float32 scores, dtype stores in a physical layout,
// and deterministic learnable-bias gradients. Plain C++ declarations so that the
// host part (naive_backend.cpp) compiles without nvcc.
//
// Score buffers are [B, Hq, Sq, Sk] row-major (one softmax row per (b, h, i)),
// independent of the physical layout of Q/K/V/O.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "harness/model/mask_desc.hpp"
#include "harness/model/problem.hpp"

namespace attnbench::naive {

/// Element strides of a [B, H, S, D] tensor in its physical layout (the inner
/// dimension D has stride 1).
struct RowStrides {
  int64_t b = 0, h = 0, s = 0;
};

/// Forward softmax over one row per (b, h, i).
struct SoftmaxForwardArgs {
  int64_t B = 0, Hq = 0, Sq = 0, Sk = 0;
  const float* S = nullptr;  ///< [B,Hq,Sq,Sk] float32 scaled scores scale * q.k
  void* P = nullptr;         ///< [B,Hq,Sq,Sk] probabilities, problem dtype
  float* lse = nullptr;      ///< [B,Hq,Sq] natural-log sum of exp over allowed j; -inf if none
  MaskDesc mask;             ///< device copies of doc ids / padding lengths
  ScoreModDesc mod;          ///< device copies of bias / offset
};
/// y = score_mod(S), -inf where !mask; LSE = logsumexp_j y; P = exp(y - LSE),
/// exactly 0 where masked and on fully masked rows (LSE = -inf there). All in
/// float32; P rounded once to `t`. Asynchronous on `stream`; launch checked.
void softmax_forward(DType t, const SoftmaxForwardArgs& a, cudaStream_t stream);

/// Backward softmax over one row per (b, h, i).
struct SoftmaxBackwardArgs {
  int64_t B = 0, Hq = 0, Sq = 0, Sk = 0;
  const void* P = nullptr;   ///< [B,Hq,Sq,Sk] problem dtype (from the forward)
  const float* S = nullptr;  ///< scaled scores (needed only for softcap's derivative)
  float* dP = nullptr;       ///< [B,Hq,Sq,Sk] float32 dO V^T; overwritten by float32 dS if `keep_ds32`
  void* dS = nullptr;        ///< [B,Hq,Sq,Sk] problem dtype out; may alias dP when the dtype is fp32
  bool keep_ds32 = false;    ///< store float32 dS into dP (learnable-bias gradients)
  float* rel_partial = nullptr;  ///< rel_bias only: [B,Hq,Sq,2] row sums of dS over the two clamped end buckets
  ScoreModDesc mod;
};
/// D = sum_j P * dP (float32; equal to rowsum(dO * O) in exact arithmetic, and
/// exact where a row has a single allowed key, so that dS is exactly 0 there as
/// in gold); dS = P * (dP - D) * score_mod_grad(S), written in `t` (and float32
/// into dP when keep_ds32). Deterministic. Asynchronous.
void softmax_backward(DType t, const SoftmaxBackwardArgs& a, cudaStream_t stream);

/// dst[b, h, s, d] (dtype `t`, physical strides `st`) = src[((b*H + h)*S + s)*D + d]
/// (float32, contiguous), rounded once. Asynchronous.
void store_rows(DType t, const float* src, void* dst, int64_t B, int64_t H, int64_t S, int64_t D,
                RowStrides st, cudaStream_t stream);

/// rel_bias gradient, deterministic: dbias[h, r] for r in [0, 2m] is the sum over
/// b, i, j with clamp(i - j, -m, m) + m == r of dS32[b, h, i, j]. Interior r
/// read the diagonal j = i - (r - m); the end buckets read `rel_partial`.
void rel_bias_grad(const float* ds32, const float* rel_partial, float* dbias, int64_t B, int64_t Hq,
                   int64_t Sq, int64_t Sk, int64_t max_distance, cudaStream_t stream);

/// offset_bias gradient, deterministic: dbias[o] = sum over k in
/// [ptr[o], ptr[o+1]) of colsum[idx[k]] in order (ptr/idx: the keys j with
/// offset[j] == o, ascending; colsum[j] = sum over b, h, i of dS32). Asynchronous.
void offset_bias_grad(const float* colsum, const int32_t* ptr, const int32_t* idx, float* dbias,
                      int64_t size, cudaStream_t stream);

}  // namespace attnbench::naive
