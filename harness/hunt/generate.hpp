// The problem generator of `attnbench hunt` (docs/hunt.md): random, valid
// problems over the whole problem space of docs/semantics.md sections 1-4,
// weighted toward edges (sequence lengths 1, 2, tile sizes +-1, primes; zero-length
// and one-token documents; empty padding rows; windows of every sign; block_sparse
// densities 0 and 1), bounded by a size budget so one problem checks in seconds.
//
// Deterministic: problem number `index` of seed `seed` is a pure function of
// (seed, index, limits), independent of the problems before it, so a hunt with a
// given seed meets the same problems in the same order on every machine.
#pragma once

#include <cstdint>

#include "harness/model/problem.hpp"

namespace attnbench::hunt {

/// Size budget of generated problems.
struct GenLimits {
  /// Largest Sq or Sk.
  int64_t max_seq = 600;
  /// Bound on B * Hq * Sq * Sk * (Dqk + Dv) / 128: the (i, j) pairs, weighted by
  /// the head dims (128 = Dqk = Dv = 64), which is what the reference and the
  /// cpu backend spend their time on. 2^18 checks in well under a second on 2 cores.
  int64_t max_work = INT64_C(1) << 18;
  /// Largest batch and query head count.
  int64_t max_batch = 4;
  int64_t max_heads_q = 16;
};

/// A small deterministic generator (splitmix64 of a counter), so problems do not
/// depend on the standard library's distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  /// Next 64 random bits.
  uint64_t next();
  /// Uniform integer in [lo, hi] (lo <= hi).
  int64_t uniform(int64_t lo, int64_t hi);
  /// True with probability p.
  bool chance(double p);
  /// Uniform double in [0, 1).
  double unit();

 private:
  uint64_t state_;
};

/// The weighted work of `p`: B * Hq * Sq * Sk * (Dqk + Dv) / 128 (saturating).
int64_t problem_work(const Problem& p);

/// `p` as its problem file reads back: problem_from_json(to_json(p)). A document
/// row ending in padding is written as doc_ids (doc_lengths in a file must fill
/// the row), which drops its zero-length documents; hunting the canonical form
/// keeps an isolated unit (which reads the problem from a file), the corpus file
/// and its replay on exactly the problem that ran. Throws InputError for an
/// invalid p.
Problem canonical(const Problem& p);

/// Problem number `index` of hunt seed `seed`: a valid, canonical problem
/// (validate() passes) within `limits`. Never throws for limits with max_seq >= 1 and max_work >= 1.
Problem generate_problem(uint64_t seed, uint64_t index, const GenLimits& limits = {});

}  // namespace attnbench::hunt
