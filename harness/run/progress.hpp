// A one-line progress display on stderr for long sweeps: case n of N, the case
// and backend now running, elapsed time and an ETA. Quiet when stderr is not a
// terminal (CI logs get the runner's own lines instead), so it never garbles
// redirected output.
//
//   Progress prog(cases.size());
//   for (...) {
//     prog.start_case(i, c.id);
//     for (auto& b : backends) { prog.set_backend(b->name()); ...; prog.finish_unit(); }
//   }
//   prog.done();
//
// The ETA assumes every remaining (case, backend) unit costs the mean of the
// finished ones; it is shown only once a unit has finished.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace attnbench {

class Progress {
 public:
  /// Monotonic clock in seconds (injectable for tests).
  using Clock = std::function<double()>;

  /// `total_cases` cases of `backends_per_case` units each. `out` defaults to
  /// stderr; the display is active only if `out` is a terminal (isatty), unless
  /// `force` is true (tests). `now` defaults to std::chrono::steady_clock.
  explicit Progress(int64_t total_cases, int64_t backends_per_case = 1, FILE* out = nullptr, bool force = false,
                    Clock now = {});
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Whether anything is drawn.
  bool active() const { return active_; }
  /// Case `index` (0-based) with id `case_id` starts.
  void start_case(int64_t index, const std::string& case_id);
  /// `backend` starts on the current case.
  void set_backend(const std::string& backend);
  /// One (case, backend) unit finished (feeds the ETA).
  void finish_unit();
  /// Print `line` above the status line (which is redrawn after it).
  void message(const std::string& line);
  /// Clear the status line for good (also done by the destructor).
  void done();

  /// The status text as drawn, without terminal control codes, e.g.
  /// "[3/40] causal-s4096 | cudnn | 1m05s elapsed | ETA 20m11s".
  std::string status_line() const;
  /// "42s", "3m07s", "2h05m".
  static std::string format_duration(double seconds);

 private:
  void draw();
  void clear_line();
  FILE* out_;
  bool active_;
  Clock now_;
  double t0_;
  int64_t total_cases_, per_case_;
  int64_t case_index_ = -1;
  int64_t units_done_ = 0;
  std::string case_id_, backend_;
  bool drawn_ = false;
};

}  // namespace attnbench
