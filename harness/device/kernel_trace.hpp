// Collects the device activities (kernels, memsets, copies) launched by this
// process between kernel_trace_start() and kernel_trace_stop(), through CUPTI's
// activity API (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, MEMSET, MEMCPY). Plain C++
// header: builds without CUDA link a stub that reports "unavailable".
//
// Kernels launched by other processes (the PyTorch peers' workers) are not seen.
// Tracing adds a little launch overhead, so the runner traces untimed passes only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnbench {

/// One device activity of a traced pass, as CUPTI reports it.
struct TracedActivity {
  std::string kind;           ///< "kernel", "memset" or "memcpy"
  std::string name;           ///< demangled kernel name; "memset" / "memcpy <direction>"
  uint64_t start_ns = 0;      ///< device timestamps, nanoseconds (CUPTI's clock)
  uint64_t end_ns = 0;
  int grid[3] = {0, 0, 0};    ///< kernels only
  int block[3] = {0, 0, 0};
  int registers = 0;          ///< per thread
  int64_t shared_bytes = 0;   ///< static + dynamic shared memory per block
  uint64_t bytes = 0;         ///< memsets / copies only
  uint32_t stream = 0;        ///< CUPTI's stream id (lanes of the timeline)
};

}  // namespace attnbench

namespace attnbench::device {

/// True when this build has CUPTI and a CUDA device answers; otherwise false
/// with the reason in `why` ("built without CUPTI", no device, ...).
bool kernel_trace_available(std::string* why = nullptr);

/// Start collecting. Throws std::runtime_error naming the CUPTI call and its
/// status when CUPTI refuses (e.g. another profiler holds it), or when a trace
/// is already running.
void kernel_trace_start();

/// Synchronise the device, flush CUPTI's buffers, stop collecting and return the
/// activities since kernel_trace_start(), sorted by start time. Throws
/// std::runtime_error when no trace is running or a CUDA / CUPTI call fails.
std::vector<TracedActivity> kernel_trace_stop();

}  // namespace attnbench::device
