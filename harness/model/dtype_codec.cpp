// Float64 <-> storage dtype bits (dtype_codec.hpp).
#include "harness/model/dtype_codec.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>

#include "harness/model/thread_pool.hpp"

namespace attnbench {

void encode_span(const double* src, size_t n, DType t, void* out, size_t at) {
  switch (t) {
    case DType::fp32: {
      float* o = static_cast<float*>(out) + at;
      for (size_t i = 0; i < n; ++i) o[i] = static_cast<float>(src[i]);  // IEEE RNE
      return;
    }
    case DType::fp16: {
      uint16_t* o = static_cast<uint16_t*>(out) + at;
      for (size_t i = 0; i < n; ++i) o[i] = fp16_bits(src[i]);
      return;
    }
    case DType::bf16: {
      uint16_t* o = static_cast<uint16_t*>(out) + at;
      for (size_t i = 0; i < n; ++i) o[i] = bf16_bits(src[i]);
      return;
    }
  }
  throw std::invalid_argument("encode: unknown dtype " + std::to_string(static_cast<int>(t)));
}

void decode_span(const void* in, size_t at, size_t n, DType t, double* dst) {
  switch (t) {
    case DType::fp32: {
      const float* p = static_cast<const float*>(in) + at;
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<double>(p[i]);
      return;
    }
    case DType::fp16: {
      const uint16_t* p = static_cast<const uint16_t*>(in) + at;
      for (size_t i = 0; i < n; ++i) dst[i] = fp16_value(p[i]);
      return;
    }
    case DType::bf16: {
      const uint16_t* p = static_cast<const uint16_t*>(in) + at;
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_value(p[i]);
      return;
    }
  }
  throw std::invalid_argument("decode: unknown dtype " + std::to_string(static_cast<int>(t)));
}

EncodedBuffer::EncodedBuffer(size_t n, DType t) : dtype(t), count(n) {
  const size_t bytes_n = size_bytes();
  if (bytes_n > 0) bytes.reset(new uint8_t[bytes_n]);
}

EncodedBuffer encode(const std::vector<double>& values, DType t) {
  EncodedBuffer out(values.size(), t);
  parallel_chunks(values.size(), [&](size_t begin, size_t end) {
    encode_span(values.data() + begin, end - begin, t, out.data(), begin);
  });
  return out;
}

bool representable(const std::vector<double>& values, DType t) {
  std::atomic<bool> exact{true};
  parallel_chunks(values.size(), [&](size_t begin, size_t end) {
    double back[256];
    unsigned char bits[256 * 4];
    for (size_t i = begin; i < end && exact.load(std::memory_order_relaxed); i += 256) {
      const size_t n = std::min<size_t>(256, end - i);
      encode_span(values.data() + i, n, t, bits, 0);
      decode_span(bits, 0, n, t, back);
      for (size_t k = 0; k < n; ++k)
        if (back[k] != values[i + k] && !(std::isnan(back[k]) && std::isnan(values[i + k]))) exact.store(false);
    }
  });
  return exact.load();
}

std::vector<double> decode(const EncodedBuffer& bits) {
  std::vector<double> out(bits.count);
  parallel_chunks(bits.count, [&](size_t begin, size_t end) {
    decode_span(bits.data(), begin, end - begin, bits.dtype, out.data() + begin);
  });
  return out;
}

}  // namespace attnbench
