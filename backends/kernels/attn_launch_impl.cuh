// Launch code of one head dimension (both element types); included once per
// head dimension by attn_hdim64.cu / attn_hdim128.cu so that the CUDA part
// compiles in parallel, one translation unit per head dimension.
#pragma once

#include <algorithm>
#include <atomic>

#include "backends/kernels/attn_bwd.cuh"
#include "backends/kernels/attn_bwd_sm90.cuh"
#include "backends/kernels/attn_dq_sm90.cuh"
#include "backends/kernels/attn_fwd.cuh"
#include "backends/kernels/attn_fwd_sm90.cuh"
#include "backends/kernels/attn_launch.hpp"
#include "harness/device/check.hpp"

namespace attnbench::kernels {
namespace detail {

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

template <int D, bool Bf16, int kMT, int kBlockN, bool kFlex = false>
void forward_tiles(const AttnParams& p, const WorkItem* items, int n, int pack, cudaStream_t st) {
  constexpr auto kernel = attn_fwd_kernel<D, Bf16, kFwdWarps, kBlockN, kMT, kFlex>;
  constexpr size_t smem = fwd_smem_bytes<D, kFwdWarps, kBlockN, kMT>();
  allow_smem<kernel>(smem);
  const int64_t blocks = static_cast<int64_t>(n) * (p.heads_q / pack);
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), kFwdWarps * 32, smem, st>>>(p, items, pack);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// Wide tiles (two m-tiles per warp) without packing, 16-row warps with it.
template <int D, bool Bf16>
void forward(const AttnParams& p, const WorkItem* items, int n, int pack, cudaStream_t st) {
  static_assert(16 * 2 * kFwdWarps == kFwdBlockMWide && 16 * kFwdWarps == kFwdBlockM, "tile rows");
  if (pack == 1)
    forward_tiles<D, Bf16, 2, fwd_block_n(kFwdBlockMWide)>(p, items, n, pack, st);
  else
    forward_tiles<D, Bf16, 1, fwd_block_n(kFwdBlockM)>(p, items, n, pack, st);
}

/// The Hopper forward (attn_fwd_sm90.cuh): two consumer warpgroups x 128 keys on
/// dense tiles, one x 64 keys on GQA-packed 64-row tiles; plus a producer warp.
template <int D, bool Bf16, int kWG, int kBlockN, bool kFlex = false>
void forward_sm90_tiles(const AttnParams& p, const WorkItem* items, int n, int pack, const KvTensorMaps& maps,
                        cudaStream_t st) {
  constexpr auto kernel = attn_fwd_sm90_kernel<D, Bf16, kWG, kBlockN, kFlex>;
  constexpr size_t smem = fwd_sm90_smem_bytes<D, kWG, kBlockN>();
  allow_smem<kernel>(smem);
  const int64_t blocks = static_cast<int64_t>(n) * (p.heads_q / pack);
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), fwd_sm90_threads<kWG>(), smem, st>>>(p, items, pack, maps);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// `rows` per CTA: 128 (pack 1: two warpgroups x 128-key steps) or 64 (GQA-packed,
/// or short walks without packing: one warpgroup x 64-key steps, two CTAs per SM).
template <int D, bool Bf16>
void forward_sm90(const AttnParams& p, const WorkItem* items, int n, int pack, const KvTensorMaps& maps,
                  cudaStream_t st, int rows) {
  static_assert(128 == kFwdBlockMWide && 64 == kFwdBlockM, "tile rows: 64 per warpgroup");
  if (rows == kFwdBlockMWide)
    forward_sm90_tiles<D, Bf16, 2, fwd_block_n(kFwdBlockMWide, FwdPath::sm90)>(p, items, n, pack, maps, st);
  else
    forward_sm90_tiles<D, Bf16, 1, fwd_block_n(kFwdBlockM, FwdPath::sm90)>(p, items, n, pack, maps, st);
}

/// Dsum = rowsum(dO * O) over the q_numel / (Hq * D) rows of the Q-shaped buffers.
template <int D, bool Bf16>
void dsum(const AttnParams& p, int64_t q_numel, cudaStream_t st) {
  const int64_t rows = q_numel / (static_cast<int64_t>(p.heads_q) * D);
  if (rows == 0) return;
  constexpr int kThreads = 256, kRowsPerBlock = kThreads / (D / 8);
  const dim3 grid(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(p.heads_q));
  attn_bwd_dsum_kernel<D, Bf16><<<grid, kThreads, 0, st>>>(p, rows);
  ATTNBENCH_CHECK(cudaGetLastError());
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

/// The Hopper dK/dV kernel (attn_bwd_sm90.cuh) over key tiles of
/// kBwdSm90BlockN, after Dsum (kFlex: the BlockMask form, after dBias was
/// cleared). kDq: with dQ by atomics (the accumulator zeroed first, converted
/// after); without, dQ is left to dq_sm90.
template <int D, bool Bf16, bool kFlex = false, bool kDq = true>
void dkdv_sm90(const AttnParams& p, const WorkItem* k_items, int n_k, int64_t q_numel, const BwdTensorMaps& maps,
               cudaStream_t st) {
  if (kDq && q_numel > 0)
    ATTNBENCH_CHECK(cudaMemsetAsync(p.dq_accum, 0, static_cast<size_t>(q_numel) * sizeof(float), st));
  constexpr auto kernel = attn_bwd_sm90_kernel<D, Bf16, kFlex, kDq>;
  constexpr size_t smem = bwd_sm90_smem_bytes<D>();
  allow_smem<kernel>(smem);
  const int64_t blocks = static_cast<int64_t>(n_k) * p.heads_kv;
  if (blocks > 0) {
    kernel<<<static_cast<unsigned>(blocks), kBwdSm90Threads, smem, st>>>(p, k_items, maps);
    ATTNBENCH_CHECK(cudaGetLastError());
  }
  if constexpr (kDq) dq_convert<Bf16>(p, q_numel, st);
}

/// The deterministic Hopper dQ kernel (attn_dq_sm90.cuh) over the plan's dq_items
/// (kDqBlockM / pack positions of `pack` heads each).
template <int D, bool Bf16, bool kFlex = false>
void dq_sm90(const AttnParams& p, const WorkItem* q_items, int n_q, int pack, const KvTensorMaps& maps,
             cudaStream_t st) {
  constexpr auto kernel = attn_dq_sm90_kernel<D, Bf16, kFlex>;
  constexpr size_t smem = dq_sm90_smem_bytes<D>();
  allow_smem<kernel>(smem);
  const int64_t blocks = static_cast<int64_t>(n_q) * (p.heads_q / pack);
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), kDqSm90Threads, smem, st>>>(p, q_items, pack, maps);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// The Hopper backward after Dsum: dK / dV with dQ by atomics, or (deterministic)
/// dK / dV alone and then the deterministic Hopper dQ kernel.
template <int D, bool Bf16, bool kFlex = false>
void backward_sm90(const AttnParams& p, const WorkItem* q_items, int n_q, const WorkItem* k_items, int n_k, int pack,
                   bool deterministic, int64_t q_numel, const BwdTensorMaps& maps, cudaStream_t st) {
  if (!deterministic) return dkdv_sm90<D, Bf16, kFlex, true>(p, k_items, n_k, q_numel, maps, st);
  dkdv_sm90<D, Bf16, kFlex, false>(p, k_items, n_k, q_numel, maps, st);
  dq_sm90<D, Bf16, kFlex>(p, q_items, n_q, pack, maps.dq_kv, st);
}

/// Dsum, then dK/dV and dQ: the Hopper kernel with `maps`, else the portable
/// dK/dV kernel with atomic dQ or with the deterministic dQ kernel.
template <int D, bool Bf16>
void backward(const AttnParams& p, const WorkItem* q_items, int n_q, const WorkItem* k_items, int n_k, int pack,
              bool deterministic, int64_t q_numel, const BwdTensorMaps* maps, cudaStream_t st) {
  dsum<D, Bf16>(p, q_numel, st);
  if (maps) return backward_sm90<D, Bf16>(p, q_items, n_q, k_items, n_k, pack, deterministic, q_numel, *maps, st);
  constexpr int kWarps = kBwdBlockN / 16;
  const unsigned k_blocks = static_cast<unsigned>(static_cast<int64_t>(n_k) * p.heads_kv);
  if (deterministic) {
    constexpr auto dkdv = attn_bwd_dkdv_kernel<D, Bf16, kWarps, bwd_block_m(D), false>;
    constexpr size_t smem = dkdv_smem_bytes<D, kWarps, bwd_block_m(D), false>();
    allow_smem<dkdv>(smem);
    if (k_blocks > 0) {
      dkdv<<<k_blocks, kWarps * 32, smem, st>>>(p, k_items);
      ATTNBENCH_CHECK(cudaGetLastError());
    }
    constexpr int kDqWarps = kDqBlockM / 16;
    constexpr auto dq = attn_bwd_dq_kernel<D, Bf16, kDqWarps, kDqBlockN>;
    constexpr size_t dq_smem = dq_smem_bytes<D, kDqWarps, kDqBlockN>();
    allow_smem<dq>(dq_smem);
    const int64_t q_blocks = static_cast<int64_t>(n_q) * (p.heads_q / pack);
    if (q_blocks > 0) {
      dq<<<static_cast<unsigned>(q_blocks), kDqWarps * 32, dq_smem, st>>>(p, q_items, pack);
      ATTNBENCH_CHECK(cudaGetLastError());
    }
    return;
  }
  if (q_numel > 0)
    ATTNBENCH_CHECK(cudaMemsetAsync(p.dq_accum, 0, static_cast<size_t>(q_numel) * sizeof(float), st));
  constexpr auto dkdv = attn_bwd_dkdv_kernel<D, Bf16, kWarps, bwd_block_m(D), true>;
  constexpr size_t smem = dkdv_smem_bytes<D, kWarps, bwd_block_m(D), true>();
  allow_smem<dkdv>(smem);
  if (k_blocks > 0) {
    dkdv<<<k_blocks, kWarps * 32, smem, st>>>(p, k_items);
    ATTNBENCH_CHECK(cudaGetLastError());
  }
  dq_convert<Bf16>(p, q_numel, st);
}

/// Flex forward: one CTA per (item of `rows` query rows, head); 128-row items on
/// the wide tile, 64-row items (blocks of 64, or halves of 128-row blocks on the
/// Hopper kernel) on the one-warpgroup / 16-row-per-warp tile.
template <int D, bool Bf16>
void flex_forward(const AttnParams& p, const WorkItem* items, int n, cudaStream_t st, const KvTensorMaps* maps,
                  int rows) {
  if (maps) {  // the Hopper kernel, 64-key steps of the BlockMask's blocks
    if (rows == kFwdBlockMWide)
      forward_sm90_tiles<D, Bf16, 2, kFwdBlockN, true>(p, items, n, 1, *maps, st);
    else
      forward_sm90_tiles<D, Bf16, 1, kFwdBlockN, true>(p, items, n, 1, *maps, st);
    return;
  }
  if (p.bm.q_block == kFwdBlockMWide)
    forward_tiles<D, Bf16, 2, kFwdBlockN, true>(p, items, n, 1, st);
  else
    forward_tiles<D, Bf16, 1, kFwdBlockN, true>(p, items, n, 1, st);
}

/// The ordered dBias reduction of the flex path's deterministic mode.
inline void flex_dbias_reduce(const AttnParams& p, cudaStream_t st) {
  if (p.dbias_mode != DbiasMode::deterministic || p.bias_size <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((p.bias_size + 255) / 256, 4096));
  if (p.mod == ModKind::rel_bias)
    attn_dbias_rel_reduce_kernel<<<blocks, 256, 0, st>>>(p);
  else
    attn_dbias_offset_reduce_kernel<<<blocks, 256, 0, st>>>(p);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// Flex backward: Dsum, dK/dV (and dBias) per key tile, the deterministic dQ
/// kernel, then the ordered dBias reduction in deterministic mode. With `maps`
/// the Hopper kernels (128-key tiles) replace dK/dV and dQ: backward_sm90, dQ by
/// atomics unless `deterministic_dq`.
template <int D, bool Bf16>
void flex_backward(const AttnParams& p, const WorkItem* q_items, int n_q, const WorkItem* k_items, int n_k,
                   int64_t q_numel, int64_t scratch_floats, cudaStream_t st, const BwdTensorMaps* maps,
                   bool deterministic_dq) {
  dsum<D, Bf16>(p, q_numel, st);
  if (p.dbias_mode == DbiasMode::atomic)
    ATTNBENCH_CHECK(cudaMemsetAsync(p.dbias, 0, static_cast<size_t>(p.bias_size) * sizeof(float), st));
  if (p.dbias_mode == DbiasMode::deterministic && scratch_floats > 0)
    ATTNBENCH_CHECK(cudaMemsetAsync(p.dbias_scratch, 0, static_cast<size_t>(scratch_floats) * sizeof(float), st));
  if (maps) {
    backward_sm90<D, Bf16, true>(p, q_items, n_q, k_items, n_k, 1, deterministic_dq, q_numel, *maps, st);
    flex_dbias_reduce(p, st);
    return;
  }
  constexpr int kWarps = kBwdBlockN / 16;
  constexpr auto dkdv = attn_bwd_dkdv_kernel<D, Bf16, kWarps, bwd_block_m(D), false, true>;
  const size_t rel = p.dbias_mode != DbiasMode::none && p.mod == ModKind::rel_bias
                         ? static_cast<size_t>(rel_bias_smem_floats<kBwdBlockN, bwd_block_m(D), kWarps>(
                               p.max_distance)) * sizeof(float)
                         : 0;
  const size_t smem = dkdv_smem_bytes<D, kWarps, bwd_block_m(D), false>() + rel;
  allow_smem<dkdv>(smem);
  const unsigned k_blocks = static_cast<unsigned>(static_cast<int64_t>(n_k) * p.heads_kv);
  if (k_blocks > 0) {
    dkdv<<<k_blocks, kWarps * 32, smem, st>>>(p, k_items);
    ATTNBENCH_CHECK(cudaGetLastError());
  }
  constexpr int kDqWarps = kDqBlockM / 16;
  constexpr auto dq = attn_bwd_dq_kernel<D, Bf16, kDqWarps, kDqBlockN, true>;
  constexpr size_t dq_smem = dq_smem_bytes<D, kDqWarps, kDqBlockN>();
  allow_smem<dq>(dq_smem);
  const int64_t q_blocks = static_cast<int64_t>(n_q) * p.heads_q;
  if (q_blocks > 0) {
    dq<<<static_cast<unsigned>(q_blocks), kDqWarps * 32, dq_smem, st>>>(p, q_items, 1);
    ATTNBENCH_CHECK(cudaGetLastError());
  }
  flex_dbias_reduce(p, st);
}

}  // namespace detail

template <int D>
void launch_forward_hdim(const AttnParams& p, const WorkItem* q_items, int n_q_items, int pack, cudaStream_t stream,
                         FwdPath path, const KvTensorMaps* maps, int rows) {
  if (path == FwdPath::sm90) {
    if (p.dtype == ElemType::bf16)
      detail::forward_sm90<D, true>(p, q_items, n_q_items, pack, *maps, stream, rows);
    else
      detail::forward_sm90<D, false>(p, q_items, n_q_items, pack, *maps, stream, rows);
    return;
  }
  if (p.dtype == ElemType::bf16)
    detail::forward<D, true>(p, q_items, n_q_items, pack, stream);
  else
    detail::forward<D, false>(p, q_items, n_q_items, pack, stream);
}

template <int D>
void launch_backward_hdim(const AttnParams& p, const WorkItem* q_items, int n_q_items, const WorkItem* k_items,
                          int n_k_items, int pack, bool deterministic, int64_t q_numel, cudaStream_t stream,
                          const BwdTensorMaps* maps) {
  if (p.dtype == ElemType::bf16)
    detail::backward<D, true>(p, q_items, n_q_items, k_items, n_k_items, pack, deterministic, q_numel, maps, stream);
  else
    detail::backward<D, false>(p, q_items, n_q_items, k_items, n_k_items, pack, deterministic, q_numel, maps, stream);
}

}  // namespace attnbench::kernels

namespace attnbench::kernels {

template <int D>
void launch_flex_forward_hdim(const AttnParams& p, const WorkItem* q_items, int n_q_items, cudaStream_t stream,
                              const KvTensorMaps* maps, int rows) {
  if (p.dtype == ElemType::bf16)
    detail::flex_forward<D, true>(p, q_items, n_q_items, stream, maps, rows);
  else
    detail::flex_forward<D, false>(p, q_items, n_q_items, stream, maps, rows);
}

template <int D>
void launch_flex_backward_hdim(const AttnParams& p, const WorkItem* dq_items, int n_dq_items, const WorkItem* k_items,
                               int n_k_items, int64_t q_numel, int64_t scratch_floats, cudaStream_t stream,
                               const BwdTensorMaps* maps, bool deterministic_dq) {
  if (p.dtype == ElemType::bf16)
    detail::flex_backward<D, true>(p, dq_items, n_dq_items, k_items, n_k_items, q_numel, scratch_floats, stream, maps,
                                   deterministic_dq);
  else
    detail::flex_backward<D, false>(p, dq_items, n_dq_items, k_items, n_k_items, q_numel, scratch_floats, stream,
                                    maps, deterministic_dq);
}

}  // namespace attnbench::kernels
