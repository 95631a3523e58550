// Small device fills shared by the platform and the GPU backends (fill.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace attnbench::device {

/// Write the low `unit_bytes` bytes of `pattern` (unit_bytes = 2 or 4) into
/// each of `n_units` consecutive units at `dst` (which must be unit-aligned), on
/// `stream`. Asynchronous; launch errors are checked (DeviceError).
/// Throws std::invalid_argument for another unit size.
void fill_units(void* dst, size_t n_units, unsigned unit_bytes, uint32_t pattern, cudaStream_t stream);

/// Fill `n` floats at `dst` with `value` on `stream` (asynchronous, checked).
void fill_f32(float* dst, size_t n, float value, cudaStream_t stream);

}  // namespace attnbench::device
