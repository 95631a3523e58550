// Shared-library backends (docs/plugins.md): loading a library that implements
// the C ABI of include/attnbench/plugin.h, and the Backend adapter that runs it
// like an in-tree backend (same checking, timing and report rows).
//
// The loader is installed into BackendRegistry::set_plugin_loader() by this
// folder's static initialiser, so the CLI loads `--plugin PATH` and
// ATTNBENCH_PLUGIN_PATH entries through the backend layer.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <attnbench/plugin.h>

#include "harness/model/problem.hpp"

namespace attnbench::plugin {

/// Longest accepted plugin name (characters of [A-Za-z0-9_.-]).
constexpr size_t kMaxPluginName = 64;
/// Longest accepted plugin description (bytes, no control characters).
constexpr size_t kMaxPluginDescription = 200;

/// dlopen `path`, resolve attnbench_plugin_entry, check the table (ABI version,
/// struct size, name, device, required functions) and register the backend
/// under the plugin's name. Loading one canonical path twice is a no-op that
/// returns the same name. Returns the backend name.
/// Throws InputError naming `path` when the library cannot be opened, the entry
/// point is missing, the ABI version differs from ATTNB_PLUGIN_ABI_VERSION, a
/// required function is NULL, the name is empty, malformed or longer than
/// kMaxPluginName, the description longer than kMaxPluginDescription or holding
/// control characters, or a backend of
/// that name is already registered (in-tree or by another plugin).
std::string load_plugin(const std::string& path);

/// The C view of a problem and the host arrays it points into (doc ids and
/// lengths, padding lengths, THD cu_seqlens). Non-copyable: the view borrows.
class CProblem {
 public:
  /// Flatten `p` (mask terms as in make_mask_desc()).
  explicit CProblem(const Problem& p);
  CProblem(const CProblem&) = delete;
  CProblem& operator=(const CProblem&) = delete;
  const attnb_problem& view() const { return view_; }

 private:
  attnb_problem view_{};
  std::vector<int32_t> doc_ids_, seq_lens_q_, seq_lens_k_, cu_q_, cu_k_;
  std::vector<int64_t> doc_lengths_, doc_offsets_;
};

}  // namespace attnbench::plugin
