// Physical layouts of Q/K/V/O (docs/semantics.md section 1): BSHD (padded batch),
// BHSD, and THD (packed tokens with cu_seqlens int32 [B+1]). Converts between
// logical float64 host tensors and physical buffers, as float64 (to_physical /
// from_physical) or directly as the storage dtype's bits in one pass
// (encode_physical / decode_physical: no float64 copy of the physical buffer).
#pragma once

#include <cstdint>
#include <vector>

#include "harness/model/dtype_codec.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"

namespace attnbench {

/// Which logical tensor a layout describes (gradients share their input's layout).
enum class TensorRole { q, k, v, o };

/// Element offsets of a [B, H, S, D] tensor stored in a physical layout.
/// For THD, batch row b stores only its first valid-length tokens (padding mask
/// lengths, else S), back to back: token t of row b is at cu_seqlens[b] + t.
struct PhysicalLayout {
  Layout layout = Layout::bshd;
  int64_t B = 0, H = 0, S = 0, D = 0;
  std::vector<int32_t> cu_seqlens;  ///< THD: [B + 1] prefix sums of valid lengths

  /// Elements of the physical buffer.
  int64_t numel() const;
  /// Stride between consecutive tokens (s) and heads (h), in elements.
  int64_t stride_s() const { return layout == Layout::bhsd ? D : H * D; }
  int64_t stride_h() const { return layout == Layout::bhsd ? S * D : D; }
  /// Offset of element (b, h, s, d), or -1 for a THD position past the row's
  /// valid length (not stored).
  int64_t offset(int64_t b, int64_t h, int64_t s, int64_t d) const;
};

/// Layout of tensor `role` of problem `p` (Q/dQ: Hq, Sq, Dqk; K/dK: Hkv, Sk, Dqk;
/// V/dV: Hkv, Sk, Dv; O/dO: Hq, Sq, Dv).
PhysicalLayout physical_layout(const Problem& p, TensorRole role);

/// Logical [B,H,S,D] -> physical buffer (positions THD does not store are dropped).
std::vector<double> to_physical(const HostTensor& logical, const PhysicalLayout& l);
/// Physical buffer -> logical [B,H,S,D]; positions THD does not store read as `fill`.
HostTensor from_physical(const std::vector<double>& phys, const PhysicalLayout& l, double fill = 0.0);

/// Logical [B,H,S,D] -> the physical buffer as dtype-`t` bits, in one pass on the
/// pass pool: bit for bit encode(to_physical(logical, l), t) (dtype_codec.hpp's
/// rounding). Throws std::invalid_argument when the shape does not match `l`.
EncodedBuffer encode_physical(const HostTensor& logical, const PhysicalLayout& l, DType t);
/// Physical dtype bits -> logical [B,H,S,D], in one pass: bit for bit
/// from_physical(decode(bits), l, fill). Throws std::invalid_argument when
/// bits.count != l.numel().
HostTensor decode_physical(const EncodedBuffer& bits, const PhysicalLayout& l, double fill = 0.0);

}  // namespace attnbench
