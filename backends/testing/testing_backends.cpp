// Test-only backends that misbehave on purpose, to prove crash isolation, case
// timeouts, journal/resume and signal handling at the CLI level. They are
// registered only when ATTNBENCH_TEST_BACKENDS=1 is in the environment, so users
// never see them in `attnbench list backends`:
//   test-crash  forward() dies of SIGSEGV (raise)
//   test-abort  forward() calls std::abort() (SIGABRT), after a line on stderr
//   test-hang   forward() sleeps forever
//   test-oom    prepare() throws std::bad_alloc (host memory exhausted)
//   test-slow   the cpu backend, after sleeping ATTNBENCH_TEST_SLOW_MS (default
//               300) in prepare(): rows that take long enough to interrupt
//   test-fake-gpu        a "GPU" backend (Device::cuda, no CUDA used): the cpu
//               backend's outputs, and timing passes that each sleep
//               ATTNBENCH_TEST_TIMING_MS (default 100) and return the fixed
//               samples {1, 2, 3} ms as if timed by a worker, so rows of
//               --check-overlap modes compare exactly; with
//               ATTNBENCH_TEST_EVENT_LOG=FILE each timing pass appends
//               "timing-start|timing-end CASE|BACKEND NANOSECONDS" (CLOCK_MONOTONIC,
//               one clock for every process) to FILE
//   test-fake-gpu-crash  test-fake-gpu whose forward() dies of SIGSEGV
//   test-fake-gpu-hang   test-fake-gpu whose forward() sleeps forever
//   test-fake-gpu-wrong  test-fake-gpu whose O is off by 1 (fails the check)
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <ctime>
#include <optional>
#include <vector>

#include "harness/backend/backend.hpp"

namespace attnbench {
namespace {

enum class Misbehaviour { crash, abort, hang, oom };

class MisbehavingInstance : public BackendInstance {
 public:
  MisbehavingInstance(const Problem& p, Misbehaviour m) : p_(p), m_(m) {}
  void forward() override {
    if (m_ == Misbehaviour::crash) std::raise(SIGSEGV);
    if (m_ == Misbehaviour::abort) {
      std::fprintf(stderr, "test-abort: giving up on purpose\n");
      std::fflush(stderr);
      std::abort();
    }
    if (m_ == Misbehaviour::hang)
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  void backward() override {}
  void poison_outputs() override {}
  AttentionOutputs read_outputs(bool) override { return {}; }
  int64_t executed_pairs() const override { return p_.batch * p_.heads_q * p_.seq_q * p_.seq_k; }

 private:
  Problem p_;
  Misbehaviour m_;
};

class MisbehavingBackend : public Backend {
 public:
  MisbehavingBackend(std::string name, Misbehaviour m) : name_(std::move(name)), m_(m) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "test only: misbehaves on purpose (ATTNBENCH_TEST_BACKENDS=1)"; }
  Device device() const override { return Device::cpu; }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData&) override {
    if (m_ == Misbehaviour::oom) throw std::bad_alloc();
    return std::make_unique<MisbehavingInstance>(p, m_);
  }

 private:
  std::string name_;
  Misbehaviour m_;
};

/// The cpu backend, slowed down in prepare().
class SlowBackend : public Backend {
 public:
  SlowBackend() : cpu_(BackendRegistry::create("cpu")) {}
  std::string name() const override { return "test-slow"; }
  std::string description() const override { return "test only: the cpu backend after a sleep (ATTNBENCH_TEST_SLOW_MS)"; }
  Device device() const override { return Device::cpu; }
  Support supports(const Problem& p) const override { return cpu_->supports(p); }
  RuleConstants rule() const override { return cpu_->rule(); }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    const char* v = std::getenv("ATTNBENCH_TEST_SLOW_MS");
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(v ? std::atoi(v) : 300);
    while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_until(until);  // whole, even if signalled
    return cpu_->prepare(p, in);
  }

 private:
  std::unique_ptr<Backend> cpu_;
};

enum class FakeGpu { good, crash, hang, wrong };

/// The cpu backend's instance behind a fake GPU timer (see the top of this file).
class FakeGpuInstance final : public BackendInstance {
 public:
  FakeGpuInstance(std::unique_ptr<BackendInstance> inner, FakeGpu how, std::string key)
      : inner_(std::move(inner)), how_(how), key_(std::move(key)) {}
  void forward() override {
    if (how_ == FakeGpu::crash) std::raise(SIGSEGV);
    if (how_ == FakeGpu::hang)
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    inner_->forward();
  }
  void backward() override { inner_->backward(); }
  void poison_outputs() override { inner_->poison_outputs(); }
  int64_t executed_pairs() const override { return inner_->executed_pairs(); }
  AttentionOutputs read_outputs(bool with_grads) override {
    AttentionOutputs out = inner_->read_outputs(with_grads);
    if (how_ == FakeGpu::wrong)
      for (double& x : out.o.data) x += 1.0;
    return out;
  }
  std::optional<std::vector<double>> external_samples_ms(int) const override {
    const char* ms = std::getenv("ATTNBENCH_TEST_TIMING_MS");
    log_event("timing-start");
    std::this_thread::sleep_for(std::chrono::milliseconds(ms ? std::atoi(ms) : 100));
    log_event("timing-end");
    return std::vector<double>{1.0, 2.0, 3.0};
  }

 private:
  void log_event(const char* what) const {
    const char* path = std::getenv("ATTNBENCH_TEST_EVENT_LOG");
    if (!path || !*path) return;
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    const std::string line = std::string(what) + " " + key_ + " " +
                             std::to_string(static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec) + "\n";
    if (std::FILE* f = std::fopen(path, "a")) {  // one short line: appended whole by every process
      std::fputs(line.c_str(), f);
      std::fclose(f);
    }
  }

  std::unique_ptr<BackendInstance> inner_;
  FakeGpu how_;
  std::string key_;
};

class FakeGpuBackend final : public Backend {
 public:
  FakeGpuBackend(std::string name, FakeGpu how) : name_(std::move(name)), how_(how), cpu_(BackendRegistry::create("cpu")) {}
  std::string name() const override { return name_; }
  std::string description() const override {
    return "test only: the cpu backend's outputs behind a fake GPU timer (ATTNBENCH_TEST_BACKENDS=1)";
  }
  Device device() const override { return Device::cuda; }
  Support supports(const Problem& p) const override { return cpu_->supports(p); }
  RuleConstants rule() const override { return cpu_->rule(); }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    const std::string key = "S" + std::to_string(p.seq_q) + "|" + name_;
    return std::make_unique<FakeGpuInstance>(cpu_->prepare(p, in), how_, key);
  }

 private:
  std::string name_;
  FakeGpu how_;
  std::unique_ptr<Backend> cpu_;
};

/// Register every (name, kind) of `table` as make(name, kind).
template <class Kind, size_t N, class Make>
void add_each(const std::pair<const char*, Kind> (&table)[N], Make make) {
  for (const auto& [name, kind] : table) {
    const std::string n = name;
    const Kind k = kind;
    BackendRegistry::add(n, [n, k, make] { return make(n, k); });
  }
}

bool register_testing_backends() {
  const char* on = std::getenv("ATTNBENCH_TEST_BACKENDS");
  if (!on || std::string(on) != "1") return false;
  const std::pair<const char*, Misbehaviour> bad[] = {{"test-crash", Misbehaviour::crash},
                                                      {"test-abort", Misbehaviour::abort},
                                                      {"test-hang", Misbehaviour::hang},
                                                      {"test-oom", Misbehaviour::oom}};
  add_each(bad, [](const std::string& n, Misbehaviour m) { return std::make_unique<MisbehavingBackend>(n, m); });
  BackendRegistry::add("test-slow", [] { return std::make_unique<SlowBackend>(); });
  const std::pair<const char*, FakeGpu> fakes[] = {{"test-fake-gpu", FakeGpu::good},
                                                   {"test-fake-gpu-crash", FakeGpu::crash},
                                                   {"test-fake-gpu-hang", FakeGpu::hang},
                                                   {"test-fake-gpu-wrong", FakeGpu::wrong}};
  add_each(fakes, [](const std::string& n, FakeGpu h) { return std::make_unique<FakeGpuBackend>(n, h); });
  return true;
}

const bool kTestingBackendsRegistered = register_testing_backends();

}  // namespace
}  // namespace attnbench
