// FlashAttention-2 forward and backward (Dao 2023, Algorithms 1 and 2) on the
// CPU, tiled over a BlockMask. See cpu_attention.hpp for the contract and the
// precision policy (float32 scores and probabilities, float64 accumulation).
#include "backends/cpu/cpu_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "backends/cpu/cpu_backend.hpp"
#include "harness/model/tensors.hpp"
#include "harness/model/thread_pool.hpp"

namespace attnbench::cpu_kernels {
namespace {

constexpr int64_t kQ = kCpuQBlock;
constexpr int64_t kKV = kCpuKVBlock;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// S[r][c] = sum_d A[r][d] * Bt[d][c] for r < nr and all c < kKV, with A row-major
/// [nr][D] and Bt row-major [D][kKV] (columns past the tile's width are zero), all
/// float64 (the tile copies of float32 inputs, so every product is exact). The
/// inner loop runs over c, so it vectorises without reassociating sums; each
/// S[r][c] is accumulated in ascending d (fixed order).
void tile_matmul_nt(const double* A, const double* Bt, int64_t nr, int64_t D, double* S) {
  for (int64_t r = 0; r < nr; ++r) {
    double* srow = S + r * kKV;
    std::fill(srow, srow + kKV, 0.0);
    const double* arow = A + r * D;
    for (int64_t d = 0; d < D; ++d) {
      const double ad = arow[d];
      const double* brow = Bt + d * kKV;
      for (int64_t c = 0; c < kKV; ++c) srow[c] += ad * brow[c];
    }
  }
}

/// Copy `n` float32 rows of width D (row pointers from `row_of`) into a row-major
/// float64 [n][D] buffer.
template <class RowOf>
void gather_rows(int64_t n, int64_t D, double* dst, RowOf&& row_of) {
  for (int64_t r = 0; r < n; ++r) {
    const float* src = row_of(r);
    std::copy(src, src + D, dst + r * D);
  }
}

/// Copy `n` float32 rows of width D into a transposed float64 [D][kKV] buffer;
/// columns n..kKV-1 are zero.
template <class RowOf>
void gather_transposed(int64_t n, int64_t D, double* dst, RowOf&& row_of) {
  std::fill(dst, dst + D * kKV, 0.0);
  for (int64_t c = 0; c < n; ++c) {
    const float* src = row_of(c);
    for (int64_t d = 0; d < D; ++d) dst[d * kKV + c] = src[d];
  }
}

/// x rounded to dtype t (round_to: via float32, then to fp16/bf16), as float32.
float round_out(DType t, double x) { return static_cast<float>(round_to(t, x)); }

/// Rows (or columns) of a tile starting at `start` that lie below `limit`, at most `block`.
int64_t clamp_len(int64_t limit, int64_t start, int64_t block) {
  return std::clamp<int64_t>(limit - start, 0, block);
}

void check_block_mask(const AttentionArgs& a) {
  if (!a.bm) throw std::logic_error("cpu backend: no BlockMask");
  if (a.bm->q_block != kQ || a.bm->kv_block != kKV)
    throw std::logic_error("cpu backend: BlockMask tile size differs from kCpuQBlock x kCpuKVBlock");
}

/// Scaled score of one pair, float32: the float64 dot product times the scale,
/// rounded once (the same value in the forward and the backward pass).
float scaled_score(double dot, double scale) { return static_cast<float>(scale * dot); }

/// Per-worker scratch of backward(): tile copies and products, the sums of one
/// kv-block and the dQ / D of one task.
struct BwdScratch {
  std::vector<double> q, d_o, kt, k, vt;  // tile copies
  std::vector<double> dots, dp, ds;       // Q K^T, dO V^T, dS
  std::vector<float> s_raw;               // scaled scores (float32)
  std::vector<double> p;                  // P recomputed from the float64 LSE
  std::vector<double> dk, dv;             // [KV_BLOCK, D] sums of the kv-block
  std::vector<double> dq, delta;          // [group, Sq, Dqk] and D [group, Sq] of the task
  void resize(const AttentionArgs& a, int64_t group) {
    const auto n = [](int64_t v) { return static_cast<size_t>(v); };
    q.resize(n(kQ * a.Dqk));
    d_o.resize(n(kQ * a.Dv));
    kt.resize(n(a.Dqk * kKV));
    k.resize(n(kKV * a.Dqk));
    vt.resize(n(a.Dv * kKV));
    dots.resize(n(kQ * kKV));
    dp.resize(n(kQ * kKV));
    ds.resize(n(kQ * kKV));
    s_raw.resize(n(kQ * kKV));
    p.resize(n(kQ * kKV));
    dk.resize(n(kKV * a.Dqk));
    dv.resize(n(kKV * a.Dv));
    dq.resize(n(group * a.Sq * a.Dqk));
    delta.resize(n(group * a.Sq));
  }
};

/// One backward task (b, kv head g) of backward(): what its tiles share.
struct BwdTask {
  const AttentionArgs& a;
  int64_t b, g, group, q_limit;
  double* dbias;  ///< the task's float64 dBias partial sums, or null
};

/// The backward work of tile (query block qb, kv block kb) of query head h, whose
/// K, K^T and V^T copies are in sc.k / sc.kt / sc.vt (Algorithm 2, lines 8-14):
/// recompute P, dV += P^T dO, dS, dBias, dQ += dS K, dK += dS^T Q (unscaled).
void backward_tile(const BwdTask& t, BwdScratch& sc, int64_t h, int64_t kb, int64_t qb, bool is_full) {
  const AttentionArgs& a = t.a;
  const int64_t b = t.b, hl = h - t.g * t.group, q_limit = t.q_limit;
  const int64_t j0 = kb * kKV, nc = clamp_len(std::min(a.Sk, a.stored_k[b]), j0, kKV);
  const bool has_mod = a.mod.kind != ScoreModKind::none;
  const bool has_grad_factor = a.mod.kind == ScoreModKind::softcap;
  const bool learnable = t.dbias != nullptr;
  double* dbias = t.dbias;
  const double scale = a.scale;
  if (b == 0 && h == 0 && qb == 0 && kb == a.skip_kb) return;
  const int64_t i0 = qb * kQ;
  const int64_t nr = clamp_len(q_limit, i0, kQ);
  if (nr == 0) return;
  gather_rows(nr, a.Dqk, sc.q.data(), [&](int64_t r) { return a.q + a.lq.offset(b, h, i0 + r, 0); });
  gather_rows(nr, a.Dv, sc.d_o.data(), [&](int64_t r) { return a.d_o + a.lo.offset(b, h, i0 + r, 0); });
  const bool evaluate_mask = !is_full && a.apply_mask;

  // Recompute P = exp(score_mod(scale * Q K^T) - LSE) (Algorithm 2, lines 8-9).
  tile_matmul_nt(sc.q.data(), sc.kt.data(), nr, a.Dqk, sc.dots.data());
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t i = i0 + r;
    const double lse = a.lse_f64[(b * a.Hq + h) * a.Sq + i];
    const double* dots = sc.dots.data() + r * kKV;
    float* s_raw = sc.s_raw.data() + r * kKV;
    double* p = sc.p.data() + r * kKV;
    for (int64_t c = 0; c < nc; ++c) {
      const int64_t j = j0 + c;
      const float x = scaled_score(dots[c], scale);
      s_raw[c] = x;
      if (std::isinf(lse) || (evaluate_mask && !mask_allowed(a.mask, b, h, i, j))) {
        p[c] = 0.0;
        continue;
      }
      const float x_mod = has_mod ? score_mod_apply<float>(a.mod, x, h, i, j) : x;
      p[c] = std::exp(static_cast<double>(x_mod) - lse);
    }
  }
  // dV += P^T dO (line 10).
  for (int64_t r = 0; r < nr; ++r) {
    const double* p = sc.p.data() + r * kKV;
    const double* d_o = sc.d_o.data() + r * a.Dv;
    for (int64_t c = 0; c < nc; ++c) {
      if (p[c] == 0.0) continue;
      const double pc = p[c];
      double* dv = sc.dv.data() + c * a.Dv;
      for (int64_t d = 0; d < a.Dv; ++d) dv[d] += pc * d_o[d];
    }
  }
  // dP = dO V^T (line 11); dS_mod = P * (dP - D) (line 12); dBias; chain factor.
  tile_matmul_nt(sc.d_o.data(), sc.vt.data(), nr, a.Dv, sc.dp.data());
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t i = i0 + r;
    const double delta = sc.delta[static_cast<size_t>(hl * a.Sq + i)];
    const double* p = sc.p.data() + r * kKV;
    const float* s_raw = sc.s_raw.data() + r * kKV;
    const double* dp = sc.dp.data() + r * kKV;
    double* ds = sc.ds.data() + r * kKV;
    for (int64_t c = 0; c < nc; ++c) {
      if (p[c] == 0.0) {
        ds[c] = 0.0;
        continue;
      }
      double x = p[c] * (dp[c] - delta);
      if (learnable) dbias[score_mod_bias_index(a.mod, h, i, j0 + c)] += x;
      if (has_grad_factor) x *= score_mod_grad<float>(a.mod, s_raw[c]);
      ds[c] = x;
    }
  }
  // dQ += dS K (line 13), dK += dS^T Q (line 14); the scale is applied on write.
  for (int64_t r = 0; r < nr; ++r) {
    const double* ds = sc.ds.data() + r * kKV;
    const double* q = sc.q.data() + r * a.Dqk;
    double* dq = sc.dq.data() + (hl * a.Sq + i0 + r) * a.Dqk;
    for (int64_t c = 0; c < nc; ++c) {
      const double x = ds[c];
      if (x == 0.0) continue;
      const double* krow = sc.k.data() + c * a.Dqk;
      double* dk = sc.dk.data() + c * a.Dqk;
      for (int64_t d = 0; d < a.Dqk; ++d) dq[d] += x * krow[d];
      for (int64_t d = 0; d < a.Dqk; ++d) dk[d] += x * q[d];
    }
  }
}

}  // namespace

int worker_count(int requested) {
  return requested > 0 ? std::min(requested, hardware_threads()) : hardware_threads();
}

size_t scratch_bytes(const Problem& p, int threads) {
  const auto n = [](int64_t v) { return static_cast<size_t>(v); };
  const size_t dqk = n(p.head_dim), dv = n(p.head_dim_v), q = n(kQ), kv = n(kKV), group = n(p.group_size());
  // Forward Scratch: q, kt, v, dots, acc, l (float64); s, m (float32).
  const size_t fwd = (q * dqk + dqk * kv + kv * dv + q * kv + q * dv + q) * sizeof(double) + (kv + q) * sizeof(float);
  // Backward Scratch: q, d_o, kt, k, vt, dots, dp, ds, p, dk, dv, dq, delta (float64); s_raw (float32).
  const size_t bwd = (q * dqk + q * dv + 2 * dqk * kv + dv * kv + 4 * q * kv + kv * dqk + kv * dv +
                      group * n(p.seq_q) * (dqk + 1)) * sizeof(double) +
                     q * kv * sizeof(float);
  const size_t dbias = n(p.batch * p.heads_kv * p.bias_numel()) * sizeof(double);
  return n(worker_count(threads)) * (fwd + bwd) + dbias;
}

void forward(const AttentionArgs& a) {
  check_block_mask(a);
  const BlockMask& bm = *a.bm;
  const int64_t nQ = bm.num_q_blocks;
  const int64_t group = a.Hq / a.Hkv;
  const bool has_mod = a.mod.kind != ScoreModKind::none;
  const double scale = a.scale;
  const int workers = worker_count(a.threads);

  struct Scratch {
    std::vector<double> q, kt, v, dots;  // tile copies and Q K^T
    std::vector<float> s;                // scores, then probabilities (float32)
    std::vector<float> m;                // running row max
    std::vector<double> l, acc;          // running row sum and unnormalised O
  };
  std::vector<Scratch> scratch(static_cast<size_t>(workers));
  for (auto& sc : scratch) {
    sc.q.resize(static_cast<size_t>(kQ * a.Dqk));
    sc.kt.resize(static_cast<size_t>(a.Dqk * kKV));
    sc.v.resize(static_cast<size_t>(kKV * a.Dv));
    sc.dots.resize(static_cast<size_t>(kQ * kKV));
    sc.s.resize(static_cast<size_t>(kKV));
    sc.m.resize(static_cast<size_t>(kQ));
    sc.l.resize(static_cast<size_t>(kQ));
    sc.acc.resize(static_cast<size_t>(kQ * a.Dv));
  }

  parallel_for(a.B * a.Hq * nQ, workers, [&](int64_t task, int w) {
    Scratch& sc = scratch[static_cast<size_t>(w)];
    const int64_t qb = task % nQ;
    const int64_t h = (task / nQ) % a.Hq;
    const int64_t b = task / (nQ * a.Hq);
    const int64_t g = h / group;
    const int64_t i0 = qb * kQ;
    const int64_t n_rows = std::min(kQ, a.Sq - i0);          // rows of the tile
    const int64_t nr = clamp_len(a.stored_q[b], i0, n_rows);  // rows with storage
    const int64_t k_limit = std::min(a.Sk, a.stored_k[b]);

    gather_rows(nr, a.Dqk, sc.q.data(), [&](int64_t r) { return a.q + a.lq.offset(b, h, i0 + r, 0); });
    std::fill(sc.m.begin(), sc.m.end(), kNegInf);
    std::fill(sc.l.begin(), sc.l.end(), 0.0);
    std::fill(sc.acc.begin(), sc.acc.end(), 0.0);

    if (nr > 0)
      for_each_tile(bm, b, h, qb, [&](int64_t kb, bool is_full) {
        if (b == 0 && h == 0 && qb == 0 && kb == a.skip_kb) return;
        const int64_t j0 = kb * kKV;
        const int64_t nc = clamp_len(k_limit, j0, kKV);
        if (nc == 0) return;
        gather_transposed(nc, a.Dqk, sc.kt.data(), [&](int64_t c) { return a.k + a.lk.offset(b, g, j0 + c, 0); });
        gather_rows(nc, a.Dv, sc.v.data(), [&](int64_t c) { return a.v + a.lv.offset(b, g, j0 + c, 0); });
        tile_matmul_nt(sc.q.data(), sc.kt.data(), nr, a.Dqk, sc.dots.data());
        const bool evaluate_mask = !is_full && a.apply_mask;
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t i = i0 + r;
          const double* dots = sc.dots.data() + r * kKV;
          float* s = sc.s.data();
          // Steps 1-3 of the score pipeline: scale, score_mod, mask.
          float row_max = kNegInf;
          for (int64_t c = 0; c < nc; ++c) {
            const int64_t j = j0 + c;
            float x = scaled_score(dots[c], scale);
            if (has_mod) x = score_mod_apply<float>(a.mod, x, h, i, j);
            if (evaluate_mask && !mask_allowed(a.mask, b, h, i, j)) x = kNegInf;
            s[c] = x;
            row_max = std::max(row_max, x);
          }
          // Online softmax (Algorithm 1, lines 9-10).
          const float m_old = sc.m[r];
          const float m_new = std::max(m_old, row_max);
          if (m_new == kNegInf) continue;  // nothing allowed in this row so far
          const double alpha = m_old == kNegInf ? 0.0 : std::exp(static_cast<double>(m_old) - m_new);
          double* acc = sc.acc.data() + r * a.Dv;
          for (int64_t d = 0; d < a.Dv; ++d) acc[d] *= alpha;
          double row_sum = 0.0;
          for (int64_t c = 0; c < nc; ++c) {
            if (s[c] == kNegInf) continue;
            const double p = std::exp(static_cast<double>(s[c]) - m_new);
            row_sum += p;
            const double* vrow = sc.v.data() + c * a.Dv;
            for (int64_t d = 0; d < a.Dv; ++d) acc[d] += p * vrow[d];
          }
          sc.l[r] = alpha * sc.l[r] + row_sum;
          sc.m[r] = m_new;
        }
      });

    // Epilogue (Algorithm 1, lines 12-13): O = acc / l, LSE = m + log l.
    for (int64_t r = 0; r < n_rows; ++r) {
      const int64_t i = i0 + r;
      const int64_t at = (b * a.Hq + h) * a.Sq + i;
      const bool empty = r >= nr || sc.l[r] == 0.0;
      const double lse = empty ? -std::numeric_limits<double>::infinity() : sc.m[r] + std::log(sc.l[r]);
      a.lse[at] = static_cast<float>(lse);
      a.lse_f64[at] = lse;
      if (r >= nr) continue;  // THD: row not stored
      const int64_t o_at = a.lo.offset(b, h, i, 0);
      float* o = a.o + o_at;
      double* o_f64 = a.o_f64 + o_at;
      const double* acc = sc.acc.data() + r * a.Dv;
      if (empty) {
        std::fill(o, o + a.Dv, 0.0f);
        std::fill(o_f64, o_f64 + a.Dv, 0.0);
      } else {
        const double l = sc.l[r];
        for (int64_t d = 0; d < a.Dv; ++d) {
          const double x = acc[d] / l;
          o_f64[d] = x;
          o[d] = round_out(a.dtype, x);
        }
      }
    }
  });
}

void backward(const AttentionArgs& a) {
  check_block_mask(a);
  const BlockMask& bm = *a.bm;
  const int64_t nKV = bm.num_kv_blocks;
  const int64_t group = a.Hq / a.Hkv;
  const bool learnable = a.dbias != nullptr && a.bias_numel > 0;
  const double scale = a.scale;
  const int workers = worker_count(a.threads);
  const int64_t n_tasks = a.B * a.Hkv;

  std::vector<BwdScratch> scratch(static_cast<size_t>(workers));
  for (auto& sc : scratch) sc.resize(a, group);
  // dBias partial sums, one float64 vector per task, reduced in task order.
  std::vector<double> dbias_parts(learnable ? static_cast<size_t>(n_tasks * a.bias_numel) : 0, 0.0);

  parallel_for(n_tasks, workers, [&](int64_t task, int w) {
    BwdScratch& sc = scratch[static_cast<size_t>(w)];
    const int64_t b = task / a.Hkv;
    const int64_t g = task % a.Hkv;
    const int64_t q_limit = std::min(a.Sq, a.stored_q[b]);
    const int64_t k_limit = std::min(a.Sk, a.stored_k[b]);
    const BwdTask t{a, b, g, group, q_limit, learnable ? dbias_parts.data() + task * a.bias_numel : nullptr};

    // D_i = rowsum(dO_i * O_i) (Algorithm 2, line 4), from the float64 O of the
    // forward (before rounding to the dtype).
    for (int64_t hl = 0; hl < group; ++hl) {
      const int64_t h = g * group + hl;
      for (int64_t i = 0; i < q_limit; ++i) {
        const double* o = a.o_f64 + a.lo.offset(b, h, i, 0);
        const float* d_o = a.d_o + a.lo.offset(b, h, i, 0);
        double sum = 0.0;
        for (int64_t d = 0; d < a.Dv; ++d) sum += d_o[d] * o[d];
        sc.delta[static_cast<size_t>(hl * a.Sq + i)] = sum;
      }
    }
    std::fill(sc.dq.begin(), sc.dq.end(), 0.0);

    for (int64_t kb = 0; kb < nKV; ++kb) {
      const int64_t j0 = kb * kKV;
      const int64_t nc = clamp_len(k_limit, j0, kKV);
      if (nc == 0) continue;
      auto k_row = [&](int64_t c) { return a.k + a.lk.offset(b, g, j0 + c, 0); };
      auto v_row = [&](int64_t c) { return a.v + a.lv.offset(b, g, j0 + c, 0); };
      gather_transposed(nc, a.Dqk, sc.kt.data(), k_row);
      gather_rows(nc, a.Dqk, sc.k.data(), k_row);
      gather_transposed(nc, a.Dv, sc.vt.data(), v_row);
      std::fill(sc.dk.begin(), sc.dk.end(), 0.0);
      std::fill(sc.dv.begin(), sc.dv.end(), 0.0);

      for (int64_t hl = 0; hl < group; ++hl) {
        const int64_t h = g * group + hl;
        for_each_tile_of_col(bm, b, h, kb, [&](int64_t qb, bool is_full) { backward_tile(t, sc, h, kb, qb, is_full); });
      }
      // dK, dV of this kv-block, summed over the group (line 16).
      for (int64_t c = 0; c < nc; ++c) {
        float* dk = a.dk + a.lk.offset(b, g, j0 + c, 0);
        float* dv = a.dv + a.lv.offset(b, g, j0 + c, 0);
        const double* dk_acc = sc.dk.data() + c * a.Dqk;
        const double* dv_acc = sc.dv.data() + c * a.Dv;
        for (int64_t d = 0; d < a.Dqk; ++d) dk[d] = round_out(a.dtype, scale * dk_acc[d]);
        for (int64_t d = 0; d < a.Dv; ++d) dv[d] = round_out(a.dtype, dv_acc[d]);
      }
    }
    // dQ of every query head of the group (line 15, accumulated here instead of in HBM).
    for (int64_t hl = 0; hl < group; ++hl) {
      const int64_t h = g * group + hl;
      for (int64_t i = 0; i < q_limit; ++i) {
        float* dq = a.dq + a.lq.offset(b, h, i, 0);
        const double* acc = sc.dq.data() + (hl * a.Sq + i) * a.Dqk;
        for (int64_t d = 0; d < a.Dqk; ++d) dq[d] = round_out(a.dtype, scale * acc[d]);
      }
    }
  });

  if (learnable) {
    for (int64_t e = 0; e < a.bias_numel; ++e) {
      double sum = 0.0;
      for (int64_t t = 0; t < n_tasks; ++t) sum += dbias_parts[static_cast<size_t>(t * a.bias_numel + e)];
      a.dbias[e] = static_cast<float>(sum);
    }
  }
}

}  // namespace attnbench::cpu_kernels
