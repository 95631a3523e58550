// The tiled reference engine behind gold() (T = double, exact) and lp() (T = float,
// rounding to the problem dtype). See reference.hpp for the algorithm and its
// sources; this file holds the tile loops, the work partition and the threads.
#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

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

/// Run fn(unit, state) for every unit in [0, n) on up to `threads` threads of the
/// shared pool (harness/model/thread_pool.hpp); each worker owns one
/// default-constructed State (its scratch buffers).
template <class State, class Fn>
void for_units(int64_t n, int threads, const Fn& fn) {
  if (n <= 0) return;
  std::vector<State> states(static_cast<size_t>(std::min<int64_t>({threads, n, ThreadPool::shared().size()})));
  parallel_for(n, static_cast<int>(states.size()), [&](int64_t u, int w) { fn(u, states[static_cast<size_t>(w)]); });
}

/// One computed tile of a q-block row (block = kv-block) or kv-block column
/// (block = q-block); `full` tiles skip the mask.
struct Tile {
  int64_t block;
  bool full;
};

/// Per-thread scratch: score, probability and gradient tiles and accumulators.
template <class T>
struct Scratch {
  Mat<T> S;    ///< scores after score_mod and mask [rows x cols]
  Mat<T> X;    ///< scaled scores before score_mod (softcap derivative)
  Mat<T> P;    ///< probabilities
  Mat<T> dP;   ///< dO V^T, then dS' and dS in place
  Mat<T> acc;  ///< O, dQ or dK accumulator
  Mat<T> acc2; ///< dV accumulator
  Col<T> m, l, dsum;
  std::vector<Tile> tiles;
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

    if constexpr (kExact) {
      q_ = in.q.data.data(), k_ = in.k.data.data(), v_ = in.v.data.data();
      do_ = grads ? in.d_o.data.data() : nullptr;
    } else {
      q_ = convert(in.q.data, qbuf_), k_ = convert(in.k.data, kbuf_), v_ = convert(in.v.data, vbuf_);
      do_ = grads ? convert(in.d_o.data, dobuf_) : nullptr;
    }
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t h = 0; h < Hq_; ++h)
        if (slices_.contains(b, h / G_, Hkv_))
          for (int64_t qb = 0; qb < nq_; ++qb) q_units_.push_back((b * Hq_ + h) * nq_ + qb);
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t g = 0; g < Hkv_; ++g)
        if (slices_.contains(b, g, Hkv_))
          for (int64_t kb = 0; kb < nk_; ++kb) kv_units_.push_back((b * Hkv_ + g) * nk_ + kb);
  }

  AttentionOutputs run(Stats* stats) {
    constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    out_.o = HostTensor({B_, Hq_, Sq_, Dv_}, nan);
    out_.lse = HostTensor({B_, Hq_, Sq_}, nan);
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

  static const T* convert(const std::vector<double>& src, std::vector<T>& dst) {
    dst.assign(src.begin(), src.end());
    return dst.data();
  }

  // ------------------------------------------------------------------ helpers
  int64_t row_index(int64_t b, int64_t h, int64_t i) const { return (b * Hq_ + h) * Sq_ + i; }
  const T* q_rows(int64_t b, int64_t h, int64_t i) const { return q_ + row_index(b, h, i) * D_; }
  const T* do_rows(int64_t b, int64_t h, int64_t i) const { return do_ + row_index(b, h, i) * Dv_; }
  const T* k_rows(int64_t b, int64_t g, int64_t j) const { return k_ + ((b * Hkv_ + g) * Sk_ + j) * D_; }
  const T* v_rows(int64_t b, int64_t g, int64_t j) const { return v_ + ((b * Hkv_ + g) * Sk_ + j) * Dv_; }

  /// Round to the problem dtype (lp only; a no-op for gold and for fp32).
  void rnd(T* x, int64_t n) const {
    if constexpr (!kExact) {
      if (dtype_ == DType::fp32) return;
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(round_to(dtype_, x[i]));
    } else {
      (void)x, (void)n;
    }
  }
  void rnd(Mat<T>& m) const { rnd(m.data(), m.size()); }

  /// The tiles of q-block qb of batch row b (for_each_tile: partial, then full).
  void row_tiles(int64_t b, int64_t qb, std::vector<Tile>& out) const {
    out.clear();
    for_each_tile(bm_, b, 0, qb, [&](int64_t kb, bool full) { out.push_back({kb, full}); });
  }
  /// The tiles of kv-block kb of batch row b (for_each_tile_of_col).
  void col_tiles(int64_t b, int64_t kb, std::vector<Tile>& out) const {
    out.clear();
    for_each_tile_of_col(bm_, b, 0, kb, [&](int64_t qb, bool full) { out.push_back({qb, full}); });
  }

  /// score_mod(x, b, h, i, j): learnable biases are added from the float64 bias
  /// values at score_mod_bias_index() (so --inputs biases are used as given); the
  /// other mods go through score_mod_apply().
  T mod(T x, int64_t h, int64_t i, int64_t j) const {
    if (learnable_) return x + static_cast<T>(in_.bias[static_cast<size_t>(score_mod_bias_index(sd_, h, i, j))]);
    return score_mod_apply<T>(sd_, x, h, i, j);
  }

  /// s.S = final scores of tile rows [i0, i0 + rows) x cols [j0, j0 + cols) of (b, h):
  /// scale * Q K^T (rounded), score_mod (rounded), -inf where the mask forbids
  /// (partial tiles only). s.X = the scaled scores before score_mod (softcap).
  void score_tile(int64_t b, int64_t h, int64_t i0, int64_t rows, int64_t j0, int64_t cols, bool full,
                  Scratch<T>& s) const {
    const CMap<T> Qb(q_rows(b, h, i0), rows, D_);
    const CMap<T> Kt(k_rows(b, h / G_, j0), cols, D_);
    s.S.noalias() = Qb * Kt.transpose();
    s.S *= scale_;
    rnd(s.S);
    if (softcap_) s.X = s.S;
    if (has_mod_) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) s.S(r, c) = mod(s.S(r, c), h, i0 + r, j0 + c);
      rnd(s.S);
    }
    if (!full)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          if (!mask_allowed(md_, b, h, i0 + r, j0 + c)) s.S(r, c) = kNegInf;
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
  void probs(int64_t rbase, Scratch<T>& s) const {
    s.P.resize(s.S.rows(), s.S.cols());
    for (int64_t r = 0; r < s.S.rows(); ++r) {
      const T m = row_m_[static_cast<size_t>(rbase + r)], l = row_l_[static_cast<size_t>(rbase + r)];
      if (l > T(0)) s.P.row(r) = masked_exp(s.S.row(r), m) / l;
      else s.P.row(r).setZero();
    }
    rnd(s.P);
  }

  /// From s.P and s.dP = dO V^T: s.dP <- dS' = P o (dP - D) (rounded), accumulated
  /// into `dbias` (when given) at the bias index of each allowed pair, then
  /// dS = dS' o score_mod'(X) for softcap (rounded).
  void grad_scores(int64_t h, int64_t i0, int64_t j0, int64_t rbase, Scratch<T>& s, T* dbias) const {
    const int64_t rows = s.P.rows(), cols = s.P.cols();
    for (int64_t r = 0; r < rows; ++r)
      s.dP.row(r).array() = s.P.row(r).array() * (s.dP.row(r).array() - row_d_[static_cast<size_t>(rbase + r)]);
    rnd(s.dP);
    if (dbias)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          if (s.S(r, c) != kNegInf) dbias[score_mod_bias_index(sd_, h, i0 + r, j0 + c)] += s.dP(r, c);
    if (softcap_) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) s.dP(r, c) *= score_mod_grad<T>(sd_, s.X(r, c));
      rnd(s.dP);
    }
  }

  // ------------------------------------------------------------------ forward
  void forward_unit(int64_t unit, Scratch<T>& s) {
    const int64_t qb = unit % nq_, bh = unit / nq_, h = bh % Hq_, b = bh / Hq_, g = h / G_;
    const int64_t i0 = qb * bq_, rows = std::min(bq_, Sq_ - i0), rbase = row_index(b, h, i0);
    row_tiles(b, qb, s.tiles);
    s.acc.setZero(rows, Dv_);
    s.m.setConstant(rows, kNegInf);
    s.l.setZero(rows);
    if constexpr (kExact) {
      // Online softmax (FlashAttention-2 algorithm 1) in float64.
      for (const Tile& t : s.tiles) {
        const int64_t j0 = t.block * bk_, cols = std::min(bk_, Sk_ - j0);
        score_tile(b, h, i0, rows, j0, cols, t.full, s);
        s.P.resize(rows, cols);
        for (int64_t r = 0; r < rows; ++r) {
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
        s.acc.noalias() += s.P * CMap<T>(v_rows(b, g, j0), cols, Dv_);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const size_t ri = static_cast<size_t>(rbase + r);
        if (s.l(r) > 0) {
          s.acc.row(r) /= s.l(r);
          out_.lse.data[ri] = s.m(r) + std::log(s.l(r));
          row_m_[ri] = out_.lse.data[ri];
          row_l_[ri] = 1;
        } else {
          s.acc.row(r).setZero();
          out_.lse.data[ri] = -std::numeric_limits<double>::infinity();
        }
      }
    } else {
      // Plain softmax: row max and sum over every tile first, then P and O.
      for (const Tile& t : s.tiles) {
        const int64_t j0 = t.block * bk_, cols = std::min(bk_, Sk_ - j0);
        score_tile(b, h, i0, rows, j0, cols, t.full, s);
        for (int64_t r = 0; r < rows; ++r) {
          const T mnew = std::max(s.m(r), s.S.row(r).maxCoeff());
          if (mnew == kNegInf) continue;
          s.l(r) = s.l(r) * std::exp(s.m(r) - mnew) + masked_exp(s.S.row(r), mnew).sum();
          s.m(r) = mnew;
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        const size_t ri = static_cast<size_t>(rbase + r);
        row_m_[ri] = s.m(r);
        row_l_[ri] = s.l(r);
        out_.lse.data[ri] = s.l(r) > 0 ? static_cast<double>(static_cast<T>(s.m(r) + std::log(s.l(r))))
                                       : -std::numeric_limits<double>::infinity();
      }
      for (const Tile& t : s.tiles) {
        const int64_t j0 = t.block * bk_, cols = std::min(bk_, Sk_ - j0);
        score_tile(b, h, i0, rows, j0, cols, t.full, s);
        probs(rbase, s);
        s.acc.noalias() += s.P * CMap<T>(v_rows(b, g, j0), cols, Dv_);
      }
      rnd(s.acc);
    }
    double* o = out_.o.data.data() + rbase * Dv_;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < Dv_; ++c) o[r * Dv_ + c] = static_cast<double>(s.acc(r, c));
  }

  // ------------------------------------------------------------------ backward
  void backward() {
    constexpr double nan = std::numeric_limits<double>::quiet_NaN();
    out_.dq = HostTensor({B_, Hq_, Sq_, D_}, nan);
    out_.dk = HostTensor({B_, Hkv_, Sk_, D_}, nan);
    out_.dv = HostTensor({B_, Hkv_, Sk_, Dv_}, nan);
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

  void dq_unit(int64_t unit, Scratch<T>& s, T* dbias) {
    const int64_t qb = unit % nq_, bh = unit / nq_, h = bh % Hq_, b = bh / Hq_, g = h / G_;
    const int64_t i0 = qb * bq_, rows = std::min(bq_, Sq_ - i0), rbase = row_index(b, h, i0);
    const CMap<T> dOb(do_rows(b, h, i0), rows, Dv_);
    row_tiles(b, qb, s.tiles);
    if constexpr (kExact) {
      // D_i = dO_i . O_i (FlashAttention-2 algorithm 2, line 4).
      const CMap<T> Ob(out_.o.data.data() + rbase * Dv_, rows, Dv_);
      for (int64_t r = 0; r < rows; ++r)
        row_d_[static_cast<size_t>(rbase + r)] = (dOb.row(r).array() * Ob.row(r).array()).sum();
    } else {
      // D_i = sum_j P_ij dP_ij: the softmax backward of the plain computation.
      s.dsum.setZero(rows);
      for (const Tile& t : s.tiles) {
        const int64_t j0 = t.block * bk_, cols = std::min(bk_, Sk_ - j0);
        score_tile(b, h, i0, rows, j0, cols, t.full, s);
        probs(rbase, s);
        s.dP.noalias() = dOb * CMap<T>(v_rows(b, g, j0), cols, Dv_).transpose();
        rnd(s.dP);
        s.dsum += (s.P.array() * s.dP.array()).rowwise().sum();
      }
      for (int64_t r = 0; r < rows; ++r) row_d_[static_cast<size_t>(rbase + r)] = s.dsum(r);
    }
    s.acc.setZero(rows, D_);
    for (const Tile& t : s.tiles) {
      const int64_t j0 = t.block * bk_, cols = std::min(bk_, Sk_ - j0);
      score_tile(b, h, i0, rows, j0, cols, t.full, s);
      probs(rbase, s);
      s.dP.noalias() = dOb * CMap<T>(v_rows(b, g, j0), cols, Dv_).transpose();
      rnd(s.dP);
      grad_scores(h, i0, j0, rbase, s, dbias);
      s.acc.noalias() += s.dP * CMap<T>(k_rows(b, g, j0), cols, D_);
    }
    s.acc *= scale_;
    rnd(s.acc);
    double* dq = out_.dq.data.data() + rbase * D_;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < D_; ++c) dq[r * D_ + c] = static_cast<double>(s.acc(r, c));
  }

  void dkdv_unit(int64_t unit, Scratch<T>& s) {
    const int64_t kb = unit % nk_, bg = unit / nk_, g = bg % Hkv_, b = bg / Hkv_;
    const int64_t j0 = kb * bk_, cols = std::min(bk_, Sk_ - j0);
    const CMap<T> Vt(v_rows(b, g, j0), cols, Dv_);
    col_tiles(b, kb, s.tiles);
    s.acc.setZero(cols, D_);
    s.acc2.setZero(cols, Dv_);
    for (int64_t h = g * G_; h < (g + 1) * G_; ++h) {
      for (const Tile& t : s.tiles) {
        const int64_t i0 = t.block * bq_, rows = std::min(bq_, Sq_ - i0), rbase = row_index(b, h, i0);
        const CMap<T> dOb(do_rows(b, h, i0), rows, Dv_);
        score_tile(b, h, i0, rows, j0, cols, t.full, s);
        probs(rbase, s);
        s.acc2.noalias() += s.P.transpose() * dOb;
        s.dP.noalias() = dOb * Vt.transpose();
        rnd(s.dP);
        grad_scores(h, i0, j0, rbase, s, nullptr);
        s.acc.noalias() += s.dP.transpose() * CMap<T>(q_rows(b, h, i0), rows, D_);
      }
    }
    s.acc *= scale_;
    rnd(s.acc);
    rnd(s.acc2);
    const int64_t kbase = (b * Hkv_ + g) * Sk_ + j0;
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
    std::vector<Tile> tiles;
    for (int64_t unit : q_units_) {
      const int64_t qb = unit % nq_, b = unit / nq_ / Hq_;
      const int64_t rows = std::min(bq_, Sq_ - qb * bq_);
      row_tiles(b, qb, tiles);
      for (const Tile& t : tiles) {
        (t.full ? st.full_tiles : st.partial_tiles) += 1;
        st.executed_pairs += rows * std::min(bk_, Sk_ - t.block * bk_);
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
  std::vector<T> qbuf_, kbuf_, vbuf_, dobuf_;  ///< lp: float copies of the inputs
  const T *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *do_ = nullptr;
  std::vector<int64_t> q_units_;   ///< selected (b, h, q-block) units, flat
  std::vector<int64_t> kv_units_;  ///< selected (b, kv-head, kv-block) units, flat
  std::vector<T> row_m_, row_l_;   ///< saved softmax statistics per row [B*Hq*Sq]
  std::vector<T> row_d_;           ///< backward row terms D [B*Hq*Sq]
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
