// Hardware ceilings: see ceilings.hpp.
#include "harness/device/ceilings.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <exception>
#include <vector>

#include "harness/device/check.hpp"
#include "harness/device/stream.hpp"
#include "harness/device/environment.hpp"

namespace attnbench::device {

namespace {

// The cuBLAS version joins the environment fingerprint (environment.hpp hook).
const bool kCublasVersionRegistered = env::register_library_version("cublas", []() -> std::string {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return "";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
});

/// cudaMalloc'd bytes, freed on scope exit.
class Scratch {
 public:
  explicit Scratch(size_t bytes) { ATTNBENCH_CHECK(cudaMalloc(&ptr_, bytes)); }
  ~Scratch() { cudaFree(ptr_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

class Events {
 public:
  Events() {
    ATTNBENCH_CHECK(cudaEventCreate(&start));
    ATTNBENCH_CHECK(cudaEventCreate(&stop));
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  cudaEvent_t start = nullptr, stop = nullptr;
};

class Cublas {
 public:
  explicit Cublas(cudaStream_t s) {
    ATTNBENCH_CHECK(cublasCreate(&h));
    ATTNBENCH_CHECK(cublasSetStream(h, s));
  }
  ~Cublas() { cublasDestroy(h); }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  cublasHandle_t h = nullptr;
};

/// Uniform values in [-1, 1) from a splitmix64 hash of (seed, index).
__global__ void fill_uniform_bf16(__nv_bfloat16* p, size_t n, unsigned long long seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned long long x = seed + 0x9E3779B97F4A7C15ull * (i + 1);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    const float u = static_cast<float>(x >> 40) * (1.0f / 16777216.0f);  // 24 bits -> [0, 1)
    p[i] = __float2bfloat16(2.0f * u - 1.0f);
  }
}

void fill_random(void* p, size_t count, unsigned long long seed, cudaStream_t s) {
  constexpr int kThreads = 256;
  constexpr int kMaxBlocks = 4096;
  const int blocks = static_cast<int>(std::min<size_t>((count + kThreads - 1) / kThreads, kMaxBlocks));
  fill_uniform_bf16<<<blocks, kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(p), count, seed);
  ATTNBENCH_CHECK(cudaGetLastError());
}

/// Median, min, max of event-timed runs of `work` (after `warmup` untimed ones).
template <class F>
void time_runs(const CeilingOptions& o, cudaStream_t s, F&& work, Ceiling& c) {
  Events ev;
  for (int i = 0; i < o.warmup; ++i) work();
  ATTNBENCH_CHECK(cudaStreamSynchronize(s));
  std::vector<double> ms;
  for (int i = 0; i < std::max(1, o.repeats); ++i) {
    ATTNBENCH_CHECK(cudaEventRecord(ev.start, s));
    work();
    ATTNBENCH_CHECK(cudaEventRecord(ev.stop, s));
    ATTNBENCH_CHECK(cudaEventSynchronize(ev.stop));
    float t = 0;
    ATTNBENCH_CHECK(cudaEventElapsedTime(&t, ev.start, ev.stop));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  c.n = static_cast<int>(n);
  c.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  c.min_ms = ms.front();
  c.max_ms = ms.back();
}

}  // namespace

nlohmann::json Ceiling::to_json() const {
  return {{"name", name},     {"value", value},   {"unit", unit},   {"median_ms", median_ms},
          {"min_ms", min_ms}, {"max_ms", max_ms}, {"n", n},         {"work", work},
          {"how", how}};
}

nlohmann::json Ceilings::to_json() const {
  nlohmann::json j;
  j["measured"] = measured;
  if (!measured) {
    j["reason"] = reason;
    return j;
  }
  j["gemm_bf16_tflops"] = gemm.value;
  j["copy_gbps"] = copy.value;
  j["gemm_bf16"] = gemm.to_json();
  j["copy_d2d"] = copy.to_json();
  return j;
}

Ceiling measure_gemm_ceiling(const CeilingOptions& o) {
  (void)kCublasVersionRegistered;
  OwnedStream stream;
  Cublas blas(stream.s);
  const size_t m = static_cast<size_t>(o.gemm_m), n = static_cast<size_t>(o.gemm_n), k = static_cast<size_t>(o.gemm_k);
  Scratch a(m * k * sizeof(__nv_bfloat16)), b(k * n * sizeof(__nv_bfloat16)), c(m * n * sizeof(__nv_bfloat16));
  fill_random(a.get(), m * k, 1, stream.s);
  fill_random(b.get(), k * n, 2, stream.s);
  fill_random(c.get(), m * n, 3, stream.s);
  const float alpha = 1.0f, beta = 0.0f;
  Ceiling out;
  out.name = "gemm_bf16";
  out.unit = "TFLOP/s";
  out.work = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  out.how = "cublasGemmEx " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
            " bf16 in/out, CUBLAS_COMPUTE_32F, column-major NN, uniform[-1,1) inputs; median of event-timed runs";
  time_runs(
      o, stream.s,
      [&] {
        ATTNBENCH_CHECK(cublasGemmEx(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                                     static_cast<int>(k), &alpha, a.get(), CUDA_R_16BF, static_cast<int>(m), b.get(),
                                     CUDA_R_16BF, static_cast<int>(k), &beta, c.get(), CUDA_R_16BF,
                                     static_cast<int>(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      },
      out);
  out.value = out.median_ms > 0 ? out.work / (out.median_ms * 1e-3) / 1e12 : 0.0;
  return out;
}

Ceiling measure_copy_ceiling(const CeilingOptions& o) {
  OwnedStream stream;
  const size_t bytes = static_cast<size_t>(o.copy_bytes);
  Scratch src(bytes), dst(bytes);
  fill_random(src.get(), bytes / sizeof(__nv_bfloat16), 4, stream.s);
  Ceiling out;
  out.name = "copy_d2d";
  out.unit = "GB/s";
  out.work = 2.0 * static_cast<double>(bytes);
  out.how = "cudaMemcpyAsync device-to-device of " + std::to_string(bytes) +
            " bytes; rate = (bytes read + bytes written) / median event time";
  time_runs(
      o, stream.s,
      [&] { ATTNBENCH_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream.s)); },
      out);
  out.value = out.median_ms > 0 ? out.work / (out.median_ms * 1e-3) / 1e9 : 0.0;
  return out;
}

Ceilings measure_ceilings(const CeilingOptions& o) {
  Ceilings c;
  try {
    c.gemm = measure_gemm_ceiling(o);
    c.copy = measure_copy_ceiling(o);
    c.measured = true;
  } catch (const std::exception& e) {
    c.measured = false;
    c.reason = e.what();
  }
  return c;
}

}  // namespace attnbench::device
