// The stream-hold kernel (see hold.hpp).
#include "harness/device/hold.hpp"

#include <cuda_runtime.h>

#include <cstdint>

#include "harness/device/check.hpp"

namespace attnbench::device {

namespace {

__device__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void hold_kernel(uint64_t ns) {
  const uint64_t t0 = global_timer_ns();
  while (global_timer_ns() - t0 < ns) {
  }
}

}  // namespace

void hold_stream(void* stream, double ms) {
  const uint64_t ns = ms > 0 ? static_cast<uint64_t>(ms * 1e6) : 0;
  hold_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(ns);
  ATTNBENCH_CHECK(cudaGetLastError());
}

}  // namespace attnbench::device
