// PLACEHOLDER: replaced by the correctness rule.
#include "harness/check.hpp"
#include <stdexcept>
namespace attnbench {
CheckMode parse_check_mode(const std::string&) { return CheckMode::automatic; }
const char* to_string(CheckMode) { return "automatic"; }
nlohmann::json CheckResult::to_json() const { return {}; }
reference::SliceSet sample_slices(const Problem&, int64_t, uint64_t) { return {}; }
CheckResult check_outputs(const Problem&, const AttentionOutputs&, const AttentionOutputs&, const AttentionOutputs&, const RuleConstants&, const reference::SliceSet&) { throw std::logic_error("check not implemented yet"); }
double ulp_of(DType, double) { return 0; }
bool bitwise_equal(const AttentionOutputs&, const AttentionOutputs&) { return false; }
}  // namespace attnbench
