/* Test plugin with a 20000-character name (tests/test_cli_foreign.cpp): refused at load. */
#include <attnbench/plugin.h>

#include <string.h>

static char g_name[20001];
static int supports(const attnb_problem* p, attnb_message* why) { return (void)p, (void)why, 1; }
static int prepare(const attnb_problem* p, const attnb_tensors* t, void** i, attnb_message* e) {
  return (void)p, (void)t, (void)e, *i = NULL, 0;
}
static int forward(void* i, const attnb_tensors* t, void* s, attnb_message* e) { return (void)i, (void)t, (void)s, (void)e, 1; }
static void teardown(void* i) { (void)i; }
static attnb_plugin plugin = {ATTNB_PLUGIN_ABI_VERSION, sizeof(attnb_plugin), g_name, "long name",
                              ATTNB_DEVICE_CPU, 0, NULL, supports, NULL, prepare, forward, NULL, teardown};
ATTNB_PLUGIN_EXPORT const attnb_plugin* attnbench_plugin_entry(void) {
  memset(g_name, 'a', sizeof g_name - 1);
  return &plugin;
}
