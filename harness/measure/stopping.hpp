// Stopping rules of the timing loop (docs/semantics.md section 9): when the samples
// taken so far are good enough. The sampler (sample_until_stable in measure.hpp)
// asks the rule after every kept sample; its caps (max_samples, and max_seconds of
// wall time) end sampling under every rule.
//
// Two rules, chosen per run (`attnbench run --stopping`, TimingPolicy::stopping):
//  - rel_stddev (default): attnbench's own rule. Stop once at least min_samples
//    samples have a relative standard deviation (sample stddev / mean) at or
//    below target_rel_stddev (defaults 5 samples, 2 %). No minimum time: a 10 us
//    kernel may stop after 50 us of samples. This is NOT nvbench's rule.
//  - nvbench: the shape of nvbench's default `stdrel` stopping criterion, as its
//    documentation describes it (docs/cli_help.md of NVIDIA/nvbench: --min-samples,
//    default 10; --min-time, default 0.5 s of accumulated measured time;
//    --max-noise, default 0.5 % relative standard deviation; --timeout, 15 s of
//    wall time). Stop once at least min_samples samples, whose times add up to at
//    least min_time_s, have a relative standard deviation at or below the
//    target. nvbench's own timeout is replaced by our max_seconds cap (default
//    2 s); nvbench additionally ends a measurement whose noise has stopped
//    improving, which is not reproduced here (the cap ends those).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace attnbench {

/// The kept samples so far, as a rule sees them.
struct SampleState {
  int64_t n = 0;           ///< kept samples
  double mean_ms = 0;      ///< their mean (ms)
  double rel_stddev = 0;   ///< sample standard deviation (n - 1) / mean; 0 for n = 1 or mean <= 0
  double total_ms = 0;     ///< their sum: measured time accumulated (ms)
};

/// When the kept samples are good enough to stop (the caps are the sampler's).
class StoppingRule {
 public:
  virtual ~StoppingRule() = default;
  /// "rel_stddev" or "nvbench" (TimingStats::stopping, the report's rows).
  virtual std::string name() const = 0;
  /// True when sampling may stop with `s` as the result (stop_reason "converged").
  virtual bool satisfied(const SampleState& s) const = 0;
};

/// attnbench's rule: n >= min_samples and rel_stddev <= target.
class RelStddevRule final : public StoppingRule {
 public:
  RelStddevRule(int64_t min_samples, double target) : min_samples_(min_samples), target_(target) {}
  std::string name() const override { return "rel_stddev"; }
  bool satisfied(const SampleState& s) const override { return s.n >= min_samples_ && s.rel_stddev <= target_; }

 private:
  int64_t min_samples_;
  double target_;
};

/// nvbench's stdrel shape: n >= min_samples, total_ms >= 1000 * min_time_s and
/// rel_stddev <= max_noise.
class NoiseMinTimeRule final : public StoppingRule {
 public:
  NoiseMinTimeRule(int64_t min_samples, double max_noise, double min_time_s)
      : min_samples_(min_samples), max_noise_(max_noise), min_time_ms_(min_time_s * 1e3) {}
  std::string name() const override { return "nvbench"; }
  bool satisfied(const SampleState& s) const override {
    return s.n >= min_samples_ && s.total_ms >= min_time_ms_ && s.rel_stddev <= max_noise_;
  }

 private:
  int64_t min_samples_;
  double max_noise_, min_time_ms_;
};

/// Which rule a run uses.
enum class Stopping { rel_stddev, nvbench };
/// "rel_stddev" (also "rel-stddev") or "nvbench"; throws std::invalid_argument naming the value otherwise.
Stopping parse_stopping(const std::string& s);
/// "rel_stddev" or "nvbench".
const char* to_string(Stopping s);

/// nvbench's documented defaults of its stdrel criterion, which `--stopping
/// nvbench` uses for what the command line does not set.
inline constexpr int kNvbenchMinSamples = 10;
inline constexpr double kNvbenchMaxNoise = 0.005;
inline constexpr double kNvbenchMinTimeS = 0.5;

/// The rule `which` with these parameters (min_time_s is used by nvbench only).
std::unique_ptr<StoppingRule> make_stopping_rule(Stopping which, int64_t min_samples, double target_rel_stddev,
                                                 double min_time_s);

}  // namespace attnbench
