// The measurement engine (docs/semantics.md section 9): times one pass of a prepared
// backend instance. GPU passes are timed with CUDA events on the instance's
// stream; CPU passes with a steady clock. Warm-up, cold (L2 flushed between
// samples) or hot mode, and a stopping rule on the relative standard deviation
// with a minimum sample count and a time cap (nvbench's approach).
//
// One time_pass() call is one Google Benchmark run (registered at run time,
// reported to a silent reporter, never reading our argv). Inside that run the
// engine takes the samples itself: Google Benchmark fixes the iteration count
// before its loop starts and cannot stop early on a convergence criterion
// without flagging an error, whereas the stopping rule here decides after every
// sample. So the benchmark has exactly one iteration, whose manual time is the
// sum of the samples, and the samples are kept raw.
//
// Sharp edges:
//  - A sample of Pass::backward is preceded by an untimed forward (O and LSE
//    must be fresh), then the L2 flush, then the timed backward. The forward is
//    not in the number.
//  - Cold mode writes one reused device buffer of the L2 size on the stream
//    before each sample, outside the timed events (nvbench's L2 flush). On the CPU
//    the host last-level cache is flushed the same way with a host buffer.
//  - GPU samples are taken behind a stream hold (TimingPolicy::hold_stream): a
//    spin kernel (harness/device/hold.hpp) keeps the stream busy while the host
//    enqueues the pass, so the events measure GPU time, not the host's launch
//    latency (nvbench's blocking kernel). The hold is twice the largest of the
//    last four enqueue times (warm-up included, 0.2-100 ms); a sample whose
//    enqueue outlasts it is retaken behind the longer hold (at most 3 times, then
//    kept and counted in hold_gaps). With hold_stream off, the first launch's host
//    latency is in the number.
//  - time_pass() clears Google Benchmark's registry when it returns: do not call
//    it from inside a Google Benchmark benchmark, nor mix it with statically
//    registered benchmarks in one process.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/backend/backend.hpp"

namespace attnbench {

/// Which pass is timed.
enum class Pass { forward, backward, forward_backward };
/// "fwd", "bwd", "fwd_bwd" (the keys of a report row's "timing" object).
const char* to_string(Pass p);
/// Inverse of to_string(Pass); throws std::invalid_argument for other names.
Pass parse_pass(const std::string& s);

/// Stopping rule and cache policy.
struct TimingPolicy {
  bool cold = true;             ///< flush L2 before every sample (GPU; host LLC on the CPU)
  int warmup = 2;               ///< untimed runs first
  int min_samples = 5;
  int max_samples = 1000;
  double target_rel_stddev = 0.02;  ///< stop once stddev / mean of the samples <= this
  double max_seconds = 2.0;     ///< wall-clock cap per (case, backend, pass), warm-up excluded
  /// GPU: hold the stream with a spin kernel while a sample is enqueued, so the
  /// events measure GPU time, not host launch latency (nvbench's blocking kernel;
  /// the PyTorch peers' workers hold their stream the same way). `--no-stream-hold`.
  bool hold_stream = true;
  /// The policy as JSON (recorded in the report header as "measurement").
  nlohmann::json to_json() const;
  /// Throws std::invalid_argument naming the field unless min_samples >= 1,
  /// max_samples >= min_samples, warmup >= 0, target_rel_stddev >= 0 and
  /// max_seconds > 0.
  void validate() const;
};

/// Summary of the samples, milliseconds.
struct TimingStats {
  int64_t n = 0;
  double median_ms = 0, q1_ms = 0, q3_ms = 0, iqr_ms = 0, min_ms = 0, max_ms = 0;
  double mean_ms = 0, stddev_ms = 0, rel_stddev = 0;
  bool converged = false;            ///< stopped by the stddev rule (not the cap)
  std::vector<double> samples_ms;
  // --- how the samples were taken (filled by time_pass; defaults for summaries built by hand)
  std::string stop_reason;           ///< "converged", "time_cap" or "max_samples"
  std::string timer;                 ///< "cuda_events" or "steady_clock"
  bool cold = false;                 ///< caches were flushed before each sample
  int warmup = 0;                    ///< untimed runs before the first sample
  double wall_seconds = 0;           ///< wall time spent sampling (warm-up excluded)
  bool stream_hold = false;          ///< GPU samples were taken behind a stream hold
  double hold_ms = 0;                ///< the hold's length at the last sample (ms)
  int64_t hold_gaps = 0;             ///< kept samples whose enqueue outlasted the hold (host time may be inside)

  /// JSON object with every field above (samples_ms included); the "timing"
  /// entries of a report row (docs/report-format.md).
  nlohmann::json to_json() const;
  /// Parse what to_json() wrote. Only "samples_ms" or the summary fields are
  /// required: with samples present the summary is recomputed from them.
  /// Throws InputError naming `file` and the JSON pointer `path` on a bad field.
  static TimingStats from_json(const nlohmann::json& j, const std::string& file, const std::string& path);
  /// Fill the summary fields from samples_ms: quantiles by linear interpolation
  /// between order statistics (Hyndman and Fan type 7, numpy's default), mean,
  /// sample standard deviation (n - 1 denominator), rel_stddev = stddev / mean.
  /// With no samples every summary field is 0.
  void summarize();
};

/// Monotonic clock in seconds. Tests inject a fake one; the default is
/// std::chrono::steady_clock.
using TimeSource = std::function<double()>;

/// Time `pass` of `inst` (a backward sample is preceded, untimed, by a forward).
/// GPU backends (backend.device() == Device::cuda, in a CUDA build) are timed with
/// CUDA events on inst.stream(); CPU backends with the steady clock around the pass
/// followed by inst.synchronize(). Stops when n >= min_samples and rel_stddev <=
/// target_rel_stddev (converged), when n == max_samples, or when the sampling wall
/// time reaches max_seconds (at least one sample is always taken).
/// Throws what the instance throws, std::invalid_argument for a bad policy, and
/// device::DeviceError for a failing CUDA call.
TimingStats time_pass(const Backend& backend, BackendInstance& inst, Pass pass,
                      const TimingPolicy& policy);

/// As above with an injected clock: CPU samples and the time cap both read `now`
/// (seconds), so a fake instance that advances a fake clock gives deterministic
/// samples. GPU samples still come from CUDA events.
TimingStats time_pass(const Backend& backend, BackendInstance& inst, Pass pass,
                      const TimingPolicy& policy, const TimeSource& now);

/// The stopping rule alone, for tests and other timers: calls `sample_ms()` until
/// the rule of time_pass() says stop (`now` measures the cap) and returns the
/// summarised samples with converged / stop_reason set. No warm-up.
TimingStats sample_until_stable(const TimingPolicy& policy, const std::function<double()>& sample_ms,
                                const TimeSource& now);

/// max(hold_ms, 2 * host_ms) clamped to [0.2, 100] ms: the stream hold that covers
/// an enqueue of `host_ms` twice over (time_pass calls it with hold_ms = 0.2 and
/// the largest of the last four enqueue times).
double next_hold_ms(double hold_ms, double host_ms);

/// Quantile q in [0, 1] of `sorted` (ascending, non-empty) by linear
/// interpolation between order statistics (type 7).
double quantile_sorted(const std::vector<double>& sorted, double q);

}  // namespace attnbench
