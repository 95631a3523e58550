// PLACEHOLDER: `attnbench reference`.
#include "harness/cli.hpp"
namespace attnbench::cli {
void add_reference_command(CLI::App& app, Action&) { app.add_subcommand("reference", "write float64 reference outputs (not implemented yet)"); }
}  // namespace attnbench::cli
