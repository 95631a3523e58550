// Device fills (fill.hpp).
#include "harness/device/fill.hpp"

#include <algorithm>
#include <stdexcept>

#include "harness/device/check.hpp"

namespace attnbench::device {

namespace {

constexpr int kFillThreads = 256;
constexpr size_t kFillMaxBlocks = 4096;  // grid-stride beyond this

template <class U>
__global__ void fill_kernel(U* __restrict__ dst, size_t n, U value) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = value;
}

template <class U>
void launch_fill(U* dst, size_t n, U value, cudaStream_t stream) {
  if (n == 0) return;
  const size_t blocks = std::min(kFillMaxBlocks, (n + kFillThreads - 1) / kFillThreads);
  fill_kernel<U><<<static_cast<unsigned>(blocks), kFillThreads, 0, stream>>>(dst, n, value);
  ATTNBENCH_CHECK(cudaGetLastError());
}

}  // namespace

void fill_units(void* dst, size_t n_units, unsigned unit_bytes, uint32_t pattern, cudaStream_t stream) {
  if (unit_bytes == 4)
    launch_fill(static_cast<uint32_t*>(dst), n_units, pattern, stream);
  else if (unit_bytes == 2)
    launch_fill(static_cast<uint16_t*>(dst), n_units, static_cast<uint16_t>(pattern & 0xFFFFu), stream);
  else
    throw std::invalid_argument("fill_units: unit_bytes must be 2 or 4, got " + std::to_string(unit_bytes));
}

void fill_f32(float* dst, size_t n, float value, cudaStream_t stream) { launch_fill(dst, n, value, stream); }

}  // namespace attnbench::device
