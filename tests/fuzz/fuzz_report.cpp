// libFuzzer target: attnbench::fuzz::report (tests/fuzz/fuzz_entries.hpp).
#include "tests/fuzz/fuzz_entries.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attnbench::fuzz::report(data, size);
  return 0;
}
