#include "backends/flex/flex_setup.hpp"

#include <vector>

#include "backends/kernels/attn_plan.hpp"
#include "harness/model/mask.hpp"

namespace attnbench::fused::flex {

using device::DeviceBuffer;

size_t FlexBuffers::bytes() const {
  size_t n = 0;
  for (const DeviceBuffer* b : {&kv_num, &kv_idx, &full_kv_num, &full_kv_idx, &q_num, &q_idx, &full_q_num,
                                &full_q_idx, &doc_ids, &doc_first, &doc_last, &lens_q, &lens_k, &bias, &offset,
                                &dbias, &scratch, &csr_ptr, &csr_keys})
    n += b->allocated_bytes();
  return n;
}

void setup_flex(const Problem& p, const ProblemData& in, kernels::DbiasMode dbias, FlexBuffers* f,
                kernels::AttnParams* a, cudaStream_t st) {
  const BlockMask& bm = f->host;
  f->kv_num = device::upload_i32(bm.kv_num_blocks, st);
  f->kv_idx = device::upload_i32(bm.kv_indices, st);
  f->full_kv_num = device::upload_i32(bm.full_kv_num_blocks, st);
  f->full_kv_idx = device::upload_i32(bm.full_kv_indices, st);
  f->q_num = device::upload_i32(bm.q_num_blocks, st);
  f->q_idx = device::upload_i32(bm.q_indices, st);
  f->full_q_num = device::upload_i32(bm.full_q_num_blocks, st);
  f->full_q_idx = device::upload_i32(bm.full_q_indices, st);
  kernels::BlockMaskView& v = a->bm;
  v.kv_num_blocks = f->kv_num.as<const int32_t>();
  v.kv_indices = f->kv_idx.as<const int32_t>();
  v.full_kv_num_blocks = f->full_kv_num.as<const int32_t>();
  v.full_kv_indices = f->full_kv_idx.as<const int32_t>();
  v.q_num_blocks = f->q_num.as<const int32_t>();
  v.q_indices = f->q_idx.as<const int32_t>();
  v.full_q_num_blocks = f->full_q_num.as<const int32_t>();
  v.full_q_indices = f->full_q_idx.as<const int32_t>();
  v.q_block = static_cast<int32_t>(bm.q_block);
  v.kv_block = static_cast<int32_t>(bm.kv_block);
  v.batch = static_cast<int32_t>(bm.B);
  v.num_q_blocks = static_cast<int32_t>(bm.num_q_blocks);
  v.num_kv_blocks = static_cast<int32_t>(bm.num_kv_blocks);
  // Mask terms at the granularity they vary (kernels::flex_mask_form): contiguous
  // documents as one key interval per row, block_sparse left to the BlockMask.
  MaskArrays arrays;
  const kernels::FlexMaskForm form = kernels::flex_mask_form(p, arrays, bm);
  f->doc_first = device::upload_i32(form.doc_first, st);
  f->doc_last = device::upload_i32(form.doc_last, st);
  a->doc_first = f->doc_first.as<const int32_t>();
  a->doc_last = f->doc_last.as<const int32_t>();
  f->doc_ids = device::upload_i32(form.mask.doc_ids ? arrays.doc_ids : std::vector<int32_t>{}, st);
  a->mask.doc_ids = f->doc_ids.as<const int32_t>();
  a->mask.block_density = form.mask.block_density;
  f->lens_q = device::upload_i32(arrays.seq_lens_q, st);
  f->lens_k = device::upload_i32(arrays.seq_lens_k, st);
  a->mask.seq_lens_q = f->lens_q.as<const int32_t>();
  a->mask.seq_lens_k = f->lens_k.as<const int32_t>();
  if (!p.has_learnable_bias()) return;
  f->bias = device::upload_f32(in.bias, st);
  a->bias = f->bias.as<const float>();
  a->bias_size = static_cast<int32_t>(p.bias_numel());
  if (a->mod == kernels::ModKind::offset_bias) {
    f->offset = device::upload_i32(in.offset, st);
    a->bias_offset = f->offset.as<const int32_t>();
  }
  a->dbias_mode = dbias;
  if (dbias == kernels::DbiasMode::none) return;
  f->dbias = DeviceBuffer(static_cast<size_t>(p.bias_numel()), sizeof(float));
  a->dbias = f->dbias.as<float>();
  if (dbias != kernels::DbiasMode::deterministic) return;
  f->scratch_floats = dbias_scratch_bytes(p) / static_cast<int64_t>(sizeof(float));
  f->scratch = DeviceBuffer(static_cast<size_t>(f->scratch_floats), sizeof(float));
  a->dbias_scratch = f->scratch.as<float>();
  a->dbias_tiles = static_cast<int32_t>(kernels::rel_bias_scratch_tiles(p.seq_k));
  if (a->mod == kernels::ModKind::offset_bias) {
    std::vector<int32_t> ptr, keys;
    kernels::offset_keys_csr(in.offset, p.bias_numel(), &ptr, &keys);
    f->csr_ptr = device::upload_i32(ptr, st);
    f->csr_keys = device::upload_i32(keys, st);
    a->offset_keys_ptr = f->csr_ptr.as<const int32_t>();
    a->offset_keys = f->csr_keys.as<const int32_t>();
  }
}


int64_t dbias_scratch_bytes(const Problem& p) {
  const int64_t f = static_cast<int64_t>(sizeof(float));
  if (p.score_mod.kind == ScoreMod::Kind::rel_bias)
    return p.batch * kernels::rel_bias_scratch_tiles(p.seq_k) * p.heads_q * (2 * p.score_mod.max_distance + 1) * f;
  if (p.score_mod.kind == ScoreMod::Kind::offset_bias) return p.batch * p.heads_kv * p.seq_k * f;
  return 0;
}

}  // namespace attnbench::fused::flex
