// Measurement engine: statistics, the stopping rule (deterministic through an
// injected clock), backward timing without its forward, error propagation, and
// Google Benchmark staying silent. No assertion depends on real timings.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "harness/model/errors.hpp"
#include "harness/measure/measure.hpp"

using namespace attnbench;

namespace {

/// A fake clock in seconds, advanced by the fake instance.
struct FakeClock {
  double t = 1000.0;
  TimeSource source() {
    return [this] { return t; };
  }
};

/// A CPU instance whose passes "take" scripted durations on a FakeClock.
class FakeInstance : public BackendInstance {
 public:
  FakeInstance(FakeClock* clock, std::vector<double> fwd_ms, double bwd_ms)
      : clock_(clock), fwd_ms_(std::move(fwd_ms)), bwd_ms_(bwd_ms) {}
  void forward() override {
    ++forward_calls;
    if (throw_on_forward) throw std::runtime_error("kernel exploded");
    if (clock_) clock_->t += fwd_ms_[(forward_calls - 1) % fwd_ms_.size()] * 1e-3;
  }
  void backward() override {
    ++backward_calls;
    if (clock_) clock_->t += bwd_ms_ * 1e-3;
  }
  void poison_outputs() override {}
  AttentionOutputs read_outputs(bool) override { return {}; }
  int64_t executed_pairs() const override { return 0; }

  int forward_calls = 0, backward_calls = 0;
  bool throw_on_forward = false;

 private:
  FakeClock* clock_;
  std::vector<double> fwd_ms_;
  double bwd_ms_;
};

/// A CPU instance that really spins for `spin_us` microseconds per pass.
class BusyInstance : public BackendInstance {
 public:
  explicit BusyInstance(int spin_us) : spin_us_(spin_us) {}
  void forward() override { spin(); }
  void backward() override { spin(); }
  void poison_outputs() override {}
  AttentionOutputs read_outputs(bool) override { return {}; }
  int64_t executed_pairs() const override { return 0; }

 private:
  void spin() const {
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
  int spin_us_;
};

class FakeBackend : public Backend {
 public:
  std::string name() const override { return "fake"; }
  std::string description() const override { return "test double"; }
  Device device() const override { return Device::cpu; }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::unique_ptr<BackendInstance> prepare(const Problem&, const ProblemData&) override {
    throw std::logic_error("not used");
  }
};

void check_ordering(const TimingStats& s) {
  REQUIRE(s.n == static_cast<int64_t>(s.samples_ms.size()));
  REQUIRE(s.n >= 1);
  CHECK(s.min_ms <= s.q1_ms);
  CHECK(s.q1_ms <= s.median_ms);
  CHECK(s.median_ms <= s.q3_ms);
  CHECK(s.q3_ms <= s.max_ms);
  CHECK(s.iqr_ms == doctest::Approx(s.q3_ms - s.q1_ms));
  CHECK(s.min_ms <= s.mean_ms);
  CHECK(s.mean_ms <= s.max_ms);
  CHECK(s.stddev_ms >= 0);
}

}  // namespace

TEST_CASE("summarize: quantiles by linear interpolation, sample stddev") {
  TimingStats s;
  s.samples_ms = {5, 1, 4, 2, 3};
  s.summarize();
  CHECK(s.n == 5);
  CHECK(s.median_ms == 3);
  CHECK(s.q1_ms == 2);
  CHECK(s.q3_ms == 4);
  CHECK(s.iqr_ms == 2);
  CHECK(s.min_ms == 1);
  CHECK(s.max_ms == 5);
  CHECK(s.mean_ms == 3);
  CHECK(s.stddev_ms == doctest::Approx(std::sqrt(2.5)));
  CHECK(s.rel_stddev == doctest::Approx(std::sqrt(2.5) / 3));
  // raw samples keep their order
  CHECK(s.samples_ms == std::vector<double>{5, 1, 4, 2, 3});

  TimingStats even;
  even.samples_ms = {1, 2, 3, 4};
  even.summarize();
  CHECK(even.median_ms == doctest::Approx(2.5));
  CHECK(even.q1_ms == doctest::Approx(1.75));
  CHECK(even.q3_ms == doctest::Approx(3.25));

  TimingStats one;
  one.samples_ms = {7};
  one.summarize();
  CHECK(one.median_ms == 7);
  CHECK(one.stddev_ms == 0);

  TimingStats none;
  none.summarize();
  CHECK(none.n == 0);
  CHECK(none.median_ms == 0);
}

TEST_CASE("quantile_sorted rejects an empty sample") {
  CHECK_THROWS_AS(quantile_sorted({}, 0.5), std::invalid_argument);
  CHECK(quantile_sorted({2.0}, 0.9) == 2.0);
}

TEST_CASE("policy validation names the field") {
  TimingPolicy p;
  p.min_samples = 0;
  CHECK_THROWS_WITH_AS(p.validate(), doctest::Contains("min_samples"), std::invalid_argument);
  p = {};
  p.max_samples = 2;
  p.min_samples = 3;
  CHECK_THROWS_WITH_AS(p.validate(), doctest::Contains("max_samples"), std::invalid_argument);
  p = {};
  p.max_seconds = 0;
  CHECK_THROWS_WITH_AS(p.validate(), doctest::Contains("max_seconds"), std::invalid_argument);
  p = {};
  p.warmup = -1;
  CHECK_THROWS_AS(p.validate(), std::invalid_argument);
  CHECK_NOTHROW(TimingPolicy{}.validate());
  auto j = TimingPolicy{}.to_json();
  CHECK(j["cold"] == true);
  CHECK(j["min_samples"] == 5);
}

TEST_CASE("steady durations converge at min_samples") {
  FakeClock clock;
  FakeInstance inst(&clock, {1.5}, 1.0);
  FakeBackend be;
  TimingPolicy pol;
  pol.min_samples = 7;
  pol.warmup = 3;
  pol.cold = false;
  TimingStats s = time_pass(be, inst, Pass::forward, pol, clock.source());
  CHECK(s.n == 7);
  CHECK(s.converged);
  CHECK(s.stop_reason == "converged");
  CHECK(s.median_ms == doctest::Approx(1.5));
  CHECK(s.min_ms == doctest::Approx(1.5));
  CHECK(s.max_ms == doctest::Approx(1.5));
  CHECK(s.rel_stddev == doctest::Approx(0.0));
  CHECK(s.timer == "steady_clock");
  CHECK(s.warmup == 3);
  CHECK_FALSE(s.cold);
  CHECK(inst.forward_calls == 3 + 7);  // warm-up + samples
  CHECK(inst.backward_calls == 0);
  CHECK(s.wall_seconds == doctest::Approx(7 * 1.5e-3));
  check_ordering(s);
}

TEST_CASE("noisy durations stop at the time cap, unconverged") {
  FakeClock clock;
  FakeInstance inst(&clock, {1.0, 3.0}, 1.0);  // rel stddev ~0.5 forever
  FakeBackend be;
  TimingPolicy pol;
  pol.cold = false;
  pol.warmup = 0;
  pol.max_seconds = 0.0199;  // 20 ms of fake time: ten samples of 2 ms on average
  pol.max_samples = 1000;
  TimingStats s = time_pass(be, inst, Pass::forward, pol, clock.source());
  CHECK_FALSE(s.converged);
  CHECK(s.stop_reason == "time_cap");
  CHECK(s.n == 10);
  CHECK(s.min_ms == doctest::Approx(1.0));
  CHECK(s.max_ms == doctest::Approx(3.0));
  CHECK(s.median_ms == doctest::Approx(2.0));
  CHECK(s.rel_stddev > pol.target_rel_stddev);
  check_ordering(s);
}

TEST_CASE("noisy durations stop at max_samples when the cap is far") {
  FakeClock clock;
  FakeInstance inst(&clock, {1.0, 1.2, 0.9}, 1.0);
  FakeBackend be;
  TimingPolicy pol;
  pol.cold = false;
  pol.min_samples = 2;
  pol.max_samples = 12;
  pol.max_seconds = 3600;
  TimingStats s = time_pass(be, inst, Pass::forward, pol, clock.source());
  CHECK(s.n == 12);
  CHECK(s.stop_reason == "max_samples");
  CHECK_FALSE(s.converged);
  check_ordering(s);
}

TEST_CASE("a looser target converges where a tight one does not") {
  // 1.00 and 1.02 alternate: rel stddev ~0.01
  for (double target : {0.001, 0.05}) {
    FakeClock clock;
    FakeInstance inst(&clock, {1.00, 1.02}, 1.0);
    FakeBackend be;
    TimingPolicy pol;
    pol.cold = false;
    pol.min_samples = 4;
    pol.max_samples = 40;
    pol.max_seconds = 3600;
    pol.target_rel_stddev = target;
    TimingStats s = time_pass(be, inst, Pass::forward, pol, clock.source());
    if (target > 0.01) {
      CHECK(s.converged);
      CHECK(s.n == 4);
    } else {
      CHECK_FALSE(s.converged);
      CHECK(s.n == 40);
    }
  }
}

TEST_CASE("backward samples exclude their untimed forward; fwd_bwd times both") {
  FakeClock clock;
  FakeInstance inst(&clock, {5.0}, 2.0);
  FakeBackend be;
  TimingPolicy pol;
  pol.cold = false;
  pol.warmup = 2;
  pol.min_samples = 6;
  TimingStats b = time_pass(be, inst, Pass::backward, pol, clock.source());
  CHECK(b.n == 6);
  CHECK(b.median_ms == doctest::Approx(2.0));
  CHECK(b.max_ms == doctest::Approx(2.0));
  CHECK(inst.forward_calls == 2 + 6);  // a fresh forward before every warm-up and sample
  CHECK(inst.backward_calls == 2 + 6);

  FakeInstance inst2(&clock, {5.0}, 2.0);
  TimingStats fb = time_pass(be, inst2, Pass::forward_backward, pol, clock.source());
  CHECK(fb.median_ms == doctest::Approx(7.0));
  CHECK(inst2.forward_calls == inst2.backward_calls);
}

TEST_CASE("an exception from the pass propagates and leaves the engine usable") {
  FakeClock clock;
  FakeInstance bad(&clock, {1.0}, 1.0);
  bad.throw_on_forward = true;
  FakeBackend be;
  TimingPolicy pol;
  pol.cold = false;
  CHECK_THROWS_WITH_AS(time_pass(be, bad, Pass::forward, pol, clock.source()), "kernel exploded", std::runtime_error);
  FakeInstance good(&clock, {1.0}, 1.0);
  TimingStats s = time_pass(be, good, Pass::forward, pol, clock.source());
  CHECK(s.n == pol.min_samples);
}

TEST_CASE("a bad policy is rejected before anything runs") {
  FakeClock clock;
  FakeInstance inst(&clock, {1.0}, 1.0);
  FakeBackend be;
  TimingPolicy pol;
  pol.min_samples = 0;
  CHECK_THROWS_AS(time_pass(be, inst, Pass::forward, pol, clock.source()), std::invalid_argument);
  CHECK(inst.forward_calls == 0);
}

TEST_CASE("real clock, cold and hot: sane statistics and silent stdout") {
  BusyInstance inst(200);
  FakeBackend be;
  // Google Benchmark must not print its tables to stdout: capture fd 1.
  std::fflush(stdout);
  FILE* cap = std::tmpfile();
  REQUIRE(cap != nullptr);
  const int saved = dup(1);
  REQUIRE(saved >= 0);
  REQUIRE(dup2(fileno(cap), 1) >= 0);
  std::vector<TimingStats> got;
  for (bool cold : {true, false}) {
    TimingPolicy pol;
    pol.cold = cold;
    pol.min_samples = 5;
    pol.max_samples = 30;
    pol.max_seconds = 0.5;
    got.push_back(time_pass(be, inst, Pass::forward_backward, pol));
  }
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  std::fseek(cap, 0, SEEK_END);
  const long printed = std::ftell(cap);
  std::fclose(cap);
  CHECK(printed == 0);
  for (const auto& s : got) {
    check_ordering(s);
    CHECK(s.n >= 1);
    CHECK(s.n <= 30);
    CHECK(s.min_ms > 0);
    CHECK(s.timer == "steady_clock");
    CHECK((s.stop_reason == "converged" || s.stop_reason == "time_cap" || s.stop_reason == "max_samples"));
    CHECK(s.converged == (s.stop_reason == "converged"));
    if (s.stop_reason != "time_cap" && s.stop_reason != "max_samples") CHECK(s.n >= 5);
  }
  CHECK(got[0].cold);
  CHECK_FALSE(got[1].cold);
}

TEST_CASE("TimingStats JSON round trip and input errors") {
  TimingStats s;
  s.samples_ms = {1.0, 1.1, 0.9, 1.05};
  s.summarize();
  s.converged = true;
  s.stop_reason = "converged";
  s.timer = "cuda_events";
  s.cold = true;
  s.warmup = 2;
  s.wall_seconds = 0.25;
  nlohmann::json j = s.to_json();
  CHECK(j["samples_ms"].size() == 4);
  CHECK(j["n"] == 4);
  TimingStats r = TimingStats::from_json(j, "r.json", "/results/0/timing/fwd");
  CHECK(r.n == 4);
  CHECK(r.median_ms == doctest::Approx(s.median_ms));
  CHECK(r.samples_ms == s.samples_ms);
  CHECK(r.converged);
  CHECK(r.timer == "cuda_events");
  CHECK(r.cold);
  CHECK(r.warmup == 2);
  CHECK_FALSE(j.contains("stream_hold"));  // only written for held GPU samples
  CHECK_FALSE(r.stream_hold);
  s.stream_hold = true;
  s.hold_ms = 0.4;
  s.hold_gaps = 1;
  TimingStats h = TimingStats::from_json(s.to_json(), "r.json", "/t");
  CHECK(h.stream_hold);
  CHECK(h.hold_ms == doctest::Approx(0.4));
  CHECK(h.hold_gaps == 1);

  // summary only (samples dropped)
  nlohmann::json summary = j;
  summary.erase("samples_ms");
  TimingStats q = TimingStats::from_json(summary, "r.json", "/x");
  CHECK(q.samples_ms.empty());
  CHECK(q.median_ms == doctest::Approx(s.median_ms));

  nlohmann::json bad = j;
  bad["samples_ms"][2] = "fast";
  try {
    TimingStats::from_json(bad, "r.json", "/results/0/timing/fwd");
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("r.json") != std::string::npos);
    CHECK(e.json_path() == "/results/0/timing/fwd/samples_ms/2");
  }
  nlohmann::json neg = j;
  neg["samples_ms"][0] = -1.0;
  CHECK_THROWS_AS(TimingStats::from_json(neg, "r.json", "/t"), InputError);
  CHECK_THROWS_AS(TimingStats::from_json(nlohmann::json::array(), "r.json", "/t"), InputError);
}

TEST_CASE("the stream hold covers twice the host enqueue time, grows only, within [0.2, 100] ms") {
  CHECK(next_hold_ms(0.2, 0.05) == doctest::Approx(0.2));   // floor
  CHECK(next_hold_ms(0.2, 0.3) == doctest::Approx(0.6));    // 2 x enqueue
  CHECK(next_hold_ms(1.0, 0.3) == doctest::Approx(1.0));    // never shrinks
  CHECK(next_hold_ms(1.0, 80.0) == doctest::Approx(100.0)); // cap
  CHECK(next_hold_ms(100.0, 500.0) == doctest::Approx(100.0));
  TimingPolicy p;
  CHECK(p.hold_stream);
  CHECK(p.to_json()["hold_stream"] == true);
}

TEST_CASE("pass names") {
  CHECK(std::string(to_string(Pass::forward)) == "fwd");
  CHECK(std::string(to_string(Pass::backward)) == "bwd");
  CHECK(std::string(to_string(Pass::forward_backward)) == "fwd_bwd");
  CHECK(parse_pass("bwd") == Pass::backward);
  CHECK_THROWS_AS(parse_pass("both"), std::invalid_argument);
}
