// The measurement engine (DESIGN.md section 3): times one pass of a prepared
// backend instance. GPU passes are timed with CUDA events on the instance's
// stream; CPU passes with a steady clock. Warm-up, cold (L2 flushed between
// samples) or hot mode, and a stopping rule on the relative standard deviation
// with a minimum sample count and a time cap (nvbench's approach).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/backend.hpp"

namespace attnbench {

/// Which pass is timed.
enum class Pass { forward, backward, forward_backward };
const char* to_string(Pass p);

/// Stopping rule and cache policy.
struct TimingPolicy {
  bool cold = true;             ///< flush L2 before every sample (GPU)
  int warmup = 2;               ///< untimed runs first
  int min_samples = 5;
  int max_samples = 1000;
  double target_rel_stddev = 0.02;  ///< stop once stddev / mean of the samples <= this
  double max_seconds = 2.0;     ///< wall-clock cap per (case, backend, pass)
};

/// Summary of the samples, milliseconds.
struct TimingStats {
  int64_t n = 0;
  double median_ms = 0, q1_ms = 0, q3_ms = 0, iqr_ms = 0, min_ms = 0, max_ms = 0;
  double mean_ms = 0, stddev_ms = 0, rel_stddev = 0;
  bool converged = false;            ///< stopped by the stddev rule (not the cap)
  std::vector<double> samples_ms;
  nlohmann::json to_json() const;
  /// Fill the summary fields from samples_ms.
  void summarize();
};

/// Time `pass` of `inst` (a backward sample is preceded, untimed, by a forward).
/// Throws what the instance throws.
TimingStats time_pass(const Backend& backend, BackendInstance& inst, Pass pass,
                      const TimingPolicy& policy);

}  // namespace attnbench
