/* Test plugin: exports no attnbench_plugin_entry (the loader must say so). */
#include <attnbench/plugin.h>

ATTNB_PLUGIN_EXPORT int attnbench_plugin_entry_misspelled(void) { return 1; }
