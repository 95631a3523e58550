// An owned CUDA stream, for backend instances and device measurements.
#pragma once

#include <cuda_runtime.h>

#include "harness/device/check.hpp"

namespace attnbench::device {

/// Owns a non-blocking CUDA stream: created checked (throws DeviceError), and on
/// destruction synchronised then destroyed, errors swallowed and cleared (a
/// destructor cannot throw; the next checked call reports a sticky error), so a
/// throwing constructor of the owner does not leak it and buffers freed after it
/// see no pending work.
struct OwnedStream {
  cudaStream_t s = nullptr;
  OwnedStream() { ATTNBENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~OwnedStream() {
    if (s) {
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
      (void)cudaGetLastError();
    }
  }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
};

}  // namespace attnbench::device
