#include "harness/model/layout.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

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

/// Rows of one task of for_each_row: (b, h) pairs split further, so that a few
/// heads of long sequences (GQA's K and V, batch 1) still spread over the pool.
constexpr int64_t kRowsPerTask = 256;

/// fn(b, h, s, base) for every stored (b, h, s) row of `l` (base: its physical
/// offset), blocks of up to kRowsPerTask rows of one (b, h) spread over the pass
/// pool (rows are disjoint): the one walk of every conversion below.
template <class Fn>
void for_each_row(const PhysicalLayout& l, Fn&& fn) {
  const int64_t blocks = (l.S + kRowsPerTask - 1) / kRowsPerTask;
  parallel_pass(l.B * l.H * blocks, [&](int64_t task) {
    const int64_t bh = task / blocks, s0 = task % blocks * kRowsPerTask;
    const int64_t b = bh / l.H, h = bh % l.H;
    for (int64_t s = s0; s < std::min(l.S, s0 + kRowsPerTask); ++s) {
      const int64_t base = l.offset(b, h, s, 0);
      if (base >= 0) fn(b, h, s, base);
    }
  });
}

void require_shape(const HostTensor& t, const PhysicalLayout& l, const char* what) {
  if (t.shape.size() != 4 || t.shape[0] != l.B || t.shape[1] != l.H || t.shape[2] != l.S || t.shape[3] != l.D)
    throw std::invalid_argument(std::string(what) + ": tensor shape does not match layout");
}

void require_count(size_t n, const PhysicalLayout& l, const char* what) {
  if (static_cast<int64_t>(n) != l.numel())
    throw std::invalid_argument(std::string(what) + ": buffer of " + std::to_string(n) +
                                " elements does not match layout of " + std::to_string(l.numel()));
}

/// Start of logical row (b, h, s) of a [B, H, S, D] tensor.
size_t logical_row(const PhysicalLayout& l, int64_t b, int64_t h, int64_t s) {
  return static_cast<size_t>(((b * l.H + h) * l.S + s) * l.D);
}

}  // namespace

std::vector<double> to_physical(const HostTensor& t, const PhysicalLayout& l) {
  require_shape(t, l, "to_physical");
  std::vector<double> out(static_cast<size_t>(l.numel()));
  for_each_row(l, [&](int64_t b, int64_t h, int64_t s, int64_t base) {
    std::copy_n(t.data.data() + logical_row(l, b, h, s), l.D, out.data() + base);
  });
  return out;
}

HostTensor from_physical(const std::vector<double>& phys, const PhysicalLayout& l, double fill) {
  require_count(phys.size(), l, "from_physical");
  HostTensor t({l.B, l.H, l.S, l.D}, fill);
  for_each_row(l, [&](int64_t b, int64_t h, int64_t s, int64_t base) {
    std::copy_n(phys.data() + base, l.D, t.data.data() + logical_row(l, b, h, s));
  });
  return t;
}

EncodedBuffer encode_physical(const HostTensor& t, const PhysicalLayout& l, DType dt) {
  require_shape(t, l, "encode_physical");
  EncodedBuffer out(static_cast<size_t>(l.numel()), dt);
  for_each_row(l, [&](int64_t b, int64_t h, int64_t s, int64_t base) {
    encode_span(t.data.data() + logical_row(l, b, h, s), static_cast<size_t>(l.D), dt, out.data(),
                static_cast<size_t>(base));
  });
  return out;
}

HostTensor decode_physical(const EncodedBuffer& bits, const PhysicalLayout& l, double fill) {
  require_count(bits.count, l, "decode_physical");
  HostTensor t({l.B, l.H, l.S, l.D}, fill);
  for_each_row(l, [&](int64_t b, int64_t h, int64_t s, int64_t base) {
    decode_span(bits.data(), static_cast<size_t>(base), static_cast<size_t>(l.D), bits.dtype,
                t.data.data() + logical_row(l, b, h, s));
  });
  return t;
}

}  // namespace attnbench
