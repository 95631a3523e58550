// A 64-bit digest of device buffers' bytes, computed on the device: the
// determinism check compares two runs' outputs without bringing them to the
// host (digest.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "harness/device/buffer.hpp"

namespace attnbench::device {

/// Digest of the payload bytes (bytes(), guard bands excluded) of `buffers`, in
/// order, on `stream`; synchronous (waits for `stream`). Null pointers and empty
/// buffers count as empty. Each 8-byte word w at byte offset 8i of buffer b
/// (a short last word zero-padded) contributes mix64(w + mix64(i * 2^32 + b + 1)) to a
/// sum mod 2^64 (splitmix64's finaliser as mix64, Steele et al. 2014), and each
/// buffer's byte length is added the same way, so two digests differ when any byte, its position, or a
/// buffer's length differs (up to a 2^-64-scale collision) and the result does not
/// depend on the launch order. For equality tests only (runs of one instance),
/// not a checksum format. Throws DeviceError on a CUDA failure.
uint64_t digest(const std::vector<const DeviceBuffer*>& buffers, cudaStream_t stream);

}  // namespace attnbench::device
