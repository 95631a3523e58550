// Runners of the portable path (mma.sync m16n8k16, ldmatrix, cp.async; sm_80
// and up): the forward (attn_fwd.cuh) and the backward (attn_bwd.cuh: dK/dV
// with atomic or deterministic dQ), dense and flex. Included once per
// generated instance file (cmake/attn_instances.cmake).
#pragma once

#include "backends/kernels/attn_bwd.cuh"
#include "backends/kernels/attn_fwd.cuh"
#include "backends/kernels/launch_common.cuh"

namespace attnbench::kernels {
namespace detail {

template <int D, bool Bf16, int kMT, int kBlockN, bool kFlex = false>
void forward_tiles(const AttnParams& p, const WorkItem* items, int n, int pack, cudaStream_t st) {
  constexpr auto kernel = attn_fwd_kernel<D, Bf16, kFwdWarps, kBlockN, kMT, kFlex>;
  constexpr size_t smem = fwd_smem_bytes<D, kFwdWarps, kBlockN, kMT>();
  allow_smem<kernel>(smem);
  const int64_t blocks = TileScheduler::ctas(n, p.heads_q / pack);
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), kFwdWarps * 32, smem, st>>>(p, items, pack);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// dK/dV over key tiles of kBwdBlockN (kDq: dQ added by atomics; kFlex: the
/// BlockMask walk with dBias, whose rel_bias row adds shared memory); above head
/// dim 128 the columns are split over two CTAs per key tile (grid.y,
/// attn_bwd_dkdv_kernel's kSplit).
template <int D, bool Bf16, bool kDq, bool kFlex>
void dkdv_sm80(const AttnParams& p, const WorkItem* k_items, int n_k, cudaStream_t st) {
  constexpr int kWarps = kBwdBlockN / 16;
  constexpr int kSplit = D > 128 ? 2 : 1;
  constexpr auto kernel = attn_bwd_dkdv_kernel<D, Bf16, kWarps, bwd_block_m(D), kDq, kFlex, kSplit>;
  size_t rel = 0;
  if constexpr (kFlex)
    if (p.dbias_mode != DbiasMode::none && p.mod == ModKind::rel_bias)
      rel = static_cast<size_t>(rel_bias_smem_floats<kBwdBlockN, bwd_block_m(D), kWarps>(p.max_distance)) *
            sizeof(float);
  const size_t smem = dkdv_smem_bytes<D, kWarps, bwd_block_m(D), kDq>() + rel;
  allow_smem<kernel>(smem);
  const unsigned blocks = static_cast<unsigned>(TileScheduler::ctas(n_k, p.heads_kv));
  if (blocks == 0) return;
  kernel<<<dim3(blocks, kSplit), kWarps * 32, smem, st>>>(p, k_items);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// The deterministic dQ kernel over query tiles of kDqBlockM / pack positions.
template <int D, bool Bf16, bool kFlex>
void dq_sm80(const AttnParams& p, const WorkItem* q_items, int n_q, int pack, cudaStream_t st) {
  constexpr int kDqWarps = kDqBlockM / 16;
  constexpr auto kernel = attn_bwd_dq_kernel<D, Bf16, kDqWarps, kDqBlockN, kFlex>;
  constexpr size_t smem = dq_smem_bytes<D, kDqWarps, kDqBlockN>();
  allow_smem<kernel>(smem);
  const int64_t blocks = TileScheduler::ctas(n_q, p.heads_q / pack);
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), kDqWarps * 32, smem, st>>>(p, q_items, pack);
  ATTNBENCH_CHECK(cudaGetLastError());
}

}  // namespace detail

/// Forward: wide tiles (two m-tiles per warp, 128 rows) or 16-row warps (64
/// rows: GQA-packed, head dims above 128, or asked for), as the plan's rows say
/// (fwd_rows_resolved); flex: one CTA per query block or per 64-row half. Head
/// dims above 128 have no wide tile (its O and S would need 2 x 160 registers
/// per thread at D 256: can_implement refuses it).
template <int D, bool Bf16>
void run_forward_sm80(const AttnParams& p, const LaunchArgs& a) {
  static_assert(16 * 2 * kFwdWarps == kFwdBlockMWide && 16 * kFwdWarps == kFwdBlockM, "tile rows");
  using namespace detail;
  const int rows = fwd_rows_resolved(p, a.shape);
  if constexpr (D <= max_wide_fwd_head_dim(FwdPath::sm80)) {
    if (rows == kFwdBlockMWide) {
      if (a.shape.flex)
        forward_tiles<D, Bf16, 2, kFwdBlockN, true>(p, a.q_items, a.n_q_items, 1, a.stream);
      else
        forward_tiles<D, Bf16, 2, fwd_block_n(kFwdBlockMWide)>(p, a.q_items, a.n_q_items, 1, a.stream);
      return;
    }
  }
  if (a.shape.flex)
    forward_tiles<D, Bf16, 1, kFwdBlockN, true>(p, a.q_items, a.n_q_items, 1, a.stream);
  else
    forward_tiles<D, Bf16, 1, fwd_block_n(kFwdBlockM)>(p, a.q_items, a.n_q_items, a.shape.pack, a.stream);
}

/// Backward: Dsum, then dK/dV with dQ by atomics (zeroed accumulator, converted
/// after) or, deterministic, dK/dV and the dQ kernel. Flex: dK/dV with dBias and
/// the deterministic dQ kernel always, dBias cleared before and reduced after.
template <int D, bool Bf16>
void run_backward_sm80(const AttnParams& p, const LaunchArgs& a) {
  using namespace detail;
  cudaStream_t st = a.stream;
  dsum<D, Bf16>(p, a.q_numel, st);
  if (a.shape.flex) {
    flex_dbias_clear(p, a.scratch_floats, st);
    dkdv_sm80<D, Bf16, false, true>(p, a.k_items, a.n_k_items, st);
    dq_sm80<D, Bf16, true>(p, a.dq_items, a.n_dq_items, 1, st);
    flex_dbias_reduce(p, st);
    return;
  }
  if (a.shape.deterministic) {
    dkdv_sm80<D, Bf16, false, false>(p, a.k_items, a.n_k_items, st);
    dq_sm80<D, Bf16, false>(p, a.dq_items, a.n_dq_items, a.shape.pack, st);
    return;
  }
  dq_accum_zero(p, a.q_numel, st);
  dkdv_sm80<D, Bf16, true, false>(p, a.k_items, a.n_k_items, st);
  dq_convert<Bf16>(p, a.q_numel, st);
}

}  // namespace attnbench::kernels
