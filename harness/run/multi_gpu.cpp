// --gpus: see multi_gpu.hpp.
#include "harness/run/multi_gpu.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "harness/backend/backend.hpp"
#include "harness/device/device.hpp"
#include "harness/device/environment.hpp"
#include "harness/model/errors.hpp"
#include "harness/model/printable.hpp"
#include "harness/run/process.hpp"
#include "harness/run/progress.hpp"
#include "harness/run/runner.hpp"
#include "reports/journal.hpp"
#include "reports/report.hpp"

namespace attnbench {

namespace {

/// One shard's child and what the parent knows of it.
struct Shard {
  int gpu = 0, index = 0;
  std::filesystem::path dir;
  std::unique_ptr<ChildProcess> child;
  std::optional<ChildStatus> status;
  int64_t expected = 0, done = 0;
  std::streamoff read_to = 0;  ///< journal bytes counted so far
  std::string partial;         ///< an unfinished last line
};

/// Count the rows appended to the shard's journal since the last call.
void count_new_rows(Shard& s) {
  std::ifstream in(s.dir / "journal.jsonl", std::ios::binary);
  if (!in) return;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < s.read_to) s.read_to = 0, s.done = 0, s.partial.clear();  // truncated: a fresh journal
  if (size == s.read_to) return;
  in.seekg(s.read_to);
  std::string chunk(static_cast<size_t>(size - s.read_to), '\0');
  in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  s.read_to = size;
  s.partial += chunk;
  size_t pos = 0, nl;
  while ((nl = s.partial.find('\n', pos)) != std::string::npos) {
    if (s.partial.compare(pos, 7, "{\"row\":") == 0) ++s.done;
    pos = nl + 1;
  }
  s.partial.erase(0, pos);
}

std::string progress_text(const std::vector<Shard>& shards, double elapsed) {
  int64_t done = 0, total = 0;
  std::string per;
  for (const auto& s : shards) {
    done += s.done;
    total += s.expected;
    per += " | gpu" + std::to_string(s.gpu) + " " + std::to_string(s.done) + "/" + std::to_string(s.expected) +
           (s.status ? (s.status->exited && s.status->exit_code <= 1 ? " done" : " FAILED") : "");
  }
  return "[" + std::to_string(shards.size()) + " GPUs] " + std::to_string(done) + "/" + std::to_string(total) +
         " rows" + per + " | " + Progress::format_duration(elapsed) + " elapsed";
}

/// Rows for the (case, backend) units of `s` missing from its journal, when the
/// shard did not end cleanly.
void add_failure_rows(const Scenario& scenario, const RunOptions& opts, const std::vector<std::string>& names,
                      const Shard& s, int n, const std::set<std::string>& have, nlohmann::json& rows) {
  RunOptions so = opts;
  so.shard_index = s.index;
  so.shard_count = n;
  const std::string tail = tail_of_file((s.dir / "stderr.log").string(), 20, 4000);
  const bool signaled = s.status && !s.status->exited && !s.status->timed_out;
  const std::string shard = "shard " + std::to_string(s.index) + "/" + std::to_string(n) + " on GPU " +
                            std::to_string(s.gpu) + " " + (s.status ? describe(*s.status) : std::string("did not start"));
  bool first = true;  // the first unfinished row is the one the shard died on
  std::map<std::string, std::unique_ptr<Backend>> variants;  // label -> the variant (its name and options)
  for (const auto& b : names) variants[b] = BackendRegistry::create_variant(b);
  for (size_t ci : selected_cases(scenario, so)) {
    Case c = scenario.cases[ci];
    if (opts.seed) c.problem.seed = *opts.seed;
    for (const auto& b : names) {
      if (have.count(c.id + "|" + b)) continue;
      ReportRow r;
      r.case_id = c.id;
      r.backend = variants[b]->name();
      r.variant = b;
      r.options = variants[b]->options_json();
      r.problem = to_json(c.problem, true);
      r.status = first && signaled ? RowStatus::crashed : RowStatus::error;
      r.message = first ? shard + " while running this row" : "not run: " + shard + " before reaching it";
      if (first && !tail.empty()) r.message += "; last lines of its stderr:\n" + tail;
      first = false;
      r.extra = {{"shard", {{"index", s.index}, {"gpu", s.gpu}}}};
      rows.push_back(r.to_json());
    }
  }
}

/// Create folder `path` (and its parents); a file in the way is bad input naming it.
void make_dir(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec || !std::filesystem::is_directory(path, ec))
    throw InputError(path, "", "cannot create this folder of the output: " +
                                   (ec ? ec.message() : std::string("a file is in the way")));
}

/// --gpus --resume with any device list or count: read every shard journal under
/// DIR/shards/ (their identity must be this run's, shard and device aside: another
/// seed or option is exit 2), keep each (case, backend) row once if it belongs to
/// this run (rows_of_this_run), and hand each new shard a journal holding exactly
/// the rows of its cases, so that its --resume runs only the rest. Folders of GPUs
/// no longer in the list are removed once their rows are handed on.
void redistribute_for_resume(const Scenario& scenario, const RunOptions& opts, const std::vector<std::string>& names,
                             const std::filesystem::path& dir, std::vector<Shard>& shards) {
  namespace fs = std::filesystem;
  const int n = static_cast<int>(shards.size());
  std::vector<nlohmann::json> rows;
  std::vector<fs::path> old_dirs;
  nlohmann::json header, started;
  std::error_code ec;
  for (fs::directory_iterator it(dir / "shards", ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path jp = it->path() / "journal.jsonl";
    if (!it->is_directory() || it->path().filename().string().rfind("gpu", 0) != 0) continue;
    old_dirs.push_back(it->path());
    if (!fs::exists(jp)) continue;
    if (!is_regular_file_path(jp.string())) throw InputError(jp.string(), "", "the journal is not a regular file");
    JournalContents j;
    try {
      j = read_journal(jp.string());
    } catch (const InputError& e) {
      std::fprintf(stderr, "attnbench: warning: --resume: %s; its rows are run again\n", printable(e.what()).c_str());
      continue;
    }
    RunOptions so = opts;
    so.device = 0;
    so.shard_index = 0;
    so.shard_count = n;
    check_resume_identity(j.identity, resume_identity(scenario, so, names), jp.string(), {"shard"});
    if (header.is_null()) header = j.header;
    rows.insert(rows.end(), j.rows.begin(), j.rows.end());
  }
  if (ec) throw InputError((dir / "shards").string(), "", "cannot read the shard folders: " + ec.message());
  if (header.is_null()) return;  // nothing to resume
  RunOptions all = opts;
  all.shard_index = 0;
  all.shard_count = 1;
  rows = rows_of_this_run(scenario, all, names, rows, header, (dir / "shards").string());
  std::map<std::string, size_t> case_index;
  for (size_t i = 0; i < scenario.cases.size(); ++i) case_index[scenario.cases[i].id] = i;
  for (auto& s : shards) {
    RunOptions so = opts;
    so.device = 0;
    so.shard_index = s.index;
    so.shard_count = n;
    JournalContents j;
    j.identity = resume_identity(scenario, so, names);
    j.header = header;
    j.header["shard"] = std::to_string(s.index) + "/" + std::to_string(n);
    for (const auto& r : rows)
      if (static_cast<int>(case_index[r.value("case_id", "")] % static_cast<size_t>(n)) == s.index) j.rows.push_back(r);
    rewrite_journal((s.dir / "journal.jsonl").string(), j);
  }
  for (const auto& d : old_dirs) {
    bool kept = false;
    for (const auto& s : shards) kept = kept || fs::equivalent(d, s.dir, ec);
    if (!kept) fs::remove_all(d, ec);
  }
}

/// Start every shard, draw progress until all have ended; SIGINT/SIGTERM are
/// passed on to the shards once.
void run_shards(std::vector<Shard>& shards, const std::vector<std::string>& child_args) {
  const std::string exe = self_executable();
  const int n = static_cast<int>(shards.size());
  for (auto& s : shards) {
    std::vector<std::string> argv = {exe, "run"};
    argv.insert(argv.end(), child_args.begin(), child_args.end());
    for (const std::string& a : {std::string("--shard"), std::to_string(s.index) + "/" + std::to_string(n),
                                 std::string("--out"), s.dir.string(), std::string("--device"), std::string("0")})
      argv.push_back(a);
    s.child = std::make_unique<ChildProcess>(argv, std::vector<std::pair<std::string, std::string>>{
                                                       {"CUDA_VISIBLE_DEVICES", std::to_string(s.gpu)}},
                                             (s.dir / "stdout.log").string(), (s.dir / "stderr.log").string());
  }
  const bool tty = isatty(fileno(stderr)) == 1;
  const auto t0 = std::chrono::steady_clock::now();
  std::string last;
  bool forwarded = false;
  for (;;) {
    bool running = false;
    for (auto& s : shards) {
      if (!s.status) s.status = s.child->wait_for(running ? 0 : 250);
      running = running || !s.status;
      count_new_rows(s);
    }
    if (stop_signal() && !forwarded) {
      for (auto& s : shards) s.child->signal_group(SIGTERM);  // each finishes its row and writes its report
      forwarded = true;
    }
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string text = progress_text(shards, el);
    const std::string counts = text.substr(0, text.rfind(" | "));
    if (tty) {
      std::fprintf(stderr, "\r\x1b[2K%s", text.c_str());
    } else if (counts != last) {
      std::fprintf(stderr, "%s\n", text.c_str());
    }
    last = counts;
    if (!running) break;
    if (shards.size() > 1) usleep(100000);
  }
  if (tty) std::fputs("\n", stderr);
}

}  // namespace

std::vector<int> parse_gpus(const std::string& spec) {
  const char* fake = std::getenv("ATTNBENCH_FAKE_GPUS");
  int count = 0;
  std::string what;
  if (fake && *fake) {
    count = std::atoi(fake);
    what = "ATTNBENCH_FAKE_GPUS=" + std::string(fake);
  } else {
    count = device::cuda_device_count();
    what = std::to_string(count) + " CUDA device(s) visible";
  }
  std::vector<int> out;
  if (spec == "all") {
    for (int g = 0; g < count; ++g) out.push_back(g);
  } else {
    size_t pos = 0;
    while (pos <= spec.size()) {
      const size_t comma = spec.find(',', pos);
      const std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      char* end = nullptr;
      const long g = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || g < 0 || g >= count)
        throw InputError("<command line>", "--gpus",
                         "\"" + item + "\" in \"" + spec + "\" is not a GPU index below " + std::to_string(count) +
                             " (" + what + ")");
      if (std::find(out.begin(), out.end(), static_cast<int>(g)) != out.end())
        throw InputError("<command line>", "--gpus", "GPU " + item + " is listed more than once");
      out.push_back(static_cast<int>(g));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  if (out.empty()) throw InputError("<command line>", "--gpus", "no GPU to run on (" + what + ")");
  return out;
}

RunSummary run_on_gpus(const Scenario& scenario, const RunOptions& opts, const std::vector<int>& gpus,
                       const std::vector<std::string>& child_args) {
  if (opts.shard_count != 1)
    throw InputError("<command line>", "--shard", "--gpus makes the shards itself; drop --shard");
  const std::vector<std::string> names = validate_run(scenario, opts);
  const std::filesystem::path dir(opts.out_dir);
  make_dir((dir / "shards").string());
  OutDirLock lock(opts.out_dir);
  const int n = static_cast<int>(gpus.size());
  std::vector<Shard> shards(gpus.size());
  for (int k = 0; k < n; ++k) {
    Shard& s = shards[static_cast<size_t>(k)];
    s.gpu = gpus[static_cast<size_t>(k)];
    s.index = k;
    s.dir = dir / "shards" / ("gpu" + std::to_string(s.gpu));
    make_dir(s.dir.string());
    RunOptions so = opts;
    so.shard_index = k;
    so.shard_count = n;
    s.expected = static_cast<int64_t>(selected_cases(scenario, so).size() * names.size());
  }
  if (opts.resume) redistribute_for_resume(scenario, opts, names, dir, shards);
  run_shards(shards, child_args);

  // Merge: every shard's journal (always current, even after a crash), then
  // rows for what a failed shard left undone; each journal is read one line at
  // a time and its rows wait in the merged report's scratch file
  // (MergedReportWriter, reports/report.hpp), so memory is a key per row.
  // Rows in the order an unsharded run writes them: scenario order, then --backends order.
  std::map<std::string, size_t> case_pos, backend_pos;
  for (size_t i = 0; i < scenario.cases.size(); ++i) case_pos[scenario.cases[i].id] = i;
  for (size_t i = 0; i < names.size(); ++i) backend_pos[names[i]] = i;
  auto pos = [](const std::map<std::string, size_t>& m, const std::string& k) {
    const auto it = m.find(k);
    return it == m.end() ? size_t{0} : it->second;
  };
  RunSummary sum;
  sum.report_path = (dir / "report.json").string();
  MergeOptions mo;
  mo.allow_env_mismatch = true;  // one host; each shard's GPU is in its own journal
  MergedReportWriter merged(sum.report_path, mo, [&](const nlohmann::json& r) {
    return std::make_pair(pos(case_pos, r.value("case_id", "")), pos(backend_pos, row_variant(r)));
  });
  nlohmann::json failure_rows = nlohmann::json::array(), shard_info = nlohmann::json::array();
  size_t inputs = 0;
  for (const auto& s : shards) {
    const std::string jp = (s.dir / "journal.jsonl").string();
    std::set<std::string> have;
    bool readable = false;
    if (std::filesystem::exists(jp)) {
      try {  // a journal that does not read is left out whole
        (void)read_journal(jp, [](nlohmann::json&&) {});
        readable = true;
      } catch (const InputError& e) {
        std::fprintf(stderr, "attnbench: shard %d: %s\n", s.index, printable(e.what()).c_str());
      }
    }
    if (readable) {
      size_t rows = 0;
      JournalContents j = read_journal(jp, [&](nlohmann::json&& r) {
        have.insert(row_key(r));
        merged.add_row(jp, inputs, rows++, r);
        sum.add(r.value("status", ""));
      });
      const nlohmann::json header = report_from_journal(j);  // "results": [] (the rows went to `merged`)
      merged.check_environment(jp, header);
      merged.add_input(jp, header, rows);
      ++inputs;
    }
    // A shard that ended without all its rows (whatever its exit code) gets rows saying so.
    if (static_cast<int64_t>(have.size()) < s.expected && !stop_signal())
      add_failure_rows(scenario, opts, names, s, n, have, failure_rows);
    shard_info.push_back({{"index", s.index}, {"gpu", s.gpu}, {"dir", s.dir.string()}, {"rows", have.size()},
                          {"ended", s.status ? describe(*s.status) : "did not start"}});
  }
  // one row per (case, backend), whatever the shards' journals held
  for (const auto& r : failure_rows)
    if (merged.add_row_if_new(r)) sum.add(r.value("status", ""));
  nlohmann::json header = inputs > 0 ? merged.header()
                                     : make_report_header(opts.command_line, {{"name", scenario.name}, {"file", scenario.file}},
                                                          opts.policy.to_json(), env::collect(opts.command_line, 0));
  header.erase("results");
  header["command"] = opts.command_line;
  header["backends"] = names;
  header["gpus"] = gpus;
  header["shards"] = shard_info;
  if (const int sig = stop_signal()) {
    header["finished"] = nullptr;
    header["interrupted"] = {{"signal", signal_name(sig)}, {"time", env::utc_now_iso8601()}};
    sum.interrupted_signal = sig;
  } else {
    header["finished"] = env::utc_now_iso8601();
  }
  merged.write(header);
  return sum;
}

}  // namespace attnbench
