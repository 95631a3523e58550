// Small kernels that complete cuDNN's outputs where it leaves rows unwritten or
// where DESIGN.md's fully-masked-row rule differs from what a fused kernel
// produces: zeroed O / dQ / dK / dV rows, sanitized statistics, and the gather of
// cuDNN's statistics into the logical LSE [B, Hq, Sq]. Plain C++ declarations so
// that host code compiles without nvcc; definitions in cudnn_fixup.cu.
#pragma once

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <cuda_runtime.h>

#include <cstdint>

namespace attnbench::cudnn_sdpa {

/// For r < n, h < heads, d < D: element (units[r] + h * head_stride) * D + d of
/// `base` (elements of `elem_bytes` = 2 or 4 bytes) is set to all-zero bits
/// (+0.0 in fp16, bf16 and fp32). `units` is a device array. Asynchronous on
/// `stream`; the launch is checked (throws device::DeviceError). No-op for n == 0.
void zero_rows(void* base, int elem_bytes, const int64_t* units, int64_t n, int64_t heads, int64_t head_stride,
               int64_t D, cudaStream_t stream);

/// lse[(b * Hq + h) * Sq + i] = src[b * Sq + i] < 0 ? -inf : stats[src[b * Sq + i] + h * head_stride]
/// for b < B, h < Hq, i < Sq (`src`, `stats`, `lse` on the device). Asynchronous;
/// launch checked.
void gather_lse(float* lse, const float* stats, const int64_t* src, int64_t B, int64_t Hq, int64_t Sq,
                int64_t head_stride, cudaStream_t stream);

}  // namespace attnbench::cudnn_sdpa

#endif  // ATTNBENCH_HAVE_CUDNN
