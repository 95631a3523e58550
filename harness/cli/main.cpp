// attnbench: which attention implementation is fastest on your shapes and your
// packed data, how far from the hardware limit, and is it right, gradients included.
#include "harness/cli/cli.hpp"

int main(int argc, char** argv) { return attnbench::cli::main_entry(argc, argv); }
