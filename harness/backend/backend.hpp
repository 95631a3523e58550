// The backend interface and registry (docs/ARCHITECTURE.md, "How to add a backend").
//
// A backend answers supports(problem) -> ok | reason, workspace_bytes, and
// prepare(problem, inputs) -> an instance whose forward()/backward() are what the
// measurement engine times. Instances own their buffers (host for CPU backends,
// device for GPU ones) in the problem's physical layout and dtype; read_outputs()
// converts back to the logical float64 layout for checking.
//
// Registering a backend is one line in its own source file:
//   ATTNBENCH_REGISTER_BACKEND(MyBackend);
// (MyBackend default-constructible, deriving from Backend).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/backend/options.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"

namespace attnbench {

/// Where a backend computes.
enum class Device { cpu, cuda };

/// The answer of Backend::supports(): ok, or the reason it is not.
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {true, {}}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

/// Per-backend constants of the correctness rule (docs/semantics.md section 7):
/// pass iff e(X) <= r * e_lp(X) + ulp(X_gold), r_fwd for O and LSE, r_bwd for
/// gradients. A backend that overrides them must say why in `reason`.
struct RuleConstants {
  double r_fwd = 2.0;
  double r_bwd = 3.0;
  std::string reason;  ///< empty for the default rule
};

/// One prepared case on one backend. Created by Backend::prepare(); not thread safe.
class BackendInstance {
 public:
  virtual ~BackendInstance() = default;

  /// Compute O [B,Hq,Sq,Dv] and LSE [B,Hq,Sq] into the instance's buffers.
  /// Asynchronous for GPU backends (enqueued on stream()). Throws on failure.
  virtual void forward() = 0;
  /// Compute dQ, dK, dV (and dBias) from the last forward's O and LSE.
  virtual void backward() = 0;
  /// Fill every output (O, LSE, dQ, dK, dV, dBias) with NaN so that an element a
  /// pass leaves unwritten fails the check.
  virtual void poison_outputs() = 0;
  /// Wait for queued work (GPU backends); a no-op on the CPU.
  virtual void synchronize() {}
  /// Copy results back in the logical float64 layout; gradients only if `with_grads`.
  virtual AttentionOutputs read_outputs(bool with_grads) = 0;
  /// read_outputs() in two steps: copy the outputs to the host now (after which
  /// the instance, and its device memory, may go), and return a function that
  /// turns them into read_outputs()'s form later, on any thread, once (the
  /// runner calls it in the row's check, which may run while the next rows are
  /// timed: the float64 conversion of a 32k-token pack's outputs takes seconds).
  /// Default: read_outputs() now. Throws as read_outputs(); the function too.
  virtual std::function<AttentionOutputs()> download_outputs(bool with_grads) {
    auto out = std::make_shared<AttentionOutputs>(read_outputs(with_grads));
    return [out] { return std::move(*out); };
  }

  /// (i, j) pairs inside the tiles the forward pass computes, summed over batch
  /// and query heads (docs/semantics.md section 8 "executed" pairs).
  virtual int64_t executed_pairs() const = 0;
  /// Milliseconds spent in prepare() building metadata (BlockMask, cu_seqlens,
  /// plans), reported apart from kernel time; 0 if none.
  virtual double setup_ms() const { return 0.0; }
  /// Bytes the instance holds (inputs, outputs, workspace) on its device.
  virtual size_t allocated_bytes() const { return 0; }
  /// The cudaStream_t the passes run on (GPU backends), else nullptr.
  virtual void* stream() const { return nullptr; }

  /// Out-of-process peers (backends/peers/) time inside their own process: they
  /// return their raw samples in milliseconds for pass 0 = forward, 1 = backward,
  /// 2 = forward+backward, and the runner reports those instead of timing calls.
  virtual std::optional<std::vector<double>> external_samples_ms(int pass) const {
    (void)pass;
    return std::nullopt;
  }
  /// Out-of-process peers run twice themselves and report bitwise determinism
  /// (the runner then runs nothing again).
  virtual std::optional<bool> external_deterministic() const { return std::nullopt; }
  /// A digest of every output's bytes as the last passes left them (O, LSE and,
  /// with `with_grads`, dQ, dK, dV, dBias), computed where they live
  /// (device::digest on the GPU: no copy to the host). The determinism check
  /// compares two runs' digests; equal digests mean bitwise-equal outputs up to
  /// a collision of the 64-bit digest. std::nullopt (the default): the check
  /// compares two read_outputs() bitwise instead. Synchronous; throws as read_outputs().
  virtual std::optional<uint64_t> outputs_digest(bool with_grads) {
    (void)with_grads;
    return std::nullopt;
  }
  /// Extra backend-specific facts for the report row (e.g. compile time of a
  /// peer, cuDNN engine name); null when none.
  virtual nlohmann::json extra() const { return nullptr; }
};

struct TimingPolicy;  // harness/measure/measure.hpp

/// A backend plugin.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Registry name, e.g. "cpu", "naive", "cudnn".
  virtual std::string name() const = 0;
  /// One line for `attnbench list backends`.
  virtual std::string description() const = 0;
  virtual Device device() const = 0;
  /// Whether the backend can run on this machine at all (GPU present, library
  /// loadable); `why` receives the reason when not.
  virtual bool available(std::string* why) const {
    (void)why;
    return true;
  }
  /// Whether this problem can run; the reason when not (becomes an
  /// `unsupported` report row).
  virtual Support supports(const Problem& p) const = 0;
  /// Scratch bytes beyond inputs and outputs.
  virtual size_t workspace_bytes(const Problem& p) const {
    (void)p;
    return 0;
  }
  /// Allocate, upload `inputs` in the backend's dtype and layout, build metadata.
  /// Untimed. Throws std::exception on failure (becomes an `error` row).
  virtual std::unique_ptr<BackendInstance> prepare(const Problem& p, const ProblemData& inputs) = 0;
  /// Correctness-rule constants for this backend (default: docs/semantics.md section 7).
  virtual RuleConstants rule() const { return {}; }
  /// Whether results are expected to be bitwise reproducible (reported, not gated).
  virtual bool deterministic() const { return true; }
  /// True for backends whose work already runs in a process of their own (the
  /// PyTorch peers' worker): `--isolate auto` does not wrap them in another one.
  virtual bool runs_out_of_process() const { return false; }
  /// Whether this backend's timed samples leave host launch latency out, so
  /// that host load (a check running on other cores) cannot reach them: with
  /// the run's stream hold (`hold_stream`: a spin kernel holds the stream while
  /// a pass is enqueued) or CUDA-graph replay (`graph_timer`). The runner lets
  /// only such rows run while earlier rows' checks go on (--check-overlap rows).
  /// Default: hold_stream || graph_timer (the runner times the passes itself).
  virtual bool samples_exclude_host_latency(bool hold_stream, bool graph_timer) const {
    return hold_stream || graph_timer;
  }
  /// Called once by the runner, on a thread of its own, when a run that lists
  /// this backend starts (after configure()): background work that saves the
  /// first case's time and touches no GPU (the PyTorch peers start their
  /// persistent worker and import PyTorch, peer_serve.hpp serve_prestart).
  /// Best effort: exceptions are ignored. Default: nothing.
  virtual void warm_up() {}
  /// True for a stand-in whose code may run only in an isolated child (a plugin
  /// loaded through a probe process, docs/plugins.md): the runner calls none of
  /// available(), supports() and prepare() in its own process but sends every
  /// (case, backend) to a child, which loads the real backend.
  virtual bool isolated_only() const { return false; }
  /// The run's options, called once by the runner before the first case. In-process
  /// backends are timed by the runner and ignore it (the default); backends that
  /// time themselves (out-of-process peers) use it to apply the same cold/hot
  /// policy, warm-up and stopping rule, to skip the backward pass or the timing when
  /// the run does, and to pick the CUDA device.
  virtual void configure(const TimingPolicy& policy, bool backward, bool timing, bool determinism, int device) {
    (void)policy;
    (void)backward;
    (void)timing;
    (void)determinism;
    (void)device;
  }

  /// The options this backend declares (docs/backend-options.md): name, type,
  /// allowed values, default, one line of doc. None by default.
  virtual OptionSpecs option_specs() const { return {}; }
  /// Resolve `given` (name, value as written) against option_specs() (defaults
  /// filled in, values canonical), apply them through apply_options() and remember
  /// the variant. Called once, right after construction and before anything else,
  /// by BackendRegistry::create(). Throws InputError(file, pointer, ...) naming the
  /// backend, the option and the value for an undeclared option or a bad value.
  void bind_options(const std::vector<std::pair<std::string, std::string>>& given, const std::string& file = "",
                    const std::string& pointer = "");
  /// The resolved options (every declared option; empty before bind_options()).
  const OptionValues& option_values() const { return values_; }
  /// The variant's label: name() plus the options that differ from their default
  /// ("cpu", "cpu[threads=1]"; variant_label()). name() before bind_options().
  std::string variant() const { return variant_.empty() ? name() : variant_; }
  /// option_values() as typed JSON (the report row's "options").
  nlohmann::json options_json() const { return attnbench::options_json(option_specs(), values_); }

 protected:
  /// Take the resolved options (each declared one present, canonical text; read
  /// them with OptionValues::flag / integer / text). Called by bind_options().
  virtual void apply_options(const OptionValues& values) { (void)values; }

 private:
  OptionValues values_;
  std::string variant_;
};

/// Process-wide backend registry.
class BackendRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Backend>()>;
  /// Register a factory under `name`; returns true (for static initialisers).
  /// A duplicate name throws std::logic_error.
  static bool add(const std::string& name, Factory f);
  /// Registered names, sorted.
  static std::vector<std::string> names();
  /// A new backend with its default options, or nullptr if `name` is unknown.
  static std::unique_ptr<Backend> create(const std::string& name);
  /// A new backend variant (`v.backend` with `v.options` bound, Backend::bind_options),
  /// or nullptr if `v.backend` is unknown. Throws InputError(file, pointer, ...) for
  /// an undeclared option or a bad value.
  static std::unique_ptr<Backend> create(const VariantRequest& v, const std::string& file = "",
                                         const std::string& pointer = "");
  /// Check a backend list (entries as parse_variant() reads them: "cpu",
  /// "cpu[threads=1]") and return each variant's label (Backend::variant()), in
  /// order. Throws InputError(file, pointer, ...) for an unknown backend (listing
  /// the registered ones), an undeclared option or bad value (naming backend,
  /// option and value), or a variant listed twice (`cpu` and `cpu[threads=0]`
  /// with default 0 are the same variant: it would write two rows for one
  /// (case_id, variant)).
  static std::vector<std::string> resolve_variants(const std::vector<std::string>& entries, const std::string& file,
                                                   const std::string& pointer);
  /// create() of one variant text ("cpu", "cpu[threads=1]", parse_variant()).
  static std::unique_ptr<Backend> create_variant(const std::string& text, const std::string& file = "",
                                                 const std::string& pointer = "");

  /// Loader of shared-library backends (docs/plugins.md): takes a path, registers
  /// the plugin's backend, returns its name, throws InputError naming the file.
  /// backends/plugin/ installs it at static initialisation (the backend layer
  /// cannot dlopen-and-adapt itself without the device layer); returns true.
  using PluginLoader = std::function<std::string(const std::string& path)>;
  static bool set_plugin_loader(PluginLoader loader);
  /// Load one plugin through the installed loader. Throws std::logic_error when
  /// none is installed (a binary linked without backends/), else what it throws.
  static std::string load_plugin(const std::string& path);
};

#define ATTNBENCH_CONCAT_INNER(a, b) a##b
#define ATTNBENCH_CONCAT(a, b) ATTNBENCH_CONCAT_INNER(a, b)
/// Register backend type T (default-constructible) under T().name().
#define ATTNBENCH_REGISTER_BACKEND(T)                                                   \
  static const bool ATTNBENCH_CONCAT(attnbench_registered_, __LINE__) =                 \
      ::attnbench::BackendRegistry::add(T().name(), [] { return std::make_unique<T>(); })

}  // namespace attnbench
