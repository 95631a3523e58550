// Device digest of buffers (digest.hpp).
#include "harness/device/digest.hpp"

#include <algorithm>

#include "harness/device/check.hpp"

namespace attnbench::device {

namespace {

constexpr int kDigestThreads = 256;
constexpr size_t kDigestMaxBlocks = 1024;  // grid-stride beyond this

__host__ __device__ inline uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Adds, into *sum, mix64(word_i + mix64(i * 2^32 + salt)) over the n_words
/// 8-byte words of `p` (the last `tail` bytes, when nonzero, zero-padded).
__global__ void digest_kernel(const unsigned char* __restrict__ p, size_t n_words, unsigned tail, uint64_t salt,
                              unsigned long long* sum) {
  __shared__ uint64_t part[kDigestThreads / 32];
  uint64_t acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const auto* words = reinterpret_cast<const uint64_t*>(p);  // 256-byte aligned (DeviceBuffer)
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_words; i += stride) {
    uint64_t w;
    if (i + 1 == n_words && tail != 0) {
      w = 0;
      for (unsigned b = 0; b < tail; ++b) w |= static_cast<uint64_t>(p[i * 8 + b]) << (8 * b);
    } else {
      w = words[i];
    }
    acc += mix64(w + mix64((static_cast<uint64_t>(i) << 32) + salt));
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t s = 0;
    for (int w = 0; w < kDigestThreads / 32; ++w) s += part[w];
    atomicAdd(sum, static_cast<unsigned long long>(s));
  }
}

}  // namespace

uint64_t digest(const std::vector<const DeviceBuffer*>& buffers, cudaStream_t stream) {
  DeviceBuffer sum(1, sizeof(unsigned long long));
  sum.memset(0, stream);
  uint64_t lengths = 0;
  for (size_t b = 0; b < buffers.size(); ++b) {
    const DeviceBuffer* buf = buffers[b];
    const size_t bytes = buf ? buf->bytes() : 0;
    lengths += mix64(bytes + mix64(~static_cast<uint64_t>(b)));
    if (bytes == 0) continue;
    const size_t n_words = (bytes + 7) / 8;
    const size_t blocks = std::min(kDigestMaxBlocks, (n_words + kDigestThreads - 1) / kDigestThreads);
    digest_kernel<<<static_cast<unsigned>(blocks), kDigestThreads, 0, stream>>>(
        buf->as<const unsigned char>(), n_words, static_cast<unsigned>(bytes % 8), static_cast<uint64_t>(b) + 1,
        sum.as<unsigned long long>());
    ATTNBENCH_CHECK(cudaGetLastError());
  }
  unsigned long long host = 0;
  ATTNBENCH_CHECK(cudaMemcpyAsync(&host, sum.data(), sizeof host, cudaMemcpyDeviceToHost, stream));
  ATTNBENCH_CHECK(cudaStreamSynchronize(stream));
  return static_cast<uint64_t>(host) + lengths;
}

}  // namespace attnbench::device
