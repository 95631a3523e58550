// Error reporting behind ATTNBENCH_CHECK (check.hpp).
#include "harness/device/check.hpp"

#include <string>

namespace attnbench::device::detail {

void throw_error(const char* lib, const std::string& status, const char* expr, const char* file,
                 int line, bool oom) {
  std::string msg = std::string(lib) + " error " + status + " in `" + expr + "` at " + file + ":" +
                    std::to_string(line);
  if (oom) throw DeviceOutOfMemory(msg);
  throw DeviceError(msg);
}

const char* cublas_status_name(cublasStatus_t s) {
  // cuBLAS >= 11.4 names its own statuses; the fallback covers values it does
  // not know (it returns a generic string for those, never null).
  const char* name = cublasGetStatusName(s);
  return name ? name : "CUBLAS_STATUS_<unknown>";
}

}  // namespace attnbench::device::detail
