// The one host-side definition of the storage dtypes' bits: float64 values to the
// bit patterns of fp32 / fp16 (IEEE binary16) / bf16 (bfloat16) and back, and
// EncodedBuffer, a host buffer of such bits (what device::upload copies to the GPU
// and device::download_encoded brings back). Pure C++ (no CUDA), so the GPU
// backends' staging and its tests build everywhere.
//
// Rounding: once, to nearest even, directly from double (no double rounding
// through float); overflow gives +-inf; NaN gives the canonical 0x7FFF (fp16 and
// bf16) or static_cast<float> (fp32). These are the bits of CUDA's host
// __double2half / __double2bfloat16 / static_cast<float> (cuda_fp16.hpp,
// cuda_bf16.hpp of CUDA 13.0), which the device layer used before this file.
// Decoding is exact; an fp16 NaN decodes to the float NaN 0x7FFFFFFF widened to
// double (as __half2float), a bf16 NaN to its bits shifted left by 16 (as
// __bfloat162float).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "harness/model/problem.hpp"

namespace attnbench {

namespace codec_detail {
/// Bits of the value nearest to the double of magnitude bits `a`, in a format of
/// `mant` stored mantissa bits and exponent bias `bias` (sign, NaN handled by the
/// callers), rounded to nearest even; infinity's bits when it overflows.
inline uint32_t round_magnitude(uint64_t a, int mant, int bias) {
  const uint32_t inf = ((2u * static_cast<uint32_t>(bias) + 1u) << mant);
  const int e = static_cast<int>(a >> 52) - 1023 + bias;  // target biased exponent
  if (e >= 2 * bias + 1) return inf;                       // |x| >= 2^(bias+1): inf (and x = inf)
  const int shift = 52 - mant + (e < 1 ? 1 - e : 0);       // subnormal results lose 1 - e bits more
  if (shift > 53) return 0;                                 // below half the smallest subnormal
  const uint64_t m = (a & ((uint64_t{1} << 52) - 1)) | (a >> 52 ? uint64_t{1} << 52 : 0);
  uint64_t q = m >> shift;
  const uint64_t rem = m & ((uint64_t{1} << shift) - 1), half = uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;          // a carry moves into the exponent
  const uint64_t bits = (static_cast<uint64_t>(e < 1 ? 0 : e - 1) << mant) + q;
  return bits >= inf ? inf : static_cast<uint32_t>(bits);
}

/// Bits of x in a 16-bit format (1 sign bit, `mant` mantissa bits, bias `bias`):
/// the sign, then round_magnitude; any NaN gives 0x7FFF.
inline uint16_t narrow_bits(double x, int mant, int bias) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint64_t a = u & 0x7FFFFFFFFFFFFFFFull;
  if (a > 0x7FF0000000000000ull) return 0x7FFF;
  return static_cast<uint16_t>(((u >> 48) & 0x8000u) | round_magnitude(a, mant, bias));
}
}  // namespace codec_detail

/// IEEE binary16 bits of x rounded to nearest even (see the top of this file).
inline uint16_t fp16_bits(double x) { return codec_detail::narrow_bits(x, 10, 15); }

/// bfloat16 bits of x rounded to nearest even (see the top of this file).
inline uint16_t bf16_bits(double x) { return codec_detail::narrow_bits(x, 7, 127); }

/// The value of binary16 bits h, exact (NaN: the float 0x7FFFFFFF, as __half2float).
inline double fp16_value(uint16_t h) {
  uint32_t sign = (h >> 15) & 1u, exponent = (h >> 10) & 0x1Fu, mantissa = (h & 0x3FFu) << 13;
  if (exponent == 0x1F) {  // inf / NaN (a NaN loses its sign)
    sign = mantissa ? 0 : sign;
    mantissa = mantissa ? 0x7FFFFFu : 0;
    exponent = 0xFF;
  } else if (exponent == 0) {
    if (mantissa) {  // subnormal: normalise
      exponent = 0x71;
      uint32_t msb;
      do {
        msb = mantissa & 0x400000u;
        mantissa <<= 1;
        --exponent;
      } while (!msb);
      mantissa &= 0x7FFFFFu;
    }
  } else {
    exponent += 0x70;
  }
  const uint32_t f = (sign << 31) | (exponent << 23) | mantissa;
  float v;
  std::memcpy(&v, &f, sizeof v);
  return static_cast<double>(v);
}

/// The value of bfloat16 bits h, exact.
inline double bf16_value(uint16_t h) {
  const uint32_t f = static_cast<uint32_t>(h) << 16;
  float v;
  std::memcpy(&v, &f, sizeof v);
  return static_cast<double>(v);
}

/// Encode src[0, n) into dtype-`t` bits at element `at` of `out` (serially: the
/// span one task of a parallel pass converts). Throws std::invalid_argument for an
/// unknown dtype.
void encode_span(const double* src, size_t n, DType t, void* out, size_t at);
/// Decode n dtype-`t` elements starting at element `at` of `in` into dst (serially).
void decode_span(const void* in, size_t at, size_t n, DType t, double* dst);

/// Host bits of `count` elements of dtype `dtype`, allocated uninitialised (the
/// pass that fills it touches its pages on every worker). Move-only.
struct EncodedBuffer {
  DType dtype = DType::fp32;
  size_t count = 0;
  std::unique_ptr<uint8_t[]> bytes;

  EncodedBuffer() = default;
  /// `count` elements of `t`, uninitialised.
  EncodedBuffer(size_t count, DType t);
  size_t size_bytes() const { return count * static_cast<size_t>(dtype_bytes(dtype)); }
  void* data() { return bytes.get(); }
  const void* data() const { return bytes.get(); }
};

/// values -> dtype-`t` bits, elementwise on the pass pool (parallel_chunks).
EncodedBuffer encode(const std::vector<double>& values, DType t);
/// Whether every value is exactly a dtype-`t` value (encoding and decoding give it
/// back), so that `t` stores the values losslessly; NaN counts as representable
/// (it comes back as a quiet NaN). One pass on the pass pool that stops at the
/// first value that is not.
bool representable(const std::vector<double>& values, DType t);
/// dtype bits -> float64 values, elementwise on the pass pool.
std::vector<double> decode(const EncodedBuffer& bits);

}  // namespace attnbench
