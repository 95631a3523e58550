#include "harness/model/layout.hpp"

#include <stdexcept>

#include "harness/model/thread_pool.hpp"

namespace attnbench {

int64_t PhysicalLayout::numel() const {
  if (layout == Layout::thd) return static_cast<int64_t>(cu_seqlens.back()) * H * D;
  return B * H * S * D;
}

int64_t PhysicalLayout::offset(int64_t b, int64_t h, int64_t s, int64_t d) const {
  switch (layout) {
    case Layout::bshd: return ((b * S + s) * H + h) * D + d;
    case Layout::bhsd: return ((b * H + h) * S + s) * D + d;
    case Layout::thd: {
      const int64_t len = cu_seqlens[b + 1] - cu_seqlens[b];
      if (s >= len) return -1;
      return ((cu_seqlens[b] + s) * H + h) * D + d;
    }
  }
  return -1;
}

PhysicalLayout physical_layout(const Problem& p, TensorRole role) {
  PhysicalLayout l;
  l.layout = p.layout;
  l.B = p.batch;
  const bool is_q = role == TensorRole::q || role == TensorRole::o;
  l.H = is_q ? p.heads_q : p.heads_kv;
  l.S = is_q ? p.seq_q : p.seq_k;
  l.D = (role == TensorRole::q || role == TensorRole::k) ? p.head_dim : p.head_dim_v;
  if (p.layout == Layout::thd) {
    l.cu_seqlens.assign(static_cast<size_t>(p.batch + 1), 0);
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t len = is_q ? p.valid_q(b) : p.valid_k(b);
      l.cu_seqlens[static_cast<size_t>(b + 1)] = l.cu_seqlens[static_cast<size_t>(b)] + static_cast<int32_t>(len);
    }
  }
  return l;
}

namespace {

/// fn(b, h, s, base) for every stored (b, h, s) row of `l` (base: its physical
/// offset), the (b, h) pairs spread over the shared pool (rows are disjoint).
template <class Fn>
void for_each_row(const PhysicalLayout& l, Fn&& fn) {
  parallel_for(l.B * l.H, 0, [&](int64_t bh, int) {
    const int64_t b = bh / l.H, h = bh % l.H;
    for (int64_t s = 0; s < l.S; ++s) {
      const int64_t base = l.offset(b, h, s, 0);
      if (base >= 0) fn(b, h, s, base);
    }
  });
}

}  // namespace

std::vector<double> to_physical(const HostTensor& t, const PhysicalLayout& l) {
  if (t.shape.size() != 4 || t.shape[0] != l.B || t.shape[1] != l.H || t.shape[2] != l.S || t.shape[3] != l.D)
    throw std::invalid_argument("to_physical: tensor shape does not match layout");
  std::vector<double> out(static_cast<size_t>(l.numel()));
  for_each_row(l, [&](int64_t b, int64_t h, int64_t s, int64_t base) {
    for (int64_t d = 0; d < l.D; ++d) out[static_cast<size_t>(base + d)] = t.at4(b, h, s, d);
  });
  return out;
}

HostTensor from_physical(const std::vector<double>& phys, const PhysicalLayout& l, double fill) {
  if (static_cast<int64_t>(phys.size()) != l.numel())
    throw std::invalid_argument("from_physical: buffer size does not match layout");
  HostTensor t({l.B, l.H, l.S, l.D}, fill);
  for_each_row(l, [&](int64_t b, int64_t h, int64_t s, int64_t base) {
    for (int64_t d = 0; d < l.D; ++d) t.at4(b, h, s, d) = phys[static_cast<size_t>(base + d)];
  });
  return t;
}

}  // namespace attnbench
