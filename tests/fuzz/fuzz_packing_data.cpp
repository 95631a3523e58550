// libFuzzer target: attnbench::fuzz::packing_data (tests/fuzz/fuzz_entries.hpp).
#include "tests/fuzz/fuzz_entries.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attnbench::fuzz::packing_data(data, size);
  return 0;
}
