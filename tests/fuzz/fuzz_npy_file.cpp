// libFuzzer target: attnbench::fuzz::npy_file (tests/fuzz/fuzz_entries.hpp).
#include "tests/fuzz/fuzz_entries.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attnbench::fuzz::npy_file(data, size);
  return 0;
}
