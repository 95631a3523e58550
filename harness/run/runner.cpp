#include "harness/run/runner.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>

#include "harness/backend/backend.hpp"
#include "harness/model/block_mask.hpp"
#include "harness/device/environment.hpp"
#include "harness/model/errors.hpp"
#include "harness/measure/kernel_trace.hpp"
#include "harness/device/kernel_trace.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/printable.hpp"
#include "reports/report.hpp"
#include "reference/reference.hpp"

#if defined(ATTNBENCH_HAVE_CUDA)
#include "harness/device/ceilings.hpp"
#include "harness/device/device.hpp"
#endif

namespace attnbench {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// Reference outputs of one case, computed once and shared by every backend.
/// What is checked (full, or a deterministic sample of (batch, kv-head) slices
/// when the float64 reference would be expensive) is decided by plan_check.
struct GoldCache {
  bool ready = false;
  CheckPlan plan;
  AttentionOutputs gold, lp;
  double ms = 0;
};

void compute_gold(const Problem& p, const ProblemData& in, CheckMode mode, bool grads, GoldCache& g) {
  auto t0 = Clock::now();
  g.plan = plan_check(p, mode, grads);
  g.gold = reference::gold(p, in, grads, g.plan.slices);
  g.lp = reference::lp(p, in, grads, g.plan.slices);
  g.ms = ms_since(t0);
  g.ready = true;
}

nlohmann::json work_json(const Problem& p, int64_t useful_pairs, int64_t executed_pairs) {
  const double per_pair = 2.0 * static_cast<double>(p.head_dim + p.head_dim_v);
  nlohmann::json w;
  w["useful_pairs"] = useful_pairs;
  w["executed_pairs"] = executed_pairs;
  w["useful_flops_fwd"] = per_pair * static_cast<double>(useful_pairs);
  w["executed_flops_fwd"] = per_pair * static_cast<double>(executed_pairs);
  w["useful_flops_bwd"] = 2.5 * per_pair * static_cast<double>(useful_pairs);
  w["executed_flops_bwd"] = 2.5 * per_pair * static_cast<double>(executed_pairs);
  w["tile_efficiency"] = executed_pairs > 0 ? static_cast<double>(useful_pairs) / static_cast<double>(executed_pairs) : 0.0;
  w["flop_convention"] = "fwd = 2 * pairs * (Dqk + Dv) summed over batch and query heads; bwd = 2.5 * fwd (FlashAttention)";
  return w;
}

nlohmann::json packing_json(const std::optional<PackingStats>& s) {
  if (!s) return nullptr;
  nlohmann::json j;
  j["source"] = s->source;
  j["strategy"] = s->strategy;
  j["pad_to"] = s->pad_to;
  j["target_fill"] = s->target_fill;
  j["real_tokens"] = s->real_tokens;
  j["padded_tokens"] = s->padded_tokens;
  j["packing_ratio"] = s->packing_ratio;
  j["docs_per_pack"] = s->docs_per_pack;
  j["truncated_docs"] = s->truncated_docs;
  return j;
}

bool is_oom(const std::exception& e) {
  std::string w = e.what();
  return w.find("out of memory") != std::string::npos || w.find("OutOfMemory") != std::string::npos ||
         w.find("ALLOC_FAILED") != std::string::npos || w.find("cudaErrorMemoryAllocation") != std::string::npos;
}

/// extra.kernel_trace of a row: one untimed forward, then (with `backward`) one
/// untimed backward, each traced on its own. A trace that cannot be taken
/// (no CUPTI, CUPTI busy) is recorded as {"unavailable": why} or {"error": what}
/// and never fails the row; an exception of the backend itself propagates.
nlohmann::json trace_passes(BackendInstance& inst, bool backward) {
  std::string why;
  if (inst.external_samples_ms(static_cast<int>(Pass::forward)))
    return {{"unavailable", "the backend runs and times itself in a worker process"}};
  if (!device::kernel_trace_available(&why)) return {{"unavailable", why}};
  nlohmann::json out;
  out["note"] = "one untimed pass each, traced with CUPTI; kernels of other processes (peer workers) are not seen";
  auto traced = [&](const char* key, auto&& pass) {
    try {
      device::kernel_trace_start();
    } catch (const std::exception& e) {
      out[key] = {{"error", e.what()}};
      return;
    }
    try {
      pass();
      inst.synchronize();
    } catch (...) {
      try {
        (void)device::kernel_trace_stop();
      } catch (const std::exception&) {
      }
      throw;
    }
    try {
      out[key] = summarize_trace(device::kernel_trace_stop());
    } catch (const std::exception& e) {
      out[key] = {{"error", e.what()}};
    }
  };
  traced("fwd", [&] { inst.forward(); });
  if (backward) traced("bwd", [&] { inst.backward(); });
  return out;
}

/// A case over the total-size budget (Case::invalid): an error row per backend
/// with the message; nothing is allocated or counted for it.
void write_invalid_case_rows(const Case& c, const std::vector<std::unique_ptr<Backend>>& backends,
                             ReportWriter& writer, RunSummary& summary) {
  for (const auto& backend : backends) {
    ReportRow row;
    row.case_id = c.id;
    row.backend = backend->name();
    row.problem = nullptr;
    row.status = RowStatus::error;
    row.message = c.invalid;
    ++summary.error;
    ++summary.rows;
    std::fprintf(stderr, "    %-8s %-11s %s\n", printable(row.backend).c_str(), to_string(row.status),
                 printable(row.message).c_str());
    writer.add_row(row);
  }
}

}  // namespace

std::pair<int, int> parse_shard(const std::string& s) {
  auto slash = s.find('/');
  try {
    if (slash != std::string::npos) {
      int i = std::stoi(s.substr(0, slash)), n = std::stoi(s.substr(slash + 1));
      if (n >= 1 && i >= 0 && i < n) return {i, n};
    }
  } catch (const std::exception&) {
  }
  throw InputError("<command line>", "--shard", "expected i/n with 0 <= i < n, got \"" + s + "\"");
}

RunSummary run_scenario(const Scenario& scenario, const RunOptions& opts) {
  // Resolve backends before anything runs: unknown names are usage errors.
  std::vector<std::string> names = opts.backends.empty() ? BackendRegistry::names() : opts.backends;
  std::vector<std::unique_ptr<Backend>> backends;
  std::set<std::string> seen;
  for (const auto& n : names) {
    // One row per (case_id, backend): a name listed twice would write two.
    if (!seen.insert(n).second)
      throw InputError("<command line>", "--backends", "backend \"" + n + "\" is listed more than once");
    auto b = BackendRegistry::create(n);
    if (!b) {
      std::string known;
      for (const auto& k : BackendRegistry::names()) known += (known.empty() ? "" : ", ") + k;
      throw InputError("<command line>", "--backends", "unknown backend \"" + n + "\" (registered: " + known + ")");
    }
    b->configure(opts.policy, opts.backward, opts.timing, opts.determinism, opts.device);
    backends.push_back(std::move(b));
  }
#if defined(ATTNBENCH_HAVE_CUDA)
  if (device::cuda_device_available()) device::select_device(opts.device);
#endif

  std::filesystem::create_directories(opts.out_dir);
  nlohmann::json scenario_json = {{"name", scenario.name}, {"description", scenario.description},
                                   {"file", scenario.file}, {"cases", scenario.cases.size()}};
  nlohmann::json header = make_report_header(opts.command_line, scenario_json, opts.policy.to_json(),
                                             env::collect(opts.command_line, opts.device));
  header["shard"] = std::to_string(opts.shard_index) + "/" + std::to_string(opts.shard_count);
  header["backends"] = names;
  ReportWriter writer((std::filesystem::path(opts.out_dir) / "report.json").string(), header);

  // Ceilings (docs/semantics.md section 8): a large bf16 GEMM and a device-to-device copy,
  // once per run, when a GPU backend will be timed.
#if defined(ATTNBENCH_HAVE_CUDA)
  bool any_gpu = false;
  for (const auto& b : backends) any_gpu = any_gpu || (b->device() == Device::cuda && b->available(nullptr));
  if (any_gpu && opts.timing) writer.set_field("ceilings", device::measure_ceilings().to_json());
#endif
  std::optional<std::regex> filter;
  if (!opts.case_filter.empty()) {
    try {
      filter.emplace(opts.case_filter);
    } catch (const std::regex_error& e) {
      throw InputError("<command line>", "--cases", "invalid regular expression \"" + opts.case_filter + "\": " + e.what());
    }
  }
  RunSummary summary;
  summary.report_path = writer.path();
  const auto run_t0 = Clock::now();
  size_t case_no = 0;
  for (size_t ci = 0; ci < scenario.cases.size(); ++ci) {
    if (static_cast<int>(ci % static_cast<size_t>(opts.shard_count)) != opts.shard_index) continue;
    if (filter && !std::regex_search(scenario.cases[ci].id, *filter)) continue;
    ++case_no;
    Case c = scenario.cases[ci];
    if (opts.seed) c.problem.seed = *opts.seed;
    const Problem& p = c.problem;
    std::fprintf(stderr, "[%zu/%zu] %s (%.0fs elapsed)\n", case_no, scenario.cases.size(), printable(c.id).c_str(),
                 ms_since(run_t0) / 1000.0);
    if (!c.invalid.empty()) {
      write_invalid_case_rows(c, backends, writer, summary);
      continue;
    }
    const int64_t useful_pairs = count_allowed_pairs(p) * p.heads_q;
    std::unique_ptr<ProblemData> inputs;  // generated lazily, untimed
    GoldCache gold;

    for (auto& backend : backends) {
      ReportRow row;
      row.case_id = c.id;
      row.backend = backend->name();
      row.problem = to_json(p, true);
      row.packing = packing_json(c.packing);
      row.work = work_json(p, useful_pairs, 0);
      row.mask_thumbnail = mask_thumbnail_for(p);
      const bool on_gpu = backend->device() == Device::cuda;
      if (on_gpu) row.clocks["start"] = env::sample_clocks(opts.device).to_json();
      std::string why;
      if (!backend->available(&why)) {
        row.status = RowStatus::unsupported;
        row.reason = "backend not available on this machine: " + why;
      } else if (Support s = backend->supports(p); !s) {
        row.status = RowStatus::unsupported;
        row.reason = s.reason;
      } else {
        try {
          if (!inputs) inputs = std::make_unique<ProblemData>(make_inputs(p));
          auto t0 = Clock::now();
          auto inst = backend->prepare(p, *inputs);
          const double prepare_ms = ms_since(t0);
          row.work = work_json(p, useful_pairs, inst->executed_pairs());
          inst->poison_outputs();
          inst->forward();
          if (opts.backward) inst->backward();
          inst->synchronize();
          AttentionOutputs got = inst->read_outputs(opts.backward);
          if (opts.check != CheckMode::off) {
            if (!gold.ready) compute_gold(p, *inputs, opts.check, opts.backward, gold);
            CheckResult cr = check_outputs(p, got, gold.gold, gold.lp, backend->rule(), gold.plan.slices);
            row.check = cr.to_json();
            row.check["plan"] = gold.plan.description;
            row.check["reference_ms"] = gold.ms;
            row.status = cr.pass ? RowStatus::pass : RowStatus::fail;
            if (!cr.pass) row.message = cr.failure_detail;  // convention vs wrong numbers (check.hpp)
            if (cr.failure_class == "fully_masked_rows") ++summary.fail_masked_rows_only;
          } else {
            row.check = {{"mode", "off"}, {"scope", "nothing checked (--check off)"}, {"nonfinite", count_nonfinite(got)}};
            row.status = RowStatus::unchecked;  // never an unearned pass
          }
          if (opts.determinism) {
            inst->poison_outputs();
            inst->forward();
            if (opts.backward) inst->backward();
            inst->synchronize();
            AttentionOutputs again = inst->read_outputs(opts.backward);
            auto ext = inst->external_deterministic();
            row.extra["deterministic"] = ext ? *ext : bitwise_equal(got, again);
            row.extra["expected_deterministic"] = backend->deterministic();
          }
          if (opts.timing) {
            std::vector<Pass> passes = {Pass::forward};
            if (opts.backward) {
              passes.push_back(Pass::backward);
              passes.push_back(Pass::forward_backward);
            }
            for (Pass pass : passes) {
              TimingStats st;
              if (auto samples = inst->external_samples_ms(static_cast<int>(pass))) {
                st.samples_ms = *samples;
                st.summarize();
                // Timed by the backend itself (CUDA events in the peer's worker) under
                // the policy configure() passed; its own stop reason is in extra.
                st.stop_reason = "external";
                st.timer = "external";
                st.cold = opts.policy.cold;
                st.warmup = opts.policy.warmup;
              } else {
                st = time_pass(*backend, *inst, pass, opts.policy);
              }
              row.timing[to_string(pass)] = st.to_json();
            }
          }
          if (opts.kernel_trace && on_gpu) row.extra["kernel_trace"] = trace_passes(*inst, opts.backward);
          if (auto ex = inst->extra(); !ex.is_null()) row.extra["backend"] = ex;
          row.extra["prepare_ms"] = prepare_ms;
          row.extra["setup_ms"] = inst->setup_ms();
          row.memory = {{"allocated_bytes", inst->allocated_bytes()},
                        {"workspace_bytes", backend->workspace_bytes(p)}};
        } catch (const Unsupported& e) {
          // A backend may only learn in prepare() that it cannot run the case (e.g. a
          // peer's worker, or cuDNN rejecting the graph): that is a reason, not an error.
          row.status = RowStatus::unsupported;
          row.reason = e.what();
        } catch (const Timeout& e) {
          row.status = RowStatus::timeout;
          row.message = e.what();
        } catch (const Crashed& e) {
          row.status = RowStatus::crashed;
          row.message = e.what();
        } catch (const std::exception& e) {
          row.status = is_oom(e) ? RowStatus::oom : RowStatus::error;
          row.message = e.what();
        }
      }
      if (on_gpu) row.clocks["end"] = env::sample_clocks(opts.device).to_json();
      switch (row.status) {
        case RowStatus::pass: ++summary.pass; break;
        case RowStatus::fail: ++summary.fail; break;
        case RowStatus::unsupported: ++summary.unsupported; break;
        case RowStatus::oom: ++summary.oom; break;
        case RowStatus::unchecked: ++summary.unchecked; break;
        default: ++summary.error; break;
      }
      ++summary.rows;
      std::fprintf(stderr, "    %-8s %-11s %s\n", printable(row.backend).c_str(), to_string(row.status),
                   printable(!row.reason.empty() ? row.reason : row.message).c_str());
      writer.add_row(row);
    }
  }
  writer.finish();
  return summary;
}

}  // namespace attnbench
