// The measurement engine (docs/semantics.md section 9): times one pass of a prepared
// backend instance. GPU passes are timed with CUDA events on the instance's
// stream; CPU passes with a steady clock. Warm-up, cold (L2 flushed between
// samples) or hot mode, a stopping rule (harness/measure/stopping.hpp: attnbench's
// relative-stddev rule by default, or nvbench's stdrel shape) under a sample and a
// wall-time cap, GPU samples taken while the GPU throttles discarded (nvbench's
// throttle detection, read from NVML), and an optional CUDA-graph replay timer.
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
//  - Throttle discard (GPU only): after every sample the SM clock and the
//    clocks-event (throttle) reasons are read from NVML (env::read_sm_clock); a
//    sample whose SM clock is below throttle_threshold of the board's maximum SM
//    clock, or that saw a hardware slowdown reason, is discarded (nvbench's
//    --throttle-threshold, default 75 % of the default clock, and its
//    --throttle-recovery-delay: the loop then waits throttle_recovery_s). Discarded
//    samples are counted in the row, never averaged. Without NVML nothing is
//    discarded and the row says the clocks were not watched.
//  - `timer = graph` (--timer graph): the timed pass is captured once into a CUDA
//    graph on the instance's stream and each sample replays it (cudaGraphLaunch),
//    so launch overhead is out of the number (triton's do_bench_cudagraph idea). A
//    backend whose pass cannot be captured (another stream, a synchronising call)
//    is timed with plain events instead, and its row says why (graph_fallback).
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
#include "harness/measure/stopping.hpp"

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
  /// The stopping rule (stopping.hpp); `--stopping rel_stddev|nvbench`.
  Stopping stopping = Stopping::rel_stddev;
  /// nvbench rule only: seconds of accumulated sample time before it may stop (`--min-time`).
  double min_time_s = kNvbenchMinTimeS;
  /// GPU: discard a sample whose SM clock (NVML, read after it) is below this
  /// fraction of the maximum SM clock, or that saw a hardware slowdown; 0 keeps
  /// every sample. `--throttle-threshold PERCENT` (nvbench's default 75 %).
  double throttle_threshold = 0.75;
  /// GPU: seconds to wait after a discarded sample (nvbench's --throttle-recovery-delay default).
  double throttle_recovery_s = 0.05;
  /// GPU timer: CUDA events around the enqueued pass, or a replayed CUDA graph of it (`--timer graph`).
  enum class Timer { events, graph } timer = Timer::events;
  /// The policy as JSON (recorded in the report header as "measurement").
  nlohmann::json to_json() const;
  /// Throws std::invalid_argument naming the field unless min_samples >= 1,
  /// max_samples >= min_samples, warmup >= 0, target_rel_stddev >= 0,
  /// max_seconds > 0, min_time_s >= 0, throttle_threshold in [0, 1] and
  /// throttle_recovery_s >= 0.
  void validate() const;
  /// The policy that to_json() wrote; fields it lacks (older journals and
  /// requests) keep their defaults. Throws nlohmann::json::exception on a wrong type
  /// and std::invalid_argument on an unknown stopping rule or timer.
  static TimingPolicy from_json(const nlohmann::json& j);
};

/// "events" or "graph"; parse_timer throws std::invalid_argument for other names.
const char* to_string(TimingPolicy::Timer t);
TimingPolicy::Timer parse_timer(const std::string& s);

/// The GPU's clocks as read right after one sample (NVML in time_pass; fakes in tests).
struct ClockReading {
  bool available = false;       ///< false: no NVML or no GPU: nothing is discarded
  int sm_clock_mhz = -1;        ///< current SM clock
  int max_sm_clock_mhz = -1;    ///< the board's maximum SM clock
  uint64_t throttle_mask = 0;   ///< NVML clocks-event reason bits (env::throttle_reason_names)
};

/// NVML reasons that discard a sample whatever the clock: hw_slowdown (0x8),
/// hw_thermal_slowdown (0x40), hw_power_brake_slowdown (0x80).
inline constexpr uint64_t kHardwareSlowdownMask = 0x8 | 0x40 | 0x80;

/// Whether a sample read at `r` was taken while throttling: r.available,
/// threshold > 0, and either sm_clock_mhz < threshold * max_sm_clock_mhz or a
/// bit of kHardwareSlowdownMask set.
bool is_throttled(const ClockReading& r, double threshold);

/// One sample as the sampler sees it: its time and the clocks read after it.
struct Sample {
  double ms = 0;
  ClockReading clock;
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
  std::string stopping;              ///< the rule that decided "converged": "rel_stddev" or "nvbench" ("" = not recorded)
  /// The clocks were read after every sample (GPU with NVML): then the fields
  /// below are meaningful and written.
  bool clocks_watched = false;
  int64_t throttle_discarded = 0;    ///< samples discarded as taken while throttling (not in samples_ms)
  int64_t throttled_kept = 0;        ///< throttled samples kept because the cap came with no other (0 or 1)
  std::vector<int> sm_clock_mhz;     ///< SM clock after each kept sample (MHz), parallel to samples_ms
  std::vector<std::string> throttle_reasons;  ///< NVML reasons seen after any sample, kept or not (union)
  std::string graph_fallback;        ///< --timer graph: why this pass was timed with plain events ("" = it was not)

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

/// The sampling loop alone, for tests and other timers: calls `take()` until the
/// policy's stopping rule is satisfied (converged), max_samples samples were
/// taken (kept or discarded), or `now()` - start reaches max_seconds (time_cap),
/// checked in that order after every sample. A sample whose clock reading
/// is_throttled() under policy.throttle_threshold is discarded (counted in
/// throttle_discarded), unless the loop ends with no kept sample: then the last
/// one is kept (throttled_kept = 1). Returns the summarised kept samples with
/// converged, stop_reason, stopping and the clock fields set. No warm-up, no
/// recovery wait (time_pass waits).
TimingStats sample_until_stable(const TimingPolicy& policy, const std::function<Sample()>& take,
                                const TimeSource& now);
/// As above for samples without clock readings (nothing is discarded).
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
