// Peer availability: `WORKER --probe` (interpreter runs, framework imports, GPU
// visible, per-peer verdicts, whether it can serve persistently), run once per
// launch setup and process and cached.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "backends/peers/peer_config.hpp"

namespace attnbench::peers {

/// Availability of the peers behind one (python, worker, env) launch setup.
struct ProbeResult {
  bool ok = false;       ///< the worker runs and its framework sees a GPU
  std::string reason;    ///< why not
  nlohmann::json report; ///< the worker's JSON (versions, per-peer verdicts)
  /// Whether `peer` can run; `why` receives the reason when not.
  bool peer_ok(const std::string& peer, std::string* why) const;
};

/// Run `WORKER --probe` once per distinct launch setup and process (cached).
ProbeResult probe(const LaunchConfig& cfg);
/// Forget cached probe results (tests).
void clear_probe_cache();

}  // namespace attnbench::peers
