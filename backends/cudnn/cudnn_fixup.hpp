// The fix-up kernel that completes cuDNN's outputs where it leaves stored rows
// unwritten or where the fully-masked-row rule (docs/semantics.md section 5) differs from what a fused
// kernel produces: zeroed O / dQ / dK / dV rows and sanitized statistics. (The
// logical LSE is mapped from cuDNN's statistics on the host: lse_from_stats.)
// Plain C++ declarations so that host code compiles without nvcc; definitions in
// cudnn_fixup.cu.
#pragma once

#if defined(ATTNBENCH_HAVE_CUDNN)

#include <cuda_runtime.h>

#include <cstdint>

namespace attnbench::cudnn_sdpa {

/// For r < n, h < heads, d < D: element (units[r] + h * head_stride) * D + d of
/// `base` (elements of `elem_bytes` = 2 or 4 bytes) is set to all-zero bits
/// (+0.0 in fp16, bf16 and fp32). `units` is a device array. Asynchronous on
/// `stream`; the launch is checked (throws device::DeviceError). No-op for n == 0.
/// Rows whose D elements span whole 16-byte words (and a 16-byte aligned `base`)
/// are written with one 16-byte store per thread.
void zero_rows(void* base, int elem_bytes, const int64_t* units, int64_t n, int64_t heads, int64_t head_stride,
               int64_t D, cudaStream_t stream);

}  // namespace attnbench::cudnn_sdpa

#endif  // ATTNBENCH_HAVE_CUDNN
