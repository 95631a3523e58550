// The problem the host-pass benchmarks share (bench_host_passes, bench_peer_protocol):
// B8 S2048 H32 (MHA) D96 bf16 BSHD, seed 7 — four tensors of 50,331,648 elements,
// 400 MB each as float64.
#pragma once

#include "harness/model/problem.hpp"

namespace attnbench::bench {

inline Problem host_pass_problem() {
  Problem p;
  p.batch = 8;
  p.heads_q = p.heads_kv = 32;
  p.seq_q = p.seq_k = 2048;
  p.head_dim = p.head_dim_v = 96;
  p.dtype = DType::bf16;
  p.layout = Layout::bshd;
  p.seed = 7;
  return p;
}

}  // namespace attnbench::bench
