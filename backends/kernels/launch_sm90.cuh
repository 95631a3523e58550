// Runners of the Hopper path (wgmma, TMA, producer / consumer warpgroups;
// sm_90a only): the forward (attn_fwd_sm90.cuh) and the backward (Dsum, the
// dK/dV kernel of attn_bwd_sm90.cuh with atomic dQ, or dK/dV and the
// deterministic dQ kernel of attn_dq_sm90.cuh), dense and flex. Included once
// per generated instance file, which is compiled for sm_90a alone
// (cmake/attn_instances.cmake): no stub of these kernels exists for other
// architectures. D is the head dim; the kernels' tiles are sm90::tile_dim(D)
// wide (128 at head dim 96).
#pragma once

#include "backends/kernels/attn_bwd_sm90.cuh"
#include "backends/kernels/attn_dq_sm90.cuh"
#include "backends/kernels/attn_fwd_sm90.cuh"
#include "backends/kernels/launch_common.cuh"

namespace attnbench::kernels {
namespace detail {

/// The Hopper forward: kWG consumer warpgroups (64 rows each) x kBlockN-key
/// steps, plus a producer warp; one CTA per query tile, or (persistent) one per
/// resident slot walking the tiles (TileScheduler). pingpong (kWG = 2): the
/// consumer warpgroups issue their GEMMs in turn (sm90::GemmTurns).
/// next_tile_early (persistent): LaunchShape::next_tile_early.
template <int D, bool Bf16, int kWG, int kBlockN, bool kFlex = false>
void forward_sm90_tiles(const AttnParams& p, const WorkItem* items, int n, int pack, bool persistent, bool pingpong,
                        bool next_tile_early, int* counters, const FwdTensorMaps& maps, cudaStream_t st) {
  constexpr auto kernel = attn_fwd_sm90_kernel<D, Bf16, kWG, kBlockN, kFlex>;
  constexpr size_t smem = fwd_sm90_smem_bytes<sm90::tile_dim(D), kWG, kBlockN, kFlex>();
  static_assert(smem <= kSm90SmemPerCta, "the forward's stages and Q buffers exceed a CTA's shared memory");
  static_assert(kWG == 2 || kFlex || sm90::tile_dim(D) > 128 || smem <= kSm90SmemTwoCtas,
                "the 64-row forward (GQA-packed short documents) must keep two CTAs per SM (fwd_sm90_stages)");
  constexpr int threads = fwd_sm90_threads<kWG>();
  allow_smem<kernel>(smem);
  const int64_t tiles = TileScheduler::ctas(n, p.heads_q / pack);
  if (tiles == 0) return;
  const int64_t blocks = persistent ? std::min(tiles, resident_ctas<kernel>(threads, smem)) : tiles;
  kernel<<<static_cast<unsigned>(blocks), threads, smem, st>>>(p, items, tiles, pack, counters, pingpong,
                                                               persistent && next_tile_early, maps);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// The Hopper dK/dV kernel over key tiles of kBwdSm90BlockN. kDq: with dQ added
/// into the float32 accumulator (TMA reduce-adds from the BwdSm90DqTiles; kRel:
/// float2 atomics), zeroed before and converted after; with
/// kDirect the rows of one key block get their dQ from the kernel itself
/// (dq_direct_block), the Dsum preprocess zeroes the other rows' accumulator
/// and the conversion skips the direct ones. Without kDq, dQ is left to dq_sm90.
/// kRel (flex, rel_bias dBias): the instance with the BwdSm90RelTiles.
template <int D, bool Bf16, bool kFlex, bool kDq, bool kDirect = false, bool kRel = false>
void dkdv_sm90(const AttnParams& p, const WorkItem* k_items, int n_k, int64_t q_numel, const BwdTensorMaps& maps,
               cudaStream_t st) {
  if constexpr (kDq && !kDirect) dq_accum_zero(p, q_numel, st);
  constexpr auto kernel = attn_bwd_sm90_kernel<D, Bf16, kFlex, kDq, kDirect, kRel>;
  constexpr size_t smem = bwd_sm90_smem_bytes<sm90::tile_dim(D)>(kRel, kDq && !kRel);
  allow_smem<kernel>(smem);
  const int64_t blocks = TileScheduler::ctas(n_k, p.heads_kv);
  if (blocks > 0) {
    kernel<<<static_cast<unsigned>(blocks), kBwdSm90Threads, smem, st>>>(p, k_items, maps);
    ATTNBENCH_CHECK(cudaGetLastError());
  }
  if constexpr (kDq && !kDirect) dq_convert<Bf16>(p, q_numel, st);
  if constexpr (kDirect) dq_rows_convert<D, Bf16, bwd_sm90_direct_n<D>()>(p, q_numel, st);
}

/// The deterministic Hopper dQ kernel over query tiles of kDqBlockM / pack
/// positions (`pack` heads each); one CTA per tile, or (persistent) one per
/// resident slot walking the tiles (TileScheduler).
template <int D, bool Bf16, bool kFlex>
void dq_sm90(const AttnParams& p, const WorkItem* q_items, int n_q, int pack, bool persistent, int* counters,
             const DqTensorMaps& maps, cudaStream_t st) {
  constexpr auto kernel = attn_dq_sm90_kernel<D, Bf16, kFlex>;
  constexpr size_t smem = dq_sm90_smem_bytes<sm90::tile_dim(D), kFlex>();
  allow_smem<kernel>(smem);
  const int64_t tiles = TileScheduler::ctas(n_q, p.heads_q / pack);
  if (tiles == 0) return;
  const int64_t blocks = persistent ? std::min(tiles, resident_ctas<kernel>(kDqSm90Threads, smem)) : tiles;
  kernel<<<static_cast<unsigned>(blocks), kDqSm90Threads, smem, st>>>(p, q_items, tiles, pack, counters, maps);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// dK/dV with atomic dQ, or (a.shape.deterministic) dK/dV alone and then the Hopper
/// dQ kernel over query tiles of a.shape.pack heads (1 on the flex path: can_implement).
template <int D, bool Bf16, bool kFlex>
void backward_sm90(const AttnParams& p, const LaunchArgs& a) {
  const BwdTensorMaps& maps = *a.bwd_maps;
  if constexpr (!kFlex) {
    if (a.shape.dq_direct)
      return dkdv_sm90<D, Bf16, false, true, true>(p, a.k_items, a.n_k_items, a.q_numel, maps, a.stream);
  }
  const bool rel = kFlex && p.mod == ModKind::rel_bias && p.dbias_mode != DbiasMode::none;
  if (!a.shape.deterministic) {
    if (rel) return dkdv_sm90<D, Bf16, kFlex, true, false, kFlex>(p, a.k_items, a.n_k_items, a.q_numel, maps, a.stream);
    return dkdv_sm90<D, Bf16, kFlex, true>(p, a.k_items, a.n_k_items, a.q_numel, maps, a.stream);
  }
  if (rel)
    dkdv_sm90<D, Bf16, kFlex, false, false, kFlex>(p, a.k_items, a.n_k_items, a.q_numel, maps, a.stream);
  else
    dkdv_sm90<D, Bf16, kFlex, false>(p, a.k_items, a.n_k_items, a.q_numel, maps, a.stream);
  dq_sm90<D, Bf16, kFlex>(p, a.dq_items, a.n_dq_items, a.shape.pack, a.shape.persistent, a.tile_counters, maps.dq,
                          a.stream);
}

}  // namespace detail

/// Forward: 128-row CTAs (two consumer warpgroups x 128-key steps) or 64-row
/// ones (GQA-packed, or short walks without packing: one warpgroup x 64-key
/// steps, two CTAs per SM); flex: 64-key steps of the BlockMask's blocks, whole
/// 128-row blocks or 64-row CTAs.
template <int D, bool Bf16>
void run_forward_sm90(const AttnParams& p, const LaunchArgs& a) {
  static_assert(128 == kFwdBlockMWide && 64 == kFwdBlockM, "tile rows: 64 per warpgroup");
  using namespace detail;
  const int rows = fwd_rows_resolved(p, a.shape);
  const FwdTensorMaps& maps = *a.fwd_maps;
  const bool persistent = a.shape.persistent, pingpong = a.shape.pingpong, early = a.shape.next_tile_early;
  if (a.shape.flex) {
    if (rows == kFwdBlockMWide)
      forward_sm90_tiles<D, Bf16, 2, kFwdBlockN, true>(p, a.q_items, a.n_q_items, 1, persistent, pingpong, early,
                                                       a.tile_counters, maps, a.stream);
    else
      forward_sm90_tiles<D, Bf16, 1, kFwdBlockN, true>(p, a.q_items, a.n_q_items, 1, persistent, false, early,
                                                       a.tile_counters, maps, a.stream);
    return;
  }
  if (rows == kFwdBlockMWide)
    forward_sm90_tiles<D, Bf16, 2, fwd_block_n(kFwdBlockMWide, FwdPath::sm90, D)>(
        p, a.q_items, a.n_q_items, a.shape.pack, persistent, pingpong, early, a.tile_counters, maps, a.stream);
  else
    forward_sm90_tiles<D, Bf16, 1, fwd_block_n(kFwdBlockM, FwdPath::sm90, D)>(
        p, a.q_items, a.n_q_items, a.shape.pack, persistent, false, early, a.tile_counters, maps, a.stream);
}

/// Backward: Dsum (with direct dQ rows, LaunchShape::dq_direct: and the zeroing
/// of the accumulator's other rows), then backward_sm90 (flex: pack 1, dBias
/// cleared before and reduced after).
template <int D, bool Bf16>
void run_backward_sm90(const AttnParams& p, const LaunchArgs& a) {
  using namespace detail;
  if (a.shape.dq_direct)
    dsum<D, Bf16, bwd_sm90_direct_n<D>()>(p, a.q_numel, a.stream);
  else
    dsum<D, Bf16>(p, a.q_numel, a.stream);
  if (!a.shape.flex) return backward_sm90<D, Bf16, false>(p, a);
  flex_dbias_clear(p, a.scratch_floats, a.stream);
  backward_sm90<D, Bf16, true>(p, a);
  flex_dbias_reduce(p, a.stream);
}

}  // namespace attnbench::kernels
