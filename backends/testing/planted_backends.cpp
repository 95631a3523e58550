#include "backends/testing/planted_backends.hpp"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>

#include "harness/backend/backend.hpp"

namespace attnbench {
namespace {

enum class Plant { window129, masked_rows, nondeterministic_gqa, narrow_tile64 };

/// Whether the defect fires on problem p.
bool fires(Plant plant, const Problem& p) {
  if (plant == Plant::window129) return p.seq_q == 129 && p.find_mask<SlidingWindowTerm>() != nullptr;
  if (plant == Plant::narrow_tile64) return p.seq_q > 64;
  if (plant == Plant::nondeterministic_gqa) return p.heads_q > p.heads_kv;
  return true;  // masked_rows: wherever a row is fully masked
}

/// The cpu backend's instance, its outputs corrupted where the plant fires.
class PlantedInstance final : public BackendInstance {
 public:
  PlantedInstance(std::unique_ptr<BackendInstance> inner, Plant plant, const Problem& p)
      : inner_(std::move(inner)), plant_(plant), fires_(fires(plant, p)) {}
  void forward() override { inner_->forward(); }
  void backward() override { inner_->backward(); }
  void poison_outputs() override { inner_->poison_outputs(); }
  void synchronize() override { inner_->synchronize(); }
  int64_t executed_pairs() const override { return inner_->executed_pairs(); }
  AttentionOutputs read_outputs(bool with_grads) override {
    AttentionOutputs out = inner_->read_outputs(with_grads);
    if (!fires_) return out;
    if (plant_ == Plant::window129 || plant_ == Plant::narrow_tile64) {
      for (double& x : out.o.data) x += 1.0;
      return out;
    }
    if (plant_ == Plant::nondeterministic_gqa) {
      // Every other read moves O[0] by one float64 ulp: well inside the rule, but
      // not bitwise the same (as float32 atomics in another order would be).
      if (!out.o.data.empty() && (reads_++ % 2 == 1)) out.o.data[0] = std::nextafter(out.o.data[0], 1e300);
      return out;
    }
    const int64_t rows = out.lse.numel(), dv = rows ? out.o.numel() / rows : 0;
    for (int64_t r = 0; r < rows; ++r)
      if (std::isinf(out.lse.data[static_cast<size_t>(r)]))
        for (int64_t d = 0; d < dv; ++d) out.o.data[static_cast<size_t>(r * dv + d)] = 1.0;
    return out;
  }

 private:
  std::unique_ptr<BackendInstance> inner_;
  Plant plant_;
  bool fires_;
  int64_t reads_ = 0;
};

class PlantedBackend final : public Backend {
 public:
  PlantedBackend(std::string name, Plant plant) : name_(std::move(name)), plant_(plant), cpu_(BackendRegistry::create("cpu")) {}
  std::string name() const override { return name_; }
  std::string description() const override {
    return "test only: the cpu backend with a planted defect (ATTNBENCH_TEST_BACKENDS=1)";
  }
  Device device() const override { return Device::cpu; }
  Support supports(const Problem& p) const override {
    if (plant_ == Plant::narrow_tile64 && (p.head_dim != 64 || p.head_dim_v != 64 || p.dtype == DType::fp32))
      return Support::no("test-planted-narrow-tile64 takes head dims 64 in fp16 or bf16 only");
    return cpu_->supports(p);
  }
  RuleConstants rule() const override { return cpu_->rule(); }
  std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& in) override {
    return std::make_unique<PlantedInstance>(cpu_->prepare(p, in), plant_, p);
  }

 private:
  std::string name_;
  Plant plant_;
  std::unique_ptr<Backend> cpu_;
};

const bool kPlantedRegistered = [] {
  const char* on = std::getenv("ATTNBENCH_TEST_BACKENDS");
  return on && std::string(on) == "1" && register_planted_backends();
}();

}  // namespace

bool register_planted_backends() {
  const std::pair<const char*, Plant> plants[] = {{"test-planted-window129", Plant::window129},
                                                  {"test-planted-masked-rows", Plant::masked_rows},
                                                  {"test-planted-nondeterministic-gqa", Plant::nondeterministic_gqa},
                                                  {"test-planted-narrow-tile64", Plant::narrow_tile64}};
  for (const auto& [name, plant] : plants) {
    const std::string n = name;
    const Plant pl = plant;
    if (!BackendRegistry::create(n)) BackendRegistry::add(n, [n, pl] { return std::make_unique<PlantedBackend>(n, pl); });
  }
  return true;
}

}  // namespace attnbench
