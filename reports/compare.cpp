// The regression gate: see compare.hpp for the rule.
#include "reports/compare.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "harness/device/environment.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/model/printable.hpp"
#include "harness/measure/measure.hpp"
#include "reports/report.hpp"

namespace attnbench {

// ------------------------------------------------------------------ statistics

MannWhitney mann_whitney_u(const std::vector<double>& a, const std::vector<double>& b) {
  MannWhitney r;
  const size_t n1 = a.size(), n2 = b.size();
  if (n1 == 0 || n2 == 0) return r;
  r.valid = true;
  // Rank the pooled sample; tied values share the mean of their ranks.
  std::vector<std::pair<double, int>> pooled;
  pooled.reserve(n1 + n2);
  for (double x : a) pooled.emplace_back(x, 0);
  for (double x : b) pooled.emplace_back(x, 1);
  std::sort(pooled.begin(), pooled.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  const double n = static_cast<double>(n1 + n2);
  double rank_sum_a = 0, tie_term = 0;
  for (size_t i = 0; i < pooled.size();) {
    size_t j = i;
    while (j < pooled.size() && pooled[j].first == pooled[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double mean_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;  // ranks i+1 .. j
    for (size_t k = i; k < j; ++k)
      if (pooled[k].second == 0) rank_sum_a += mean_rank;
    tie_term += t * t * t - t;
    i = j;
  }
  const double d1 = static_cast<double>(n1), d2 = static_cast<double>(n2);
  r.u = rank_sum_a - d1 * (d1 + 1.0) / 2.0;
  const double mu = d1 * d2 / 2.0;
  const double var = d1 * d2 / 12.0 * ((n + 1.0) - tie_term / (n * (n - 1.0)));
  if (!(var > 0)) {
    r.z = 0;
    r.p = 1;
    return r;
  }
  const double diff = r.u - mu;
  const double corrected = std::max(0.0, std::abs(diff) - 0.5);  // continuity correction
  r.z = (diff < 0 ? -corrected : corrected) / std::sqrt(var);
  r.p = std::min(1.0, std::erfc(std::abs(r.z) / std::sqrt(2.0)));
  return r;
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::same: return "SAME";
    case Verdict::faster: return "FASTER";
    case Verdict::slower: return "SLOWER";
    case Verdict::ambiguous: return "AMBIGUOUS";
  }
  return "SAME";
}

double parse_fraction(const std::string& text, const std::string& option) {
  std::string s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  const bool percent = !s.empty() && s.back() == '%';
  if (percent) s.pop_back();
  char* end = nullptr;
  const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  const bool parsed = !s.empty() && end && *end == '\0' && std::isfinite(v);
  const double frac = percent ? v / 100.0 : v;
  if (!parsed || frac < 0 || frac >= 1)
    throw InputError("<command line>", option,
                     "expected a fraction in [0, 1) such as 0.05, or a percentage such as 5%, got \"" + text + "\"");
  return frac;
}

// ------------------------------------------------------------------ comparison

int64_t Comparison::count(Verdict v) const {
  return std::count_if(timings.begin(), timings.end(), [v](const PassComparison& t) { return t.verdict == v; });
}

int64_t Comparison::regressions() const {
  int64_t n = 0;
  for (const auto& t : timings) n += t.regression;
  for (const auto& s : status_changes) n += s.regression;
  for (const auto& g : guards) n += g.regression;
  if (!options.allow_missing) n += static_cast<int64_t>(missing.size());
  if (!options.allow_unfinished && !new_unfinished.empty()) ++n;
  if (!options.allow_no_timing) n += static_cast<int64_t>(untimed.size());
  return n;
}

std::string Comparison::gate_breakdown() const {
  int64_t slower = 0, ambiguous = 0, correctness = 0, broken = 0, guard = 0;
  for (const auto& t : timings)
    if (t.regression) ++(t.verdict == Verdict::slower ? slower : ambiguous);
  for (const auto& s : status_changes)
    if (s.regression) ++(s.new_errors ? broken : correctness);
  for (const auto& g : guards) guard += g.regression;
  std::string out;
  auto add = [&](int64_t n, const std::string& what) {
    if (n > 0) out += (out.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add(slower, "SLOWER");
  add(ambiguous, "AMBIGUOUS (--fail-on-ambiguous)");
  add(correctness, "correctness regressions");
  add(broken, "rows newly crashed/error/timeout/oom (--allow-new-errors)");
  add(guard, "determinism/NaN guards (--allow-nondeterminism, --allow-nonfinite)");
  if (!options.allow_missing) add(static_cast<int64_t>(missing.size()), "missing from NEW (--allow-missing)");
  if (!options.allow_no_timing) add(static_cast<int64_t>(untimed.size()), "untimed in NEW (--allow-no-timing)");
  if (!options.allow_unfinished && !new_unfinished.empty())
    out += std::string(out.empty() ? "" : ", ") + "NEW unfinished: " + printable(new_unfinished) + " (--allow-unfinished)";
  return out;
}

namespace {

const nlohmann::json* timing_of(const nlohmann::json& row, const std::string& pass) {
  if (!row.contains("timing") || !row["timing"].is_object() || !row["timing"].contains(pass)) return nullptr;
  const auto& t = row["timing"][pass];
  return t.is_object() ? &t : nullptr;
}

/// The row's status for the gate, derived from its check data for a "pass": a
/// check with a failing tensor (or check.pass false) is "fail"; a check that
/// checked nothing (absent, mode "off" as older reports wrote --check off, no
/// tensors, no element checked) is "unchecked". Other statuses stand as written.
std::string effective_status(const nlohmann::json& row) {
  const auto st_it = row.find("status");
  std::string st = st_it != row.end() && st_it->is_string() ? st_it->get<std::string>() : "";
  if (st != "pass") return st;
  const auto c = row.find("check");
  if (c == row.end() || !c->is_object()) return "unchecked";
  const auto mode = c->find("mode");
  if (mode != c->end() && *mode == "off") return "unchecked";
  const auto pass = c->find("pass");
  if (pass != c->end() && pass->is_boolean() && !pass->get<bool>()) return "fail";
  const auto tensors = c->find("tensors");
  if (tensors == c->end() || !tensors->is_array() || tensors->empty()) return "unchecked";
  bool any_checked = false;
  for (const auto& t : *tensors) {
    if (!t.is_object()) return "fail";
    const auto tp = t.find("pass");
    if (tp == t.end() || !tp->is_boolean() || !tp->get<bool>()) return "fail";
    const auto n = t.find("checked");
    any_checked = any_checked || (n != t.end() && n->is_number() && n->get<double>() > 0);
  }
  return any_checked ? "pass" : "unchecked";
}

/// crashed, error, timeout, oom: the row did not run to a verdict.
bool broken_status(const std::string& st) {
  return st == "crashed" || st == "error" || st == "timeout" || st == "oom";
}

/// Why a report is not a finished run ("" when it is): no "finished" time, or an
/// "interrupted" record.
std::string unfinished_reason(const nlohmann::json& doc) {
  const auto in = doc.find("interrupted");
  if (in != doc.end() && !in->is_null()) {
    std::string why = in->dump();
    if (in->is_object() && in->contains("reason") && (*in)["reason"].is_string()) why = (*in)["reason"].get<std::string>();
    else if (in->is_object() && in->contains("signal") && (*in)["signal"].is_string()) why = (*in)["signal"].get<std::string>();
    return "interrupted (" + why + ")";
  }
  const auto f = doc.find("finished");
  if (f == doc.end() || !f->is_string() || f->get<std::string>().empty())
    return "no \"finished\" time (the run did not complete)";
  return "";
}

}  // namespace

/// Non-finite output elements a row records: sum of check.tensors[].nan_mismatch
/// + unwritten, else of check.nonfinite's counts; nullopt when it records neither.
std::optional<int64_t> nonfinite_count(const nlohmann::json& row) {
  if (!row.contains("check") || !row["check"].is_object()) return std::nullopt;
  const auto& c = row["check"];
  // Counts from a file: non-negative, each capped at 2^40 so that sums never overflow.
  auto int_of = [](const nlohmann::json& v) -> int64_t {
    if (v.is_number_unsigned()) return static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), uint64_t{1} << 40));
    if (v.is_number_integer()) return std::clamp<int64_t>(v.get<int64_t>(), 0, int64_t{1} << 40);
    return 0;
  };
  if (c.contains("tensors") && c["tensors"].is_array() && !c["tensors"].empty()) {
    int64_t n = 0;
    for (const auto& t : c["tensors"])
      if (t.is_object())
        n = std::min(n + int_of(t.value("nan_mismatch", nlohmann::json())) + int_of(t.value("unwritten", nlohmann::json())),
                     int64_t{1} << 61);  // saturate: never overflows
    return n;
  }
  if (c.contains("nonfinite") && c["nonfinite"].is_object()) {
    int64_t n = 0;
    for (const auto& [k, v] : c["nonfinite"].items()) n = std::min(n + int_of(v), int64_t{1} << 61);
    return n;
  }
  return std::nullopt;
}

/// extra.setup_ms of a row, NaN when absent.
double setup_ms_of(const nlohmann::json& row) {
  if (row.contains("extra") && row["extra"].is_object() && row["extra"].contains("setup_ms") &&
      row["extra"]["setup_ms"].is_number())
    return row["extra"]["setup_ms"].get<double>();
  return NAN;
}

/// extra.deterministic of a row, nullopt when not recorded.
std::optional<bool> deterministic_of(const nlohmann::json& row) {
  if (row.contains("extra") && row["extra"].is_object() && row["extra"].contains("deterministic") &&
      row["extra"]["deterministic"].is_boolean())
    return row["extra"]["deterministic"].get<bool>();
  return std::nullopt;
}

namespace {

std::string status_detail(const nlohmann::json& row) {
  const std::string eff = effective_status(row);
  if (eff == "unchecked") return "correctness unknown: outputs not checked (--check off or no check data)";
  if (eff == "fail" && row.value("status", nlohmann::json()) == "pass")
    return "status \"pass\" contradicted by its check data (a tensor failed or check.pass is false)";
  if (row.contains("message") && row["message"].is_string()) return row["message"].get<std::string>();
  if (row.contains("reason") && row["reason"].is_string()) return row["reason"].get<std::string>();
  if (row.contains("check") && row["check"].is_object() && row["check"].contains("worst_ratio") &&
      row["check"]["worst_ratio"].is_number()) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "worst error ratio %.3g", row["check"]["worst_ratio"].get<double>());
    return buf;
  }
  return "";
}

/// What the gate reads of a TimingStats (a BASE row keeps this, not the whole).
struct TimingDigest {
  int64_t n = 0;
  double median_ms = 0, q1_ms = 0, q3_ms = 0;
  std::vector<double> samples_ms;
  explicit TimingDigest(TimingStats&& t)
      : n(t.n), median_ms(t.median_ms), q1_ms(t.q1_ms), q3_ms(t.q3_ms), samples_ms(std::move(t.samples_ms)) {
    samples_ms.shrink_to_fit();
  }
};

PassComparison compare_pass(const TimingDigest& b, const TimingDigest& n, const CompareOptions& o) {
  PassComparison c;
  c.base_median_ms = b.median_ms;
  c.new_median_ms = n.median_ms;
  c.base_q1_ms = b.q1_ms;
  c.base_q3_ms = b.q3_ms;
  c.new_q1_ms = n.q1_ms;
  c.new_q3_ms = n.q3_ms;
  c.base_n = b.n;
  c.new_n = n.n;
  c.ratio = b.median_ms > 0 ? n.median_ms / b.median_ms : (n.median_ms > 0 ? INFINITY : 1.0);
  c.intervals_overlap = !(n.q1_ms > b.q3_ms || b.q1_ms > n.q3_ms);
  const bool have_samples = !b.samples_ms.empty() && !n.samples_ms.empty();
  if (have_samples) c.test = mann_whitney_u(n.samples_ms, b.samples_ms);
  else c.note = "no raw samples: interval test only";
  const bool separated = !c.intervals_overlap && (!have_samples || c.test.p < o.alpha);
  const double t = o.max_slowdown;
  if (c.ratio > 1.0 + t) c.verdict = separated ? Verdict::slower : Verdict::ambiguous;
  else if (c.ratio < 1.0 / (1.0 + t)) c.verdict = separated ? Verdict::faster : Verdict::ambiguous;
  else c.verdict = Verdict::same;
  c.regression = c.verdict == Verdict::slower || (o.fail_on_ambiguous && c.verdict == Verdict::ambiguous);
  return c;
}

}  // namespace

namespace {

constexpr std::array<const char*, 3> kPasses = {"fwd", "bwd", "fwd_bwd"};

/// What the gate needs of one row, read once: BASE's rows are kept as these,
/// never as JSON, and NEW's are compared as they are read.
struct RowDigest {
  std::string key, case_id, backend;  ///< backend: the row's variant label (row_variant())
  std::string status;                 ///< effective_status()
  std::string detail;                 ///< status_detail() (used of NEW rows)
  std::optional<bool> deterministic;  ///< deterministic_of()
  std::optional<int64_t> nonfinite;   ///< nonfinite_count()
  double setup_ms = NAN;              ///< setup_ms_of()
  std::array<std::optional<TimingDigest>, 3> timing;  ///< per kPasses entry, when the row has that object
  bool matched = false;               ///< BASE rows: NEW has a row with this key
};

/// The parts of a row that digest() reads (effective_status(), status_detail(),
/// nonfinite_count(), deterministic_of(), setup_ms_of(), timing_of()), besides
/// its key (case_id, backend, variant): what compare_report_files() asks
/// stream_report() for. A part read here and not named there would read as absent
/// (tests/test_report_fast.cpp compares the two paths).
const nlohmann::json& digest_parts() {
  static const nlohmann::json parts = {
      {"status", true}, {"message", true}, {"reason", true}, {"extra", true}, {"timing", true},
      {"check", {{"mode", true}, {"pass", true}, {"worst_ratio", true}, {"nonfinite", true},
                 {"tensors", {{"pass", true}, {"checked", true}, {"nan_mismatch", true}, {"unwritten", true}}}}}};
  return parts;
}

/// The digest of row `index` of `file`. Throws InputError for a malformed timing.
RowDigest digest(const nlohmann::json& row, const std::string& file, size_t index, bool keep_detail) {
  RowDigest d;
  d.key = row_key(row);
  d.case_id = row.value("case_id", "");
  d.backend = row_variant(row);  // the variant's label (the backend's name at its defaults)
  d.status = effective_status(row);
  if (keep_detail) d.detail = status_detail(row);
  d.deterministic = deterministic_of(row);
  d.nonfinite = nonfinite_count(row);
  d.setup_ms = setup_ms_of(row);
  for (size_t p = 0; p < kPasses.size(); ++p)
    if (const nlohmann::json* t = timing_of(row, kPasses[p]))
      d.timing[p].emplace(
          TimingStats::from_json(*t, file, jsonu::child_path("/results", index) + "/timing/" + kPasses[p]));
  return d;
}

/// Refuses a second row with one key: a later row would hide an earlier one (a
/// failing row followed by a passing duplicate would pass the gate).
[[noreturn]] void duplicate_row(const RowDigest& d, const std::string& file, size_t index) {
  throw InputError(file, jsonu::child_path("/results", index),
                   "duplicate row (case_id \"" + d.case_id + "\", backend variant \"" + d.backend +
                       "\"): a report holds one row per case and backend variant");
}

/// The comparison built one row at a time: every BASE row first (add_base),
/// then each NEW row compared as it comes (add_new), then finish().
class Comparer {
 public:
  Comparer(Comparison& cmp, const CompareOptions& options) : cmp_(cmp), o_(options) {}

  void add_base(const nlohmann::json& row, size_t index) {
    RowDigest d = digest(row, cmp_.base_file, index, false);
    if (!base_at_.emplace(d.key, base_.size()).second) duplicate_row(d, cmp_.base_file, index);
    base_.push_back(std::move(d));
  }

  void add_new(const nlohmann::json& row, size_t index) { compare_new(digest_new(row, index)); }

  /// The checks of add_new() that may throw (the digest, a duplicate key), in
  /// its order; NEW's rows may be digested before BASE is read (compare_new()).
  RowDigest digest_new(const nlohmann::json& row, size_t index) {
    RowDigest n = digest(row, cmp_.new_file, index, true);
    if (!new_keys_.insert(n.key).second) duplicate_row(n, cmp_.new_file, index);
    return n;
  }

  /// The rest of add_new(), once every BASE row is in; throws nothing.
  void compare_new(const RowDigest& n) {
    if (n.status == "unchecked") cmp_.unchecked.push_back(n.key);
    const auto bit = base_at_.find(n.key);
    if (bit == base_at_.end()) {
      cmp_.added.push_back(n.key);
      if (n.status == "fail") cmp_.status_changes.push_back({n.case_id, n.backend, "", n.status, n.detail, true});
      if (broken_status(n.status))
        cmp_.status_changes.push_back({n.case_id, n.backend, "", n.status, n.detail, !o_.allow_new_errors, true});
      return;
    }
    RowDigest& b = base_[bit->second];
    b.matched = true;
    ++cmp_.rows_compared;
    compare_status(b, n);
    compare_guards(b, n);
    compare_timings(b, n);
  }

  /// Rows of BASE that NEW lacks, in BASE's order.
  void finish() {
    for (const RowDigest& b : base_)
      if (!b.matched) cmp_.missing.push_back(b.key);
  }

 private:
  void compare_status(const RowDigest& b, const RowDigest& n) {
    if (b.status == n.status && n.status != "fail") return;
    StatusChange sc{n.case_id, n.backend, b.status, n.status, n.detail, false};
    // Only "pass" is a pass: pass -> unchecked gates (correctness no longer known).
    sc.regression = (b.status == "pass" && n.status != "pass") || (n.status == "fail" && b.status != "fail");
    if (!sc.regression && broken_status(n.status) && !broken_status(b.status)) {
      sc.regression = !o_.allow_new_errors;
      sc.new_errors = true;
    }
    cmp_.status_changes.push_back(sc);
  }

  void compare_guards(const RowDigest& b, const RowDigest& n) {
    if (b.deterministic == true && n.deterministic == false)
      cmp_.guards.push_back({n.case_id, n.backend, "nondeterministic",
                             "bitwise deterministic in base, not in new (two runs differ)", !o_.allow_nondeterminism});
    if (b.nonfinite && *b.nonfinite == 0 && n.nonfinite && *n.nonfinite > 0)
      cmp_.guards.push_back({n.case_id, n.backend, "nonfinite",
                             "outputs gained " + std::to_string(*n.nonfinite) +
                                 " non-finite element(s) (NaN/Inf) where base had none",
                             !o_.allow_nonfinite});
  }

  void compare_timings(const RowDigest& b, const RowDigest& n) {
    bool base_timed = false, new_timed = false;
    for (size_t p = 0; p < kPasses.size(); ++p) {
      const auto& bs = b.timing[p];
      const auto& ns = n.timing[p];
      base_timed = base_timed || bs;
      new_timed = new_timed || (bs && ns);
      if (!bs || !ns || bs->n == 0 || ns->n == 0) continue;
      PassComparison pc = compare_pass(*bs, *ns, o_);
      pc.base_setup_ms = b.setup_ms;
      pc.new_setup_ms = n.setup_ms;
      pc.case_id = n.case_id;
      pc.backend = n.backend;
      pc.pass = kPasses[p];
      cmp_.timings.push_back(pc);
    }
    if (base_timed && !new_timed && (n.status == "pass" || n.status == "unchecked" || n.status == "fail"))
      cmp_.untimed.push_back(n.key);
  }

  Comparison& cmp_;
  const CompareOptions& o_;
  std::vector<RowDigest> base_;
  std::unordered_map<std::string, size_t> base_at_;
  std::unordered_set<std::string> new_keys_;
};

/// A Comparison with its files and options set, after checking the options.
Comparison start_comparison(const std::string& base_file, const std::string& new_file, const CompareOptions& options) {
  if (!(options.max_slowdown >= 0))
    throw InputError("<command line>", "--max-slowdown", "must be >= 0, got " + std::to_string(options.max_slowdown));
  if (!(options.alpha > 0 && options.alpha < 1))
    throw InputError("<command line>", "--alpha", "must be in (0, 1), got " + std::to_string(options.alpha));
  Comparison cmp;
  cmp.base_file = base_file;
  cmp.new_file = new_file;
  cmp.options = options;
  return cmp;
}

/// The headers' part of the comparison: the environments (throws InputError
/// naming NEW's /environment on a mismatch not allowed) and NEW's finish.
void compare_headers(Comparison& cmp, const nlohmann::json& base, const nlohmann::json& neu) {
  cmp.base_identity = env::comparable_identity(base.value("environment", nlohmann::json::object()));
  cmp.new_identity = env::comparable_identity(neu.value("environment", nlohmann::json::object()));
  if (cmp.base_identity != cmp.new_identity) {
    if (!cmp.options.allow_env_mismatch) {
      std::string diff;
      for (const auto& [k, v] : cmp.base_identity.items())
        if (cmp.new_identity.value(k, nlohmann::json()) != v)
          diff += (diff.empty() ? "" : ", ") + k + " " + v.dump() + " vs " + cmp.new_identity[k].dump();
      throw InputError(cmp.new_file, "/environment",
                       "runs are from different environments (" + diff + " in " + cmp.base_file +
                           " vs this file); timings are not comparable (pass --allow-env-mismatch to compare anyway)");
    }
    cmp.env_mismatch = true;
  }
  cmp.new_unfinished = unfinished_reason(neu);
}

}  // namespace

Comparison compare_reports(const nlohmann::json& base, const nlohmann::json& neu, const std::string& base_file,
                           const std::string& new_file, const CompareOptions& options) {
  Comparison cmp = start_comparison(base_file, new_file, options);
  compare_headers(cmp, base, neu);
  Comparer c(cmp, cmp.options);
  const auto& base_rows = base.at("results");
  for (size_t i = 0; i < base_rows.size(); ++i) c.add_base(base_rows[i], i);
  const auto& new_rows = neu.at("results");
  for (size_t i = 0; i < new_rows.size(); ++i) c.add_new(new_rows[i], i);
  c.finish();
  return cmp;
}

Comparison compare_report_files(const std::string& base_file, const std::string& new_file,
                                const CompareOptions& options) {
  Comparison cmp = start_comparison(base_file, new_file, options);
  Comparer c(cmp, cmp.options);
  // NEW is read on a second thread while BASE is read here (each file read by
  // one thread, nothing handed between them row by row): NEW's rows wait as
  // digests until every BASE row is in, then are compared in NEW's order. The
  // errors are those of reading BASE, then NEW, on one thread: BASE's first
  // (NEW's reader is then stopped), NEW's next.
  struct Stopped {};
  std::atomic<bool> stop{false};
  std::vector<RowDigest> pending;
  nlohmann::json neu;
  std::exception_ptr new_error;
  std::thread new_reader([&] {
    try {
      neu = stream_report(new_file, [&](nlohmann::json&& row, size_t i) {
        if (stop.load(std::memory_order_relaxed)) throw Stopped{};
        pending.push_back(c.digest_new(row, i));
      }, nullptr, &digest_parts());
    } catch (...) {
      new_error = std::current_exception();
    }
  });
  nlohmann::json base;
  try {
    base = stream_report(base_file, [&](nlohmann::json&& row, size_t i) { c.add_base(row, i); }, nullptr,
                         &digest_parts());
  } catch (...) {
    stop = true;
    new_reader.join();
    throw;
  }
  new_reader.join();
  if (new_error) std::rethrow_exception(new_error);
  for (const RowDigest& n : pending) c.compare_new(n);
  compare_headers(cmp, base, neu);
  c.finish();
  return cmp;
}

// ------------------------------------------------------------------ output

std::string md_cell(const std::string& text) {
  const std::string s = printable(text);  // report fields are input: no control characters
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n' || c == '\r') out += ' ';
    else out += c;
  }
  return out;
}

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string change_pct(double ratio) {
  if (!std::isfinite(ratio)) return "n/a";
  return fmt("%+.1f%%", (ratio - 1.0) * 100.0);
}

void timing_table(std::ostringstream& os, const std::vector<const PassComparison*>& rows) {
  // Setup (mask, plan or graph build, once per prepare()) beside the steady-state
  // median: the timed passes never include it.
  os << "| case | backend | pass | base median ms | new median ms | change | base setup ms | new setup ms | U-test p | "
        "IQRs overlap | n base/new |\n";
  os << "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|\n";
  auto setup = [](double v) { return std::isfinite(v) ? fmt("%.4g", v) : std::string("-"); };
  for (const auto* t : rows) {
    os << "| " << md_cell(t->case_id) << " | " << md_cell(t->backend) << " | " << t->pass << " | "
       << fmt("%.4g", t->base_median_ms) << " | " << fmt("%.4g", t->new_median_ms) << " | " << change_pct(t->ratio)
       << " | " << setup(t->base_setup_ms) << " | " << setup(t->new_setup_ms)
       << " | " << (t->test.valid ? fmt("%.2g", t->test.p) : std::string("n/a")) << " | "
       << (t->intervals_overlap ? "yes" : "no") << " | " << t->base_n << "/" << t->new_n << " |";
    if (!t->note.empty()) os << " " << md_cell(t->note);
    os << "\n";
  }
  os << "\n";
}

}  // namespace

std::string Comparison::markdown() const {
  std::ostringstream os;
  const int64_t reg = regressions();
  os << "## attnbench compare: " << (reg ? "REGRESSED" : "OK") << "\n\n";
  os << "- base: `" << md_cell(base_file) << "` " << md_cell(base_identity.dump()) << "\n";
  os << "- new: `" << md_cell(new_file) << "` " << md_cell(new_identity.dump()) << "\n";
  os << "- rule: SLOWER when the median is more than " << fmt("%.3g", options.max_slowdown * 100)
     << "% slower and both the IQR-overlap and Mann-Whitney U (alpha " << fmt("%.3g", options.alpha)
     << ") tests separate the runs\n";
  if (env_mismatch) os << "- **warning: different environments (allowed by --allow-env-mismatch)**\n";
  os << "\n| | count |\n|---|---:|\n";
  os << "| rows compared | " << rows_compared << " |\n";
  os << "| timings compared | " << timings.size() << " |\n";
  for (Verdict v : {Verdict::slower, Verdict::faster, Verdict::ambiguous, Verdict::same})
    os << "| " << to_string(v) << " | " << count(v) << " |\n";
  int64_t failing_status = 0;
  for (const auto& s : status_changes) failing_status += s.regression;
  os << "| correctness / status regressions | " << failing_status << " |\n";
  int64_t guard_gates = 0;
  for (const auto& g : guards) guard_gates += g.regression;
  os << "| determinism / NaN-Inf guards broken | " << guards.size() << " (" << guard_gates << " gating) |\n";
  os << "| rows unchecked in new (correctness unknown) | " << unchecked.size() << " |\n";
  os << "| rows added | " << added.size() << " |\n";
  os << "| rows missing | " << missing.size() << (options.allow_missing ? " (allowed)" : "") << " |\n";
  os << "| rows untimed in new | " << untimed.size() << (options.allow_no_timing ? " (allowed)" : "") << " |\n";
  os << "| **gate failures** | **" << reg << "** |\n\n";
  if (!new_unfinished.empty())
    os << "- **new report unfinished: " << md_cell(new_unfinished) << "**"
       << (options.allow_unfinished ? " (allowed by --allow-unfinished)" : " (gates; --allow-unfinished)") << "\n\n";
  if (reg > 0) os << "gate failures: " << md_cell(gate_breakdown()) << "\n\n";

  auto pick = [&](Verdict v) {
    std::vector<const PassComparison*> out;
    for (const auto& t : timings)
      if (t.verdict == v) out.push_back(&t);
    std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->ratio > b->ratio; });
    return out;
  };
  if (auto s = pick(Verdict::slower); !s.empty()) {
    os << "### Regressions (SLOWER)\n\n";
    timing_table(os, s);
  }
  if (!status_changes.empty()) {
    os << "### Status changes\n\n| case | backend | base | new | gates | detail |\n|---|---|---|---|---|---|\n";
    for (const auto& s : status_changes)
      os << "| " << md_cell(s.case_id) << " | " << md_cell(s.backend) << " | "
         << (s.base_status.empty() ? "(new row)" : md_cell(s.base_status)) << " | " << md_cell(s.new_status) << " | "
         << (s.regression ? "**yes**" : (s.base_status == "fail" && s.new_status == "fail" ? "no (known failure)" : "no"))
         << " | " << md_cell(s.detail.substr(0, 200)) << " |\n";
    os << "\n";
  }
  if (!guards.empty()) {
    os << "### Guards (determinism, NaN/Inf)\n\n| case | backend | guard | gates | detail |\n|---|---|---|---|---|\n";
    for (const auto& g : guards)
      os << "| " << md_cell(g.case_id) << " | " << md_cell(g.backend) << " | " << g.kind << " | "
         << (g.regression ? "**yes**" : "no (allowed)") << " | " << md_cell(g.detail) << " |\n";
    os << "\n";
  }
  if (auto s = pick(Verdict::ambiguous); !s.empty()) {
    os << "### AMBIGUOUS (medians differ beyond the tolerance, noise too high to tell)\n\n";
    timing_table(os, s);
  }
  if (auto s = pick(Verdict::faster); !s.empty()) {
    os << "### Improvements (FASTER)\n\n";
    std::reverse(s.begin(), s.end());
    timing_table(os, s);
  }
  auto list = [&](const char* title, const std::vector<std::string>& keys) {
    if (keys.empty()) return;
    os << "### " << title << "\n\n";
    for (const auto& k : keys) {
      auto bar = k.find('|');
      os << "- " << md_cell(k.substr(0, bar)) << " on " << md_cell(k.substr(bar + 1)) << "\n";
    }
    os << "\n";
  };
  list(options.allow_missing ? "Rows missing from new (allowed by --allow-missing)" : "Rows missing from new (gating)",
       missing);
  list(options.allow_no_timing ? "Rows untimed in new (allowed)" : "Rows untimed in new (gating; --allow-no-timing)",
       untimed);
  list("Rows only in new", added);
  list("Rows unchecked in new (--check off: correctness unknown, never a pass)", unchecked);
  return os.str();
}

namespace {

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json timing_json(const PassComparison& t) {
  return {{"case_id", t.case_id},
          {"backend", t.backend},
          {"pass", t.pass},
          {"verdict", to_string(t.verdict)},
          {"base_median_ms", t.base_median_ms},
          {"new_median_ms", t.new_median_ms},
          {"ratio", finite_or_null(t.ratio)},
          {"intervals_overlap", t.intervals_overlap},
          {"u", t.test.u},
          {"z", t.test.z},
          {"p", t.test.valid ? nlohmann::json(t.test.p) : nlohmann::json(nullptr)},
          {"base_n", t.base_n},
          {"new_n", t.new_n},
          {"base_setup_ms", finite_or_null(t.base_setup_ms)},
          {"new_setup_ms", finite_or_null(t.new_setup_ms)},
          {"regression", t.regression},
          {"note", t.note}};
}

nlohmann::json status_json(const StatusChange& s) {
  return {{"case_id", s.case_id},
          {"backend", s.backend},
          {"base_status", s.base_status.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.base_status)},
          {"new_status", s.new_status},
          {"detail", s.detail},
          {"regression", s.regression}};
}

nlohmann::json guard_json(const GuardFailure& g) {
  return {{"case_id", g.case_id}, {"backend", g.backend}, {"kind", g.kind}, {"detail", g.detail},
          {"regression", g.regression}};
}

/// Producers of the comparison's arrays, one element at a time (to_json(), write_json()).
std::map<std::string, jsonu::ArrayProducer> comparison_arrays(const Comparison& c) {
  auto each = [](const auto& items, auto to_json) {
    return [&items, to_json](const jsonu::ElementWriter& emit) {
      for (const auto& item : items) emit(to_json(item));
    };
  };
  auto strings = [](const std::vector<std::string>& items) {
    return [&items](const jsonu::ElementWriter& emit) {
      for (const auto& item : items) emit(nlohmann::json(item));
    };
  };
  return {{"timings", each(c.timings, timing_json)},
          {"status_changes", each(c.status_changes, status_json)},
          {"guards", each(c.guards, guard_json)},
          {"unchecked", strings(c.unchecked)},
          {"added", strings(c.added)},
          {"missing", strings(c.missing)},
          {"untimed", strings(c.untimed)}};
}

}  // namespace

nlohmann::json Comparison::json_head() const {
  nlohmann::json j;
  j["base_file"] = base_file;
  j["new_file"] = new_file;
  j["options"] = {{"max_slowdown", options.max_slowdown},
                  {"alpha", options.alpha},
                  {"allow_env_mismatch", options.allow_env_mismatch},
                  {"fail_on_ambiguous", options.fail_on_ambiguous},
                  {"fail_on_missing", options.fail_on_missing},
                  {"allow_nondeterminism", options.allow_nondeterminism},
                  {"allow_nonfinite", options.allow_nonfinite},
                  {"allow_missing", options.allow_missing},
                  {"allow_unfinished", options.allow_unfinished},
                  {"allow_new_errors", options.allow_new_errors},
                  {"allow_no_timing", options.allow_no_timing}};
  j["base_identity"] = base_identity;
  j["new_identity"] = new_identity;
  j["env_mismatch"] = env_mismatch;
  j["regressions"] = regressions();
  j["new_unfinished"] = new_unfinished.empty() ? nlohmann::json(nullptr) : nlohmann::json(new_unfinished);
  return j;
}

nlohmann::json Comparison::to_json() const {
  nlohmann::json j = json_head();
  for (const auto& [key, produce] : comparison_arrays(*this)) {
    nlohmann::json& array = j[key] = nlohmann::json::array();
    produce(jsonu::ElementWriter([&](const nlohmann::json& e) { array.push_back(e); },
                                 [&](std::string_view text) { array.push_back(nlohmann::json::parse(text)); }));
  }
  return j;
}

void Comparison::write_json(const std::function<void(std::string_view)>& write) const {
  jsonu::dump_streamed(json_head(), comparison_arrays(*this), write);
  write("\n");
}

}  // namespace attnbench
