// Launch helpers shared by both paths' runners (launch_sm80.cuh,
// launch_sm90.cuh): the shared-memory limit, and the portable kernels every
// backward runs (Dsum, dQ conversion, the ordered dBias reduction).
#pragma once

#include <algorithm>
#include <atomic>

#include "backends/kernels/attn_bwd.cuh"
#include "backends/kernels/attn_runners.hpp"
#include "harness/device/check.hpp"

namespace attnbench::kernels::detail {

/// Raise the dynamic shared-memory limit of kernel `Kernel` (needed above 48 KB),
/// once per kernel and device, checked. The kernel is a template argument so
/// that each kernel gets its own flag: kernels of one signature share a
/// function-pointer type, and a flag keyed by that type would skip all but the
/// first of them (found on the H100: cudaErrorInvalidValue at launch).
/// The limit only grows: a launch that needs more (the flex dK/dV kernel's
/// rel_bias row depends on the problem) raises it again.
template <auto Kernel>
void allow_smem(size_t bytes) {
  constexpr int kDevices = 64;
  static std::atomic<size_t> set_bytes[kDevices];  // per device: the limit set so far (0: none)
  int dev = 0;
  ATTNBENCH_CHECK(cudaGetDevice(&dev));
  if (dev < kDevices && set_bytes[dev].load() >= bytes) return;
  ATTNBENCH_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  if (dev < kDevices) set_bytes[dev].store(bytes);
}

/// CTAs of kernel `Kernel` (`threads` threads, `smem` bytes of dynamic shared
/// memory, after allow_smem) resident on the current device at once: SMs x
/// cudaOccupancyMaxActiveBlocksPerMultiprocessor, queried once per kernel and
/// device, checked; at least 1. The grid of a persistent launch (TileScheduler).
template <auto Kernel>
int64_t resident_ctas(int threads, size_t smem) {
  constexpr int kDevices = 64;
  static std::atomic<int64_t> known[kDevices];  // per device: 0 = not queried yet
  int dev = 0;
  ATTNBENCH_CHECK(cudaGetDevice(&dev));
  if (dev < kDevices && known[dev].load() > 0) return known[dev].load();
  int sms = 0, per_sm = 0;
  ATTNBENCH_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  ATTNBENCH_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, smem));
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(sms) * per_sm);
  if (dev < kDevices) known[dev].store(n);
  return n;
}

/// The grid of the row kernels (Dsum, the row-wise dQ conversion) over `rows`
/// rows of the Q-shaped buffers: 256 threads, y = `heads` (each block loops over
/// the query heads when 1).
template <int D>
dim3 q_rows_grid(int64_t rows, int heads) {
  constexpr int kRowsPerBlock = 256 / dsum_threads_per_row(D);
  return dim3(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(heads));
}

/// Dsum = rowsum(dO * O) over the q_numel / (Hq * D) rows of the Q-shaped buffers;
/// kDirectN > 0: also the zeroing of the dQ accumulator's rows that are not
/// direct (the Hopper backward with atomic dQ; dq_row_direct_block in attn_tiles.hpp).
template <int D, bool Bf16, int kDirectN = 0>
void dsum(const AttnParams& p, int64_t q_numel, cudaStream_t st) {
  const int64_t rows = q_numel / (static_cast<int64_t>(p.heads_q) * D);
  if (rows == 0) return;
  if constexpr (kDirectN > 0)
    attn_bwd_dsum_zero_kernel<D, Bf16, kDirectN><<<q_rows_grid<D>(rows, 1), 256, 0, st>>>(p, rows);
  else
    attn_bwd_dsum_kernel<D, Bf16><<<q_rows_grid<D>(rows, p.heads_q), 256, 0, st>>>(p, rows);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// dQ = scale * accumulator in the element type, row by row, skipping the rows
/// that the Hopper dK/dV kernel stored directly (key blocks of kDirectN).
template <int D, bool Bf16, int kDirectN>
void dq_rows_convert(const AttnParams& p, int64_t q_numel, cudaStream_t st) {
  const int64_t rows = q_numel / (static_cast<int64_t>(p.heads_q) * D);
  if (rows == 0) return;
  attn_bwd_dq_rows_convert_kernel<D, Bf16, kDirectN><<<q_rows_grid<D>(rows, 1), 256, 0, st>>>(p, rows);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// Zero the float32 dQ accumulator (atomic dQ mode) before dK/dV adds into it.
static inline void dq_accum_zero(const AttnParams& p, int64_t q_numel, cudaStream_t st) {
  if (q_numel > 0)
    ATTNBENCH_CHECK(cudaMemsetAsync(p.dq_accum, 0, static_cast<size_t>(q_numel) * sizeof(float), st));
}

/// dQ = scale * accumulator in the element type (atomic dQ mode).
template <bool Bf16>
void dq_convert(const AttnParams& p, int64_t q_numel, cudaStream_t st) {
  if (q_numel <= 0) return;
  const int64_t vec = (q_numel + 3) / 4;  // grid-stride kernel: any grid covers every element
  const unsigned blocks = static_cast<unsigned>(vec < 4096 * 256 ? (vec + 255) / 256 : 4096);
  attn_bwd_dq_convert_kernel<Bf16><<<blocks, 256, 0, st>>>(p.dq_accum, static_cast<uint16_t*>(p.dq), q_numel, p.scale);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// Clear dBias (atomic mode) or its scratch (deterministic mode) before a flex backward.
static inline void flex_dbias_clear(const AttnParams& p, int64_t scratch_floats, cudaStream_t st) {
  if (p.dbias_mode == DbiasMode::atomic)
    ATTNBENCH_CHECK(cudaMemsetAsync(p.dbias, 0, static_cast<size_t>(p.bias_size) * sizeof(float), st));
  if (p.dbias_mode == DbiasMode::deterministic && scratch_floats > 0)
    ATTNBENCH_CHECK(cudaMemsetAsync(p.dbias_scratch, 0, static_cast<size_t>(scratch_floats) * sizeof(float), st));
}

/// The ordered dBias reduction of the flex path's deterministic mode.
static inline void flex_dbias_reduce(const AttnParams& p, cudaStream_t st) {
  if (p.dbias_mode != DbiasMode::deterministic || p.bias_size <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((p.bias_size + 255) / 256, 4096));
  if (p.mod == ModKind::rel_bias)
    attn_dbias_rel_reduce_kernel<<<blocks, 256, 0, st>>>(p);
  else
    attn_dbias_offset_reduce_kernel<<<blocks, 256, 0, st>>>(p);
  ATTNBENCH_CHECK(cudaGetLastError());
}

}  // namespace attnbench::kernels::detail
