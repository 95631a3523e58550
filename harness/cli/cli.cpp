#include "harness/cli/cli.hpp"
#include "harness/model/version.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>

#include "harness/backend/backend.hpp"

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

std::vector<std::string> load_plugins(const std::vector<std::string>& paths) {
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
      if (fs::is_directory(entry, ec)) {
        std::vector<std::string> in_dir;
        for (const auto& e : fs::directory_iterator(entry))
          if (e.is_regular_file() && e.path().extension() == ".so") in_dir.push_back(e.path().string());
        std::sort(in_dir.begin(), in_dir.end());
        files.insert(files.end(), in_dir.begin(), in_dir.end());
      } else {
        files.push_back(entry);  // a missing file is reported by the loader, naming it
      }
    }
  }
  files.insert(files.end(), paths.begin(), paths.end());
  std::vector<std::string> names;
  for (const auto& f : files) names.push_back(BackendRegistry::load_plugin(f));
  return names;
}

int main_entry(int argc, char** argv) {
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
