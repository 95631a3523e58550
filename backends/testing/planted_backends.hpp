// Test-only backends with a planted defect, for `attnbench hunt` (docs/hunt.md):
// the cpu backend, with its outputs corrupted only under one condition, so that
// a hunt must find that condition and shrink a failure to it.
//   test-planted-window129   O + 1 everywhere when Sq = 129 and the mask has a
//                            sliding_window entry (a length-and-mask-specific bug)
//   test-planted-masked-rows O = 1 on fully masked query rows (LSE = -inf), which
//                            must be 0 (a kernel leaking into empty rows)
//   test-planted-nondeterministic-gqa  under GQA (Hq > Hkv) every other run moves
//                            O[0] by one float64 ulp: right, but not bitwise
//                            repeatable although the backend claims determinism
//   test-planted-narrow-tile64  takes only head dims 64 in fp16/bf16 (narrower than
//                            the problem space, as GPU backends are) and is O + 1
//                            past Sq = 64 (a second query tile)
// Registered at start-up when ATTNBENCH_TEST_BACKENDS=1 (as backends/testing/
// testing_backends.cpp does), or by calling register_planted_backends().
#pragma once

namespace attnbench {

/// Register the planted-defect backends (once; later calls do nothing). Returns true.
bool register_planted_backends();

}  // namespace attnbench
