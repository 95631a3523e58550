// Scale tests of the report readers (compare, merge, summary): a large report
// built from a kept one, and the peak memory of the attnbench binary reading it.
#pragma once

#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnbench::test {

/// `doc` with `rows` rows: its rows repeated with case ids suffixed "#<n>",
/// each with a `blob`-character extra.blob (row size) and without "derived"
/// (derived on load). Written to `path` pretty-printed, as tests save reports.
inline void write_big_report(nlohmann::json doc, size_t rows, size_t blob, const std::filesystem::path& path) {
  nlohmann::json out = nlohmann::json::array();
  const std::string filler(blob, 'x');
  for (int n = 0; out.size() < rows; ++n)
    for (nlohmann::json row : doc["results"]) {
      if (out.size() == rows) break;
      row["case_id"] = row["case_id"].get<std::string>() + "#" + std::to_string(n);
      row["extra"]["blob"] = filler;
      row.erase("derived");
      out.push_back(std::move(row));
    }
  doc["results"] = std::move(out);
  std::ofstream(path) << doc.dump(1);
}

/// Peak resident set size (bytes) of `argv` run as a child process, its output
/// discarded; `exit_code` receives its exit status (-1 when it did not exit).
/// Call ::malloc_trim(0) first: a forked child starts with this process's
/// resident pages in its peak.
inline long peak_rss_of(const std::vector<std::string>& argv, int& exit_code) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* null = std::freopen("/dev/null", "w", stdout);
    null = std::freopen("/dev/null", "w", stderr);
    (void)null;
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return ru.ru_maxrss * 1024L;  // Linux: kilobytes
}

/// Peak memory of `argv` beyond the binary's own footprint (`binary --version`:
/// a CUDA build maps about 230 MB of libraries before reading anything).
inline long reader_peak_rss(const std::string& binary, const std::vector<std::string>& argv, int& exit_code) {
  ::malloc_trim(0);
  int idle_code = -1;
  const long idle = peak_rss_of({binary, "--version"}, idle_code);
  return peak_rss_of(argv, exit_code) - idle;
}

}  // namespace attnbench::test
