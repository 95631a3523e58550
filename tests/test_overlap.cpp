// Overlap (issue 29): the host-side check of a GPU row, and the case's float64
// reference when that row computes it, run on a worker thread while the row is
// timed. Shown with a fake GPU backend whose "timing" (samples its worker timed)
// takes a known 3 x 300 ms and whose outputs are the gold itself.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "harness/backend/backend.hpp"
#include "harness/run/runner.hpp"
#include "reference/reference.hpp"

using namespace attnbench;

namespace {

class GoldInstance : public BackendInstance {
 public:
  GoldInstance(const Problem& p, const ProblemData& in) : p_(p), in_(in) {}
  void forward() override {}
  void backward() override {}
  void poison_outputs() override {}
  AttentionOutputs read_outputs(bool grads) override { return reference::gold(p_, in_, grads); }
  int64_t executed_pairs() const override { return p_.batch * p_.heads_q * p_.seq_q * p_.seq_k; }
  /// "GPU timing" in a worker: 300 ms per pass.
  std::optional<std::vector<double>> external_samples_ms(int) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return std::vector<double>{1.0, 1.0, 1.0};
  }

 private:
  Problem p_;
  ProblemData in_;
};

class GoldGpuBackend : public Backend {
 public:
  std::string name() const override { return "fake-gold-gpu"; }
  std::string description() const override { return "test double: returns the gold, times 300 ms per pass"; }
  Device device() const override { return Device::cuda; }
  Support supports(const Problem&) const override { return Support::yes(); }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    return std::make_unique<GoldInstance>(p, in);
  }
};
ATTNBENCH_REGISTER_BACKEND(GoldGpuBackend);

/// Read-backs of DigestInstance (the determinism check must not read back again).
int g_digest_reads = 0;

/// GoldInstance with outputs_digest(): the same digest on every run (`stable`),
/// or another one per run; and download_outputs() whose conversion (the
/// returned function) takes 300 ms.
class DigestInstance : public GoldInstance {
 public:
  DigestInstance(const Problem& p, const ProblemData& in, bool stable) : GoldInstance(p, in), stable_(stable) {}
  AttentionOutputs read_outputs(bool grads) override {
    ++g_digest_reads;
    return GoldInstance::read_outputs(grads);
  }
  std::optional<uint64_t> outputs_digest(bool) override { return stable_ ? 42 : 42 + runs_++; }
  std::function<AttentionOutputs()> download_outputs(bool grads) override {
    auto out = std::make_shared<AttentionOutputs>(read_outputs(grads));
    return [out] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return std::move(*out);
    };
  }

 private:
  bool stable_;
  uint64_t runs_ = 0;
};

template <bool Stable>
class DigestGpuBackend : public GoldGpuBackend {
 public:
  std::string name() const override { return Stable ? "fake-digest-stable" : "fake-digest-unstable"; }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    return std::make_unique<DigestInstance>(p, in, Stable);
  }
};
using DigestStable = DigestGpuBackend<true>;
using DigestUnstable = DigestGpuBackend<false>;
ATTNBENCH_REGISTER_BACKEND(DigestStable);
ATTNBENCH_REGISTER_BACKEND(DigestUnstable);

Scenario one_case() {
  Scenario s;
  s.name = "overlap-test";
  Case c;
  c.id = "causal-S256";
  c.problem.batch = 1;
  c.problem.heads_q = 4;
  c.problem.heads_kv = 2;
  c.problem.seq_q = c.problem.seq_k = 256;
  c.problem.head_dim = c.problem.head_dim_v = 32;
  c.problem.dtype = DType::fp16;
  c.problem.mask.push_back(CausalTerm{});
  s.cases.push_back(c);
  return s;
}

nlohmann::json run_once(RunOptions::CheckOverlap mode, const std::string& dir) {
  RunOptions o;
  o.backends = {"fake-gold-gpu"};
  o.out_dir = (std::filesystem::temp_directory_path() / dir).string();
  std::filesystem::remove_all(o.out_dir);
  o.check_overlap = mode;
  o.determinism = false;
  const RunSummary sum = run_scenario(one_case(), o);
  REQUIRE(sum.pass == 1);
  std::ifstream in(sum.report_path);
  nlohmann::json row = nlohmann::json::parse(in)["results"][0];
  std::filesystem::remove_all(o.out_dir);
  return row;
}

}  // namespace

TEST_CASE("a GPU row's check (the case's reference included) runs while the row is timed; same verdict") {
  const nlohmann::json without = run_once(RunOptions::CheckOverlap::off, "attnbench_overlap_off");
  CHECK(without["extra"]["check_overlap"]["mode"] == "off");
  for (auto mode : {RunOptions::CheckOverlap::same_row, RunOptions::CheckOverlap::rows}) {
    INFO(to_string(mode));
    const nlohmann::json with = run_once(mode, "attnbench_overlap_on");
    REQUIRE(with["extra"].contains("check_overlap"));
    CHECK(with["extra"]["check_overlap"]["mode"] == to_string(mode));
    const double check_ms = with["extra"]["check_overlap"]["check_ms"].get<double>();
    const double wait_ms = with["extra"]["check_overlap"]["wait_ms"].get<double>();
    CHECK(check_ms > 0);
    // Run one after the other, the row would wait the whole check after its 900 ms of
    // timing; overlapped, it waits only what is left of the check after the timing.
    CHECK(wait_ms < check_ms);
    CHECK(wait_ms <= std::max(0.0, check_ms - 900.0) + 100.0);
    CHECK(with["check"]["gold_source"] == "computed");  // this row computed the reference, on the worker
    // The verdict does not depend on where the check ran.
    nlohmann::json a = with["check"], b = without["check"];
    for (auto* j : {&a, &b}) {
      j->erase("reference_ms");
      j->erase("gold_ms");
    }
    CHECK(a == b);
    CHECK(with["status"] == "pass");
    CHECK(with["timing"]["fwd"]["median_ms"] == without["timing"]["fwd"]["median_ms"]);
  }
}

TEST_CASE("determinism by the backend's outputs digest: two runs compared without a second read-back") {
  for (const bool stable : {true, false}) {
    INFO("stable " << stable);
    RunOptions o;
    o.backends = {stable ? "fake-digest-stable" : "fake-digest-unstable"};
    o.out_dir = (std::filesystem::temp_directory_path() / "attnbench_digest_determinism").string();
    std::filesystem::remove_all(o.out_dir);
    g_digest_reads = 0;
    const RunSummary sum = run_scenario(one_case(), o);
    REQUIRE(sum.pass == 1);
    std::ifstream in(sum.report_path);
    const nlohmann::json row = nlohmann::json::parse(in)["results"][0];
    std::filesystem::remove_all(o.out_dir);
    CHECK(row["extra"]["deterministic"] == stable);
    CHECK(row["extra"]["determinism_by"] == "device digest of both runs' outputs (device::digest)");
    CHECK(row["extra"]["determinism_ms"].get<double>() >= 0);
    CHECK(g_digest_reads == 1);  // the check's read-back only
    // The conversion ran in the check (on its thread, from the row's timing on), not before the timing.
    CHECK(row["extra"]["read_outputs_ms"].get<double>() < 300);
    CHECK(row["extra"]["check_overlap"]["decode_ms"].get<double>() >= 300);
  }
}
