// The run journal and the safe atomic file write: see journal.hpp.
#include "reports/journal.hpp"
#include "reports/report.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"

namespace attnbench {

namespace {

std::string errno_text() { return std::strerror(errno); }

/// write() all of `data` to `fd`; false on error (errno set).
bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string dump_line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, bool sync) : path_(std::move(path)), sync_(sync) {
  static std::atomic<unsigned> counter{0};
  tmp_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  fd_ = ::open(tmp_.c_str(), flags, 0644);
  if (fd_ < 0 && errno == EEXIST) {  // left by a crashed writer of the same pid: remove the entry, never follow it
    ::unlink(tmp_.c_str());
    fd_ = ::open(tmp_.c_str(), flags, 0644);
  }
  if (fd_ < 0) throw std::runtime_error("cannot create " + tmp_ + ": " + errno_text());
  buf_.reserve(kBuffer);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ < 0) return;  // committed (or failed and cleaned up)
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(std::string_view text) {
  if (fd_ < 0) throw std::logic_error("AtomicFileWriter::write after commit: " + path_);
  buf_.append(text);
  if (buf_.size() >= kBuffer) drain();
}

void AtomicFileWriter::drain() {
  if (!write_all(fd_, buf_.data(), buf_.size())) fail("write failed: " + tmp_ + ": " + errno_text());
  buf_.clear();
}

void AtomicFileWriter::fail(const std::string& what) {
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw std::runtime_error(what);
}

void AtomicFileWriter::commit() {
  if (fd_ < 0) throw std::logic_error("AtomicFileWriter::commit twice: " + path_);
  drain();
  if (sync_ && ::fsync(fd_) != 0) fail("write failed: " + tmp_ + ": " + errno_text());
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) {
    const std::string e = errno_text();
    ::unlink(tmp_.c_str());
    throw std::runtime_error("write failed: " + tmp_ + ": " + e);
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const std::string e = errno_text();
    ::unlink(tmp_.c_str());
    throw std::runtime_error("cannot rename " + tmp_ + " to " + path_ + ": " + e);
  }
}

void write_file_atomic(const std::string& path, const std::string& text, bool sync) {
  AtomicFileWriter w(path, sync);
  w.write(text);
  w.commit();
}

JournalWriter::JournalWriter(std::string path, bool fresh, const nlohmann::json& identity,
                             const nlohmann::json& header)
    : path_(std::move(path)) {
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC | (fresh ? O_TRUNC : 0);
  fd_ = ::open(path_.c_str(), flags, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open journal " + path_ + ": " + errno_text());
  if (fresh) append({{"attnbench_journal", kJournalVersion}, {"identity", identity}, {"header", header}});
}

JournalWriter::~JournalWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void JournalWriter::append(const nlohmann::json& line) {
  const std::string text = dump_line(line) + "\n";
  if (!write_all(fd_, text.data(), text.size()) || ::fsync(fd_) != 0)
    throw std::runtime_error("cannot append to journal " + path_ + ": " + errno_text());
}

JournalContents read_journal(const std::string& path) {
  std::vector<nlohmann::json> rows;
  JournalContents out = read_journal(path, [&](nlohmann::json&& row) { rows.push_back(std::move(row)); });
  out.rows = std::move(rows);
  return out;
}

JournalContents read_journal(const std::string& path, const JournalRowSink& on_row) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot read the journal");
  JournalContents out;
  std::set<std::string> keys;
  size_t line_no = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    if (in.eof()) {  // torn last line (no line break): the writer died mid-write
      out.dropped_partial = 1;
      break;
    }
    out.complete_bytes += line.size() + 1;
    const std::string where = "line " + std::to_string(line_no);
    nlohmann::json j = jsonu::parse_text(line, path + " " + where);  // InputError names file and line
    if (!j.is_object()) throw InputError(path, "", where + ": expected a JSON object");
    if (line_no == 1) {
      if (!j.contains("attnbench_journal") || j["attnbench_journal"] != kJournalVersion || !j.contains("header"))
        throw InputError(path, "", "line 1: not an attnbench journal of version " + std::to_string(kJournalVersion));
      out.identity = j.value("identity", nlohmann::json::object());
      out.header = j["header"];
      continue;
    }
    if (j.contains("row")) {
      auto& r = j["row"];
      if (!r.is_object() || !r.contains("case_id") || !r.contains("backend") || !r["case_id"].is_string() ||
          !r["backend"].is_string())
        throw InputError(path, "", where + ": a row needs string case_id and backend");
      if (keys.insert(row_key(r)).second) on_row(std::move(r));
    } else if (j.contains("field") && j["field"].is_string()) {
      out.header[j["field"].get<std::string>()] = j.value("value", nlohmann::json());
    } else if (j.contains("resumed")) {
      out.resumed.push_back(j["resumed"].is_string() ? j["resumed"].get<std::string>() : "");
      out.finished = false;
    } else if (j.contains("finished")) {
      out.finished = true;
      out.header["finished"] = j["finished"];
    } else if (j.contains("interrupted")) {
      out.header["interrupted"] = j["interrupted"];
    }
  }
  if (in.bad()) throw InputError(path, "", "cannot read the journal");
  if (line_no == 0 || out.header.is_null()) throw InputError(path, "", "empty journal");
  return out;
}

void drop_torn_tail(const std::string& path, const JournalContents& j) {
  if (!j.dropped_partial) return;
  if (::truncate(path.c_str(), static_cast<off_t>(j.complete_bytes)) != 0)
    throw std::runtime_error("cannot cut the torn last line off " + path + ": " + errno_text());
}

void rewrite_journal(const std::string& path, const JournalContents& j) {
  std::string text = dump_line({{"attnbench_journal", kJournalVersion}, {"identity", j.identity}, {"header", j.header}}) + "\n";
  for (const auto& t : j.resumed) text += dump_line({{"resumed", t}}) + "\n";
  for (const auto& r : j.rows) text += dump_line({{"row", r}}) + "\n";
  write_file_atomic(path, text);
}

nlohmann::json report_from_journal(const JournalContents& j) {
  nlohmann::json doc = j.header;
  if (!doc.is_object()) doc = nlohmann::json::object();
  if (!j.resumed.empty()) doc["resumed"] = j.resumed;
  doc["results"] = j.rows;
  return doc;
}

}  // namespace attnbench
