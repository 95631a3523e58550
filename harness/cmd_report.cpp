// PLACEHOLDER: `report`, `compare`, `merge`.
#include "harness/cli.hpp"
namespace attnbench::cli {
void add_report_commands(CLI::App&, Action&) {}
}  // namespace attnbench::cli
