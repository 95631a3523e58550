// The shrinker of `attnbench hunt` (docs/hunt.md): from a failing problem, a
// greedy search for the smallest, simplest problem that still fails the same way
// (Hypothesis / QuickCheck style): fewer batch rows and heads, shorter
// sequences, fewer and simpler mask entries and score mods, smaller head dims,
// the default layout, scale and seed.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "harness/model/problem.hpp"

namespace attnbench::hunt {

/// How large and complicated `p` is: a non-negative integer summing the sizes
/// (B, Hq, Hkv, Sq, Sk, Dqk, Dv) and every departure from the simplest form
/// (each mask entry and its parameters, the score mod and its parameters, a
/// layout other than bshd, an explicit scale, a nonzero seed). Every candidate of
/// shrink_candidates() has a smaller measure, so a greedy shrink ends.
int64_t shrink_measure(const Problem& p);

/// Valid problems simpler than `p` (canonical(): validated, in the form their
/// problem file reads back; shrink_measure strictly smaller), the most aggressive first: single batch rows, fewer heads, shorter
/// sequences (per-row mask data cut to fit, or padding and trailing documents
/// kept), each mask entry and the score mod
/// removed, smaller head dims, then simpler mask and mod parameters, layout bshd,
/// the default scale and seed 0. Sq = Sk is kept under a document mask.
std::vector<Problem> shrink_candidates(const Problem& p);

/// Outcome of shrink().
struct ShrinkResult {
  Problem problem;      ///< the smallest failing problem found
  int64_t steps = 0;    ///< candidates accepted (each replaced the problem)
  int64_t tried = 0;    ///< candidates run
  bool complete = false;  ///< no candidate of `problem` fails (false: stopped early)
};

/// Greedy shrink of failing problem `p`: replace it by the first candidate of
/// shrink_candidates() for which `still_fails` holds, until none does (complete)
/// or `stop()` turns true (checked before every candidate). `still_fails` is
/// called on candidates only, never on `p` itself.
ShrinkResult shrink(const Problem& p, const std::function<bool(const Problem&)>& still_fails,
                    const std::function<bool()>& stop);

}  // namespace attnbench::hunt
