// classify_peer_error(): a worker's error text -> error, oom or unsupported
// (peer_errors.hpp). Mirrored by attnbench_torch/peers/base.py.
#include "backends/peers/peer_errors.hpp"

namespace attnbench::peers {

PeerErrorClass classify_peer_error(const std::string& message) {
  auto has = [&](const char* k) { return message.find(k) != std::string::npos; };
  if (has("out of resource") || has("OutOfResources") || has("too many resources requested for launch") ||
      has("cudaErrorLaunchOutOfResources"))
    return PeerErrorClass::unsupported;
  if (has("out of memory") || has("OutOfMemory") || has("cudaErrorMemoryAllocation") || has("ALLOC_FAILED"))
    return PeerErrorClass::oom;
  return PeerErrorClass::error;
}

}  // namespace attnbench::peers
