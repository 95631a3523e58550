// The layering of docs/ARCHITECTURE.md ("Layers"): every source file of the
// harness, the reference, the reports and the backends lives in a layer folder,
// and every `#include "..."` it makes names its own layer or one the table lets
// it include. Reads the source tree (ATTNBENCH_SOURCE_DIR); files are visited in
// sorted order so that failures read the same everywhere.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

/// Layer of a repository-relative path, or "" when it is in none.
std::string layer_of(const std::string& path) {
  static const std::vector<std::pair<std::string, std::string>> prefixes = {
      {"harness/model/", "model"},         {"harness/device/", "device"},
      {"harness/backend/", "backend"},     {"harness/workloads/", "workloads"},
      {"harness/check/", "check"},         {"harness/measure/", "measure"},
      {"harness/run/", "run"},             {"harness/hunt/", "hunt"},
      {"harness/cli/", "cli"},
      {"reference/", "reference"},         {"reports/", "reports"},
      {"history/", "history"},             {"backends/", "backends"}};
  for (const auto& [prefix, layer] : prefixes)
    if (path.rfind(prefix, 0) == 0) return layer;
  return "";
}

/// The layers each layer may include (the table of docs/ARCHITECTURE.md).
const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> table = {
      {"model", {"model"}},
      {"device", {"device", "model"}},
      {"reference", {"reference", "model"}},
      {"backend", {"backend", "model"}},
      {"workloads", {"workloads", "model"}},
      {"check", {"check", "backend", "reference", "model"}},
      {"measure", {"measure", "backend", "device", "model"}},
      {"reports", {"reports", "measure", "device", "model"}},
      {"run", {"run", "reports", "check", "measure", "workloads", "backend", "reference", "device", "model"}},
      {"hunt", {"hunt", "run", "reports", "check", "measure", "workloads", "backend", "reference", "device", "model"}},
      {"history", {"history", "reports", "measure", "device", "model"}},
      {"cli", {"cli", "hunt", "run", "history", "reports", "check", "measure", "workloads", "backend", "reference", "device", "model"}},
      {"backends", {"backends", "backend", "device", "model", "reference", "measure"}},
  };
  return table;
}

/// Repository-relative paths of the C++/CUDA sources under `dir`, sorted.
std::vector<std::string> sources_under(const std::string& dir) {
  const fs::path root(ATTNBENCH_SOURCE_DIR);
  std::vector<std::string> out;
  if (!fs::exists(root / dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
    if (!e.is_regular_file()) continue;
    const std::string ext = e.path().extension().string();
    if (ext == ".cpp" || ext == ".hpp" || ext == ".cu" || ext == ".cuh" || ext == ".h")
      out.push_back(fs::relative(e.path(), root).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// The quoted includes of a file (`#include "x"`, leading blanks allowed).
std::vector<std::string> quoted_includes(const std::string& rel) {
  std::ifstream in(fs::path(ATTNBENCH_SOURCE_DIR) / rel);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    const size_t p = line.find_first_not_of(" \t");
    if (p == std::string::npos || line.compare(p, 8, "#include") != 0) continue;
    const size_t q0 = line.find('"', p);
    const size_t q1 = q0 == std::string::npos ? q0 : line.find('"', q0 + 1);
    if (q1 != std::string::npos) out.push_back(line.substr(q0 + 1, q1 - q0 - 1));
  }
  return out;
}

}  // namespace

TEST_CASE("every harness source lives in a layer folder") {
  for (const auto& f : sources_under("harness")) {
    CAPTURE(f);
    CHECK(layer_of(f) != "");
  }
}

TEST_CASE("no layer includes a layer above it") {
  int64_t checked = 0;
  for (const char* dir : {"harness", "reference", "reports", "history", "backends"}) {
    for (const auto& f : sources_under(dir)) {
      const std::string from = layer_of(f);
      if (from.empty()) continue;  // reported by the test above
      for (const auto& inc : quoted_includes(f)) {
        const std::string to = layer_of(inc);
        CAPTURE(f);
        CAPTURE(inc);
        // A quoted include is either repository-rooted (in a layer) or a
        // neighbour of the file itself (e.g. a generated or local header).
        if (to.empty()) {
          CHECK(fs::exists((fs::path(ATTNBENCH_SOURCE_DIR) / f).parent_path() / inc));
          continue;
        }
        CHECK(allowed().at(from).count(to) == 1);
        ++checked;
      }
    }
  }
  CHECK(checked > 100);  // the walk found the tree
}
