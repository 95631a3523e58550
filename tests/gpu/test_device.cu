// GPU tests of the device platform (harness/device/): guard bands, moves,
// memory tracking, dtype conversion on upload / download, NaN poisoning, and
// the error paths of ATTNBENCH_CHECK. A .cu file: one test kernel writes out of
// bounds on purpose (inside the guard band, so nothing real is corrupted).
#include <doctest/doctest.h>

#include <cuda_runtime.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "harness/device/buffer.hpp"
#include "harness/device/check.hpp"
#include "harness/device/device.hpp"
#include "harness/device/digest.hpp"
#include "harness/device/hold.hpp"
#include "harness/device/kernel_trace.hpp"
#include "harness/measure/kernel_trace.hpp"
#include "harness/model/tensors.hpp"

using namespace attnbench;
using device::DeviceBuffer;

namespace {

__global__ void write_float_at(float* p, long long index, float value) { p[index] = value; }

/// Spins for about `ns` nanoseconds so that the traced duration is measurable.
__global__ void attnbench_trace_probe(unsigned long long ns) {
  unsigned long long t0 = clock64();
  while (clock64() - t0 < ns) {
  }
}

/// RAII stream for the tests.
struct TestStream {
  cudaStream_t s = nullptr;
  TestStream() { ATTNBENCH_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~TestStream() { (void)cudaStreamDestroy(s); }
};

std::vector<double> sample_values(size_t n, uint64_t seed) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 3.0 * counter_normal(seed, 0, i);
  return v;
}

}  // namespace

TEST_CASE("DeviceBuffer: alignment, sizes, zero-size, moves") {
  DeviceBuffer a(1000, 2);
  CHECK(a.count() == 1000);
  CHECK(a.bytes() == 2000);
  CHECK(a.allocated_bytes() == 2000 + 2 * DeviceBuffer::kGuardBytes);
  CHECK(reinterpret_cast<uintptr_t>(a.data()) % 256 == 0);
  CHECK(a.guards_intact());

  void* p = a.data();
  DeviceBuffer b(std::move(a));
  CHECK(b.data() == p);
  CHECK(a.data() == nullptr);
  CHECK(a.count() == 0);
  CHECK(a.allocated_bytes() == 0);
  CHECK(a.guards_intact());  // empty buffers are trivially intact

  DeviceBuffer c(10, 4);
  c = std::move(b);
  CHECK(c.data() == p);
  CHECK(c.count() == 1000);
  CHECK(b.data() == nullptr);

  DeviceBuffer z(0, 4);
  CHECK(z.data() == nullptr);
  CHECK(z.allocated_bytes() == 0);
  CHECK(z.empty());
}

TEST_CASE("DeviceBuffer: guard bands detect out-of-bounds writes by a kernel") {
  TestStream st;
  SUBCASE("in-bounds writes keep the guards") {
    DeviceBuffer buf(100, sizeof(float));
    write_float_at<<<1, 1, 0, st.s>>>(buf.as<float>(), 0, 1.0f);
    ATTNBENCH_CHECK(cudaGetLastError());
    write_float_at<<<1, 1, 0, st.s>>>(buf.as<float>(), 99, 1.0f);
    ATTNBENCH_CHECK(cudaGetLastError());
    ATTNBENCH_CHECK(cudaStreamSynchronize(st.s));
    CHECK(buf.guards_intact());
  }
  SUBCASE("one element past the end") {
    DeviceBuffer buf(100, sizeof(float));
    write_float_at<<<1, 1, 0, st.s>>>(buf.as<float>(), 100, 0.0f);
    ATTNBENCH_CHECK(cudaGetLastError());
    CHECK_FALSE(buf.guards_intact());
  }
  SUBCASE("one element before the start") {
    DeviceBuffer buf(100, sizeof(float));
    write_float_at<<<1, 1, 0, st.s>>>(buf.as<float>(), -1, 0.0f);
    ATTNBENCH_CHECK(cudaGetLastError());
    CHECK_FALSE(buf.guards_intact());
  }
  SUBCASE("a payload memset never touches the guards") {
    DeviceBuffer buf(77, 2);
    buf.memset(0xFF, st.s);
    CHECK(buf.guards_intact());
  }
}

TEST_CASE("memory tracking counts live buffers and the peak") {
  device::reset_tracked_peak();
  const device::MemoryStats before = device::tracked_memory();
  size_t held = 0;
  {
    DeviceBuffer a(1 << 20, 1);
    held = a.allocated_bytes();
    const device::MemoryStats during = device::tracked_memory();
    CHECK(during.current_bytes == before.current_bytes + held);
    CHECK(during.peak_bytes >= during.current_bytes);
  }
  const device::MemoryStats after = device::tracked_memory();
  CHECK(after.current_bytes == before.current_bytes);
  CHECK(after.peak_bytes >= before.current_bytes + held);
  device::reset_tracked_peak();
  CHECK(device::tracked_memory().peak_bytes == after.current_bytes);

  const device::DeviceMemoryInfo info = device::device_memory_info();
  CHECK(info.total_bytes > 0);
  CHECK(info.free_bytes <= info.total_bytes);
}

TEST_CASE("upload / download round trip per dtype") {
  TestStream st;
  for (DType t : {DType::fp32, DType::fp16, DType::bf16}) {
    CAPTURE(to_string(t));
    // Values already representable in t come back bit-exact.
    std::vector<double> v = sample_values(1001, 11);
    round_all(t, v);
    v.push_back(0.0);
    v.push_back(-0.0);
    v.push_back(std::numeric_limits<double>::infinity());
    v.push_back(-std::numeric_limits<double>::infinity());
    DeviceBuffer buf = device::upload(v, t, st.s);
    CHECK(buf.count() == v.size());
    CHECK(buf.elem_bytes() == static_cast<size_t>(dtype_bytes(t)));
    const std::vector<double> back = device::download(buf, t, st.s);
    REQUIRE(back.size() == v.size());
    int64_t mismatches = 0;
    for (size_t i = 0; i < v.size(); ++i)
      if (std::memcmp(&back[i], &v[i], sizeof(double)) != 0) ++mismatches;
    CHECK(mismatches == 0);
    CHECK(std::signbit(back[v.size() - 3]));  // -0 keeps its sign
    CHECK(buf.guards_intact());

    // Arbitrary doubles land on a representable value at least as close as the
    // harness's round_to (which rounds through float and can double-round).
    const std::vector<double> raw = sample_values(4096, 12);
    const std::vector<double> rounded = device::download(device::upload(raw, t, st.s), t, st.s);
    int64_t not_representable = 0, farther = 0;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (round_to(t, rounded[i]) != rounded[i]) ++not_representable;
      if (std::fabs(rounded[i] - raw[i]) > std::fabs(round_to(t, raw[i]) - raw[i])) ++farther;
    }
    CHECK(not_representable == 0);
    CHECK(farther == 0);

    // NaN stays NaN.
    const std::vector<double> nan_back =
        device::download(device::upload({std::nan("")}, t, st.s), t, st.s);
    CHECK(std::isnan(nan_back[0]));
  }
}

TEST_CASE("upload rounds once to nearest even, directly from double") {
  TestStream st;
  auto rt = [&](double x, DType t) { return device::download(device::upload({x}, t, st.s), t, st.s)[0]; };
  // fp16: 10 fraction bits, so 1 + 2^-11 is a tie between 1 and 1 + 2^-10.
  CHECK(rt(1.0 + std::ldexp(1.0, -11), DType::fp16) == 1.0);                           // tie -> even
  CHECK(rt(1.0 + 3 * std::ldexp(1.0, -11), DType::fp16) == 1.0 + std::ldexp(1.0, -9));  // tie -> even
  // Just above the tie: a double->float->half path would round to the tie and
  // then to even (1.0); a single rounding goes up.
  CHECK(rt(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), DType::fp16) == 1.0 + std::ldexp(1.0, -10));
  CHECK(rt(70000.0, DType::fp16) == std::numeric_limits<double>::infinity());  // overflow
  CHECK(rt(65504.0, DType::fp16) == 65504.0);                                     // max finite
  // bf16: 7 fraction bits.
  CHECK(rt(1.0 + std::ldexp(1.0, -8), DType::bf16) == 1.0);
  CHECK(rt(1.0 + 3 * std::ldexp(1.0, -8), DType::bf16) == 1.0 + std::ldexp(1.0, -6));
  CHECK(rt(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), DType::bf16) == 1.0 + std::ldexp(1.0, -7));
  // fp32.
  CHECK(rt(1.0 + std::ldexp(1.0, -24), DType::fp32) == 1.0);
  CHECK(rt(1.0 + std::ldexp(1.0, -24) + std::ldexp(1.0, -50), DType::fp32) == 1.0 + std::ldexp(1.0, -23));
}

TEST_CASE("int32 and float32 uploads") {
  TestStream st;
  const std::vector<int32_t> ids = {0, -1, 7, 2147483647, -2147483647 - 1};
  DeviceBuffer b = device::upload_i32(ids, st.s);
  CHECK(device::download_i32(b, st.s) == ids);
  DeviceBuffer f = device::upload_f32({0.1, -2.5}, st.s);
  const std::vector<double> fb = device::download(f, DType::fp32, st.s);
  CHECK(fb[0] == static_cast<double>(0.1f));
  CHECK(fb[1] == -2.5);
  CHECK(device::upload_i32({}, st.s).empty());
  CHECK_THROWS_AS(device::download(b, DType::fp16, st.s), std::invalid_argument);  // 4-byte elements
}

TEST_CASE("poison_nan leaves NaN in every element and nothing outside") {
  TestStream st;
  for (DType t : {DType::fp32, DType::fp16, DType::bf16}) {
    for (size_t n : {size_t{1}, size_t{3}, size_t{1000}, size_t{100001}}) {
      CAPTURE(to_string(t));
      CAPTURE(n);
      std::vector<double> v = sample_values(n, 13);
      round_all(t, v);
      DeviceBuffer buf = device::upload(v, t, st.s);
      device::poison_nan(buf, t, st.s);
      const std::vector<double> back = device::download(buf, t, st.s);
      int64_t not_nan = 0;
      for (double x : back)
        if (!std::isnan(x)) ++not_nan;
      CHECK(not_nan == 0);
      CHECK(buf.guards_intact());
    }
  }
}

TEST_CASE("ATTNBENCH_CHECK turns failures into DeviceError / DeviceOutOfMemory") {
  try {
    ATTNBENCH_CHECK(cudaSetDevice(-1));
    FAIL("cudaSetDevice(-1) did not throw");
  } catch (const device::DeviceError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("CUDA") != std::string::npos);
    CHECK(msg.find("cudaSetDevice(-1)") != std::string::npos);
    CHECK(msg.find("cudaErrorInvalidDevice") != std::string::npos);
    CHECK(msg.find("test_device.cu") != std::string::npos);
  }
  // The failed call left no sticky error: the next call works.
  ATTNBENCH_CHECK(cudaSetDevice(device::selected_device()));
  CHECK(cudaGetLastError() == cudaSuccess);

  // An impossible allocation is out-of-memory, and the device stays usable.
  CHECK_THROWS_AS(DeviceBuffer(size_t{1} << 52, 1), device::DeviceOutOfMemory);
  DeviceBuffer ok(16, 4);
  CHECK(ok.guards_intact());

  // cuBLAS statuses are named.
  CHECK(std::string(device::detail::cublas_status_name(CUBLAS_STATUS_INVALID_VALUE)) ==
        "CUBLAS_STATUS_INVALID_VALUE");
  cublasHandle_t h = nullptr;
  ATTNBENCH_CHECK(cublasCreate(&h));
  const float one = 1.f;
  try {
    // lda (1) < m (4) and incx == 0 are both invalid arguments for gemv. (cuBLAS 13.1
    // was seen on the H100 to accept m = -1 silently, so that is not used here.)
    ATTNBENCH_CHECK(cublasSgemv(h, CUBLAS_OP_N, 4, 1, &one, ok.as<float>(), 1, ok.as<float>(), 0, &one,
                                ok.as<float>(), 1));
    FAIL("cublasSgemv with lda < m and incx = 0 did not throw");
  } catch (const device::DeviceError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("cuBLAS") != std::string::npos);
    CHECK(msg.find("CUBLAS_STATUS_INVALID_VALUE") != std::string::npos);
  }
  (void)cublasDestroy(h);
}

/// The digest of digest.hpp, on the host, from the bytes: the formula it documents.
uint64_t host_digest(const std::vector<std::vector<unsigned char>>& buffers) {
  auto mix64 = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  uint64_t sum = 0;
  for (size_t b = 0; b < buffers.size(); ++b) {
    const auto& bytes = buffers[b];
    sum += mix64(bytes.size() + mix64(~static_cast<uint64_t>(b)));
    for (size_t i = 0; i * 8 < bytes.size(); ++i) {
      uint64_t w = 0;
      for (size_t k = 0; k < 8 && i * 8 + k < bytes.size(); ++k) w |= static_cast<uint64_t>(bytes[i * 8 + k]) << (8 * k);
      sum += mix64(w + mix64((static_cast<uint64_t>(i) << 32) + b + 1));
    }
  }
  return sum;
}

TEST_CASE("digest: the documented formula, and a flipped bit, a swap or a length change changes it") {
  TestStream st;
  std::vector<unsigned char> a(1000003), b(77);  // many blocks, and words with short tails
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned char>(i * 7 + 1);
  b.back() = 0;  // dropping it leaves the zero-padded words the same: only the length tells
  auto up = [&](const std::vector<unsigned char>& h) {
    DeviceBuffer d(h.size(), 1);
    ATTNBENCH_CHECK(cudaMemcpy(d.data(), h.data(), h.size(), cudaMemcpyHostToDevice));
    return d;
  };
  DeviceBuffer da = up(a), db = up(b), empty;
  const uint64_t base = device::digest({&da, &db}, st.s);
  CHECK(base == host_digest({a, b}));
  CHECK(device::digest({&da, &db}, st.s) == base);  // repeatable
  CHECK(device::digest({&da, nullptr, &db}, st.s) == host_digest({a, {}, b}));
  CHECK(device::digest({&db, &da}, st.s) != base);  // buffer order
  CHECK(device::digest({&da, &db, &empty}, st.s) != base);  // one more (empty) buffer
  std::vector<unsigned char> flipped = a;
  flipped[512345] ^= 0x10;
  DeviceBuffer df = up(flipped);
  CHECK(device::digest({&df, &db}, st.s) != base);
  CHECK(device::digest({&df, &db}, st.s) == host_digest({flipped, b}));
  std::vector<unsigned char> swapped = a;  // two 8-byte words exchanged: same bytes, other places
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 8000);
  DeviceBuffer ds = up(swapped);
  CHECK(device::digest({&ds, &db}, st.s) != base);
  std::vector<unsigned char> shorter(b.begin(), b.end() - 1);
  DeviceBuffer dsh = up(shorter);
  CHECK(device::digest({&da, &dsh}, st.s) != base);
  CHECK(device::digest({&da, &dsh}, st.s) == host_digest({a, shorter}));
}

TEST_CASE("select_device validates the index") {
  CHECK_THROWS(device::select_device(-1));
  CHECK_THROWS(device::select_device(1 << 20));
  device::select_device(0);
  CHECK(device::selected_device() == 0);
  std::string why;
  CHECK(device::cuda_device_available(&why));
}

TEST_CASE("kernel trace records our kernels with their launch shape, and memsets with their bytes") {
  std::string why;
  if (!device::kernel_trace_available(&why)) {
    // A CUDA build without CUPTI: say so loudly instead of passing.
    FAIL("kernel trace unavailable on a machine with a GPU: " << why);
  }
  TestStream ts;
  // Both streams exist before the trace starts: creating a stream can take longer
  // than the probes themselves, and the overlap check below needs the second
  // stream's call enqueued while the first stream is still busy.
  TestStream other;
  DeviceBuffer buf(1 << 20, 1);
  device::kernel_trace_start();
  CHECK_THROWS_WITH(device::kernel_trace_start(), doctest::Contains("already running"));
  for (int call = 0; call < 4; ++call) {
    attnbench_trace_probe<<<dim3(3, 2, 1), dim3(64, 1, 1), 0, ts.s>>>(200000);
    ATTNBENCH_CHECK(cudaGetLastError());
  }
  ATTNBENCH_CHECK(cudaMemsetAsync(buf.data(), 0, 1 << 20, ts.s));
  // A fifth call on the other stream, enqueued while the first stream's 400-800 us
  // of probes run: the timeline gets a second lane and the calls overlap.
  attnbench_trace_probe<<<dim3(3, 2, 1), dim3(64, 1, 1), 0, other.s>>>(200000);
  ATTNBENCH_CHECK(cudaGetLastError());
  auto acts = device::kernel_trace_stop();
  CHECK_THROWS_WITH(device::kernel_trace_stop(), doctest::Contains("no trace"));
  auto j = summarize_trace(acts);
  REQUIRE(j["kernels"].size() == 2);
  const auto& k = j["kernels"][0];
  CHECK(k["kind"] == "kernel");
  CHECK(k["name"].get<std::string>().find("attnbench_trace_probe") != std::string::npos);
  CHECK(k["calls"] == 5);
  CHECK(k["grid"] == nlohmann::json::array({3, 2, 1}));
  CHECK(k["block"] == nlohmann::json::array({64, 1, 1}));
  CHECK(k["ctas"] == 6);
  CHECK(k["registers"].get<int>() > 0);
  // 200,000 clock cycles at 1-2.1 GHz: 95-200 us per call.
  CHECK(k["mean_us"].get<double>() > 50.0);
  CHECK(k["mean_us"].get<double>() < 1000.0);
  const auto& m = j["kernels"][1];
  CHECK(m["kind"] == "memset");
  CHECK(m["bytes"] == (1 << 20));
  CHECK(j["streams"] == 2);
  REQUIRE(j["timeline"].size() == 6);
  CHECK(j["busy_us"].get<double>() < j["device_us"].get<double>());  // the two streams overlapped
  // A second trace starts empty: nothing of the first one leaks into it.
  device::kernel_trace_start();
  auto none = device::kernel_trace_stop();
  CHECK(none.empty());
}

TEST_CASE("hold_stream keeps the stream busy for the requested time") {
  TestStream ts;
  cudaEvent_t a = nullptr, b = nullptr;
  ATTNBENCH_CHECK(cudaEventCreate(&a));
  ATTNBENCH_CHECK(cudaEventCreate(&b));
  for (double ms : {0.5, 3.0}) {
    ATTNBENCH_CHECK(cudaEventRecord(a, ts.s));
    device::hold_stream(ts.s, ms);
    ATTNBENCH_CHECK(cudaEventRecord(b, ts.s));
    ATTNBENCH_CHECK(cudaEventSynchronize(b));
    float got = 0;
    ATTNBENCH_CHECK(cudaEventElapsedTime(&got, a, b));
    CHECK(got >= 0.95 * ms);
    CHECK(got < ms + 0.5);
  }
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
}
