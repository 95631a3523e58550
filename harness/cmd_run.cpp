// PLACEHOLDER: `run`.
#include "harness/cli.hpp"
namespace attnbench::cli {
void add_run_command(CLI::App& app, Action&) { app.add_subcommand("run", "run a scenario (not implemented yet)"); }
}  // namespace attnbench::cli
