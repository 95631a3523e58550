// One float64 gold per case (issue 29): a case's seeded inputs (make_inputs) and
// its reference (reference::gold and reference::lp over the check plan's slices)
// are computed once and shared with every backend of the case.
//
//  - In one process the backends of a case share them in memory (CaseGold).
//  - Across processes (isolated units, `--isolate`; foreign backends checked in a
//    child) they travel through files in OUT/.gold/ (GoldStore): the process that
//    first needs the inputs or the reference computes it and publishes it at once
//    (before the backend runs on, so a backend that then crashes loses nothing);
//    every later unit of the case, in the parent or in a child, loads it. PyTorch
//    peers get their inputs from the unit that runs them (PeerBackend::prepare),
//    so they share the same ones.
//  - Nothing stale is reused: a file's name is a hash of its key (the kind, the
//    full problem with its seed, the check mode, backward on or off, the sample
//    size and the attnbench revision), the key itself is stored in the file and
//    compared exactly on load, and every array carries a CRC-32 (zlib) checked on
//    load; any mismatch, short file or unreadable trailer means "not shared" and
//    the unit computes its own. Each case publishes in its own folder,
//    OUT/.gold/case-K; the runner empties OUT/.gold/ when a run starts and
//    removes a case's folder once the case's last row is written (a row's check
//    may still read it while the next case runs), under the --out lock.
//  - Units of one case may run at once (`--check-overlap rows`: the check of
//    one row runs while the next row is timed, in this process or in a finished
//    child). CaseGold is safe to share between threads (one lock for the inputs,
//    one for the reference), and across processes the reference is computed
//    under an exclusive flock() on its file's `.lock` (GoldStore::lock_gold), so
//    a second unit waits for the first one's reference and loads it instead of
//    computing it again. A unit that dies holding the lock releases it (the
//    kernel does) and the next one computes its own.
//  - Publishing is best effort: a full disk or an unwritable folder only costs
//    the sharing (a warning on stderr), never a row.
//
// File layout (native little-endian): the arrays' bytes back to back, then a JSON
// trailer {"format", "key", "meta", "arrays": [{"name", "shape", "dtype" ("bf16",
// "fp16", "f4" or "f8"), "offset", "bytes", "crc32"}]}, then the trailer's length (uint64) and the
// 8 magic bytes "ABGOLD01". The reference is held and stored sliced (check.hpp,
// slice_outputs: of each output tensor only the checked (batch, kv-head) slices,
// shaped [slices, H/Hkv, ...]), which is what check_outputs reads: a unit that
// loads it never builds the full tensors. An array is stored in the narrowest type that holds every value
// exactly: the bits of bf16, else of fp16, else float32, else float64 (make_inputs
// rounds to the dtype, so a bf16 case's inputs take a quarter of their float64
// bytes; NaN counts as exact and reads back as a quiet NaN). The arrays are written
// from the caller's tensors, not copied.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/check/check.hpp"
#include "harness/model/problem.hpp"
#include "harness/model/tensors.hpp"

namespace attnbench {

/// The reference of one case: the check plan and gold / lp over its slices,
/// sliced (slice_outputs: only the plan's slices held; check_outputs reads them so).
struct GoldCache {
  bool ready = false;
  CheckPlan plan;
  AttentionOutputs gold, lp;  ///< sliced to plan.slices
  double ms = 0;  ///< what computing it cost (wall ms), wherever it was computed
};

/// Where a row's inputs or reference came from, and what obtaining them cost
/// the row: "computed" (ms = the computation) or "shared" (ms = loading the
/// published file, or 0 when another backend of the case in this process had
/// them in memory).
struct GoldProvenance {
  std::string source;  ///< "computed" or "shared"
  double ms = 0;       ///< wall milliseconds this row spent obtaining them
};

/// Named float64 arrays with their shapes: the contents of one shared file.
struct GoldBundle {
  nlohmann::json meta;                       ///< free-form (the check plan, compute ms)
  std::map<std::string, HostTensor> arrays;  ///< name -> array
};

/// Write `bundle` to `path` atomically (a temporary file in the same folder, then
/// rename) in the layout above, with `key` in the trailer. Throws
/// std::runtime_error naming the path when it cannot be written (the temporary
/// file is removed).
void write_gold_bundle(const std::filesystem::path& path, const nlohmann::json& key, const GoldBundle& bundle);

/// Read the file at `path` if its trailer holds exactly `key` and every array's
/// size and CRC-32 match; std::nullopt otherwise, with the reason in `*why`
/// ("no file" when absent). Never throws for a bad or stale file.
std::optional<GoldBundle> read_gold_bundle(const std::filesystem::path& path, const nlohmann::json& key,
                                           std::string* why = nullptr);

/// The shared files of one run: OUT/.gold/ (or none: a default-constructed store
/// shares nothing, and every call is a no-op / miss).
class GoldStore {
 public:
  GoldStore() = default;
  /// Share through files in `dir` (created on first publish).
  explicit GoldStore(std::filesystem::path dir) : dir_(std::move(dir)) {}
  bool enabled() const { return !dir_.empty(); }
  const std::filesystem::path& dir() const { return dir_; }

  /// The case's published inputs, if any (and valid for `p`).
  std::optional<ProblemData> load_inputs(const Problem& p) const;
  /// Publish the case's inputs; false (and a warning on stderr) when they could not be written.
  bool save_inputs(const Problem& p, const ProblemData& in) const;
  /// The case's published reference for (mode, grads) into `out` (ready set); false when none valid.
  bool load_gold(const Problem& p, CheckMode mode, bool grads, GoldCache& out) const;
  /// Publish the case's reference; false (and a warning on stderr) when it could not be written.
  bool save_gold(const Problem& p, CheckMode mode, bool grads, const GoldCache& g) const;
  /// Remove every published file (the folder itself too). Never throws.
  void clear() const;
  /// An exclusive flock() on the reference's lock file (file_for(gold_key) +
  /// ".lock", the folder created when needed), held until the returned handle is
  /// destroyed; blocks while another process (or thread) holds it. A no-op handle
  /// when the store is disabled or the lock file cannot be created (sharing is
  /// best effort: then two units may both compute).
  std::shared_ptr<void> lock_gold(const Problem& p, CheckMode mode, bool grads) const;

  /// The key of a case's inputs: kind, format, attnbench revision and the full
  /// problem (seed included).
  static nlohmann::json inputs_key(const Problem& p);
  /// The key of a case's reference: inputs_key plus check mode, grads and the sample size.
  static nlohmann::json gold_key(const Problem& p, CheckMode mode, bool grads);
  /// The file a key is published in: DIR/<16 hex digits of FNV-1a 64 of key.dump()>.<kind>.
  std::filesystem::path file_for(const nlohmann::json& key) const;

 private:
  std::filesystem::path dir_;
};

/// What a case's units share in one process: inputs and the reference, both
/// lazy, and the store through which other processes share them. Thread-safe:
/// a row's check may obtain the reference on a worker thread while the next
/// row obtains the inputs (the reference's computation never blocks get_inputs
/// once the inputs exist).
struct CaseGold {
  std::unique_ptr<ProblemData> inputs;
  GoldCache gold;
  GoldStore store;
  /// This process runs one unit of the case (an isolated child): its inputs are
  /// dropped once the backend has prepared (release_inputs), so that the outputs
  /// reuse their memory instead of touching new pages.
  bool single_unit = false;
  /// The inputs, loaded from the store or computed (make_inputs) and published
  /// on first use; `how` (optional) says which, for this call.
  const ProblemData& get_inputs(const Problem& p, GoldProvenance* how = nullptr);
  /// The reference for (mode, grads), loaded from the store or computed
  /// (plan_check, reference::gold, reference::lp) and published on first use;
  /// `how` (optional) says which, for this call. Obtains the inputs (get_inputs) only to compute it.
  const GoldCache& get_gold(const Problem& p, CheckMode mode, bool grads, GoldProvenance* how = nullptr);
  /// get_inputs() and get_gold() ahead of the rows (the runner's prefetch, on a
  /// thread of its own from the case's start): what each cost, computed or
  /// loaded, is charged to the first later call that asks `how` (that row's
  /// extra.inputs and gold_source / gold_ms), so that the report still says once
  /// per case what they cost. Throw as get_inputs() / get_gold().
  void prefetch_inputs(const Problem& p);
  void prefetch_gold(const Problem& p, CheckMode mode, bool grads);
  /// What prefetch_gold() did for the reference and for the inputs, if no row
  /// has been charged with it yet (then it is charged to the caller's row: an
  /// isolated row that loaded what this process prefetched); each std::nullopt
  /// when claimed already or nothing was prefetched.
  std::optional<GoldProvenance> claim_prefetched_gold();
  std::optional<GoldProvenance> claim_prefetched_inputs();
  /// Free the inputs when nothing here needs them again: they are published in
  /// the store (a later get_inputs() loads them again) and the reference for
  /// (mode, grads) is held here or published (so get_gold() will not compute it),
  /// or mode is off. Returns whether they were freed; never throws.
  bool release_inputs(const Problem& p, CheckMode mode, bool grads);

 private:
  const ProblemData& obtain_inputs(const Problem& p, GoldProvenance* how, bool prefetch);
  const GoldCache& obtain_gold(const Problem& p, CheckMode mode, bool grads, GoldProvenance* how, bool prefetch);
  std::mutex inputs_mu_, gold_mu_;
  bool inputs_published_ = false;  ///< the inputs held are in the store (loaded from it, or saved)
  std::optional<GoldProvenance> prefetched_;         ///< what prefetch_gold() did, until a row claims it
  std::optional<GoldProvenance> prefetched_inputs_;  ///< the same for the inputs
};

}  // namespace attnbench
