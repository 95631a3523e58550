// The stopping rules (harness/measure/stopping.hpp), the throttle discard of the
// sampling loop with fake clocks and fake NVML readings, the policy's JSON
// (old journals resume), and the CLI options --stopping, --min-time,
// --throttle-threshold and --timer.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/measure/measure.hpp"
#include "harness/measure/stopping.hpp"
#include "harness/model/errors.hpp"
#include "harness/run/runner.hpp"
#include "tests/cli_util.hpp"

using namespace attnbench;

namespace {

/// sample_until_stable over `samples` (cycled), each advancing a fake clock by its
/// duration; readings[i % size] is the clock read after sample i (none when empty).
TimingStats run_fake(const TimingPolicy& p, const std::vector<double>& samples,
                     const std::vector<ClockReading>& readings = {}) {
  double clock = 0;
  size_t i = 0;
  return sample_until_stable(
      p,
      std::function<Sample()>([&] {
        Sample s{samples[i % samples.size()], readings.empty() ? ClockReading{} : readings[i % readings.size()]};
        ++i;
        clock += s.ms * 1e-3;
        return s;
      }),
      [&] { return clock; });
}

ClockReading at(int mhz, uint64_t mask = 0) { return {true, mhz, 1980, mask}; }

}  // namespace

TEST_CASE("rel_stddev (attnbench's rule): steady samples stop at min_samples, whatever their total time") {
  TimingPolicy p;
  p.min_samples = 10;
  const TimingStats st = run_fake(p, {0.01});  // 10 us samples: 0.1 ms in all
  CHECK(st.n == 10);
  CHECK(st.stop_reason == "converged");
  CHECK(st.stopping == "rel_stddev");
  CHECK_FALSE(st.clocks_watched);
}

TEST_CASE("nvbench rule: also needs min_time_s of accumulated sample time") {
  TimingPolicy p;
  p.stopping = Stopping::nvbench;
  p.min_samples = 10;
  p.target_rel_stddev = 0.005;
  p.min_time_s = 0.02;  // 20 ms
  p.max_seconds = 10;
  TimingStats st = run_fake(p, {1.0});
  CHECK(st.n == 20);  // 10 samples were enough for the noise, 20 for the time
  CHECK(st.converged);
  CHECK(st.stopping == "nvbench");
  p.min_time_s = 0.005;
  CHECK(run_fake(p, {1.0}).n == 10);  // min_samples binds
  p.min_time_s = 5;                   // never reached before the wall cap
  p.max_seconds = 0.05;
  st = run_fake(p, {1.0});
  CHECK(st.stop_reason == "time_cap");
  CHECK_FALSE(st.converged);
  CHECK(st.n == 50);
  // noise above 0.5 % keeps it sampling although time and count are met
  p.min_time_s = 0.001;
  p.max_seconds = 10;
  p.max_samples = 40;
  st = run_fake(p, {1.0, 1.05});
  CHECK(st.stop_reason == "max_samples");
  CHECK(st.n == 40);
}

TEST_CASE("the rules directly") {
  SampleState s{12, 2.0, 0.004, 24.0};
  CHECK(RelStddevRule(12, 0.004).satisfied(s));
  CHECK_FALSE(RelStddevRule(13, 0.004).satisfied(s));
  CHECK_FALSE(RelStddevRule(12, 0.003).satisfied(s));
  CHECK(NoiseMinTimeRule(12, 0.004, 0.024).satisfied(s));
  CHECK_FALSE(NoiseMinTimeRule(12, 0.004, 0.025).satisfied(s));
  CHECK(make_stopping_rule(Stopping::nvbench, 1, 0.1, 0)->name() == "nvbench");
  CHECK(make_stopping_rule(Stopping::rel_stddev, 1, 0.1, 0)->name() == "rel_stddev");
  CHECK(parse_stopping("rel-stddev") == Stopping::rel_stddev);
  CHECK_THROWS_AS(parse_stopping("entropy"), std::invalid_argument);
}

TEST_CASE("is_throttled: below the threshold of the maximum SM clock, or a hardware slowdown") {
  CHECK(is_throttled(at(1400), 0.75));       // 1400 < 0.75 * 1980 = 1485
  CHECK_FALSE(is_throttled(at(1485), 0.75));
  CHECK_FALSE(is_throttled(at(1755, 0x4), 0.75));  // sw_power_cap at a high clock: kept
  CHECK(is_throttled(at(1980, 0x40), 0.75));       // hw_thermal_slowdown
  CHECK_FALSE(is_throttled(at(100, 0x40), 0));     // threshold 0: never
  CHECK_FALSE(is_throttled(ClockReading{}, 0.75)); // no NVML: never
}

TEST_CASE("throttled samples are discarded, counted, never averaged; clocks kept per sample") {
  TimingPolicy p;
  p.min_samples = 5;
  // Every third sample comes at a throttled clock and is 3x slower.
  const TimingStats st = run_fake(p, {1.0, 1.0, 3.0}, {at(1980), at(1965, 0x4), at(900, 0x20)});
  CHECK(st.clocks_watched);
  CHECK(st.n == 5);
  CHECK(st.throttle_discarded == 2);
  CHECK(st.throttled_kept == 0);
  CHECK(st.median_ms == 1.0);
  CHECK(st.max_ms == 1.0);  // no 3 ms sample got in
  CHECK(st.sm_clock_mhz == std::vector<int>{1980, 1965, 1980, 1965, 1980});
  CHECK(st.throttle_reasons == std::vector<std::string>{"sw_power_cap", "sw_thermal_slowdown"});
  CHECK(st.converged);

  p.throttle_threshold = 0;  // discard off: the slow samples are in
  const TimingStats all = run_fake(p, {1.0, 1.0, 3.0}, {at(1980), at(1965, 0x4), at(900, 0x20)});
  CHECK(all.throttle_discarded == 0);
  CHECK(all.max_ms == 3.0);
}

TEST_CASE("all samples throttled: the cap ends it and the last one is kept, flagged") {
  TimingPolicy p;
  p.max_samples = 7;
  const TimingStats st = run_fake(p, {2.0}, {at(700)});
  CHECK(st.stop_reason == "max_samples");  // max_samples counts every sample taken
  CHECK(st.n == 1);
  CHECK(st.throttle_discarded == 6);
  CHECK(st.throttled_kept == 1);
  CHECK_FALSE(st.converged);
}

TEST_CASE("policy JSON: round trip; an older policy without the new fields reads as the defaults") {
  TimingPolicy p;
  p.stopping = Stopping::nvbench;
  p.min_time_s = 0.25;
  p.throttle_threshold = 0.9;
  p.throttle_recovery_s = 0.1;
  p.timer = TimingPolicy::Timer::graph;
  const TimingPolicy back = TimingPolicy::from_json(p.to_json());
  CHECK(back.to_json() == p.to_json());
  const nlohmann::json old = {{"cold", true}, {"warmup", 2}, {"min_samples", 5}, {"max_samples", 1000},
                              {"target_rel_stddev", 0.02}, {"max_seconds", 2.0}, {"hold_stream", true}};
  CHECK(TimingPolicy::from_json(old).to_json() == TimingPolicy{}.to_json());
  CHECK_THROWS_AS(TimingPolicy::from_json({{"timer", "nvtx"}}), std::invalid_argument);
  TimingPolicy bad;
  bad.throttle_threshold = 75;  // a percentage where a fraction belongs
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("throttle_threshold"), std::invalid_argument);

  // --resume of a journal written before these fields: the same run
  nlohmann::json was = {{"measurement", old}}, now = {{"measurement", TimingPolicy{}.to_json()}};
  CHECK_NOTHROW(check_resume_identity(was, now, "journal.jsonl"));
  now["measurement"]["stopping"] = "nvbench";
  CHECK_THROWS_AS(check_resume_identity(was, now, "journal.jsonl"), InputError);
}

TEST_CASE("TimingStats JSON keeps the stopping rule, the clock fields and the graph fallback") {
  TimingStats st;
  st.samples_ms = {1.0, 2.0};
  st.summarize();
  st.stopping = "nvbench";
  st.clocks_watched = true;
  st.throttle_discarded = 3;
  st.sm_clock_mhz = {1980, 1755};
  st.throttle_reasons = {"sw_power_cap"};
  st.graph_fallback = "why";
  const nlohmann::json j = st.to_json();
  CHECK(j["throttle_discarded"] == 3);
  const TimingStats back = TimingStats::from_json(j, "f", "/t");
  CHECK(back.to_json() == j);
  TimingStats plain;  // CPU rows: no clock fields written
  plain.samples_ms = {1.0};
  plain.summarize();
  CHECK_FALSE(plain.to_json().contains("throttle_discarded"));
}

TEST_CASE("CLI: --stopping nvbench is recorded in the header and the rows; bad options exit 2") {
  using namespace attnbench::test::cli;
  TempDir dir;
  const std::string scenario = dir.write("one.json", R"({"name": "one",
      "base": {"batch": 1, "heads_q": 1, "heads_kv": 1, "head_dim": 16, "seq": 16, "dtype": "fp32"}})");
  const std::string out = (dir.path / "o").string();
  Result r = run_in(dir.path, "run '" + scenario + "' --backends cpu --no-backward --check off --stopping nvbench "
                              "--min-time 0.001 --max-seconds 10 --hot --timer graph --out '" + out + "'");
  REQUIRE_MESSAGE(r.code == 0, r.err);
  const auto report = nlohmann::json::parse(slurp(std::filesystem::path(out) / "report.json"));
  CHECK(report["measurement"]["stopping"] == "nvbench");
  CHECK(report["measurement"]["min_samples"] == kNvbenchMinSamples);  // nvbench's defaults where not given
  CHECK(report["measurement"]["target_rel_stddev"] == kNvbenchMaxNoise);
  CHECK(report["measurement"]["min_time_s"] == 0.001);
  CHECK(report["measurement"]["timer"] == "graph");
  const auto& fwd = report["results"][0]["timing"]["fwd"];
  CHECK(fwd["stopping"] == "nvbench");
  CHECK(fwd["timer"] == "steady_clock");
  CHECK(fwd["graph_fallback"].get<std::string>().find("not a GPU pass") != std::string::npos);
  CHECK(fwd["n"].get<int>() >= kNvbenchMinSamples);

  for (const auto& [args, option] : std::vector<std::pair<std::string, std::string>>{
           {"--min-time 1", "--min-time"},
           {"--stopping entropy", "--stopping"},
           {"--throttle-threshold 150", "--throttle-threshold"},
           {"--timer nvtx", "--timer"}}) {
    r = run_in(dir.path, "run '" + scenario + "' --backends cpu " + args + " --out '" + out + "2'");
    CHECK_MESSAGE(r.code == 2, args);
    CHECK_MESSAGE(r.err.find(option) != std::string::npos, r.err);
  }
}
