// Kernels of the naive backend (see naive_kernels.hpp for the contracts).
//
// One thread block per softmax row (b, h, i), a grid-stride loop over rows.
// Every reduction is a fixed-order tree (warp shuffles, then the warp partials
// summed in warp order by every thread), so results are bitwise reproducible:
// no atomics anywhere, dBias included.
#include "backends/naive/naive_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>

#include "harness/device/check.hpp"

namespace attnbench::naive {

namespace {

constexpr int kWarp = 32;
constexpr int kRowThreads = 128;               ///< threads per softmax row
constexpr int kRowWarps = kRowThreads / kWarp;
constexpr int64_t kMaxBlocks = INT64_C(1) << 20;  ///< grid cap; blocks loop beyond it
constexpr int kBiasThreads = 256;              ///< threads per dBias entry (rel_bias)
constexpr int kBiasWarps = kBiasThreads / kWarp;
constexpr int kOffsetThreads = 128;            ///< threads per block, one dBias entry each (offset_bias)

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_f(float x);
template <>
__device__ __forceinline__ float from_f<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/// Sum over the block; every thread gets the same bits. `scratch` holds kWarps floats.
template <int kWarps>
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  __syncthreads();  // earlier readers of scratch are done
  if (threadIdx.x % kWarp == 0) scratch[threadIdx.x / kWarp] = v;
  __syncthreads();
  float r = 0.f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) r += scratch[w];
  return r;
}

/// Merge two (max, sum of exp(x - max)) pairs; (-inf, 0) is the empty pair.
__device__ __forceinline__ void merge_ml(float& m, float& l, float m2, float l2) {
  const float mn = fmaxf(m, m2);
  if (mn == -INFINITY) {
    m = -INFINITY;
    l = 0.f;
    return;
  }
  l = l * expf(m - mn) + l2 * expf(m2 - mn);
  m = mn;
}

template <class T>
__global__ void __launch_bounds__(kRowThreads) softmax_forward_kernel(SoftmaxForwardArgs a) {
  __shared__ float sm_m[kRowWarps], sm_l[kRowWarps];
  const int64_t rows = a.B * a.Hq * a.Sq;
  T* const P = static_cast<T*>(a.P);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t i = row % a.Sq;
    const int64_t h = (row / a.Sq) % a.Hq;
    const int64_t b = row / (a.Sq * a.Hq);
    const float* s = a.S + row * a.Sk;

    // Pass 1: per-thread online max / sum of exp over the allowed scores.
    float m = -INFINITY, l = 0.f;
    for (int64_t j = threadIdx.x; j < a.Sk; j += kRowThreads) {
      if (!mask_allowed(a.mask, b, h, i, j)) continue;
      const float y = score_mod_apply<float>(a.mod, s[j], h, i, j);
      if (y > m) {
        l = l * expf(m - y) + 1.f;
        m = y;
      } else {
        l += expf(y - m);
      }
    }
    // Block merge in a fixed order.
#pragma unroll
    for (int off = kWarp / 2; off > 0; off /= 2) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
      const float l2 = __shfl_xor_sync(0xffffffffu, l, off);
      merge_ml(m, l, m2, l2);
    }
    __syncthreads();
    if (threadIdx.x % kWarp == 0) {
      sm_m[threadIdx.x / kWarp] = m;
      sm_l[threadIdx.x / kWarp] = l;
    }
    __syncthreads();
    m = sm_m[0];
    l = sm_l[0];
#pragma unroll
    for (int w = 1; w < kRowWarps; ++w) merge_ml(m, l, sm_m[w], sm_l[w]);

    const float lse = l > 0.f ? m + logf(l) : -INFINITY;
    if (threadIdx.x == 0) a.lse[row] = lse;

    // Pass 2: normalised probabilities; exact zeros where masked.
    T* p = P + row * a.Sk;
    for (int64_t j = threadIdx.x; j < a.Sk; j += kRowThreads) {
      float pv = 0.f;
      if (lse != -INFINITY && mask_allowed(a.mask, b, h, i, j))
        pv = expf(score_mod_apply<float>(a.mod, s[j], h, i, j) - lse);
      p[j] = from_f<T>(pv);
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kRowThreads) softmax_backward_kernel(SoftmaxBackwardArgs a) {
  __shared__ float scratch[kRowWarps];
  const int64_t rows = a.B * a.Hq * a.Sq;
  const bool softcap = a.mod.kind == ScoreModKind::softcap;
  const int64_t m_dist = a.mod.max_distance;
  const int64_t r_hi = 2 * m_dist;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t i = row % a.Sq;  // (b, h) of the row do not enter the backward softmax

    // D = sum_j P_ij dP_ij (= rowsum(dO * O) in exact arithmetic), float32.
    const T* p = static_cast<const T*>(a.P) + row * a.Sk;
    float* dp = a.dP + row * a.Sk;
    float acc = 0.f;
    for (int64_t j = threadIdx.x; j < a.Sk; j += kRowThreads) acc += to_f(p[j]) * dp[j];
    const float D = block_sum<kRowWarps>(acc, scratch);

    T* ds = static_cast<T*>(a.dS) + row * a.Sk;  // may alias dp (fp32): same element, same thread
    const float* s = softcap ? a.S + row * a.Sk : nullptr;
    float lo = 0.f, hi = 0.f;
    for (int64_t j = threadIdx.x; j < a.Sk; j += kRowThreads) {
      float v = to_f(p[j]) * (dp[j] - D);
      if (softcap) v *= score_mod_grad<float>(a.mod, s[j]);
      if (a.keep_ds32) dp[j] = v;
      ds[j] = from_f<T>(v);
      if (a.rel_partial) {
        int64_t r = i - j;
        r = (r < -m_dist ? -m_dist : (r > m_dist ? m_dist : r)) + m_dist;
        if (r == 0) lo += v;
        else if (r == r_hi) hi += v;
      }
    }
    if (a.rel_partial) {
      lo = block_sum<kRowWarps>(lo, scratch);
      hi = block_sum<kRowWarps>(hi, scratch);
      if (threadIdx.x == 0) {
        a.rel_partial[2 * row] = lo;
        a.rel_partial[2 * row + 1] = hi;
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    store_rows_kernel(const float* __restrict__ src, T* __restrict__ dst, int64_t H, int64_t S, int64_t D,
                      int64_t rows, RowStrides st) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t s = row % S;
    const int64_t h = (row / S) % H;
    const int64_t b = row / (S * H);
    T* out = dst + b * st.b + h * st.h + s * st.s;
    const float* in = src + row * D;
    for (int64_t d = threadIdx.x; d < D; d += kRowThreads) out[d] = from_f<T>(in[d]);
  }
}

__global__ void __launch_bounds__(kBiasThreads)
    rel_bias_grad_kernel(const float* __restrict__ ds32, const float* __restrict__ partial,
                         float* __restrict__ dbias, int64_t B, int64_t Hq, int64_t Sq, int64_t Sk, int64_t m) {
  __shared__ float scratch[kBiasWarps];
  const int64_t width = 2 * m + 1;
  const int64_t entries = Hq * width;
  for (int64_t e = blockIdx.x; e < entries; e += gridDim.x) {
    const int64_t h = e / width;
    const int64_t r = e % width;
    float acc = 0.f;
    for (int64_t t = threadIdx.x; t < B * Sq; t += kBiasThreads) {
      const int64_t b = t / Sq, i = t % Sq;
      const int64_t row = (b * Hq + h) * Sq + i;
      if (r == 0) {
        acc += partial[2 * row];
      } else if (r == 2 * m) {
        acc += partial[2 * row + 1];
      } else {
        const int64_t j = i - (r - m);  // the one key of row i in interior bucket r
        if (j >= 0 && j < Sk) acc += ds32[row * Sk + j];
      }
    }
    const float total = block_sum<kBiasWarps>(acc, scratch);
    if (threadIdx.x == 0) dbias[e] = total;
  }
}

__global__ void __launch_bounds__(kOffsetThreads)
    offset_bias_grad_kernel(const float* __restrict__ colsum, const int32_t* __restrict__ ptr,
                            const int32_t* __restrict__ idx, float* __restrict__ dbias, int64_t size) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kOffsetThreads;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * kOffsetThreads + threadIdx.x; o < size; o += stride) {
    float acc = 0.f;
    for (int32_t k = ptr[o]; k < ptr[o + 1]; ++k) acc += colsum[idx[k]];
    dbias[o] = acc;
  }
}

unsigned grid_for(int64_t work_items) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(work_items, kMaxBlocks)));
}

[[noreturn]] void bad_dtype(const char* where) {
  throw std::invalid_argument(std::string("naive: unknown dtype in ") + where);
}

}  // namespace

void softmax_forward(DType t, const SoftmaxForwardArgs& a, cudaStream_t stream) {
  const unsigned grid = grid_for(a.B * a.Hq * a.Sq);
  switch (t) {
    case DType::fp32: softmax_forward_kernel<float><<<grid, kRowThreads, 0, stream>>>(a); break;
    case DType::fp16: softmax_forward_kernel<__half><<<grid, kRowThreads, 0, stream>>>(a); break;
    case DType::bf16: softmax_forward_kernel<__nv_bfloat16><<<grid, kRowThreads, 0, stream>>>(a); break;
    default: bad_dtype("softmax_forward");
  }
  ATTNBENCH_CHECK(cudaGetLastError());
}

void softmax_backward(DType t, const SoftmaxBackwardArgs& a, cudaStream_t stream) {
  const unsigned grid = grid_for(a.B * a.Hq * a.Sq);
  switch (t) {
    case DType::fp32: softmax_backward_kernel<float><<<grid, kRowThreads, 0, stream>>>(a); break;
    case DType::fp16: softmax_backward_kernel<__half><<<grid, kRowThreads, 0, stream>>>(a); break;
    case DType::bf16: softmax_backward_kernel<__nv_bfloat16><<<grid, kRowThreads, 0, stream>>>(a); break;
    default: bad_dtype("softmax_backward");
  }
  ATTNBENCH_CHECK(cudaGetLastError());
}

void store_rows(DType t, const float* src, void* dst, int64_t B, int64_t H, int64_t S, int64_t D,
                RowStrides st, cudaStream_t stream) {
  const int64_t rows = B * H * S;
  const unsigned grid = grid_for(rows);
  switch (t) {
    case DType::fp32:
      store_rows_kernel<float><<<grid, kRowThreads, 0, stream>>>(src, static_cast<float*>(dst), H, S, D, rows, st);
      break;
    case DType::fp16:
      store_rows_kernel<__half><<<grid, kRowThreads, 0, stream>>>(src, static_cast<__half*>(dst), H, S, D, rows, st);
      break;
    case DType::bf16:
      store_rows_kernel<__nv_bfloat16>
          <<<grid, kRowThreads, 0, stream>>>(src, static_cast<__nv_bfloat16*>(dst), H, S, D, rows, st);
      break;
    default: bad_dtype("store_rows");
  }
  ATTNBENCH_CHECK(cudaGetLastError());
}

void rel_bias_grad(const float* ds32, const float* rel_partial, float* dbias, int64_t B, int64_t Hq, int64_t Sq,
                   int64_t Sk, int64_t max_distance, cudaStream_t stream) {
  const unsigned grid = grid_for(Hq * (2 * max_distance + 1));
  rel_bias_grad_kernel<<<grid, kBiasThreads, 0, stream>>>(ds32, rel_partial, dbias, B, Hq, Sq, Sk, max_distance);
  ATTNBENCH_CHECK(cudaGetLastError());
}

void offset_bias_grad(const float* colsum, const int32_t* ptr, const int32_t* idx, float* dbias, int64_t size,
                      cudaStream_t stream) {
  if (size <= 0) return;
  const unsigned grid = grid_for((size + kOffsetThreads - 1) / kOffsetThreads);
  offset_bias_grad_kernel<<<grid, kOffsetThreads, 0, stream>>>(colsum, ptr, idx, dbias, size);
  ATTNBENCH_CHECK(cudaGetLastError());
}

}  // namespace attnbench::naive
