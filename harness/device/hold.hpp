// The stream hold of GPU timing (nvbench's "blocking kernel"): a kernel that
// keeps the timed stream busy while the host enqueues a pass, so that the
// events around the pass measure GPU time and not the host's launch latency.
// Plain C++ header; the kernel is in hold.cu (CUDA builds only).
#pragma once

namespace attnbench::device {

/// Enqueue on `stream` (a cudaStream_t) a one-thread kernel that spins for `ms`
/// milliseconds of the GPU's global timer, then returns. Asynchronous; the launch
/// is checked (throws device::DeviceError).
void hold_stream(void* stream, double ms);

}  // namespace attnbench::device
