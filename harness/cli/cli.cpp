#include "harness/cli/cli.hpp"
#include "harness/model/host_memory.hpp"
#include "harness/model/version.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>

#include <stdlib.h>

#include "harness/backend/backend.hpp"
#include "harness/run/plugin_probe.hpp"

#include "harness/model/errors.hpp"
#include "harness/model/printable.hpp"

namespace attnbench::cli {

namespace {
std::string g_command_line;
std::vector<std::string> g_argv;
}  // namespace

const std::string& command_line() { return g_command_line; }
const std::vector<std::string>& argv_words() { return g_argv; }

void add_plugin_option(CLI::App* cmd, std::vector<std::string>& paths) {
  cmd->add_option("--plugin", paths,
                  "load a backend from a shared library (attnbench/plugin.h; repeatable; also ATTNBENCH_PLUGIN_PATH)");
}

std::string hex_encode(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) out += digits[c >> 4], out += digits[c & 15];
  return out;
}

std::string hex_decode(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    const int hi = val(s[i]), lo = val(s[i + 1]);
    if (hi < 0 || lo < 0)
      throw InputError("<environment>", "ATTNBENCH_CHILD_PLUGINS", "not a list of hex-encoded paths");
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

namespace {

/// The *.so files of folder `dir`, in name order. Throws InputError naming the
/// folder when it cannot be read (no permission, a symlink loop).
std::vector<std::string> plugin_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> in_dir;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2) && it->path().extension() == ".so") in_dir.push_back(it->path().string());
  }
  if (ec) throw InputError(dir, "", "cannot read this ATTNBENCH_PLUGIN_PATH folder: " + ec.message());
  std::sort(in_dir.begin(), in_dir.end());
  return in_dir;
}

}  // namespace

std::vector<std::string> load_plugins(const std::vector<std::string>& paths, bool in_process) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (const char* env = std::getenv("ATTNBENCH_PLUGIN_PATH")) {
    const std::string list = env;
    size_t pos = 0;
    while (pos <= list.size()) {
      const size_t colon = std::min(list.find(':', pos), list.size());
      const std::string entry = list.substr(pos, colon - pos);
      pos = colon + 1;
      if (entry.empty()) continue;
      std::error_code ec;
      const auto st = fs::symlink_status(entry, ec);
      if (!ec && fs::is_symlink(st) && !fs::exists(entry, ec) && ec)
        throw InputError(entry, "", "cannot resolve this ATTNBENCH_PLUGIN_PATH entry: " + ec.message());
      if (fs::is_directory(entry, ec)) {
        const auto in_dir = plugin_folder(entry);
        files.insert(files.end(), in_dir.begin(), in_dir.end());
      } else {
        files.push_back(entry);  // a missing file is reported by the loader, naming it
      }
    }
  }
  if (const char* env = std::getenv("ATTNBENCH_CHILD_PLUGINS")) {  // from the parent run: any byte in a path
    const std::string list = env;
    size_t pos = 0;
    while (pos < list.size()) {
      const size_t comma = std::min(list.find(',', pos), list.size());
      if (comma > pos) files.push_back(hex_decode(list.substr(pos, comma - pos)));
      pos = comma + 1;
    }
  }
  files.insert(files.end(), paths.begin(), paths.end());
  std::vector<std::string> names;
  std::string unit_list;  // ATTNBENCH_UNIT_PLUGINS: which file an isolated unit loads for its backend
  for (const auto& f : files) {
    names.push_back(in_process ? BackendRegistry::load_plugin(f) : probe_plugin(f));
    unit_list += (unit_list.empty() ? "" : ",") + hex_encode(names.back()) + "=" +
                 hex_encode(std::filesystem::absolute(f).string());
  }
  if (unit_list.empty()) ::unsetenv("ATTNBENCH_UNIT_PLUGINS");  // never a list inherited from elsewhere
  else ::setenv("ATTNBENCH_UNIT_PLUGINS", unit_list.c_str(), 1);
  return names;
}

void load_unit_plugin(const std::string& backend) {
  if (BackendRegistry::create(backend)) return;  // in tree
  const char* env = std::getenv("ATTNBENCH_UNIT_PLUGINS");
  const std::string list = env ? env : "", want = hex_encode(backend) + "=";
  size_t pos = 0;
  while (pos < list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string entry = list.substr(pos, comma - pos);
    pos = comma + 1;
    if (entry.rfind(want, 0) == 0) {
      BackendRegistry::load_plugin(hex_decode(entry.substr(want.size())));
      return;
    }
  }
}

int main_entry(int argc, char** argv) {
  keep_freed_host_memory();  // rows reuse the pages of the last row's host tensors (host_memory.hpp)
  for (int i = 0; i < argc; ++i) {
    g_command_line += (i ? " " : "") + std::string(argv[i]);
    g_argv.emplace_back(argv[i]);
  }
  CLI::App app{"attnbench: benchmark and check attention kernels against a float64 reference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("attnbench ") + git_revision());
  Action action;
  add_list_command(app, action);
  add_describe_command(app, action);
  add_run_command(app, action);
  add_reference_command(app, action);
  add_report_commands(app, action);
  add_hunt_command(app, action);
  add_history_command(app, action);
  add_unit_command(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and usage
    return kExitBadInput;
  }
  try {
    return action ? action() : kExitBadInput;
  } catch (const InputError& e) {
    std::fprintf(stderr, "attnbench: error: %s\n", printable(e.what(), true).c_str());
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnbench: internal error: %s\n", printable(e.what(), true).c_str());
    return kExitInternal;
  }
}

}  // namespace attnbench::cli
