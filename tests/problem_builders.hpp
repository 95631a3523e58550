// Problem builders shared by the cudnn tests (tests/test_cudnn_plan.cpp and
// tests/gpu/test_cudnn.cpp): a dense problem plus one mask term at a time.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/mask.hpp"
#include "harness/problem.hpp"

namespace attnbench::test {

/// A [B, H, S, D] problem with no mask, seed 20240611.
inline Problem make_problem(int64_t B, int64_t Hq, int64_t Hkv, int64_t Sq, int64_t Sk, int64_t D, DType t,
                     Layout layout = Layout::bshd) {
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
  p.seed = 20240611;
  return p;
}

inline Problem with_causal(Problem p, CausalAlign a) {
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
  DocumentTerm d;
  d.doc_lengths = lengths;
  for (const auto& row : lengths) d.doc_ids.push_back(doc_ids_from_lengths(row, p.seq_q));
  p.mask.push_back(d);
  return p;
}

}  // namespace attnbench::test
