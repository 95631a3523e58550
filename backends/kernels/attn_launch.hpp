// Host entry points of the fused attention kernel family (the `flash`, `varlen`
// and `flex` backends call these): one LaunchArgs per direction, one launch(),
// which asks can_implement() and dispatches to the instance of (direction,
// path, head_dim, dtype) in the generated table (cmake/attn_instances.cmake;
// the launch code of each path is launch_sm80.cuh / launch_sm90.cuh). Every
// launch is checked (ATTNBENCH_CHECK): a failure throws
// attnbench::device::DeviceError naming the call.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only: the encoder comes from the driver at run time)
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backends/kernels/attn_params.hpp"
#include "backends/kernels/can_implement.hpp"

namespace attnbench::kernels {

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

/// TMA descriptors of the Hopper forward (attn_fwd_sm90.cuh): K and V as
/// KvTensorMaps, and Q over heads_q with boxes of rows / pack positions x pack
/// heads, which land in the CTA's Q tile head-major (row h * rows / pack + t:
/// the GQA-packed row order of QueryTile).
struct FwdTensorMaps {
  KvTensorMaps kv;
  CUtensorMap q;
};

/// Encode the forward's maps: q_rows / k_rows positions per (batch, head)
/// (seq_q / seq_k padded, all tokens in THD), `batch` as make_kv_tensor_maps,
/// key_box = the forward's key step, rows = fwd_rows_resolved() query rows per
/// CTA of `pack` heads. Throws DeviceError like make_kv_tensor_maps.
FwdTensorMaps make_fwd_tensor_maps(const AttnParams& p, int64_t q_rows, int64_t k_rows, int64_t batch, int key_box,
                                   int rows, int pack);

/// TMA descriptors of the deterministic Hopper dQ kernel (attn_dq_sm90.cuh): K
/// and V with its 64-row key boxes, Q and dO (O's strides) with boxes of 64 /
/// pack positions x pack heads, landing head-major as FwdTensorMaps::q.
struct DqTensorMaps {
  KvTensorMaps kv;
  CUtensorMap q, dout;
};

/// TMA descriptors of the Hopper backward (attn_bwd_sm90.cuh): K and V with
/// kBwdSm90 key-tile boxes (128 rows), Q and dO (O's strides) with 64-row boxes;
/// same tensor form as KvTensorMaps (Q and dO over heads_q). dq: the
/// deterministic Hopper dQ kernel's maps. dq_accum (encoded where p.dq_accum is
/// set): the float32 dQ accumulator (Q's strides) as a 5-D tensor (32 columns,
/// head_dim / 32 column groups, rows, heads_q, batch) with boxes of 32 x 2 x 16
/// rows (a warp's m16 x 64-column dQ fragment) and the 128-byte swizzle, the
/// target of the dK/dV kernel's TMA reduce-adds.
struct BwdTensorMaps {
  CUtensorMap q, k, v, dout;
  DqTensorMaps dq;
  CUtensorMap dq_accum;
};

/// Encode the backward's maps: q_rows / k_rows positions per (batch, head)
/// (seq_q / seq_k padded, all tokens in THD), `batch` as make_kv_tensor_maps,
/// dq_pack the dQ kernel's GQA pack (TilePlan::pack). Throws DeviceError like
/// make_kv_tensor_maps.
BwdTensorMaps make_bwd_tensor_maps(const AttnParams& p, int64_t q_rows, int64_t k_rows, int64_t batch, int dq_pack);

/// Whether the Hopper kernels can run on the current device: this build has
/// sm_90a instances (compiled_instances() with path 1: CMAKE_CUDA_ARCHITECTURES
/// with 90a) and the device has compute capability 9.0. `why` (if given) says
/// what is missing. Throws DeviceError when the device query fails.
bool fwd_sm90_usable(std::string* why = nullptr);

/// Everything one launch of the family needs besides AttnParams (FlashAttention
/// fills one params struct per call, `set_params_fprop`; this is ours): the
/// shape that can_implement() decides on, the plan's work lists, the scratch
/// sizes, the Hopper kernels' tensor maps and the stream. Filled once per
/// prepared problem (backends/fused/fused_instance.cpp), read by launch().
struct LaunchArgs {
  LaunchShape shape;
  /// Forward: query tiles of fwd_rows_resolved() / pack positions (TilePlan::q_items;
  /// flex: one item per query block, or per 64-row half).
  const WorkItem* q_items = nullptr;
  int n_q_items = 0;
  /// Backward: deterministic-dQ query tiles of kDqBlockM / pack positions (TilePlan::dq_items).
  const WorkItem* dq_items = nullptr;
  int n_dq_items = 0;
  /// Backward: dK/dV key tiles of bwd_block_n(bwd_path) keys (TilePlan::k_items).
  const WorkItem* k_items = nullptr;
  int n_k_items = 0;
  /// Backward: elements of Q (the Dsum rows and the float32 dQ accumulator p.dq_accum).
  int64_t q_numel = 0;
  /// Flex backward: floats of p.dbias_scratch (deterministic dBias).
  int64_t scratch_floats = 0;
  /// Hopper forward (fwd_path sm90): make_fwd_tensor_maps, K / V boxes of the
  /// forward's key step (fwd_block_n(rows, sm90, head_dim); flex: kFwdBlockN), Q
  /// boxes of the CTA's rows.
  const FwdTensorMaps* fwd_maps = nullptr;
  /// Hopper backward (bwd_path sm90): make_bwd_tensor_maps.
  const BwdTensorMaps* bwd_maps = nullptr;
  /// The Hopper forward and the Hopper dQ kernel: two ints of device memory,
  /// zero before the first launch, from which their CTAs claim tiles
  /// (TileScheduler::claim; every launch leaves them zero). One pair per
  /// LaunchArgs: two launches that share a pair must not run at once.
  int* tile_counters = nullptr;
  cudaStream_t stream = nullptr;
};

/// Run one forward (O, LSE) or backward (Dsum, dK, dV, dQ and, on the flex path
/// per p.dbias_mode, dBias) of the family, asynchronously on args.stream.
/// Forward: the portable kernel (attn_fwd.cuh) or the Hopper one
/// (attn_fwd_sm90.cuh) over args.q_items. Backward: Dsum, then dK/dV over
/// args.k_items with dQ added into p.dq_accum (float32 atomics, on the Hopper path
/// TMA reduce-adds through BwdTensorMaps::dq_accum; converted after) or,
/// deterministic, the dQ kernel over args.dq_items; flex adds the dBias
/// reduction. Throws std::invalid_argument naming the reason when
/// can_implement(p, args.shape) refuses or an argument the shape needs is
/// missing (tensor maps of a Hopper path, the dQ accumulator of atomic dQ, the
/// BlockMask arrays or bias of the flex path); DeviceError when a launch fails.
void launch(const AttnParams& p, const LaunchArgs& args);

}  // namespace attnbench::kernels
