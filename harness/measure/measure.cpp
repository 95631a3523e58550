// The measurement engine: see measure.hpp for the model and its sharp edges.
#include "harness/measure/measure.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <stdexcept>

#include <unistd.h>

#include <benchmark/benchmark.h>

#include "harness/device/environment.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"

#if defined(ATTNBENCH_HAVE_CUDA)
#include <cuda_runtime.h>

#include "harness/device/check.hpp"
#include "harness/device/hold.hpp"
#endif

namespace attnbench {

const char* to_string(Pass p) {
  switch (p) {
    case Pass::forward: return "fwd";
    case Pass::backward: return "bwd";
    case Pass::forward_backward: return "fwd_bwd";
  }
  return "fwd";
}

Pass parse_pass(const std::string& s) {
  if (s == "fwd") return Pass::forward;
  if (s == "bwd") return Pass::backward;
  if (s == "fwd_bwd") return Pass::forward_backward;
  throw std::invalid_argument("unknown pass \"" + s + "\" (expected fwd, bwd or fwd_bwd)");
}

// ------------------------------------------------------------------ policy

nlohmann::json TimingPolicy::to_json() const {
  return {{"cold", cold},
          {"warmup", warmup},
          {"min_samples", min_samples},
          {"max_samples", max_samples},
          {"target_rel_stddev", target_rel_stddev},
          {"max_seconds", max_seconds},
          {"hold_stream", hold_stream},
          {"stopping", to_string(stopping)},
          {"min_time_s", min_time_s},
          {"throttle_threshold", throttle_threshold},
          {"throttle_recovery_s", throttle_recovery_s},
          {"timer", to_string(timer)}};
}

TimingPolicy TimingPolicy::from_json(const nlohmann::json& j) {
  TimingPolicy p;
  p.cold = j.value("cold", p.cold);
  p.warmup = j.value("warmup", p.warmup);
  p.min_samples = j.value("min_samples", p.min_samples);
  p.max_samples = j.value("max_samples", p.max_samples);
  p.target_rel_stddev = j.value("target_rel_stddev", p.target_rel_stddev);
  p.max_seconds = j.value("max_seconds", p.max_seconds);
  p.hold_stream = j.value("hold_stream", p.hold_stream);
  p.stopping = parse_stopping(j.value("stopping", std::string(to_string(p.stopping))));
  p.min_time_s = j.value("min_time_s", p.min_time_s);
  p.throttle_threshold = j.value("throttle_threshold", p.throttle_threshold);
  p.throttle_recovery_s = j.value("throttle_recovery_s", p.throttle_recovery_s);
  p.timer = parse_timer(j.value("timer", std::string(to_string(p.timer))));
  return p;
}

const char* to_string(TimingPolicy::Timer t) { return t == TimingPolicy::Timer::graph ? "graph" : "events"; }

TimingPolicy::Timer parse_timer(const std::string& s) {
  if (s == "events") return TimingPolicy::Timer::events;
  if (s == "graph") return TimingPolicy::Timer::graph;
  throw std::invalid_argument("unknown timer \"" + s + "\" (expected events or graph)");
}

bool is_throttled(const ClockReading& r, double threshold) {
  if (!r.available || !(threshold > 0)) return false;
  if (r.throttle_mask & kHardwareSlowdownMask) return true;
  return r.sm_clock_mhz >= 0 && r.max_sm_clock_mhz > 0 &&
         static_cast<double>(r.sm_clock_mhz) < threshold * static_cast<double>(r.max_sm_clock_mhz);
}

void TimingPolicy::validate() const {
  auto bad = [](const std::string& what) { throw std::invalid_argument("timing policy: " + what); };
  if (warmup < 0) bad("warmup must be >= 0, got " + std::to_string(warmup));
  if (min_samples < 1) bad("min_samples must be >= 1, got " + std::to_string(min_samples));
  if (max_samples < min_samples)
    bad("max_samples (" + std::to_string(max_samples) + ") must be >= min_samples (" + std::to_string(min_samples) + ")");
  if (!(target_rel_stddev >= 0)) bad("target_rel_stddev must be >= 0, got " + std::to_string(target_rel_stddev));
  if (!(max_seconds > 0)) bad("max_seconds must be > 0, got " + std::to_string(max_seconds));
  if (!(min_time_s >= 0)) bad("min_time_s must be >= 0, got " + std::to_string(min_time_s));
  if (!(throttle_threshold >= 0 && throttle_threshold <= 1))
    bad("throttle_threshold must be in [0, 1] (a fraction of the maximum SM clock), got " +
        std::to_string(throttle_threshold));
  if (!(throttle_recovery_s >= 0)) bad("throttle_recovery_s must be >= 0, got " + std::to_string(throttle_recovery_s));
}

double next_hold_ms(double hold_ms, double host_ms) {
  return std::clamp(std::max(hold_ms, 2.0 * host_ms), 0.2, 100.0);
}

// ------------------------------------------------------------------ statistics

double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("quantile of an empty sample");
  const double h = (static_cast<double>(sorted.size()) - 1.0) * std::clamp(q, 0.0, 1.0);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

void TimingStats::summarize() {
  n = static_cast<int64_t>(samples_ms.size());
  if (n == 0) {
    median_ms = q1_ms = q3_ms = iqr_ms = min_ms = max_ms = mean_ms = stddev_ms = rel_stddev = 0;
    return;
  }
  std::vector<double> s = samples_ms;
  std::sort(s.begin(), s.end());
  min_ms = s.front();
  max_ms = s.back();
  median_ms = quantile_sorted(s, 0.5);
  q1_ms = quantile_sorted(s, 0.25);
  q3_ms = quantile_sorted(s, 0.75);
  iqr_ms = q3_ms - q1_ms;
  double sum = 0;
  for (double x : s) sum += x;
  mean_ms = sum / static_cast<double>(n);
  double ss = 0;
  for (double x : s) ss += (x - mean_ms) * (x - mean_ms);
  stddev_ms = n > 1 ? std::sqrt(ss / static_cast<double>(n - 1)) : 0.0;
  rel_stddev = mean_ms > 0 ? stddev_ms / mean_ms : 0.0;
}

nlohmann::json TimingStats::to_json() const {
  nlohmann::json j;
  j["n"] = n;
  j["median_ms"] = median_ms;
  j["q1_ms"] = q1_ms;
  j["q3_ms"] = q3_ms;
  j["iqr_ms"] = iqr_ms;
  j["min_ms"] = min_ms;
  j["max_ms"] = max_ms;
  j["mean_ms"] = mean_ms;
  j["stddev_ms"] = stddev_ms;
  j["rel_stddev"] = rel_stddev;
  j["converged"] = converged;
  j["stop_reason"] = stop_reason;
  j["timer"] = timer;
  j["cold"] = cold;
  j["warmup"] = warmup;
  j["wall_seconds"] = wall_seconds;
  if (stream_hold) {
    j["stream_hold"] = true;
    j["hold_ms"] = hold_ms;
    j["hold_gaps"] = hold_gaps;
  }
  if (!stopping.empty()) j["stopping"] = stopping;
  if (clocks_watched) {
    j["clocks_watched"] = true;
    j["throttle_discarded"] = throttle_discarded;
    j["throttled_kept"] = throttled_kept;
    j["sm_clock_mhz"] = sm_clock_mhz;
    j["throttle_reasons"] = throttle_reasons;
  }
  if (!graph_fallback.empty()) j["graph_fallback"] = graph_fallback;
  j["samples_ms"] = samples_ms;
  return j;
}

TimingStats TimingStats::from_json(const nlohmann::json& j, const std::string& file, const std::string& path) {
  jsonu::require_object(j, file, path);
  TimingStats t;
  if (j.contains("samples_ms") && !j["samples_ms"].is_null()) {
    const auto& arr = j["samples_ms"];
    const std::string ap = jsonu::child_path(path, "samples_ms");
    if (!arr.is_array()) throw InputError(file, ap, "expected an array of milliseconds, got " + jsonu::show(arr));
    for (size_t i = 0; i < arr.size(); ++i) {
      double v = jsonu::get_number(arr[i], file, jsonu::child_path(ap, i));
      if (!std::isfinite(v) || v < 0)
        throw InputError(file, jsonu::child_path(ap, i), "sample must be a finite time >= 0 ms, got " + jsonu::show(arr[i]));
      t.samples_ms.push_back(v);
    }
  }
  if (!t.samples_ms.empty()) {
    t.summarize();
  } else {
    t.n = jsonu::opt_int(j, "n", 0, file, path);
    t.median_ms = jsonu::get_number(jsonu::require(j, "median_ms", file, path), file, jsonu::child_path(path, "median_ms"));
    t.q1_ms = jsonu::opt_number(j, "q1_ms", t.median_ms, file, path);
    t.q3_ms = jsonu::opt_number(j, "q3_ms", t.median_ms, file, path);
    t.iqr_ms = t.q3_ms - t.q1_ms;
    t.min_ms = jsonu::opt_number(j, "min_ms", t.q1_ms, file, path);
    t.max_ms = jsonu::opt_number(j, "max_ms", t.q3_ms, file, path);
    t.mean_ms = jsonu::opt_number(j, "mean_ms", t.median_ms, file, path);
    t.stddev_ms = jsonu::opt_number(j, "stddev_ms", 0.0, file, path);
    t.rel_stddev = jsonu::opt_number(j, "rel_stddev", 0.0, file, path);
  }
  if (j.contains("converged") && j["converged"].is_boolean()) t.converged = j["converged"].get<bool>();
  t.stop_reason = jsonu::opt_string(j, "stop_reason", "", file, path);
  t.timer = jsonu::opt_string(j, "timer", "", file, path);
  if (j.contains("cold") && j["cold"].is_boolean()) t.cold = j["cold"].get<bool>();
  t.warmup = static_cast<int>(jsonu::opt_int(j, "warmup", 0, file, path));
  t.wall_seconds = jsonu::opt_number(j, "wall_seconds", 0.0, file, path);
  if (j.contains("stream_hold") && j["stream_hold"].is_boolean()) t.stream_hold = j["stream_hold"].get<bool>();
  t.hold_ms = jsonu::opt_number(j, "hold_ms", 0.0, file, path);
  t.hold_gaps = jsonu::opt_int(j, "hold_gaps", 0, file, path);
  t.stopping = jsonu::opt_string(j, "stopping", "", file, path);
  if (j.contains("clocks_watched") && j["clocks_watched"].is_boolean()) t.clocks_watched = j["clocks_watched"].get<bool>();
  t.throttle_discarded = jsonu::opt_int(j, "throttle_discarded", 0, file, path);
  t.throttled_kept = jsonu::opt_int(j, "throttled_kept", 0, file, path);
  if (j.contains("sm_clock_mhz") && j["sm_clock_mhz"].is_array())
    for (const auto& v : j["sm_clock_mhz"])
      if (v.is_number_integer()) t.sm_clock_mhz.push_back(v.get<int>());
  if (j.contains("throttle_reasons") && j["throttle_reasons"].is_array())
    for (const auto& v : j["throttle_reasons"])
      if (v.is_string()) t.throttle_reasons.push_back(v.get<std::string>());
  t.graph_fallback = jsonu::opt_string(j, "graph_fallback", "", file, path);
  return t;
}

// ------------------------------------------------------------------ stopping rule

TimingStats sample_until_stable(const TimingPolicy& policy, const std::function<Sample()>& take,
                                const TimeSource& now) {
  policy.validate();
  const auto rule = make_stopping_rule(policy.stopping, policy.min_samples, policy.target_rel_stddev, policy.min_time_s);
  TimingStats st;
  st.stopping = rule->name();
  const double t0 = now();
  // Welford's running mean and variance of the kept samples: the rule is asked after every one.
  SampleState state;
  double m2 = 0;
  int64_t taken = 0;
  std::optional<Sample> last_discarded;
  auto note_reasons = [&](uint64_t mask) {
    for (const auto& r : env::throttle_reason_names(mask))
      if (std::find(st.throttle_reasons.begin(), st.throttle_reasons.end(), r) == st.throttle_reasons.end())
        st.throttle_reasons.push_back(r);
  };
  auto keep = [&](const Sample& x) {
    st.samples_ms.push_back(x.ms);
    if (x.clock.available) st.sm_clock_mhz.push_back(x.clock.sm_clock_mhz);
    state.n = static_cast<int64_t>(st.samples_ms.size());
    const double n = static_cast<double>(state.n);
    const double d = x.ms - state.mean_ms;
    state.mean_ms += d / n;
    m2 += d * (x.ms - state.mean_ms);
    state.total_ms += x.ms;
    state.rel_stddev = (n > 1 && state.mean_ms > 0) ? std::sqrt(m2 / (n - 1)) / state.mean_ms : 0.0;
  };
  for (;;) {
    const Sample x = take();
    ++taken;
    if (x.clock.available) {
      st.clocks_watched = true;
      note_reasons(x.clock.throttle_mask);
    }
    if (is_throttled(x.clock, policy.throttle_threshold)) {
      ++st.throttle_discarded;
      last_discarded = x;
    } else {
      keep(x);
      if (rule->satisfied(state)) {
        st.converged = true;
        st.stop_reason = "converged";
        break;
      }
    }
    if (taken >= policy.max_samples) {
      st.stop_reason = "max_samples";
      break;
    }
    if (now() - t0 >= policy.max_seconds) {
      st.stop_reason = "time_cap";
      break;
    }
  }
  if (st.samples_ms.empty() && last_discarded) {  // every sample throttled: keep the last, say so
    keep(*last_discarded);
    --st.throttle_discarded;
    st.throttled_kept = 1;
  }
  st.wall_seconds = now() - t0;
  st.summarize();
  return st;
}

TimingStats sample_until_stable(const TimingPolicy& policy, const std::function<double()>& sample_ms,
                                const TimeSource& now) {
  return sample_until_stable(policy, std::function<Sample()>([&] { return Sample{sample_ms(), {}}; }), now);
}

// ------------------------------------------------------------------ cache flushing

namespace {
// Google Benchmark renamed Run::error_occurred (<= 1.7) to Run::skipped (>= 1.8);
// Debian ships 1.7, the GPU machine a newer one: accept both.
template <class R>
auto run_failed(const R& r, int) -> decltype(static_cast<bool>(r.error_occurred)) {
  return static_cast<bool>(r.error_occurred);
}
template <class R>
auto run_failed(const R& r, long) -> decltype(static_cast<bool>(r.skipped)) {
  return static_cast<bool>(r.skipped);
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Host last-level cache flush: write one reused buffer of the LLC size.
class HostCacheFlusher {
 public:
  static HostCacheFlusher& get() {
    static HostCacheFlusher f;
    return f;
  }
  void flush() {
    ++round_;
    std::memset(buf_.data(), static_cast<int>(round_ & 0xff), buf_.size());
    benchmark::DoNotOptimize(buf_.data());
    benchmark::ClobberMemory();
  }

 private:
  HostCacheFlusher() {
    long llc = -1;
#if defined(_SC_LEVEL3_CACHE_SIZE)
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    constexpr long kFallback = 32l << 20;   // when the OS does not say
    constexpr long kCap = 256l << 20;
    buf_.resize(static_cast<size_t>(std::clamp(llc > 0 ? llc : kFallback, 1l << 20, kCap)));
  }
  std::vector<unsigned char> buf_;
  unsigned round_ = 0;
};

#if defined(ATTNBENCH_HAVE_CUDA)
/// nvbench's L2 flush: one device buffer of the L2 size per device, written on the
/// timed stream before every sample. Allocated once and kept for the process
/// (freeing at static destruction would race the CUDA runtime's own teardown).
class L2Flusher {
 public:
  static L2Flusher& for_current_device() {
    static std::mutex mu;
    static std::map<int, L2Flusher*> cache;
    int dev = 0;
    ATTNBENCH_CHECK(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(dev);
    if (it == cache.end()) it = cache.emplace(dev, new L2Flusher(dev)).first;
    return *it->second;
  }
  void flush(cudaStream_t s) {
    if (bytes_ == 0) return;
    ++round_;
    ATTNBENCH_CHECK(cudaMemsetAsync(buf_, static_cast<int>(round_ & 0xff), bytes_, s));
  }

 private:
  explicit L2Flusher(int dev) {
    cudaDeviceProp prop{};
    ATTNBENCH_CHECK(cudaGetDeviceProperties(&prop, dev));
    bytes_ = prop.l2CacheSize > 0 ? static_cast<size_t>(prop.l2CacheSize) : 0;
    if (bytes_ > 0) ATTNBENCH_CHECK(cudaMalloc(&buf_, bytes_));
  }
  void* buf_ = nullptr;
  size_t bytes_ = 0;
  unsigned round_ = 0;
};

/// Two CUDA events, destroyed on scope exit.
class EventPair {
 public:
  EventPair() {
    ATTNBENCH_CHECK(cudaEventCreate(&start));
    ATTNBENCH_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  cudaEvent_t start = nullptr, stop = nullptr;
};

/// One pass captured into a CUDA graph on the timed stream, replayed per sample
/// (--timer graph). capture() returns nullptr with the reason when the pass cannot
/// be captured (it uses another stream, synchronises, allocates); the stream is
/// out of capture mode and its error state cleared either way.
class GraphReplay {
 public:
  static std::unique_ptr<GraphReplay> capture(cudaStream_t s, const std::function<void()>& pass, std::string* why) {
    auto fail = [&](const std::string& what, cudaError_t e) -> std::unique_ptr<GraphReplay> {
      (void)cudaGetLastError();
      *why = "CUDA graph capture failed (" + what + ": " + cudaGetErrorString(e) + "): timed with plain events";
      return nullptr;
    };
    if (s == nullptr) {
      *why = "the backend times on the legacy default stream, which cannot be captured: timed with plain events";
      return nullptr;
    }
    ATTNBENCH_CHECK(cudaStreamSynchronize(s));
    cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return fail("cudaStreamBeginCapture", e);
    cudaGraph_t g = nullptr;
    try {
      pass();
    } catch (const std::exception& ex) {
      (void)cudaStreamEndCapture(s, &g);
      if (g) cudaGraphDestroy(g);
      (void)cudaGetLastError();
      *why = std::string("CUDA graph capture failed (the pass threw: ") + ex.what() + "): timed with plain events";
      return nullptr;
    }
    e = cudaStreamEndCapture(s, &g);
    if (e != cudaSuccess || !g) {
      if (g) cudaGraphDestroy(g);
      return fail("cudaStreamEndCapture", e);
    }
    auto r = std::unique_ptr<GraphReplay>(new GraphReplay());
    r->graph_ = g;
    e = cudaGraphInstantiateWithFlags(&r->exec_, g, 0);
    if (e != cudaSuccess) return fail("cudaGraphInstantiate", e);
    return r;
  }
  void launch(cudaStream_t s) { ATTNBENCH_CHECK(cudaGraphLaunch(exec_, s)); }
  ~GraphReplay() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }

 private:
  GraphReplay() = default;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// The SM clock and throttle reasons of CUDA device `device` now (NVML).
ClockReading read_clock(int device) {
  const env::ClockSample c = env::read_sm_clock(device);
  return {c.available, c.sm_clock_mhz, c.max_sm_clock_mhz, c.throttle_mask};
}
#endif

/// Discards everything Google Benchmark reports, keeping the runs for checks.
class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override { runs_.insert(runs_.end(), runs.begin(), runs.end()); }
  const std::vector<Run>& runs() const { return runs_; }

 private:
  std::vector<Run> runs_;
};

/// Clears Google Benchmark's registry on scope exit (also when throwing).
struct RegistryGuard {
  ~RegistryGuard() { benchmark::ClearRegisteredBenchmarks(); }
};

std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::strchr("\\^$.|?*+()[]{}", c)) out += '\\';
    out += c;
  }
  return out;
}

/// The timing loop of time_pass() as one Google Benchmark run of one iteration
/// named `name`: policy.warmup calls of `warm`, then sample_until_stable() over
/// `take_sample` inside it (manual time: the samples' sum). Rethrows what the loop
/// threw; throws std::logic_error when Google Benchmark did not run it once.
TimingStats run_benchmark(const std::string& name, const TimingPolicy& policy, const std::function<void()>& warm,
                          const std::function<Sample()>& take_sample, const TimeSource& now) {
  // Google Benchmark appends "/iterations:1/repeats:1/manual_time" to the name.
  TimingStats result;
  std::exception_ptr failure;
  RegistryGuard guard;
  benchmark::RegisterBenchmark(name.c_str(),
                               [&](benchmark::State& state) {
                                 for (auto _ : state) {
                                   try {
                                     for (int i = 0; i < policy.warmup; ++i) warm();
                                     result = sample_until_stable(policy, take_sample, now);
                                   } catch (...) {
                                     failure = std::current_exception();
                                     state.SkipWithError("the timed pass threw");
                                     break;
                                   }
                                   double total_ms = 0;
                                   for (double x : result.samples_ms) total_ms += x;
                                   state.SetIterationTime(total_ms * 1e-3);
                                 }
                                 if (!failure) {
                                   state.counters["samples"] = static_cast<double>(result.n);
                                   state.counters["median_ms"] = result.median_ms;
                                 }
                               })
      ->Iterations(1)
      ->Repetitions(1)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  SilentReporter reporter;
  const size_t ran = benchmark::RunSpecifiedBenchmarks(&reporter, "^" + regex_escape(name) + "(/|$)");
  if (failure) std::rethrow_exception(failure);
  if (ran != 1 || reporter.runs().size() != 1 || run_failed(reporter.runs()[0], 0))
    throw std::logic_error("Google Benchmark did not run the timing loop of " + name);
  return result;
}

}  // namespace

// ------------------------------------------------------------------ time_pass

TimingStats time_pass(const Backend& backend, BackendInstance& inst, Pass pass, const TimingPolicy& policy) {
  return time_pass(backend, inst, pass, policy, steady_seconds);
}

TimingStats time_pass(const Backend& backend, BackendInstance& inst, Pass pass, const TimingPolicy& policy,
                      const TimeSource& now) {
  policy.validate();
  // The work of one sample: `pre` is untimed, `timed` is the number.
  auto pre = [&] {
    if (pass == Pass::backward) inst.forward();
  };
  auto timed = [&] {
    if (pass != Pass::backward) inst.forward();
    if (pass != Pass::forward) inst.backward();
  };

  bool gpu = false;
#if defined(ATTNBENCH_HAVE_CUDA)
  gpu = backend.device() == Device::cuda;
#else
  if (backend.device() == Device::cuda)
    throw std::runtime_error("backend \"" + backend.name() + "\" needs CUDA but attnbench was built without it");
#endif

  std::function<Sample()> take_sample;
  std::function<void()> warm;
  double hold_ms = 0.2;  // GPU stream hold (policy.hold_stream), adapted to the host enqueue time
  int64_t hold_gaps = 0;
  std::string graph_fallback;  // --timer graph: why plain events were used
  bool graph_used = false;
#if defined(ATTNBENCH_HAVE_CUDA)
  double recent_host[4] = {0, 0, 0, 0};  // last host enqueue times (ms), ring buffer
  size_t recent_n = 0;
  // The hold follows the recent enqueue times (twice the largest of the last
  // four), so one slow enqueue does not pin it high for the rest of the pass.
  auto note_host = [&](double host_ms) {
    recent_host[recent_n++ % 4] = host_ms;
    double m = 0;
    for (size_t i = 0; i < std::min<size_t>(recent_n, 4); ++i) m = std::max(m, recent_host[i]);
    hold_ms = next_hold_ms(0.2, m);
  };
  std::unique_ptr<EventPair> events;
  std::unique_ptr<GraphReplay> graph;
  cudaStream_t stream = static_cast<cudaStream_t>(inst.stream());
  L2Flusher* l2 = nullptr;
  int device = 0;
  if (gpu) {
    events = std::make_unique<EventPair>();
    if (policy.cold) l2 = &L2Flusher::for_current_device();
    ATTNBENCH_CHECK(cudaGetDevice(&device));
    // With the hold, the stream is: [hold: spins while the host enqueues] [L2
    // flush] start [pass, or the graph replaying it] stop. A sample whose enqueue
    // outlasted the hold (the GPU may have idled inside the events) is retaken
    // with a longer hold, or kept and counted in hold_gaps once the hold is at
    // its cap. Then the clocks are read (throttle discard) and, after a throttled
    // sample, the loop waits throttle_recovery_s.
    take_sample = [&]() -> Sample {
      for (int attempt = 0;; ++attempt) {
        pre();
        if (policy.hold_stream) device::hold_stream(stream, hold_ms);
        const double h0 = steady_seconds();
        if (l2) l2->flush(stream);
        ATTNBENCH_CHECK(cudaEventRecord(events->start, stream));
        if (graph) graph->launch(stream);
        else timed();
        const double host_ms = (steady_seconds() - h0) * 1e3;
        ATTNBENCH_CHECK(cudaEventRecord(events->stop, stream));
        ATTNBENCH_CHECK(cudaEventSynchronize(events->stop));
        float ms = 0;
        ATTNBENCH_CHECK(cudaEventElapsedTime(&ms, events->start, events->stop));
        if (policy.hold_stream) {
          const bool gap = host_ms > hold_ms;
          note_host(host_ms);
          if (gap) {
            if (attempt < 3 && hold_ms < 100.0) continue;  // retake behind the longer hold
            ++hold_gaps;                                   // kept: host time may be inside
          }
        }
        Sample out{static_cast<double>(ms), read_clock(device)};
        if (is_throttled(out.clock, policy.throttle_threshold) && policy.throttle_recovery_s > 0)
          std::this_thread::sleep_for(std::chrono::duration<double>(policy.throttle_recovery_s));
        return out;
      }
    };
    warm = [&] {
      pre();
      const double h0 = steady_seconds();
      timed();
      const double host_ms = (steady_seconds() - h0) * 1e3;
      inst.synchronize();
      ATTNBENCH_CHECK(cudaStreamSynchronize(stream));
      note_host(host_ms);
    };
    if (policy.timer == TimingPolicy::Timer::graph) {
      pre();
      graph = GraphReplay::capture(stream, timed, &graph_fallback);
      inst.synchronize();
      graph_used = graph != nullptr;
    }
  }
#endif
  if (!gpu) {
    if (policy.timer == TimingPolicy::Timer::graph) graph_fallback = "not a GPU pass: timed with the steady clock";
    HostCacheFlusher* host = policy.cold ? &HostCacheFlusher::get() : nullptr;
    take_sample = [&, host]() -> Sample {
      pre();
      inst.synchronize();
      if (host) host->flush();
      const double t0 = now();
      timed();
      inst.synchronize();
      return {(now() - t0) * 1e3, {}};
    };
    warm = [&] {
      pre();
      timed();
      inst.synchronize();
    };
  }

  static std::atomic<uint64_t> counter{0};
  const std::string name = "attnbench/" + backend.name() + "/" + to_string(pass) + "/" + std::to_string(++counter);
  TimingStats result = run_benchmark(name, policy, warm, take_sample, now);
  result.timer = graph_used ? "cuda_graph" : gpu ? "cuda_events" : "steady_clock";
  result.graph_fallback = graph_fallback;
  if (gpu && policy.hold_stream) {
    result.stream_hold = true;
    result.hold_ms = hold_ms;
    result.hold_gaps = hold_gaps;
  }
  result.cold = policy.cold;
  result.warmup = policy.warmup;
  return result;
}

}  // namespace attnbench
