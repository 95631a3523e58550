// report.json: rows, the atomic writer, the reader's structural guard, merge and
// mask thumbnails (docs/report-format.md).
#include "reports/report.hpp"
#include "harness/model/version.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "harness/model/block_mask.hpp"
#include "harness/device/environment.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/json_fast.hpp"
#include "harness/model/json_util.hpp"
#include "reports/journal.hpp"
#include "harness/measure/measure.hpp"
#include "reports/schema.hpp"

#if defined(ATTNBENCH_HAVE_RAPIDJSON)
#include <rapidjson/document.h>
#endif

namespace attnbench {

const char* to_string(RowStatus s) {
  switch (s) {
    case RowStatus::pass: return "pass";
    case RowStatus::fail: return "fail";
    case RowStatus::unsupported: return "unsupported";
    case RowStatus::error: return "error";
    case RowStatus::oom: return "oom";
    case RowStatus::timeout: return "timeout";
    case RowStatus::crashed: return "crashed";
    case RowStatus::unchecked: return "unchecked";
  }
  return "error";
}

std::optional<RowStatus> parse_row_status(const std::string& s) {
  for (RowStatus r : kRowStatuses)
    if (s == to_string(r)) return r;
  return std::nullopt;
}

void ReportRow::derive(const CeilingRates& ceilings) { derived = derive_row(work, timing, problem, ceilings); }

nlohmann::json ReportRow::to_json() const {
  nlohmann::json j;
  j["case_id"] = case_id;
  j["backend"] = backend;
  j["variant"] = variant.empty() ? backend : variant;
  j["options"] = options.is_object() ? options : nlohmann::json::object();
  j["status"] = to_string(status);
  if (!reason.empty()) j["reason"] = reason;
  if (!message.empty()) j["message"] = message;
  j["problem"] = problem;
  j["work"] = work;
  j["packing"] = packing;
  j["check"] = check;
  j["timing"] = timing;
  j["memory"] = memory;
  j["derived"] = derived;
  j["extra"] = extra;
  if (!clocks.is_null()) j["clocks"] = clocks;
  if (!mask_thumbnail.is_null()) j["mask_thumbnail"] = mask_thumbnail;
  return j;
}

ReportRow ReportRow::from_json(const nlohmann::json& j) {
  ReportRow r;
  r.case_id = j.at("case_id").get<std::string>();
  r.backend = j.at("backend").get<std::string>();
  r.variant = j.value("variant", r.backend);
  r.options = j.value("options", nlohmann::json::object());
  const auto st = parse_row_status(j.value("status", ""));
  if (!st) throw InputError("", "/status", "unknown status " + jsonu::show(j.value("status", nlohmann::json())));
  r.status = *st;
  r.reason = j.value("reason", "");
  r.message = j.value("message", "");
  r.problem = j.value("problem", nlohmann::json());
  r.work = j.value("work", std::optional<WorkFigures>());
  r.packing = j.value("packing", nlohmann::json());
  r.check = j.value("check", std::optional<CheckFigures>());
  r.timing = j.value("timing", PassTimings());
  r.memory = j.value("memory", std::optional<MemoryFigures>());
  r.derived = j.value("derived", std::optional<DerivedFigures>());
  r.extra = j.value("extra", nlohmann::json());
  r.clocks = j.value("clocks", nlohmann::json());
  r.mask_thumbnail = j.value("mask_thumbnail", nlohmann::json());
  return r;
}

// ------------------------------------------------------------------ writing

void write_json_atomic(const std::string& path, const nlohmann::json& doc, bool sync) {
  write_file_atomic(path, doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", sync);
}

nlohmann::json make_report_header(const std::string& command_line, nlohmann::json scenario,
                                  nlohmann::json measurement, nlohmann::json environment) {
  nlohmann::json h;
  h["schema_version"] = kReportSchemaVersion;
  h["tool"] = "attnbench";
  h["git_revision"] = git_revision();
  h["command"] = command_line;
  h["started"] = env::utc_now_iso8601();
  h["finished"] = nullptr;
  h["scenario"] = std::move(scenario);
  h["measurement"] = std::move(measurement);
  h["environment"] = std::move(environment);
  h["ceilings"] = nullptr;
  return h;
}

ReportWriter::ReportWriter(std::string path, nlohmann::json header, const std::vector<nlohmann::json>& rows)
    : path_(std::move(path)), header_(std::move(header)) {
  if (!header_.is_object()) header_ = nlohmann::json::object();
  if (!header_.contains("schema_version")) header_["schema_version"] = kReportSchemaVersion;
  if (!header_.contains("tool")) header_["tool"] = "attnbench";
  if (!header_.contains("started")) header_["started"] = env::utc_now_iso8601();
  header_["finished"] = nullptr;
  header_.erase("results");
  for (const auto& r : rows) rows_.push_back(r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  flush();
}

void ReportWriter::add_row(const ReportRow& row) { add_row_json(row.to_json()); }

void ReportWriter::add_row_json(const nlohmann::json& row) {
  rows_.push_back(row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  // Amortised: a rewrite costs O(rows); rewriting once the new rows reach 1/8 of
  // the written ones keeps the total linear (the journal has every row at once).
  if ((rows_.size() - written_rows_) * 8 >= written_rows_) flush();
}

void ReportWriter::set_field(const std::string& key, nlohmann::json value) {
  header_[key] = std::move(value);
  flush();
}

void ReportWriter::finish() {
  header_["finished"] = env::utc_now_iso8601();
  flush();
}

nlohmann::json ReportWriter::document() const {
  nlohmann::json doc = header_;
  doc["results"] = nlohmann::json::array();
  for (const auto& r : rows_) doc["results"].push_back(nlohmann::json::parse(r));
  return doc;
}

void ReportWriter::sort_rows(const std::function<bool(const nlohmann::json&, const nlohmann::json&)>& less) {
  std::vector<std::pair<nlohmann::json, std::string>> rows;
  rows.reserve(rows_.size());
  for (auto& r : rows_) rows.emplace_back(nlohmann::json::parse(r), std::move(r));
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) { return less(a.first, b.first); });
  for (size_t i = 0; i < rows.size(); ++i) rows_[i] = std::move(rows[i].second);
  flush();
}

void ReportWriter::flush() {
  // The header pretty-printed, then "results" with one compact row per line.
  std::string text = header_.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.pop_back();  // the closing brace; the header always has schema_version
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  text += ",\n \"results\": [";
  for (size_t i = 0; i < rows_.size(); ++i) text += (i ? ",\n  " : "\n  ") + rows_[i];
  text += rows_.empty() ? "]\n}\n" : "\n ]\n}\n";
  write_file_atomic(path_, text);
  written_rows_ = rows_.size();
}

// ------------------------------------------------------------------ reading

std::string row_variant(const nlohmann::json& row) {
  if (row.contains("variant") && row["variant"].is_string()) return row["variant"].get<std::string>();
  return row.value("backend", std::string());
}

std::string row_key(const nlohmann::json& row) { return row.value("case_id", std::string()) + "|" + row_variant(row); }

nlohmann::json load_report(const std::string& file) { return report_from_json(jsonu::load_file(file), file); }

namespace {

/// Derive the figures of `row` (row `index` of `file`) when it lacks "derived"
/// (every row of a version 1 report; rows a resumed run took from an older
/// journal), against the report's ceilings.
void derive_if_missing(nlohmann::json& row, const CeilingRates& ceilings, const std::string& file, size_t index) {
  if (row.contains("derived")) return;
  try {
    const auto work = row.value("work", std::optional<WorkFigures>());
    const auto timing = row.value("timing", PassTimings());
    row["derived"] = derive_row(work, timing, row.value("problem", nlohmann::json()), ceilings);
  } catch (const InputError& e) {
    throw InputError(file, jsonu::child_path("/results", index) + e.json_path(), e.what());
  } catch (const std::exception& e) {  // only without schema validation (a malformed field)
    throw InputError(file, jsonu::child_path("/results", index), std::string("malformed row: ") + e.what());
  }
}

/// A row of a version 1 or 2 report (before variants): the backend at its
/// defaults, as its variant and "options": {} when absent.
void upgrade_row(nlohmann::json& row) {
  if (!row.contains("variant")) row["variant"] = row.value("backend", std::string());
  if (!row.contains("options")) row["options"] = nlohmann::json::object();
}

/// derive_if_missing() for every row of `doc`.
void derive_missing(nlohmann::json& doc, const std::string& file) {
  const CeilingRates ceilings = ceiling_rates(doc.value("ceilings", nlohmann::json()));
  auto& rows = doc["results"];
  for (size_t i = 0; i < rows.size(); ++i) derive_if_missing(rows[i], ceilings, file, i);
}

}  // namespace

namespace {

/// The version first: it says which schema applies (and how to upgrade).
int checked_version(const nlohmann::json& doc, const std::string& file) {
  const auto& ver = jsonu::require(doc, "schema_version", file, "");
  if (!ver.is_number_integer() || ver.get<int64_t>() < kOldestReportSchemaVersion ||
      ver.get<int64_t>() > kReportSchemaVersion)
    throw InputError(file, "/schema_version",
                     "unsupported report schema version " + jsonu::show(ver) + " (this attnbench reads " +
                         std::to_string(kOldestReportSchemaVersion) + " to " + std::to_string(kReportSchemaVersion) +
                         ")");
  return ver.get<int>();
}

/// Beyond the schema: one row per (case_id, variant) (row_variant()). Remembers
/// each row's index; throws InputError naming `file`, the second row and the first.
class RowKeys {
 public:
  explicit RowKeys(const std::string& file) : file_(file) {}
  void add(const nlohmann::json& row, size_t i) {
    jsonu::require_object(row, file_, jsonu::child_path("/results", i));
    add(row.value("case_id", ""), row_variant(row), i);
  }
  /// add() of a row with this case_id and variant.
  void add(const std::string& case_id, const std::string& variant, size_t i) {
    const std::string rp = jsonu::child_path("/results", i);
    const auto [at, fresh] = first_row_.emplace(case_id + '\0' + variant, i);
    if (!fresh)
      throw InputError(file_, rp,
                       "duplicate row (case_id \"" + case_id + "\", backend variant \"" + variant + "\"), already at " +
                           jsonu::child_path("/results", at->second) +
                           " (a report holds one row per case and backend variant)");
  }

 private:
  const std::string& file_;
  std::unordered_map<std::string, size_t> first_row_;
};

}  // namespace

nlohmann::json report_from_json(nlohmann::json doc, const std::string& file) {
  jsonu::require_object(doc, file, "");
  const int version = checked_version(doc, file);
  validate_report_schema(doc, file);
  const auto& results = jsonu::require(doc, "results", file, "");
  if (!results.is_array()) throw InputError(file, "/results", "expected an array of rows, got " + jsonu::show(results));
  RowKeys keys(file);
  for (size_t i = 0; i < results.size(); ++i) keys.add(results[i], i);
  derive_missing(doc, file);
  if (version < 3) {  // rows before variants: the backend at its defaults
    for (auto& row : doc["results"]) upgrade_row(row);
    doc["schema_version"] = kReportSchemaVersion;
    doc["upgraded_from"] = version;
  }
  return doc;
}

namespace {

std::atomic<uint64_t> rows_read_fast{0};

/// A row's (case_id, variant) as row_key() reads them, when RapidJSON's row is
/// an object whose case_id, variant and backend are strings or absent (else
/// false: the nlohmann path gives the error row.value() gives).
#if defined(ATTNBENCH_HAVE_RAPIDJSON)
bool fast_key(const rapidjson::Value& row, std::string& case_id, std::string& variant) {
  if (!row.IsObject()) return false;
  auto text = [&](const char* key, std::string& out) {
    const auto m = row.FindMember(key);
    if (m == row.MemberEnd()) return true;
    if (!m->value.IsString()) return false;
    out.assign(m->value.GetString(), m->value.GetStringLength());
    return true;
  };
  const auto v = row.FindMember("variant");
  if (v != row.MemberEnd() && v->value.IsString()) variant.assign(v->value.GetString(), v->value.GetStringLength());
  else if (!text("backend", variant)) return false;
  return text("case_id", case_id);
}
#endif

}  // namespace

uint64_t report_rows_read_fast() { return rows_read_fast.load(); }

nlohmann::json stream_report(const std::string& file, const RowSink& on_row, int* file_version,
                             const nlohmann::json* parts) {
  RowKeys keys(file);
  int row_version = 0;  // the version stated before "results" (0: not yet)
  auto version_from = [&](const nlohmann::json& root) {
    if (row_version == 0 && root.contains("schema_version"))  // before any row is read against the schema
      row_version = checked_version(root, file);
  };
  auto slow_row = [&](nlohmann::json&& row, size_t i, const nlohmann::json& root) {
    version_from(root);
    // The schema before the key (as load_report() validates the document before
    // its keys): a row whose case_id is not a string is exit 2 naming it.
    jsonu::require_object(row, file, jsonu::child_path("/results", i));
    validate_report_row(row, file, jsonu::child_path("/results", i));
    keys.add(row, i);
    if (row_version > 0 && row_version < 3) upgrade_row(row);  // a row before variants
    on_row(std::move(row), i);
  };
  // The parts handed: those asked for and what the key and upgrade_row() read.
  nlohmann::json wanted;
  if (parts != nullptr) {
    wanted = *parts;
    for (const char* key : {"case_id", "backend", "variant"}) wanted[key] = true;
  }
#if defined(ATTNBENCH_HAVE_RAPIDJSON)
  auto fast_row = [&](const rapidjson::Value& row, size_t i, const nlohmann::json& root) {
    std::string case_id, variant;
    // The quick schema check's "valid" is final (validate_report_row() starts
    // with it); a row it does not accept goes the nlohmann way, where valijson decides.
    if (!fast_key(row, case_id, variant) || !row_passes_quick_check(row))
      return slow_row(jsonu::to_nlohmann(row), i, root);
    version_from(root);
    keys.add(case_id, variant, i);
    nlohmann::json r = jsonu::to_nlohmann(row, parts != nullptr ? &wanted : nullptr);
    if (row_version > 0 && row_version < 3) upgrade_row(r);
    rows_read_fast.fetch_add(1, std::memory_order_relaxed);
    on_row(std::move(r), i);
  };
#else
  const jsonu::FastElementSink fast_row;  // never called: every row goes to slow_row
#endif
  nlohmann::json doc = jsonu::stream_file_fast(file, "results", fast_row, slow_row);
  jsonu::require_object(doc, file, "");
  const int version = checked_version(doc, file);
  validate_report_schema(doc, file);  // the header; "results" is [] here
  const auto& results = jsonu::require(doc, "results", file, "");
  if (!results.is_array()) throw InputError(file, "/results", "expected an array of rows, got " + jsonu::show(results));
  if (file_version != nullptr) *file_version = version;
  if (version < kReportSchemaVersion) {
    doc["schema_version"] = kReportSchemaVersion;
    doc["upgraded_from"] = version;
  }
  return doc;
}

// ------------------------------------------------------------------ merge

namespace {

/// The merge built one input at a time, shared by merge_reports() (documents)
/// and merge_report_files() (rows streamed): which output slot each row takes
/// (place_row) and the merged header (check_environment, add_input).
class Merger {
 public:
  explicit Merger(const MergeOptions& opts) : opts_(opts) {}

  /// Where the output header starts: the first input's header.
  void start(const std::string& first_file, const nlohmann::json& first_header) {
    first_file_ = first_file;
    out_ = first_header;
    out_.erase("results");
    out_["merged_from"] = nlohmann::json::array();
    first_id_ = env::comparable_identity(first_header.value("environment", nlohmann::json::object()));
  }

  /// Throws InputError naming `file`'s /environment when it differs from the
  /// first input's and that is not allowed.
  void check_environment(const std::string& file, const nlohmann::json& header) const {
    const nlohmann::json id = env::comparable_identity(header.value("environment", nlohmann::json::object()));
    if (id != first_id_ && !opts_.allow_env_mismatch)
      throw InputError(file, "/environment",
                       "environment " + id.dump() + " differs from " + first_file_ + "'s " + first_id_.dump() +
                           " (pass --allow-env-mismatch to merge anyway)");
  }

  /// The output slot of row `i` of `file`: a new one (== slots() - 1 after the
  /// call) or, with replace_duplicates, the earlier row's. Throws InputError
  /// naming the row when its (case_id, variant) is already taken otherwise.
  size_t place_row(const std::string& file, size_t i, const nlohmann::json& row) {
    const auto [it, fresh] = index_.emplace(row_key(row), index_.size());
    if (!fresh && !opts_.replace_duplicates)
      throw InputError(file, jsonu::child_path("/results", i),
                       "row (case_id \"" + row.value("case_id", "") + "\", backend variant \"" + row_variant(row) +
                           "\") is already in an earlier input (pass --replace to keep the later one)");
    return it->second;
  }
  size_t slots() const { return index_.size(); }
  /// The slot of a row from no input: a new one when its (case_id, variant) is
  /// not placed yet, else the placed row's (first wins; nothing replaced).
  size_t place_new_row(const nlohmann::json& row) { return index_.emplace(row_key(row), index_.size()).first->second; }

  /// The header fields an input adds: its "merged_from" entry (`rows`: its row
  /// count), the earliest start, the latest finish, ceilings, backends.
  void add_input(const std::string& file, const nlohmann::json& doc, size_t rows) {
    nlohmann::json src = {{"file", file}, {"rows", rows}};
    if (doc.contains("started") && doc["started"].is_string()) {
      src["started"] = doc["started"];
      const std::string s = doc["started"].get<std::string>();
      if (started_.empty() || s < started_) started_ = s;  // ISO 8601 UTC sorts as text
    }
    if (doc.contains("command") && doc["command"].is_string()) src["command"] = doc["command"];
    if (doc.contains("finished") && doc["finished"].is_string()) {
      const std::string f = doc["finished"].get<std::string>();
      if (f > finished_) finished_ = f;
    } else {
      any_unfinished_ = true;
    }
    if ((!out_.contains("ceilings") || out_["ceilings"].is_null() || !out_["ceilings"].value("measured", false)) &&
        doc.contains("ceilings") && doc["ceilings"].is_object())
      out_["ceilings"] = doc["ceilings"];
    if (doc.contains("backends") && doc["backends"].is_array()) {
      std::vector<std::string> all = out_.value("backends", std::vector<std::string>{});
      for (const auto& b : doc["backends"])
        if (b.is_string() && std::find(all.begin(), all.end(), b.get<std::string>()) == all.end())
          all.push_back(b.get<std::string>());
      out_["backends"] = all;
    }
    out_["merged_from"].push_back(src);
  }

  /// The merged header (no "results").
  nlohmann::json header() const {
    nlohmann::json out = out_;
    if (!started_.empty()) out["started"] = started_;
    out["finished"] = any_unfinished_ ? nlohmann::json(nullptr) : nlohmann::json(finished_);
    if (out.contains("shard")) out.erase("shard");
    return out;
  }

 private:
  const MergeOptions& opts_;
  std::string first_file_;
  nlohmann::json out_, first_id_;
  std::unordered_map<std::string, size_t> index_;  ///< row key -> output slot
  std::string started_, finished_;
  bool any_unfinished_ = false;
};

}  // namespace

nlohmann::json merge_reports(const std::vector<std::pair<std::string, nlohmann::json>>& inputs,
                             const MergeOptions& opts) {
  if (inputs.empty()) throw InputError("<command line>", "", "merge needs at least one report");
  Merger m(opts);
  m.start(inputs.front().first, inputs.front().second);
  nlohmann::json results = nlohmann::json::array();
  for (const auto& [file, doc] : inputs) {
    m.check_environment(file, doc);
    const auto& rows = doc.at("results");
    for (size_t i = 0; i < rows.size(); ++i) {
      const size_t slot = m.place_row(file, i, rows[i]);
      if (slot < results.size()) results[slot] = rows[i];
      else results.push_back(rows[i]);
    }
    m.add_input(file, doc, rows.size());
  }
  nlohmann::json out = m.header();
  out["results"] = std::move(results);
  return out;
}

namespace {

/// The rows of a streamed merge, kept on disk until the header is known: an
/// unlinked file next to the output holding each placed row, as the output
/// will hold it (jsonu::dump_streamed_element()) when the row is final (it has
/// "derived", "variant" and "options": normalise_row() leaves it as it is),
/// else as compact JSON to be read back and normalised; memory is one (offset,
/// length, input, final) record per output row.
class RowSpill {
 public:
  explicit RowSpill(const std::string& output) {
    static std::atomic<unsigned> counter{0};
    const std::string path = output + ".rows.tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0) throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
    ::unlink(path.c_str());  // gone with the descriptor, whatever happens
    path_ = path;
  }
  ~RowSpill() { ::close(fd_); }
  RowSpill(const RowSpill&) = delete;
  RowSpill& operator=(const RowSpill&) = delete;

  /// Store `row` (row `index` of input `input`) in output slot `slot` (a new slot is slots()).
  void put(size_t slot, size_t input, size_t index, const nlohmann::json& row) {
    const bool final = row.contains("derived") && row.contains("variant") && row.contains("options");
    const std::string text = final ? jsonu::dump_streamed_element(row)
                                   : row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    write_at(end_, text);
    const Record r{end_, text.size(), input, index, final};
    if (slot < records_.size()) records_[slot] = r;  // --replace: the later row, in the earlier one's place
    else records_.push_back(r);
    end_ += text.size();
  }
  size_t slots() const { return records_.size(); }
  size_t input_of(size_t slot) const { return records_[slot].input; }
  size_t index_of(size_t slot) const { return records_[slot].index; }
  /// True when `slot` holds its row as the output will (text()), else as compact JSON.
  bool final_of(size_t slot) const { return records_[slot].final; }
  /// The text stored for `slot`.
  std::string text(size_t slot) const {
    const Record& r = records_[slot];
    std::string text(r.length, '\0');
    size_t done = 0;
    while (done < r.length) {
      const ssize_t n = ::pread(fd_, text.data() + done, r.length - done, static_cast<off_t>(r.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("cannot read back " + path_ + ": " + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    return text;
  }

 private:
  struct Record {
    uint64_t offset;
    size_t length;
    size_t input, index;  ///< the row's input and its index in that input's "results"
    bool final;           ///< stored as the output holds it
  };
  void write_at(uint64_t at, const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::pwrite(fd_, text.data() + done, text.size() - done, static_cast<off_t>(at + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
  }
  int fd_ = -1;
  std::string path_;
  uint64_t end_ = 0;
  std::vector<Record> records_;
};

/// A spilled row (row `index` of `file`, a report of schema version `version`)
/// as load_report() leaves it: "derived" figures against its report's ceilings
/// when it has none, and, from a report older than version 3, its backend as
/// variant and "options": {} (report_from_json()). Throws InputError as
/// load_report() does for a row whose figures cannot be derived.
void normalise_row(nlohmann::json& row, const nlohmann::json& header, int version, const std::string& file,
                   size_t index) {
  if (!row.contains("derived")) derive_if_missing(row, ceiling_rates(header.value("ceilings", nlohmann::json())), file, index);
  if (version < 3) upgrade_row(row);
}

}  // namespace

struct MergedReportWriter::Impl {
  Impl(const std::string& out, const MergeOptions& opts, Rank r) : output(out), merger(opts), rank(std::move(r)) {
    try {
      spill = std::make_unique<RowSpill>(output);
    } catch (const std::runtime_error& e) {
      throw InputError(output, "", e.what());
    }
  }
  /// Store `row` in `slot` and note its rank.
  void put(size_t slot, size_t input, size_t index, const nlohmann::json& row) {
    spill->put(slot, input, index, row);  // a write failure: std::runtime_error naming the scratch file
    if (!rank) return;
    if (slot < ranks.size()) ranks[slot] = rank(row);
    else ranks.push_back(rank(row));
  }
  void start(const std::string& file, const nlohmann::json& header) {
    if (!started) merger.start(file, header);
    started = true;
  }
  std::string output;
  Merger merger;
  Rank rank;
  std::unique_ptr<RowSpill> spill;
  std::vector<std::pair<size_t, size_t>> ranks;  ///< per slot, with `rank`
  bool started = false;
};

MergedReportWriter::MergedReportWriter(const std::string& output, const MergeOptions& opts, Rank rank)
    : impl_(std::make_unique<Impl>(output, opts, std::move(rank))) {}

MergedReportWriter::~MergedReportWriter() = default;

void MergedReportWriter::add_row(const std::string& file, size_t input, size_t index, const nlohmann::json& row) {
  impl_->put(impl_->merger.place_row(file, index, row), input, index, row);
}

bool MergedReportWriter::add_row_if_new(const nlohmann::json& row) {
  const size_t before = impl_->merger.slots();
  const size_t slot = impl_->merger.place_new_row(row);
  if (slot < before) return false;
  impl_->put(slot, SIZE_MAX, 0, row);
  return true;
}

void MergedReportWriter::check_environment(const std::string& file, const nlohmann::json& header) {
  impl_->start(file, header);
  impl_->merger.check_environment(file, header);
}

void MergedReportWriter::add_input(const std::string& file, const nlohmann::json& header, size_t rows) {
  impl_->start(file, header);
  impl_->merger.add_input(file, header, rows);
}

size_t MergedReportWriter::rows() const { return impl_->spill->slots(); }

nlohmann::json MergedReportWriter::header() const { return impl_->merger.header(); }

void MergedReportWriter::write(const nlohmann::json& header, const Normalise& normalise) {
  RowSpill& spill = *impl_->spill;
  std::vector<size_t> order(spill.slots());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (impl_->rank)
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return impl_->ranks[a] < impl_->ranks[b]; });
  // The output: the header's members and "results" in the order nlohmann writes
  // them (write_json_atomic() of the document), the rows read back one at a time.
  const std::map<std::string, jsonu::ArrayProducer> arrays = {
      {"results", [&](const jsonu::ElementWriter& emit) {
         for (const size_t slot : order) {
           if (spill.final_of(slot)) {
             emit.dumped(spill.text(slot));
             continue;
           }
           nlohmann::json row = nlohmann::json::parse(spill.text(slot));
           if (normalise && spill.input_of(slot) != SIZE_MAX) normalise(row, spill.input_of(slot), spill.index_of(slot));
           emit(row);
         }
       }}};
  try {
    AtomicFileWriter out(impl_->output);
    jsonu::dump_streamed(header, arrays, [&](std::string_view text) { out.write(text); });
    out.write("\n");
    out.commit();
  } catch (const std::runtime_error& e) {
    if (dynamic_cast<const InputError*>(&e)) throw;
    throw InputError(impl_->output, "", e.what());
  }
}

MergeTotals merge_report_files(const std::vector<std::string>& files, const std::string& output,
                               const MergeOptions& opts) {
  if (files.empty()) throw InputError("<command line>", "", "merge needs at least one report");
  MergedReportWriter merged(output, opts);
  std::vector<nlohmann::json> headers;
  std::vector<int> versions;
  // The first merge error (environment, duplicate row) in the order merge_reports()
  // finds it; every input is still read to the end, so that an invalid input
  // later on is reported first, as load_report() on every input would.
  std::optional<InputError> merge_error;
  for (size_t k = 0; k < files.size(); ++k) {
    const std::string& file = files[k];
    std::optional<InputError> row_error;
    size_t rows = 0;
    int version = 0;
    nlohmann::json header = stream_report(file, [&](nlohmann::json&& row, size_t i) {
      ++rows;
      if (merge_error || row_error) return;  // reading on for input errors only
      try {
        merged.add_row(file, k, i, row);
      } catch (const InputError& e) {
        row_error = e;
      }
    }, &version);
    versions.push_back(version);
    if (!merge_error) {
      try {
        merged.check_environment(file, header);  // merge_reports() checks it before the rows
      } catch (const InputError& e) {
        merge_error = e;
      }
      if (!merge_error && row_error) merge_error = row_error;
    }
    merged.add_input(file, header, rows);
    header.erase("results");
    headers.push_back(std::move(header));
  }
  if (merge_error) throw *merge_error;
  merged.write(merged.header(), [&](nlohmann::json& row, size_t k, size_t index) {
    normalise_row(row, headers[k], versions[k], files[k], index);
  });
  return {files.size(), merged.rows()};
}

// ------------------------------------------------------------------ mask thumbnail

nlohmann::json mask_thumbnail(const std::string& rendering, int64_t q_block, int64_t kv_block, int max_cells) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < rendering.size()) {
    size_t nl = rendering.find('\n', pos);
    std::string line = rendering.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  if (lines.empty()) return nullptr;
  if (max_cells < 1) throw std::invalid_argument("mask_thumbnail: max_cells must be >= 1");
  const size_t width = lines.front().size();
  for (const auto& l : lines) {
    if (l.size() != width) throw std::invalid_argument("mask_thumbnail: ragged rendering");
    if (l.find_first_not_of("#+.") != std::string::npos)
      throw std::invalid_argument("mask_thumbnail: unexpected character in rendering (expected # + .)");
  }
  const size_t mc = static_cast<size_t>(max_cells);
  const size_t fq = (lines.size() + mc - 1) / mc;  // q-blocks per cell
  const size_t fk = (width + mc - 1) / mc;         // kv-blocks per cell
  nlohmann::json rows = nlohmann::json::array();
  for (size_t r0 = 0; r0 < lines.size(); r0 += fq) {
    std::string out;
    for (size_t c0 = 0; c0 < width; c0 += fk) {
      bool all_full = true, all_empty = true;
      for (size_t r = r0; r < std::min(r0 + fq, lines.size()); ++r)
        for (size_t c = c0; c < std::min(c0 + fk, width); ++c) {
          const char ch = lines[r][c];
          all_full = all_full && ch == '#';
          all_empty = all_empty && ch == '.';
        }
      out += all_full ? '#' : all_empty ? '.' : '+';
    }
    rows.push_back(out);
  }
  return {{"rows", rows},
          {"q_block", q_block},
          {"kv_block", kv_block},
          {"cell_q_blocks", static_cast<int64_t>(fq)},
          {"cell_kv_blocks", static_cast<int64_t>(fk)}};
}

nlohmann::json mask_thumbnail_for(const Problem& p, int max_cells) {
  constexpr int64_t kTile = 128;  // FlexAttention's default BlockMask tile
  Problem one = p;                // only batch row 0 is drawn: build just that row
  one.batch = 1;
  for (auto& term : one.mask) {
    if (auto* d = std::get_if<DocumentTerm>(&term)) {
      // erase(), not resize(1): GCC 12 at -O3 misreads resize's value-initialisation (-Warray-bounds)
      if (d->doc_ids.size() > 1) d->doc_ids.erase(d->doc_ids.begin() + 1, d->doc_ids.end());
      if (d->doc_lengths.size() > 1) d->doc_lengths.erase(d->doc_lengths.begin() + 1, d->doc_lengths.end());
    } else if (auto* pad = std::get_if<PaddingTerm>(&term)) {
      if (pad->seq_lens_q.size() > 1) pad->seq_lens_q.erase(pad->seq_lens_q.begin() + 1, pad->seq_lens_q.end());
      if (pad->seq_lens_k.size() > 1) pad->seq_lens_k.erase(pad->seq_lens_k.begin() + 1, pad->seq_lens_k.end());
    }
  }
  return mask_thumbnail(render_block_mask(build_block_mask(one, kTile, kTile), 0, 0), kTile, kTile, max_cells);
}

}  // namespace attnbench
