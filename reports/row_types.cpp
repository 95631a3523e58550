// JSON of the typed row parts (reports/row_types.hpp).
#include "reports/row_types.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "harness/model/errors.hpp"

namespace attnbench {

void to_json(nlohmann::json& j, const CheckNumber& n) {
  if (!n.value) j = nullptr;
  else if (std::isnan(*n.value)) j = "nan";
  else if (std::isinf(*n.value)) j = *n.value > 0 ? "inf" : "-inf";
  else j = *n.value;
}

void from_json(const nlohmann::json& j, CheckNumber& n) {
  n.value.reset();
  if (j.is_null()) return;
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") n.value = std::numeric_limits<double>::quiet_NaN();
    else if (s == "inf") n.value = std::numeric_limits<double>::infinity();
    else if (s == "-inf") n.value = -std::numeric_limits<double>::infinity();
    else throw std::invalid_argument("expected a number, null, \"inf\", \"-inf\" or \"nan\", got \"" + s + "\"");
    return;
  }
  n.value = j.get<double>();
}

void to_json(nlohmann::json& j, const MemoryFigures& m) {
  j = nlohmann::json::object();
  if (m.allocated_bytes) j["allocated_bytes"] = *m.allocated_bytes;
  if (m.workspace_bytes) j["workspace_bytes"] = *m.workspace_bytes;
  if (m.peak_bytes) j["peak_bytes"] = *m.peak_bytes;
}

void from_json(const nlohmann::json& j, MemoryFigures& m) {
  m = {};
  m.allocated_bytes = j.value("allocated_bytes", std::optional<int64_t>());
  m.workspace_bytes = j.value("workspace_bytes", std::optional<int64_t>());
  m.peak_bytes = j.value("peak_bytes", std::optional<int64_t>());
}

void to_json(nlohmann::json& j, const TimingStats& s) { j = s.to_json(); }
void from_json(const nlohmann::json& j, TimingStats& s) { s = TimingStats::from_json(j, "", ""); }

const TimingStats* PassTimings::get(Pass pass) const {
  const auto& s = pass == Pass::forward ? fwd : pass == Pass::backward ? bwd : fwd_bwd;
  return s ? &*s : nullptr;
}

void PassTimings::set(Pass pass, TimingStats stats) {
  (pass == Pass::forward ? fwd : pass == Pass::backward ? bwd : fwd_bwd) = std::move(stats);
}

void to_json(nlohmann::json& j, const PassTimings& t) {
  if (t.empty()) {
    j = nullptr;
    return;
  }
  j = nlohmann::json::object();
  for (Pass p : {Pass::forward, Pass::backward, Pass::forward_backward})
    if (const TimingStats* s = t.get(p)) j[to_string(p)] = *s;
}

void from_json(const nlohmann::json& j, PassTimings& t) {
  t = {};
  if (j.is_null()) return;
  for (const auto& [key, stats] : j.items()) {
    Pass p;
    try {
      p = parse_pass(key);
    } catch (const std::invalid_argument&) {
      throw InputError("", "/" + key, "unknown pass \"" + key + "\" (expected fwd, bwd or fwd_bwd)");
    }
    t.set(p, stats.get<TimingStats>());
  }
}

void to_json(nlohmann::json& j, const CheckFigures& c) {
  j = nlohmann::json::object();
  if (c.pass) j["pass"] = *c.pass;
  j["mode"] = c.mode;
  if (!c.scope.empty()) j["scope"] = c.scope;
  if (!c.plan.empty()) j["plan"] = c.plan;
  if (!c.rule.empty()) j["rule"] = c.rule;
  if (c.mode != "off") j["worst_ratio"] = c.worst_ratio;
  if (c.reference_ms) j["reference_ms"] = *c.reference_ms;
  if (!c.gold_source.empty()) j["gold_source"] = c.gold_source;
  if (c.gold_ms) j["gold_ms"] = *c.gold_ms;
  if (c.mode != "off" || !c.tensors.empty()) j["tensors"] = c.tensors;
  if (c.fully_masked_rows) j["fully_masked_rows"] = *c.fully_masked_rows;
  if (!c.failure_class.empty()) j["failure_class"] = c.failure_class;
  if (!c.failure_detail.empty()) j["failure_detail"] = c.failure_detail;
  if (c.mode == "off" || !c.nonfinite.empty()) j["nonfinite"] = c.nonfinite;
}

void from_json(const nlohmann::json& j, CheckFigures& c) {
  c = {};
  c.pass = j.value("pass", std::optional<bool>());
  c.mode = j.value("mode", std::string());
  c.scope = j.value("scope", std::string());
  c.plan = j.value("plan", std::string());
  c.rule = j.value("rule", std::string());
  c.worst_ratio = j.value("worst_ratio", CheckNumber());
  c.reference_ms = j.value("reference_ms", std::optional<double>());
  c.gold_source = j.value("gold_source", std::string());
  c.gold_ms = j.value("gold_ms", std::optional<double>());
  c.tensors = j.value("tensors", std::vector<TensorCheckFigures>());
  c.fully_masked_rows = j.value("fully_masked_rows", std::optional<int64_t>());
  c.failure_class = j.value("failure_class", std::string());
  c.failure_detail = j.value("failure_detail", std::string());
  c.nonfinite = j.value("nonfinite", std::map<std::string, int64_t>());
}

}  // namespace attnbench
