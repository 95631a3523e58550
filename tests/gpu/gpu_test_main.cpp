// Entry point for GPU test executables: without a CUDA device the suite is
// skipped loudly (exit code 77, which ctest reports as "Skipped").
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "harness/device/device.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (!attnbench::device::cuda_device_available(&why)) {
    std::fprintf(stderr, "SKIPPED: no usable CUDA device (%s); GPU tests did not run\n", why.c_str());
    return 77;
  }
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  return ctx.run();
}
