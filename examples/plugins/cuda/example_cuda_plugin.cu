// example-cuda: a simple, correct CUDA attention backend as an attnbench plugin
// (docs/plugins.md). Not fast on purpose: one thread per query row, float32
// arithmetic, the mask from attnb_mask_allowed() (the header's copy of
// docs/semantics.md section 3, compiled for the device).
//   forward : per row, an online softmax over the keys with O in a per-thread
//             float32 accumulator (local memory); writes O, LSE and a float32
//             copy of O in the workspace (for D = dO . O in the backward).
//   backward: per row, P recomputed from LSE; dQ summed in the thread; dK and dV
//             summed over rows with float32 atomics into the workspace, then
//             converted to the dtype (so the plugin is flagged nondeterministic).
// Supports every mask kind, the softcap and ALiBi score mods, GQA/MQA, all three
// layouts and dtypes, Dqk and Dv up to 256; declines learnable-bias score mods
// and larger head dimensions with a reason. One option (ABI version 2):
// block_threads = 64|128|256 (default 128), the threads per block of every launch.
//
// Status: compiled in the attnbench tree when CUDA is present; written and
// compile-checked without a GPU, NOT yet run on one (see docs/plugins.md).
#include <attnbench/plugin.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kMaxD = 256;
constexpr int kThreads = 128;

struct Instance {
  attnb_problem p;  // host copy (host arrays)
  attnb_problem d;  // the same problem with its arrays on the device
  void* arrays = nullptr;  // one device allocation for doc ids, lengths, cu_seqlens
  int threads = kThreads;  // option block_threads: threads per block of every launch
};

/// Workspace layout, in floats: O [B*Hq*Sq*Dv], dK [B*Hkv*Sk*Dqk], dV [B*Hkv*Sk*Dv].
struct Work {
  float *o, *dk, *dv;
};
__host__ __device__ Work work_of(const attnb_problem& p, void* ws) {
  float* base = static_cast<float*>(ws);
  Work w;
  w.o = base;
  w.dk = w.o + p.batch * p.heads_q * p.seq_q * p.head_dim_v;
  w.dv = w.dk + p.batch * p.heads_kv * p.seq_k * p.head_dim;
  return w;
}

size_t workspace_bytes(const attnb_problem* p) {
  return sizeof(float) * static_cast<size_t>(p->batch * p->heads_q * p->seq_q * p->head_dim_v +
                                             p->batch * p->heads_kv * p->seq_k * (p->head_dim + p->head_dim_v));
}

__device__ float score_mod(const attnb_problem& p, float x, int64_t h, int64_t i, int64_t j) {
  if (p.score_mod == ATTNB_MOD_SOFTCAP) return static_cast<float>(p.softcap) * tanhf(x / static_cast<float>(p.softcap));
  if (p.score_mod == ATTNB_MOD_ALIBI)
    return x - exp2f(-8.0f * static_cast<float>(h + 1) / static_cast<float>(p.heads_q)) * static_cast<float>(i > j ? i - j : j - i);
  return x;
}
__device__ float score_mod_grad(const attnb_problem& p, float x) {
  if (p.score_mod != ATTNB_MOD_SOFTCAP) return 1.0f;
  const float t = tanhf(x / static_cast<float>(p.softcap));
  return 1.0f - t * t;
}

__device__ float dot_qk(const attnb_problem& p, const attnb_tensors& t, int64_t qo, int64_t ko) {
  const int64_t qs = t.q.strides[t.q.ndim - 1], ks = t.k.strides[t.k.ndim - 1];
  float acc = 0.0f;
  for (int64_t d = 0; d < p.head_dim; ++d) acc += attnb_load(t.q.data, t.q.dtype, qo + d * qs) * attnb_load(t.k.data, t.k.dtype, ko + d * ks);
  return acc * static_cast<float>(p.scale);
}

/// (b, h, i) of the thread's row, false past the end.
__device__ bool row_of(const attnb_problem& p, int64_t* b, int64_t* h, int64_t* i) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= p.batch * p.heads_q * p.seq_q) return false;
  *i = r % p.seq_q;
  *h = (r / p.seq_q) % p.heads_q;
  *b = r / (p.seq_q * p.heads_q);
  return true;
}

__global__ void forward_kernel(attnb_problem p, attnb_tensors t) {
  int64_t b, h, i;
  if (!row_of(p, &b, &h, &i)) return;
  const int64_t kh = h / (p.heads_q / p.heads_kv), row = (b * p.heads_q + h) * p.seq_q + i;
  const int64_t qo = attnb_offset(&p, &t.q, 1, b, h, i, 0), oo = attnb_offset(&p, &t.o, 1, b, h, i, 0);
  const int64_t vs = t.v.strides[t.v.ndim - 1], os = t.o.strides[t.o.ndim - 1];
  float acc[kMaxD];
  for (int64_t d = 0; d < p.head_dim_v; ++d) acc[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  if (qo >= 0)
    for (int64_t j = 0; j < p.seq_k; ++j) {
      const int64_t ko = attnb_offset(&p, &t.k, 0, b, kh, j, 0);
      if (ko < 0 || !attnb_mask_allowed(&p, b, i, j)) continue;
      const float s = score_mod(p, dot_qk(p, t, qo, ko), h, i, j);
      const float m_new = fmaxf(m, s), c = expf(m - m_new), e = expf(s - m_new);
      const int64_t vo = attnb_offset(&p, &t.v, 0, b, kh, j, 0);
      l = l * c + e;
      for (int64_t d = 0; d < p.head_dim_v; ++d) acc[d] = acc[d] * c + e * attnb_load(t.v.data, t.v.dtype, vo + d * vs);
      m = m_new;
    }
  const bool empty = !(l > 0.0f);
  float* o32 = work_of(p, t.workspace.data).o + row * p.head_dim_v;
  for (int64_t d = 0; d < p.head_dim_v; ++d) {
    const float v = empty ? 0.0f : acc[d] / l;  // fully masked row: O = 0
    o32[d] = v;
    if (oo >= 0) attnb_store(t.o.data, t.o.dtype, oo + d * os, v);
  }
  static_cast<float*>(t.lse.data)[row] = empty ? -INFINITY : m + logf(l);
}

__global__ void backward_kernel(attnb_problem p, attnb_tensors t) {
  int64_t b, h, i;
  if (!row_of(p, &b, &h, &i)) return;
  const int64_t kh = h / (p.heads_q / p.heads_kv), row = (b * p.heads_q + h) * p.seq_q + i;
  const int64_t qo = attnb_offset(&p, &t.q, 1, b, h, i, 0), go = attnb_offset(&p, &t.d_o, 1, b, h, i, 0);
  const int64_t qs = t.q.strides[t.q.ndim - 1], ks = t.k.strides[t.k.ndim - 1], vs = t.v.strides[t.v.ndim - 1],
                gs = t.d_o.strides[t.d_o.ndim - 1], dqs = t.dq.strides[t.dq.ndim - 1];
  const float lse = static_cast<const float*>(t.lse.data)[row];
  const Work w = work_of(p, t.workspace.data);
  float dq[kMaxD];
  for (int64_t d = 0; d < p.head_dim; ++d) dq[d] = 0.0f;
  if (qo >= 0 && lse != -INFINITY) {
    float dsum = 0.0f;
    for (int64_t d = 0; d < p.head_dim_v; ++d) dsum += attnb_load(t.d_o.data, t.d_o.dtype, go + d * gs) * w.o[row * p.head_dim_v + d];
    for (int64_t j = 0; j < p.seq_k; ++j) {
      const int64_t ko = attnb_offset(&p, &t.k, 0, b, kh, j, 0);
      if (ko < 0 || !attnb_mask_allowed(&p, b, i, j)) continue;
      const int64_t vo = attnb_offset(&p, &t.v, 0, b, kh, j, 0), kv_row = (b * p.heads_kv + kh) * p.seq_k + j;
      const float x = dot_qk(p, t, qo, ko), pij = expf(score_mod(p, x, h, i, j) - lse);
      float dp = 0.0f;
      for (int64_t d = 0; d < p.head_dim_v; ++d) {
        const float g = attnb_load(t.d_o.data, t.d_o.dtype, go + d * gs);
        dp += g * attnb_load(t.v.data, t.v.dtype, vo + d * vs);
        atomicAdd(&w.dv[kv_row * p.head_dim_v + d], pij * g);
      }
      const float dx = pij * (dp - dsum) * score_mod_grad(p, x) * static_cast<float>(p.scale);
      for (int64_t d = 0; d < p.head_dim; ++d) {
        dq[d] += dx * attnb_load(t.k.data, t.k.dtype, ko + d * ks);
        atomicAdd(&w.dk[kv_row * p.head_dim + d], dx * attnb_load(t.q.data, t.q.dtype, qo + d * qs));
      }
    }
  }
  const int64_t dqo = attnb_offset(&p, &t.dq, 1, b, h, i, 0);
  if (dqo >= 0)
    for (int64_t d = 0; d < p.head_dim; ++d) attnb_store(t.dq.data, t.dq.dtype, dqo + d * dqs, dq[d]);
}

/// dK, dV float32 sums -> the output views (one thread per (b, kv head, key)).
__global__ void convert_kernel(attnb_problem p, attnb_tensors t) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= p.batch * p.heads_kv * p.seq_k) return;
  const int64_t j = r % p.seq_k, kh = (r / p.seq_k) % p.heads_kv, b = r / (p.seq_k * p.heads_kv);
  const Work w = work_of(p, t.workspace.data);
  const int64_t ko = attnb_offset(&p, &t.dk, 0, b, kh, j, 0), vo = attnb_offset(&p, &t.dv, 0, b, kh, j, 0);
  if (ko < 0) return;
  for (int64_t d = 0; d < p.head_dim; ++d) attnb_store(t.dk.data, t.dk.dtype, ko + d * t.dk.strides[t.dk.ndim - 1], w.dk[r * p.head_dim + d]);
  for (int64_t d = 0; d < p.head_dim_v; ++d) attnb_store(t.dv.data, t.dv.dtype, vo + d * t.dv.strides[t.dv.ndim - 1], w.dv[r * p.head_dim_v + d]);
}

int cuda_error(attnb_message* err, const char* what, cudaError_t e) {
  std::snprintf(err->text, sizeof err->text, "example-cuda: %s: %s", what, cudaGetErrorString(e));
  return 1;
}

int supports(const attnb_problem* p, attnb_message* why) {
  if (p->score_mod == ATTNB_MOD_REL_BIAS || p->score_mod == ATTNB_MOD_OFFSET_BIAS) {
    attnb_set_message(why, "example-cuda: learnable-bias score mods (rel_bias, offset_bias) are not implemented");
    return 0;
  }
  if (p->head_dim > kMaxD || p->head_dim_v > kMaxD) {
    attnb_set_message(why, "example-cuda: head dimensions above 256 are not implemented");
    return 0;
  }
  return 1;
}

/// Copy a host array into `dst` (device) and return the device pointer, advancing dst.
template <class T>
const T* stage(const T* src, int64_t n, char*& dst, cudaError_t& e) {
  if (!src) return nullptr;
  T* out = reinterpret_cast<T*>(dst);
  if (e == cudaSuccess) e = cudaMemcpy(out, src, sizeof(T) * n, cudaMemcpyHostToDevice);
  dst += (sizeof(T) * n + 255) / 256 * 256;
  return out;
}

int prepare_with_options(const attnb_problem* p, const attnb_tensors* t, const attnb_option_value* options,
                         uint32_t n_options, void** out, attnb_message* err) {
  (void)t;
  auto* in = new Instance{*p, *p, nullptr};
  for (uint32_t k = 0; k < n_options; ++k)  // every declared option, canonical values
    if (std::strcmp(options[k].name, "block_threads") == 0) in->threads = std::atoi(options[k].value);
  const int64_t B = p->batch, docs = p->doc_offsets ? p->doc_offsets[B] : 0;
  const size_t bytes = 6 * 256 + sizeof(int32_t) * (B * p->seq_q + 4 * (B + 1)) + sizeof(int64_t) * (docs + B + 1);
  cudaError_t e = cudaMalloc(&in->arrays, bytes);
  if (e != cudaSuccess) {
    delete in;
    return cuda_error(err, "cudaMalloc", e);
  }
  char* dst = static_cast<char*>(in->arrays);
  in->d.doc_ids = stage(p->doc_ids, B * p->seq_q, dst, e);
  in->d.doc_lengths = stage(p->doc_lengths, docs, dst, e);
  in->d.doc_offsets = stage(p->doc_offsets, B + 1, dst, e);
  in->d.seq_lens_q = stage(p->seq_lens_q, B, dst, e);
  in->d.seq_lens_k = stage(p->seq_lens_k, B, dst, e);
  in->d.cu_seqlens_q = stage(p->cu_seqlens_q, B + 1, dst, e);
  in->d.cu_seqlens_k = stage(p->cu_seqlens_k, B + 1, dst, e);
  if (e != cudaSuccess) {
    cudaFree(in->arrays);
    delete in;
    return cuda_error(err, "cudaMemcpy", e);
  }
  *out = in;
  return 0;
}

int forward(void* h, const attnb_tensors* t, void* stream, attnb_message* err) {
  const auto* in = static_cast<const Instance*>(h);
  const int64_t rows = in->p.batch * in->p.heads_q * in->p.seq_q;
  const int n = in->threads;
  forward_kernel<<<static_cast<unsigned>((rows + n - 1) / n), n, 0,
                   static_cast<cudaStream_t>(stream)>>>(in->d, *t);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : cuda_error(err, "forward launch", e);
}

int backward(void* h, const attnb_tensors* t, void* stream, attnb_message* err) {
  const auto* in = static_cast<const Instance*>(h);
  const attnb_problem& p = in->p;
  auto s = static_cast<cudaStream_t>(stream);
  const Work w = work_of(p, t->workspace.data);
  const size_t kv_bytes = sizeof(float) * static_cast<size_t>(p.batch * p.heads_kv * p.seq_k * (p.head_dim + p.head_dim_v));
  cudaError_t e = cudaMemsetAsync(w.dk, 0, kv_bytes, s);  // dK and dV sums are adjacent
  if (e != cudaSuccess) return cuda_error(err, "cudaMemsetAsync", e);
  const int64_t rows = p.batch * p.heads_q * p.seq_q, keys = p.batch * p.heads_kv * p.seq_k;
  const int n = in->threads;
  backward_kernel<<<static_cast<unsigned>((rows + n - 1) / n), n, 0, s>>>(in->d, *t);
  convert_kernel<<<static_cast<unsigned>((keys + n - 1) / n), n, 0, s>>>(in->d, *t);
  e = cudaGetLastError();
  return e == cudaSuccess ? 0 : cuda_error(err, "backward launch", e);
}

void teardown(void* h) {
  auto* in = static_cast<Instance*>(h);
  cudaFree(in->arrays);
  delete in;
}

const attnb_option kOptions[] = {
    {"block_threads", ATTNB_OPTION_ENUM, "128", "64|128|256", 0, 0, "threads per block of every launch"},
};

const attnb_plugin kPlugin = {
    ATTNB_PLUGIN_ABI_VERSION, sizeof(attnb_plugin), "example-cuda",
    "example plugin: one CUDA thread per query row, float32 (examples/plugins/cuda)",
    ATTNB_DEVICE_CUDA, ATTNB_PLUGIN_NONDETERMINISTIC, nullptr, supports, workspace_bytes, nullptr, forward, backward,
    teardown, kOptions, 1, prepare_with_options};

}  // namespace

extern "C" ATTNB_PLUGIN_EXPORT const attnb_plugin* attnbench_plugin_entry(void) { return &kPlugin; }
