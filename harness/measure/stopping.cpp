// Stopping rules: see stopping.hpp.
#include "harness/measure/stopping.hpp"

#include <stdexcept>

namespace attnbench {

Stopping parse_stopping(const std::string& s) {
  if (s == "rel_stddev" || s == "rel-stddev") return Stopping::rel_stddev;
  if (s == "nvbench") return Stopping::nvbench;
  throw std::invalid_argument("unknown stopping rule \"" + s + "\" (expected rel_stddev or nvbench)");
}

const char* to_string(Stopping s) { return s == Stopping::nvbench ? "nvbench" : "rel_stddev"; }

std::unique_ptr<StoppingRule> make_stopping_rule(Stopping which, int64_t min_samples, double target_rel_stddev,
                                                 double min_time_s) {
  if (which == Stopping::nvbench) return std::make_unique<NoiseMinTimeRule>(min_samples, target_rel_stddev, min_time_s);
  return std::make_unique<RelStddevRule>(min_samples, target_rel_stddev);
}

}  // namespace attnbench
