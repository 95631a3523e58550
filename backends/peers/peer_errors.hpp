// How a peer worker's failures become report rows (docs/peers.md "Status"): the
// exception types the runner maps to timeout / crashed / error, and the
// classification of a worker's error message into error, oom or unsupported.
#pragma once

#include <stdexcept>
#include <string>

#include "harness/model/errors.hpp"

namespace attnbench::peers {

/// The worker ran past its timeout and was killed (report status "timeout").
class PeerTimeout : public Timeout {
 public:
  using Timeout::Timeout;
};
/// The worker died from a signal (report status "crashed").
class PeerCrashed : public Crashed {
 public:
  using Crashed::Crashed;
};
/// result.json or an output file is missing or malformed (report status "error").
class PeerProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What a peer's "error" message means for the row (classify_peer_error()).
enum class PeerErrorClass {
  error,        ///< anything else: report status "error"
  oom,          ///< device memory exhausted at run time: status "oom"
  unsupported,  ///< a compile-time resource limit: the kernel cannot be built for this problem
};

/// Classify a peer's error message (its text and stderr tail). A compile-time
/// resource error is `unsupported`, not `oom`: Triton's "out of resource: shared
/// memory" / "registers" (OutOfResources), "too many resources requested for
/// launch" (cudaErrorLaunchOutOfResources). Device memory exhaustion ("CUDA out of
/// memory", OutOfMemoryError, cudaErrorMemoryAllocation, CUBLAS/CUDNN ALLOC_FAILED)
/// is `oom`; a message naming both (a resource error whose traceback mentions
/// memory) is `unsupported`. Case-sensitive substrings; never throws.
PeerErrorClass classify_peer_error(const std::string& message);

}  // namespace attnbench::peers
