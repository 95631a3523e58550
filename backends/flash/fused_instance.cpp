#include "backends/flash/fused_instance.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/kernels/attn_launch.hpp"
#include "backends/kernels/attn_plan.hpp"
#include "harness/device/buffer.hpp"
#include "harness/device/check.hpp"
#include "harness/device/device.hpp"
#include "harness/device/stream.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/layout.hpp"
#include "harness/model/mask.hpp"

namespace attnbench::fused {

using device::DeviceBuffer;
using kernels::AttnParams;
using kernels::WorkItem;

namespace {

constexpr int64_t kMaxPositions = int64_t{1} << 30;  // positions and token counts stay int32

using kernels::Sequences;

DeviceBuffer upload_items(const std::vector<WorkItem>& items, cudaStream_t st) {
  std::vector<int32_t> flat;
  flat.reserve(items.size() * 2);
  for (const WorkItem& w : items) {
    flat.push_back(w.seq);
    flat.push_back(w.start);
  }
  return device::upload_i32(flat, st);
}

class FusedInstance final : public BackendInstance {
 public:
  FusedInstance(const Problem& p, const ProblemData& in, const FusedOptions& opt);
  ~FusedInstance() override {
    if (cudaStreamSynchronize(stream_.s) != cudaSuccess) (void)cudaGetLastError();
  }
  FusedInstance(const FusedInstance&) = delete;
  FusedInstance& operator=(const FusedInstance&) = delete;

  void forward() override {
    kernels::launch_forward(params_, q_items_.as<const WorkItem>(), static_cast<int>(plan_.q_items.size()), plan_.pack,
                            stream_.s);
  }
  void backward() override {
    kernels::launch_backward(params_, dq_items_.as<const WorkItem>(), static_cast<int>(plan_.dq_items.size()),
                             k_items_.as<const WorkItem>(), static_cast<int>(plan_.k_items.size()), plan_.pack,
                             opt_.deterministic, static_cast<int64_t>(dq_.count()), stream_.s);
  }
  void poison_outputs() override {
    device::poison_nan(o_, p_.dtype, stream_.s);
    device::poison_nan(lse_, DType::fp32, stream_.s);
    device::poison_nan(dq_, p_.dtype, stream_.s);
    device::poison_nan(dk_, p_.dtype, stream_.s);
    device::poison_nan(dv_, p_.dtype, stream_.s);
  }
  void synchronize() override { ATTNBENCH_CHECK(cudaStreamSynchronize(stream_.s)); }
  AttentionOutputs read_outputs(bool with_grads) override;
  int64_t executed_pairs() const override { return plan_.executed_pairs; }
  double setup_ms() const override { return setup_ms_; }
  size_t allocated_bytes() const override {
    size_t n = 0;
    for (const DeviceBuffer* b : {&q_, &k_, &v_, &do_, &o_, &lse_, &dq_, &dk_, &dv_, &dq_accum_, &dsum_, &cu_q_,
                                  &cu_k_, &lens_q_, &lens_k_, &q_items_, &dq_items_, &k_items_})
      n += b->allocated_bytes();
    return n;
  }
  void* stream() const override { return stream_.s; }
  nlohmann::json extra() const override;

 private:
  /// Logical tensor -> the kernels' buffer order; back again.
  std::vector<double> to_device(const HostTensor& t, TensorRole role) const;
  HostTensor from_device(const std::vector<double>& phys, TensorRole role, std::vector<int64_t> shape) const;
  void set_strides();
  /// The padded placement's physical layout of `role`.
  const PhysicalLayout& layout_of(TensorRole role) const {
    return role == TensorRole::q ? lq_ : role == TensorRole::k ? lk_ : role == TensorRole::v ? lv_ : lo_;
  }

  Problem p_;
  FusedOptions opt_;
  bool packed_ = false;  // tokens packed per sequence (cu_seqlens)
  Sequences seqs_;
  PhysicalLayout lq_, lk_, lv_, lo_;
  kernels::TilePlan plan_;
  AttnParams params_;
  double setup_ms_ = 0.0;

  device::OwnedStream stream_;
  DeviceBuffer q_, k_, v_, do_, o_, lse_, dq_, dk_, dv_, dq_accum_, dsum_;
  DeviceBuffer cu_q_, cu_k_, lens_q_, lens_k_, q_items_, dq_items_, k_items_;
};

std::vector<double> FusedInstance::to_device(const HostTensor& t, TensorRole role) const {
  if (packed_) return kernels::gather_tokens(t, seqs_, role == TensorRole::k || role == TensorRole::v);
  const PhysicalLayout& l = layout_of(role);
  return to_physical(t, l);
}

HostTensor FusedInstance::from_device(const std::vector<double>& phys, TensorRole role,
                                      std::vector<int64_t> shape) const {
  if (packed_) return kernels::scatter_tokens(phys, std::move(shape), seqs_, role == TensorRole::k || role == TensorRole::v, 0.0);
  const PhysicalLayout& l = layout_of(role);
  return from_physical(phys, l, 0.0);
}

void FusedInstance::set_strides() {
  AttnParams& a = params_;
  const int64_t Hq = p_.heads_q, Hkv = p_.heads_kv, D = p_.head_dim;
  if (packed_) {
    a.q_row_stride = a.o_row_stride = Hq * D;
    a.k_row_stride = a.v_row_stride = Hkv * D;
    a.q_head_stride = a.o_head_stride = a.k_head_stride = a.v_head_stride = D;
    a.q_batch_stride = a.o_batch_stride = a.k_batch_stride = a.v_batch_stride = 0;
    a.lse_batch_stride = 0;
    a.lse_row_stride = 1;
    a.lse_head_stride = seqs_.cu_q.back();
    return;
  }
  a.q_row_stride = a.o_row_stride = lq_.stride_s();
  a.q_head_stride = a.o_head_stride = lq_.stride_h();
  a.q_batch_stride = a.o_batch_stride = p_.seq_q * Hq * D;
  a.k_row_stride = a.v_row_stride = lk_.stride_s();
  a.k_head_stride = a.v_head_stride = lk_.stride_h();
  a.k_batch_stride = a.v_batch_stride = p_.seq_k * Hkv * D;
  a.lse_batch_stride = Hq * p_.seq_q;
  a.lse_row_stride = 1;
  a.lse_head_stride = p_.seq_q;
}

FusedInstance::FusedInstance(const Problem& p, const ProblemData& in, const FusedOptions& opt)
    : p_(p),
      opt_(opt),
      lq_(physical_layout(p, TensorRole::q)),
      lk_(physical_layout(p, TensorRole::k)),
      lv_(physical_layout(p, TensorRole::v)),
      lo_(physical_layout(p, TensorRole::o)) {
  const std::string why = unsupported_reason(p, opt.placement);
  if (!why.empty()) throw std::invalid_argument(why);
  if (in.q.shape != std::vector<int64_t>{p.batch, p.heads_q, p.seq_q, p.head_dim} ||
      in.k.shape != std::vector<int64_t>{p.batch, p.heads_kv, p.seq_k, p.head_dim} ||
      in.v.shape != std::vector<int64_t>{p.batch, p.heads_kv, p.seq_k, p.head_dim_v} ||
      in.d_o.shape != std::vector<int64_t>{p.batch, p.heads_q, p.seq_q, p.head_dim_v})
    throw std::invalid_argument(opt.name + ": input shapes do not match the problem");
  const auto t0 = std::chrono::steady_clock::now();
  cudaStream_t st = stream_.s;

  // Sequences, lengths and the plan.
  MaskArrays arrays;
  MaskDesc md = make_mask_desc(p, arrays);
  md.doc_ids = nullptr;  // documents become sequences
  md.seq_lens_q = md.seq_lens_k = nullptr;  // lengths come from the sequences
  kernels::SeqLengths lens;
  packed_ = opt.placement == Placement::documents || p.layout == Layout::thd;
  if (packed_) {
    seqs_ = opt.placement == Placement::documents ? kernels::document_sequences(p) : kernels::row_sequences(p);
    for (int64_t s = 0; s < seqs_.size(); ++s) {
      lens.lq.push_back(seqs_.cu_q[s + 1] - seqs_.cu_q[s]);
      lens.lk.push_back(seqs_.cu_k[s + 1] - seqs_.cu_k[s]);
    }
    lens.store_q = lens.lq;
    lens.store_k = lens.lk;
  } else {
    for (int64_t b = 0; b < p.batch; ++b) {
      lens.lq.push_back(static_cast<int32_t>(p.valid_q(b)));
      lens.lk.push_back(static_cast<int32_t>(p.valid_k(b)));
      lens.store_q.push_back(static_cast<int32_t>(p.seq_q));
      lens.store_k.push_back(static_cast<int32_t>(p.seq_k));
    }
  }
  double mean_len = 0;
  for (int32_t l : lens.lq) mean_len += l;
  mean_len = lens.lq.empty() ? 0.0 : mean_len / static_cast<double>(lens.lq.size());
  int pack = opt.placement == Placement::documents ? kernels::choose_pack(static_cast<int>(p.group_size()), mean_len)
                                                   : 1;
  if (opt.pack > 0) pack = opt.pack;
  plan_ = kernels::plan_tiles(md, lens, static_cast<int>(p.heads_q), static_cast<int>(p.group_size()), pack,
                              static_cast<int>(p.head_dim));

  // Inputs, outputs, workspaces.
  q_ = device::upload(to_device(in.q, TensorRole::q), p.dtype, st);
  k_ = device::upload(to_device(in.k, TensorRole::k), p.dtype, st);
  v_ = device::upload(to_device(in.v, TensorRole::v), p.dtype, st);
  do_ = device::upload(to_device(in.d_o, TensorRole::o), p.dtype, st);
  const size_t es = static_cast<size_t>(dtype_bytes(p.dtype));
  o_ = DeviceBuffer(do_.count(), es);
  dq_ = DeviceBuffer(q_.count(), es);
  dk_ = DeviceBuffer(k_.count(), es);
  dv_ = DeviceBuffer(v_.count(), es);
  const int64_t lse_n = packed_ ? static_cast<int64_t>(seqs_.cu_q.back()) * p.heads_q : p.lse_numel();
  lse_ = DeviceBuffer(static_cast<size_t>(lse_n), sizeof(float));
  dsum_ = DeviceBuffer(static_cast<size_t>(lse_n), sizeof(float));
  if (!opt.deterministic) dq_accum_ = DeviceBuffer(q_.count(), sizeof(float));
  if (packed_) {
    cu_q_ = device::upload_i32(seqs_.cu_q, st);
    cu_k_ = device::upload_i32(seqs_.cu_k, st);
  } else if (p.find_mask<PaddingTerm>()) {
    lens_q_ = device::upload_i32(lens.lq, st);
    lens_k_ = device::upload_i32(lens.lk, st);
  }
  q_items_ = upload_items(plan_.q_items, st);
  dq_items_ = upload_items(plan_.dq_items, st);
  k_items_ = upload_items(plan_.k_items, st);

  AttnParams& a = params_;
  a.q = q_.data();
  a.k = k_.data();
  a.v = v_.data();
  a.o = o_.data();
  a.lse = lse_.as<float>();
  a.dout = do_.data();
  a.dq = dq_.data();
  a.dk = dk_.data();
  a.dv = dv_.data();
  a.dq_accum = dq_accum_.as<float>();
  a.dsum = dsum_.as<float>();
  set_strides();
  a.num_seqs = static_cast<int32_t>(lens.lq.size());
  a.seq_q = packed_ ? (lens.lq.empty() ? 0 : *std::max_element(lens.lq.begin(), lens.lq.end()))
                    : static_cast<int32_t>(p.seq_q);
  a.seq_k = packed_ ? (lens.lk.empty() ? 0 : *std::max_element(lens.lk.begin(), lens.lk.end()))
                    : static_cast<int32_t>(p.seq_k);
  a.cu_seqlens_q = cu_q_.as<const int32_t>();
  a.cu_seqlens_k = cu_k_.as<const int32_t>();
  a.seqlens_q = lens_q_.as<const int32_t>();
  a.seqlens_k = lens_k_.as<const int32_t>();
  a.heads_q = static_cast<int32_t>(p.heads_q);
  a.heads_kv = static_cast<int32_t>(p.heads_kv);
  a.group = static_cast<int32_t>(p.group_size());
  a.head_dim = static_cast<int32_t>(p.head_dim);
  a.scale = static_cast<float>(p.softmax_scale());
  a.scale_log2 = static_cast<float>(p.softmax_scale() * 1.4426950408889634);
  a.mask = md;
  a.mod = p.score_mod.kind == ScoreMod::Kind::softcap ? kernels::ModKind::softcap
          : p.score_mod.kind == ScoreMod::Kind::alibi ? kernels::ModKind::alibi
                                                      : kernels::ModKind::none;
  a.softcap = static_cast<float>(p.score_mod.cap);
  a.dtype = p.dtype == DType::bf16 ? kernels::ElemType::bf16 : kernels::ElemType::fp16;
  ATTNBENCH_CHECK(cudaStreamSynchronize(st));
  setup_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

AttentionOutputs FusedInstance::read_outputs(bool with_grads) {
  synchronize();
  const DType dt = p_.dtype;
  AttentionOutputs out;
  out.o = from_device(device::download(o_, dt, stream_.s), TensorRole::o,
                      {p_.batch, p_.heads_q, p_.seq_q, p_.head_dim_v});
  const std::vector<double> lse = device::download(lse_, DType::fp32, stream_.s);
  if (packed_) {
    out.lse = HostTensor({p_.batch, p_.heads_q, p_.seq_q}, -INFINITY);
    const int64_t T = seqs_.cu_q.back();
    for (int64_t s = 0; s < seqs_.size(); ++s)
      for (int32_t tok = seqs_.cu_q[s]; tok < seqs_.cu_q[s + 1]; ++tok)
        for (int64_t h = 0; h < p_.heads_q; ++h)
          out.lse.data[static_cast<size_t>((seqs_.row[s] * p_.heads_q + h) * p_.seq_q + seqs_.start_q[s] +
                                           (tok - seqs_.cu_q[s]))] = lse[static_cast<size_t>(h * T + tok)];
  } else {
    out.lse = HostTensor({p_.batch, p_.heads_q, p_.seq_q});
    out.lse.data = lse;
  }
  if (with_grads) {
    out.dq = from_device(device::download(dq_, dt, stream_.s), TensorRole::q,
                         {p_.batch, p_.heads_q, p_.seq_q, p_.head_dim});
    out.dk = from_device(device::download(dk_, dt, stream_.s), TensorRole::k,
                         {p_.batch, p_.heads_kv, p_.seq_k, p_.head_dim});
    out.dv = from_device(device::download(dv_, dt, stream_.s), TensorRole::v,
                         {p_.batch, p_.heads_kv, p_.seq_k, p_.head_dim_v});
  }
  return out;
}

nlohmann::json FusedInstance::extra() const {
  nlohmann::json j;
  j["kernel"] = "attnbench fused (mma.sync m16n8k16, ldmatrix, cp.async double buffering; sm_80 path)";
  j["placement"] = packed_ ? (opt_.placement == Placement::documents ? "documents as packed sequences (THD)"
                                                                      : "THD, one sequence per batch row")
                           : std::string(to_string(p_.layout)) + " padded batch";
  j["sequences"] = static_cast<int64_t>(plan_.q_items.empty() ? 0 : params_.num_seqs);
  j["tiles"] = kernels::describe(plan_, static_cast<int>(p_.heads_q), static_cast<int>(p_.heads_kv));
  j["fwd_tile"] = std::to_string(plan_.tile_rows * plan_.pack) + " rows (" + std::to_string(plan_.pack) + " head" +
                  (plan_.pack > 1 ? "s" : "") + " x " + std::to_string(plan_.tile_rows) + " positions) x " +
                  std::to_string(plan_.tile_keys) + " keys";
  j["gqa_pack"] = plan_.pack;
  j["dq_mode"] = opt_.deterministic ? "deterministic (dQ kernel, no atomics)" : "float32 atomics";
  return j;
}

}  // namespace

std::string unsupported_reason(const Problem& p, Placement placement) {
  const std::string who = placement == Placement::documents ? "varlen: " : "flash: ";
  if (p.dtype != DType::bf16 && p.dtype != DType::fp16)
    return who + "dtype " + to_string(p.dtype) + " not supported (bf16 and fp16 only)";
  if (p.head_dim != p.head_dim_v)
    return who + "head_dim " + std::to_string(p.head_dim) + " != head_dim_v " + std::to_string(p.head_dim_v) +
           " not supported (Dqk = Dv only)";
  if (!kernels::head_dim_supported(static_cast<int>(p.head_dim)))
    return who + "head_dim " + std::to_string(p.head_dim) + " not supported (64 and 128 are instantiated)";
  if (p.seq_q >= kMaxPositions || p.seq_k >= kMaxPositions || p.batch * p.seq_q >= kMaxPositions ||
      p.batch * p.seq_k >= kMaxPositions)
    return who + "sequences beyond 2^30 positions not supported (32-bit positions)";
  if (p.score_mod.kind != ScoreMod::Kind::none && p.score_mod.kind != ScoreMod::Kind::softcap &&
      p.score_mod.kind != ScoreMod::Kind::alibi)
    return who + "score_mod " + to_string(p.score_mod.kind) +
           " not supported (learnable biases need the flex backend; none, softcap and alibi run here)";
  const bool docs = p.find_mask<DocumentTerm>() != nullptr;
  if (p.batch > kernels::kMaxSequences)
    return who + "batch " + std::to_string(p.batch) + " exceeds " + std::to_string(kernels::kMaxSequences) +
           " sequences per launch";
  if (placement == Placement::padded) {
    if (docs) return who + "document masks run on the varlen backend (packed sequences); flash runs causal, "
                          "sliding_window, padding and prefix_lm";
    if (p.find_mask<BlockSparseTerm>())
      return who + "block_sparse masks need the flex backend (flash runs interval masks: causal, sliding_window, "
                   "padding, prefix_lm)";
    return {};
  }
  if (!docs) return who + "needs a document mask (packed documents become cu_seqlens); use flash for dense rows";
  for (const MaskTerm& t : p.mask)
    if (!std::holds_alternative<DocumentTerm>(t) && !std::holds_alternative<CausalTerm>(t) &&
        !std::holds_alternative<SlidingWindowTerm>(t))
      return who + "mask term " + mask_kind_name(t) +
             " cannot be expressed with cu_seqlens (document, causal and sliding_window only)";
  const DocumentTerm* d = p.find_mask<DocumentTerm>();
  std::vector<std::pair<int64_t, int64_t>> runs;
  int64_t sequences = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    if (!kernels::document_runs(*d, static_cast<size_t>(b), p.seq_q, &runs))
      return who + "document ids of batch row " + std::to_string(b) +
             " are not contiguous (a document split in two runs cannot be one packed sequence)";
    sequences += static_cast<int64_t>(runs.size());
  }
  if (sequences > kernels::kMaxSequences)
    return who + std::to_string(sequences) + " documents exceed " + std::to_string(kernels::kMaxSequences) +
           " sequences per launch";
  return {};
}

std::unique_ptr<BackendInstance> make_instance(const Problem& p, const ProblemData& in, const FusedOptions& opt) {
  return std::make_unique<FusedInstance>(p, in, opt);
}

bool sm80_available(const std::string& backend, std::string* why) {
  if (!device::cuda_device_available(why)) return false;
  cudaDeviceProp prop{};
  const cudaError_t e = cudaGetDeviceProperties(&prop, device::selected_device());
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = backend + ": cudaGetDeviceProperties: " + cudaGetErrorString(e);
    return false;
  }
  if (prop.major < 8) {
    if (why) *why = backend + ": needs compute capability >= 8.0 (mma.sync bf16, cp.async), the device has " +
                    std::to_string(prop.major) + "." + std::to_string(prop.minor);
    return false;
  }
  return true;
}

bool env_flag(const char* var, bool fallback) {
  const char* v = std::getenv(var);
  if (!v || !*v) return fallback;
  const std::string s(v);
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw InputError(std::string("environment variable ") + var, "", "value '" + s + "' is not a boolean (1/0)");
}

}  // namespace attnbench::fused
