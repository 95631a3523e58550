// The run journal (reports/journal.hpp), the amortised report rewrite
// (ReportWriter), the safe atomic write and the child-process plumbing
// (harness/device/process.hpp, shared by the run and the peers' workers) on
// their own; the CLI-level behaviour is in
// tests/test_cli_reliability.cpp.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "harness/model/errors.hpp"
#include "harness/model/json_util.hpp"
#include "harness/run/process.hpp"
#include "reports/journal.hpp"
#include "reports/report.hpp"
#include "tests/test_util.hpp"

using namespace attnbench;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path scratch(const std::string& name) { return test::scratch_path("journal", name); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ReportRow row(const std::string& id) {
  ReportRow r;
  r.case_id = id;
  r.backend = "cpu";
  r.status = RowStatus::crashed;
  r.message = "killed by SIGSEGV";
  return r;
}

}  // namespace

TEST_CASE("journal: rows, fields and the end are read back; a torn last line is dropped and cut off") {
  const fs::path p = scratch("j1.jsonl");
  {
    JournalWriter w(p.string(), true, {{"seed", 7}}, {{"schema_version", 1}, {"started", "2026-01-01T00:00:00Z"}});
    w.append({{"row", row("a").to_json()}});
    w.append({{"field", "ceilings"}, {"value", {{"measured", false}}}});
    w.append({{"row", row("b").to_json()}});
    w.append({{"row", row("a").to_json()}});  // a repeat keeps the first
  }
  JournalContents j = read_journal(p.string());
  CHECK(j.identity == json{{"seed", 7}});
  REQUIRE(j.rows.size() == 2);
  CHECK(j.rows[0]["case_id"] == "a");
  CHECK(j.rows[1]["status"] == "crashed");
  CHECK(j.header["ceilings"]["measured"] == false);
  CHECK_FALSE(j.finished);
  CHECK(j.dropped_partial == 0);
  const size_t whole = fs::file_size(p);
  CHECK(j.complete_bytes == whole);

  std::ofstream(p, std::ios::app) << R"({"row": {"case_id": "c", "back)";
  j = read_journal(p.string());
  CHECK(j.rows.size() == 2);
  CHECK(j.dropped_partial == 1);
  // one line at a time: the same rows handed, none kept, the same header and ends
  std::vector<json> handed;
  const JournalContents s = read_journal(p.string(), [&](json&& r) { handed.push_back(std::move(r)); });
  CHECK(s.rows.empty());
  REQUIRE(handed.size() == 2);
  CHECK(handed[0] == j.rows[0]);
  CHECK(handed[1] == j.rows[1]);
  CHECK(s.header == j.header);
  CHECK(s.dropped_partial == 1);
  CHECK(s.complete_bytes == whole);
  drop_torn_tail(p.string(), j);
  CHECK(fs::file_size(p) == whole);
  {
    JournalWriter w(p.string(), false, {}, {});
    w.append({{"finished", "2026-01-01T00:01:00Z"}});
  }
  j = read_journal(p.string());
  CHECK(j.finished);
  const json doc = report_from_journal(j);
  CHECK(doc["finished"] == "2026-01-01T00:01:00Z");
  CHECK(doc["results"].size() == 2);
}

TEST_CASE("journal: a malformed complete line and a foreign first line are InputErrors naming file and line") {
  const fs::path p = scratch("j2.jsonl");
  std::ofstream(p) << R"({"attnbench_journal": 1, "identity": {}, "header": {}})" << "\n{\"row\": [1,\n{}\n";
  try {
    (void)read_journal(p.string());
    FAIL("expected InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find(p.string() + " line 2") != std::string::npos);
  }
  std::ofstream(p) << "{\"hello\": 1}\n";
  CHECK_THROWS_WITH_AS(read_journal(p.string()), doctest::Contains("not an attnbench journal"), InputError);
  std::ofstream(p) << "";
  CHECK_THROWS_AS(read_journal(p.string()), InputError);
}

TEST_CASE("report writer: rewrites on an amortised schedule (every row up to 8, then when 1/8 new)") {
  const fs::path p = scratch("amortised.json");
  ReportWriter w(p.string(), {{"command", "x"}});
  auto on_disk = [&] { return jsonu::load_file(p.string())["results"].size(); };
  CHECK(on_disk() == 0);
  for (int i = 1; i <= 8; ++i) {
    w.add_row(row("r" + std::to_string(i)));
    CHECK(on_disk() == static_cast<size_t>(i));
  }
  w.add_row(row("r9"));  // 1 new * 8 >= 8 written
  CHECK(on_disk() == 9);
  w.add_row(row("r10"));  // 1 * 8 < 9: not yet
  CHECK(on_disk() == 9);
  w.add_row(row("r11"));  // 2 * 8 >= 9
  CHECK(on_disk() == 11);
  w.add_row(row("r12"));
  CHECK(on_disk() == 11);
  w.finish();  // always writes
  const json doc = jsonu::load_file(p.string());
  CHECK(doc["results"].size() == 12);
  CHECK(doc["results"][11]["case_id"] == "r12");
  CHECK(doc["finished"].is_string());
  CHECK(doc == w.document());
  // Sorting keeps equal keys in order and writes at once.
  w.sort_rows([](const json& a, const json& b) { return a["case_id"] > b["case_id"]; });  // r9, r8, ..., r12, r11, r10, r1
  const json sorted = jsonu::load_file(p.string());
  CHECK(sorted["results"][0]["case_id"] == "r9");
  CHECK(sorted["results"][11]["case_id"] == "r1");
  CHECK(sorted["results"].size() == 12);
  // Resumed rows come first.
  ReportWriter r2(scratch("resumed.json").string(), {{"command", "y"}}, {row("old").to_json()});
  CHECK(jsonu::load_file(scratch("resumed.json").string())["results"][0]["case_id"] == "old");
}

TEST_CASE("write_file_atomic replaces a symlink instead of writing through it, and leaves no temporary") {
  const fs::path target = scratch("target.txt"), link = scratch("link.json");
  std::ofstream(target) << "precious";
  fs::remove(link);
  fs::create_symlink(target, link);
  write_file_atomic(link.string(), "{}\n");
  CHECK(slurp(target) == "precious");
  CHECK_FALSE(fs::is_symlink(link));
  CHECK(slurp(link) == "{}\n");
  for (const auto& e : fs::directory_iterator(link.parent_path()))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
  CHECK_THROWS_AS(write_file_atomic("/nonexistent-dir/x/report.json", "x"), std::runtime_error);
}

TEST_CASE("child processes: exit code, signal, time limit, stderr tail") {
  const std::string out = scratch("c.out").string(), err = scratch("c.err").string();
  {
    ChildProcess c({"/bin/sh", "-c", "echo one >&2; echo two >&2; exit 3"}, {}, out, err);
    const ChildStatus s = wait_child(c, 0, nullptr);
    CHECK(s.exited);
    CHECK(s.exit_code == 3);
    CHECK(describe(s) == "exited with code 3");
    CHECK(tail_of_file(err, 1) == "two");
    CHECK(tail_of_file(err, 5) == "one\ntwo");
  }
  {
    ChildProcess c({"/bin/sh", "-c", "kill -SEGV $$"}, {}, out, err);
    const ChildStatus s = wait_child(c, 0, nullptr);
    CHECK_FALSE(s.exited);
    CHECK(s.signal == SIGSEGV);
    CHECK(describe(s) == "was killed by SIGSEGV (signal 11)");
  }
  {
    ChildProcess c({"/bin/sh", "-c", "echo \"$ATTNBENCH_CHILD_TEST\"; exec sleep 60"}, {{"ATTNBENCH_CHILD_TEST", "pinned"}},
                   out, err);
    const ChildStatus s = wait_child(c, 0.2, nullptr, 0.5);
    CHECK(s.timed_out);
    CHECK_FALSE(s.exited);
    CHECK(slurp(out) == "pinned\n");
  }
  {
    ChildProcess c({"/bin/sh", "-c", "exec sleep 60"}, {}, out, err);
    const ChildStatus s = wait_child(c, 0, [] { return true; }, 0.5);
    CHECK(s.stopped);
  }
  try {
    ChildProcess c({"attnbench-no-such-program-anywhere"}, {}, out, err);  // looked up in PATH
    FAIL("started a program that does not exist");
  } catch (const std::system_error& e) {
    CHECK(e.code().value() == ENOENT);
  }
  CHECK_THROWS_AS(ChildProcess({"/nonexistent/program"}, {}, out, err).pid(), std::runtime_error);
  CHECK(signal_name(SIGABRT) == "SIGABRT");
  CHECK(signal_name(63) == "signal 63");
}

TEST_CASE("child processes: a socket as stdin and stdout, an appended log, the group ended after a normal exit") {
  const std::string log = scratch("worker.log").string();
  { std::ofstream(log) << "earlier\n"; }
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  ChildIo io;
  io.stdio_fd = sv[1];
  io.stderr_path = log;
  io.stderr_append = true;
  const std::string pidfile = scratch("helper.pid").string();
  // Echo one line back, leave a helper behind in the group, exit.
  ChildProcess c({"sh", "-c", "read line; echo \"got $line\"; echo logged >&2; sleep 60 & echo $! > " + pidfile},
                 {}, io);
  ::close(sv[1]);
  const std::string req = "ping\n";
  REQUIRE(::write(sv[0], req.data(), req.size()) == static_cast<ssize_t>(req.size()));
  char buf[64] = {0};
  const ssize_t n = ::read(sv[0], buf, sizeof buf - 1);
  CHECK(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0) == "got ping\n");
  const ChildStatus s = wait_child(c, 30, nullptr);
  CHECK(s.exited);
  CHECK(s.exit_code == 0);
  CHECK(slurp(log) == "earlier\nlogged\n");
  const pid_t helper = static_cast<pid_t>(std::stol(slurp(pidfile)));
  CHECK(::kill(helper, 0) == 0);  // kill_group() leaves an ended child's group alone
  const ChildStatus e = c.end_group(false, 0.5);
  CHECK(e.exited);
  CHECK(e.exit_code == 0);
  bool gone = false;  // killed; a zombie until init reaps it
  for (int i = 0; i < 200 && !gone; ++i) {
    const std::string stat = slurp("/proc/" + std::to_string(helper) + "/stat");
    const size_t close = stat.rfind(')');
    gone = stat.empty() || (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z');
    if (!gone) ::usleep(10000);
  }
  CHECK(gone);
  ::close(sv[0]);
}
