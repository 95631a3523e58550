// Progress display: see progress.hpp.
#include "harness/run/progress.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>

#include "harness/model/printable.hpp"

namespace attnbench {

namespace {
double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Progress::Progress(int64_t total_cases, int64_t backends_per_case, FILE* out, bool force, Clock now)
    : out_(out ? out : stderr),
      active_(force || isatty(fileno(out ? out : stderr)) == 1),
      now_(now ? std::move(now) : Clock(steady_now)),
      t0_(now_()),
      total_cases_(total_cases < 0 ? 0 : total_cases),
      per_case_(backends_per_case < 1 ? 1 : backends_per_case) {}

Progress::~Progress() { done(); }

void Progress::start_case(int64_t index, const std::string& case_id) {
  case_index_ = index;
  case_id_ = printable(case_id);  // names from input: no control characters on the terminal
  backend_.clear();
  draw();
}

void Progress::set_backend(const std::string& backend) {
  backend_ = printable(backend);
  draw();
}

void Progress::finish_unit() {
  ++units_done_;
  draw();
}

void Progress::message(const std::string& line) {
  if (!active_) return;
  clear_line();
  std::fprintf(out_, "%s\n", printable(line).c_str());
  draw();
}

void Progress::done() {
  if (active_ && drawn_) clear_line();
  active_ = false;
}

std::string Progress::format_duration(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  const long long t = static_cast<long long>(std::llround(s));
  char buf[32];
  if (t < 60)
    std::snprintf(buf, sizeof(buf), "%llds", t);
  else if (t < 3600)
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", t / 3600, (t % 3600) / 60);
  return buf;
}

std::string Progress::status_line() const {
  const double elapsed = now_() - t0_;
  std::string s = "[" + std::to_string(case_index_ + 1) + "/" + std::to_string(total_cases_) + "]";
  if (!case_id_.empty()) s += " " + case_id_;
  if (!backend_.empty()) s += " | " + backend_;
  s += " | " + format_duration(elapsed) + " elapsed";
  const int64_t total_units = total_cases_ * per_case_;
  if (units_done_ > 0 && total_units > units_done_) {
    const double per_unit = elapsed / static_cast<double>(units_done_);
    s += " | ETA " + format_duration(per_unit * static_cast<double>(total_units - units_done_));
  }
  return s;
}

void Progress::clear_line() {
  std::fputs("\r\x1b[2K", out_);  // carriage return, erase the whole line
  std::fflush(out_);
  drawn_ = false;
}

void Progress::draw() {
  if (!active_) return;
  std::string line = status_line();
  constexpr size_t kMaxWidth = 160;
  if (line.size() > kMaxWidth) line = line.substr(0, kMaxWidth - 3) + "...";
  std::fprintf(out_, "\r\x1b[2K%s", line.c_str());
  std::fflush(out_);
  drawn_ = true;
}

}  // namespace attnbench
