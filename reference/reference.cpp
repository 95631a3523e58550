// The tiled reference engine behind gold() (T = double, exact) and lp() (T = float,
// rounding to the problem dtype). See reference.hpp for the algorithm and its
// sources; this file holds the tile loops, the work partition and the threads.
#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "harness/model/block_mask.hpp"
#include "harness/model/mask.hpp"
#include "harness/model/mask_desc.hpp"
#include "harness/model/thread_pool.hpp"

namespace attnbench::reference {

SliceSet SliceSet::of(int64_t batch, int64_t heads_kv,
                      const std::vector<std::pair<int64_t, int64_t>>& slices) {
  SliceSet s;
  s.all = false;
  s.selected.assign(static_cast<size_t>(batch * heads_kv), 0);
  for (const auto& [b, g] : slices) {
    if (b < 0 || b >= batch || g < 0 || g >= heads_kv)
      throw std::invalid_argument("SliceSet::of: slice (" + std::to_string(b) + ", " + std::to_string(g) +
                                  ") outside B = " + std::to_string(batch) + ", Hkv = " + std::to_string(heads_kv));
    s.selected[static_cast<size_t>(b * heads_kv + g)] = 1;
  }
  if (s.count(batch, heads_kv) == batch * heads_kv) return every();
  return s;
}

int64_t SliceSet::count(int64_t batch, int64_t heads_kv) const {
  if (all) return batch * heads_kv;
  int64_t n = 0;
  for (auto v : selected) n += v != 0;
  return n;
}

namespace {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using CMap = Eigen::Map<const Mat<T>>;
template <class T>
using Col = Eigen::Array<T, Eigen::Dynamic, 1>;

/// Fixed number of dBias accumulation lanes (independent of the thread count, so
/// that the summation order, and hence the result, is too).
constexpr int64_t kBiasLanes = 64;
/// Rows of a forward / dQ panel: the query heads of one kv head stacked over
/// enough consecutive q-blocks to reach this many rows (one GEMM operand for all).
constexpr int64_t kPanelRows = 128;
/// Widest run of consecutive tiles multiplied in one GEMM (columns of a score panel).
constexpr int64_t kRunWidth = 256;
/// Keys of one dK/dV unit: consecutive kv-blocks grouped to this many columns.
constexpr int64_t kColumnGroup = 128;

/// Run fn(unit, state) for every unit in [0, n) on up to `threads` threads of the
/// shared pool (harness/model/thread_pool.hpp); each worker owns one
/// default-constructed State (its scratch buffers).
template <class State, class Fn>
void for_units(int64_t n, int threads, const Fn& fn) {
  if (n <= 0) return;
  std::vector<State> states(static_cast<size_t>(std::min<int64_t>({threads, n, ThreadPool::shared().size()})));
  parallel_for(n, static_cast<int>(states.size()), [&](int64_t u, int w) { fn(u, states[static_cast<size_t>(w)]); });
}

/// x rounded to bfloat16 (round to nearest even; NaN kept), as float: the bits of
/// Eigen::bfloat16's conversion, written branch-free so the loop vectorises.
inline float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  u = (u & 0x7fffffffu) > 0x7f800000u ? u : r;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// Consecutive computed blocks [first, first + count) multiplied as one GEMM.
struct Run {
  int64_t first, count;
};

/// The computed blocks of a unit made of several BlockMask lines (q-blocks, or
/// kv-blocks for the transposed lists): the union of their tiles, a block being
/// full only when it is full on every line (else its mask is evaluated), cut into
/// runs of consecutive blocks.
struct Lines {
  std::vector<uint16_t> listed, full;  ///< per block: lines listing it, lines listing it full
  std::vector<Run> runs;
  std::vector<uint8_t> partial;        ///< per block: evaluate the mask
};

/// A panel's rows: `replicas` query heads h0, h0 + 1, ... each over the query rows
/// [i0, i0 + rows) (row m is head h0 + m / rows, position i0 + m % rows).
struct PanelRows {
  int64_t b, h0, i0, rows, replicas;
  int64_t head(int64_t m) const { return h0 + m / rows; }
  int64_t pos(int64_t m) const { return i0 + m % rows; }
};

/// Per-thread scratch: operand panels, score, probability and gradient panels,
/// accumulators.
template <class T>
struct Scratch {
  Mat<T> Qp, dOp;  ///< gathered query / dO rows of a panel
  Mat<T> S;        ///< scores after score_mod and mask
  Mat<T> X;        ///< scaled scores before score_mod (softcap derivative)
  Mat<T> P;        ///< probabilities
  Mat<T> dP;       ///< dO V^T, then dS' and dS in place
  Mat<T> acc;      ///< O, dQ or dK accumulator
  Mat<T> acc2;     ///< dV accumulator
  Col<T> m, l, dsum;
  Lines lines;
};

/// The tiled algorithm of reference.hpp in scalar type T: double for gold (no
/// rounding), float for lp (rounding to the problem dtype at the documented points).
template <class T>
class Engine {
 public:
  static constexpr bool kExact = std::is_same_v<T, double>;
  static constexpr T kNegInf = -std::numeric_limits<T>::infinity();

  Engine(const Problem& p, const ProblemData& in, bool grads, const SliceSet& slices, const Options& opt)
      : p_(p), in_(in), grads_(grads), slices_(slices) {
    validate();
    threads_ = resolve_threads(opt.threads);
    if (opt.q_block < 1 || opt.kv_block < 1)
      throw std::invalid_argument("reference: tile sizes must be >= 1");
    sliced_ = opt.sliced;
    B_ = p.batch, Hq_ = p.heads_q, Hkv_ = p.heads_kv, G_ = p.group_size();
    Sq_ = p.seq_q, Sk_ = p.seq_k, D_ = p.head_dim, Dv_ = p.head_dim_v;
    scale_ = static_cast<T>(p.softmax_scale());
    dtype_ = p.dtype;
    md_ = make_mask_desc(p, mask_arrays_);
    sd_ = make_score_mod_desc(p, nullptr, in.offset.empty() ? nullptr : in.offset.data());
    learnable_ = p.has_learnable_bias();
    softcap_ = p.score_mod.kind == ScoreMod::Kind::softcap;
    has_mod_ = p.score_mod.kind != ScoreMod::Kind::none;
    bm_ = build_block_mask(p, opt.q_block, opt.kv_block);
    bq_ = bm_.q_block, bk_ = bm_.kv_block, nq_ = bm_.num_q_blocks, nk_ = bm_.num_kv_blocks;
    qg_ = std::max<int64_t>(1, kPanelRows / (G_ * bq_));
    cg_ = std::max<int64_t>(1, kColumnGroup / bk_);
    run_k_ = std::max<int64_t>(1, kRunWidth / bk_);
    run_q_ = std::max<int64_t>(1, kRunWidth / bq_);

    if constexpr (kExact) {
      q_ = in.q.data.data(), k_ = in.k.data.data(), v_ = in.v.data.data();
      do_ = grads ? in.d_o.data.data() : nullptr;
    } else {
      convert_selected();
    }
    rank_.assign(static_cast<size_t>(B_ * Hkv_), -1);
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t g = 0; g < Hkv_; ++g) {
        if (!slices_.contains(b, g, Hkv_)) continue;
        rank_[static_cast<size_t>(b * Hkv_ + g)] = n_slices_++;
        for (int64_t qb = 0; qb < nq_; qb += qg_) q_units_.push_back({b, g, qb});
        for (int64_t kb = 0; kb < nk_; kb += cg_) kv_units_.push_back({b, g, kb});
      }
  }

  AttentionOutputs run(Stats* stats) {
    constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    out_.o = HostTensor(out_shape(Hq_, Sq_, Dv_), nan);
    out_.lse = HostTensor(out_shape(Hq_, Sq_, 0), nan);
    const size_t nrows = static_cast<size_t>(B_ * Hq_ * Sq_);
    row_m_.assign(nrows, kNegInf);
    row_l_.assign(nrows, T(0));
    for_units<Scratch<T>>(static_cast<int64_t>(q_units_.size()), threads_,
                          [this](int64_t u, Scratch<T>& s) { forward_unit(q_units_[static_cast<size_t>(u)], s); });
    if (grads_) backward();
    if (stats) fill_stats(*stats);
    return std::move(out_);
  }

 private:
  /// A unit of work: kv head g of batch row b, BlockMask lines from `first` on
  /// (qg_ q-blocks for the forward and dQ, cg_ kv-blocks for dK / dV).
  struct Unit {
    int64_t b, g, first;
  };

  // ------------------------------------------------------------------ set-up
  void validate() const {
    auto need = [](const HostTensor& t, int64_t n, const char* name) {
      if (static_cast<int64_t>(t.data.size()) != n)
        throw std::invalid_argument(std::string("reference: input ") + name + " has " +
                                    std::to_string(t.data.size()) + " elements, the problem needs " +
                                    std::to_string(n));
    };
    need(in_.q, p_.q_numel(), "q");
    need(in_.k, p_.k_numel(), "k");
    need(in_.v, p_.v_numel(), "v");
    if (grads_) need(in_.d_o, p_.o_numel(), "do");
    if (static_cast<int64_t>(in_.bias.size()) != p_.bias_numel())
      throw std::invalid_argument("reference: bias has " + std::to_string(in_.bias.size()) +
                                  " elements, the problem needs " + std::to_string(p_.bias_numel()));
    if (static_cast<int64_t>(in_.offset.size()) != p_.offset_numel())
      throw std::invalid_argument("reference: offset has " + std::to_string(in_.offset.size()) +
                                  " elements, the problem needs " + std::to_string(p_.offset_numel()));
    for (size_t j = 0; j < in_.offset.size(); ++j)
      if (in_.offset[j] < 0 || in_.offset[j] >= p_.score_mod.size)
        throw std::invalid_argument("reference: offset[" + std::to_string(j) + "] = " +
                                    std::to_string(in_.offset[j]) + " outside [0, " +
                                    std::to_string(p_.score_mod.size) + ")");
    if (!slices_.all && static_cast<int64_t>(slices_.selected.size()) != p_.batch * p_.heads_kv)
      throw std::invalid_argument("reference: SliceSet has " + std::to_string(slices_.selected.size()) +
                                  " entries, expected B * Hkv = " + std::to_string(p_.batch * p_.heads_kv));
  }

  /// lp: float copies of q, k, v (and dO) of the selected slices only, converted in
  /// parallel on the pool (the buffers of unselected slices stay uninitialised and
  /// are never read): a sampled check of a long row converts 4 slices, not B * Hkv.
  void convert_selected() {
    auto alloc = [](std::unique_ptr<T[]>& buf, size_t n) {
      buf.reset(new T[n]);
      return buf.get();
    };
    q_ = alloc(qbuf_, in_.q.data.size()), k_ = alloc(kbuf_, in_.k.data.size());
    v_ = alloc(vbuf_, in_.v.data.size()), do_ = grads_ ? alloc(dobuf_, in_.d_o.data.size()) : nullptr;
    std::vector<std::pair<int64_t, int64_t>> sel;
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t g = 0; g < Hkv_; ++g)
        if (slices_.contains(b, g, Hkv_)) sel.emplace_back(b, g);
    auto copy = [](const std::vector<double>& src, T* dst, int64_t first, int64_t n) {
      std::copy(src.begin() + first, src.begin() + first + n, dst + first);
    };
    parallel_for(static_cast<int64_t>(sel.size()), threads_, [&](int64_t t, int) {
      const auto [b, g] = sel[static_cast<size_t>(t)];
      copy(in_.k.data, kbuf_.get(), (b * Hkv_ + g) * Sk_ * D_, Sk_ * D_);
      copy(in_.v.data, vbuf_.get(), (b * Hkv_ + g) * Sk_ * Dv_, Sk_ * Dv_);
      const int64_t r0 = row_index(b, g * G_, 0), rows = G_ * Sq_;  // the group's query heads are adjacent
      copy(in_.q.data, qbuf_.get(), r0 * D_, rows * D_);
      if (grads_) copy(in_.d_o.data, dobuf_.get(), r0 * Dv_, rows * Dv_);
    });
  }

  // ------------------------------------------------------------------ helpers
  int64_t row_index(int64_t b, int64_t h, int64_t i) const { return (b * Hq_ + h) * Sq_ + i; }
  int64_t row_index(const PanelRows& pr, int64_t m) const { return row_index(pr.b, pr.head(m), pr.pos(m)); }
  const T* q_rows(int64_t b, int64_t h, int64_t i) const { return q_ + row_index(b, h, i) * D_; }
  const T* do_rows(int64_t b, int64_t h, int64_t i) const { return do_ + row_index(b, h, i) * Dv_; }
  const T* k_rows(int64_t b, int64_t g, int64_t j) const { return k_ + ((b * Hkv_ + g) * Sk_ + j) * D_; }
  /// Where the outputs keep query row (b, h, i) (O, LSE, dQ) and key row (b, g, j)
  /// (dK, dV): the logical index, or with Options::sliced the index in the
  /// selected slices' blocks (slice (b, g) at its rank among them).
  int64_t out_row(int64_t b, int64_t h, int64_t i) const {
    if (!sliced_) return row_index(b, h, i);
    const int64_t g = h / G_;
    return (rank_[static_cast<size_t>(b * Hkv_ + g)] * G_ + (h - g * G_)) * Sq_ + i;
  }
  int64_t out_row(const PanelRows& pr, int64_t m) const { return out_row(pr.b, pr.head(m), pr.pos(m)); }
  int64_t out_key(int64_t b, int64_t g, int64_t j) const {
    return (sliced_ ? rank_[static_cast<size_t>(b * Hkv_ + g)] : b * Hkv_ + g) * Sk_ + j;
  }
  /// The shape of an output with H heads, S rows and `inner` columns (0: none, LSE):
  /// [B, H, S(, inner)], or with Options::sliced [selected slices, H / Hkv, S(, inner)].
  std::vector<int64_t> out_shape(int64_t H, int64_t S, int64_t inner) const {
    std::vector<int64_t> shape = sliced_ ? std::vector<int64_t>{n_slices_, H / Hkv_, S} : std::vector<int64_t>{B_, H, S};
    if (inner > 0) shape.push_back(inner);
    return shape;
  }
  const T* v_rows(int64_t b, int64_t g, int64_t j) const { return v_ + ((b * Hkv_ + g) * Sk_ + j) * Dv_; }

  /// Round to the problem dtype (lp only; a no-op for gold and for fp32). Inline
  /// and bit-exact with round_to() of tensors.hpp.
  void rnd(T* x, int64_t n) const {
    if constexpr (!kExact) {
      if (dtype_ == DType::bf16) {
        for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
      } else if (dtype_ == DType::fp16) {
        for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(Eigen::half(x[i]));
      }
    } else {
      (void)x, (void)n;
    }
  }
  void rnd(Mat<T>& m) const { rnd(m.data(), m.size()); }

  /// s.lines for lines [first, first + n) of batch row b: the q-block lines'
  /// kv tiles (by_col false) or the kv-block lines' q tiles (by_col true), walked
  /// with for_each_tile / for_each_tile_of_col, as runs of at most `run_max`
  /// consecutive blocks out of `nblocks`.
  void collect(int64_t b, int64_t first, int64_t n, bool by_col, int64_t nblocks, int64_t run_max,
               Lines& ls) const {
    ls.listed.assign(static_cast<size_t>(nblocks), 0);
    ls.full.assign(static_cast<size_t>(nblocks), 0);
    ls.partial.assign(static_cast<size_t>(nblocks), 0);
    auto mark = [&](int64_t blk, bool full) {
      ++ls.listed[static_cast<size_t>(blk)];
      if (full) ++ls.full[static_cast<size_t>(blk)];
    };
    for (int64_t line = first; line < first + n; ++line) {
      if (by_col) for_each_tile_of_col(bm_, b, 0, line, mark);
      else for_each_tile(bm_, b, 0, line, mark);
    }
    ls.runs.clear();
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const auto x = static_cast<size_t>(blk);
      if (ls.listed[x] == 0) continue;
      ls.partial[x] = ls.full[x] != n;
      if (!ls.runs.empty() && ls.runs.back().first + ls.runs.back().count == blk && ls.runs.back().count < run_max)
        ++ls.runs.back().count;
      else
        ls.runs.push_back({blk, 1});
    }
  }

  /// score_mod(x, b, h, i, j): learnable biases are added from the float64 bias
  /// values at score_mod_bias_index() (so --inputs biases are used as given); the
  /// other mods go through score_mod_apply().
  T mod(T x, int64_t h, int64_t i, int64_t j) const {
    if (learnable_) return x + static_cast<T>(in_.bias[static_cast<size_t>(score_mod_bias_index(sd_, h, i, j))]);
    return score_mod_apply<T>(sd_, x, h, i, j);
  }

  /// Set s.S(m, c) = -inf for every row m of the panel and column c in
  /// [c0, c0 + cw) whose pair is not allowed, rows limited to panel-row positions
  /// [r0, r0 + rn) of each head (mask_allowed, evaluated once per (i, j): no mask
  /// kind depends on h).
  void mask_rect(const PanelRows& pr, int64_t r0, int64_t rn, int64_t j0, int64_t c0, int64_t cw,
                 Scratch<T>& s) const {
    for (int64_t r = r0; r < r0 + rn; ++r)
      for (int64_t c = c0; c < c0 + cw; ++c)
        if (!mask_allowed(md_, pr.b, pr.h0, pr.i0 + r, j0 + c))
          for (int64_t rep = 0; rep < pr.replicas; ++rep) s.S(rep * pr.rows + r, c) = kNegInf;
  }

  /// s.S = scale * Qpanel K^T over keys [j0, j0 + cols) of kv head g (rounded),
  /// score_mod (rounded); s.X = the scaled scores before score_mod (softcap). The
  /// caller masks.
  template <class QPanel>
  void score_panel(const PanelRows& pr, const QPanel& Qpanel, int64_t g, int64_t j0, int64_t cols,
                   Scratch<T>& s) const {
    s.S.noalias() = Qpanel * CMap<T>(k_rows(pr.b, g, j0), cols, D_).transpose();
    s.S *= scale_;
    rnd(s.S);
    if (softcap_) s.X = s.S;
    if (has_mod_) {
      for (int64_t m = 0; m < s.S.rows(); ++m) {
        const int64_t h = pr.head(m), i = pr.pos(m);
        for (int64_t c = 0; c < cols; ++c) s.S(m, c) = mod(s.S(m, c), h, i, j0 + c);
      }
      rnd(s.S);
    }
  }

  /// Scores of a forward / dQ panel for run `run` of kv-blocks (mask evaluated on
  /// the run's partial blocks).
  void row_scores(const PanelRows& pr, int64_t g, const Run& run, Scratch<T>& s) const {
    const int64_t j0 = run.first * bk_, cols = std::min(run.count * bk_, Sk_ - j0);
    score_panel(pr, s.Qp, g, j0, cols, s);
    for (int64_t kb = run.first; kb < run.first + run.count; ++kb)
      if (s.lines.partial[static_cast<size_t>(kb)]) {
        const int64_t c0 = (kb - run.first) * bk_;
        mask_rect(pr, 0, pr.rows, j0, c0, std::min(bk_, cols - c0), s);
      }
  }

  /// exp(S - m) of one score row, exactly 0 where S = -inf (masked). Eigen's
  /// vectorised exp clamps its argument (float: near -88, double: near -709), so
  /// exp(-inf) would otherwise give a tiny nonzero.
  template <class Row>
  static auto masked_exp(const Row& row, T m) {
    return (row.array() == kNegInf).select(T(0), (row.array() - m).exp());
  }

  /// s.P = exp(S - m) / l per row from the saved row statistics (gold: m = LSE,
  /// l = 1); rows without any allowed key (l = 0) get P = 0.
  void probs(const PanelRows& pr, Scratch<T>& s) const {
    s.P.resize(s.S.rows(), s.S.cols());
    for (int64_t m = 0; m < s.S.rows(); ++m) {
      const auto ri = static_cast<size_t>(row_index(pr, m));
      const T mx = row_m_[ri], l = row_l_[ri];
      if (l > T(0)) s.P.row(m) = masked_exp(s.S.row(m), mx) / l;
      else s.P.row(m).setZero();
    }
    rnd(s.P);
  }

  /// From s.P and s.dP = dO V^T: s.dP <- dS' = P o (dP - D) (rounded), accumulated
  /// into `dbias` (when given) at the bias index of each allowed pair, then
  /// dS = dS' o score_mod'(X) for softcap (rounded). Keys start at j0.
  void grad_scores(const PanelRows& pr, int64_t j0, Scratch<T>& s, T* dbias) const {
    const int64_t rows = s.P.rows(), cols = s.P.cols();
    for (int64_t m = 0; m < rows; ++m)
      s.dP.row(m).array() = s.P.row(m).array() * (s.dP.row(m).array() - row_d_[static_cast<size_t>(row_index(pr, m))]);
    rnd(s.dP);
    if (dbias)
      for (int64_t m = 0; m < rows; ++m) {
        const int64_t h = pr.head(m), i = pr.pos(m);
        for (int64_t c = 0; c < cols; ++c)
          if (s.S(m, c) != kNegInf) dbias[score_mod_bias_index(sd_, h, i, j0 + c)] += s.dP(m, c);
      }
    if (softcap_) {
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t c = 0; c < cols; ++c) s.dP(m, c) *= score_mod_grad<T>(sd_, s.X(m, c));
      rnd(s.dP);
    }
  }

  /// The panel rows of q unit u (all G query heads of its kv head over its q-blocks)
  /// and s.lines = its kv tiles; gathers Q (and dO when `with_do`) into s.Qp / s.dOp.
  PanelRows q_panel(const Unit& u, bool with_do, Scratch<T>& s) const {
    const int64_t i0 = u.first * bq_, n = std::min(qg_, nq_ - u.first);
    const PanelRows pr{u.b, u.g * G_, i0, std::min(n * bq_, Sq_ - i0), G_};
    collect(u.b, u.first, n, false, nk_, run_k_, s.lines);
    s.Qp.resize(G_ * pr.rows, D_);
    if (with_do) s.dOp.resize(G_ * pr.rows, Dv_);
    for (int64_t hl = 0; hl < G_; ++hl) {
      s.Qp.middleRows(hl * pr.rows, pr.rows) = CMap<T>(q_rows(u.b, pr.h0 + hl, i0), pr.rows, D_);
      if (with_do) s.dOp.middleRows(hl * pr.rows, pr.rows) = CMap<T>(do_rows(u.b, pr.h0 + hl, i0), pr.rows, Dv_);
    }
    return pr;
  }

  // ------------------------------------------------------------------ forward
  void forward_unit(const Unit& u, Scratch<T>& s) {
    const PanelRows pr = q_panel(u, false, s);
    const int64_t M = G_ * pr.rows;
    s.acc.setZero(M, Dv_);
    s.m.setConstant(M, kNegInf);
    s.l.setZero(M);
    if constexpr (kExact) {
      // Online softmax (FlashAttention-2 algorithm 1) in float64.
      for (const Run& run : s.lines.runs) {
        const int64_t j0 = run.first * bk_;
        row_scores(pr, u.g, run, s);
        s.P.resize(M, s.S.cols());
        for (int64_t r = 0; r < M; ++r) {
          const T mnew = std::max(s.m(r), s.S.row(r).maxCoeff());
          if (mnew == kNegInf) {
            s.P.row(r).setZero();
            continue;
          }
          const T alpha = std::exp(s.m(r) - mnew);
          s.P.row(r) = masked_exp(s.S.row(r), mnew);
          s.l(r) = alpha * s.l(r) + s.P.row(r).sum();
          if (alpha != T(1)) s.acc.row(r) *= alpha;
          s.m(r) = mnew;
        }
        s.acc.noalias() += s.P * CMap<T>(v_rows(u.b, u.g, j0), s.S.cols(), Dv_);
      }
      for (int64_t r = 0; r < M; ++r) {
        const auto ri = static_cast<size_t>(row_index(pr, r)), oi = static_cast<size_t>(out_row(pr, r));
        if (s.l(r) > 0) {
          s.acc.row(r) /= s.l(r);
          out_.lse.data[oi] = s.m(r) + std::log(s.l(r));
          row_m_[ri] = out_.lse.data[oi];
          row_l_[ri] = 1;
        } else {
          s.acc.row(r).setZero();
          out_.lse.data[oi] = -std::numeric_limits<double>::infinity();
        }
      }
    } else {
      // Plain softmax: row max and sum over every tile first, then P and O.
      for (const Run& run : s.lines.runs) {
        row_scores(pr, u.g, run, s);
        for (int64_t r = 0; r < M; ++r) {
          const T mnew = std::max(s.m(r), s.S.row(r).maxCoeff());
          if (mnew == kNegInf) continue;
          s.l(r) = s.l(r) * std::exp(s.m(r) - mnew) + masked_exp(s.S.row(r), mnew).sum();
          s.m(r) = mnew;
        }
      }
      for (int64_t r = 0; r < M; ++r) {
        const auto ri = static_cast<size_t>(row_index(pr, r));
        row_m_[ri] = s.m(r);
        row_l_[ri] = s.l(r);
        out_.lse.data[static_cast<size_t>(out_row(pr, r))] = s.l(r) > 0 ? static_cast<double>(static_cast<T>(s.m(r) + std::log(s.l(r))))
                                       : -std::numeric_limits<double>::infinity();
      }
      for (const Run& run : s.lines.runs) {
        row_scores(pr, u.g, run, s);
        probs(pr, s);
        s.acc.noalias() += s.P * CMap<T>(v_rows(u.b, u.g, run.first * bk_), s.S.cols(), Dv_);
      }
      rnd(s.acc);
    }
    for (int64_t r = 0; r < M; ++r) {
      double* o = out_.o.data.data() + out_row(pr, r) * Dv_;
      for (int64_t c = 0; c < Dv_; ++c) o[c] = static_cast<double>(s.acc(r, c));
    }
  }

  // ------------------------------------------------------------------ backward
  void backward() {
    constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    out_.dq = HostTensor(out_shape(Hq_, Sq_, D_), nan);
    out_.dk = HostTensor(out_shape(Hkv_, Sk_, D_), nan);
    out_.dv = HostTensor(out_shape(Hkv_, Sk_, Dv_), nan);
    row_d_.assign(row_m_.size(), T(0));

    // dQ pass (also the row terms D); dBias in fixed lanes: lane L runs units
    // L, L + lanes, ... in order with its own accumulator.
    const int64_t nunits = static_cast<int64_t>(q_units_.size());
    const bool with_bias = learnable_ && slices_.all;
    const int64_t nbias = p_.bias_numel();
    const int64_t lanes = with_bias ? std::min(nunits, kBiasLanes) : nunits;
    std::vector<T> lane_bias(with_bias ? static_cast<size_t>(lanes * nbias) : 0, T(0));
    for_units<Scratch<T>>(lanes, threads_, [&](int64_t lane, Scratch<T>& s) {
      T* db = with_bias ? lane_bias.data() + lane * nbias : nullptr;
      for (int64_t u = lane; u < nunits; u += lanes) dq_unit(q_units_[static_cast<size_t>(u)], s, db);
    });
    for_units<Scratch<T>>(static_cast<int64_t>(kv_units_.size()), threads_,
                          [this](int64_t u, Scratch<T>& s) { dkdv_unit(kv_units_[static_cast<size_t>(u)], s); });
    if (with_bias) {
      out_.dbias.assign(static_cast<size_t>(nbias), 0.0);
      for (int64_t x = 0; x < nbias; ++x) {
        T sum = 0;
        for (int64_t lane = 0; lane < lanes; ++lane) sum += lane_bias[static_cast<size_t>(lane * nbias + x)];
        out_.dbias[static_cast<size_t>(x)] = static_cast<double>(sum);
      }
    }
  }

  void dq_unit(const Unit& u, Scratch<T>& s, T* dbias) {
    const PanelRows pr = q_panel(u, true, s);
    const int64_t M = G_ * pr.rows;
    if constexpr (kExact) {
      // D_i = dO_i . O_i (FlashAttention-2 algorithm 2, line 4).
      for (int64_t r = 0; r < M; ++r) {
        const int64_t ri = row_index(pr, r);
        const Eigen::Map<const Eigen::Matrix<double, 1, Eigen::Dynamic>> o(out_.o.data.data() + out_row(pr, r) * Dv_, Dv_);
        row_d_[static_cast<size_t>(ri)] = (s.dOp.row(r).array() * o.array()).sum();
      }
    } else {
      // D_i = sum_j P_ij dP_ij: the softmax backward of the plain computation.
      s.dsum.setZero(M);
      for (const Run& run : s.lines.runs) {
        row_scores(pr, u.g, run, s);
        probs(pr, s);
        s.dP.noalias() = s.dOp * CMap<T>(v_rows(u.b, u.g, run.first * bk_), s.S.cols(), Dv_).transpose();
        rnd(s.dP);
        s.dsum += (s.P.array() * s.dP.array()).rowwise().sum();
      }
      for (int64_t r = 0; r < M; ++r) row_d_[static_cast<size_t>(row_index(pr, r))] = s.dsum(r);
    }
    s.acc.setZero(M, D_);
    for (const Run& run : s.lines.runs) {
      const int64_t j0 = run.first * bk_;
      row_scores(pr, u.g, run, s);
      probs(pr, s);
      s.dP.noalias() = s.dOp * CMap<T>(v_rows(u.b, u.g, j0), s.S.cols(), Dv_).transpose();
      rnd(s.dP);
      grad_scores(pr, j0, s, dbias);
      s.acc.noalias() += s.dP * CMap<T>(k_rows(u.b, u.g, j0), s.S.cols(), D_);
    }
    s.acc *= scale_;
    rnd(s.acc);
    for (int64_t r = 0; r < M; ++r) {
      double* dq = out_.dq.data.data() + out_row(pr, r) * D_;
      for (int64_t c = 0; c < D_; ++c) dq[c] = static_cast<double>(s.acc(r, c));
    }
  }

  /// dK and dV of keys [j0, j0 + cols) (cg_ kv-blocks) of kv head g, summed over
  /// its query heads: per head, runs of consecutive q-blocks as GEMMs.
  void dkdv_unit(const Unit& u, Scratch<T>& s) {
    const int64_t j0 = u.first * bk_, n = std::min(cg_, nk_ - u.first);
    const int64_t cols = std::min(n * bk_, Sk_ - j0);
    const CMap<T> Vt(v_rows(u.b, u.g, j0), cols, Dv_);
    collect(u.b, u.first, n, true, nq_, run_q_, s.lines);
    s.acc.setZero(cols, D_);
    s.acc2.setZero(cols, Dv_);
    for (int64_t h = u.g * G_; h < (u.g + 1) * G_; ++h) {
      for (const Run& run : s.lines.runs) {
        const int64_t i0 = run.first * bq_, rows = std::min(run.count * bq_, Sq_ - i0);
        const PanelRows pr{u.b, h, i0, rows, 1};
        const CMap<T> Qr(q_rows(u.b, h, i0), rows, D_);
        const CMap<T> dOr(do_rows(u.b, h, i0), rows, Dv_);
        score_panel(pr, Qr, u.g, j0, cols, s);
        for (int64_t qb = run.first; qb < run.first + run.count; ++qb)
          if (s.lines.partial[static_cast<size_t>(qb)]) {
            const int64_t r0 = (qb - run.first) * bq_;
            mask_rect(pr, r0, std::min(bq_, rows - r0), j0, 0, cols, s);
          }
        probs(pr, s);
        s.acc2.noalias() += s.P.transpose() * dOr;
        s.dP.noalias() = dOr * Vt.transpose();
        rnd(s.dP);
        grad_scores(pr, j0, s, nullptr);
        s.acc.noalias() += s.dP.transpose() * Qr;
      }
    }
    s.acc *= scale_;
    rnd(s.acc);
    rnd(s.acc2);
    const int64_t kbase = out_key(u.b, u.g, j0);
    double* dk = out_.dk.data.data() + kbase * D_;
    double* dv = out_.dv.data.data() + kbase * Dv_;
    for (int64_t r = 0; r < cols; ++r) {
      for (int64_t c = 0; c < D_; ++c) dk[r * D_ + c] = static_cast<double>(s.acc(r, c));
      for (int64_t c = 0; c < Dv_; ++c) dv[r * Dv_ + c] = static_cast<double>(s.acc2(r, c));
    }
  }

  // ------------------------------------------------------------------ stats
  void fill_stats(Stats& st) const {
    st = Stats{};
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t h = 0; h < Hq_; ++h) {
        if (!slices_.contains(b, h / G_, Hkv_)) continue;
        for (int64_t qb = 0; qb < nq_; ++qb) {
          const int64_t rows = std::min(bq_, Sq_ - qb * bq_);
          for_each_tile(bm_, b, h, qb, [&](int64_t kb, bool full) {
            (full ? st.full_tiles : st.partial_tiles) += 1;
            st.executed_pairs += rows * std::min(bk_, Sk_ - kb * bk_);
          });
        }
      }
    const auto per_batch = count_allowed_pairs_per_batch(p_);
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t h = 0; h < Hq_; ++h)
        if (slices_.contains(b, h / G_, Hkv_)) st.useful_pairs += per_batch[static_cast<size_t>(b)];
  }

  const Problem& p_;
  const ProblemData& in_;
  bool grads_;
  const SliceSet& slices_;
  int threads_ = 1;
  int64_t B_ = 0, Hq_ = 0, Hkv_ = 0, G_ = 1, Sq_ = 0, Sk_ = 0, D_ = 0, Dv_ = 0;
  T scale_ = 1;
  DType dtype_ = DType::fp32;
  MaskArrays mask_arrays_;
  MaskDesc md_;
  ScoreModDesc sd_;
  bool learnable_ = false, softcap_ = false, has_mod_ = false;
  BlockMask bm_;
  int64_t bq_ = 0, bk_ = 0, nq_ = 0, nk_ = 0;
  int64_t qg_ = 1, cg_ = 1;          ///< q-blocks per forward / dQ unit, kv-blocks per dK / dV unit
  int64_t run_k_ = 1, run_q_ = 1;    ///< longest run of kv-blocks / q-blocks in one GEMM
  std::unique_ptr<T[]> qbuf_, kbuf_, vbuf_, dobuf_;  ///< lp: float copies of the selected slices
  const T *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *do_ = nullptr;
  std::vector<Unit> q_units_;   ///< selected (b, kv-head, q-block group) units
  std::vector<Unit> kv_units_;  ///< selected (b, kv-head, kv-block group) units
  std::vector<T> row_m_, row_l_;   ///< saved softmax statistics per row [B*Hq*Sq]
  std::vector<T> row_d_;           ///< backward row terms D [B*Hq*Sq]
  bool sliced_ = false;             ///< Options::sliced: outputs of the selected slices only
  std::vector<int64_t> rank_;       ///< per (b, kv head): its rank among the selected slices, -1 if not selected
  int64_t n_slices_ = 0;            ///< selected slices
  AttentionOutputs out_;
};

}  // namespace

AttentionOutputs gold(const Problem& p, const ProblemData& in, bool grads, const SliceSet& slices) {
  return gold(p, in, grads, slices, Options{});
}

AttentionOutputs gold(const Problem& p, const ProblemData& in, bool grads, const SliceSet& slices,
                      const Options& opt, Stats* stats) {
  return Engine<double>(p, in, grads, slices, opt).run(stats);
}

AttentionOutputs lp(const Problem& p, const ProblemData& in, bool grads, const SliceSet& slices) {
  return lp(p, in, grads, slices, Options{});
}

AttentionOutputs lp(const Problem& p, const ProblemData& in, bool grads, const SliceSet& slices,
                    const Options& opt, Stats* stats) {
  return Engine<float>(p, in, grads, slices, opt).run(stats);
}

double estimated_flops(const Problem& p, bool grads) {
  const double pairs = static_cast<double>(count_allowed_pairs(p));
  const double fwd = 2.0 * pairs * static_cast<double>(p.head_dim + p.head_dim_v) * static_cast<double>(p.heads_q);
  return grads ? 3.5 * fwd : fwd;
}

}  // namespace attnbench::reference
