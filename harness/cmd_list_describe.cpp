// PLACEHOLDER: `list` and `describe` subcommands.
#include "harness/cli.hpp"
namespace attnbench::cli {
void add_list_command(CLI::App& app, Action&) { app.add_subcommand("list", "list backends or scenarios (not implemented yet)"); }
void add_describe_command(CLI::App& app, Action&) { app.add_subcommand("describe", "describe a scenario (not implemented yet)"); }
}  // namespace attnbench::cli
