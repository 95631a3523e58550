// Hardware ceilings measured once per run (docs/semantics.md section 8): a large bf16
// GEMM through cuBLAS (the arithmetic ceiling) and a device-to-device copy (the
// memory ceiling, bytes read plus bytes written). Each report row's throughput is
// then given as a fraction of them.
//
// Plain C++ header (no CUDA headers); the implementation (ceilings.cu) is built
// only with CUDA, so callers guard with `#if defined(ATTNBENCH_HAVE_CUDA)`.
//
// Sharp edges: the GEMM inputs are random (uniform in [-1, 1)), never zeros
// (a bf16 GEMM on zeros has been seen to run 13% faster); the figures are
// medians of `repeats` event-timed runs after `warmup` untimed ones, with the
// clocks as found (nothing is locked); measuring takes about a second on an H100
// and allocates ~0.4 GiB (GEMM) then ~2 GiB (copy) of device memory, freed after.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnbench::device {

/// Sizes and repeat counts of the ceiling measurements.
struct CeilingOptions {
  int64_t gemm_m = 8192, gemm_n = 8192, gemm_k = 8192;  ///< bf16 A [m,k] x B [k,n] -> bf16 C, fp32 accumulation
  int64_t copy_bytes = int64_t{1} << 30;                  ///< bytes copied per run (read once, written once)
  int warmup = 3;
  int repeats = 15;
};

/// One measured ceiling.
struct Ceiling {
  std::string name;            ///< "gemm_bf16" or "copy_d2d"
  double value = 0;            ///< rate at the median time, in `unit`
  std::string unit;            ///< "TFLOP/s" or "GB/s" (10^9 bytes per second)
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int n = 0;                   ///< timed runs
  double work = 0;             ///< FLOPs (2 m n k) or bytes (2 * copy_bytes) per run
  std::string how;             ///< what exactly was run
  nlohmann::json to_json() const;
};

/// Both ceilings of the current device, or the reason they are missing.
struct Ceilings {
  bool measured = false;
  std::string reason;          ///< why not measured (no device, error)
  Ceiling gemm;                ///< peak bf16 matrix rate, TFLOP/s
  Ceiling copy;                ///< device memory bandwidth, GB/s
  /// {"measured", "reason"?, "gemm_bf16_tflops", "copy_gbps", "gemm_bf16": {...}, "copy_d2d": {...}}
  nlohmann::json to_json() const;
};

/// Measure the bf16 GEMM ceiling on the current device through cublasGemmEx.
/// Throws DeviceError / DeviceOutOfMemory.
Ceiling measure_gemm_ceiling(const CeilingOptions& o = {});
/// Measure the device-to-device copy ceiling (cudaMemcpyAsync between two
/// buffers of o.copy_bytes; rate counts bytes read plus bytes written).
Ceiling measure_copy_ceiling(const CeilingOptions& o = {});
/// Measure both on the current device; never throws: a failure is returned as
/// measured == false with the reason (the run goes on without ceilings).
Ceilings measure_ceilings(const CeilingOptions& o = {});

}  // namespace attnbench::device
