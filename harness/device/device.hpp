// Device platform shared by every GPU backend: device discovery, checked CUDA /
// cuBLAS / cuDNN calls, RAII device buffers, dtype conversion, NaN poisoning and
// guard bands. This header is plain C++ (no CUDA headers) so that host code that
// is compiled without nvcc can query the device.
#pragma once

#include <string>

namespace attnbench::device {

/// True when the CUDA runtime is linked in and at least one device answers;
/// otherwise false with the reason in `why` (no CUDA build, no driver, no device).
bool cuda_device_available(std::string* why = nullptr);

/// Number of CUDA devices visible (0 without CUDA, a driver or a device).
int cuda_device_count();

/// Select the device used by GPU backends (`--device N`). Throws std::runtime_error
/// if N is out of range or CUDA is unavailable.
void select_device(int index);
/// The selected device index (default 0).
int selected_device();

}  // namespace attnbench::device
