// The `cpu` backend: instance management (layouts, buffers, BlockMask) around
// the FlashAttention-2 kernels of cpu_attention.cpp.
#include "backends/cpu/cpu_backend.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "backends/cpu/cpu_attention.hpp"
#include "harness/model/block_mask.hpp"
#include "harness/model/layout.hpp"
#include "harness/model/mask.hpp"

namespace attnbench {
namespace {

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }
std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

void require_shape(const HostTensor& t, std::vector<int64_t> want, const char* name) {
  if (t.shape != want || static_cast<int64_t>(t.data.size()) != t.numel())
    throw std::invalid_argument(std::string("cpu backend: input ") + name + " has the wrong shape");
}

/// Rows stored per batch row in layout `l` (S, or the THD valid lengths).
std::vector<int64_t> stored_rows(const PhysicalLayout& l) {
  std::vector<int64_t> out(static_cast<size_t>(l.B), l.S);
  if (l.layout == Layout::thd)
    for (int64_t b = 0; b < l.B; ++b) out[static_cast<size_t>(b)] = l.cu_seqlens[b + 1] - l.cu_seqlens[b];
  return out;
}

template <class T>
size_t bytes_of(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

/// One prepared case: float32 buffers in the physical layout, the BlockMask and
/// the kernel arguments pointing into them. Not copyable (the arguments borrow).
class CpuInstance final : public BackendInstance {
 public:
  CpuInstance(const Problem& p, const ProblemData& in, const CpuBackendOptions& opt) : p_(p) {
    require_shape(in.q, {p.batch, p.heads_q, p.seq_q, p.head_dim}, "q");
    require_shape(in.k, {p.batch, p.heads_kv, p.seq_k, p.head_dim}, "k");
    require_shape(in.v, {p.batch, p.heads_kv, p.seq_k, p.head_dim_v}, "v");
    require_shape(in.d_o, {p.batch, p.heads_q, p.seq_q, p.head_dim_v}, "d_o");
    if (static_cast<int64_t>(in.bias.size()) != p.bias_numel())
      throw std::invalid_argument("cpu backend: bias has " + std::to_string(in.bias.size()) + " elements, expected " +
                                  std::to_string(p.bias_numel()));
    if (static_cast<int64_t>(in.offset.size()) != p.offset_numel())
      throw std::invalid_argument("cpu backend: offset has the wrong length");
    for (int32_t o : in.offset)
      if (o < 0 || o >= p.score_mod.size) throw std::invalid_argument("cpu backend: offset value out of range");

    const auto t0 = std::chrono::steady_clock::now();
    bm_ = build_block_mask(p, kCpuQBlock, kCpuKVBlock);
    setup_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    executed_pairs_ = bm_.executed_pairs_per_head(p.batch) * p.heads_q;

    auto& a = args_;
    a.threads = opt.threads;
    a.lq = physical_layout(p, TensorRole::q);
    a.lk = physical_layout(p, TensorRole::k);
    a.lv = physical_layout(p, TensorRole::v);
    a.lo = physical_layout(p, TensorRole::o);
    q_ = to_float(to_physical(in.q, a.lq));
    k_ = to_float(to_physical(in.k, a.lk));
    v_ = to_float(to_physical(in.v, a.lv));
    d_o_ = to_float(to_physical(in.d_o, a.lo));
    bias_ = to_float(in.bias);
    offset_ = in.offset;
    o_.assign(static_cast<size_t>(a.lo.numel()), 0.0f);
    o_f64_.assign(o_.size(), 0.0);
    lse_.assign(static_cast<size_t>(p.lse_numel()), 0.0f);
    lse_f64_.assign(static_cast<size_t>(p.lse_numel()), 0.0);
    dq_.assign(static_cast<size_t>(a.lq.numel()), 0.0f);
    dk_.assign(static_cast<size_t>(a.lk.numel()), 0.0f);
    dv_.assign(static_cast<size_t>(a.lv.numel()), 0.0f);
    dbias_.assign(static_cast<size_t>(p.bias_numel()), 0.0f);

    a.B = p.batch;
    a.Hq = p.heads_q;
    a.Hkv = p.heads_kv;
    a.Sq = p.seq_q;
    a.Sk = p.seq_k;
    a.Dqk = p.head_dim;
    a.Dv = p.head_dim_v;
    a.scale = p.softmax_scale() * opt.scale_factor;
    a.dtype = p.dtype;
    a.q = q_.data();
    a.k = k_.data();
    a.v = v_.data();
    a.d_o = d_o_.data();
    a.o = o_.data();
    a.lse = lse_.data();
    a.o_f64 = o_f64_.data();
    a.lse_f64 = lse_f64_.data();
    a.dq = dq_.data();
    a.dk = dk_.data();
    a.dv = dv_.data();
    a.bias_numel = p.bias_numel();
    a.dbias = a.bias_numel > 0 ? dbias_.data() : nullptr;
    a.stored_q = stored_rows(a.lq);
    a.stored_k = stored_rows(a.lk);
    a.mask = make_mask_desc(p, mask_arrays_);
    a.mod = make_score_mod_desc(p, bias_.empty() ? nullptr : bias_.data(), offset_.empty() ? nullptr : offset_.data());
    a.bm = &bm_;
    a.apply_mask = !opt.drop_mask;
    if (opt.skip_one_block && bm_.num_q_blocks > 0) {
      // The first tile of the forward walk of (b = 0, h = 0, q-block 0).
      for_each_tile(bm_, 0, 0, 0, [&](int64_t kb, bool) {
        if (a.skip_kb < 0) a.skip_kb = kb;
      });
    }
  }
  CpuInstance(const CpuInstance&) = delete;
  CpuInstance& operator=(const CpuInstance&) = delete;

  void forward() override {
    cpu_kernels::forward(args_);
    forward_done_ = true;
  }

  void backward() override {
    if (!forward_done_)
      throw std::logic_error("cpu backend: backward() needs a forward() after the last poison_outputs()");
    cpu_kernels::backward(args_);
  }

  void poison_outputs() override {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (auto* buf : {&o_, &lse_, &dq_, &dk_, &dv_, &dbias_}) std::fill(buf->begin(), buf->end(), nan);
    std::fill(lse_f64_.begin(), lse_f64_.end(), std::numeric_limits<double>::quiet_NaN());
    std::fill(o_f64_.begin(), o_f64_.end(), std::numeric_limits<double>::quiet_NaN());
    forward_done_ = false;
  }

  AttentionOutputs read_outputs(bool with_grads) override {
    const auto& a = args_;
    AttentionOutputs out;
    out.o = from_physical(to_double(o_), a.lo, 0.0);
    out.lse = HostTensor({p_.batch, p_.heads_q, p_.seq_q});
    out.lse.data = to_double(lse_);
    if (with_grads) {
      out.dq = from_physical(to_double(dq_), a.lq, 0.0);
      out.dk = from_physical(to_double(dk_), a.lk, 0.0);
      out.dv = from_physical(to_double(dv_), a.lv, 0.0);
      out.dbias = to_double(dbias_);
    }
    return out;
  }

  int64_t executed_pairs() const override { return executed_pairs_; }
  double setup_ms() const override { return setup_ms_; }

  size_t allocated_bytes() const override {
    size_t n = 0;
    for (auto* buf : {&q_, &k_, &v_, &d_o_, &o_, &lse_, &dq_, &dk_, &dv_, &bias_, &dbias_}) n += bytes_of(*buf);
    n += bytes_of(offset_);
    for (auto* l : {&bm_.kv_num_blocks, &bm_.kv_indices, &bm_.full_kv_num_blocks, &bm_.full_kv_indices,
                    &bm_.q_num_blocks, &bm_.q_indices, &bm_.full_q_num_blocks, &bm_.full_q_indices})
      n += bytes_of(*l);
    n += bytes_of(mask_arrays_.doc_ids) + bytes_of(mask_arrays_.seq_lens_q) + bytes_of(mask_arrays_.seq_lens_k);
    return n + CpuBackend().workspace_bytes(p_);  // includes o_f64_ and lse_f64_
  }

 private:
  Problem p_;
  BlockMask bm_;
  MaskArrays mask_arrays_;
  std::vector<float> q_, k_, v_, d_o_, o_, lse_, dq_, dk_, dv_, bias_, dbias_;
  std::vector<int32_t> offset_;
  std::vector<double> lse_f64_;  ///< float64 LSE kept for the backward
  std::vector<double> o_f64_;    ///< O before dtype rounding, kept for D in the backward
  cpu_kernels::AttentionArgs args_;
  double setup_ms_ = 0.0;
  int64_t executed_pairs_ = 0;
  bool forward_done_ = false;
};

}  // namespace

std::string CpuBackend::description() const {
  return "tiled FlashAttention-2 on the CPU (" + std::to_string(kCpuQBlock) + "x" + std::to_string(kCpuKVBlock) +
         " BlockMask tiles, float32 scores, float64 sums, all cores or `threads`, deterministic)";
}

Support CpuBackend::supports(const Problem& p) const {
  try {
    validate(p);
  } catch (const std::exception& e) {
    return Support::no(std::string("invalid problem: ") + e.what());
  }
  return Support::yes();
}

size_t CpuBackend::workspace_bytes(const Problem& p) const {
  // Pass scratch plus the float64 O and LSE the forward saves for the backward.
  const size_t saved = static_cast<size_t>(p.o_numel() + p.lse_numel()) * sizeof(double);
  return cpu_kernels::scratch_bytes(p, options_.threads) + saved;
}

OptionSpecs CpuBackend::option_specs() const {
  return {OptionSpec::integer("threads", 0, 0, 4096,
                              "worker threads of the passes; 0 = every hardware thread (capped at the pool's size)")};
}

void CpuBackend::apply_options(const OptionValues& values) {
  options_.threads = static_cast<int>(values.integer("threads"));
}

std::unique_ptr<BackendInstance> CpuBackend::prepare(const Problem& p, const ProblemData& inputs) {
  return std::make_unique<CpuInstance>(p, inputs, options_);
}

ATTNBENCH_REGISTER_BACKEND(CpuBackend);

}  // namespace attnbench
