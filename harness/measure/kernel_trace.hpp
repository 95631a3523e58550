// Kernel trace of one backend pass: which GPU kernels (and memsets / copies) a
// pass launched, with their grid, registers, shared memory and device time.
// `attnbench run --kernel-trace` records one untimed forward and one untimed
// backward per (case, backend) after the timed passes and stores the summary in
// the row's extra.kernel_trace (docs/report-format.md).
//
// The activities (TracedActivity) are collected by harness/device/kernel_trace.hpp
// (CUPTI's activity API); the summary here is plain C++ so that it is tested
// without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/device/kernel_trace.hpp"

namespace attnbench {

/// Most timeline entries summarize_trace() keeps per pass (the rest are counted).
inline constexpr size_t kMaxTimelineEntries = 4096;

/// Group `acts` by (kind, name) and summarise one pass:
///   {"activities": N, "device_us": sum of durations, "span_us": last end - first start,
///    "busy_us": time covered by at least one activity (union of the intervals),
///    "streams": distinct stream ids,
///    "kernels": [{"kind", "name", "calls", "total_us", "mean_us", "share" (of device_us),
///                 "grid": [x,y,z], "block": [x,y,z], "ctas", "registers", "shared_bytes",
///                 "bytes"}...],
///    "timeline": [[kernel, lane, start_us, duration_us]...], "timeline_dropped": n}
/// Groups are sorted by total_us, largest first (ties by name); grid, block,
/// registers and shared memory are those of the group's first call (by start time),
/// "ctas" is the product of that grid and "bytes" the sum over the group's calls.
/// Durations are end - start (0 when end < start). span_us - busy_us is the time
/// the device ran nothing of the pass (launch gaps, waits); device_us - busy_us is
/// the time activities overlapped (concurrent streams). The timeline lists every
/// activity by start time: `kernel` indexes "kernels", `lane` numbers the streams
/// in order of first use, `start_us` is relative to the pass's first start; at most
/// kMaxTimelineEntries entries, the rest counted in timeline_dropped. No activity
/// gives zeros and empty arrays.
nlohmann::json summarize_trace(const std::vector<TracedActivity>& acts);

}  // namespace attnbench
