// Fallback for builds without CUDA: device queries answer "no CUDA".
#ifndef ATTNBENCH_HAVE_CUDA
#include <stdexcept>

#include "harness/device/device.hpp"
#include "harness/device/kernel_trace.hpp"

namespace attnbench::device {
bool cuda_device_available(std::string* why) {
  if (why) *why = "attnbench was built without CUDA";
  return false;
}
int cuda_device_count() { return 0; }
void select_device(int) { throw std::runtime_error("attnbench was built without CUDA"); }
int selected_device() { return 0; }
bool kernel_trace_available(std::string* why) {
  if (why) *why = "attnbench was built without CUDA";
  return false;
}
void kernel_trace_start() { throw std::runtime_error("kernel trace: attnbench was built without CUDA"); }
std::vector<TracedActivity> kernel_trace_stop() {
  throw std::runtime_error("kernel trace: attnbench was built without CUDA");
}
}  // namespace attnbench::device
#endif
