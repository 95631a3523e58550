#include "harness/measure/kernel_trace.hpp"

#include <algorithm>
#include <map>
#include <utility>

namespace attnbench {

nlohmann::json summarize_trace(const std::vector<TracedActivity>& acts) {
  struct Group {
    const TracedActivity* first = nullptr;
    int64_t calls = 0;
    uint64_t total_ns = 0;
    uint64_t bytes = 0;
  };
  std::map<std::pair<std::string, std::string>, Group> groups;
  uint64_t device_ns = 0, t0 = UINT64_MAX, t1 = 0;
  for (const auto& a : acts) {
    const uint64_t d = a.end_ns > a.start_ns ? a.end_ns - a.start_ns : 0;
    Group& g = groups[{a.kind, a.name}];
    if (!g.first || a.start_ns < g.first->start_ns) g.first = &a;
    ++g.calls;
    g.total_ns += d;
    g.bytes += a.bytes;
    device_ns += d;
    t0 = std::min(t0, a.start_ns);
    t1 = std::max(t1, a.end_ns);
  }
  std::vector<const std::pair<const std::pair<std::string, std::string>, Group>*> order;
  for (const auto& kv : groups) order.push_back(&kv);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->second.total_ns > b->second.total_ns; });
  nlohmann::json kernels = nlohmann::json::array();
  for (const auto* kv : order) {
    const Group& g = kv->second;
    const TracedActivity& f = *g.first;
    const double total_us = static_cast<double>(g.total_ns) / 1e3;
    nlohmann::json k = {{"kind", f.kind},
                        {"name", f.name},
                        {"calls", g.calls},
                        {"total_us", total_us},
                        {"mean_us", total_us / static_cast<double>(g.calls)},
                        {"share", device_ns > 0 ? static_cast<double>(g.total_ns) / static_cast<double>(device_ns) : 0.0}};
    if (f.kind == "kernel") {
      k["grid"] = {f.grid[0], f.grid[1], f.grid[2]};
      k["block"] = {f.block[0], f.block[1], f.block[2]};
      k["ctas"] = static_cast<int64_t>(f.grid[0]) * f.grid[1] * f.grid[2];
      k["registers"] = f.registers;
      k["shared_bytes"] = f.shared_bytes;
    } else {
      k["bytes"] = g.bytes;
    }
    kernels.push_back(std::move(k));
  }
  // Timeline and busy time, activities by start time.
  std::map<std::pair<std::string, std::string>, int64_t> index;
  for (size_t i = 0; i < order.size(); ++i) index[order[i]->first] = static_cast<int64_t>(i);
  std::vector<const TracedActivity*> by_start;
  for (const auto& a : acts) by_start.push_back(&a);
  std::stable_sort(by_start.begin(), by_start.end(),
                   [](const TracedActivity* a, const TracedActivity* b) { return a->start_ns < b->start_ns; });
  std::map<uint32_t, int64_t> lanes;
  nlohmann::json timeline = nlohmann::json::array();
  uint64_t busy_ns = 0, covered_to = 0;
  for (const TracedActivity* a : by_start) {
    const int64_t lane = lanes.emplace(a->stream, static_cast<int64_t>(lanes.size())).first->second;
    const uint64_t end = std::max(a->end_ns, a->start_ns);
    if (end > covered_to) {
      busy_ns += end - std::max(a->start_ns, covered_to);
      covered_to = end;
    }
    if (timeline.size() < kMaxTimelineEntries)
      timeline.push_back({index[{a->kind, a->name}], lane, static_cast<double>(a->start_ns - t0) / 1e3,
                          static_cast<double>(end - a->start_ns) / 1e3});
  }
  return {{"activities", static_cast<int64_t>(acts.size())},
          {"device_us", static_cast<double>(device_ns) / 1e3},
          {"span_us", t1 > t0 ? static_cast<double>(t1 - t0) / 1e3 : 0.0},
          {"busy_us", static_cast<double>(busy_ns) / 1e3},
          {"streams", static_cast<int64_t>(lanes.size())},
          {"kernels", std::move(kernels)},
          {"timeline", std::move(timeline)},
          {"timeline_dropped", static_cast<int64_t>(acts.size() > kMaxTimelineEntries ? acts.size() - kMaxTimelineEntries : 0)}};
}

}  // namespace attnbench
