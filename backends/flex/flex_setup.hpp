// The `flex` backend's device-side setup: what its kernels read besides Q, K,
// V, O and the gradients (the BlockMask lists, the mask arrays of partial tiles,
// the learnable bias with its offset table, dBias and its deterministic
// scratch), uploaded into AttnParams for the fused instance
// (backends/fused/fused_instance.cpp, block_mask placement).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/kernels/attn_params.hpp"
#include "harness/backend/backend.hpp"
#include "harness/device/buffer.hpp"
#include "harness/model/block_mask.hpp"
#include "harness/model/problem.hpp"

namespace attnbench::fused::flex {

/// Device copies of what the flex path reads besides the tensors: the BlockMask
/// lists (int32, kernels::BlockMaskView's shapes), the arrays partial tiles read
/// (document ids or each row's document run, padding lengths), the learnable
/// bias with its offset table and its inverse (CSR), dBias and its deterministic
/// scratch (float32). `host` is the BlockMask they were uploaded from.
struct FlexBuffers {
  BlockMask host;
  device::DeviceBuffer kv_num, kv_idx, full_kv_num, full_kv_idx, q_num, q_idx, full_q_num, full_q_idx;
  device::DeviceBuffer doc_ids, doc_first, doc_last, lens_q, lens_k, bias, offset, dbias, scratch, csr_ptr,
      csr_keys;
  int64_t scratch_floats = 0;  ///< floats of `scratch` (0 unless dbias is deterministic)
  /// Device bytes held.
  size_t bytes() const;
};

/// Upload the flex path's buffers of `p` (f->host holds its BlockMask already)
/// on `st` and point `a` (already holding shape_params(p, ...): the score mod and
/// its constants) at them: the BlockMask view, the mask form of partial
/// tiles (kernels::flex_mask_form), and for a learnable bias its tensor, offsets,
/// `dbias` mode, dBias and scratch. Throws DeviceOutOfMemory / DeviceError on
/// device failures, std::invalid_argument for an offset_bias table out of range.
void setup_flex(const Problem& p, const ProblemData& in, kernels::DbiasMode dbias, FlexBuffers* f,
                kernels::AttnParams* a, cudaStream_t st);

/// Bytes of the deterministic dBias scratch buffer of `p` with BlockMask tiles
/// (rel_bias: B * kernels::rel_bias_scratch_tiles(Sk) * Hq * (2m + 1) floats; offset_bias: B * Hkv * Sk
/// floats; 0 otherwise).
int64_t dbias_scratch_bytes(const Problem& p);

}  // namespace attnbench::fused::flex
