// Fix-up kernels of the cuDNN backend (see cudnn_fixup.hpp).
#include "backends/cudnn/cudnn_fixup.hpp"

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <algorithm>
#include <cstdint>

#include "harness/device/check.hpp"

namespace attnbench::cudnn_sdpa {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

int blocks_for(int64_t total) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((total + kThreads - 1) / kThreads, kMaxBlocks)));
}

/// Element (or 16-byte word) e of the n * heads rows of `words_per_row` Words:
/// row r, head h, word w of unit (units[r] + h * head_stride) * words_per_row.
template <class Word>
__global__ void zero_rows_kernel(Word* base, const int64_t* units, int64_t n, int64_t heads, int64_t head_stride,
                                 int64_t words_per_row) {
  const int64_t total = n * heads * words_per_row;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t w = e % words_per_row;
    const int64_t rh = e / words_per_row;
    const int64_t h = rh % heads;
    const int64_t r = rh / heads;
    base[(units[r] + h * head_stride) * words_per_row + w] = Word{};
  }
}

}  // namespace

void zero_rows(void* base, int elem_bytes, const int64_t* units, int64_t n, int64_t heads, int64_t head_stride,
               int64_t D, cudaStream_t stream) {
  if (n == 0 || heads == 0 || D == 0) return;
  const int64_t row_bytes = D * elem_bytes;
  if (row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(base) % 16 == 0) {
    const int64_t words = row_bytes / 16;
    zero_rows_kernel<uint4><<<blocks_for(n * heads * words), kThreads, 0, stream>>>(static_cast<uint4*>(base), units,
                                                                                   n, heads, head_stride, words);
  } else if (elem_bytes == 2) {
    zero_rows_kernel<uint16_t><<<blocks_for(n * heads * D), kThreads, 0, stream>>>(static_cast<uint16_t*>(base),
                                                                                  units, n, heads, head_stride, D);
  } else {
    zero_rows_kernel<uint32_t><<<blocks_for(n * heads * D), kThreads, 0, stream>>>(static_cast<uint32_t*>(base),
                                                                                  units, n, heads, head_stride, D);
  }
  ATTNBENCH_CHECK(cudaGetLastError());
}

}  // namespace attnbench::cudnn_sdpa

#endif  // ATTNBENCH_HAVE_CUDNN
