// The naive backend: host side (plan, cuBLAS calls, buffers). Kernels are in
// naive_kernels.cu; the algorithm and the GQA / layout mapping are described in
// naive.hpp.
//
// cuBLAS is column-major. A row-major [rows, cols] matrix with row stride ld is,
// to cuBLAS, a cols x rows matrix with leading dimension ld (its transpose). So
// the row-major product C = A B is computed as C^T = B^T A^T, i.e. cuBLAS's
// (m, n, k) = (cols of C, rows of C, inner). Per (b, h):
//   S  [Sq,Sk] = scale Q K^T : gemm(T, N, m=Sk, n=Sq, k=D,  A=K,  B=Q)
//   O  [Sq,Dv] = P V         : gemm(N, N, m=Dv, n=Sq, k=Sk, A=V,  B=P)
//   dP [Sq,Sk] = dO V^T      : gemm(T, N, m=Sk, n=Sq, k=Dv, A=V,  B=dO)
//   dQ [Sq,D]  = scale dS K  : gemm(N, N, m=D,  n=Sq, k=Sk, A=K,  B=dS)
//   dK [Sk,D]  = scale dS^T Q: gemm(N, T, m=D,  n=Sk, k=Sq, A=Q,  B=dS)
//   dV [Sk,Dv] = P^T dO      : gemm(N, T, m=Dv, n=Sk, k=Sq, A=dO, B=P)
// The leading dimension of Q/K/V/O is the token stride of the physical layout
// (H * D in BSHD, D in BHSD); scores are [B, Hq, Sq, Sk] with ld = Sk.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <chrono>
#include <climits>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/naive/naive.hpp"
#include "backends/naive/naive_kernels.hpp"
#include "harness/device/buffer.hpp"
#include "harness/device/check.hpp"
#include "harness/device/device.hpp"
#include "harness/device/digest.hpp"
#include "harness/device/output_bits.hpp"
#include "harness/device/fill.hpp"
#include "harness/device/stream.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/layout.hpp"
#include "harness/model/mask.hpp"

namespace attnbench::naive {

using device::DeviceBuffer;

namespace {

/// cuBLAS batched calls are issued in chunks of at most this many matrices.
constexpr int64_t kMaxBatchPerCall = 65535;

/// Bytes a DeviceBuffer of `count` elements allocates (guards included), as a
/// double so that absurd problems cannot overflow the plan.
double guarded(double count, double elem) {
  return count <= 0 ? 0.0 : count * elem + 2.0 * static_cast<double>(DeviceBuffer::kGuardBytes);
}

size_t to_bytes(double b) {
  return b >= 1.8e19 ? SIZE_MAX : static_cast<size_t>(b);
}

std::string fmt_gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f GiB", bytes / 1073741824.0);
  return buf;
}

cudaDataType cuda_type(DType t) {
  switch (t) {
    case DType::fp32: return CUDA_R_32F;
    case DType::fp16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
  }
  throw std::invalid_argument("naive: unknown dtype");
}

RowStrides strides_of(const PhysicalLayout& l) { return {l.S * l.H * l.D, l.stride_h(), l.stride_s()}; }

/// The group's query heads are contiguous rows of Q / dO / the score buffers
/// only in BHSD: there one GEMM sums dK, dV over the group (k = G * Sq).
bool stacked_group(const Problem& p) { return p.layout == Layout::bhsd; }

void require_shape(const HostTensor& t, std::vector<int64_t> want, const char* name) {
  if (t.shape != want) {
    std::string got, exp;
    for (auto d : t.shape) got += (got.empty() ? "" : ",") + std::to_string(d);
    for (auto d : want) exp += (exp.empty() ? "" : ",") + std::to_string(d);
    throw std::invalid_argument(std::string("naive: input ") + name + " has shape [" + got + "], expected [" + exp +
                                "]");
  }
}


/// Owns a cuBLAS handle bound to a stream, with its own workspace and
/// full-precision reductions.
struct BlasHolder {
  cublasHandle_t h = nullptr;
  DeviceBuffer workspace;
  explicit BlasHolder(cudaStream_t stream) : workspace(kCublasWorkspaceBytes, 1) {
    ATTNBENCH_CHECK(cublasCreate(&h));
    try {
      ATTNBENCH_CHECK(cublasSetStream(h, stream));
      ATTNBENCH_CHECK(cublasSetWorkspace(h, workspace.data(), workspace.bytes()));
      ATTNBENCH_CHECK(cublasSetMathMode(
          h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    } catch (...) {
      (void)cublasDestroy(h);
      throw;
    }
  }
  ~BlasHolder() {
    if (h) (void)cublasDestroy(h);
  }
  BlasHolder(const BlasHolder&) = delete;
  BlasHolder& operator=(const BlasHolder&) = delete;
};

class NaiveInstance final : public NaiveInstanceApi {
 public:
  NaiveInstance(const Problem& p, const ProblemData& in);
  /// Waits for queued work before the buffers are freed (errors are swallowed:
  /// a destructor cannot throw, and the next checked call reports them).
  ~NaiveInstance() override {
    if (cudaStreamSynchronize(stream_.s) != cudaSuccess) (void)cudaGetLastError();
  }
  NaiveInstance(const NaiveInstance&) = delete;
  NaiveInstance& operator=(const NaiveInstance&) = delete;
  void forward() override;
  void backward() override;
  void poison_outputs() override;
  void synchronize() override { ATTNBENCH_CHECK(cudaStreamSynchronize(stream_.s)); }
  AttentionOutputs read_outputs(bool with_grads) override { return download_outputs(with_grads)(); }
  std::function<AttentionOutputs()> download_outputs(bool with_grads) override;
  std::optional<uint64_t> outputs_digest(bool with_grads) override {
    std::vector<const DeviceBuffer*> out{&o_, &lse_};
    if (with_grads) out.insert(out.end(), {&dq_, &dk_, &dv_, &dbias_});
    return device::digest(out, stream_.s);
  }
  int64_t executed_pairs() const override { return B_ * Hq_ * Sq_ * Sk_; }
  double setup_ms() const override { return setup_ms_; }
  size_t allocated_bytes() const override;
  void* stream() const override { return stream_.s; }
  bool guards_intact() const override;

 private:
  /// Batched GEMM over pointer-array sections (offsets into ptrs_), float32
  /// compute and scale type, chunked to kMaxBatchPerCall.
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, float alpha, size_t a,
            cudaDataType at, int64_t lda, size_t b, cudaDataType bt, int64_t ldb, float beta, size_t c,
            cudaDataType ct, int64_t ldc, int64_t count);
  std::vector<const DeviceBuffer*> buffers() const;

  Problem p_;
  DType dt_;
  int64_t B_, Hq_, Hkv_, Sq_, Sk_, D_, Dv_, G_;
  float scale_;
  PhysicalLayout lq_, lk_, lv_, lo_;
  MemoryPlan plan_;

  // Declared first so that they are destroyed last (after every buffer's work).
  device::OwnedStream stream_;
  BlasHolder blas_;

  DeviceBuffer q_, k_, v_, do_, o_, lse_, dq_, dk_, dv_;
  DeviceBuffer bias_, dbias_, offset_, doc_ids_, lens_q_, lens_k_;
  DeviceBuffer s_, p_buf_, dp_sep_, ds_sep_;
  float* dp_ = nullptr;  // dP (float32): its own buffer with softcap, else the S buffer
  void* ds_ = nullptr;   // dS (dtype): its own buffer for fp16/bf16, else the dP buffer
  DeviceBuffer dk32_, dv32_, rel_partial_, colsum_, ones_, csr_ptr_, csr_idx_;
  DeviceBuffer ptrs_;
  MaskDesc mask_;
  ScoreModDesc mod_;

  // Sections of ptrs_ (element offsets), each B*Hq (per query head) or
  // B*Hkv (per kv head, one set per group member r when not stacked).
  size_t sec_q_ = 0, sec_k_ = 0, sec_v_ = 0, sec_o_ = 0, sec_do_ = 0, sec_dq_ = 0;
  size_t sec_s_ = 0, sec_p_ = 0, sec_dp_ = 0, sec_ds_ = 0;
  std::vector<size_t> sec_qg_, sec_dog_, sec_pg_, sec_dsg_;
  size_t sec_dk32_ = 0, sec_dv32_ = 0;
  double setup_ms_ = 0.0;
};

NaiveInstance::NaiveInstance(const Problem& p, const ProblemData& in)
    : p_(p),
      dt_(p.dtype),
      B_(p.batch),
      Hq_(p.heads_q),
      Hkv_(p.heads_kv),
      Sq_(p.seq_q),
      Sk_(p.seq_k),
      D_(p.head_dim),
      Dv_(p.head_dim_v),
      G_(p.group_size()),
      scale_(static_cast<float>(p.softmax_scale())),
      lq_(physical_layout(p, TensorRole::q)),
      lk_(physical_layout(p, TensorRole::k)),
      lv_(physical_layout(p, TensorRole::v)),
      lo_(physical_layout(p, TensorRole::o)),
      plan_(plan_memory(p)),
      stream_(),
      blas_(stream_.s) {
  require_shape(in.q, {B_, Hq_, Sq_, D_}, "q");
  require_shape(in.k, {B_, Hkv_, Sk_, D_}, "k");
  require_shape(in.v, {B_, Hkv_, Sk_, Dv_}, "v");
  require_shape(in.d_o, {B_, Hq_, Sq_, Dv_}, "d_o");
  if (static_cast<int64_t>(in.bias.size()) != p.bias_numel())
    throw std::invalid_argument("naive: bias has " + std::to_string(in.bias.size()) + " values, expected " +
                                std::to_string(p.bias_numel()));
  if (static_cast<int64_t>(in.offset.size()) != p.offset_numel())
    throw std::invalid_argument("naive: offset has " + std::to_string(in.offset.size()) + " values, expected " +
                                std::to_string(p.offset_numel()));

  cudaStream_t st = stream_.s;
  const size_t es = static_cast<size_t>(dtype_bytes(dt_));

  // Inputs and outputs in the physical layout and dtype.
  q_ = device::upload(encode_physical(in.q, lq_, dt_), st);
  k_ = device::upload(encode_physical(in.k, lk_, dt_), st);
  v_ = device::upload(encode_physical(in.v, lv_, dt_), st);
  do_ = device::upload(encode_physical(in.d_o, lo_, dt_), st);
  o_ = DeviceBuffer(static_cast<size_t>(lo_.numel()), es);
  dq_ = DeviceBuffer(static_cast<size_t>(lq_.numel()), es);
  dk_ = DeviceBuffer(static_cast<size_t>(lk_.numel()), es);
  dv_ = DeviceBuffer(static_cast<size_t>(lv_.numel()), es);
  lse_ = DeviceBuffer(static_cast<size_t>(p.lse_numel()), sizeof(float));

  const auto t0 = std::chrono::steady_clock::now();

  // Score mod: learnable bias table (float32) and offsets.
  if (p.bias_numel() > 0) {
    bias_ = device::upload_f32(in.bias, st);
    dbias_ = DeviceBuffer(static_cast<size_t>(p.bias_numel()), sizeof(float));
  }
  if (p.offset_numel() > 0) {
    for (size_t j = 0; j < in.offset.size(); ++j)
      if (in.offset[j] < 0 || in.offset[j] >= p.score_mod.size)
        throw std::invalid_argument("naive: offset[" + std::to_string(j) + "] = " + std::to_string(in.offset[j]) +
                                    " outside [0, " + std::to_string(p.score_mod.size) + ")");
    offset_ = device::upload_i32(in.offset, st);
  }
  mod_ = make_score_mod_desc(p, bias_.as<const float>(), offset_.as<const int32_t>());

  // Mask descriptor with device copies of its arrays.
  MaskArrays arrays;
  mask_ = make_mask_desc(p, arrays);
  if (mask_.doc_ids) {
    doc_ids_ = device::upload_i32(arrays.doc_ids, st);
    mask_.doc_ids = doc_ids_.as<const int32_t>();
  }
  if (mask_.seq_lens_q) {
    lens_q_ = device::upload_i32(arrays.seq_lens_q, st);
    lens_k_ = device::upload_i32(arrays.seq_lens_k, st);
    mask_.seq_lens_q = lens_q_.as<const int32_t>();
    mask_.seq_lens_k = lens_k_.as<const int32_t>();
  }

  // Score buffers.
  const size_t pairs = static_cast<size_t>(plan_.pairs);
  s_ = DeviceBuffer(pairs, sizeof(float));
  p_buf_ = DeviceBuffer(pairs, es);
  if (plan_.separate_dp) {
    dp_sep_ = DeviceBuffer(pairs, sizeof(float));
    dp_ = dp_sep_.as<float>();
  } else {
    dp_ = s_.as<float>();
  }
  if (plan_.separate_ds) {
    ds_sep_ = DeviceBuffer(pairs, es);
    ds_ = ds_sep_.data();
  } else {
    ds_ = dp_;
  }

  // Workspaces: float32 dK / dV group sums, learnable-bias scratch.
  dk32_ = DeviceBuffer(static_cast<size_t>(p.k_numel()), sizeof(float));
  dv32_ = DeviceBuffer(static_cast<size_t>(p.v_numel()), sizeof(float));
  const int64_t rows = B_ * Hq_ * Sq_;
  if (p.score_mod.kind == ScoreMod::Kind::rel_bias)
    rel_partial_ = DeviceBuffer(static_cast<size_t>(2 * rows), sizeof(float));
  if (p.score_mod.kind == ScoreMod::Kind::offset_bias) {
    colsum_ = DeviceBuffer(static_cast<size_t>(Sk_), sizeof(float));
    ones_ = DeviceBuffer(static_cast<size_t>(rows), sizeof(float));
    device::fill_f32(ones_.as<float>(), ones_.count(), 1.0f, st);
    // Keys grouped by offset value, ascending j within a group (fixed order).
    const int64_t size = p.score_mod.size;
    std::vector<int32_t> ptr(static_cast<size_t>(size + 1), 0), idx(static_cast<size_t>(Sk_));
    for (int32_t o : in.offset) ++ptr[static_cast<size_t>(o) + 1];
    for (int64_t o = 0; o < size; ++o) ptr[static_cast<size_t>(o + 1)] += ptr[static_cast<size_t>(o)];
    std::vector<int32_t> fill(ptr.begin(), ptr.end() - 1);
    for (int64_t j = 0; j < Sk_; ++j) idx[static_cast<size_t>(fill[static_cast<size_t>(in.offset[j])]++)] = static_cast<int32_t>(j);
    csr_ptr_ = device::upload_i32(ptr, st);
    csr_idx_ = device::upload_i32(idx, st);
  }

  // Pointer arrays for the batched GEMMs (no copies of K/V per query head).
  std::vector<const void*> h;
  auto tensor_ptr = [](const DeviceBuffer& buf, const PhysicalLayout& l, int64_t b, int64_t head, size_t elem) {
    return static_cast<const void*>(static_cast<const char*>(buf.data()) +
                                    static_cast<size_t>(b * l.S * l.H * l.D + head * l.stride_h()) * elem);
  };
  auto score_ptr = [&](const void* base, int64_t b, int64_t head, size_t elem) {
    return static_cast<const void*>(static_cast<const char*>(base) +
                                    static_cast<size_t>((b * Hq_ + head) * Sq_ * Sk_) * elem);
  };
  auto per_q_head = [&](auto&& fn) {
    const size_t start = h.size();
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t hq = 0; hq < Hq_; ++hq) h.push_back(fn(b, hq));
    return start;
  };
  auto per_kv_head = [&](auto&& fn) {
    const size_t start = h.size();
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t g = 0; g < Hkv_; ++g) h.push_back(fn(b, g));
    return start;
  };
  const size_t ds_es = plan_.separate_ds ? es : sizeof(float);
  sec_q_ = per_q_head([&](int64_t b, int64_t hq) { return tensor_ptr(q_, lq_, b, hq, es); });
  sec_k_ = per_q_head([&](int64_t b, int64_t hq) { return tensor_ptr(k_, lk_, b, hq / G_, es); });
  sec_v_ = per_q_head([&](int64_t b, int64_t hq) { return tensor_ptr(v_, lv_, b, hq / G_, es); });
  sec_o_ = per_q_head([&](int64_t b, int64_t hq) { return tensor_ptr(o_, lo_, b, hq, es); });
  sec_do_ = per_q_head([&](int64_t b, int64_t hq) { return tensor_ptr(do_, lo_, b, hq, es); });
  sec_dq_ = per_q_head([&](int64_t b, int64_t hq) { return tensor_ptr(dq_, lq_, b, hq, es); });
  sec_s_ = per_q_head([&](int64_t b, int64_t hq) { return score_ptr(s_.data(), b, hq, sizeof(float)); });
  sec_p_ = per_q_head([&](int64_t b, int64_t hq) { return score_ptr(p_buf_.data(), b, hq, es); });
  sec_dp_ = per_q_head([&](int64_t b, int64_t hq) { return score_ptr(dp_, b, hq, sizeof(float)); });
  sec_ds_ = per_q_head([&](int64_t b, int64_t hq) { return score_ptr(ds_, b, hq, ds_es); });
  const int64_t members = stacked_group(p) ? 1 : G_;
  for (int64_t r = 0; r < members; ++r) {
    sec_qg_.push_back(per_kv_head([&](int64_t b, int64_t g) { return tensor_ptr(q_, lq_, b, g * G_ + r, es); }));
    sec_dog_.push_back(per_kv_head([&](int64_t b, int64_t g) { return tensor_ptr(do_, lo_, b, g * G_ + r, es); }));
    sec_pg_.push_back(per_kv_head([&](int64_t b, int64_t g) { return score_ptr(p_buf_.data(), b, g * G_ + r, es); }));
    sec_dsg_.push_back(per_kv_head([&](int64_t b, int64_t g) { return score_ptr(ds_, b, g * G_ + r, ds_es); }));
  }
  sec_dk32_ = per_kv_head([&](int64_t b, int64_t g) {
    return static_cast<const void*>(dk32_.as<const float>() + (b * Hkv_ + g) * Sk_ * D_);
  });
  sec_dv32_ = per_kv_head([&](int64_t b, int64_t g) {
    return static_cast<const void*>(dv32_.as<const float>() + (b * Hkv_ + g) * Sk_ * Dv_);
  });
  ptrs_ = DeviceBuffer(h.size(), sizeof(void*));
  ATTNBENCH_CHECK(cudaMemcpyAsync(ptrs_.data(), h.data(), ptrs_.bytes(), cudaMemcpyHostToDevice, st));
  ATTNBENCH_CHECK(cudaStreamSynchronize(st));  // h dies at return; fills done
  setup_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void NaiveInstance::gemm(cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, float alpha,
                         size_t a, cudaDataType at, int64_t lda, size_t b, cudaDataType bt, int64_t ldb, float beta,
                         size_t c, cudaDataType ct, int64_t ldc, int64_t count) {
  const void* const* arr = ptrs_.as<const void*>();
  void* const* arr_c = ptrs_.as<void*>();  // the same array, as cuBLAS's C operand type
  for (int64_t start = 0; start < count; start += kMaxBatchPerCall) {
    const int chunk = static_cast<int>(std::min(kMaxBatchPerCall, count - start));
    const size_t s = static_cast<size_t>(start);
    ATTNBENCH_CHECK(cublasGemmBatchedEx(blas_.h, ta, tb, static_cast<int>(m), static_cast<int>(n),
                                        static_cast<int>(k), &alpha, arr + a + s, at, static_cast<int>(lda),
                                        arr + b + s, bt, static_cast<int>(ldb), &beta, arr_c + c + s, ct,
                                        static_cast<int>(ldc), chunk, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void NaiveInstance::forward() {
  const cudaDataType t = cuda_type(dt_);
  // S = scale * Q K^T, float32.
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, Sk_, Sq_, D_, scale_, sec_k_, t, lk_.stride_s(), sec_q_, t, lq_.stride_s(), 0.f,
       sec_s_, CUDA_R_32F, Sk_, B_ * Hq_);
  SoftmaxForwardArgs a;
  a.B = B_;
  a.Hq = Hq_;
  a.Sq = Sq_;
  a.Sk = Sk_;
  a.S = s_.as<const float>();
  a.P = p_buf_.data();
  a.lse = lse_.as<float>();
  a.mask = mask_;
  a.mod = mod_;
  softmax_forward(dt_, a, stream_.s);
  // O = P V in the dtype.
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, Dv_, Sq_, Sk_, 1.f, sec_v_, t, lv_.stride_s(), sec_p_, t, Sk_, 0.f, sec_o_, t,
       lo_.stride_s(), B_ * Hq_);
}

void NaiveInstance::backward() {
  const cudaDataType t = cuda_type(dt_);
  // dP = dO V^T, float32.
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, Sk_, Sq_, Dv_, 1.f, sec_v_, t, lv_.stride_s(), sec_do_, t, lo_.stride_s(), 0.f,
       sec_dp_, CUDA_R_32F, Sk_, B_ * Hq_);
  SoftmaxBackwardArgs a;
  a.B = B_;
  a.Hq = Hq_;
  a.Sq = Sq_;
  a.Sk = Sk_;
  a.P = p_buf_.data();
  a.S = s_.as<const float>();
  a.dP = dp_;
  a.dS = ds_;
  a.keep_ds32 = p_.has_learnable_bias();
  a.rel_partial = rel_partial_.as<float>();
  a.mod = mod_;
  softmax_backward(dt_, a, stream_.s);
  // dQ = scale * dS K in the dtype.
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, D_, Sq_, Sk_, scale_, sec_k_, t, lk_.stride_s(), sec_ds_, t, Sk_, 0.f, sec_dq_, t,
       lq_.stride_s(), B_ * Hq_);
  // dK = scale * dS^T Q and dV = P^T dO, summed over the group in float32.
  const int64_t kdim = stacked_group(p_) ? G_ * Sq_ : Sq_;
  for (size_t r = 0; r < sec_qg_.size(); ++r) {
    const float beta = r == 0 ? 0.f : 1.f;
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, D_, Sk_, kdim, scale_, sec_qg_[r], t, lq_.stride_s(), sec_dsg_[r], t, Sk_, beta,
         sec_dk32_, CUDA_R_32F, D_, B_ * Hkv_);
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, Dv_, Sk_, kdim, 1.f, sec_dog_[r], t, lo_.stride_s(), sec_pg_[r], t, Sk_, beta,
         sec_dv32_, CUDA_R_32F, Dv_, B_ * Hkv_);
  }
  store_rows(dt_, dk32_.as<const float>(), dk_.data(), B_, Hkv_, Sk_, D_, strides_of(lk_), stream_.s);
  store_rows(dt_, dv32_.as<const float>(), dv_.data(), B_, Hkv_, Sk_, Dv_, strides_of(lv_), stream_.s);
  // dBias from the float32 dS kept in the dP buffer.
  if (p_.score_mod.kind == ScoreMod::Kind::rel_bias) {
    rel_bias_grad(dp_, rel_partial_.as<const float>(), dbias_.as<float>(), B_, Hq_, Sq_, Sk_,
                  p_.score_mod.max_distance, stream_.s);
  } else if (p_.score_mod.kind == ScoreMod::Kind::offset_bias) {
    // colsum[j] = sum over the B*Hq*Sq rows of dS32[row, j] (column-major: Sk x rows).
    const float one = 1.f, zero = 0.f;
    ATTNBENCH_CHECK(cublasSgemv(blas_.h, CUBLAS_OP_N, static_cast<int>(Sk_), static_cast<int>(B_ * Hq_ * Sq_), &one,
                                dp_, static_cast<int>(Sk_), ones_.as<const float>(), 1, &zero, colsum_.as<float>(),
                                1));
    offset_bias_grad(colsum_.as<const float>(), csr_ptr_.as<const int32_t>(), csr_idx_.as<const int32_t>(),
                     dbias_.as<float>(), p_.score_mod.size, stream_.s);
  }
}

void NaiveInstance::poison_outputs() {
  device::poison_nan(o_, dt_, stream_.s);
  device::poison_nan(lse_, DType::fp32, stream_.s);
  device::poison_nan(dq_, dt_, stream_.s);
  device::poison_nan(dk_, dt_, stream_.s);
  device::poison_nan(dv_, dt_, stream_.s);
  device::poison_nan(dbias_, DType::fp32, stream_.s);
}

std::function<AttentionOutputs()> NaiveInstance::download_outputs(bool with_grads) {
  synchronize();
  auto d = std::make_shared<device::OutputBits>(
      device::download_output_bits(o_, lse_, dq_, dk_, dv_, &dbias_, dt_, with_grads, stream_.s));
  // The float64 tensors when called, from copies of the physical layouts.
  return [d, with_grads, shape_lse = std::vector<int64_t>{B_, Hq_, Sq_}, lq = lq_, lk = lk_, lv = lv_, lo = lo_] {
    AttentionOutputs out;
    out.o = decode_physical(d->o, lo);
    out.lse = HostTensor(shape_lse);
    out.lse.data = std::move(d->lse);
    if (with_grads) {
      out.dq = decode_physical(d->dq, lq);
      out.dk = decode_physical(d->dk, lk);
      out.dv = decode_physical(d->dv, lv);
      out.dbias = std::move(d->dbias);
    }
    return out;
  };
}

std::vector<const DeviceBuffer*> NaiveInstance::buffers() const {
  return {&blas_.workspace, &q_, &k_, &v_, &do_, &o_, &lse_, &dq_, &dk_, &dv_, &bias_, &dbias_, &offset_,
          &doc_ids_, &lens_q_, &lens_k_, &s_, &p_buf_, &dp_sep_, &ds_sep_, &dk32_, &dv32_, &rel_partial_,
          &colsum_, &ones_, &csr_ptr_, &csr_idx_, &ptrs_};
}

size_t NaiveInstance::allocated_bytes() const {
  size_t n = 0;
  for (const DeviceBuffer* b : buffers()) n += b->allocated_bytes();
  return n;
}

bool NaiveInstance::guards_intact() const {
  bool ok = true;
  for (const DeviceBuffer* b : buffers()) ok = b->guards_intact() && ok;
  return ok;
}

}  // namespace

// ---------------------------------------------------------------- plan

std::string MemoryPlan::describe() const {
  char buf[256];
  const double per_pair = pairs > 0 ? static_cast<double>(score_bytes) / static_cast<double>(pairs) : 0.0;
  std::snprintf(buf, sizeof(buf), "scores %s (%.1f bytes/pair x %lld pairs), inputs/outputs %s, workspace %s",
                fmt_gib(static_cast<double>(score_bytes)).c_str(), per_pair, static_cast<long long>(pairs),
                fmt_gib(static_cast<double>(io_bytes)).c_str(), fmt_gib(static_cast<double>(workspace_bytes)).c_str());
  return buf;
}

MemoryPlan plan_memory(const Problem& p) {
  MemoryPlan m;
  const double es = dtype_bytes(p.dtype);
  const double B = static_cast<double>(p.batch), Hq = static_cast<double>(p.heads_q),
               Hkv = static_cast<double>(p.heads_kv), Sq = static_cast<double>(p.seq_q),
               Sk = static_cast<double>(p.seq_k), D = static_cast<double>(p.head_dim),
               Dv = static_cast<double>(p.head_dim_v);
  const double pairs = B * Hq * Sq * Sk;
  m.pairs = pairs >= 9.2e18 ? INT64_MAX : p.batch * p.heads_q * p.seq_q * p.seq_k;
  m.separate_dp = p.score_mod.kind == ScoreMod::Kind::softcap;
  m.separate_ds = p.dtype != DType::fp32;
  double score = guarded(pairs, 4) + guarded(pairs, es);
  if (m.separate_dp) score += guarded(pairs, 4);
  if (m.separate_ds) score += guarded(pairs, es);

  const double nq = B * Hq * Sq * D, nk = B * Hkv * Sk * D, nv = B * Hkv * Sk * Dv, no = B * Hq * Sq * Dv;
  double io = 2 * guarded(nq, es) + 2 * guarded(nk, es) + 2 * guarded(nv, es) + 2 * guarded(no, es) +
              guarded(B * Hq * Sq, 4);
  io += 2 * guarded(static_cast<double>(p.bias_numel()), 4) + guarded(static_cast<double>(p.offset_numel()), 4);
  if (p.find_mask<DocumentTerm>()) io += guarded(B * Sq, 4);
  if (p.find_mask<PaddingTerm>()) io += 2 * guarded(B, 4);

  const double members = stacked_group(p) ? 1.0 : static_cast<double>(p.group_size());
  double ws = guarded(nk, 4) + guarded(nv, 4);
  ws += guarded(10 * B * Hq + (4 * members + 2) * B * Hkv, sizeof(void*));
  if (p.score_mod.kind == ScoreMod::Kind::rel_bias) ws += guarded(2 * B * Hq * Sq, 4);
  if (p.score_mod.kind == ScoreMod::Kind::offset_bias)
    ws += guarded(Sk, 4) + guarded(B * Hq * Sq, 4) + guarded(static_cast<double>(p.score_mod.size) + 1, 4) +
          guarded(Sk, 4);
  ws += guarded(static_cast<double>(kCublasWorkspaceBytes), 1);

  m.score_bytes = to_bytes(score);
  m.io_bytes = to_bytes(io);
  m.workspace_bytes = to_bytes(ws);
  m.total_bytes = to_bytes(score + io + ws);
  return m;
}

// ---------------------------------------------------------------- backend

std::string NaiveBackend::description() const {
  return "cuBLAS GEMMs (float32 accumulation) + softmax kernels over materialised [B,Hq,Sq,Sk] scores; "
         "every mask and score mod; bshd/bhsd";
}

bool NaiveBackend::available(std::string* why) const {
  if (!device::cuda_device_available(why)) return false;
  cudaDeviceProp prop{};
  const cudaError_t e = cudaGetDeviceProperties(&prop, device::selected_device());
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (why) *why = std::string("naive: cudaGetDeviceProperties: ") + cudaGetErrorString(e);
    return false;
  }
  if (prop.major < 8) {
    if (why)
      *why = "naive: needs compute capability >= 8.0 (bf16 GEMMs; kernels built for sm_80 / sm_90a), device " +
             std::to_string(device::selected_device()) + " is " + std::to_string(prop.major) + "." +
             std::to_string(prop.minor);
    return false;
  }
  return true;
}

Support NaiveBackend::supports(const Problem& p) const {
  if (p.layout == Layout::thd)
    return Support::no(
        "naive: THD (packed) layout not supported: the materialised [B,Hq,Sq,Sk] scores need a padded batch; "
        "use bshd or bhsd");
  // cuBLAS takes int dimensions, leading dimensions and batch counts.
  const int64_t dmax = std::max(p.head_dim, p.head_dim_v);
  const struct {
    const char* what;
    int64_t value;
  } dims[] = {{"seq_q", p.seq_q},
              {"seq_k", p.seq_k},
              {"heads_q * head_dim", p.heads_q * dmax},
              {"group size * seq_q", p.group_size() * p.seq_q},
              {"batch * heads_q * seq_q", p.batch * p.heads_q * p.seq_q}};
  for (const auto& d : dims)
    if (d.value > INT_MAX)
      return Support::no(std::string("naive: ") + d.what + " = " + std::to_string(d.value) +
                         " exceeds cuBLAS's 32-bit int dimensions");

  const MemoryPlan plan = plan_memory(p);
  size_t budget = budget_bytes_;
  std::string source = "the configured budget";
  if (budget == 0) {
    try {
      ATTNBENCH_CHECK(cudaSetDevice(device::selected_device()));
      const device::DeviceMemoryInfo mem = device::device_memory_info();
      budget = static_cast<size_t>(kDefaultBudgetFraction * static_cast<double>(mem.free_bytes));
      char buf[128];
      std::snprintf(buf, sizeof(buf), "%.0f%% of the %s free on device %d", kDefaultBudgetFraction * 100.0,
                    fmt_gib(static_cast<double>(mem.free_bytes)).c_str(), device::selected_device());
      source = buf;
    } catch (const std::exception& e) {
      return Support::no(std::string("naive: cannot query device memory for the budget: ") + e.what());
    }
  }
  if (plan.total_bytes > budget)
    return Support::no("naive: needs " + std::to_string(plan.total_bytes) + " bytes (" +
                       fmt_gib(static_cast<double>(plan.total_bytes)) + ": " + plan.describe() +
                       "), over its memory budget of " + std::to_string(budget) + " bytes (" +
                       fmt_gib(static_cast<double>(budget)) + ", " + source + ")");
  return Support::yes();
}

size_t NaiveBackend::workspace_bytes(const Problem& p) const {
  const MemoryPlan plan = plan_memory(p);
  return plan.score_bytes + plan.workspace_bytes;
}

std::unique_ptr<BackendInstance> NaiveBackend::prepare(const Problem& p, const ProblemData& inputs) {
  const Support s = supports(p);
  if (!s) throw Unsupported(s.reason);
  ATTNBENCH_CHECK(cudaSetDevice(device::selected_device()));
  return std::make_unique<NaiveInstance>(p, inputs);
}

ATTNBENCH_REGISTER_BACKEND(NaiveBackend);

}  // namespace attnbench::naive
