// The launch of the fused attention kernels (can_implement, then the generated
// instance table) and the TMA descriptors of the Hopper kernels.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "backends/kernels/attn_launch.hpp"
#include "backends/kernels/attn_runners.hpp"
#include "harness/device/check.hpp"

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

namespace attnbench::kernels {

bool fwd_sm90_usable(std::string* why) {
  const auto built = instance_table();
  const bool has_sm90 = std::any_of(built.begin(), built.end(), [](const Instance& i) {
    return i.key.path == static_cast<int32_t>(FwdPath::sm90);
  });
  if (!has_sm90) {
    if (why) *why = "this build has no sm_90a code (CMAKE_CUDA_ARCHITECTURES without 90a)";
    return false;
  }
  int dev = 0, major = 0, minor = 0;
  ATTNBENCH_CHECK(cudaGetDevice(&dev));
  ATTNBENCH_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  ATTNBENCH_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major == 9 && minor == 0) return true;
  if (why)
    *why = "the Hopper kernels need compute capability 9.0 (wgmma, sm_90a code); the device has " +
           std::to_string(major) + "." + std::to_string(minor);
  return false;
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
/// 64 x box_rows x box_heads (a box lands head-major: row h * box_rows + r of
/// the tile), 128-byte swizzle, rows past the tensor zero-filled.
CUtensorMap encode_map(const AttnParams& p, const char* name, const void* base, int64_t rows, int64_t heads,
                       int64_t batch, int64_t batch_stride, int64_t row_stride, int64_t head_stride, int box_rows,
                       int box_heads = 1) {
  CUtensorMap m{};
  const cuuint64_t e = 2;  // bytes per element
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(p.head_dim), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(row_stride) * e, static_cast<cuuint64_t>(head_stride) * e,
                                 batch_stride > 0 ? static_cast<cuuint64_t>(batch_stride) * e
                                                  : static_cast<cuuint64_t>(rows * row_stride) * e};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), static_cast<cuuint32_t>(box_heads), 1};
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

/// The 5-D map of the float32 dQ accumulator (BwdTensorMaps::dq_accum): columns
/// split in groups of 32 (128 bytes, the swizzle's span) so that a box of two
/// groups x 16 rows covers a warp's 64 dQ columns; with the 128-byte swizzle the
/// box's 128-byte lines (row r, group c at line 2 r + c) make the warp's float2
/// fragment stores free of bank conflicts. Rows and column groups past the tensor
/// (a THD tile past the last token, a padded layout's tile past seq_q, head_dim
/// 96's fourth group) are skipped by the reduce.
CUtensorMap encode_dq_accum_map(const AttnParams& p, int64_t rows, int64_t batch) {
  CUtensorMap m{};
  constexpr cuuint64_t e = 4;
  const cuuint64_t dims[5] = {32, static_cast<cuuint64_t>((p.head_dim + 31) / 32), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(p.heads_q), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[4] = {32 * e, static_cast<cuuint64_t>(p.q_row_stride) * e,
                                 static_cast<cuuint64_t>(p.q_head_stride) * e,
                                 p.q_batch_stride > 0 ? static_cast<cuuint64_t>(p.q_batch_stride) * e
                                                      : static_cast<cuuint64_t>(rows * p.q_row_stride) * e};
  const cuuint32_t box[5] = {32, 2, 16, 1, 1};
  const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
  const CUresult r = tensor_map_encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, p.dq_accum, dims, strides, box, unit,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw device::DeviceError("cuTensorMapEncodeTiled rejected the dQ accumulator [" + std::to_string(batch) + ", " +
                              std::to_string(p.heads_q) + ", " + std::to_string(rows) + ", " +
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

FwdTensorMaps make_fwd_tensor_maps(const AttnParams& p, int64_t q_rows, int64_t k_rows, int64_t batch,
                                   int key_box, int rows, int pack) {
  FwdTensorMaps maps;
  maps.kv = make_kv_tensor_maps(p, k_rows, batch, key_box);
  maps.q = encode_map(p, "Q", p.q, q_rows, p.heads_q, batch, p.q_batch_stride, p.q_row_stride, p.q_head_stride,
                      rows / pack, pack);
  return maps;
}

BwdTensorMaps make_bwd_tensor_maps(const AttnParams& p, int64_t q_rows, int64_t k_rows, int64_t batch,
                                   int dq_pack) {
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
  maps.dq.kv = make_kv_tensor_maps(p, k_rows, batch, kDqBlockN);  // kDqSm90BlockN
  maps.dq.q = encode_map(p, "Q", p.q, q_rows, p.heads_q, batch, p.q_batch_stride, p.q_row_stride, p.q_head_stride,
                         kDqBlockM / dq_pack, dq_pack);
  maps.dq.dout = encode_map(p, "dO", p.dout, q_rows, p.heads_q, batch, p.o_batch_stride, p.o_row_stride,
                            p.o_head_stride, kDqBlockM / dq_pack, dq_pack);
  if (p.dq_accum) maps.dq_accum = encode_dq_accum_map(p, q_rows, batch);
  return maps;
}

namespace {

/// Arguments the shape needs that are missing (empty when none): what
/// can_implement() does not look at.
std::string missing_argument(const AttnParams& p, const LaunchArgs& a) {
  const LaunchShape& s = a.shape;
  const bool fwd = s.direction == Direction::forward;
  if (fwd && s.fwd_path == FwdPath::sm90 && !a.fwd_maps) return "the Hopper forward needs the Q / K / V tensor maps";
  if (!fwd && s.bwd_path == BwdPath::sm90 && !a.bwd_maps) return "the Hopper backward needs its tensor maps";
  const bool claims = fwd ? s.fwd_path == FwdPath::sm90 : s.bwd_path == BwdPath::sm90 && s.deterministic;
  if (claims && !a.tile_counters) return "the Hopper forward and dQ kernels need the tile counters";
  // A problem without query tokens has no accumulator (a buffer of zero elements) and needs none.
  const bool atomic_dq = !fwd && !s.deterministic && (!s.flex || s.bwd_path == BwdPath::sm90) && a.q_numel > 0;
  if (atomic_dq && !p.dq_accum) return "the atomic dQ mode needs the dQ accumulator";
  if (s.flex) {
    const BlockMaskView& bm = p.bm;
    if (!bm.kv_num_blocks || !bm.kv_indices || !bm.full_kv_num_blocks || !bm.full_kv_indices || !bm.q_num_blocks ||
        !bm.q_indices || !bm.full_q_num_blocks || !bm.full_q_indices || bm.batch <= 0)
      return "the BlockMask arrays are not set";
    if ((p.mod == ModKind::rel_bias || p.mod == ModKind::offset_bias) && !p.bias)
      return "learnable bias score mod without a bias tensor";
  }
  return {};
}

}  // namespace

void launch(const AttnParams& p, const LaunchArgs& a) {
  const char* who = a.shape.flex ? "flex attention: " : "fused attention: ";
  if (std::string why = can_implement(p, a.shape); !why.empty()) throw std::invalid_argument(who + why);
  if (std::string why = missing_argument(p, a); !why.empty()) throw std::invalid_argument(who + why);
  const InstanceKey key = instance_key(p, a.shape);
  for (const Instance& i : instance_table())
    if (i.key == key) return i.run(p, a);
  throw std::logic_error("fused attention: can_implement accepted an instance the table lacks");
}

}  // namespace attnbench::kernels
