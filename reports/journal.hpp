// The run journal: DIR/journal.jsonl, one JSON object per line, appended and
// fsync'd as each row finishes, so that no finished row is lost to a crash,
// kill -9 or power cut. report.json is rebuilt from it (ReportWriter) and
// `attnbench run --resume` continues from it (docs/report-format.md, "Journal").
//
// Lines, in order:
//   {"attnbench_journal": 1, "identity": {...}, "header": {...}}   first line
//   {"row": {...}}                          one finished (case, backend) row
//   {"field": "ceilings", "value": {...}}   a header field set during the run
//   {"resumed": TIME, "command": "..."}     a --resume continued the run here
//   {"finished": TIME} | {"interrupted": {"signal": "SIGTERM", "time": TIME}}
// A last line without its newline (the writer was killed mid-line) is dropped.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnbench {

/// The journal format version (first line's "attnbench_journal").
constexpr int kJournalVersion = 1;

/// What read_journal() found.
struct JournalContents {
  nlohmann::json identity;            ///< what --resume compares (scenario, seed, options)
  nlohmann::json header;              ///< report header, with later "field" lines applied
  std::vector<nlohmann::json> rows;   ///< finished rows, first occurrence of each (case_id, backend)
  std::vector<std::string> resumed;   ///< times of earlier resumes
  bool finished = false;              ///< a {"finished"} line was seen (the run completed)
  size_t dropped_partial = 0;         ///< 1 when a torn last line was dropped
  size_t complete_bytes = 0;          ///< bytes up to the end of the last complete line
};

/// Read `path`. Throws InputError naming the file, the line ("line N") and the
/// problem for a malformed complete line, a missing or wrong first line.
JournalContents read_journal(const std::string& path);

/// What read_journal() hands each finished row when streaming.
using JournalRowSink = std::function<void(nlohmann::json&& row)>;

/// read_journal() one line at a time: each finished row (first occurrence of
/// each (case_id, backend)) goes to `on_row` as its line is read instead of into
/// the result's `rows` (left empty). Memory: one line and a key per row. The
/// same errors (rows before a malformed line have been handed by then).
JournalContents read_journal(const std::string& path, const JournalRowSink& on_row);

/// Cut a torn last line off the journal at `path` (truncate it to
/// `j.complete_bytes`), so appended lines start on a line of their own.
/// Throws std::runtime_error naming the file.
void drop_torn_tail(const std::string& path, const JournalContents& j);

/// Replace the journal at `path` atomically (write_file_atomic) with the first
/// line {identity, header of `j`}, one {"resumed"} line per `j.resumed` and one
/// {"row"} line per `j.rows`: what --resume keeps after dropping rows that do not
/// belong to the run, and the per-shard journals --gpus --resume hands out.
/// Throws std::runtime_error naming the file.
void rewrite_journal(const std::string& path, const JournalContents& j);

/// The report document a journal describes: header + "results" = rows (what
/// report.json would hold). `finished` stays as the header has it.
nlohmann::json report_from_journal(const JournalContents& j);

/// Appends lines to a journal; every append is one write() followed by fsync().
/// The file is opened with O_APPEND | O_NOFOLLOW | O_CLOEXEC (a planted symlink is
/// refused; child processes do not inherit it).
class JournalWriter {
 public:
  /// `fresh`: truncate and write the first line {identity, header}; otherwise
  /// append to the existing journal (resume). Throws std::runtime_error naming
  /// the file on any I/O failure.
  JournalWriter(std::string path, bool fresh, const nlohmann::json& identity, const nlohmann::json& header);
  ~JournalWriter();
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;
  /// Append `line` (one JSON object, no newline inside) plus '\n', then fsync.
  void append(const nlohmann::json& line);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

/// Write `text` to `path` atomically: a temporary file next to it created with
/// O_CREAT | O_EXCL | O_NOFOLLOW (never through a planted symlink or onto an
/// existing file), written, fsync'd (unless `sync` is false: transient files
/// such as an isolated unit's request and row), then renamed over `path`. Throws
/// std::runtime_error naming the file on failure (the temporary is removed).
void write_file_atomic(const std::string& path, const std::string& text, bool sync = true);

/// write_file_atomic() for text written piece by piece (a merged report, a
/// comparison's JSON: never whole in memory): the temporary file is created
/// by the constructor, write() appends through a 1 MiB buffer, commit() flushes,
/// fsyncs (unless `sync` is false) and renames it over `path`. Destroyed
/// without commit() (an exception on the way), the temporary is removed and
/// `path` is untouched. Every method throws std::runtime_error naming the file
/// on an I/O failure (the temporary is removed then).
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path, bool sync = true);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(std::string_view text);
  void commit();
  const std::string& path() const { return path_; }

 private:
  static constexpr size_t kBuffer = 1 << 20;
  void drain();
  [[noreturn]] void fail(const std::string& what);
  std::string path_, tmp_;
  bool sync_ = true;
  int fd_ = -1;
  std::string buf_;
};

}  // namespace attnbench
