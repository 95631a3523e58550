// The host memory policy (harness/model/host_memory.hpp): after
// keep_freed_host_memory() a large block freed by the main thread stays in the heap
// and the next one of its size reuses it. Its own executable: mallopt is process-wide.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "harness/model/host_memory.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

using namespace attnbench;

// A sanitizer's allocator replaces glibc's: mallinfo2 then says nothing of it.
#if defined(__SANITIZE_ADDRESS__)
#define ATTNBENCH_GLIBC_MALLOC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define ATTNBENCH_GLIBC_MALLOC 0
#endif
#endif
#if !defined(ATTNBENCH_GLIBC_MALLOC)
#if defined(__GLIBC__)
#define ATTNBENCH_GLIBC_MALLOC 1
#else
#define ATTNBENCH_GLIBC_MALLOC 0
#endif
#endif

TEST_CASE("keep_freed_host_memory: large blocks come from the heap and stay there after free") {
#if ATTNBENCH_GLIBC_MALLOC
  constexpr size_t kBytes = size_t{256} << 20;
  auto touch = [](size_t bytes) {
    std::unique_ptr<char[]> p(new char[bytes]);
    std::memset(p.get(), 1, bytes);
    return p;
  };
  {  // the default: a block above the mmap threshold is mapped, and unmapped at free
    auto p = touch(kBytes);
    CHECK(mallinfo2().hblkhd >= kBytes);
  }
  CHECK(mallinfo2().hblkhd < kBytes);

  // The user's GLIBC_TUNABLES choice wins.
  setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1024", 1);
  CHECK(keep_freed_host_memory() == "left to GLIBC_TUNABLES");
  unsetenv("GLIBC_TUNABLES");
  {
    auto p = touch(kBytes);
    CHECK(mallinfo2().hblkhd >= kBytes);
  }

  CHECK(keep_freed_host_memory() == "kept");
  {
    auto p = touch(kBytes);
    CHECK(mallinfo2().hblkhd < kBytes);  // from the heap
    CHECK(mallinfo2().arena >= kBytes);
  }
  CHECK(mallinfo2().fordblks >= kBytes);  // freed, still held
  const size_t arena = mallinfo2().arena;
  {
    auto p = touch(kBytes);  // reuses it: the heap did not grow
    CHECK(mallinfo2().arena == arena);
  }
#elif defined(__GLIBC__)
  MESSAGE("a sanitizer's allocator: only the policy's answer is checked");
  CHECK(keep_freed_host_memory() == "kept");
#else
  CHECK(keep_freed_host_memory() == "not glibc");
#endif
}
