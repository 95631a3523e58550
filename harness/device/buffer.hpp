// RAII device buffers with alignment, guard bands and NaN poisoning, and
// host <-> device conversion between float64 and fp32 / fp16 / bf16.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "harness/problem.hpp"

namespace attnbench::device {

/// Untyped device allocation of `count` elements of `elem_bytes` bytes, 256-byte
/// aligned, with a guard band of kGuardBytes on each side filled with a known
/// pattern (guards_intact() detects out-of-bounds writes). Move-only.
/// Throws DeviceOutOfMemory / DeviceError.
class DeviceBuffer {
 public:
  static constexpr size_t kGuardBytes = 256;
  DeviceBuffer() = default;
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
  size_t bytes() const { return count_ * elem_bytes_; }
  /// Bytes actually allocated (guards included).
  size_t allocated_bytes() const { return alloc_bytes_; }
  /// Fill the payload with bytes `value` on `stream`.
  void memset(int value, cudaStream_t stream) const;
  /// True when both guard bands still hold the pattern (synchronises).
  bool guards_intact() const;

 private:
  void release() noexcept;
  void* base_ = nullptr;
  void* user_ = nullptr;
  size_t count_ = 0, elem_bytes_ = 0, alloc_bytes_ = 0;
};

/// Upload float64 host values to a new device buffer of dtype `t` (values are
/// rounded to nearest even). Synchronous.
DeviceBuffer upload(const std::vector<double>& host, DType t, cudaStream_t stream);
/// Upload float values (float32 storage) — bias tables, LSE.
DeviceBuffer upload_f32(const std::vector<double>& host, cudaStream_t stream);
/// Upload int32 values.
DeviceBuffer upload_i32(const std::vector<int32_t>& host, cudaStream_t stream);
/// Download a dtype-`t` device buffer as float64. Synchronous.
std::vector<double> download(const DeviceBuffer& buf, DType t, cudaStream_t stream);
/// Fill a dtype-`t` buffer (fp32/fp16/bf16) with quiet NaN on `stream`.
void poison_nan(const DeviceBuffer& buf, DType t, cudaStream_t stream);

}  // namespace attnbench::device
