// Fix-up kernels of the cuDNN backend (see cudnn_fixup.hpp).
#include "backends/cudnn/cudnn_fixup.hpp"

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <algorithm>
#include <cmath>

#include "harness/device/check.hpp"

namespace attnbench::cudnn_sdpa {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

int blocks_for(int64_t total) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((total + kThreads - 1) / kThreads, kMaxBlocks)));
}

template <class Word>
__global__ void zero_rows_kernel(Word* base, const int64_t* units, int64_t n, int64_t heads, int64_t head_stride,
                                 int64_t D) {
  const int64_t total = n * heads * D;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = e % D;
    const int64_t rh = e / D;
    const int64_t h = rh % heads;
    const int64_t r = rh / heads;
    base[(units[r] + h * head_stride) * D + d] = Word(0);
  }
}

__global__ void gather_lse_kernel(float* lse, const float* stats, const int64_t* src, int64_t B, int64_t Hq,
                                  int64_t Sq, int64_t head_stride) {
  const int64_t total = B * Hq * Sq;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e % Sq;
    const int64_t bh = e / Sq;
    const int64_t h = bh % Hq;
    const int64_t b = bh / Hq;
    const int64_t s = src[b * Sq + i];
    lse[e] = s < 0 ? -INFINITY : stats[s + h * head_stride];
  }
}

}  // namespace

void zero_rows(void* base, int elem_bytes, const int64_t* units, int64_t n, int64_t heads, int64_t head_stride,
               int64_t D, cudaStream_t stream) {
  if (n == 0 || heads == 0 || D == 0) return;
  const int grid = blocks_for(n * heads * D);
  if (elem_bytes == 2)
    zero_rows_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(static_cast<uint16_t*>(base), units, n, heads,
                                                              head_stride, D);
  else
    zero_rows_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(static_cast<uint32_t*>(base), units, n, heads,
                                                              head_stride, D);
  ATTNBENCH_CHECK(cudaGetLastError());
}

void gather_lse(float* lse, const float* stats, const int64_t* src, int64_t B, int64_t Hq, int64_t Sq,
                int64_t head_stride, cudaStream_t stream) {
  if (B * Hq * Sq == 0) return;
  gather_lse_kernel<<<blocks_for(B * Hq * Sq), kThreads, 0, stream>>>(lse, stats, src, B, Hq, Sq, head_stride);
  ATTNBENCH_CHECK(cudaGetLastError());
}

}  // namespace attnbench::cudnn_sdpa

#endif  // ATTNBENCH_HAVE_CUDNN
