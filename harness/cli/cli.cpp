#include "harness/cli/cli.hpp"
#include "harness/model/version.hpp"

#include <cstdio>
#include <exception>
#include <iostream>

#include "harness/model/errors.hpp"
#include "harness/model/printable.hpp"

namespace attnbench::cli {

namespace {
std::string g_command_line;
}

const std::string& command_line() { return g_command_line; }

int main_entry(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) g_command_line += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{"attnbench: benchmark and check attention kernels against a float64 reference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("attnbench ") + git_revision());
  Action action;
  add_list_command(app, action);
  add_describe_command(app, action);
  add_run_command(app, action);
  add_reference_command(app, action);
  add_report_commands(app, action);
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
