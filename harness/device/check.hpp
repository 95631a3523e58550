// The one error-check macro for CUDA runtime, cuBLAS and cuDNN calls.
//
//   ATTNBENCH_CHECK(cudaMemcpyAsync(...));
//   ATTNBENCH_CHECK(cublasGemmStridedBatchedEx(...));
//   ATTNBENCH_CHECK(cudnnBackendFinalize(desc));
//
// A failing call throws attnbench::device::DeviceError whose message names the
// call, the status name/string, file and line. The runner turns it into a report
// row with status "error"; the sweep goes on. The check never compiles away
// (no NDEBUG dependence). After a kernel launch use
// ATTNBENCH_CHECK(cudaGetLastError()).
#pragma once

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#if defined(ATTNBENCH_HAVE_CUDNN)
#include <cudnn.h>
#endif

namespace attnbench::device {

/// A failed CUDA / cuBLAS / cuDNN call.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Out of device memory (becomes an `oom` row).
class DeviceOutOfMemory : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

namespace detail {
/// Throw DeviceOutOfMemory (when `oom`) or DeviceError with the message
/// "<lib> error <status> in `<expr>` at <file>:<line>". Defined in check.cpp.
[[noreturn]] void throw_error(const char* lib, const std::string& status, const char* expr,
                              const char* file, int line, bool oom);

inline void check(cudaError_t s, const char* expr, const char* file, int line) {
  if (s != cudaSuccess) {
    (void)cudaGetLastError();  // clear sticky-free errors so the sweep can go on
    throw_error("CUDA", std::string(cudaGetErrorName(s)) + ": " + cudaGetErrorString(s), expr, file,
                line, s == cudaErrorMemoryAllocation);
  }
}
/// The enumerator name of a cuBLAS status, e.g. "CUBLAS_STATUS_INVALID_VALUE"; never null.
const char* cublas_status_name(cublasStatus_t s);
inline void check(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw_error("cuBLAS", std::string(cublas_status_name(s)) + ": " + cublasGetStatusString(s), expr,
                file, line, s == CUBLAS_STATUS_ALLOC_FAILED);
}
#if defined(ATTNBENCH_HAVE_CUDNN)
inline void check(cudnnStatus_t s, const char* expr, const char* file, int line) {
  if (s != CUDNN_STATUS_SUCCESS) {
    char last[512] = {0};
    cudnnGetLastErrorString(last, sizeof(last));
    throw_error("cuDNN", std::string(cudnnGetErrorString(s)) + (last[0] ? std::string(" (") + last + ")" : ""),
                expr, file, line, s == CUDNN_STATUS_ALLOC_FAILED);
  }
}
#endif
}  // namespace detail

}  // namespace attnbench::device

#define ATTNBENCH_CHECK(expr) ::attnbench::device::detail::check((expr), #expr, __FILE__, __LINE__)
