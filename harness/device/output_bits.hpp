// One run's outputs copied to the host as they are stored on the device: what a
// GPU backend's download_outputs() keeps until the row's check turns them into
// float64 tensors (harness/backend/backend.hpp).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "harness/device/buffer.hpp"

namespace attnbench::device {

/// O, dQ, dK, dV as their dtype bits (download_encoded) and the float32 LSE (or
/// the backend's softmax statistics) and dBias as float64 values.
struct OutputBits {
  EncodedBuffer o, dq, dk, dv;
  std::vector<double> lse, dbias;
};

/// Copy `o` and `lse` (float32) and, with `with_grads`, `dq`, `dk`, `dv` and
/// `dbias` (float32; null: none) to the host, O and the gradients as dtype-`t`
/// bits. Synchronous (waits for `stream`). Throws as download_encoded /
/// download (std::invalid_argument on a buffer whose element size is not t's,
/// DeviceError).
inline OutputBits download_output_bits(const DeviceBuffer& o, const DeviceBuffer& lse, const DeviceBuffer& dq,
                                       const DeviceBuffer& dk, const DeviceBuffer& dv, const DeviceBuffer* dbias,
                                       DType t, bool with_grads, cudaStream_t stream) {
  OutputBits b;
  b.o = download_encoded(o, t, stream);
  b.lse = download(lse, DType::fp32, stream);
  if (with_grads) {
    b.dq = download_encoded(dq, t, stream);
    b.dk = download_encoded(dk, t, stream);
    b.dv = download_encoded(dv, t, stream);
    if (dbias && !dbias->empty()) b.dbias = download(*dbias, DType::fp32, stream);
  }
  return b;
}

}  // namespace attnbench::device
