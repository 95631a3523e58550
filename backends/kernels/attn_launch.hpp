// Host entry points of the fused attention kernel family (the `flash` and
// `varlen` backends call these; the kernels are in attn_fwd.cuh / attn_bwd.cuh).
// Every launch is checked (ATTNBENCH_CHECK): a failure throws
// attnbench::device::DeviceError naming the call.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only: the encoder comes from the driver at run time)
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/kernels/attn_params.hpp"

namespace attnbench::kernels {

/// Most sequences one launch takes (the Dsum kernel's grid.z).
constexpr int kMaxSequences = 65535;

/// Head dimensions with kernels (Dqk = Dv).
inline bool head_dim_supported(int d) { return d == 64 || d == 128; }

/// TMA descriptors (PTX "tensor map") of K and V for the Hopper forward: 4-D
/// tensors (head_dim, rows, heads_kv, batch) of 16-bit elements with AttnParams'
/// strides, boxes of 64 elements x box_rows with the 128-byte swizzle (one
/// Sw128Tile chunk per copy), rows past the tensor zero-filled.
struct KvTensorMaps {
  CUtensorMap k;
  CUtensorMap v;
};

/// Encode the maps of p.k and p.v: `rows` positions per (batch, head) (seq_k in
/// the padded layouts, all K tokens in THD), `batch` rows of the batch dimension
/// (1 in THD, where k_batch_stride is 0), box_rows = the forward's key tile
/// (fwd_block_n). The encoder (cuTensorMapEncodeTiled) is taken from the driver
/// through cudaGetDriverEntryPointByVersion. Throws DeviceError when it is
/// missing or rejects the tensor (the message names the tensor and its shape).
KvTensorMaps make_kv_tensor_maps(const AttnParams& p, int64_t rows, int64_t batch, int box_rows);

/// TMA descriptors of the Hopper backward (attn_bwd_sm90.cuh): K and V with
/// kBwdSm90 key-tile boxes (128 rows), Q and dO (O's strides) with 64-row boxes;
/// same tensor form as KvTensorMaps (Q and dO over heads_q). dq_kv: K and V with
/// the deterministic Hopper dQ kernel's 64-row boxes (attn_dq_sm90.cuh).
struct BwdTensorMaps {
  CUtensorMap q, k, v, dout;
  KvTensorMaps dq_kv;
};

/// Encode the backward's maps: q_rows / k_rows positions per (batch, head)
/// (seq_q / seq_k padded, all tokens in THD), `batch` as make_kv_tensor_maps.
/// Throws DeviceError like make_kv_tensor_maps.
BwdTensorMaps make_bwd_tensor_maps(const AttnParams& p, int64_t q_rows, int64_t k_rows, int64_t batch);

/// Forward: O and LSE. `q_items` (device, n_q_items entries, TilePlan::q_items) lists
/// query tiles of `rows` / pack positions; `pack` query heads of one KV head share a
/// CTA (1, 2 or 4, dividing p.group); `rows` query rows per CTA (TilePlan::tile_rows *
/// pack; 0 = fwd_block_m(pack); 64 with pack 1 on the Hopper kernel only:
/// fwd_cta_rows). `path` picks the kernel (FwdPath::sm90 only where fwd_sm90_usable();
/// its key steps are fwd_block_n(rows, path), which the plan of q_items must have
/// used; FwdPath::sm90 needs `maps`, from make_kv_tensor_maps with that key tile).
/// Asynchronous on `stream`. Throws std::invalid_argument for a bad pack or rows, a
/// head_dim without kernels or more than kMaxSequences sequences, DeviceError when
/// a launch fails.
void launch_forward(const AttnParams& p, const WorkItem* q_items, int n_q_items, int pack, cudaStream_t stream,
                    FwdPath path = FwdPath::sm80, const KvTensorMaps* maps = nullptr, int rows = 0);

/// Whether the Hopper forward can run on the current device: this build has
/// sm_90a code (CMAKE_CUDA_ARCHITECTURES with 90a) and the device has compute
/// capability 9.0. `why` (if given) says what is missing. Throws DeviceError when
/// the device query fails.
bool fwd_sm90_usable(std::string* why = nullptr);

/// Backward: dQ, dK, dV from O, LSE, dO. `k_items` lists key tiles of
/// bwd_block_n(path) positions (the plan's bwd_tile_keys); `q_items` lists query tiles of kDqBlockM / pack positions for the
/// deterministic dQ kernel (TilePlan::dq_items). `deterministic` = false accumulates dQ with float32 atomics into
/// p.dq_accum (q_numel floats, Q's strides) and converts; true runs the
/// deterministic dQ kernel (bitwise reproducible). Asynchronous on `stream`.
/// `path` BwdPath::sm90 (where fwd_sm90_usable()) runs the Hopper kernels and
/// needs `maps` (make_bwd_tensor_maps): dK/dV with atomic dQ, or, deterministic,
/// dK/dV alone and the Hopper dQ kernel over `q_items`; throws
/// std::invalid_argument when the maps are missing.
void launch_backward(const AttnParams& p, const WorkItem* q_items, int n_q_items, const WorkItem* k_items,
                     int n_k_items, int pack, bool deterministic, int64_t q_numel, cudaStream_t stream,
                     BwdPath path = BwdPath::sm80, const BwdTensorMaps* maps = nullptr);

/// Flex forward: O and LSE under the BlockMask p.bm (q_block 64 or 128, kv_block
/// 64 or 128): `q_items` lists one item per query block (start = qb * q_block).
/// Throws std::invalid_argument for block sizes other than 64 / 128, a missing
/// BlockMask or a head_dim without kernels; DeviceError when a launch fails.
/// `maps` (from make_kv_tensor_maps with box_rows kFwdBlockN) selects the Hopper
/// kernel (only where fwd_sm90_usable()); nullptr the portable one. `rows`: query
/// rows per item and CTA (0 = q_block; 64 with q_block 128 on the Hopper kernel
/// only: the items are the blocks' 64-row halves, TilePlan::tile_rows);
/// std::invalid_argument otherwise.
void launch_flex_forward(const AttnParams& p, const WorkItem* q_items, int n_q_items, cudaStream_t stream,
                         const KvTensorMaps* maps = nullptr, int rows = 0);

/// Flex backward: dQ, dK, dV and, per p.dbias_mode, dBias of p.bias. `dq_items`
/// lists query tiles of kDqBlockM rows, `k_items` key tiles of kBwdBlockN keys;
/// `q_numel` elements of Q (Dsum rows), `scratch_floats` the size of
/// p.dbias_scratch (deterministic mode). Throws like launch_flex_forward, and
/// for a rel_bias max_distance above kMaxRelBiasDistance. `maps` (from
/// make_bwd_tensor_maps; only where fwd_sm90_usable()) selects the Hopper
/// kernels: k_items of bwd_block_n(BwdPath::sm90) keys, kv_block 128, no
/// rel_bias dBias (std::invalid_argument otherwise); dQ by the deterministic
/// Hopper dQ kernel when `deterministic_dq`, else by float32 atomics into
/// p.dq_accum (q_numel floats; std::invalid_argument when it is not set).
void launch_flex_backward(const AttnParams& p, const WorkItem* dq_items, int n_dq_items, const WorkItem* k_items,
                          int n_k_items, int64_t q_numel, int64_t scratch_floats, cudaStream_t stream,
                          const BwdTensorMaps* maps = nullptr, bool deterministic_dq = true);

/// Per-head-dimension implementations (attn_launch_impl.cuh, one file each).
template <int D>
void launch_forward_hdim(const AttnParams& p, const WorkItem* q_items, int n_q_items, int pack, cudaStream_t stream,
                         FwdPath path, const KvTensorMaps* maps, int rows);
template <int D>
void launch_backward_hdim(const AttnParams& p, const WorkItem* q_items, int n_q_items, const WorkItem* k_items,
                          int n_k_items, int pack, bool deterministic, int64_t q_numel, cudaStream_t stream,
                          const BwdTensorMaps* maps);
template <int D>
void launch_flex_forward_hdim(const AttnParams& p, const WorkItem* q_items, int n_q_items, cudaStream_t stream,
                              const KvTensorMaps* maps, int rows);
template <int D>
void launch_flex_backward_hdim(const AttnParams& p, const WorkItem* dq_items, int n_dq_items, const WorkItem* k_items,
                               int n_k_items, int64_t q_numel, int64_t scratch_floats, cudaStream_t stream,
                               const BwdTensorMaps* maps, bool deterministic_dq);

}  // namespace attnbench::kernels
