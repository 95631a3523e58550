// The storage dtypes' bits (harness/model/dtype_codec.hpp) and the one-pass layout
// conversions (encode_physical / decode_physical, harness/model/layout.hpp):
// rounding once to nearest even directly from double on known values, the decode
// of every 16-bit pattern, agreement with Eigen's rounding (round_to) where no
// double rounding can occur, and the fused passes bit for bit equal to the two-step
// path (to_physical, then elementwise encode; decode, then from_physical) on every
// layout, dtype, odd sizes and special values, on one thread and on the pool.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "harness/model/dtype_codec.hpp"
#include "harness/model/layout.hpp"
#include "harness/model/tensors.hpp"
#include "harness/model/thread_pool.hpp"

using namespace attnbench;

namespace {

uint64_t bits_of(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

/// f() run with every pass on the calling thread (a loop inside a pool task runs inline).
template <class F>
auto on_one_thread(F f) {
  decltype(f()) out;
  ThreadPool one(1);
  one.parallel_for(1, 1, [&](int64_t, int) { out = f(); });
  return out;
}

/// Tensor [B, H, S, D] of normal values with specials mixed in (NaN, +-inf, -0,
/// values past the fp16 range, subnormals, ties of every dtype).
HostTensor random_tensor(int64_t B, int64_t H, int64_t S, int64_t D, uint64_t seed) {
  HostTensor t({B, H, S, D});
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), INFINITY, -INFINITY, -0.0, 70000.0,
                             0x1p-25, 0x1.8p-24, 1.0 + 0x1p-11, 1.0 + 0x1p-8, 1e-300, 1e39};
  for (size_t i = 0; i < t.data.size(); ++i) {
    const double u = counter_uniform(seed, 9, i);
    t.data[i] = u < 0.05 ? specials[i % std::size(specials)] : counter_normal(seed, 8, i) * (u < 0.5 ? 1.0 : 1e-5);
  }
  return t;
}

/// The two-step path written out element by element: every stored element at
/// PhysicalLayout::offset, each encoded by itself.
EncodedBuffer encode_two_step(const HostTensor& t, const PhysicalLayout& l, DType dt) {
  std::vector<double> phys(static_cast<size_t>(l.numel()), 0.0);
  for (int64_t b = 0; b < l.B; ++b)
    for (int64_t h = 0; h < l.H; ++h)
      for (int64_t s = 0; s < l.S; ++s)
        for (int64_t d = 0; d < l.D; ++d)
          if (const int64_t o = l.offset(b, h, s, d); o >= 0) phys[static_cast<size_t>(o)] = t.at4(b, h, s, d);
  EncodedBuffer out(phys.size(), dt);
  for (size_t i = 0; i < phys.size(); ++i) encode_span(&phys[i], 1, dt, out.data(), i);
  return out;
}

bool same_bytes(const EncodedBuffer& a, const EncodedBuffer& b) {
  return a.dtype == b.dtype && a.count == b.count && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
  return a.shape == b.shape && std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(double)) == 0;
}

std::vector<PhysicalLayout> layouts(int64_t B, int64_t H, int64_t S, int64_t D) {
  std::vector<PhysicalLayout> out;
  for (Layout lay : {Layout::bshd, Layout::bhsd, Layout::thd}) {
    PhysicalLayout l;
    l.layout = lay, l.B = B, l.H = H, l.S = S, l.D = D;
    if (lay == Layout::thd) {  // valid lengths S, 0, S - 2, 1, ...
      l.cu_seqlens = {0};
      for (int64_t b = 0; b < B; ++b) {
        const int64_t len = b % 4 == 0 ? S : b % 4 == 1 ? 0 : b % 4 == 2 ? S - 2 : 1;
        l.cu_seqlens.push_back(l.cu_seqlens.back() + static_cast<int32_t>(len));
      }
    }
    out.push_back(l);
  }
  return out;
}

}  // namespace

TEST_CASE("fp16 and bf16 bits: one rounding to nearest even from double, overflow, NaN, subnormals") {
  CHECK(fp16_bits(1.0) == 0x3C00);
  CHECK(fp16_bits(-2.0) == 0xC000);
  CHECK(fp16_bits(-0.0) == 0x8000);
  CHECK(fp16_bits(65504.0) == 0x7BFF);
  CHECK(fp16_bits(65519.99) == 0x7BFF);
  CHECK(fp16_bits(65520.0) == 0x7C00);  // the tie above the largest finite rounds to inf
  CHECK(fp16_bits(-1e300) == 0xFC00);
  CHECK(fp16_bits(-INFINITY) == 0xFC00);
  CHECK(fp16_bits(std::numeric_limits<double>::quiet_NaN()) == 0x7FFF);
  CHECK(fp16_bits(-std::numeric_limits<double>::quiet_NaN()) == 0x7FFF);
  CHECK(fp16_bits(0x1p-24) == 0x0001);              // smallest subnormal
  CHECK(fp16_bits(0x1p-25) == 0x0000);              // tie to even (0)
  CHECK(fp16_bits(0x1.0000000000001p-25) == 0x0001);
  CHECK(fp16_bits(0x1.8p-24) == 0x0002);            // tie to even (2)
  CHECK(fp16_bits(0x1.ff8p-15) == 0x03FF);          // largest subnormal
  CHECK(fp16_bits(0x1.ffcp-15) == 0x0400);          // tie to even: up into the smallest normal
  CHECK(fp16_bits(1.0 + 0x1p-11) == 0x3C00);        // tie to even
  CHECK(fp16_bits(1.0 + 3 * 0x1p-11) == 0x3C02);    // tie to even (up)
  CHECK(fp16_bits(1.0 + 0x1p-11 + 0x1p-40) == 0x3C01);  // through float this would tie down to 0x3C00
  CHECK(fp16_bits(2047.5) == 0x6800);               // 2048 (carry into the exponent)

  CHECK(bf16_bits(1.0) == 0x3F80);
  CHECK(bf16_bits(-0.0) == 0x8000);
  CHECK(bf16_bits(1.0 + 0x1p-8) == 0x3F80);
  CHECK(bf16_bits(1.0 + 3 * 0x1p-8) == 0x3F82);
  CHECK(bf16_bits(1.0 + 0x1p-8 + 0x1p-40) == 0x3F81);  // through float: 0x3F80
  CHECK(bf16_bits(3.3895313892515355e38) == 0x7F7F);   // largest finite
  CHECK(bf16_bits(3.4e38) == 0x7F80);
  CHECK(bf16_bits(-INFINITY) == 0xFF80);
  CHECK(bf16_bits(0x1p-133) == 0x0001);
  CHECK(bf16_bits(0x1p-134) == 0x0000);
  CHECK(bf16_bits(1e-300) == 0x0000);
  CHECK(bf16_bits(std::numeric_limits<double>::quiet_NaN()) == 0x7FFF);
}

TEST_CASE("decode is exact and inverts encode on every 16-bit pattern; Eigen agrees where float is exact") {
  CHECK(fp16_value(0x3C00) == 1.0);
  CHECK(fp16_value(0x0001) == 0x1p-24);
  CHECK(fp16_value(0x7BFF) == 65504.0);
  CHECK(fp16_value(0xFC00) == -INFINITY);
  CHECK(bits_of(fp16_value(0xFE00)) == 0x7FFFFFFFE0000000ull);  // NaN: float 0x7FFFFFFF, sign dropped
  CHECK(bf16_value(0x3F80) == 1.0);
  CHECK(bf16_value(0x0001) == 0x1p-133);
  CHECK(bits_of(bf16_value(0xFFC1)) == 0xFFF8200000000000ull);  // NaN: the bits shifted left by 16
  int round_trips = 0, nans = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    const double f = fp16_value(x), g = bf16_value(x);
    if (std::isnan(f)) {
      ++nans;
      CHECK(fp16_bits(f) == 0x7FFF);
    } else {
      round_trips += fp16_bits(f) == x;
    }
    if (!std::isnan(g)) round_trips += bf16_bits(g) == x;
  }
  CHECK(nans == 2 * 1023);
  CHECK(round_trips == (65536 - 2 * 1023) + (65536 - 2 * 127));
  // Values exact in float: Eigen's float rounding (round_to) and the codec agree.
  for (uint64_t i = 0; i < 200000; ++i) {
    const double x = static_cast<float>(counter_normal(3, 1, i) * std::ldexp(1.0, static_cast<int>(i % 60) - 40));
    CHECK(fp16_value(fp16_bits(x)) == round_to(DType::fp16, x));
    CHECK(bf16_value(bf16_bits(x)) == round_to(DType::bf16, x));
  }
}

TEST_CASE("encode / decode of whole vectors equal the spans; an unknown dtype is refused") {
  std::vector<double> v(1000003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = counter_normal(5, 2, i) * 300.0;
  for (DType dt : {DType::fp32, DType::fp16, DType::bf16}) {
    const EncodedBuffer e = encode(v, dt);
    REQUIRE(e.count == v.size());
    CHECK(e.size_bytes() == v.size() * static_cast<size_t>(dtype_bytes(dt)));
    EncodedBuffer one(v.size(), dt);
    encode_span(v.data(), v.size(), dt, one.data(), 0);
    CHECK(same_bytes(e, one));
    const std::vector<double> d = decode(e);
    std::vector<double> d1(v.size());
    decode_span(e.data(), 0, v.size(), dt, d1.data());
    CHECK(d == d1);
    CHECK(d[17] == (dt == DType::fp32 ? static_cast<double>(static_cast<float>(v[17]))
                                      : dt == DType::fp16 ? fp16_value(fp16_bits(v[17])) : bf16_value(bf16_bits(v[17]))));
  }
  EncodedBuffer none(4, DType::fp16);
  CHECK_THROWS_AS(encode_span(v.data(), 4, static_cast<DType>(7), none.data(), 0), std::invalid_argument);
  CHECK(encode(std::vector<double>{}, DType::bf16).count == 0);
  CHECK(decode(EncodedBuffer(0, DType::bf16)).empty());
}

TEST_CASE("encode_physical / decode_physical equal the two-step path on every layout and dtype, any thread count") {
  struct Shape { int64_t B, H, S, D; };
  for (const Shape sh : {Shape{3, 5, 7, 9}, Shape{5, 2, 33, 17}, Shape{1, 1, 1, 1}, Shape{4, 3, 130, 64}, Shape{2, 3, 601, 5}}) {
    const HostTensor t = random_tensor(sh.B, sh.H, sh.S, sh.D, static_cast<uint64_t>(sh.S * 31 + sh.D));
    for (const PhysicalLayout& l : layouts(sh.B, sh.H, sh.S, sh.D))
      for (DType dt : {DType::fp32, DType::fp16, DType::bf16}) {
        CAPTURE(static_cast<int>(l.layout));
        CAPTURE(static_cast<int>(dt));
        CAPTURE(sh.S);
        const EncodedBuffer fused = encode_physical(t, l, dt);
        CHECK(same_bytes(fused, encode_two_step(t, l, dt)));
        CHECK(same_bytes(fused, encode(to_physical(t, l), dt)));
        CHECK(same_bytes(fused, on_one_thread([&] { return encode_physical(t, l, dt); })));
        const HostTensor back = decode_physical(fused, l, -3.5);
        CHECK(same_bits(back, from_physical(decode(fused), l, -3.5)));
        CHECK(same_bits(back, on_one_thread([&] { return decode_physical(fused, l, -3.5); })));
        // Unstored THD positions read the fill; stored ones the rounded input.
        const int64_t b = sh.B > 1 ? 1 : 0;
        const bool stored = l.offset(b, 0, 0, 0) >= 0;
        const double want = stored ? decode(encode(std::vector<double>{t.at4(b, 0, 0, 0)}, dt))[0] : -3.5;
        CHECK(bits_of(back.at4(b, 0, 0, 0)) == bits_of(want));
      }
  }
  PhysicalLayout l = layouts(2, 2, 3, 4)[0];
  CHECK_THROWS_AS(encode_physical(HostTensor({2, 2, 3, 5}), l, DType::bf16), std::invalid_argument);
  CHECK_THROWS_AS(decode_physical(EncodedBuffer(47, DType::bf16), l), std::invalid_argument);
}

TEST_CASE("representable: every value comes back exactly; NaN counts, the first other value does not") {
  std::vector<double> v(300001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_value(bf16_bits(counter_normal(3, 1, i) * 8.0));
  v[5] = std::numeric_limits<double>::quiet_NaN();
  v[6] = -0.0;
  v[7] = -std::numeric_limits<double>::infinity();
  CHECK(representable(v, DType::bf16));
  CHECK(representable(v, DType::fp32));  // every bf16 is a float32
  CHECK(representable({}, DType::fp16));
  std::vector<double> f = v;
  f[299999] = 1.0 + std::ldexp(1.0, -20);  // a float32, neither bf16 nor fp16, near the end
  CHECK_FALSE(representable(f, DType::bf16));
  CHECK_FALSE(representable(f, DType::fp16));
  CHECK(representable(f, DType::fp32));
  CHECK(representable({1.0 + std::ldexp(1.0, -9), -3.0}, DType::fp16));  // an fp16, not a bf16
  CHECK_FALSE(representable({1.0 + std::ldexp(1.0, -9)}, DType::bf16));
  CHECK_FALSE(representable({0.1}, DType::fp32));
  CHECK_FALSE(representable({1e-50}, DType::fp32));  // underflows to 0
  CHECK_FALSE(representable({70000.0}, DType::fp16));  // overflows to inf
}
