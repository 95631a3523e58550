// Head-dimension dispatch of the fused attention kernels.
#include <stdexcept>
#include <string>

#include "backends/kernels/attn_launch.hpp"
#include "harness/device/check.hpp"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

namespace attnbench::kernels {

namespace {

/// The kernels map a CTA's rows to (head, position) assuming these; anything
/// else would compute silently wrong rows, so it is refused here.
void check_launch(const AttnParams& p, int pack) {
  if (pack != 1 && pack != 2 && pack != 4)
    throw std::invalid_argument("fused attention: pack " + std::to_string(pack) + " is not 1, 2 or 4");
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0 || p.group != p.heads_q / p.heads_kv || p.group % pack != 0)
    throw std::invalid_argument("fused attention: pack " + std::to_string(pack) + " must divide the GQA group (" +
                                std::to_string(p.heads_q) + " / " + std::to_string(p.heads_kv) + ")");
  if (p.num_seqs > kMaxSequences)
    throw std::invalid_argument("fused attention: " + std::to_string(p.num_seqs) + " sequences exceed " +
                                std::to_string(kMaxSequences) + " (the Dsum launch grid)");
}

void check_flex(const AttnParams& p) {
  check_launch(p, 1);
  const BlockMaskView& bm = p.bm;
  if (!bm.kv_num_blocks || !bm.kv_indices || !bm.full_kv_num_blocks || !bm.full_kv_indices || !bm.q_num_blocks ||
      !bm.q_indices || !bm.full_q_num_blocks || !bm.full_q_indices || bm.batch <= 0)
    throw std::invalid_argument("flex attention: the BlockMask arrays are not set");
  if ((bm.q_block != 64 && bm.q_block != 128) || (bm.kv_block != 64 && bm.kv_block != 128))
    throw std::invalid_argument("flex attention: block sizes " + std::to_string(bm.q_block) + " x " +
                                std::to_string(bm.kv_block) + " not supported (64 or 128 each)");
  if (p.mod == ModKind::rel_bias && (p.max_distance < 0 || p.max_distance > kMaxRelBiasDistance))
    throw std::invalid_argument("flex attention: rel_bias max_distance " + std::to_string(p.max_distance) +
                                " outside [0, " + std::to_string(kMaxRelBiasDistance) + "]");
  if ((p.mod == ModKind::rel_bias || p.mod == ModKind::offset_bias) && !p.bias)
    throw std::invalid_argument("flex attention: learnable bias score mod without a bias tensor");
}

void no_kernel(int head_dim) {
  throw std::invalid_argument("fused attention: no kernel for head_dim " + std::to_string(head_dim));
}

}  // namespace

void launch_flex_forward(const AttnParams& p, const WorkItem* q_items, int n_q_items, cudaStream_t stream,
                         const KvTensorMaps* maps, int rows) {
  check_flex(p);
  if (rows == 0) rows = p.bm.q_block;
  if (rows != p.bm.q_block && !(maps && rows == kFwdBlockM && p.bm.q_block == kFwdBlockMWide))
    throw std::invalid_argument("flex attention: forward CTAs of " + std::to_string(rows) + " rows for query blocks of " +
                                std::to_string(p.bm.q_block) + " (64-row halves run on the Hopper kernel only)");
  if (p.head_dim == 64) return launch_flex_forward_hdim<64>(p, q_items, n_q_items, stream, maps, rows);
  if (p.head_dim == 128) return launch_flex_forward_hdim<128>(p, q_items, n_q_items, stream, maps, rows);
  no_kernel(p.head_dim);
}

void launch_flex_backward(const AttnParams& p, const WorkItem* dq_items, int n_dq_items, const WorkItem* k_items,
                          int n_k_items, int64_t q_numel, int64_t scratch_floats, cudaStream_t stream,
                          const BwdTensorMaps* maps, bool deterministic_dq) {
  check_flex(p);
  if (maps) {
    if (p.bm.kv_block != bwd_block_n(BwdPath::sm90))
      throw std::invalid_argument("flex attention: the Hopper backward needs KV_BLOCK " +
                                  std::to_string(bwd_block_n(BwdPath::sm90)) + " (got " +
                                  std::to_string(p.bm.kv_block) + ")");
    if (p.dbias_mode != DbiasMode::none && p.mod == ModKind::rel_bias)
      throw std::invalid_argument("flex attention: the Hopper backward has no rel_bias dBias");
    if (!deterministic_dq && !p.dq_accum)
      throw std::invalid_argument("flex attention: the Hopper backward's atomic dQ needs the dQ accumulator");
  }
  if (p.head_dim == 64)
    return launch_flex_backward_hdim<64>(p, dq_items, n_dq_items, k_items, n_k_items, q_numel, scratch_floats, stream,
                                         maps, deterministic_dq);
  if (p.head_dim == 128)
    return launch_flex_backward_hdim<128>(p, dq_items, n_dq_items, k_items, n_k_items, q_numel, scratch_floats,
                                          stream, maps, deterministic_dq);
  no_kernel(p.head_dim);
}

bool fwd_sm90_usable(std::string* why) {
#if defined(ATTNBENCH_BUILT_SM90A)
  int dev = 0, major = 0, minor = 0;
  ATTNBENCH_CHECK(cudaGetDevice(&dev));
  ATTNBENCH_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  ATTNBENCH_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major == 9 && minor == 0) return true;
  if (why)
    *why = "the Hopper forward needs compute capability 9.0 (wgmma, sm_90a code); the device has " +
           std::to_string(major) + "." + std::to_string(minor);
  return false;
#else
  if (why) *why = "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a)";
  return false;
#endif
}

namespace {

/// cuTensorMapEncodeTiled from the driver (once per process).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  using Encode = PFN_cuTensorMapEncodeTiled_v12000;
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    ATTNBENCH_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || !fn)
      throw device::DeviceError("the driver has no cuTensorMapEncodeTiled (TMA descriptors need CUDA 12 drivers)");
    return reinterpret_cast<Encode>(fn);
  }();
  return encode;
}

/// One 4-D map (head_dim, rows, heads, batch) of a 16-bit tensor at `base` with
/// AttnParams-style element strides (batch_stride 0: one batch row), boxes of
/// 64 x box_rows, 128-byte swizzle, rows past the tensor zero-filled.
CUtensorMap encode_map(const AttnParams& p, const char* name, const void* base, int64_t rows, int64_t heads,
                       int64_t batch, int64_t batch_stride, int64_t row_stride, int64_t head_stride, int box_rows) {
  CUtensorMap m{};
  const cuuint64_t e = 2;  // bytes per element
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(p.head_dim), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row_stride) * e, static_cast<cuuint64_t>(head_stride) * e,
                                 batch_stride > 0 ? static_cast<cuuint64_t>(batch_stride) * e
                                                  : static_cast<cuuint64_t>(rows * row_stride) * e};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUresult r = tensor_map_encoder()(
      &m, p.dtype == ElemType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      const_cast<void*>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw device::DeviceError(std::string("cuTensorMapEncodeTiled rejected ") + name + " [" + std::to_string(batch) +
                              ", " + std::to_string(heads) + ", " + std::to_string(rows) + ", " +
                              std::to_string(p.head_dim) + "] (CUresult " + std::to_string(static_cast<int>(r)) + ")");
  return m;
}

}  // namespace

KvTensorMaps make_kv_tensor_maps(const AttnParams& p, int64_t rows, int64_t batch, int box_rows) {
  KvTensorMaps maps;
  maps.k = encode_map(p, "K", p.k, rows, p.heads_kv, batch, p.k_batch_stride, p.k_row_stride, p.k_head_stride,
                      box_rows);
  maps.v = encode_map(p, "V", p.v, rows, p.heads_kv, batch, p.v_batch_stride, p.v_row_stride, p.v_head_stride,
                      box_rows);
  return maps;
}

BwdTensorMaps make_bwd_tensor_maps(const AttnParams& p, int64_t q_rows, int64_t k_rows, int64_t batch) {
  BwdTensorMaps maps;
  constexpr int kKeyBox = bwd_block_n(BwdPath::sm90), kRowBox = 64;
  maps.k = encode_map(p, "K", p.k, k_rows, p.heads_kv, batch, p.k_batch_stride, p.k_row_stride, p.k_head_stride,
                      kKeyBox);
  maps.v = encode_map(p, "V", p.v, k_rows, p.heads_kv, batch, p.v_batch_stride, p.v_row_stride, p.v_head_stride,
                      kKeyBox);
  maps.q = encode_map(p, "Q", p.q, q_rows, p.heads_q, batch, p.q_batch_stride, p.q_row_stride, p.q_head_stride,
                      kRowBox);
  maps.dout = encode_map(p, "dO", p.dout, q_rows, p.heads_q, batch, p.o_batch_stride, p.o_row_stride,
                         p.o_head_stride, kRowBox);
  maps.dq_kv = make_kv_tensor_maps(p, k_rows, batch, kDqBlockN);  // kDqSm90BlockN
  return maps;
}

void launch_forward(const AttnParams& p, const WorkItem* q_items, int n_q_items, int pack, cudaStream_t stream,
                    FwdPath path, const KvTensorMaps* maps, int rows) {
  check_launch(p, pack);
  if (path == FwdPath::sm90 && !maps)
    throw std::invalid_argument("fused attention: the Hopper forward needs the K / V tensor maps");
  if (rows == 0) rows = fwd_block_m(pack);
  if (rows != fwd_block_m(pack) && !(pack == 1 && rows == kFwdBlockM && path == FwdPath::sm90))
    throw std::invalid_argument("fused attention: forward CTAs of " + std::to_string(rows) + " rows with pack " +
                                std::to_string(pack) + " (64-row CTAs without packing run on the Hopper kernel only)");
  switch (p.head_dim) {
    case 64: return launch_forward_hdim<64>(p, q_items, n_q_items, pack, stream, path, maps, rows);
    case 128: return launch_forward_hdim<128>(p, q_items, n_q_items, pack, stream, path, maps, rows);
    default: throw std::invalid_argument("fused attention: no kernel for head_dim " + std::to_string(p.head_dim));
  }
}

void launch_backward(const AttnParams& p, const WorkItem* q_items, int n_q_items, const WorkItem* k_items,
                     int n_k_items, int pack, bool deterministic, int64_t q_numel, cudaStream_t stream, BwdPath path,
                     const BwdTensorMaps* maps) {
  check_launch(p, pack);
  if (path == BwdPath::sm90 && !maps)
    throw std::invalid_argument("fused attention: the Hopper backward needs its tensor maps");
  if (!deterministic && !p.dq_accum)
    throw std::invalid_argument("fused attention: the atomic dQ mode needs the dQ accumulator");
  const BwdTensorMaps* m = path == BwdPath::sm90 ? maps : nullptr;
  switch (p.head_dim) {
    case 64:
      return launch_backward_hdim<64>(p, q_items, n_q_items, k_items, n_k_items, pack, deterministic, q_numel, stream,
                                      m);
    case 128:
      return launch_backward_hdim<128>(p, q_items, n_q_items, k_items, n_k_items, pack, deterministic, q_numel,
                                       stream, m);
    default: throw std::invalid_argument("fused attention: no kernel for head_dim " + std::to_string(p.head_dim));
  }
}

}  // namespace attnbench::kernels
