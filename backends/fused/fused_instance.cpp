#include "backends/fused/fused_instance.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/flex/flex_setup.hpp"
#include "backends/kernels/attn_launch.hpp"
#include "backends/kernels/attn_plan.hpp"
#include "harness/device/buffer.hpp"
#include "harness/device/check.hpp"
#include "harness/device/device.hpp"
#include "harness/device/digest.hpp"
#include "harness/device/output_bits.hpp"
#include "harness/device/stream.hpp"
#include "harness/model/block_mask.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/layout.hpp"
#include "harness/model/mask.hpp"

namespace attnbench::fused {

using device::DeviceBuffer;
using kernels::AttnParams;
using kernels::WorkItem;

namespace {

/// The kernels' element type of a problem dtype.
kernels::ElemType elem_type(DType t) {
  return t == DType::bf16 ? kernels::ElemType::bf16 : t == DType::fp16 ? kernels::ElemType::fp16 : kernels::ElemType::fp32;
}

}  // namespace

kernels::AttnParams shape_params(const Problem& p, int64_t num_seqs, int block) {
  kernels::AttnParams a;
  a.num_seqs = static_cast<int32_t>(std::min<int64_t>(num_seqs, std::numeric_limits<int32_t>::max()));
  a.heads_q = static_cast<int32_t>(p.heads_q);
  a.heads_kv = static_cast<int32_t>(p.heads_kv);
  a.group = p.heads_kv > 0 ? static_cast<int32_t>(p.heads_q / p.heads_kv) : 0;
  a.head_dim = static_cast<int32_t>(p.head_dim);
  a.head_dim_v = static_cast<int32_t>(p.head_dim_v);
  a.dtype = elem_type(p.dtype);
  a.scale = static_cast<float>(p.softmax_scale());
  a.scale_log2 = static_cast<float>(p.softmax_scale() * 1.4426950408889634);
  a.mod = make_score_mod_desc(p, nullptr, nullptr).kind;
  a.softcap = static_cast<float>(p.score_mod.cap);
  a.max_distance = static_cast<int32_t>(std::clamp<int64_t>(p.score_mod.max_distance, -1, std::numeric_limits<int32_t>::max()));
  a.bm.q_block = a.bm.kv_block = block;
  return a;
}

std::string flex_bwd_sm90_refusal(const Problem& p, int block, kernels::DbiasMode dbias) {
  kernels::AttnParams a = shape_params(p, p.batch, block);
  a.dbias_mode = dbias;
  kernels::LaunchShape s;
  s.direction = kernels::Direction::backward;
  s.flex = true;
  s.bwd_path = kernels::BwdPath::sm90;
  return kernels::can_implement(a, s);
}

namespace {

constexpr int64_t kMaxPositions = int64_t{1} << 30;  // positions and token counts stay int32

using kernels::Sequences;

/// The option fwd_path / bwd_path (`option`, its value `path`): automatic ->
/// nullopt (the caller's default), sm80 -> false, sm90 -> true. Throws
/// std::invalid_argument (an error row naming why) when sm90 is asked for but
/// cannot run here (kernels::fwd_sm90_usable()).
std::optional<bool> sm90_path(KernelPath path, const char* option, const std::string& backend) {
  if (path == KernelPath::automatic) return std::nullopt;
  if (path == KernelPath::sm80) return false;
  std::string why;
  if (!kernels::fwd_sm90_usable(&why)) throw std::invalid_argument(backend + ": " + option + "=sm90: " + why);
  return true;
}

/// Whether this build has the Hopper kernels of direction `d` for p's head dim
/// and element type (cmake/attn_instances.cmake: forward 64, 96, 128, 256;
/// backward 64, 96, 128; other head dims run the portable kernels).
bool hopper_instance(const Problem& p, kernels::Direction d) {
  return kernels::has_instance(
      {d, static_cast<int32_t>(kernels::FwdPath::sm90), static_cast<int32_t>(p.head_dim), elem_type(p.dtype)});
}

/// The forward kernel of a non-flex instance with GQA pack `pack` for problem p:
/// option fwd_path (sm90_path); auto = sm90 where kernels::fwd_sm90_usable() and
/// the head dim has a Hopper instance, except the GQA-packed 64-row tile at
/// head_dim 64 launched one CTA per tile (option persistent=off), which measured
/// slower than the portable kernel on the H100: packed CodeAlpaca Llama-3.2-1B
/// forward 0.444 vs 0.397 ms (docs/results/2026-11-24-h100-session8.md).
/// Persistent, it is the faster one: 0.357 vs 0.406 ms on an H200
/// (docs/results/2026-11-28-h200-session19.md).
kernels::FwdPath choose_fwd_path(const FusedOptions& opt, int pack, const Problem& p) {
  const std::optional<bool> asked = sm90_path(opt.fwd_path, "fwd_path", opt.name);
  const bool one_cta_per_tile = opt.persistent.has_value() && !*opt.persistent;
  const bool sm90 = asked ? *asked
                          : kernels::fwd_sm90_usable() && hopper_instance(p, kernels::Direction::forward) &&
                                !(pack > 1 && p.head_dim == 64 && one_cta_per_tile);
  return sm90 ? kernels::FwdPath::sm90 : kernels::FwdPath::sm80;
}

/// The dK/dV kernel of a non-flex instance: option bwd_path (sm90_path);
/// auto = the Hopper kernels where kernels::fwd_sm90_usable() and the head dim
/// has a Hopper instance, in either dQ mode (atomic: dQ added by the dK/dV
/// kernel; deterministic: the Hopper dQ kernel). Throws as sm90_path.
kernels::BwdPath choose_bwd_path(const FusedOptions& opt, const Problem& p) {
  const std::optional<bool> asked = sm90_path(opt.bwd_path, "bwd_path", opt.name);
  const bool sm90 = asked ? *asked : kernels::fwd_sm90_usable() && hopper_instance(p, kernels::Direction::backward);
  return sm90 ? kernels::BwdPath::sm90 : kernels::BwdPath::sm80;
}

/// The flex path's backward kernels: option bwd_path (sm90_path); auto =
/// the Hopper kernels where kernels::fwd_sm90_usable() and
/// flex_bwd_sm90_refusal() has no objection (128-key KV blocks), else the portable ones, with the reason in *why_portable. sm90 asked
/// for a problem the Hopper backward refuses throws std::invalid_argument (an
/// error row naming why; the backend reports it as unsupported before that).
kernels::BwdPath choose_flex_bwd_path(const Problem& p, const FusedOptions& opt, std::string* why_portable) {
  const std::optional<bool> asked = sm90_path(opt.bwd_path, "bwd_path", opt.name);
  const std::string refusal = flex_bwd_sm90_refusal(p, opt.block_size, opt.dbias);
  if (asked && *asked) {
    if (!refusal.empty()) throw std::invalid_argument(opt.name + ": " + refusal);
    return kernels::BwdPath::sm90;
  }
  if (asked) {
    *why_portable = "bwd_path=sm80";
    return kernels::BwdPath::sm80;
  }
  if (!kernels::fwd_sm90_usable(why_portable)) return kernels::BwdPath::sm80;
  if (!refusal.empty()) {
    *why_portable = refusal;
    return kernels::BwdPath::sm80;
  }
  return kernels::BwdPath::sm90;
}

DeviceBuffer upload_items(const std::vector<WorkItem>& items, cudaStream_t st) {
  std::vector<int32_t> flat;
  flat.reserve(items.size() * 2);
  for (const WorkItem& w : items) {
    flat.push_back(w.seq);
    flat.push_back(w.start);
  }
  return device::upload_i32(flat, st);
}

/// The tokens' placement and tile plan of a padded or documents instance: the
/// packed sequences (documents, or THD rows), their valid and stored lengths,
/// the GQA pack, the kernels' paths, the work lists, and the interval mask the
/// kernels evaluate (lengths come from the sequences, documents are sequences).
struct SequencePlan {
  bool packed = false;
  Sequences seqs;
  kernels::SeqLengths lens;
  MaskDesc mask;
  kernels::FwdPath fwd = kernels::FwdPath::sm80;
  kernels::BwdPath bwd = kernels::BwdPath::sm80;
  kernels::TilePlan plan;
};

/// One sequence per batch row of a padded batch: valid lengths p.valid_q / valid_k,
/// outputs stored for every position.
kernels::SeqLengths padded_lengths(const Problem& p) {
  kernels::SeqLengths lens;
  for (int64_t b = 0; b < p.batch; ++b) {
    lens.lq.push_back(static_cast<int32_t>(p.valid_q(b)));
    lens.lk.push_back(static_cast<int32_t>(p.valid_k(b)));
    lens.store_q.push_back(static_cast<int32_t>(p.seq_q));
    lens.store_k.push_back(static_cast<int32_t>(p.seq_k));
  }
  return lens;
}

/// SequencePlan of `p` under opt.placement (padded or documents), opt.pack, opt.fwd_rows
/// and the fwd_path / bwd_path choices (choose_fwd_path, choose_bwd_path).
SequencePlan plan_sequences(const Problem& p, const FusedOptions& opt) {
  SequencePlan sp;
  MaskArrays arrays;
  sp.mask = make_mask_desc(p, arrays);
  sp.mask.doc_ids = nullptr;                         // documents become sequences
  sp.mask.seq_lens_q = sp.mask.seq_lens_k = nullptr;  // lengths come from the sequences
  kernels::SeqLengths& lens = sp.lens;
  sp.packed = opt.placement == Placement::documents || p.layout == Layout::thd;
  if (sp.packed) {
    const bool docs = opt.placement == Placement::documents && p.find_mask<DocumentTerm>();
    sp.seqs = docs ? kernels::document_sequences(p) : kernels::row_sequences(p);
    for (int64_t s = 0; s < sp.seqs.size(); ++s) {
      lens.lq.push_back(sp.seqs.cu_q[s + 1] - sp.seqs.cu_q[s]);
      lens.lk.push_back(sp.seqs.cu_k[s + 1] - sp.seqs.cu_k[s]);
    }
    lens.store_q = lens.lq;
    lens.store_k = lens.lk;
  } else {
    lens = padded_lengths(p);
  }
  double mean_len = 0;
  for (int32_t l : lens.lq) mean_len += l;
  mean_len = lens.lq.empty() ? 0.0 : mean_len / static_cast<double>(lens.lq.size());
  int pack = opt.placement == Placement::documents ? kernels::choose_pack(static_cast<int>(p.group_size()), mean_len)
                                                   : 1;
  if (opt.pack > 0) pack = opt.pack;
  sp.fwd = choose_fwd_path(opt, pack, p);
  sp.bwd = choose_bwd_path(opt, p);
  sp.plan = kernels::plan_tiles(sp.mask, lens, static_cast<int>(p.heads_q), static_cast<int>(p.group_size()), pack,
                                static_cast<int>(p.head_dim), sp.fwd, sp.bwd, opt.fwd_rows);
  return sp;
}

class FusedInstance final : public BackendInstance {
 public:
  /// `bm`: the BlockMask of the block_mask placement, `sp`: the SequencePlan
  /// (plan_sequences) of the others, when the caller built them already (moved
  /// from), else null.
  FusedInstance(const Problem& p, const ProblemData& in, const FusedOptions& opt, BlockMask* bm = nullptr,
                SequencePlan* sp = nullptr);
  /// The flex schedule decision, for the report (extra.backend.schedule).
  void set_schedule_note(std::string note) { schedule_note_ = std::move(note); }
  /// Host time spent choosing the schedule before construction, counted as setup.
  void add_setup_ms(double ms) { setup_ms_ += ms; }
  ~FusedInstance() override {
    if (cudaStreamSynchronize(stream_.s) != cudaSuccess) (void)cudaGetLastError();
  }
  FusedInstance(const FusedInstance&) = delete;
  FusedInstance& operator=(const FusedInstance&) = delete;

  void forward() override { kernels::launch(params_, fwd_args_); }
  void backward() override { kernels::launch(params_, bwd_args_); }
  void poison_outputs() override {
    device::poison_nan(o_, p_.dtype, stream_.s);
    device::poison_nan(lse_, DType::fp32, stream_.s);
    device::poison_nan(dq_, p_.dtype, stream_.s);
    device::poison_nan(dk_, p_.dtype, stream_.s);
    device::poison_nan(dv_, p_.dtype, stream_.s);
    if (flex_ && flex_->dbias.count() > 0) device::poison_nan(flex_->dbias, DType::fp32, stream_.s);
  }
  void synchronize() override { ATTNBENCH_CHECK(cudaStreamSynchronize(stream_.s)); }
  AttentionOutputs read_outputs(bool with_grads) override { return download_outputs(with_grads)(); }
  std::function<AttentionOutputs()> download_outputs(bool with_grads) override;
  std::optional<uint64_t> outputs_digest(bool with_grads) override {
    std::vector<const DeviceBuffer*> out{&o_, &lse_};
    if (with_grads) out.insert(out.end(), {&dq_, &dk_, &dv_, flex_ ? &flex_->dbias : nullptr});
    return device::digest(out, stream_.s);
  }
  int64_t executed_pairs() const override { return plan_.executed_pairs; }
  double setup_ms() const override { return setup_ms_; }
  size_t allocated_bytes() const override {
    size_t n = 0;
    for (const DeviceBuffer* b : {&q_, &k_, &v_, &do_, &o_, &lse_, &dq_, &dk_, &dv_, &dq_accum_, &dsum_, &cu_q_,
                                  &cu_k_, &lens_q_, &lens_k_, &q_items_, &dq_items_, &k_items_, &tile_counters_})
      n += b->allocated_bytes();
    return n + (flex_ ? flex_->bytes() : 0);
  }
  void* stream() const override { return stream_.s; }
  nlohmann::json extra() const override;

 private:
  /// How the atomic mode's dK/dV kernel adds dQ: the Hopper kernel by TMA reduce-adds
  /// from shared memory (float32 adds in L2, as atomic), except its rel_bias dBias
  /// instance (no shared memory left for the tiles); the portable one by atomics.
  std::string dq_adds() const {
    const bool rel = flex_ && params_.mod == kernels::ModKind::rel_bias &&
                     params_.dbias_mode != kernels::DbiasMode::none;
    return bwd_path_ == kernels::BwdPath::sm90 && !rel ? "float32 TMA reduce-adds" : "float32 atomics";
  }
  /// How dQ is produced, for the report (extra.backend.dq_mode).
  std::string dq_mode() const {
    if (bwd_args_.shape.dq_direct)
      return dq_adds() + ", except the " +
             std::to_string(plan_.dq_direct_rows * 100 / std::max<int64_t>(plan_.query_rows, 1)) +
             "% of rows whose keys lie in one key block: stored directly by the dK/dV kernel";
    if (!opt_.deterministic) return dq_adds() + " (added by the dK/dV kernel)";
    return bwd_path_ == kernels::BwdPath::sm90 ? "deterministic (Hopper dQ kernel, no atomics)"
                                               : "deterministic (dQ kernel, no atomics)";
  }
  /// How the forward's CTAs take their query tiles, for the report
  /// (extra.backend.fwd_schedule).
  std::string fwd_schedule() const {
    const std::string turns =
        fwd_args_.shape.pingpong ? "; its two consumer warpgroups issue their GEMMs in turn (ping-pong)" : "";
    const std::string early =
        fwd_args_.shape.next_tile_early ? "; the next tile published after this tile's first K / V loads" : "";
    return (fwd_args_.shape.persistent ? kPersistentSchedule : kOneCtaSchedule) + turns + early;
  }
  /// How the Hopper dQ kernel's CTAs take their query tiles, for the report
  /// (extra.backend.dq_schedule); empty where that kernel does not run.
  std::string dq_schedule() const {
    if (!opt_.deterministic || bwd_path_ != kernels::BwdPath::sm90) return "";
    return bwd_args_.shape.persistent ? kPersistentSchedule : kOneCtaSchedule;
  }
  /// fwd_schedule / dq_schedule texts (the order itself: extra.backend.tile_order).
  static constexpr const char* kPersistentSchedule =
      "persistent: one CTA per resident slot claiming the query tiles in the TileScheduler's order in turn";
  static constexpr const char* kOneCtaSchedule = "one CTA per query tile, in the TileScheduler's order";
  /// Logical tensor -> the kernels' buffer order; back again.
  EncodedBuffer to_device(const HostTensor& t, TensorRole role) const;
  void set_strides();
  /// The forward and backward LaunchArgs of the plan, paths, tensor maps and stream.
  void set_launch_args();
  /// The work lists a Hopper kernel reads (q_items: the Hopper forward; k_items:
  /// the Hopper dK/dV kernel; dq_items: the Hopper dQ kernel), regrouped sequence
  /// by sequence (kernels::group_by_sequence) unless opt_.tile_order is
  /// longest_first; the portable kernels' lists stay longest first. Before the
  /// lists are uploaded.
  void order_items();
  /// tile_order_ and, for TileOrder::l2_groups, params_.q_head_group /
  /// kv_head_group (TileScheduler::decode) from the device's L2 size and the
  /// longest sequence's streamed operands (kernels::l2_head_group: K and V per KV
  /// head for forward and dQ tiles; the group's Q, dO, LSE and Dsum for dK/dV
  /// tiles), the lengths the valid ones of `lens`. Needs params_' heads and dtype.
  void set_tile_order(const kernels::SeqLengths& lens);
  /// The padded placement's physical layout of `role`.
  const PhysicalLayout& layout_of(TensorRole role) const {
    return role == TensorRole::q ? lq_ : role == TensorRole::k ? lk_ : role == TensorRole::v ? lv_ : lo_;
  }

  Problem p_;
  FusedOptions opt_;
  bool packed_ = false;  // tokens packed per sequence (cu_seqlens)
  Sequences seqs_;
  std::string schedule_note_;  // flex: which schedule ran and why (extra.backend.schedule)
  /// The TileScheduler's order, for the report (extra.backend.tile_order; set_tile_order).
  std::string tile_order_;
  PhysicalLayout lq_, lk_, lv_, lo_;
  kernels::TilePlan plan_;
  kernels::FwdPath fwd_path_ = kernels::FwdPath::sm80;
  kernels::BwdPath bwd_path_ = kernels::BwdPath::sm80;
  kernels::BwdTensorMaps bwd_maps_{};
  kernels::FwdTensorMaps fwd_maps_{};  // the Hopper forward's TMA descriptors
  AttnParams params_;
  kernels::LaunchArgs fwd_args_, bwd_args_;
  double setup_ms_ = 0.0;
  std::string why_portable_bwd_;  // flex: why the backward runs on the portable kernels

  std::unique_ptr<flex::FlexBuffers> flex_;  // block_mask placement only
  device::OwnedStream stream_;
  DeviceBuffer q_, k_, v_, do_, o_, lse_, dq_, dk_, dv_, dq_accum_, dsum_;
  DeviceBuffer cu_q_, cu_k_, lens_q_, lens_k_, q_items_, dq_items_, k_items_;
  DeviceBuffer tile_counters_;  ///< LaunchArgs::tile_counters of the forward and of the backward
};

EncodedBuffer FusedInstance::to_device(const HostTensor& t, TensorRole role) const {
  if (packed_) return kernels::encode_tokens(t, seqs_, role == TensorRole::k || role == TensorRole::v, p_.dtype);
  return encode_physical(t, layout_of(role), p_.dtype);
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

FusedInstance::FusedInstance(const Problem& p, const ProblemData& in, const FusedOptions& opt, BlockMask* bm,
                             SequencePlan* sp)
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
  MaskDesc md;
  kernels::SeqLengths lens;
  if (opt.placement == Placement::block_mask) {
    flex_ = std::make_unique<flex::FlexBuffers>();
    flex_->host = bm ? std::move(*bm) : build_block_mask(p, opt.block_size, opt.block_size);
    MaskArrays arrays;
    md = make_mask_desc(p, arrays);
    md.doc_ids = nullptr;  // the arrays are set by setup_flex (flex_mask_form)
    md.seq_lens_q = md.seq_lens_k = nullptr;
    fwd_path_ = choose_fwd_path(opt, 1, p);  // 64-key steps either way (plan.tile_keys)
    bwd_path_ = choose_flex_bwd_path(p, opt, &why_portable_bwd_);
    const int hd = static_cast<int>(p.head_dim);
    plan_ = kernels::plan_block_tiles(flex_->host, p.batch, static_cast<int>(p.heads_q), bwd_path_,
                                      kernels::flex_fwd_rows(flex_->host, fwd_path_, hd), hd);
    lens = padded_lengths(p);
  } else {
    SequencePlan planned = sp ? std::move(*sp) : plan_sequences(p, opt);
    packed_ = planned.packed;
    seqs_ = std::move(planned.seqs);
    lens = std::move(planned.lens);
    md = planned.mask;
    fwd_path_ = planned.fwd;
    bwd_path_ = planned.bwd;
    plan_ = std::move(planned.plan);
  }

  // Inputs, outputs, workspaces.
  q_ = device::upload(to_device(in.q, TensorRole::q), st);
  k_ = device::upload(to_device(in.k, TensorRole::k), st);
  v_ = device::upload(to_device(in.v, TensorRole::v), st);
  do_ = device::upload(to_device(in.d_o, TensorRole::o), st);
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
  order_items();
  q_items_ = upload_items(plan_.q_items, st);
  dq_items_ = upload_items(plan_.dq_items, st);
  k_items_ = upload_items(plan_.k_items, st);
  tile_counters_ = DeviceBuffer(4, sizeof(int32_t));  // the forward's pair, the dQ kernel's pair
  tile_counters_.memset(0, st);

  AttnParams& a = params_;
  a = shape_params(p, static_cast<int64_t>(lens.lq.size()), opt.block_size);
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
  a.seq_q = packed_ ? (lens.lq.empty() ? 0 : *std::max_element(lens.lq.begin(), lens.lq.end()))
                    : static_cast<int32_t>(p.seq_q);
  a.seq_k = packed_ ? (lens.lk.empty() ? 0 : *std::max_element(lens.lk.begin(), lens.lk.end()))
                    : static_cast<int32_t>(p.seq_k);
  a.cu_seqlens_q = cu_q_.as<const int32_t>();
  a.cu_seqlens_k = cu_k_.as<const int32_t>();
  a.seqlens_q = lens_q_.as<const int32_t>();
  a.seqlens_k = lens_k_.as<const int32_t>();
  a.mask = md;
  set_tile_order(lens);
  if (flex_) flex::setup_flex(p, in, opt.dbias, flex_.get(), &a, st);
  // TMA descriptors of the Hopper kernels. A problem without tokens (every document id -1: no
  // sequence) launches no tile, and the driver refuses a tensor map of zero rows
  // (found by `attnbench hunt`), so none is encoded then.
  const int64_t q_rows = packed_ ? seqs_.cu_q.back() : p.seq_q, k_rows = packed_ ? seqs_.cu_k.back() : p.seq_k;
  set_launch_args();
  if (fwd_path_ == kernels::FwdPath::sm90 && q_rows > 0 && k_rows > 0)
    fwd_maps_ = kernels::make_fwd_tensor_maps(a, q_rows, k_rows, packed_ ? 1 : p.batch, plan_.tile_keys,
                                              kernels::fwd_rows_resolved(a, fwd_args_.shape), fwd_args_.shape.pack);
  if (bwd_path_ == kernels::BwdPath::sm90 && q_rows > 0 && k_rows > 0)
    bwd_maps_ = kernels::make_bwd_tensor_maps(a, q_rows, k_rows, packed_ ? 1 : p.batch, bwd_args_.shape.pack);
  ATTNBENCH_CHECK(cudaStreamSynchronize(st));
  setup_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void FusedInstance::order_items() {
  if (opt_.tile_order == TileOrder::longest_first) return;
  const bool f90 = fwd_path_ == kernels::FwdPath::sm90, b90 = bwd_path_ == kernels::BwdPath::sm90;
  if (f90) kernels::group_by_sequence(plan_.q_items);
  if (b90) kernels::group_by_sequence(plan_.k_items);
  if (b90 && opt_.deterministic) kernels::group_by_sequence(plan_.dq_items);
}

void FusedInstance::set_tile_order(const kernels::SeqLengths& lens) {
  const bool f90 = fwd_path_ == kernels::FwdPath::sm90, b90 = bwd_path_ == kernels::BwdPath::sm90;
  if (opt_.tile_order == TileOrder::longest_first || (!f90 && !b90)) {
    tile_order_ = std::string("longest first over all sequences, every head of an item together (") +
                  (f90 || b90 ? "tile_order=longest_first" : "the portable kernels' order") + ")";
    return;
  }
  const std::string which = f90 == b90 ? std::string()
                            : f90      ? std::string(" (the Hopper forward; the portable backward longest first)")
                                       : std::string(" (the Hopper backward; the portable forward longest first)");
  if (opt_.tile_order == TileOrder::sequences) {
    tile_order_ =
        "sequence by sequence, longest first in each, every head of an item together (tile_order=sequences)" + which;
    return;
  }
  AttnParams& a = params_;
  int l2_bytes = 0;
  ATTNBENCH_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device::selected_device()));
  const int64_t budget = l2_bytes / kernels::kL2GroupDivisor;
  const int64_t es = dtype_bytes(p_.dtype), row = (p_.head_dim + p_.head_dim_v) * es;
  const int pack = plan_.pack;
  const int64_t max_q = lens.lq.empty() ? 0 : *std::max_element(lens.lq.begin(), lens.lq.end());
  const int64_t max_k = lens.lk.empty() ? 0 : *std::max_element(lens.lk.begin(), lens.lk.end());
  if (max_k > 0) a.q_head_group = kernels::l2_head_group(budget, max_k * row, a.group / pack, a.heads_q / pack);
  if (max_q > 0)  // Q and dO rows, and the LSE and Dsum floats, of the group's query heads
    a.kv_head_group = kernels::l2_head_group(budget, max_q * a.group * (row + 8), 1, a.heads_kv);
  auto groups = [](int g, const char* what) {
    return g > 0 ? std::to_string(g) + " " + what + " per group" : std::string("all ") + what + " in one group";
  };
  tile_order_ = "sequence by sequence, heads in L2 groups (tile_order=l2_groups; budget " +
                std::to_string(budget >> 20) + " MiB of the " + std::to_string(l2_bytes >> 20) +
                " MiB L2): forward and dQ tiles " + groups(a.q_head_group, "query-head chunks") + ", dK/dV tiles " +
                groups(a.kv_head_group, "KV heads") + which;
}

void FusedInstance::set_launch_args() {
  kernels::LaunchArgs& f = fwd_args_;
  f.shape.direction = kernels::Direction::forward;
  f.shape.flex = flex_ != nullptr;
  f.shape.fwd_path = fwd_path_;
  f.shape.pack = plan_.pack;
  f.shape.rows = plan_.tile_rows * plan_.pack;
  f.q_items = q_items_.as<const WorkItem>();
  f.n_q_items = static_cast<int>(plan_.q_items.size());
  f.fwd_maps = &fwd_maps_;
  f.tile_counters = tile_counters_.as<int>();
  f.stream = stream_.s;
  if (const std::string why = kernels::persistent_reason(f.shape, params_.head_dim); !why.empty()) {
    if (opt_.persistent.value_or(false)) throw std::invalid_argument(opt_.name + ": persistent=on: " + why);
  } else {
    f.shape.persistent = opt_.persistent.value_or(true);
  }
  if (opt_.pingpong) {
    if (const std::string why = kernels::pingpong_reason(params_, f.shape); !why.empty())
      throw std::invalid_argument(opt_.name + ": pingpong=on: " + why);
    f.shape.pingpong = true;
  }
  if (opt_.next_tile_early) {
    if (const std::string why = kernels::next_tile_reason(f.shape); !why.empty())
      throw std::invalid_argument(opt_.name + ": next_tile=early: " + why);
    f.shape.next_tile_early = true;
  }
  kernels::LaunchArgs& b = bwd_args_;
  b.shape = f.shape;
  b.shape.direction = kernels::Direction::backward;
  b.shape.bwd_path = bwd_path_;
  b.shape.rows = 0;
  b.shape.persistent = false;
  b.shape.pingpong = false;
  b.shape.next_tile_early = false;
  b.shape.deterministic = opt_.deterministic;
  if (kernels::persistent_reason(b.shape, params_.head_dim).empty())  // the Hopper dQ kernel
    b.shape.persistent = opt_.persistent.value_or(true);
  if (const std::string why = kernels::dq_direct_reason(b.shape); !why.empty()) {
    if (opt_.dq_direct.value_or(false)) throw std::invalid_argument(opt_.name + ": dq_direct=on: " + why);
  } else {
    b.shape.dq_direct = opt_.dq_direct.value_or(kernels::dq_direct_rows_pay(plan_));
  }
  b.dq_items = dq_items_.as<const WorkItem>();
  b.n_dq_items = static_cast<int>(plan_.dq_items.size());
  b.k_items = k_items_.as<const WorkItem>();
  b.n_k_items = static_cast<int>(plan_.k_items.size());
  b.q_numel = static_cast<int64_t>(dq_.count());
  b.scratch_floats = flex_ ? flex_->scratch_floats : 0;
  b.bwd_maps = &bwd_maps_;
  b.tile_counters = tile_counters_.as<int>() + 2;
  b.stream = stream_.s;
}

std::function<AttentionOutputs()> FusedInstance::download_outputs(bool with_grads) {
  synchronize();
  // The bits now (the device memory may go after this); the logical float64
  // tensors when the function is called, from copies of the layouts they need.
  auto d = std::make_shared<device::OutputBits>(device::download_output_bits(
      o_, lse_, dq_, dk_, dv_, flex_ ? &flex_->dbias : nullptr, p_.dtype, with_grads, stream_.s));
  return [d, with_grads, p = p_, packed = packed_, seqs = seqs_, lq = lq_, lk = lk_, lv = lv_, lo = lo_] {
    auto logical = [&](EncodedBuffer& phys, TensorRole role, std::vector<int64_t> shape) {
      const PhysicalLayout& l = role == TensorRole::q ? lq : role == TensorRole::k ? lk : role == TensorRole::v ? lv : lo;
      HostTensor t = packed ? kernels::decode_tokens(phys, std::move(shape), seqs,
                                                     role == TensorRole::k || role == TensorRole::v, 0.0)
                            : decode_physical(phys, l, 0.0);
      phys = EncodedBuffer();  // the bits go as soon as their tensor exists
      return t;
    };
    AttentionOutputs out;
    out.o = logical(d->o, TensorRole::o, {p.batch, p.heads_q, p.seq_q, p.head_dim_v});
    if (packed) {
      out.lse = HostTensor({p.batch, p.heads_q, p.seq_q}, -INFINITY);
      const int64_t T = seqs.cu_q.back();
      for (int64_t s = 0; s < seqs.size(); ++s)
        for (int32_t tok = seqs.cu_q[s]; tok < seqs.cu_q[s + 1]; ++tok)
          for (int64_t h = 0; h < p.heads_q; ++h)
            out.lse.data[static_cast<size_t>((seqs.row[s] * p.heads_q + h) * p.seq_q + seqs.start_q[s] +
                                             (tok - seqs.cu_q[s]))] = d->lse[static_cast<size_t>(h * T + tok)];
    } else {
      out.lse = HostTensor({p.batch, p.heads_q, p.seq_q});
      out.lse.data = std::move(d->lse);
    }
    if (with_grads) {
      out.dq = logical(d->dq, TensorRole::q, {p.batch, p.heads_q, p.seq_q, p.head_dim});
      out.dk = logical(d->dk, TensorRole::k, {p.batch, p.heads_kv, p.seq_k, p.head_dim});
      out.dv = logical(d->dv, TensorRole::v, {p.batch, p.heads_kv, p.seq_k, p.head_dim_v});
      out.dbias = std::move(d->dbias);
    }
    return out;
  };
}

nlohmann::json FusedInstance::extra() const {
  nlohmann::json j;
  if (!schedule_note_.empty()) j["schedule"] = schedule_note_;
  j["tile_order"] = tile_order_;
  if (flex_) {
    const BlockMask& bm = flex_->host;
    const bool f90 = fwd_path_ == kernels::FwdPath::sm90, b90 = bwd_path_ == kernels::BwdPath::sm90;
    j["kernel"] = std::string("attnbench fused, BlockMask walk: forward on ") +
                  (f90 ? "the Hopper path (TMA, wgmma)" : "mma.sync m16n8k16 (sm_80 path)") + ", backward on " +
                  (b90 ? "the Hopper path (TMA, wgmma)" : "mma.sync m16n8k16 (sm_80 path)");
    j["fwd_path"] = f90 ? "sm90" : "sm80";
    j["fwd_schedule"] = fwd_schedule();
    j["bwd_path"] = b90 ? "sm90" : "sm80";
    if (!b90) j["bwd_path_reason"] = why_portable_bwd_;
    const bool pairs = params_.mask.doc_ids != nullptr || params_.mask.block_density >= 0.0;
    j["path"] = std::string("BlockMask tiles; full tiles skip the mask, partial tiles ") +
                (pairs ? "evaluate mask_allowed per pair (documents split into several runs, or block_sparse on "
                         "blocks that do not divide 128)"
                       : params_.doc_first ? "compare keys with each row's interval (interval terms and document run)"
                                           : "compare keys with each row's interval");
    j["block_size"] = std::to_string(bm.q_block) + " x " + std::to_string(bm.kv_block);
    j["fwd_tile"] = std::to_string(plan_.tile_rows) + " rows x " + std::to_string(plan_.tile_keys) + " keys";
    j["block_mask"] = {{"partial_tiles", bm.num_partial()}, {"full_tiles", bm.num_full()},
                       {"q_blocks", bm.num_q_blocks}, {"kv_blocks", bm.num_kv_blocks}, {"batch_broadcast", bm.B == 1}};
    j["tiles"] = kernels::describe(plan_, static_cast<int>(p_.heads_q), static_cast<int>(p_.heads_kv));
    j["dq_mode"] = dq_mode();
    if (const std::string s = dq_schedule(); !s.empty()) j["dq_schedule"] = s;
    if (p_.has_learnable_bias())
      j["dbias_mode"] = opt_.dbias == kernels::DbiasMode::atomic ? "float32 atomics (one per bias entry per tile)"
                        : opt_.dbias == kernels::DbiasMode::deterministic
                            ? "deterministic (per-tile partial sums, ordered reduction)"
                            : "not computed";
    return j;
  }
  const bool f90 = fwd_path_ == kernels::FwdPath::sm90, b90 = bwd_path_ == kernels::BwdPath::sm90;
  j["kernel"] = std::string("attnbench fused: forward on ") +
                (f90 ? "the Hopper path (TMA, wgmma m64nNk16, producer / consumer warpgroups; sm_90a)"
                     : "mma.sync m16n8k16 (ldmatrix, cp.async; sm_80 path)") +
                ", backward on " +
                (b90 ? "the Hopper path (TMA, wgmma; sm_90a)" : "mma.sync m16n8k16 (sm_80 path)");
  j["fwd_path"] = f90 ? "sm90" : "sm80";
  j["fwd_schedule"] = fwd_schedule();
  j["bwd_path"] = b90 ? "sm90" : "sm80";
  j["placement"] = packed_ ? (opt_.placement == Placement::documents && p_.find_mask<DocumentTerm>()
                                 ? "documents as packed sequences (THD)"
                                 : "THD, one sequence per batch row (cu_seqlens_q / cu_seqlens_k from its valid lengths)")
                           : std::string(to_string(p_.layout)) + " padded batch";
  j["sequences"] = static_cast<int64_t>(plan_.q_items.empty() ? 0 : params_.num_seqs);
  j["tiles"] = kernels::describe(plan_, static_cast<int>(p_.heads_q), static_cast<int>(p_.heads_kv));
  j["fwd_tile"] = std::to_string(plan_.tile_rows * plan_.pack) + " rows (" + std::to_string(plan_.pack) + " head" +
                  (plan_.pack > 1 ? "s" : "") + " x " + std::to_string(plan_.tile_rows) + " positions) x " +
                  std::to_string(plan_.tile_keys) + " keys";
  j["gqa_pack"] = plan_.pack;
  j["dq_mode"] = dq_mode();
  if (const std::string s = dq_schedule(); !s.empty()) j["dq_schedule"] = s;
  return j;
}

}  // namespace

namespace {

/// The block_mask placement's limits (the flex backend).
std::string block_mask_reason(const Problem& p) {
  if (p.layout == Layout::thd)
    return "flex: THD layout not supported (the BlockMask walks a padded batch; packed documents run on varlen)";
  return {};
}

}  // namespace

namespace {

const char* backend_prefix(Placement placement) {
  return placement == Placement::documents ? "varlen: " : placement == Placement::block_mask ? "flex: " : "flash: ";
}

}  // namespace

std::string asked_path_reason(const Problem& p, Placement placement, const KernelPaths& paths) {
  const kernels::AttnParams shape = shape_params(p, p.batch, kernels::kFwdBlockMWide);
  kernels::LaunchShape s;
  s.flex = placement == Placement::block_mask;
  if (paths.fwd == KernelPath::sm90) {
    s.direction = kernels::Direction::forward;
    s.fwd_path = kernels::FwdPath::sm90;
    if (std::string why = kernels::can_implement(shape, s); !why.empty()) return backend_prefix(placement) + why;
  }
  if (paths.bwd == KernelPath::sm90 && !s.flex) {
    s.direction = kernels::Direction::backward;
    s.bwd_path = kernels::BwdPath::sm90;
    if (std::string why = kernels::can_implement(shape, s); !why.empty()) return backend_prefix(placement) + why;
  }
  return {};
}

std::string unsupported_reason(const Problem& p, Placement placement) {
  const std::string who = backend_prefix(placement);
  // What the kernels themselves can run: the family's one capability check, on
  // the portable path (every CUDA build instantiates it; the Hopper path is chosen
  // per instance where it can run, fused_instance.cpp).
  const kernels::AttnParams shape = shape_params(p, p.batch, kernels::kFwdBlockMWide);
  for (const kernels::Direction d : {kernels::Direction::forward, kernels::Direction::backward}) {
    kernels::LaunchShape s;
    s.direction = d;
    s.flex = placement == Placement::block_mask;
    if (const std::string why = kernels::can_implement(shape, s); !why.empty()) return who + why;
  }
  if (p.seq_q >= kMaxPositions || p.seq_k >= kMaxPositions || p.batch * p.seq_q >= kMaxPositions ||
      p.batch * p.seq_k >= kMaxPositions)
    return who + "sequences beyond 2^30 positions not supported (32-bit positions)";
  if (placement == Placement::block_mask) return block_mask_reason(p);
  const bool docs = p.find_mask<DocumentTerm>() != nullptr;
  if (placement == Placement::padded) {
    if (docs) return who + "document masks run on the varlen backend (packed sequences); flash runs causal, "
                          "sliding_window, padding and prefix_lm";
    if (p.find_mask<BlockSparseTerm>())
      return who + "block_sparse masks need the flex backend (flash runs interval masks: causal, sliding_window, "
                   "padding, prefix_lm)";
    return {};
  }
  for (const MaskTerm& t : p.mask)
    if (!std::holds_alternative<DocumentTerm>(t) && !std::holds_alternative<PaddingTerm>(t) &&
        !std::holds_alternative<CausalTerm>(t) && !std::holds_alternative<SlidingWindowTerm>(t))
      return who + "mask term " + mask_kind_name(t) +
             " cannot be expressed with cu_seqlens (document, padding, causal and sliding_window only)";
  if (!docs) return {};  // one sequence per batch row: its valid tokens (padding lengths, THD), cu_seqlens_q / _k
  if (p.find_mask<PaddingTerm>())
    return who + "document and padding masks together (give padding tokens document id -1 instead)";
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

namespace {

/// unsupported_reason(p, placement) without its backend prefix ("varlen: ", "flash: ").
std::string placement_refusal(const Problem& p, Placement placement) {
  std::string why = unsupported_reason(p, placement);
  if (const size_t colon = why.find(": "); colon != std::string::npos) why = why.substr(colon + 2);
  return why;
}

/// A schedule of flex other than the BlockMask walk: its placement and why it cannot run p.
struct FlexCandidate {
  FlexSchedule schedule;
  const char* name;
  Placement placement;
  std::string refusal;
};

}  // namespace

std::string flex_documents_refusal(const Problem& p) {
  if (!p.find_mask<DocumentTerm>()) return "no document mask";
  return placement_refusal(p, Placement::documents);
}

std::string flex_intervals_refusal(const Problem& p) { return placement_refusal(p, Placement::padded); }

std::unique_ptr<BackendInstance> make_instance(const Problem& p, const ProblemData& in, const FusedOptions& opt) {
  if (opt.placement != Placement::block_mask || opt.schedule == FlexSchedule::block_mask) {
    auto inst = std::make_unique<FusedInstance>(p, in, opt);
    if (opt.placement == Placement::block_mask) inst->set_schedule_note("block_mask (asked for): the BlockMask walk");
    return inst;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const bool automatic = opt.schedule == FlexSchedule::automatic;
  std::vector<FlexCandidate> candidates = {
      {FlexSchedule::documents, "documents", Placement::documents, flex_documents_refusal(p)},
      {FlexSchedule::intervals, "intervals", Placement::padded, flex_intervals_refusal(p)}};
  // The possible candidates' plans (the one asked for, or all in automatic), the fewest pairs first on ties in order.
  std::optional<SequencePlan> best;
  FusedOptions best_opt = opt;
  const FlexCandidate* best_c = nullptr;
  std::string counts = "executed pairs:", refusals;
  for (const FlexCandidate& c : candidates) {
    if (!automatic && c.schedule != opt.schedule) continue;
    if (!c.refusal.empty()) {
      if (!automatic)
        throw std::invalid_argument(opt.name + ": the " + c.name + " schedule cannot run this problem: " + c.refusal);
      if (!(c.schedule == FlexSchedule::documents && !p.find_mask<DocumentTerm>()))  // not news without documents
        refusals += std::string(refusals.empty() ? "" : "; ") + c.name + ": " + c.refusal;
      continue;
    }
    FusedOptions o = opt;
    o.placement = c.placement;
    o.pack = 0;  // the placement's own GQA packing (choose_pack for documents)
    SequencePlan sp = plan_sequences(p, o);
    counts += std::string(" ") + c.name + " " + std::to_string(sp.plan.executed_pairs) + ",";
    if (!best || sp.plan.executed_pairs < best->plan.executed_pairs) {
      best = std::move(sp);
      best_opt = o;
      best_c = &c;
    }
  }
  if (!automatic) {
    auto inst = std::make_unique<FusedInstance>(p, in, best_opt, nullptr, &*best);
    inst->add_setup_ms(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    inst->set_schedule_note(std::string(best_c->name) + " (asked for); " + counts.substr(0, counts.size() - 1));
    return inst;
  }
  BlockMask bm = build_block_mask(p, opt.block_size, opt.block_size);
  const int64_t bm_pairs = bm.executed_pairs_per_head(p.batch) * p.heads_q;
  counts += " BlockMask " + std::to_string(bm.q_block) + " x " + std::to_string(bm.kv_block) + " " +
            std::to_string(bm_pairs);
  const double decide_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const bool use_best = best && best->plan.executed_pairs <= bm_pairs;
  auto inst = use_best ? std::make_unique<FusedInstance>(p, in, best_opt, nullptr, &*best)
                       : std::make_unique<FusedInstance>(p, in, opt, &bm);
  inst->add_setup_ms(decide_ms);
  std::string note = std::string(use_best ? best_c->name : "block_mask") + " (automatic: the fewest executed pairs; " +
                     counts + ")";
  if (!refusals.empty()) note += "; cannot run this problem: " + refusals;
  inst->set_schedule_note(note);
  return inst;
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

}  // namespace attnbench::fused
