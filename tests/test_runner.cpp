// Runner: rows for unsupported / failing backends, the sweep goes on, report.json
// is written, unknown backends are usage errors.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <stdexcept>

#include "harness/backend/backend.hpp"
#include "harness/model/errors.hpp"
#include "harness/measure/measure.hpp"
#include "harness/run/runner.hpp"
#include "reference/reference.hpp"

using namespace attnbench;

namespace {

/// A backend that refuses head_dim 96, throws in forward for head_dim 32 and
/// otherwise "computes" zeros (check is off in these tests).
class FakeInstance : public BackendInstance {
 public:
  explicit FakeInstance(const Problem& p) : p_(p) {}
  void forward() override {
    if (p_.head_dim == 32) throw std::runtime_error("fake kernel launch failed");
  }
  void backward() override {}
  void poison_outputs() override {}
  AttentionOutputs read_outputs(bool) override {
    AttentionOutputs o;
    o.o = HostTensor({p_.batch, p_.heads_q, p_.seq_q, p_.head_dim_v});
    o.lse = HostTensor({p_.batch, p_.heads_q, p_.seq_q});
    return o;
  }
  int64_t executed_pairs() const override { return p_.batch * p_.heads_q * p_.seq_q * p_.seq_k; }
  std::optional<std::vector<double>> external_samples_ms(int pass) const override {
    return std::vector<double>{1.0 + pass, 1.5 + pass, 2.0 + pass};
  }

 private:
  Problem p_;
};

class FakeBackend : public Backend {
 public:
  std::string name() const override { return "fake-runner-test"; }
  std::string description() const override { return "test double"; }
  Device device() const override { return Device::cpu; }
  Support supports(const Problem& p) const override {
    return p.head_dim == 96 ? Support::no("head_dim 96 not supported by fake") : Support::yes();
  }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData&) override {
    if (p.head_dim == 48) throw Unsupported("fake: head_dim 48 rejected while planning");
    if (p.head_dim == 40) throw Timeout("fake: worker ran past 3 s");
    if (p.head_dim == 24) throw Crashed("fake: worker killed by SIGSEGV");
    return std::make_unique<FakeInstance>(p);
  }
  void configure(const TimingPolicy& policy, bool backward, bool timing, bool determinism, int device) override {
    configured_cold = policy.cold;
    configured_max_seconds = policy.max_seconds;
    configured_backward = backward;
    configured_timing = timing;
    configured_determinism = determinism;
    configured_device = device;
    ++configure_calls;
  }
  // What the last configure() call passed (the runner creates its own instance of
  // the backend, so the values are static).
  static inline bool configured_cold = true, configured_backward = true, configured_timing = true,
                     configured_determinism = true;
  static inline double configured_max_seconds = 0.0;
  static inline int configured_device = -1, configure_calls = 0;
};
ATTNBENCH_REGISTER_BACKEND(FakeBackend);

Scenario three_cases() {
  Scenario s;
  s.name = "runner-test";
  for (int64_t d : {64, 96, 32}) {
    Case c;
    c.id = "d" + std::to_string(d);
    c.problem.batch = 1;
    c.problem.heads_q = c.problem.heads_kv = 1;
    c.problem.seq_q = c.problem.seq_k = 8;
    c.problem.head_dim = c.problem.head_dim_v = d;
    c.problem.mask.emplace_back(CausalTerm{});  // in place: GCC 12 misreads a moved variant (-Wmaybe-uninitialized)
    s.cases.push_back(c);
  }
  return s;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("every case becomes a row; failures do not stop the sweep") {
  auto dir = std::filesystem::temp_directory_path() / "attnbench_runner_test";
  std::filesystem::remove_all(dir);
  RunOptions o;
  o.backends = {"fake-runner-test"};
  o.out_dir = dir.string();
  o.check = CheckMode::off;
  RunSummary sum = run_scenario(three_cases(), o);
  CHECK(sum.rows == 3);
  CHECK(sum.unchecked == 1);  // --check off: ran, never an unearned pass
  CHECK(sum.pass == 0);
  CHECK(sum.unsupported == 1);
  CHECK(sum.error == 1);
  CHECK(sum.exit_code() == 1);
  auto j = read_json(sum.report_path);
  REQUIRE(j["results"].size() == 3);
  CHECK(j["results"][0]["case_id"] == "d64");
  CHECK(j["results"][0]["status"] == "unchecked");
  CHECK(j["results"][0]["check"]["mode"] == "off");
  CHECK(j["results"][0]["check"]["nonfinite"].is_object());
  CHECK(j["results"][0]["work"]["useful_pairs"] == 36);  // causal 8x8
  CHECK(j["results"][0]["work"]["executed_pairs"] == 64);
  CHECK(j["results"][0]["work"]["tile_efficiency"].get<double>() == doctest::Approx(36.0 / 64.0));
  CHECK(j["results"][1]["status"] == "unsupported");
  CHECK(j["results"][1]["reason"] == "head_dim 96 not supported by fake");
  CHECK(j["results"][2]["status"] == "error");
  CHECK(j["results"][2]["message"].get<std::string>().find("fake kernel launch failed") != std::string::npos);
  CHECK(j["finished"].is_string());  // ISO time once the run completed
}

TEST_CASE("unknown backend names are usage errors before anything runs") {
  RunOptions o;
  o.backends = {"no-such-backend"};
  o.out_dir = (std::filesystem::temp_directory_path() / "attnbench_runner_test2").string();
  CHECK_THROWS_AS(run_scenario(three_cases(), o), InputError);
}

TEST_CASE("shard parsing") {
  CHECK(parse_shard("1/3") == std::pair<int, int>(1, 3));
  CHECK_THROWS_AS(parse_shard("3/3"), InputError);
  CHECK_THROWS_AS(parse_shard("x"), InputError);
}

TEST_CASE("Unsupported thrown by prepare() becomes an unsupported row, not an error") {
  Scenario s = three_cases();
  s.cases.resize(1);
  s.cases[0].id = "d48";
  s.cases[0].problem.head_dim = s.cases[0].problem.head_dim_v = 48;
  RunOptions o;
  o.backends = {"fake-runner-test"};
  o.out_dir = (std::filesystem::temp_directory_path() / "attnbench_runner_test3").string();
  o.check = CheckMode::off;
  RunSummary sum = run_scenario(s, o);
  CHECK(sum.unsupported == 1);
  CHECK(sum.error == 0);
  CHECK(sum.exit_code() == 0);
  auto j = read_json(sum.report_path);
  CHECK(j["results"][0]["status"] == "unsupported");
  CHECK(j["results"][0]["reason"] == "fake: head_dim 48 rejected while planning");
}

TEST_CASE("Timeout and Crashed from a backend become timeout and crashed rows; configure() gets the run's options") {
  Scenario s = three_cases();
  s.cases.resize(2);
  s.cases[0].id = "d40";
  s.cases[0].problem.head_dim = s.cases[0].problem.head_dim_v = 40;
  s.cases[1].id = "d24";
  s.cases[1].problem.head_dim = s.cases[1].problem.head_dim_v = 24;
  RunOptions o;
  o.backends = {"fake-runner-test"};
  o.out_dir = (std::filesystem::temp_directory_path() / "attnbench_runner_test4").string();
  o.check = CheckMode::off;
  o.policy.cold = false;       // --hot
  o.policy.max_seconds = 0.25;
  o.backward = false;
  o.determinism = false;
  const int calls_before = FakeBackend::configure_calls;
  RunSummary sum = run_scenario(s, o);
  CHECK(FakeBackend::configure_calls == calls_before + 1);  // once per run and backend
  CHECK_FALSE(FakeBackend::configured_cold);
  CHECK(FakeBackend::configured_max_seconds == 0.25);
  CHECK_FALSE(FakeBackend::configured_backward);
  CHECK(FakeBackend::configured_timing);
  CHECK_FALSE(FakeBackend::configured_determinism);
  CHECK(FakeBackend::configured_device == 0);
  CHECK(sum.rows == 2);
  CHECK(sum.timeout == 1);
  CHECK(sum.crashed == 1);
  CHECK(sum.error == 0);  // both count against the exit code
  CHECK(sum.exit_code() == 1);
  auto j = read_json(sum.report_path);
  CHECK(j["results"][0]["status"] == "timeout");
  CHECK(j["results"][0]["message"] == "fake: worker ran past 3 s");
  CHECK(j["results"][1]["status"] == "crashed");
  CHECK(j["results"][1]["message"] == "fake: worker killed by SIGSEGV");
}

TEST_CASE("samples a backend timed itself are marked external, with the run's cold/hot policy") {
  Scenario s = three_cases();
  s.cases.resize(1);  // d64: passes, FakeInstance returns its own samples
  RunOptions o;
  o.backends = {"fake-runner-test"};
  o.out_dir = (std::filesystem::temp_directory_path() / "attnbench_runner_test5").string();
  o.check = CheckMode::off;
  o.policy.cold = false;
  RunSummary sum = run_scenario(s, o);
  REQUIRE(sum.unchecked == 1);
  auto j = read_json(sum.report_path);
  const auto& fwd = j["results"][0]["timing"]["fwd"];
  CHECK(fwd["stop_reason"] == "external");
  CHECK(fwd["timer"] == "external");
  CHECK(fwd["cold"] == false);
  CHECK(fwd["n"] == 3);
  CHECK(fwd["median_ms"].get<double>() == doctest::Approx(1.5));
}

namespace {
/// A GPU-flavoured backend that launches nothing (for --kernel-trace): its rows
/// go through the GPU branch of the runner without touching the device.
class FakeGpuInstance : public FakeInstance {
 public:
  using FakeInstance::FakeInstance;
  std::optional<std::vector<double>> external_samples_ms(int) const override { return std::nullopt; }
};
class FakeGpuBackend : public FakeBackend {
 public:
  std::string name() const override { return "fake-gpu-runner-test"; }
  Device device() const override { return Device::cuda; }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData&) override {
    return std::make_unique<FakeGpuInstance>(p);
  }
};
ATTNBENCH_REGISTER_BACKEND(FakeGpuBackend);
/// A GPU backend timed by its own worker process (like the PyTorch peers).
class FakeGpuWorkerBackend : public FakeBackend {
 public:
  std::string name() const override { return "fake-gpu-worker-test"; }
  Device device() const override { return Device::cuda; }
};
ATTNBENCH_REGISTER_BACKEND(FakeGpuWorkerBackend);
}  // namespace

TEST_CASE("--kernel-trace: GPU rows get extra.kernel_trace, CPU rows and worker-timed rows say why not") {
  Scenario s = three_cases();
  s.cases.resize(1);
  RunOptions o;
  o.backends = {"fake-gpu-runner-test", "fake-gpu-worker-test", "fake-runner-test"};
  o.out_dir = (std::filesystem::temp_directory_path() / "attnbench_runner_test6").string();
  o.check = CheckMode::off;
  o.timing = false;
  o.determinism = false;
  o.kernel_trace = true;
  RunSummary sum = run_scenario(s, o);
  REQUIRE(sum.unchecked == 3);
  auto j = read_json(sum.report_path);
  const auto& gpu_row = j["results"][0];
  const auto& worker_row = j["results"][1];
  const auto& cpu_row = j["results"][2];
  REQUIRE(gpu_row["backend"] == "fake-gpu-runner-test");
  REQUIRE(gpu_row["extra"].contains("kernel_trace"));
  const auto& kt = gpu_row["extra"]["kernel_trace"];
  if (kt.contains("unavailable")) {
    // No CUDA, no device or no CUPTI here: the reason is recorded instead.
    MESSAGE("kernel trace unavailable here: " << kt["unavailable"].get<std::string>());
    CHECK(!kt["unavailable"].get<std::string>().empty());
    CHECK(!kt.contains("fwd"));
  } else {
    // A GPU with CUPTI: the fake launches nothing, so both passes trace empty.
    REQUIRE(kt.contains("fwd"));
    REQUIRE(kt.contains("bwd"));
    REQUIRE_MESSAGE(kt["fwd"].contains("activities"), kt.dump());
    CHECK(kt["fwd"]["activities"] == 0);
    CHECK(kt["bwd"]["activities"] == 0);
    CHECK(kt["fwd"]["kernels"].empty());
  }
  // A backend whose samples come from a worker launches its kernels in another
  // process: marked as such, whatever this machine has. The CPU backend is not traced.
  REQUIRE(worker_row["backend"] == "fake-gpu-worker-test");
  CHECK(worker_row["extra"]["kernel_trace"]["unavailable"] ==
        "the backend runs and times itself in a worker process");
  CHECK(!cpu_row["extra"].contains("kernel_trace"));
}

namespace {
/// Throws what a failing allocation or a device fault throws, by head_dim.
class FakeFaultBackend : public FakeBackend {
 public:
  std::string name() const override { return "fake-fault-test"; }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData&) override {
    if (p.head_dim == 64) throw std::bad_alloc();
    throw std::runtime_error("cudaDeviceSynchronize: an illegal memory access was encountered");
  }
};
ATTNBENCH_REGISTER_BACKEND(FakeFaultBackend);

/// Returns the float64 reference's own outputs with LSE +inf instead of -inf on
/// fully masked rows (a convention difference); head_dim 8 also perturbs O on a
/// row that attends keys (wrong numbers).
class ConventionInstance : public BackendInstance {
 public:
  ConventionInstance(const Problem& p, const ProblemData& in) : p_(p), in_(in) {}
  void forward() override {}
  void backward() override {}
  void poison_outputs() override {}
  AttentionOutputs read_outputs(bool grads) override {
    AttentionOutputs o = reference::gold(p_, in_, grads);
    for (double& v : o.lse.data)
      if (std::isinf(v) && v < 0) v = std::numeric_limits<double>::infinity();
    if (p_.head_dim == 8) o.o.data[o.o.data.size() - 1] += 0.5;  // last row attends keys
    return o;
  }
  int64_t executed_pairs() const override { return p_.batch * p_.heads_q * p_.seq_q * p_.seq_k; }

 private:
  Problem p_;
  ProblemData in_;
};

class ConventionBackend : public Backend {
 public:
  std::string name() const override { return "fake-convention-test"; }
  std::string description() const override { return "test double: +inf LSE on fully masked rows"; }
  Device device() const override { return Device::cpu; }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    return std::make_unique<ConventionInstance>(p, in);
  }
};
ATTNBENCH_REGISTER_BACKEND(ConventionBackend);

}  // namespace

TEST_CASE("in-process: std::bad_alloc is an oom row, a device fault a crashed row; counted apart") {
  Scenario s = three_cases();
  s.cases.erase(s.cases.begin() + 1);  // d64, d32
  RunOptions o;
  o.backends = {"fake-fault-test"};
  o.out_dir = (std::filesystem::temp_directory_path() / "attnbench_runner_test_fault").string();
  o.check = CheckMode::off;
  RunSummary sum = run_scenario(s, o);
  CHECK(sum.oom == 1);
  CHECK(sum.crashed == 1);
  CHECK(sum.exit_code() == 1);
  CHECK(sum.line() == "2 rows: 0 pass, 0 fail, 0 unsupported, 0 error, 1 oom, 0 timeout, 1 crashed");
  auto j = read_json(sum.report_path);
  CHECK(j["results"][0]["status"] == "oom");
  CHECK(j["results"][0]["message"].get<std::string>().find("host out of memory (std::bad_alloc") == 0);
  CHECK(j["results"][1]["status"] == "crashed");
  CHECK(j["results"][1]["message"] == "device fault: cudaDeviceSynchronize: an illegal memory access was encountered");
}

TEST_CASE("run summary: interrupted runs exit 128 + signal") {
  RunSummary sum;
  sum.add("pass");
  CHECK(sum.exit_code() == 0);
  sum.add("timeout");
  CHECK(sum.exit_code() == 1);
  sum.interrupted_signal = 15;
  CHECK(sum.exit_code() == 143);
  sum.add("no-such-status");
  CHECK(sum.error == 1);
}

TEST_CASE("fully masked rows explained: the row says convention vs wrong numbers, the summary counts them") {
  Scenario s;
  s.name = "convention";
  for (int64_t d : {16, 8}) {
    Case c;
    c.id = "d" + std::to_string(d);
    c.problem.batch = 1;
    c.problem.heads_q = c.problem.heads_kv = 2;
    c.problem.seq_q = 40;  // bottom-right causal with Sk = 30: rows 0..9 fully masked
    c.problem.seq_k = 30;
    c.problem.head_dim = c.problem.head_dim_v = d;
    c.problem.dtype = DType::fp32;
    c.problem.mask.emplace_back(CausalTerm{});  // in place: GCC 12 misreads a moved variant (-Wmaybe-uninitialized)
    s.cases.push_back(c);
  }
  RunOptions o;
  o.backends = {"fake-convention-test"};
  o.out_dir = (std::filesystem::temp_directory_path() / "attnbench_runner_convention").string();
  o.check = CheckMode::full;
  o.timing = false;
  o.determinism = false;
  RunSummary sum = run_scenario(s, o);
  CHECK(sum.fail == 2);  // the status stays fail
  CHECK(sum.fail_masked_rows_only == 1);
  auto j = read_json(sum.report_path);
  REQUIRE(j["results"].size() == 2);
  const auto& conv = j["results"][0];
  CHECK(conv["status"] == "fail");
  CHECK(conv["check"]["failure_class"] == "fully_masked_rows");
  CHECK(conv["check"]["fully_masked_rows"] == 20);
  CHECK(conv["message"].get<std::string>().find("numerics fine, fully-masked-row convention differs: LSE not -inf on 20 of 20 rows") == 0);
  const auto& wrong = j["results"][1];
  CHECK(wrong["status"] == "fail");
  CHECK(wrong["check"]["failure_class"] == "numerics");
  CHECK(wrong["message"].get<std::string>().find("wrong numbers on rows that attend keys: O (ratio") == 0);
}
