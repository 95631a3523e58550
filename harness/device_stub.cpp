// Fallback for builds without CUDA: device queries answer "no CUDA".
#ifndef ATTNBENCH_HAVE_CUDA
#include <stdexcept>

#include "harness/device/device.hpp"

namespace attnbench::device {
bool cuda_device_available(std::string* why) {
  if (why) *why = "attnbench was built without CUDA";
  return false;
}
void select_device(int) { throw std::runtime_error("attnbench was built without CUDA"); }
int selected_device() { return 0; }
}  // namespace attnbench::device
#endif
