// Collects the device activities (kernels, memsets, copies) launched by this
// process between kernel_trace_start() and kernel_trace_stop(), through CUPTI's
// activity API (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, MEMSET, MEMCPY). Plain C++
// header: builds without CUDA link a stub that reports "unavailable".
//
// Kernels launched by other processes (the PyTorch peers' workers) are not seen.
// Tracing adds a little launch overhead, so the runner traces untimed passes only.
#pragma once

#include <string>
#include <vector>

#include "harness/kernel_trace.hpp"

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
