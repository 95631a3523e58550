// The file protocol of docs/peers.md (version kProtocolVersion): what attnbench
// writes into a request's work directory (request.json, problem.json and the
// input tensors as .npy) and what it reads back (result.json and the output
// tensors, shapes checked against the problem).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/peers/peer_config.hpp"
#include "backends/peers/peer_errors.hpp"
#include "harness/backend/backend.hpp"

namespace attnbench::peers {

/// Version of the file protocol (request.json "protocol", result.json "protocol").
inline constexpr int kProtocolVersion = 1;

/// request.json for `peer` and `p` (docs/peers.md): protocol, peer, problem and
/// input file names, backward, passes ([] without timing; ["fwd"] without
/// backward), timing policy, determinism, device, result file name, and the
/// variant's options (only when the backend declares any).
nlohmann::json make_request(const std::string& peer, const Problem& p, const RunContext& ctx);

/// Write problem.json, the input .npy files and request.json into `dir` (which
/// must exist). Throws std::invalid_argument when `in` does not match `p`, and
/// std::runtime_error when a file cannot be written.
void write_work_dir(const std::string& dir, const std::string& peer, const Problem& p, const ProblemData& in,
                    const RunContext& ctx);

/// The contents of result.json and the output files.
struct PeerResult {
  std::string status;    ///< "ok", "unsupported" or "error"
  std::string reason;    ///< unsupported
  std::string message;   ///< error
  AttentionOutputs outputs;  ///< ok: logical float64 tensors (gradients when present)
  /// Raw samples in ms for fwd, bwd, fwd_bwd (index = harness Pass); nullopt when absent.
  std::optional<std::vector<double>> samples[3];
  std::optional<double> compile_ms;
  std::optional<double> setup_ms;
  std::optional<bool> deterministic;
  std::optional<int64_t> executed_pairs;
  std::optional<int64_t> allocated_bytes;
  nlohmann::json raw;    ///< result.json as parsed
};

/// Read DIR/result.json and, for status ok, the outputs it lists (default names
/// o.npy, lse.npy, dq.npy, dk.npy, dv.npy, dbias.npy), checking shapes against `p`
/// (dbias may also come flat).
/// Gradients are required when `with_grads`. Throws PeerProtocolError naming the
/// file and field on anything missing or malformed (result.json is parsed by
/// jsonu::parse_text: too deep, infinite numbers and duplicate keys are malformed);
/// never throws for status unsupported or error (the caller maps those).
PeerResult read_result(const std::string& dir, const Problem& p, bool with_grads);

}  // namespace attnbench::peers
