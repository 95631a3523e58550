// GPU timing modes (issue 29), on the naive backend: --timer graph replays the
// pass as a CUDA graph (or says why not), events and graph agree on a kernel
// that is long next to its launch, and with NVML every kept sample carries its
// SM clock (throttle discard watching). Needs an H100 (or any CUDA GPU) to run.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include "backends/naive/naive.hpp"
#include "harness/device/environment.hpp"
#include "harness/measure/measure.hpp"
#include "harness/model/tensors.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;

namespace {

TimingStats time_forward(TimingPolicy::Timer timer, double throttle_threshold) {
  const Problem p = test::with_causal(test::make_problem(2, 8, 8, 1024, 1024, 64, DType::bf16));
  naive::NaiveBackend be;
  const ProblemData in = make_inputs(p);
  std::unique_ptr<BackendInstance> inst = be.prepare(p, in);
  TimingPolicy policy;
  policy.timer = timer;
  policy.throttle_threshold = throttle_threshold;
  policy.max_seconds = 1.0;
  return time_pass(be, *inst, Pass::forward, policy);
}

}  // namespace

TEST_CASE("--timer graph: the pass is replayed as a CUDA graph, or the row says why not") {
  const TimingStats graph = time_forward(TimingPolicy::Timer::graph, 0.75);
  const TimingStats events = time_forward(TimingPolicy::Timer::events, 0.75);
  INFO("graph_fallback: " << graph.graph_fallback);
  CHECK(events.timer == "cuda_events");
  CHECK(events.graph_fallback.empty());
  if (graph.timer == "cuda_graph") {
    CHECK(graph.graph_fallback.empty());
    // Kernels of ~0.1 ms and more: launch overhead is small next to them, so the
    // two timers agree within 25 %.
    CHECK(graph.median_ms > 0);
    CHECK(graph.median_ms == doctest::Approx(events.median_ms).epsilon(0.25));
  } else {
    CHECK(graph.timer == "cuda_events");
    CHECK_FALSE(graph.graph_fallback.empty());
  }
}

TEST_CASE("with NVML every kept GPU sample has its SM clock; threshold 0 discards nothing") {
  const env::ClockSample c = env::read_sm_clock(0);
  const TimingStats st = time_forward(TimingPolicy::Timer::events, 0);
  if (!c.available) {
    MESSAGE("NVML not available (" << c.reason << "): clocks not watched");
    CHECK_FALSE(st.clocks_watched);
    return;
  }
  CHECK(c.sm_clock_mhz > 0);
  CHECK(c.max_sm_clock_mhz >= c.sm_clock_mhz);
  CHECK(st.clocks_watched);
  CHECK(st.throttle_discarded == 0);
  CHECK(static_cast<int64_t>(st.sm_clock_mhz.size()) == st.n);
  CHECK(*std::min_element(st.sm_clock_mhz.begin(), st.sm_clock_mhz.end()) > 0);
}
