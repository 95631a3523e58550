// Helpers shared by the test suites: problem builders (a dense problem plus one
// mask term at a time), a deterministic random generator, scratch files and a
// shell-command runner.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "harness/model/mask.hpp"
#include "harness/model/mask_desc.hpp"
#include "harness/model/problem.hpp"

namespace attnbench::test {

/// Deterministic generator independent of the standard library's distributions
/// (splitmix64 of a counter), so that random test problems are the same everywhere.
struct Rng {
  uint64_t state;
  uint64_t next() { return splitmix64(state++); }
  /// Uniform integer in [lo, hi].
  int64_t uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  /// True with probability p (53-bit uniform in [0, 1)).
  bool coin(double p) { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0) < p; }
};

/// Path of file `name` in this process's scratch directory for `suite`
/// (<tmp>/attnbench_test_<suite>_<pid>, created if missing).
inline std::filesystem::path scratch_path(const std::string& suite, const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::temp_directory_path() / ("attnbench_test_" + suite + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d / name;
}

/// Write `text` to `path` (binary, replacing the file).
inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

/// The whole content of the file at `path` ("" when it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// The kept reports of ci/baselines/: an H100 run (schema version 1) and its rerun.
inline const std::string kBaselineReport = std::string(ATTNBENCH_SOURCE_DIR) + "/ci/baselines/example-h100.json";
inline const std::string kRerunReport = std::string(ATTNBENCH_SOURCE_DIR) + "/ci/baselines/example-h100-rerun.json";

/// Run a shell command; returns (exit status, or -1 when it did not exit normally;
/// its stdout).
inline std::pair<int, std::string> run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

/// A [B, H, S, D] problem with no mask (seed 20240611 unless given).
inline Problem make_problem(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, DType t,
                            Layout layout = Layout::bshd, uint64_t seed = 20240611) {
  Problem p;
  p.batch = B;
  p.heads_q = Hq;
  p.heads_kv = Hkv;
  p.seq_q = Sq;
  p.seq_k = Sk;
  p.head_dim = D;
  p.head_dim_v = D;
  p.dtype = t;
  p.layout = layout;
  p.seed = seed;
  return p;
}

/// p with score mod `k` and the kind's one parameter `param`: softcap's cap,
/// rel_bias's max_distance, offset_bias's table size (none and alibi take none).
inline Problem with_score_mod(Problem p, ScoreMod::Kind k, double param = 0) {
  p.score_mod.kind = k;
  if (k == ScoreMod::Kind::softcap) p.score_mod.cap = param;
  if (k == ScoreMod::Kind::rel_bias) p.score_mod.max_distance = static_cast<int64_t>(param);
  if (k == ScoreMod::Kind::offset_bias) p.score_mod.size = static_cast<int64_t>(param);
  return p;
}

inline Problem with_causal(Problem p, CausalAlign a = CausalAlign::bottom_right) {
  p.mask.push_back(CausalTerm{a});
  return p;
}
inline Problem with_window(Problem p, int64_t left, int64_t right) {
  p.mask.push_back(SlidingWindowTerm{left, right});
  return p;
}
inline Problem with_padding(Problem p, std::vector<int64_t> lq, std::vector<int64_t> lk) {
  PaddingTerm t;
  t.seq_lens_q = std::move(lq);
  t.seq_lens_k = std::move(lk);
  p.mask.push_back(t);
  return p;
}
inline Problem with_documents(Problem p, const std::vector<std::vector<int64_t>>& lengths) {
  p.mask.push_back(document_term_from_lengths(lengths, p.seq_q));
  return p;
}

}  // namespace attnbench::test
