// Persistent workers (docs/peers.md "Persistent workers"): one long-lived
// `PYTHON WORKER --serve` process per launch setup, fed request paths over a
// socketpair, so that a run imports torch and makes its CUDA context once.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "backends/peers/peer_config.hpp"
#include "backends/peers/peer_process.hpp"

namespace attnbench::peers {

/// The outcome of one request to a persistent worker (serve_request()).
struct ServeOutcome {
  ProcessResult process;    ///< launched / error / timed_out / signal / exit_code as for run_process; wall_s of
                            ///< this request (worker start included when it started one)
  bool answered = false;    ///< the worker answered the request (result.json is then written)
  nlohmann::json reply;     ///< its answer line: {"request", "exit_code", "status", "restart", "served"}
  int request_index = 0;    ///< 1 for the first request a worker process served
  bool started = false;     ///< this request started the worker process
  bool prestarted = false;  ///< the first request of a worker serve_prestart() started ahead of it
  std::string stderr_path;  ///< the worker's stderr log
  size_t stderr_offset = 0; ///< size of that log when the request was sent
};

/// Send `request_path` (absolute) to the persistent `PYTHON WORKER --serve` of
/// launch setup `c` (started on first use; one per python, worker and env) and wait
/// up to c.timeout_s for its answer. A worker past the timeout is killed with its
/// process group (timed_out); one that dies or answers `restart: true` is
/// replaced by a fresh process on the next request. Never throws for worker
/// failures; throws std::runtime_error when the log directory cannot be made.
ServeOutcome serve_request(const LaunchConfig& c, const std::string& request_path);
/// Start the persistent worker of launch setup `cfg` now if it is not running,
/// and send it "#preload PEER" (docs/peers.md): it imports what PEER's first
/// request needs (PyTorch; for torch-flex flex_attention and the torch.compile
/// stack), on the CPU only (no CUDA context: nothing reaches other processes'
/// GPU timing), answers nothing, and serves the next request once done. So the
/// import overlaps the run's first rows instead of delaying the peer's first row.
/// Best effort: never throws; false when the worker could not be started.
bool serve_prestart(const LaunchConfig& cfg, const std::string& peer);
/// Stop every persistent worker (EOF on its stdin, then its group is killed after
/// kill_grace_s). Called at exit; tests call it to start afresh.
void stop_serve_workers();
/// Number of persistent worker processes alive now.
size_t serve_workers_alive();

}  // namespace attnbench::peers
