// Subcommands of the attnbench CLI (CLI11). Each add_*_command registers one
// subcommand on `app` and stores in `action` what to run when it is selected;
// the action returns the process exit code (errors.hpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "reports/compare.hpp"

namespace attnbench::cli {

using Action = std::function<int()>;

void add_list_command(CLI::App& app, Action& action);       ///< list backends | scenarios
void add_describe_command(CLI::App& app, Action& action);   ///< describe SCENARIO
void add_run_command(CLI::App& app, Action& action);        ///< run SCENARIO
void add_reference_command(CLI::App& app, Action& action);  ///< reference --problem P --out DIR
void add_report_commands(CLI::App& app, Action& action);    ///< report, summary, compare, merge
void add_hunt_command(CLI::App& app, Action& action);       ///< hunt --backends a,b --budget T (docs/hunt.md)
/// history add | show | report | runs | prune | migrate (harness/cli/cmd_history.cpp).
void add_history_command(CLI::App& app, Action& action);
/// `compare --history DB NEW.json` and its --history-* options.
struct HistoryCompareArgs {
  std::string db;      ///< "" = no history gate
  int window = 10;     ///< last N accepted runs
  int min_runs = 3;    ///< fewer: the two-report test decides the timing
  double k = 3.5;      ///< threshold in robust standard deviations
};
void add_history_compare_options(CLI::App* compare, HistoryCompareArgs& args);
/// Run the history gate (history/gate.hpp) on `new_file`; the output options as
/// compare's. Returns the exit code (0, 1; bad input throws InputError).
int run_history_compare(const HistoryCompareArgs& args, const CompareOptions& options, const std::string& new_file,
                        const std::string& markdown_file, const std::string& json_file, bool quiet);
/// The hidden `__unit REQUEST RESULT` subcommand (one isolated unit of `run`).
void add_unit_command(CLI::App& app, Action& action);

/// Add `--plugin PATH` (repeatable, docs/plugins.md) to `cmd`, collecting into `paths`.
void add_plugin_option(CLI::App* cmd, std::vector<std::string>& paths);
/// Load the plugins of ATTNBENCH_PLUGIN_PATH (colon-separated files, or folders
/// whose *.so files load in name order), of ATTNBENCH_CHILD_PLUGINS (the hex-encoded,
/// comma-separated absolute --plugin files a parent run hands its children: a
/// path may hold any byte), then `paths`; returns the backend names registered.
/// `in_process`: dlopen each here (`--isolate off`, and the isolated children);
/// otherwise load each through a probe child and register a stand-in whose code
/// runs only in isolated children (probe_plugin()). Records each (backend name,
/// absolute file) in ATTNBENCH_UNIT_PLUGINS (hex-encoded "name=file" entries,
/// comma-separated) for load_unit_plugin() in the isolated children. Throws
/// InputError naming the file or folder on any loading error (exit 2).
std::vector<std::string> load_plugins(const std::vector<std::string>& paths, bool in_process = false);
/// In an isolated unit (`__unit`): load, in this process, only the plugin whose
/// backend the unit runs, the file ATTNBENCH_UNIT_PLUGINS names for `backend`;
/// nothing for an in-tree backend or a name it does not list (the unit then
/// reports the unknown backend). Throws InputError as load_plugin() does.
void load_unit_plugin(const std::string& backend);
/// Hex encoding (lower case, two digits a byte) of the paths in ATTNBENCH_CHILD_PLUGINS.
std::string hex_encode(const std::string& s);
/// Inverse of hex_encode(). Throws InputError on a character that is not a hex digit.
std::string hex_decode(const std::string& s);

/// Put the --plugin files (absolute) in front of ATTNBENCH_PLUGIN_PATH, so that
/// child processes (isolated units, --gpus shards) load the same plugins.
void export_plugin_path(const std::vector<std::string>& plugins);

/// The full command line of this process (argv joined by spaces), for reports.
const std::string& command_line();
/// argv of this process, word by word.
const std::vector<std::string>& argv_words();

/// Parse argv and run the selected subcommand; maps InputError and CLI usage
/// errors to exit code 2, other exceptions to 3.
int main_entry(int argc, char** argv);

}  // namespace attnbench::cli
