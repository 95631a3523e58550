// Kernel-trace summary (harness/measure/kernel_trace.hpp): grouping, ordering, shares.
#include <doctest/doctest.h>

#include "harness/measure/kernel_trace.hpp"

using namespace attnbench;

namespace {
TracedActivity kernel(const char* name, uint64_t start, uint64_t end, int gx, int regs) {
  TracedActivity a;
  a.kind = "kernel";
  a.name = name;
  a.start_ns = start;
  a.end_ns = end;
  a.grid[0] = gx;
  a.grid[1] = 2;
  a.grid[2] = 1;
  a.block[0] = 128;
  a.block[1] = a.block[2] = 1;
  a.registers = regs;
  a.shared_bytes = 1024;
  return a;
}
}  // namespace

TEST_CASE("summarize_trace groups by name, sums durations and sorts by total time") {
  TracedActivity ms;
  ms.kind = "memset";
  ms.name = "memset";
  ms.start_ns = 500;
  ms.end_ns = 1500;
  ms.bytes = 4096;
  std::vector<TracedActivity> acts = {
      kernel("dot_do_o", 1000, 3000, 16, 32),   // 2 us
      kernel("bprop_main", 3000, 9000, 132, 168),  // 6 us
      kernel("dot_do_o", 9500, 10500, 8, 40),   // 1 us, second call of the group
      ms,                                       // 1 us
  };
  auto j = summarize_trace(acts);
  CHECK(j["activities"] == 4);
  CHECK(j["device_us"].get<double>() == doctest::Approx(10.0));
  CHECK(j["span_us"].get<double>() == doctest::Approx(10.0));  // 500 .. 10500 ns
  const auto& k = j["kernels"];
  REQUIRE(k.size() == 3);
  CHECK(k[0]["name"] == "bprop_main");
  CHECK(k[0]["calls"] == 1);
  CHECK(k[0]["total_us"].get<double>() == doctest::Approx(6.0));
  CHECK(k[0]["share"].get<double>() == doctest::Approx(0.6));
  CHECK(k[0]["ctas"] == 264);
  CHECK(k[0]["registers"] == 168);
  CHECK(k[1]["name"] == "dot_do_o");
  CHECK(k[1]["calls"] == 2);
  CHECK(k[1]["total_us"].get<double>() == doctest::Approx(3.0));
  CHECK(k[1]["mean_us"].get<double>() == doctest::Approx(1.5));
  CHECK(k[1]["grid"] == nlohmann::json::array({16, 2, 1}));  // the first call's launch
  CHECK(k[1]["registers"] == 32);
  CHECK(k[2]["kind"] == "memset");
  CHECK(k[2]["bytes"] == 4096);
  CHECK(!k[2].contains("grid"));
}

TEST_CASE("summarize_trace of nothing, and of a record whose end precedes its start") {
  auto empty = summarize_trace({});
  CHECK(empty["activities"] == 0);
  CHECK(empty["device_us"] == 0.0);
  CHECK(empty["span_us"] == 0.0);
  CHECK(empty["kernels"].empty());
  CHECK(empty["busy_us"] == 0.0);
  CHECK(empty["streams"] == 0);
  CHECK(empty["timeline"].empty());
  auto odd = summarize_trace({kernel("k", 2000, 1000, 1, 1)});
  CHECK(odd["device_us"] == 0.0);
  CHECK(odd["span_us"] == 0.0);
  CHECK(odd["kernels"][0]["total_us"] == 0.0);
  CHECK(odd["busy_us"] == 0.0);
  CHECK(odd["timeline"][0] == nlohmann::json::array({0, 0, 0.0, 0.0}));
}

TEST_CASE("summarize_trace: busy time, streams and the timeline of concurrent streams") {
  // stream 7: a 0-2 us, c 6-9 us; stream 3: b 1-4 us (overlaps a); idle 4-6 us.
  TracedActivity a = kernel("a", 10000, 12000, 1, 1), b = kernel("b", 11000, 14000, 1, 1),
                 c = kernel("c", 16000, 19000, 1, 1);
  a.stream = 7;
  b.stream = 3;
  c.stream = 7;
  auto j = summarize_trace({c, b, a});  // any order in, by start time out
  CHECK(j["span_us"].get<double>() == doctest::Approx(9.0));
  CHECK(j["device_us"].get<double>() == doctest::Approx(8.0));
  CHECK(j["busy_us"].get<double>() == doctest::Approx(7.0));  // 0-4 and 6-9
  CHECK(j["streams"] == 2);
  CHECK(j["timeline_dropped"] == 0);
  const auto& k = j["kernels"];  // b and c tie at 3 us (by name), then a
  REQUIRE(k.size() == 3);
  CHECK(k[0]["name"] == "b");
  CHECK(k[1]["name"] == "c");
  CHECK(k[2]["name"] == "a");
  const auto& t = j["timeline"];
  REQUIRE(t.size() == 3);
  // [kernel index, lane, start us, duration us]; lanes in order of first use
  CHECK(t[0] == nlohmann::json::array({2, 0, 0.0, 2.0}));  // a on stream 7 -> lane 0
  CHECK(t[1] == nlohmann::json::array({0, 1, 1.0, 3.0}));  // b on stream 3 -> lane 1
  CHECK(t[2] == nlohmann::json::array({1, 0, 6.0, 3.0}));  // c on stream 7 -> lane 0
}

TEST_CASE("summarize_trace keeps at most kMaxTimelineEntries timeline entries and counts the rest") {
  std::vector<TracedActivity> acts;
  for (size_t i = 0; i < kMaxTimelineEntries + 5; ++i) acts.push_back(kernel("k", 1000 * i, 1000 * i + 500, 1, 1));
  auto j = summarize_trace(acts);
  CHECK(j["activities"] == kMaxTimelineEntries + 5);
  CHECK(j["timeline"].size() == kMaxTimelineEntries);
  CHECK(j["timeline_dropped"] == 5);
  CHECK(j["busy_us"].get<double>() == doctest::Approx(0.5 * static_cast<double>(kMaxTimelineEntries + 5)));
  CHECK(j["kernels"][0]["calls"] == kMaxTimelineEntries + 5);
}
