#include "harness/run/runner.hpp"

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <new>
#include <thread>
#include <fstream>
#include <functional>
#include <future>
#include <unordered_map>
#include <unordered_set>

#include <unistd.h>

#include "harness/backend/backend.hpp"
#include "harness/model/block_mask.hpp"
#include "harness/device/environment.hpp"
#include "harness/model/errors.hpp"
#include "harness/measure/kernel_trace.hpp"
#include "harness/device/kernel_trace.hpp"
#include "harness/model/mask.hpp"
#include "reports/journal.hpp"
#include "harness/model/printable.hpp"
#include "reports/report.hpp"
#include "reports/schema.hpp"
#include "reports/summary.hpp"
#include "harness/model/json_util.hpp"
#include "harness/run/gold_cache.hpp"
#include "harness/run/process.hpp"
#include "harness/run/row_pipeline.hpp"
#include "reference/reference.hpp"

#if defined(ATTNBENCH_HAVE_CUDA)
#include "harness/device/ceilings.hpp"
#include "harness/device/device.hpp"
#endif

namespace attnbench {

namespace {

using Clock = std::chrono::steady_clock;
const std::string kNotAvailable = "backend not available on this machine: ";
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
/// The steady clock (CLOCK_MONOTONIC: one clock for every process) in nanoseconds.
int64_t steady_ns(Clock::time_point t = Clock::now()) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
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

/// A device fault (an illegal address, a failed launch, a device-side assert):
/// the context is lost, so the row is `crashed`, as a segfault would be.
bool is_device_fault(const std::exception& e) {
  const std::string w = e.what();
  for (const char* k : {"illegal memory access", "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS",
                        "unspecified launch failure", "cudaErrorLaunchFailure", "illegal instruction",
                        "misaligned address", "device-side assert", "cudaErrorAssert"})
    if (w.find(k) != std::string::npos) return true;
  return false;
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

/// The (case, backend) row before the backend runs: what the runner knows of the
/// case (problem, packing, useful work, mask picture).
ReportRow skeleton_row(const Case& c, const Backend& b, int64_t useful_pairs, const nlohmann::json& thumbnail) {
  ReportRow row;
  row.case_id = c.id;
  row.backend = b.name();
  row.variant = b.variant();
  row.options = b.options_json();
  row.problem = to_json(c.problem, true);
  row.packing = packing_json(c.packing);
  row.work = count_work(c.problem, useful_pairs, 0);
  row.mask_thumbnail = thumbnail;
  return row;
}

/// What every row of a case shares and the runner computes before the backends
/// run: the exact pair count and the mask thumbnail. Inside the per-row guard:
/// a case that cannot be built (std::bad_alloc of a BlockMask, an overflow)
/// gives `error` (or `oom`) rows with the message, and the sweep goes on.
struct CaseShared {
  int64_t useful_pairs = 0;
  nlohmann::json thumbnail;
  std::string error;   ///< "" when built
  bool oom = false;
};

CaseShared build_case_shared(const Problem& p) {
  CaseShared cs;
  try {
    cs.useful_pairs = count_allowed_pairs(p) * p.heads_q;
    cs.thumbnail = mask_thumbnail_for(p);
  } catch (const std::bad_alloc& e) {
    cs.oom = true;
    cs.error = std::string("host out of memory building the case (pair count, BlockMask thumbnail): ") + e.what();
  } catch (const std::exception& e) {
    cs.error = std::string("cannot build the case (pair count, BlockMask thumbnail): ") + e.what();
  }
  return cs;
}

/// What a case's units share: inputs and the reference (harness/run/gold_cache.hpp).
using UnitCache = CaseGold;

/// Timed passes of one instance into row.timing.
void time_unit(Backend& backend, BackendInstance& inst, const RunOptions& opts, ReportRow& row) {
  std::vector<Pass> passes = {Pass::forward};
  if (opts.backward) {
    passes.push_back(Pass::backward);
    passes.push_back(Pass::forward_backward);
  }
  for (Pass pass : passes) {
    TimingStats st;
    if (auto samples = inst.external_samples_ms(static_cast<int>(pass))) {
      st.samples_ms = *samples;
      st.summarize();
      // Timed by the backend itself (CUDA events in the peer's worker) under
      // the policy configure() passed; its own stop reason is in extra.
      st.stop_reason = "external";
      st.timer = "external";
      st.cold = opts.policy.cold;
      st.warmup = opts.policy.warmup;
    } else {
      st = time_pass(backend, inst, pass, opts.policy);
    }
    row.timing.set(pass, std::move(st));
  }
}

/// The verdict of a row's outputs: the check against the case's reference
/// (computed or shared, CaseGold), or with --check off the non-finite counts.
struct CheckOutcome {
  CheckFigures figures;
  RowStatus status = RowStatus::unchecked;
  std::string message;
  double ms = 0;  ///< host time of the whole check, obtaining the reference included
  double decode_ms = 0;  ///< of which turning the downloaded outputs into float64 (download_outputs)
};

/// Everything a row's check needs, owned, so that it can outlive the unit that
/// made it (--check-overlap rows: the check goes on while the next row runs).
struct CheckJob {
  Problem p;
  RuleConstants rule;
  CheckMode mode = CheckMode::automatic;
  bool grads = true;
  std::string backend;                     ///< the backend's name (test hooks)
  std::shared_ptr<UnitCache> cache;        ///< the case's inputs and reference
  /// The row's outputs, downloaded; called once, by the check (BackendInstance::download_outputs).
  std::function<AttentionOutputs()> outputs;
};

/// Test hooks of the check, only with ATTNBENCH_TEST_BACKENDS=1 (as the test
/// backends, backends/testing/): ATTNBENCH_TEST_CHECK_DELAY_MS=N sleeps N ms in
/// every check (a check of known length); ATTNBENCH_TEST_CHECK_CRASH=NAME raises
/// SIGSEGV in the check of backend NAME's rows (a check that dies after its row
/// was timed); ATTNBENCH_TEST_EVENT_LOG=FILE appends "check-start|check-end
/// S<seq_q>|NAME NANOSECONDS" (CLOCK_MONOTONIC), as test-fake-gpu logs its timing,
/// and the case's prefetch "prefetch-start|prefetch-end S<seq_q>|prefetch NANOSECONDS".
bool test_hooks_on() {
  static const bool on = [] {
    const char* v = std::getenv("ATTNBENCH_TEST_BACKENDS");
    return v && std::string(v) == "1";
  }();
  return on;
}

/// Appends "EVENT S<seq_q>|WHO NANOSECONDS" to ATTNBENCH_TEST_EVENT_LOG (test hooks only).
void test_event(const char* event, const Problem& p, const std::string& who) {
  if (!test_hooks_on()) return;
  if (const char* log = std::getenv("ATTNBENCH_TEST_EVENT_LOG"); log && *log) {
    const long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    if (std::FILE* f = std::fopen(log, "a")) {
      std::fprintf(f, "%s S%lld|%s %lld\n", event, static_cast<long long>(p.seq_q), who.c_str(), ns);
      std::fclose(f);
    }
  }
}

void test_check_hook(const CheckJob& job, const char* event) {
  if (!test_hooks_on()) return;
  test_event(event, job.p, job.backend);
  if (std::string(event) != "check-start") return;
  if (const char* d = std::getenv("ATTNBENCH_TEST_CHECK_DELAY_MS"))
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(d)));
  if (const char* c = std::getenv("ATTNBENCH_TEST_CHECK_CRASH"); c && job.backend == c) std::raise(SIGSEGV);
}

CheckOutcome check_unit(const CheckJob& job) {
  const auto t0 = Clock::now();
  test_check_hook(job, "check-start");
  CheckOutcome out;
  const AttentionOutputs got = job.outputs();
  out.decode_ms = ms_since(t0);
  if (job.mode != CheckMode::off) {
    GoldProvenance gold_how;
    const GoldCache& gold = job.cache->get_gold(job.p, job.mode, job.grads, &gold_how);
    CheckResult cr = check_outputs(job.p, got, gold.gold, gold.lp, job.rule, gold.plan.slices);
    out.figures = cr.to_json().get<CheckFigures>();
    out.figures.plan = gold.plan.description;
    out.figures.reference_ms = gold.ms;
    out.figures.gold_source = gold_how.source;
    out.figures.gold_ms = gold_how.ms;
    out.status = cr.pass ? RowStatus::pass : RowStatus::fail;
    if (!cr.pass) out.message = cr.failure_detail;  // convention vs wrong numbers (check.hpp)
  } else {
    out.figures.mode = "off";
    out.figures.scope = "nothing checked (--check off)";
    out.figures.nonfinite = count_nonfinite(got).get<std::map<std::string, int64_t>>();
    out.status = RowStatus::unchecked;  // never an unearned pass
  }
  out.ms = ms_since(t0);
  test_check_hook(job, "check-end");
  return out;
}

/// Whether a unit's host-side check (and, for the case's first unit, the float64
/// reference) runs on a worker thread while the unit is timed: GPU backends with
/// a check and timing, unless --check-overlap off. CPU backends never (their
/// timing shares the host cores, and the reference runs on the same pool).
bool overlap_check(const Backend& backend, const RunOptions& opts) {
  return opts.check_overlap != RunOptions::CheckOverlap::off && opts.timing && opts.check != CheckMode::off &&
         backend.device() == Device::cuda;
}

/// Whether `backend`'s rows may run while earlier rows' checks go on
/// (--check-overlap rows): GPU backends whose samples leave host launch latency
/// out (samples_exclude_host_latency: the stream hold, or --timer graph; the
/// PyTorch peers' worker holds its own stream), so host load cannot reach their
/// numbers. Before any other row every pending check is joined.
bool may_run_beside_checks(const Backend& backend, const RunOptions& opts) {
  return backend.device() == Device::cuda &&
         backend.samples_exclude_host_latency(opts.policy.hold_stream,
                                              opts.policy.timer == TimingPolicy::Timer::graph);
}

/// The row's status, reason or message from the exception `e` of its unit:
/// unsupported, timeout, crashed (a device fault), oom (out of memory,
/// std::bad_alloc) or error.
void row_from_exception(ReportRow& row, std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
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
  } catch (const std::bad_alloc& e) {
    row.status = RowStatus::oom;
    row.message = std::string("host out of memory (std::bad_alloc: ") + e.what() + ")";
  } catch (const std::exception& e) {
    row.status = is_oom(e) ? RowStatus::oom : is_device_fault(e) ? RowStatus::crashed : RowStatus::error;
    row.message = (row.status == RowStatus::crashed ? "device fault: " : "") + std::string(e.what());
  } catch (...) {
    row.status = RowStatus::error;
    row.message = "unknown exception";
  }
}

/// A check running on a worker thread (std::async), and when the row's timing ended.
struct PendingCheck {
  std::future<CheckOutcome> result;
  Clock::time_point timed_at;
};

/// Join `pending` into `row`: the check's figures, status and message, or the
/// status its exception gives (row_from_exception); extra.check_overlap gets
/// mode, check_ms and wait_ms (how long the runner waited at the join). Never throws.
void join_check(ReportRow& row, PendingCheck& pending, RunOptions::CheckOverlap mode) {
  const auto t0 = Clock::now();
  nlohmann::json co = {{"mode", to_string(mode)}};
  if (mode == RunOptions::CheckOverlap::rows) co["beside"] = nlohmann::json::array();  // the runner's pipeline fills it
  try {
    CheckOutcome checked = pending.result.get();
    co["check_ms"] = checked.ms;
    co["decode_ms"] = checked.decode_ms;
    row.check = std::move(checked.figures);
    row.status = checked.status;
    row.message = std::move(checked.message);
  } catch (...) {
    row_from_exception(row, std::current_exception());
    row.message = "the check of the row's outputs failed: " + row.message;
  }
  co["wait_ms"] = ms_since(t0);
  co["pending_ms"] = ms_since(pending.timed_at);  // from the end of the row's timing to its check's end
  if (!row.extra.is_object()) row.extra = nlohmann::json::object();
  row.extra["check_overlap"] = co;
}

/// The outputs, determinism and preparation figures of one unit: prepare,
/// forward (+ backward), download_outputs, and with opts.determinism the second
/// run compared bitwise. Returns the instance and the first outputs, downloaded
/// (their float64 form comes when the returned function is called: in the check).
std::pair<std::unique_ptr<BackendInstance>, std::function<AttentionOutputs()>> run_passes(
    const Problem& p, Backend& backend, const RunOptions& opts, UnitCache& cache, int64_t useful_pairs,
    ReportRow& row) {
  GoldProvenance inputs_how;
  const ProblemData& inputs = cache.get_inputs(p, &inputs_how);
  row.extra["inputs"] = {{"source", inputs_how.source}, {"ms", inputs_how.ms}};
  const auto t0 = Clock::now();
  auto inst = backend.prepare(p, inputs);
  row.extra["prepare_ms"] = ms_since(t0);
  // An isolated unit that will load the reference needs its inputs no more: the
  // outputs below reuse their memory (the backend holds its own copy now).
  if (cache.single_unit && cache.release_inputs(p, opts.check, opts.backward)) row.extra["inputs"]["released"] = true;
  row.work = count_work(p, useful_pairs, inst->executed_pairs());
  const auto t1 = Clock::now();
  inst->poison_outputs();
  inst->forward();
  if (opts.backward) inst->backward();
  inst->synchronize();
  row.extra["passes_ms"] = ms_since(t1);
  const std::optional<bool> external = opts.determinism ? inst->external_deterministic() : std::nullopt;
  const auto t_digest = Clock::now();
  const std::optional<uint64_t> first = opts.determinism && !external ? inst->outputs_digest(opts.backward)
                                                                      : std::nullopt;
  const double digest_ms = ms_since(t_digest);
  const auto t2 = Clock::now();
  std::function<AttentionOutputs()> got = inst->download_outputs(opts.backward);
  row.extra["read_outputs_ms"] = ms_since(t2);
  if (opts.determinism) {  // before the check, which converts the downloaded outputs on the passes pool
    const auto t3 = Clock::now();
    if (external) {  // the peer ran twice itself
      row.extra["deterministic"] = *external;
      row.extra["determinism_by"] = "the backend's own second run";
    } else {
      inst->poison_outputs();
      inst->forward();
      if (opts.backward) inst->backward();
      inst->synchronize();
      if (first) {
        row.extra["deterministic"] = inst->outputs_digest(opts.backward) == first;
        row.extra["determinism_by"] = "device digest of both runs' outputs (device::digest)";
      } else {
        auto first_outputs = std::make_shared<AttentionOutputs>(got());
        row.extra["deterministic"] = bitwise_equal(*first_outputs, inst->read_outputs(opts.backward));
        row.extra["determinism_by"] = "both runs' outputs read back and compared bitwise";
        got = [first_outputs] { return std::move(*first_outputs); };
      }
    }
    row.extra["expected_deterministic"] = backend.deterministic();
    row.extra["determinism_ms"] = ms_since(t3) + digest_ms;
  }
  return {std::move(inst), std::move(got)};
}

/// prepare, run, determinism, check, timing and trace of one available backend
/// that supports the case, in this process. The check overlaps the timing when
/// overlap_check(); with --check-overlap rows and `defer` given it is left
/// running and handed to *defer (the instance, and its device memory, are gone
/// when run_unit returns; join_check completes the row), else it is joined
/// before run_unit returns (join_check). A row checked before its timing records
/// extra.check_overlap {mode "off", check_ms}. Never throws: an exception becomes
/// the row's status (unsupported, timeout, crashed, oom, error) and message.
void run_unit(const Problem& p, Backend& backend, const RunOptions& opts, const std::shared_ptr<UnitCache>& cache,
              int64_t useful_pairs, ReportRow& row, PendingCheck* defer = nullptr) {
  try {
    auto [inst, got] = run_passes(p, backend, opts, *cache, useful_pairs, row);
    CheckJob job{p, backend.rule(), opts.check, opts.backward, backend.name(), cache, std::move(got)};
    const bool overlap = overlap_check(backend, opts);
    PendingCheck pending;  // its future is joined by its destructor if the timing throws
    if (overlap) {
      pending.result = std::async(std::launch::async, [job] { return check_unit(job); });
    } else {
      CheckOutcome checked = check_unit(job);
      row.check = std::move(checked.figures);
      row.status = checked.status;
      row.message = std::move(checked.message);
      if (opts.check != CheckMode::off)
        row.extra["check_overlap"] = {{"mode", "off"}, {"check_ms", checked.ms}, {"decode_ms", checked.decode_ms}};
    }
    job.outputs = nullptr;  // the outputs live as long as the check needs them
    if (opts.timing) {
      const auto t0 = Clock::now();
      time_unit(backend, *inst, opts, row);
      row.extra["timing_ms"] = ms_since(t0);
    }
    if (opts.kernel_trace && backend.device() == Device::cuda)
      row.extra["kernel_trace"] = trace_passes(*inst, opts.backward);
    if (auto ex = inst->extra(); !ex.is_null()) row.extra["backend"] = ex;
    row.extra["setup_ms"] = inst->setup_ms();
    MemoryFigures mem;
    mem.allocated_bytes = static_cast<int64_t>(inst->allocated_bytes());
    mem.workspace_bytes = static_cast<int64_t>(backend.workspace_bytes(p));
    row.memory = mem;
    pending.timed_at = Clock::now();
    if (overlap && defer && opts.check_overlap == RunOptions::CheckOverlap::rows) {
      inst.reset();  // the device memory goes before the next row runs
      *defer = std::move(pending);
    } else if (overlap) {
      join_check(row, pending, RunOptions::CheckOverlap::same_row);
    }
  } catch (...) {
    row_from_exception(row, std::current_exception());
  }
}

// ------------------------------------------------------------------ isolation

nlohmann::json options_json(const RunOptions& o) {
  return {{"check", to_string(o.check)},  {"backward", o.backward},         {"timing", o.timing},
          {"determinism", o.determinism}, {"kernel_trace", o.kernel_trace}, {"device", o.device},
          {"policy", o.policy.to_json()}, {"check_overlap", to_string(o.check_overlap)},
          {"pending_checks", o.pending_checks}};
}

RunOptions options_from_json(const nlohmann::json& j) {
  RunOptions o;
  o.check = parse_check_mode(j.at("check").get<std::string>());
  o.backward = j.at("backward").get<bool>();
  o.timing = j.at("timing").get<bool>();
  o.determinism = j.at("determinism").get<bool>();
  o.kernel_trace = j.at("kernel_trace").get<bool>();
  o.device = j.at("device").get<int>();
  o.policy = TimingPolicy::from_json(j.at("policy"));
  o.check_overlap = parse_check_overlap(j.value("check_overlap", to_string(o.check_overlap)));
  o.pending_checks = j.value("pending_checks", o.pending_checks);
  return o;
}

/// One isolated unit: its child process and transient files (unit-N.*).
struct IsolatedUnit {
  std::unique_ptr<ChildProcess> child;
  std::string req, res, out, err;
  std::string timed;  ///< where the child writes its row once timed ("" = it does not: joined in the child)
  Clock::time_point t0;
};

/// Start `attnbench __unit REQUEST RESULT` for (c, skeleton) in `dir` as unit
/// `unit_no`. With `defer_check` the child writes its row without the check to
/// unit-N.timed.json once it is timed (device memory released) and goes on
/// checking (run_unit_main). Throws std::runtime_error when it cannot be started.
std::shared_ptr<IsolatedUnit> start_isolated(const Case& c, const ReportRow& skeleton, const RunOptions& opts,
                                             const std::filesystem::path& dir, int64_t unit_no, const GoldStore& gold,
                                             bool check_support, bool defer_check) {
  auto u = std::make_shared<IsolatedUnit>();
  const std::string base = (dir / ("unit-" + std::to_string(unit_no))).string();
  u->req = base + ".request.json";
  u->res = base + ".row.json";
  u->out = base + ".stdout";
  u->err = base + ".stderr";
  if (defer_check) u->timed = base + ".timed.json";
  for (const auto& f : {u->res, u->timed})
    if (!f.empty()) std::filesystem::remove(f);
  write_json_atomic(u->req, {{"problem", to_json(c.problem, false)},
                             {"row", skeleton.to_json()},
                             {"options", options_json(opts)},
                             {"check_support", check_support},
                             {"gold_dir", gold.dir().string()},
                             {"timed_path", u->timed},
                             {"spawned_ns", steady_ns()}},
                    /*sync=*/false);  // transient: read back by the child at once
  const std::string exe = opts.executable.empty() ? self_executable() : opts.executable;
  u->t0 = Clock::now();
  u->child = std::make_unique<ChildProcess>(std::vector<std::string>{exe, "__unit", u->req, u->res},
                                            std::vector<std::pair<std::string, std::string>>{}, u->out, u->err);
  return u;
}

/// Wait for the unit's child to end (its status), or with `until_timed` until
/// it has written its timed row (std::nullopt: it goes on checking). Kills its
/// group past --case-timeout, counted from its start (timed_out), or when this
/// run is asked to stop (stopped).
std::optional<ChildStatus> wait_isolated(IsolatedUnit& u, const RunOptions& opts, bool until_timed) {
  const double limit_ms = opts.case_timeout_s * 1000.0;
  for (;;) {
    int ms = until_timed ? 10 : 200;  // the timed file is polled: a few stat() calls per row
    if (limit_ms > 0) {
      const double left = limit_ms - ms_since(u.t0);
      if (left <= 0) {
        ChildStatus s = u.child->kill_group(2.0);
        s.timed_out = true;
        return s;
      }
      ms = std::min(ms, static_cast<int>(left) + 1);
    }
    if (auto s = u.child->wait_for(ms)) return *s;
    if (stop_signal() != 0) {
      ChildStatus s = u.child->kill_group(2.0);
      s.stopped = true;
      return s;
    }
    if (until_timed && std::filesystem::exists(u.timed)) return std::nullopt;
  }
}

/// The child's row in `path` if it is the row of `row`'s (case, variant); copied into `row`.
bool take_child_row(const std::string& path, ReportRow& row) {
  if (!std::filesystem::exists(path)) return false;
  try {
    const ReportRow child = ReportRow::from_json(jsonu::load_file(path));
    if (child.case_id != row.case_id || child.backend != row.backend || child.variant != row.variant) return false;
    row.status = child.status;
    row.reason = child.reason;
    row.message = child.message;
    if (child.work) row.work = child.work;
    row.check = child.check;
    row.timing = child.timing;
    row.memory = child.memory;
    row.extra = child.extra;
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

/// The row of an ended isolated unit into `row` (its skeleton, clocks
/// included): the child's row, or a crashed / timeout / error row made from how
/// the child ended (`st`); a child that died after its timed row keeps that
/// row's timing, its status saying how the check ended. Removes the unit's
/// files. False (and no row) when this run was asked to stop while it ran.
bool finish_isolated(IsolatedUnit& u, const ChildStatus& st, const RunOptions& opts, ReportRow& row) {
  nlohmann::json iso = {{"child_seconds", st.seconds}};
  const bool have_row = take_child_row(u.res, row);
  const bool timed = !have_row && !u.timed.empty() && take_child_row(u.timed, row);
  if (have_row && row.extra.is_object() && row.extra.contains("isolation")) {  // the child's own clocks
    const nlohmann::json& child = row.extra["isolation"];
    double accounted = 0;
    for (const char* k : {"startup_ms", "unit_ms"})
      if (child.contains(k) && child[k].is_number()) {
        iso[k] = child[k];
        accounted += child[k].get<double>();
      }
    if (child.contains("unit_ms")) iso["exit_ms"] = std::max(0.0, st.seconds * 1000.0 - accounted);
  }
  const std::string tail = tail_of_file(u.err, 20, 4000);
  if (!have_row) {
    if (st.stopped) return false;  // left to --resume, as an unfinished unit is
    row.status = st.timed_out ? RowStatus::timeout : (!st.exited ? RowStatus::crashed : RowStatus::error);
    row.message = "isolated child " + describe(st);
    if (st.timed_out) row.message += " (--case-timeout " + jsonu::show(nlohmann::json(opts.case_timeout_s)) + " s)";
    if (st.exited) row.message += " without writing its row";
    if (timed) row.message += " (after its row was timed, while checking its outputs)";
    if (!tail.empty()) row.message += "; last lines of its stderr:\n" + tail;
    if (!st.exited && !st.timed_out) iso["signal"] = signal_name(st.signal);
    if (!st.exited && !st.timed_out && st.signal == SIGKILL)
      row.message += " (SIGKILL from outside: often the kernel's out-of-memory killer)";
    if (st.exited) iso["exit_code"] = st.exit_code;
    iso["stderr_tail"] = tail;
  } else if (!st.exited || st.exit_code != 0) {
    iso["after_row"] = describe(st);  // the row was written, then the child died
  }
  if (!row.extra.is_object()) row.extra = nlohmann::json::object();
  row.extra["isolation"] = iso;
  for (const auto& f : {u.req, u.res, u.out, u.err, u.timed})
    if (!f.empty()) std::filesystem::remove(f);
  return true;
}

/// An isolated row that loaded the case's inputs or reference which this process
/// prefetched (start_gold_prefetch) carries their cost, as an in-process row
/// would (CaseGold::get_gold): its source becomes that of the prefetch
/// (`computed`, or `shared` when the prefetch loaded them) and the prefetch's ms
/// are added to its own, the first such row of the case only.
void charge_prefetch(ReportRow& row, UnitCache& cache) {
  if (row.check && row.check->gold_source == "shared")
    if (const auto how = cache.claim_prefetched_gold()) {
      row.check->gold_source = how->source;
      row.check->gold_ms = row.check->gold_ms.value_or(0.0) + how->ms;
    }
  if (row.extra.is_object() && row.extra.contains("inputs") && row.extra["inputs"].value("source", "") == "shared")
    if (const auto how = cache.claim_prefetched_inputs()) {
      row.extra["inputs"]["source"] = how->source;
      row.extra["inputs"]["ms"] = row.extra["inputs"].value("ms", 0.0) + how->ms;
    }
}

/// Run one unit in a child process (`attnbench __unit REQUEST RESULT`): its row,
/// or a crashed / timeout / error row made here from how the child ended. Returns
/// false (and no row) when this run was asked to stop while the child ran.
bool run_isolated(const Case& c, const ReportRow& skeleton, const RunOptions& opts, const std::filesystem::path& dir,
                  int64_t unit_no, const GoldStore& gold, ReportRow& row, bool check_support = false) {
  const auto u = start_isolated(c, skeleton, opts, dir, unit_no, gold, check_support, false);
  const ChildStatus st = *wait_isolated(*u, opts, false);
  u->child.reset();  // reaped
  row = skeleton;
  return finish_isolated(*u, st, opts, row);
}

/// Whether (backend, this run) units go to a child process.
bool isolate_backend(const Backend& b, const RunOptions& opts, size_t cases) {
  switch (opts.isolate) {
    case RunOptions::Isolate::on: return true;
    case RunOptions::Isolate::off: return false;
    case RunOptions::Isolate::automatic: break;
  }
  if (opts.case_timeout_s > 0) return true;
  return b.device() == Device::cuda && !b.runs_out_of_process() && cases > 1;
}

/// Whether the units of a case share inputs and reference through files
/// (OUT/.gold/, harness/run/gold_cache.hpp): when more than one backend runs and
/// some run in a child process (in one process they share them in memory).
bool share_gold_files(const std::vector<std::unique_ptr<Backend>>& backends, const RunOptions& opts, size_t cases) {
  if (backends.size() < 2) return false;
  for (const auto& b : backends)
    if (isolate_backend(*b, opts, cases) || (b->isolated_only() && opts.isolate != RunOptions::Isolate::off))
      return true;
  return false;
}

/// Create the output directory; failures are bad input (exit 2), naming it.
void make_out_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw InputError(dir, "", "cannot create the output directory: " + (ec ? ec.message() : "not a directory"));
}

/// One (case, backend) row: `unsupported` when the backend is unavailable or
/// refuses the problem, else the unit in this process (sharing `cache` with the
/// case's other backends) or in a child (`isolate`; unit files in `unit_dir`,
/// numbered by `unit_no`, which is advanced). Foreign code (isolated_only(), a
/// plugin) runs available() and supports() in the child too, under the isolation
/// and --case-timeout, unless --isolate off; its "not available" answer is cached
/// in `unavailable` (backend -> reason) for the rest of the run. `thumbnail`: the
/// case's BlockMask thumbnail for the row. GPU clocks around it. With `defer`
/// (--check-overlap rows) a row whose check is still running when its timing is
/// done (on a worker thread here, or in its finished child) returns at once with
/// *defer set: calling it completes the row (RowPipeline::Finish). False when
/// this process was asked to stop while the child ran (no row).
bool unit_row(const Case& c, Backend& backend, const RunOptions& opts, bool isolate,
              const std::filesystem::path& unit_dir, int64_t& unit_no, const std::shared_ptr<UnitCache>& cache,
              int64_t useful_pairs, const nlohmann::json& thumbnail, std::map<std::string, std::string>& unavailable,
              ReportRow& row, RowPipeline::Finish* defer = nullptr) {
  row = skeleton_row(c, backend, useful_pairs, thumbnail);
  const bool on_gpu = backend.device() == Device::cuda;
  const bool deferrable = defer && opts.check_overlap == RunOptions::CheckOverlap::rows && overlap_check(backend, opts);
  if (on_gpu) row.clocks["start"] = env::sample_clocks(opts.device).to_json();
  // In a child; with `deferrable`, returning once the child has written its
  // timed row, *defer then waiting for the child's check. False: stopped.
  auto isolated = [&](bool check_support) {
    make_out_dir(unit_dir.string());
    if (!deferrable) {
      const ReportRow skeleton = row;
      const bool have_row = run_isolated(c, skeleton, opts, unit_dir, unit_no++, cache->store, row, check_support);
      if (have_row) charge_prefetch(row, *cache);
      return have_row;
    }
    const auto u = start_isolated(c, row, opts, unit_dir, unit_no++, cache->store, check_support, true);
    if (std::optional<ChildStatus> st = wait_isolated(*u, opts, true)) {  // ended before any timed row
      u->child.reset();
      const bool have_row = finish_isolated(*u, *st, opts, row);
      if (have_row) charge_prefetch(row, *cache);
      return have_row;
    }
    *defer = [u, opts, cache](ReportRow& r) {
      const auto t0 = Clock::now();
      const ChildStatus st = *wait_isolated(*u, opts, false);
      u->child.reset();
      const bool have_row = finish_isolated(*u, st, opts, r);
      if (have_row) {
        r.extra["check_overlap"]["runner_wait_ms"] = ms_since(t0);
        charge_prefetch(r, *cache);
      }
      return have_row;
    };
    return true;
  };
  std::string why;
  if (backend.isolated_only() && opts.isolate != RunOptions::Isolate::off) {
    if (auto it = unavailable.find(backend.name()); it != unavailable.end()) {
      row.status = RowStatus::unsupported;
      row.reason = it->second;
    } else {
      if (!isolated(true)) return false;
      if (row.status == RowStatus::unsupported && row.reason.rfind(kNotAvailable, 0) == 0)
        unavailable[backend.name()] = row.reason;
    }
  } else if (!backend.available(&why)) {
    row.status = RowStatus::unsupported;
    row.reason = kNotAvailable + why;
  } else if (Support s = backend.supports(c.problem); !s) {
    row.status = RowStatus::unsupported;
    row.reason = s.reason;
  } else if (isolate) {
    if (!isolated(false)) return false;
  } else if (deferrable) {
    auto pending = std::make_shared<PendingCheck>();
    run_unit(c.problem, backend, opts, cache, useful_pairs, row, pending.get());
    if (pending->result.valid())
      *defer = [pending](ReportRow& r) {
        join_check(r, *pending, RunOptions::CheckOverlap::rows);
        return true;
      };
  } else {
    run_unit(c.problem, backend, opts, cache, useful_pairs, row);
  }
  if (on_gpu) row.clocks["end"] = env::sample_clocks(opts.device).to_json();
  return true;
}

// ------------------------------------------------------------------ journal identity

/// FNV-1a 64 of every case's id and compact problem, as 16 hex digits.
std::string scenario_fingerprint(const Scenario& s) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::string& t) {
    for (unsigned char ch : t) h = (h ^ ch) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  for (const auto& c : s.cases) {
    mix(c.id);
    mix(to_json(c.problem, true).dump());
  }
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

/// `file` as an absolute, normalised path (symlinks resolved where they exist), so
/// that `run scenarios/x.json` and `run /abs/scenarios/x.json` are the same run for
/// --resume; unchanged when it is empty or cannot be resolved.
std::string canonical_file(const std::string& file) {
  if (file.empty()) return file;
  std::error_code ec;
  // absolute, since the part of the path that exists is made canonical
  const std::filesystem::path c = std::filesystem::weakly_canonical(file, ec);
  return ec || c.empty() ? file : c.string();
}

/// What --resume requires to be equal: scenario, seed and every option that
/// changes a row.
nlohmann::json run_identity(const Scenario& s, const RunOptions& o, const std::vector<std::string>& names) {
  return {{"scenario", s.name},
          {"scenario_file", canonical_file(s.file)},
          {"cases", s.cases.size()},
          {"scenario_fingerprint", scenario_fingerprint(s)},
          {"seed", o.seed ? nlohmann::json(*o.seed) : nlohmann::json(nullptr)},
          {"backends", names},
          {"check", to_string(o.check)},
          {"backward", o.backward},
          {"timing", o.timing},
          {"determinism", o.determinism},
          {"kernel_trace", o.kernel_trace},
          {"measurement", o.policy.to_json()},
          {"shard", std::to_string(o.shard_index) + "/" + std::to_string(o.shard_count)},
          {"cases_filter", o.case_filter},
          {"device", o.device}};
}

void require_same_identity(const nlohmann::json& was, const nlohmann::json& now, const std::string& journal,
                           const std::set<std::string>& ignore = {}) {
  std::string diff;
  for (const auto& [k, v] : now.items()) {
    if (ignore.count(k)) continue;
    nlohmann::json old = was.contains(k) ? was[k] : nlohmann::json(nullptr);
    // journals written before the path was normalised hold it as typed
    if (k == "scenario_file" && old.is_string()) old = canonical_file(old.get<std::string>());
    // journals written before a measurement field existed ran with its default
    if (k == "measurement" && old.is_object()) {
      const nlohmann::json defaults = TimingPolicy{}.to_json();
      for (const auto& [field, dflt] : defaults.items())
        if (!old.contains(field)) old[field] = dflt;
    }
    if (old != v) diff += (diff.empty() ? "" : "; ") + k + " was " + old.dump() + ", now " + v.dump();
  }
  if (!diff.empty())
    throw InputError(journal, "/identity",
                     "--resume continues only the same run (scenario, seed and options), but " + diff +
                         " (run without --resume to start afresh)");
}

/// Record a finished row: first the journal (fsync'd), then the report, the
/// summary (fully-masked-row-only failures counted apart) and the terminal line.
/// Derives the row's throughput and roofline figures against the run's ceilings first.
/// `shown_case`: the case whose "[i/n] CASE" line the terminal shows last; a row
/// of another case (written after the next case started: its check was pending)
/// names its case on its line.
void finish_row(ReportRow& row, JournalWriter& journal, ReportWriter& writer, RunSummary& summary,
                const std::string& shown_case = "") {
  row.derive(ceiling_rates(writer.header().value("ceilings", nlohmann::json())));
  const nlohmann::json rj = row.to_json();
  journal.append({{"row", rj}});
  writer.add_row_json(rj);
  summary.add(to_string(row.status));
  if (row.status == RowStatus::fail && row.check && row.check->failure_class == "fully_masked_rows")
    ++summary.fail_masked_rows_only;
  std::string text = !row.reason.empty() ? row.reason : row.message;
  if (const std::string note = determinism_note(rj); !note.empty()) text += (text.empty() ? "" : "; ") + note;
  if (!shown_case.empty() && row.case_id != shown_case) text = "(" + row.case_id + ") " + text;
  std::fprintf(stderr, "    %-8s %-11s %s\n", printable(row.variant.empty() ? row.backend : row.variant).c_str(),
               to_string(row.status),
               printable(text).c_str());
}

/// A case that gets no backend run: over the total-size budget (Case::invalid;
/// `problem` null, nothing allocated or counted), or whose shared parts could not
/// be built (build_case_shared). One row per backend not yet done, with `status`
/// and `message`, into `rows` (written after the rows pending before them).
void write_case_rows(const Case& c, const nlohmann::json& problem, RowStatus status, const std::string& message,
                     const std::vector<std::unique_ptr<Backend>>& backends, const std::unordered_set<std::string>& done,
                     RowPipeline& rows) {
  for (const auto& backend : backends) {
    if (done.count(c.id + "|" + backend->variant())) continue;
    ReportRow row;
    row.case_id = c.id;
    row.backend = backend->name();
    row.variant = backend->variant();
    row.options = backend->options_json();
    row.problem = problem;
    row.status = status;
    row.message = message;
    rows.push_ready(std::move(row));
  }
}

/// The run in progress, for the exit handler: code that calls exit() in the
/// middle of a run (a plugin's forward(), a library) would otherwise end it with
/// that code and a report that looks like a partial success. The handler marks
/// the journal and report "interrupted" with the reason and turns the exit code
/// into kExitUnexpectedExit.
struct ActiveRunState {
  JournalWriter* journal = nullptr;
  ReportWriter* writer = nullptr;
};
ActiveRunState g_active;

extern "C" void on_exit_during_run() {
  if (!g_active.journal) return;
  JournalWriter* journal = g_active.journal;
  ReportWriter* writer = g_active.writer;
  g_active = {};
  std::fprintf(stderr, "attnbench: error: the process exited in the middle of the run (exit() called by backend "
                       "or plugin code); the report is marked interrupted; `--resume` completes it\n");
  try {
    const nlohmann::json what = {{"signal", nullptr},
                                 {"reason", "the process exited in the middle of the run (exit() called by backend code)"},
                                 {"time", env::utc_now_iso8601()}};
    journal->append({{"interrupted", what}});
    writer->set_field("interrupted", what);
  } catch (...) {
  }
  std::fflush(nullptr);
  ::_exit(kExitUnexpectedExit);
}

/// Registers the run with the exit handler for its lifetime.
class ActiveRun {
 public:
  ActiveRun(JournalWriter& j, ReportWriter& w) {
    static const bool registered = std::atexit(on_exit_during_run) == 0;
    (void)registered;
    g_active = {&j, &w};
  }
  ~ActiveRun() { release(); }
  void release() { g_active = {}; }
};

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

RunOptions::Isolate parse_isolate(const std::string& s) {
  if (s == "on") return RunOptions::Isolate::on;
  if (s == "off") return RunOptions::Isolate::off;
  if (s == "auto") return RunOptions::Isolate::automatic;
  throw InputError("<command line>", "--isolate", "expected on, off or auto, got \"" + s + "\"");
}

int parse_pending_checks(const std::string& s) {
  if (s == "auto") return 0;
  int n = -1;
  size_t used = 0;
  try {
    n = std::stoi(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || n < 1 || n > 64)
    throw InputError("<command line>", "--pending-checks", "expected auto or 1 to 64 rows, got \"" + s + "\"");
  return n;
}

RunOptions::CheckOverlap parse_check_overlap(const std::string& s) {
  if (s == "rows") return RunOptions::CheckOverlap::rows;
  if (s == "same-row" || s == "same_row") return RunOptions::CheckOverlap::same_row;
  if (s == "off") return RunOptions::CheckOverlap::off;
  throw InputError("<command line>", "--check-overlap", "expected rows, same-row or off, got \"" + s + "\"");
}

const char* to_string(RunOptions::CheckOverlap m) {
  switch (m) {
    case RunOptions::CheckOverlap::rows: return "rows";
    case RunOptions::CheckOverlap::same_row: return "same_row";
    case RunOptions::CheckOverlap::off: return "off";
  }
  return "off";
}

void RunSummary::add(const std::string& status) {
  ++rows;
  const auto s = parse_row_status(status);
  switch (s.value_or(RowStatus::error)) {
    case RowStatus::pass: ++pass; break;
    case RowStatus::fail: ++fail; break;
    case RowStatus::unsupported: ++unsupported; break;
    case RowStatus::oom: ++oom; break;
    case RowStatus::timeout: ++timeout; break;
    case RowStatus::crashed: ++crashed; break;
    case RowStatus::unchecked: ++unchecked; break;
    default: ++error; break;
  }
}

int RunSummary::exit_code() const {
  if (interrupted_signal) return 128 + interrupted_signal;
  return (fail > 0 || error > 0 || timeout > 0 || crashed > 0 || missing > 0) ? 1 : 0;
}

std::string RunSummary::line() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%lld rows: %lld pass, %lld fail, %lld unsupported, %lld error, %lld oom, "
                "%lld timeout, %lld crashed", static_cast<long long>(rows), static_cast<long long>(pass),
                static_cast<long long>(fail), static_cast<long long>(unsupported), static_cast<long long>(error),
                static_cast<long long>(oom), static_cast<long long>(timeout), static_cast<long long>(crashed));
  std::string out = buf;
  if (fail_masked_rows_only > 0)
    out += " (" + std::to_string(fail_masked_rows_only) +
           " fail only on the fully-masked-row convention, numerics fine)";
  if (unchecked > 0) out += ", " + std::to_string(unchecked) + " unchecked (--check off: correctness unknown)";
  if (missing > 0) out += "; " + std::to_string(missing) + " (case, backend) rows MISSING: the run is incomplete";
  return out;
}

std::vector<size_t> selected_cases(const Scenario& scenario, const RunOptions& opts) {
  std::optional<std::regex> filter;
  if (!opts.case_filter.empty()) {
    try {
      filter.emplace(opts.case_filter);
    } catch (const std::regex_error& e) {
      throw InputError("<command line>", "--cases", "invalid regular expression \"" + opts.case_filter + "\": " + e.what());
    }
  }
  std::vector<size_t> out;
  for (size_t ci = 0; ci < scenario.cases.size(); ++ci) {
    if (static_cast<int>(ci % static_cast<size_t>(opts.shard_count)) != opts.shard_index) continue;
    if (filter && !std::regex_search(scenario.cases[ci].id, *filter)) continue;
    out.push_back(ci);
  }
  return out;
}

std::vector<std::string> validate_run(const Scenario& scenario, const RunOptions& opts) {
  // --backends, else the scenario's "backends", else every registered backend; each
  // entry a variant ("flex[block=64]"), resolved to its label before anything runs.
  const bool from_scenario = opts.backends.empty() && !scenario.backends.empty();
  const std::vector<std::string> names = BackendRegistry::resolve_variants(
      !opts.backends.empty() ? opts.backends : from_scenario ? scenario.backends : BackendRegistry::names(),
      from_scenario ? scenario.file : "<command line>", from_scenario ? "/backends" : "--backends");
  (void)selected_cases(scenario, opts);  // the --cases regex
  try {
    opts.policy.validate();
  } catch (const std::invalid_argument& e) {
    throw InputError("<command line>", "--max-seconds/--min-samples/--rel-stddev", e.what());
  }
  if (opts.pending_checks < 0 || opts.pending_checks > 64)
    throw InputError("<command line>", "--pending-checks",
                     "expected auto or 1 to 64 rows, got " + std::to_string(opts.pending_checks));
  if (opts.case_timeout_s < 0 || !std::isfinite(opts.case_timeout_s))
    throw InputError("<command line>", "--case-timeout", "expected seconds >= 0, got " + std::to_string(opts.case_timeout_s));
  if (opts.case_timeout_s > 0 && opts.isolate == RunOptions::Isolate::off)
    throw InputError("<command line>", "--case-timeout", "needs isolation (a unit in this process cannot be killed); drop --isolate off");
  return names;
}

namespace {

/// The case's inputs and float64 reference, obtained on a thread of their own
/// from the case's start (CaseGold::prefetch_gold; computed, or loaded when
/// another process published them), so that the reference runs beside the
/// first GPU rows' inputs, prepare, passes and read-back instead of after them:
/// with --check-overlap, on a large case the reference is most of the wall time
/// (issue 29). Started only when the check is on and some backend of the case
/// not yet done is a GPU backend that may run beside a check
/// (may_run_beside_checks), is available and supports the case: otherwise no
/// row would use it early. Returns the task (both futures invalid when not
/// started): the caller starts no isolated child before `inputs` is ready (it
/// would compute them again instead of loading them), and waits for `done`
/// before any row that may not run beside a check and before the case's shared
/// files are removed. Its exceptions stay in it: the rows' own units obtain the
/// inputs and reference again and report what fails.
struct GoldPrefetch {
  std::shared_future<void> inputs, done;
};
GoldPrefetch start_gold_prefetch(const Case& c, const std::vector<std::unique_ptr<Backend>>& backends,
                                 const std::unordered_set<std::string>& done, const RunOptions& opts,
                                 const std::shared_ptr<UnitCache>& cache) {
  if (opts.check == CheckMode::off || opts.check_overlap == RunOptions::CheckOverlap::off) return {};
  bool useful = false;
  for (const auto& b : backends) {
    std::string why;
    if (!done.count(c.id + "|" + b->variant()) && may_run_beside_checks(*b, opts) && !b->isolated_only() &&
        b->available(&why) && b->supports(c.problem)) {
      useful = true;
      break;
    }
  }
  if (!useful) return {};
  const Problem p = c.problem;
  const CheckMode mode = opts.check;
  const bool grads = opts.backward;
  auto inputs = std::make_shared<std::promise<void>>();
  GoldPrefetch task;
  task.inputs = inputs->get_future().share();
  task.done = std::async(std::launch::async, [cache, p, mode, grads, inputs] {
                test_event("prefetch-start", p, "prefetch");
                try {
                  cache->prefetch_inputs(p);
                  inputs->set_value();
                  cache->prefetch_gold(p, mode, grads);
                  test_event("prefetch-end", p, "prefetch");
                } catch (...) {  // the rows' units meet it again, each in its own row
                  try {
                    inputs->set_value();
                  } catch (const std::future_error&) {  // set already: the reference threw
                  }
                }
              }).share();
  return task;
}

/// The rows of case `c` (the k-th of the run's `n_cases`) for every backend not
/// in `done`, into `rows`: `error` / `oom` rows when its shared parts cannot be
/// built; else each unit as unit_row() runs it, every pending check joined
/// before a backend that may not run beside one (may_run_beside_checks), and an
/// ordered action that removes the case's shared gold (DIR/.gold/case-k, when
/// `share_files`) once its last row is written. Stops between rows when this
/// process was asked to stop.
void run_case(const Case& c, size_t k, const std::vector<std::unique_ptr<Backend>>& backends,
              const std::unordered_set<std::string>& done, const RunOptions& opts, size_t n_cases,
              const std::filesystem::path& dir, bool share_files, int64_t& unit_no,
              std::map<std::string, std::string>& unavailable, RowPipeline& rows) {
  const std::filesystem::path unit_dir = dir / ".units";
  const CaseShared shared = build_case_shared(c.problem);
  if (!shared.error.empty()) {
    write_case_rows(c, to_json(c.problem, true), shared.oom ? RowStatus::oom : RowStatus::error, shared.error,
                    backends, done, rows);
    return;
  }
  // One folder of shared files per case, removed once the case's last row is
  // written (its checks may still read it while the next case runs).
  const GoldStore gold_store = share_files ? GoldStore(dir / ".gold" / ("case-" + std::to_string(k))) : GoldStore();
  auto cache = std::make_shared<UnitCache>();
  cache->store = gold_store;
  if (opts.check_overlap == RunOptions::CheckOverlap::rows && opts.pending_checks == 0)
    rows.set_max_pending(static_cast<size_t>(auto_pending_checks(c.problem, opts.backward, host_available_bytes())));
  const GoldPrefetch prefetch = start_gold_prefetch(c, backends, done, opts, cache);
  for (auto& backend : backends) {
    if (stop_signal()) break;
    if (done.count(c.id + "|" + backend->variant())) continue;
    if (!may_run_beside_checks(*backend, opts)) {
      rows.drain();
      if (prefetch.done.valid()) prefetch.done.wait();  // nothing computes beside a CPU row or a peer
    }
    if (prefetch.inputs.valid()) prefetch.inputs.wait();  // a child loads them, never computes them again
    ReportRow row;
    RowPipeline::Finish finish;
    if (!unit_row(c, *backend, opts, isolate_backend(*backend, opts, n_cases), unit_dir, unit_no, cache,
                  shared.useful_pairs, shared.thumbnail, unavailable, row, &finish))
      break;  // stopped: left to --resume
    if (row.status != RowStatus::unsupported) rows.running(c.id + "|" + backend->variant());
    if (finish) rows.push_pending(std::move(row), std::move(finish));
    else rows.push_ready(std::move(row));
  }
  rows.push_action([gold_store, prefetched = prefetch.done] {  // the case is done: its shared inputs and reference go
    if (prefetched.valid()) prefetched.wait();
    gold_store.clear();
  });
}

/// Whether the journal at `path` has a complete first line (a kill while it was
/// created can leave it empty or torn). Throws InputError for a path that is not
/// a regular file (a FIFO would block the read forever).
bool journal_started(const std::string& path) {
  if (!is_regular_file_path(path)) throw InputError(path, "", "the journal is not a regular file (a FIFO, folder or device?)");
  std::ifstream in(path, std::ios::binary);
  std::string first;
  return static_cast<bool>(std::getline(in, first)) && !in.eof();
}

/// The rows a run starts from: the journal's when resuming (after checking its
/// identity; rows that do not belong to this run dropped, reported and cut from
/// the journal), else none. An empty journal, or one whose first line is torn,
/// starts afresh with a warning. Throws InputError when the journal cannot be resumed.
std::optional<JournalContents> resume_from(const std::string& journal, const Scenario& scenario,
                                           const RunOptions& opts, const std::vector<std::string>& names,
                                           const nlohmann::json& identity) {
  if (!opts.resume) return std::nullopt;
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(journal, ec))) {
    std::fprintf(stderr, "attnbench: --resume: no journal at %s; starting afresh\n", printable(journal).c_str());
    return std::nullopt;
  }
  if (!journal_started(journal)) {
    std::fprintf(stderr, "attnbench: warning: --resume: %s is empty or its first line is torn (killed while it was "
                         "created); starting afresh\n", printable(journal).c_str());
    return std::nullopt;
  }
  JournalContents j = read_journal(journal);
  require_same_identity(j.identity, identity, journal);
  if (j.dropped_partial) {
    std::fprintf(stderr, "attnbench: --resume: dropped a torn last line of %s (a row being written when it died)\n",
                 printable(journal).c_str());
    drop_torn_tail(journal, j);
  }
  const size_t before = j.rows.size();
  j.rows = rows_of_this_run(scenario, opts, names, j.rows, j.header, journal);
  if (j.rows.size() != before) rewrite_journal(journal, j);  // what is left to run is run again
  return j;
}

}  // namespace

nlohmann::json resume_identity(const Scenario& scenario, const RunOptions& opts, const std::vector<std::string>& names) {
  return run_identity(scenario, opts, names);
}

void check_resume_identity(const nlohmann::json& was, const nlohmann::json& now, const std::string& journal,
                           const std::set<std::string>& ignore) {
  require_same_identity(was, now, journal, ignore);
}

std::vector<nlohmann::json> rows_of_this_run(const Scenario& scenario, const RunOptions& opts,
                                             const std::vector<std::string>& names,
                                             const std::vector<nlohmann::json>& rows, const nlohmann::json& header,
                                             const std::string& file) {
  std::unordered_map<std::string, nlohmann::json> expected;  // case_id|backend -> the row's problem
  for (size_t ci : selected_cases(scenario, opts)) {
    Case c = scenario.cases[ci];
    if (opts.seed) c.problem.seed = *opts.seed;
    const nlohmann::json problem = c.invalid.empty() ? to_json(c.problem, true) : nlohmann::json(nullptr);
    for (const auto& b : names) expected[c.id + "|" + b] = problem;
  }
  std::vector<nlohmann::json> kept;
  std::vector<std::string> dropped;
  std::unordered_set<std::string> seen;
  for (const auto& r : rows) {
    const std::string key = row_key(r);
    const auto it = expected.find(key);
    std::string why;
    if (it == expected.end()) {
      why = "its (case, backend) is not in this run";
    } else if (!seen.insert(key).second) {
      why = "a second row for its (case, backend)";
    } else if (r.contains("problem") && !r["problem"].is_null() && r["problem"] != it->second) {
      why = "its problem differs from this run's case (another seed or scenario)";
    } else {
      nlohmann::json doc = header.is_object() ? header : nlohmann::json::object();
      doc["results"] = nlohmann::json::array({r});
      try {
        validate_report_schema(doc, file);
      } catch (const InputError& e) {
        if (e.json_path().rfind("/results/0", 0) == 0) why = std::string("not a valid report row: ") + e.what();
      }
    }
    if (why.empty()) {
      kept.push_back(r);
    } else {
      if (it != expected.end()) seen.erase(key);
      dropped.push_back(key + ": " + why);
    }
  }
  for (size_t i = 0; i < dropped.size() && i < 10; ++i)
    std::fprintf(stderr, "attnbench: warning: --resume: dropped a row of %s: %s\n", printable(file).c_str(),
                 printable(dropped[i]).c_str());
  if (dropped.size() > 10)
    std::fprintf(stderr, "attnbench: warning: --resume: ... and %zu more rows dropped\n", dropped.size() - 10);
  return kept;
}

RunSummary run_scenario(const Scenario& scenario, const RunOptions& opts) {
  // Everything that can be refused is refused before anything is touched.
  const std::vector<std::string> names = validate_run(scenario, opts);
  const std::vector<size_t> cases = selected_cases(scenario, opts);
  const nlohmann::json identity = run_identity(scenario, opts, names);
  make_out_dir(opts.out_dir);
  const std::filesystem::path dir(opts.out_dir);
  OutDirLock lock(opts.out_dir);
  const std::string journal_path = (dir / "journal.jsonl").string();
  std::optional<JournalContents> prev = resume_from(journal_path, scenario, opts, names, identity);

  std::vector<std::unique_ptr<Backend>> backends;
  for (const auto& n : names) {
    backends.push_back(BackendRegistry::create_variant(n));
    backends.back()->configure(opts.policy, opts.backward, opts.timing, opts.determinism, opts.device);
  }
  // Background work that saves the first case's time (the peers start their
  // worker and import PyTorch); joined before the backends go (declared after them).
  std::vector<std::future<void>> warm_ups;
  for (const auto& b : backends)
    warm_ups.push_back(std::async(std::launch::async, [bp = b.get()] {
      try {
        bp->warm_up();
      } catch (...) {  // best effort: the backend's first row does it instead
      }
    }));
#if defined(ATTNBENCH_HAVE_CUDA)
  if (device::cuda_device_available()) device::select_device(opts.device);
#endif
  nlohmann::json scenario_json = {{"name", scenario.name}, {"description", scenario.description},
                                   {"file", scenario.file}, {"cases", scenario.cases.size()}};
  nlohmann::json header = make_report_header(opts.command_line, scenario_json, opts.policy.to_json(),
                                             env::collect(opts.command_line, opts.device));
  header["shard"] = std::to_string(opts.shard_index) + "/" + std::to_string(opts.shard_count);
  header["backends"] = names;
  std::vector<nlohmann::json> prev_rows;
  std::unordered_set<std::string> done;
  RunSummary summary;
  if (prev) {
    header["started"] = prev->header.value("started", header["started"]);
    auto resumed = prev->resumed;
    resumed.push_back(env::utc_now_iso8601());
    header["resumed"] = resumed;
    for (const auto& r : prev->rows) {
      done.insert(row_key(r));
      summary.add(r.value("status", ""));
      ++summary.resumed;
    }
    prev_rows = prev->rows;
    std::fprintf(stderr, "attnbench: --resume: %zu rows from %s\n", prev_rows.size(), printable(journal_path).c_str());
  }
  std::unique_ptr<JournalWriter> journal_owner;
  if (std::error_code jec; std::filesystem::exists(std::filesystem::symlink_status(journal_path, jec)) &&
                           !std::filesystem::is_symlink(std::filesystem::symlink_status(journal_path, jec)) &&
                           !is_regular_file_path(journal_path))  // a FIFO would block the open forever
    throw InputError(journal_path, "", "the journal is not a regular file (a FIFO, folder or device?); remove it");
  try {
    journal_owner = std::make_unique<JournalWriter>(journal_path, !prev, identity, header);
  } catch (const std::runtime_error& e) {  // e.g. a planted symlink (O_NOFOLLOW): an output-path problem
    throw InputError(journal_path, "", e.what());
  }
  JournalWriter& journal = *journal_owner;
  if (prev) journal.append({{"resumed", header["resumed"].back()}, {"command", opts.command_line}});
  ReportWriter writer((dir / "report.json").string(), header, prev_rows);
  // Ceilings (docs/semantics.md section 8): a large bf16 GEMM and a device-to-device copy,
  // once per run, when a GPU backend will be timed.
#if defined(ATTNBENCH_HAVE_CUDA)
  bool any_gpu = false;
  for (const auto& b : backends) any_gpu = any_gpu || (b->device() == Device::cuda && b->available(nullptr));
  if (any_gpu && opts.timing) {
    const nlohmann::json ceilings = device::measure_ceilings().to_json();
    journal.append({{"field", "ceilings"}, {"value", ceilings}});
    writer.set_field("ceilings", ceilings);
  }
#endif
  const std::filesystem::path unit_dir = dir / ".units";
  summary.report_path = writer.path();
  const auto run_t0 = Clock::now();
  int64_t unit_no = 0;
  std::map<std::string, std::string> unavailable;  // isolated-only backend -> its "not available" reason
  ActiveRun active(journal, writer);
  const bool share_files = share_gold_files(backends, opts, cases.size());
  GoldStore(dir / ".gold").clear();  // what a killed run left
  // Rows are written in run order; with --check-overlap rows a GPU row's check
  // may still run while the next rows are timed (harness/run/row_pipeline.hpp).
  const size_t max_pending =
      opts.check_overlap == RunOptions::CheckOverlap::rows ? static_cast<size_t>(opts.pending_checks) : 0;
  std::string shown_case;  // the case of the last "[i/n] CASE" line
  RowPipeline rows(max_pending, [&](ReportRow& r) { finish_row(r, journal, writer, summary, shown_case); });
  for (size_t k = 0; k < cases.size() && !stop_signal(); ++k) {
    Case c = scenario.cases[cases[k]];
    if (opts.seed) c.problem.seed = *opts.seed;
    bool all_done = true;
    for (const auto& b : backends) all_done = all_done && done.count(c.id + "|" + b->variant());
    if (all_done) continue;
    std::fprintf(stderr, "[%zu/%zu] %s (%.0fs elapsed)\n", k + 1, cases.size(), printable(c.id).c_str(),
                 ms_since(run_t0) / 1000.0);
    shown_case = c.id;
    if (!c.invalid.empty()) {
      write_case_rows(c, nullptr, RowStatus::error, c.invalid, backends, done, rows);
      continue;
    }
    run_case(c, k, backends, done, opts, cases.size(), dir, share_files, unit_no, unavailable, rows);
  }
  rows.drain();
  GoldStore(dir / ".gold").clear();
  std::error_code ec;
  std::filesystem::remove(unit_dir, ec);  // only when empty
  if (const int sig = stop_signal()) {
    const nlohmann::json what = {{"signal", signal_name(sig)}, {"time", env::utc_now_iso8601()}};
    journal.append({{"interrupted", what}});
    writer.set_field("interrupted", what);
    summary.interrupted_signal = sig;
  } else {
    if (prev) {  // resumed: the rows in the order an uninterrupted run writes them
      std::map<std::string, size_t> case_pos, backend_pos;
      for (size_t i = 0; i < scenario.cases.size(); ++i) case_pos[scenario.cases[i].id] = i;
      for (size_t i = 0; i < names.size(); ++i) backend_pos[names[i]] = i;
      writer.sort_rows([&](const nlohmann::json& a, const nlohmann::json& b) {
        return std::make_pair(case_pos[a.value("case_id", "")], backend_pos[row_variant(a)]) <
               std::make_pair(case_pos[b.value("case_id", "")], backend_pos[row_variant(b)]);
      });
    }
    summary.missing = static_cast<int64_t>(cases.size() * backends.size()) - summary.rows;
    if (summary.missing > 0) {  // never a finished run (or exit 0) without every (case, backend) row
      const nlohmann::json what = {{"signal", nullptr},
                                   {"reason", std::to_string(summary.missing) + " (case, backend) rows missing"},
                                   {"time", env::utc_now_iso8601()}};
      journal.append({{"interrupted", what}});
      writer.set_field("interrupted", what);
    } else {
      writer.finish();
      journal.append({{"finished", writer.header()["finished"]}});
    }
  }
  active.release();
  return summary;
}

// ------------------------------------------------------------------ the isolated unit (child side)

int run_unit_main(const std::string& request_path, const std::string& result_path) {
  const auto t_main = Clock::now();
  follow_parent(SIGKILL);  // a unit never outlives its run
  const nlohmann::json req = jsonu::load_file(request_path);
  const Problem p = problem_from_json(req.at("problem"), request_path, "/problem");
  const RunOptions opts = options_from_json(req.at("options"));
  const ReportRow skeleton = ReportRow::from_json(req.at("row"));
  ReportRow row;
  row.case_id = skeleton.case_id;
  row.backend = skeleton.backend;
  row.variant = skeleton.variant;
  row.options = skeleton.options;
  row.problem = skeleton.problem;
  row.packing = skeleton.packing;
  row.work = skeleton.work;
  // The variant travels in the request (the row's resolved options), never in the environment.
  auto backend = BackendRegistry::create(VariantRequest{row.backend, option_pairs_from_json(skeleton.options)},
                                         request_path, "/row/options");
  if (!backend) throw InputError(request_path, "/row/backend", "unknown backend \"" + row.backend + "\"");
  backend->configure(opts.policy, opts.backward, opts.timing, opts.determinism, opts.device);
#if defined(ATTNBENCH_HAVE_CUDA)
  if (device::cuda_device_available()) device::select_device(opts.device);
#endif
  auto cache = std::make_shared<UnitCache>();
  cache->single_unit = true;
  if (const std::string gold_dir = req.value("gold_dir", ""); !gold_dir.empty()) cache->store = GoldStore(gold_dir);
  const int64_t useful_pairs = row.work ? row.work->useful_pairs : 0;
  // --check-overlap rows: the row without its check goes to timed_path once it
  // is timed (the instance, and its device memory, released), so that the parent
  // runs the next row while this process finishes the check.
  const std::string timed_path = req.value("timed_path", "");
  PendingCheck pending;
  std::string why;
  if (!req.value("check_support", false)) {
    run_unit(p, *backend, opts, cache, useful_pairs, row, timed_path.empty() ? nullptr : &pending);
  } else if (!backend->available(&why)) {  // the parent never runs foreign code (plugins) itself
    row.status = RowStatus::unsupported;
    row.reason = kNotAvailable + why;
  } else if (Support s = backend->supports(p); !s) {
    row.status = RowStatus::unsupported;
    row.reason = s.reason;
  } else {
    run_unit(p, *backend, opts, cache, useful_pairs, row, timed_path.empty() ? nullptr : &pending);
  }
  if (pending.result.valid()) {
    write_json_atomic(timed_path, row.to_json(), /*sync=*/false);
    join_check(row, pending, RunOptions::CheckOverlap::rows);
  }
  // Where the child's wall time went besides the row's own phases: its start
  // (spawn to this function) and this function; finish_isolated adds the rest.
  if (!row.extra.is_object()) row.extra = nlohmann::json::object();
  nlohmann::json& iso = row.extra["isolation"];
  if (const int64_t spawned = req.value("spawned_ns", int64_t{0}); spawned > 0)
    iso["startup_ms"] = static_cast<double>(steady_ns(t_main) - spawned) / 1e6;
  iso["unit_ms"] = ms_since(t_main);
  write_json_atomic(result_path, row.to_json(), /*sync=*/false);  // the parent journals it
  return kExitOk;
}

std::optional<ReportRow> run_case_unit(const Case& c, Backend& backend, const RunOptions& opts, bool isolate,
                                       const std::filesystem::path& unit_dir, int64_t& unit_no) {
  const auto cache = std::make_shared<UnitCache>();
  ReportRow row;
  const CaseShared shared = build_case_shared(c.problem);
  if (!shared.error.empty()) {  // the case cannot be built: its row says why, as run_scenario's do
    row = skeleton_row(c, backend, 0, nullptr);
    row.status = shared.oom ? RowStatus::oom : RowStatus::error;
    row.message = shared.error;
    return row;
  }
  std::map<std::string, std::string> unavailable;
  if (!unit_row(c, backend, opts, isolate, unit_dir, unit_no, cache, shared.useful_pairs, shared.thumbnail,
                unavailable, row))
    return std::nullopt;
  return row;
}

}  // namespace attnbench
