// Device discovery and selection (CUDA builds).
#include "harness/device/device.hpp"

#include <cuda_runtime.h>

#include <stdexcept>

namespace attnbench::device {

namespace {
int g_device = 0;
}

bool cuda_device_available(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    (void)cudaGetLastError();
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

void select_device(int index) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) throw std::runtime_error(std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e));
  if (index < 0 || index >= n)
    throw std::runtime_error("--device " + std::to_string(index) + " out of range: " + std::to_string(n) + " device(s)");
  e = cudaSetDevice(index);
  if (e != cudaSuccess) throw std::runtime_error(std::string("cudaSetDevice: ") + cudaGetErrorString(e));
  g_device = index;
}

int selected_device() { return g_device; }

}  // namespace attnbench::device
