#include "harness/hunt/hunt.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include "harness/backend/backend.hpp"
#include "harness/device/environment.hpp"
#include "harness/hunt/shrink.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/model/printable.hpp"
#include "harness/model/version.hpp"
#include "harness/run/process.hpp"
#include "harness/run/progress.hpp"

namespace attnbench::hunt {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

nlohmann::json HuntCounts::to_json() const {
  return {{"generated", generated}, {"run", run}, {"unsupported", unsupported}, {"passed", passed}, {"failed", failed}};
}

nlohmann::json HuntFailure::to_json() const {
  return {{"backend", backend},
          {"class", failure_class},
          {"message", message},
          {"index", index},
          {"problem_file", problem_file},
          {"row_file", row_file},
          {"repro", repro},
          {"shrink", {{"steps", shrink_steps}, {"tried", shrink_tried}, {"complete", shrink_complete},
                      {"measure_before", shrink_measure(original)}, {"measure_after", shrink_measure(minimal)}}},
          {"minimal", attnbench::to_json(minimal, true)},
          {"original", attnbench::to_json(original, false)}};
}

int HuntSummary::exit_code() const {
  if (interrupted_signal) return 128 + interrupted_signal;
  return counts.failed > 0 ? 1 : 0;
}

std::string HuntSummary::line() const {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "%lld %s, %lld run, %lld unsupported, %lld passed, %lld failed",
                static_cast<long long>(counts.generated), replay ? "problems" : "generated", static_cast<long long>(counts.run),
                static_cast<long long>(counts.unsupported), static_cast<long long>(counts.passed),
                static_cast<long long>(counts.failed));
  return buf;
}

std::string failure_class(const ReportRow& row) {
  switch (row.status) {
    case RowStatus::crashed: return "crashed";
    case RowStatus::timeout: return "timeout";
    case RowStatus::error: return "error";
    case RowStatus::oom: return "oom";
    case RowStatus::fail: break;
    case RowStatus::pass: {
      const auto& x = row.extra;
      if (x.is_object() && x.value("deterministic", true) == false && x.value("expected_deterministic", false))
        return "nondeterministic";
      return "";
    }
    default: return "";
  }
  if (!row.check) return "numerics";
  for (const char* name : {"O", "LSE", "dQ", "dK", "dV", "dBias"})
    for (const auto& t : row.check->tensors) {
      if (t.name != name || t.pass) continue;
      if (t.unwritten > 0) return "unwritten-" + t.name;
      if (t.nan_mismatch > 0) return "nonfinite-" + t.name;
      return (row.check->failure_class.empty() ? std::string("numerics") : row.check->failure_class) + "-" + t.name;
    }
  return row.check->failure_class.empty() ? "numerics" : row.check->failure_class;
}

double parse_duration(const std::string& text, const std::string& option) {
  const auto bad = [&] {
    return InputError("<command line>", option,
                      "expected a positive duration such as 90, 90s, 10m or 1h, got \"" + text + "\"");
  };
  if (text.empty()) throw bad();
  double unit = 1;
  std::string num = text;
  switch (text.back()) {
    case 's': unit = 1; num.pop_back(); break;
    case 'm': unit = 60; num.pop_back(); break;
    case 'h': unit = 3600; num.pop_back(); break;
    default: break;
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(num, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  if (used != num.size() || !std::isfinite(v) || v <= 0) throw bad();
  return v * unit;
}

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Filesystem-safe form of a name ([A-Za-z0-9._-], others as '_').
std::string safe_name(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  return out;
}

/// FNV-1a 64 of `text`, 8 hex digits.
std::string short_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%08llx", static_cast<unsigned long long>(h & 0xffffffffull));
  return buf;
}

/// The backends of a hunt, created and configured once (a peer keeps its worker).
struct Lineup {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<bool> isolated;
};

/// Refuse unknown and repeated names; drop unavailable backends with a warning.
Lineup make_lineup(const std::vector<std::string>& names, const HuntOptions& opts, const RunOptions& ropts) {
  if (names.empty()) throw InputError("<command line>", "--backends", "name at least one backend");
  Lineup l;
  // Variants ("cpu[threads=1]") as `run` takes them: unknown, repeated or bad options refused.
  for (const auto& n : BackendRegistry::resolve_variants(names, "<command line>", "--backends")) {
    auto b = BackendRegistry::create_variant(n);
    std::string why;
    if (!b->available(&why)) {
      std::fprintf(stderr, "attnbench hunt: backend %s is not available on this machine (%s): skipped\n",
                   printable(n).c_str(), printable(why).c_str());
      continue;
    }
    b->configure(ropts.policy, ropts.backward, ropts.timing, ropts.determinism, ropts.device);
    bool iso = opts.isolate == RunOptions::Isolate::on;
    // automatic: a peer already runs in its own worker (isolating it would start one per unit)
    if (opts.isolate == RunOptions::Isolate::automatic)
      iso = !b->runs_out_of_process() && (opts.case_timeout_s > 0 || b->device() == Device::cuda);
    l.isolated.push_back(iso);
    l.backends.push_back(std::move(b));
  }
  if (l.backends.empty()) throw InputError("<command line>", "--backends", "no listed backend is available on this machine");
  return l;
}

/// What every unit of a hunt runs: the full check, the determinism rerun, no timing.
RunOptions unit_options(const HuntOptions& opts, bool any_isolated) {
  RunOptions r;
  r.check = CheckMode::automatic;
  r.determinism = true;
  r.timing = false;
  r.backward = true;
  r.executable = opts.executable;
  // An isolated unit that hangs is a failure too: 300 s unless told otherwise.
  r.case_timeout_s = opts.case_timeout_s > 0 ? opts.case_timeout_s : (any_isolated ? 300.0 : 0.0);
  if (opts.case_timeout_s < 0 || !std::isfinite(opts.case_timeout_s))
    throw InputError("<command line>", "--case-timeout", "expected seconds >= 0");
  return r;
}

/// The shell line that reruns `file` on `backend` with `attnbench run`.
std::string repro_line(const std::string& backend, const std::string& file) {
  const std::string env = backend.rfind("test-", 0) == 0 ? "ATTNBENCH_TEST_BACKENDS=1 " : "";
  return env + "attnbench run '" + fs::absolute(file).string() + "' --backends '" + backend + "'" +
         " --no-timing --out hunt-repro";
}

class Hunter {
 public:
  explicit Hunter(const HuntOptions& opts) : opts_(opts), t0_(Clock::now()) {
    ropts_ = unit_options(opts, opts.isolate != RunOptions::Isolate::off);
    lineup_ = make_lineup(opts.backends, opts, ropts_);
    unit_dir_ = fs::path(opts.out_dir) / ".units";
    started_ = env::utc_now_iso8601();
  }

  HuntSummary hunt();
  HuntSummary replay(const std::string& dir);
  /// Replay runs each corpus problem only on the backend its .row.json names.
  bool by_row_ = false;

 private:
  std::optional<ReportRow> run(size_t b, const Problem& p, const std::string& id);
  void record(size_t b, const std::optional<ReportRow>& row, bool& failed, std::string& cls);
  void shrink_failure(size_t b, uint64_t index, const Problem& p, const ReportRow& row, const std::string& cls);
  void write_corpus(HuntFailure& f);
  void write_state(bool finished);
  /// Every 2 s hunt.json's counts; every 5 s (or `force`) a progress line unless quiet.
  void progress(bool force);
  double left() const { return opts_.budget_s - seconds_since(t0_); }

  HuntOptions opts_;
  RunOptions ropts_;
  Lineup lineup_;
  fs::path unit_dir_;
  int64_t unit_no_ = 0;
  Clock::time_point t0_, last_progress_{}, last_state_{};
  std::string started_;
  HuntSummary sum_;
  std::set<std::pair<std::string, std::string>> shrunk_;  // (backend, class)
};

std::optional<ReportRow> Hunter::run(size_t b, const Problem& p, const std::string& id) {
  Case c;
  c.id = id;
  c.problem = p;
  return run_case_unit(c, *lineup_.backends[b], ropts_, lineup_.isolated[b], unit_dir_, unit_no_);
}

/// Count one unit of the search; `cls` gets its failure class.
void Hunter::record(size_t b, const std::optional<ReportRow>& row, bool& failed, std::string& cls) {
  HuntCounts& per = sum_.per_backend[lineup_.backends[b]->variant()];
  failed = false;
  if (!row) return;  // stopped
  if (row->status == RowStatus::unsupported) {
    ++sum_.counts.unsupported;
    ++per.unsupported;
    return;
  }
  ++sum_.counts.run;
  ++per.run;
  cls = failure_class(*row);
  failed = !cls.empty();
  ++(failed ? sum_.counts.failed : sum_.counts.passed);
  ++(failed ? per.failed : per.passed);
}

void Hunter::progress(bool force) {
  if (!force && seconds_since(last_state_) >= 2) {  // hunt.json's counts stay current
    last_state_ = Clock::now();
    write_state(false);
  }
  if (opts_.quiet) return;
  if (!force && seconds_since(last_progress_) < 5) return;
  last_progress_ = Clock::now();
  std::fprintf(stderr, "hunt: %s; %s left\n", sum_.line().c_str(),
               Progress::format_duration(std::max(0.0, left())).c_str());
}

HuntSummary Hunter::hunt() {
  std::error_code ec;
  fs::create_directories(opts_.out_dir, ec);
  if (ec || !fs::is_directory(opts_.out_dir))
    throw InputError(opts_.out_dir, "", "cannot create the output directory" + (ec ? ": " + ec.message() : ""));
  OutDirLock lock(opts_.out_dir);
  write_state(false);
  for (uint64_t index = 0; !stop_signal() && left() > 0; ++index) {
    if (opts_.max_problems > 0 && static_cast<int64_t>(index) >= opts_.max_problems) break;
    const Problem p = generate_problem(opts_.seed, index, opts_.limits);
    ++sum_.counts.generated;
    for (size_t b = 0; b < lineup_.backends.size() && !stop_signal(); ++b) {
      const std::string name = lineup_.backends[b]->variant();
      auto row = run(b, p, "hunt-" + std::to_string(index));
      bool failed = false;
      std::string cls;
      record(b, row, failed, cls);
      if (!failed) continue;
      if (shrunk_.count({name, cls})) {
        if (sum_.repeats.size() < 100) sum_.repeats.push_back({{"backend", name}, {"class", cls}, {"index", index}});
        continue;
      }
      shrink_failure(b, index, p, *row, cls);
    }
    progress(false);
  }
  sum_.interrupted_signal = stop_signal();
  sum_.seconds = seconds_since(t0_);
  write_state(true);
  fs::remove(unit_dir_, ec);  // only when empty
  if (seconds_since(last_progress_) > 1) progress(true);
  return sum_;
}

void Hunter::shrink_failure(size_t b, uint64_t index, const Problem& p, const ReportRow& row, const std::string& cls) {
  Backend& backend = *lineup_.backends[b];
  shrunk_.insert({backend.name(), cls});
  if (!opts_.quiet)
    std::fprintf(stderr, "hunt: %s fails (%s) on problem %llu (%s, %s); shrinking\n", printable(backend.name()).c_str(),
                 cls.c_str(), static_cast<unsigned long long>(index), describe_mask(p).c_str(),
                 describe_score_mod(p.score_mod).c_str());
  HuntFailure f;
  f.backend = backend.variant();
  f.failure_class = cls;
  f.index = index;
  f.original = p;
  ReportRow last = row;
  const auto shrink_end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(std::max(left(), opts_.shrink_s)));
  int64_t n = 0;
  const ShrinkResult r = shrink(
      p,
      [&](const Problem& q) {
        auto got = run(b, q, "hunt-" + std::to_string(index) + "-shrink-" + std::to_string(n++));
        if (!got || failure_class(*got) != cls) return false;
        last = *got;
        return true;
      },
      [&] { return stop_signal() != 0 || Clock::now() > shrink_end; });
  f.minimal = r.problem;
  f.shrink_steps = r.steps;
  f.shrink_tried = r.tried;
  f.shrink_complete = r.complete;
  f.message = !last.message.empty() ? last.message : last.reason;
  f.row = last.to_json();
  write_corpus(f);
  sum_.failures.push_back(f);
  write_state(false);
  if (!opts_.quiet)
    std::fprintf(stderr, "hunt: %s %s shrunk in %lld steps (%lld tried%s) to %s\n  reproduce: %s\n",
                 printable(f.backend).c_str(), cls.c_str(), static_cast<long long>(r.steps),
                 static_cast<long long>(r.tried), r.complete ? "" : ", stopped early",
                 attnbench::to_json(f.minimal, true).dump().c_str(), f.repro.c_str());
}

void Hunter::write_corpus(HuntFailure& f) {
  const fs::path dir = fs::path(opts_.out_dir) / "corpus";
  fs::create_directories(dir);
  const nlohmann::json pj = attnbench::to_json(f.minimal, false);
  const std::string stem = safe_name(f.backend) + "-" + safe_name(f.failure_class) + "-" + short_hash(pj.dump());
  f.problem_file = (dir / (stem + ".json")).string();
  f.row_file = (dir / (stem + ".row.json")).string();
  f.repro = repro_line(f.backend, f.problem_file);
  write_json_atomic(f.problem_file, pj);
  write_json_atomic(f.row_file, {{"backend", f.backend},
                                 {"class", f.failure_class},
                                 {"repro", f.repro},
                                 {"hunt", {{"seed", opts_.seed}, {"index", f.index}}},
                                 {"row", f.row}});
}

void Hunter::write_state(bool finished) {
  nlohmann::json doc;
  doc["tool"] = "attnbench hunt";
  doc["revision"] = git_revision();
  doc["command"] = opts_.command_line;
  doc["seed"] = opts_.seed;
  nlohmann::json names = nlohmann::json::array();
  for (const auto& b : lineup_.backends) names.push_back(b->name());
  doc["backends"] = names;
  doc["budget_s"] = opts_.budget_s;
  doc["shrink_s"] = opts_.shrink_s;
  doc["limits"] = {{"max_seq", opts_.limits.max_seq}, {"max_work", opts_.limits.max_work},
                   {"max_batch", opts_.limits.max_batch}, {"max_heads_q", opts_.limits.max_heads_q}};
  doc["started"] = started_;
  doc["elapsed_s"] = seconds_since(t0_);
  doc["finished"] = finished ? nlohmann::json(env::utc_now_iso8601()) : nlohmann::json(nullptr);
  if (sum_.interrupted_signal) doc["interrupted"] = signal_name(sum_.interrupted_signal);
  doc["counts"] = sum_.counts.to_json();
  for (const auto& [name, c] : sum_.per_backend) doc["per_backend"][name] = c.to_json();
  doc["failures"] = nlohmann::json::array();
  for (const auto& f : sum_.failures) doc["failures"].push_back(f.to_json());
  doc["repeats"] = sum_.repeats;
  write_json_atomic((fs::path(opts_.out_dir) / "hunt.json").string(), doc, /*sync=*/finished);
}

HuntSummary Hunter::replay(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file() && e.path().extension() == ".json" && n.size() > 9 &&
        n.compare(n.size() - 9, 9, ".row.json") != 0)
      files.push_back(e.path());
  }
  if (ec) throw InputError(dir, "", "cannot read the corpus folder: " + ec.message());
  std::sort(files.begin(), files.end());
  sum_.replay = true;
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& file : files) {
    if (stop_signal()) break;
    const Problem p = problem_from_json(jsonu::load_file(file.string()), file.string());
    ++sum_.counts.generated;
    // Without --backends, a corpus problem runs on the backend its .row.json names.
    std::string only;
    if (by_row_) {
      const fs::path rowf = file.parent_path() / (file.stem().string() + ".row.json");
      if (fs::exists(rowf)) only = jsonu::load_file(rowf.string()).value("backend", "");
    }
    for (size_t b = 0; b < lineup_.backends.size() && !stop_signal(); ++b) {
      if (!only.empty() && lineup_.backends[b]->variant() != only) continue;
      auto row = run(b, p, file.stem().string());
      bool failed = false;
      std::string cls;
      record(b, row, failed, cls);
      if (!row) break;
      const std::string status = to_string(row->status);
      entries.push_back({{"file", file.string()}, {"backend", lineup_.backends[b]->variant()}, {"status", status},
                         {"class", cls}, {"message", !row->message.empty() ? row->message : row->reason}});
      if (!opts_.quiet)
        std::fprintf(stderr, "replay: %s on %s: %s%s\n", file.filename().string().c_str(),
                     printable(lineup_.backends[b]->variant()).c_str(), failed ? "FAIL " : status.c_str(), cls.c_str());
    }
  }
  sum_.interrupted_signal = stop_signal();
  sum_.seconds = seconds_since(t0_);
  fs::create_directories(opts_.out_dir, ec);
  write_json_atomic((fs::path(opts_.out_dir) / "replay.json").string(),
                    {{"corpus", dir}, {"counts", sum_.counts.to_json()}, {"units", entries}});
  fs::remove(unit_dir_, ec);
  return sum_;
}

/// The backends a corpus names in its *.row.json files, in name order.
std::vector<std::string> corpus_backends(const std::string& dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 9 && n.compare(n.size() - 9, 9, ".row.json") == 0) {
      const nlohmann::json j = jsonu::load_file(e.path().string());
      if (!j.contains("backend") || !j["backend"].is_string())
        throw InputError(e.path().string(), "/backend", "expected the backend's name");
      names.insert(j["backend"].get<std::string>());
    }
  }
  if (ec) throw InputError(dir, "", "cannot read the corpus folder: " + ec.message());
  return {names.begin(), names.end()};
}

}  // namespace

HuntSummary run_hunt(const HuntOptions& opts) {
  if (!(opts.budget_s > 0) || !std::isfinite(opts.budget_s))
    throw InputError("<command line>", "--budget", "expected a positive duration");
  Hunter h(opts);
  return h.hunt();
}

HuntSummary replay_corpus(const std::string& corpus_dir, const HuntOptions& opts) {
  if (!fs::is_directory(corpus_dir)) throw InputError(corpus_dir, "", "--replay needs a folder of problem files");
  HuntOptions o = opts;
  const bool by_row = o.backends.empty();
  if (by_row) o.backends = corpus_backends(corpus_dir);
  if (o.backends.empty())
    throw InputError(corpus_dir, "", "no *.row.json names a backend; give --backends");
  Hunter h(o);
  h.by_row_ = by_row;
  return h.replay(corpus_dir);
}

}  // namespace attnbench::hunt
