// The host memory policy (host_memory.hpp).
#include "harness/model/host_memory.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace attnbench {

std::string keep_freed_host_memory() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && (std::strstr(tunables, "glibc.malloc.mmap_max") || std::strstr(tunables, "glibc.malloc.trim_threshold")))
    return "left to GLIBC_TUNABLES";
  // man mallopt: M_MMAP_MAX 0 "disables the use of mmap(2) for servicing large
  // allocation requests" (of the main arena: a thread arena still maps what its
  // 64 MiB heaps cannot hold, and the main arena maps when brk fails); M_TRIM_THRESHOLD
  // -1 "disables trimming completely".
  ::mallopt(M_MMAP_MAX, 0);
  ::mallopt(M_TRIM_THRESHOLD, -1);
  return "kept";
#else
  return "not glibc";
#endif
}

}  // namespace attnbench
