// RAII device buffers with alignment, guard bands and NaN poisoning, and
// host <-> device copies of float64 values as fp32 / fp16 / bf16 (the bits of
// harness/model/dtype_codec.hpp, the one definition of the rounding).
//
// Every DeviceBuffer allocation is counted by a process-wide tracker
// (tracked_memory()), so that a runner can report the peak device memory of a
// case, workspaces included, without racing other processes on cudaMemGetInfo.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "harness/model/dtype_codec.hpp"
#include "harness/model/problem.hpp"

namespace attnbench::device {

/// Untyped device allocation of `count` elements of `elem_bytes` bytes, 256-byte
/// aligned, with a guard band of kGuardBytes on each side filled with a known
/// pattern (guards_intact() detects out-of-bounds writes). Move-only.
/// A buffer of zero elements allocates nothing (data() is null).
/// Throws DeviceOutOfMemory / DeviceError.
class DeviceBuffer {
 public:
  static constexpr size_t kGuardBytes = 256;
  DeviceBuffer() = default;
  /// cudaMalloc(kGuardBytes + count * elem_bytes + kGuardBytes), then both guard
  /// bands are written with the pattern (synchronously). The payload is
  /// uninitialised.
  DeviceBuffer(size_t count, size_t elem_bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return user_; }
  template <class T>
  T* as() const { return static_cast<T*>(user_); }
  size_t count() const { return count_; }
  size_t elem_bytes() const { return elem_bytes_; }
  size_t bytes() const { return count_ * elem_bytes_; }
  bool empty() const { return count_ == 0; }
  /// Bytes actually allocated (guards included).
  size_t allocated_bytes() const { return alloc_bytes_; }
  /// Fill the payload with bytes `value` on `stream` (asynchronous).
  void memset(int value, cudaStream_t stream) const;
  /// True when both guard bands still hold the pattern. Synchronises the device
  /// first (so pending kernels that might write out of bounds have finished).
  /// Throws DeviceError if the device reports an error.
  bool guards_intact() const;

 private:
  void release() noexcept;
  void* base_ = nullptr;
  void* user_ = nullptr;
  size_t count_ = 0, elem_bytes_ = 0, alloc_bytes_ = 0;
};

/// Bytes currently held by live DeviceBuffers and the peak since the last
/// reset_tracked_peak(), process-wide, guard bands included.
struct MemoryStats {
  size_t current_bytes = 0;
  size_t peak_bytes = 0;
};
MemoryStats tracked_memory();
/// Set the tracked peak to the current value (call before preparing a case).
void reset_tracked_peak();

/// cudaMemGetInfo of the current device (free and total bytes). Throws DeviceError.
struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
DeviceMemoryInfo device_memory_info();

/// Upload host bits (encode(), encode_physical(), kernels::encode_tokens()) to a
/// new device buffer of bits.count elements of bits.dtype. Synchronous. An empty
/// buffer gives an empty device buffer.
DeviceBuffer upload(const EncodedBuffer& bits, cudaStream_t stream);
/// Upload float64 host values to a new device buffer of dtype `t`:
/// upload(encode(host, t)) (rounded to nearest even, harness/model/dtype_codec.hpp).
/// Synchronous. An empty vector gives an empty buffer.
DeviceBuffer upload(const std::vector<double>& host, DType t, cudaStream_t stream);
/// Overwrite an existing buffer of dtype `t` with `host` (sizes must match,
/// else std::invalid_argument). Synchronous.
void upload_into(DeviceBuffer& buf, const std::vector<double>& host, DType t, cudaStream_t stream);
/// Upload float values (float32 storage) — bias tables, LSE.
DeviceBuffer upload_f32(const std::vector<double>& host, cudaStream_t stream);
/// Upload int32 values.
DeviceBuffer upload_i32(const std::vector<int32_t>& host, cudaStream_t stream);
/// Download a dtype-`t` device buffer's bits (all count() elements; the buffer's
/// elem_bytes() must equal dtype_bytes(t), else std::invalid_argument), for
/// decode(), decode_physical() or kernels::decode_tokens(). Synchronous: waits for
/// `stream`.
EncodedBuffer download_encoded(const DeviceBuffer& buf, DType t, cudaStream_t stream);
/// Download a dtype-`t` device buffer as float64: decode(download_encoded(...)).
/// Synchronous: waits for `stream`.
std::vector<double> download(const DeviceBuffer& buf, DType t, cudaStream_t stream);
/// Download int32 values. Synchronous.
std::vector<int32_t> download_i32(const DeviceBuffer& buf, cudaStream_t stream);
/// Fill a dtype-`t` buffer (fp32/fp16/bf16) with quiet NaN on `stream`
/// (asynchronous; fp32 0x7FC00000, fp16 0x7E00, bf16 0x7FC0).
void poison_nan(const DeviceBuffer& buf, DType t, cudaStream_t stream);

}  // namespace attnbench::device
