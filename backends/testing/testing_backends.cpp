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
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>

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

bool register_testing_backends() {
  const char* on = std::getenv("ATTNBENCH_TEST_BACKENDS");
  if (!on || std::string(on) != "1") return false;
  const std::pair<const char*, Misbehaviour> bad[] = {{"test-crash", Misbehaviour::crash},
                                                      {"test-abort", Misbehaviour::abort},
                                                      {"test-hang", Misbehaviour::hang},
                                                      {"test-oom", Misbehaviour::oom}};
  for (const auto& [name, m] : bad) {
    const std::string n = name;
    const Misbehaviour mm = m;
    BackendRegistry::add(n, [n, mm] { return std::make_unique<MisbehavingBackend>(n, mm); });
  }
  BackendRegistry::add("test-slow", [] { return std::make_unique<SlowBackend>(); });
  return true;
}

const bool kTestingBackendsRegistered = register_testing_backends();

}  // namespace
}  // namespace attnbench
