// Device buffers, memory tracking and host-side dtype conversion (buffer.hpp).
#include "harness/device/buffer.hpp"

#include <atomic>
#include <stdexcept>
#include <string>

#include "harness/device/check.hpp"
#include "harness/device/fill.hpp"

namespace attnbench::device {

namespace {

std::atomic<size_t> g_current{0};
std::atomic<size_t> g_peak{0};

void track_alloc(size_t n) {
  const size_t now = g_current.fetch_add(n) + n;
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}
void track_free(size_t n) { g_current.fetch_sub(n); }

/// Guard byte k of a band: a non-constant pattern, so that a stray memset of
/// one byte value or a zero write cannot reproduce it.
uint8_t guard_byte(size_t k) { return static_cast<uint8_t>(0xA5u ^ ((k * 29u) & 0xFFu)); }

std::vector<uint8_t> guard_pattern() {
  std::vector<uint8_t> g(DeviceBuffer::kGuardBytes);
  for (size_t k = 0; k < g.size(); ++k) g[k] = guard_byte(k);
  return g;
}

void require_elem(const DeviceBuffer& buf, size_t elem, const char* what) {
  if (!buf.empty() && buf.elem_bytes() != elem)
    throw std::invalid_argument(std::string(what) + ": buffer holds " + std::to_string(buf.elem_bytes()) +
                                "-byte elements, expected " + std::to_string(elem));
}

}  // namespace

// ---------------------------------------------------------------- DeviceBuffer

DeviceBuffer::DeviceBuffer(size_t count, size_t elem_bytes) : count_(count), elem_bytes_(elem_bytes) {
  if (count == 0) return;
  if (elem_bytes == 0) throw std::invalid_argument("DeviceBuffer: elem_bytes must be positive");
  if (count > (SIZE_MAX - 2 * kGuardBytes) / elem_bytes)
    throw DeviceOutOfMemory("DeviceBuffer: " + std::to_string(count) + " x " + std::to_string(elem_bytes) +
                            " bytes overflows size_t");
  const size_t payload = count * elem_bytes;
  const size_t total = payload + 2 * kGuardBytes;
  ATTNBENCH_CHECK(cudaMalloc(&base_, total));  // 256-byte aligned by contract
  alloc_bytes_ = total;
  track_alloc(total);
  user_ = static_cast<uint8_t*>(base_) + kGuardBytes;
  try {
    const std::vector<uint8_t> g = guard_pattern();
    ATTNBENCH_CHECK(cudaMemcpy(base_, g.data(), kGuardBytes, cudaMemcpyHostToDevice));
    ATTNBENCH_CHECK(cudaMemcpy(static_cast<uint8_t*>(user_) + payload, g.data(), kGuardBytes,
                               cudaMemcpyHostToDevice));
  } catch (...) {
    release();
    throw;
  }
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : base_(o.base_), user_(o.user_), count_(o.count_), elem_bytes_(o.elem_bytes_), alloc_bytes_(o.alloc_bytes_) {
  o.base_ = o.user_ = nullptr;
  o.count_ = o.elem_bytes_ = o.alloc_bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    base_ = o.base_;
    user_ = o.user_;
    count_ = o.count_;
    elem_bytes_ = o.elem_bytes_;
    alloc_bytes_ = o.alloc_bytes_;
    o.base_ = o.user_ = nullptr;
    o.count_ = o.elem_bytes_ = o.alloc_bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (base_) {
    // A destructor cannot throw; a failing cudaFree (only after a sticky device
    // error, which the next checked call reports anyway) is cleared so that it
    // is not misattributed to a later launch check.
    if (cudaFree(base_) != cudaSuccess) (void)cudaGetLastError();
    track_free(alloc_bytes_);
  }
  base_ = user_ = nullptr;
  count_ = elem_bytes_ = alloc_bytes_ = 0;
}

void DeviceBuffer::memset(int value, cudaStream_t stream) const {
  if (count_ == 0) return;
  ATTNBENCH_CHECK(cudaMemsetAsync(user_, value, bytes(), stream));
}

bool DeviceBuffer::guards_intact() const {
  if (count_ == 0) return true;
  ATTNBENCH_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> head(kGuardBytes), tail(kGuardBytes);
  ATTNBENCH_CHECK(cudaMemcpy(head.data(), base_, kGuardBytes, cudaMemcpyDeviceToHost));
  ATTNBENCH_CHECK(
      cudaMemcpy(tail.data(), static_cast<uint8_t*>(user_) + bytes(), kGuardBytes, cudaMemcpyDeviceToHost));
  const std::vector<uint8_t> g = guard_pattern();
  return head == g && tail == g;
}

// ---------------------------------------------------------------- memory

MemoryStats tracked_memory() { return {g_current.load(), g_peak.load()}; }

void reset_tracked_peak() { g_peak.store(g_current.load()); }

DeviceMemoryInfo device_memory_info() {
  DeviceMemoryInfo m;
  ATTNBENCH_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}

// ---------------------------------------------------------------- copies

DeviceBuffer upload(const EncodedBuffer& bits, cudaStream_t stream) {
  DeviceBuffer buf(bits.count, static_cast<size_t>(dtype_bytes(bits.dtype)));
  if (bits.count == 0) return buf;
  ATTNBENCH_CHECK(cudaMemcpyAsync(buf.data(), bits.data(), bits.size_bytes(), cudaMemcpyHostToDevice, stream));
  ATTNBENCH_CHECK(cudaStreamSynchronize(stream));  // the host bits may die at return
  return buf;
}

void upload_into(DeviceBuffer& buf, const std::vector<double>& host, DType t, cudaStream_t stream) {
  if (buf.count() != host.size())
    throw std::invalid_argument("upload_into: buffer has " + std::to_string(buf.count()) + " elements, host " +
                                std::to_string(host.size()));
  require_elem(buf, static_cast<size_t>(dtype_bytes(t)), "upload_into");
  if (host.empty()) return;
  const EncodedBuffer staging = encode(host, t);
  ATTNBENCH_CHECK(cudaMemcpyAsync(buf.data(), staging.data(), staging.size_bytes(), cudaMemcpyHostToDevice, stream));
  ATTNBENCH_CHECK(cudaStreamSynchronize(stream));  // staging dies at return
}

DeviceBuffer upload(const std::vector<double>& host, DType t, cudaStream_t stream) {
  return upload(encode(host, t), stream);
}

DeviceBuffer upload_f32(const std::vector<double>& host, cudaStream_t stream) {
  return upload(host, DType::fp32, stream);
}

DeviceBuffer upload_i32(const std::vector<int32_t>& host, cudaStream_t stream) {
  DeviceBuffer buf(host.size(), sizeof(int32_t));
  if (host.empty()) return buf;
  ATTNBENCH_CHECK(cudaMemcpyAsync(buf.data(), host.data(), buf.bytes(), cudaMemcpyHostToDevice, stream));
  ATTNBENCH_CHECK(cudaStreamSynchronize(stream));
  return buf;
}

EncodedBuffer download_encoded(const DeviceBuffer& buf, DType t, cudaStream_t stream) {
  require_elem(buf, static_cast<size_t>(dtype_bytes(t)), "download");
  EncodedBuffer bits(buf.count(), t);
  if (buf.empty()) return bits;
  ATTNBENCH_CHECK(cudaMemcpyAsync(bits.data(), buf.data(), bits.size_bytes(), cudaMemcpyDeviceToHost, stream));
  ATTNBENCH_CHECK(cudaStreamSynchronize(stream));
  return bits;
}

std::vector<double> download(const DeviceBuffer& buf, DType t, cudaStream_t stream) {
  return decode(download_encoded(buf, t, stream));
}

std::vector<int32_t> download_i32(const DeviceBuffer& buf, cudaStream_t stream) {
  require_elem(buf, sizeof(int32_t), "download_i32");
  std::vector<int32_t> out(buf.count());
  if (buf.empty()) return out;
  ATTNBENCH_CHECK(cudaMemcpyAsync(out.data(), buf.data(), buf.bytes(), cudaMemcpyDeviceToHost, stream));
  ATTNBENCH_CHECK(cudaStreamSynchronize(stream));
  return out;
}

void poison_nan(const DeviceBuffer& buf, DType t, cudaStream_t stream) {
  require_elem(buf, static_cast<size_t>(dtype_bytes(t)), "poison_nan");
  if (buf.empty()) return;
  switch (t) {
    case DType::fp32: fill_units(buf.data(), buf.count(), 4, 0x7FC00000u, stream); return;
    case DType::fp16: fill_units(buf.data(), buf.count(), 2, 0x7E00u, stream); return;
    case DType::bf16: fill_units(buf.data(), buf.count(), 2, 0x7FC0u, stream); return;
  }
  throw std::invalid_argument("poison_nan: unknown dtype");
}

}  // namespace attnbench::device
