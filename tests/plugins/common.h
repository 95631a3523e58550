/* Shared pieces of the tiny test plugins (tests/test_plugin.cpp). Each plugin
 * defines TEST_PLUGIN_NAME and TEST_PLUGIN_ABI (and may define TEST_PLUGIN_SIZE, the
 * table's struct_size) before including this file. */
#include <attnbench/plugin.h>

#include <stdlib.h>

/* Declines problems with Sq != Sk (a reason the test looks for). */
static int test_supports(const attnb_problem* p, attnb_message* why) {
  if (p->seq_q != p->seq_k) {
    attnb_set_message(why, "test plugin: cross-attention (Sq != Sk) declined on purpose");
    return 0;
  }
  return 1;
}
static int test_prepare(const attnb_problem* p, const attnb_tensors* t, void** out, attnb_message* err) {
  (void)p, (void)t, (void)err;
  *out = NULL;
  return 0;
}
/* Fails (the runner must turn it into an `error` row), or with TEST_PLUGIN_LAZY
 * returns success without writing anything (the NaN poisoning must make the
 * check fail). */
static int test_forward(void* h, const attnb_tensors* t, void* s, attnb_message* err) {
  (void)h, (void)t, (void)s;
#ifdef TEST_PLUGIN_LAZY
  (void)err;
  return 0;
#else
  attnb_set_message(err, "deliberate failure in forward (test plugin)");
  return 7;
#endif
}
static void test_teardown(void* h) { (void)h; }

#ifndef TEST_PLUGIN_SIZE
#define TEST_PLUGIN_SIZE sizeof(attnb_plugin)
#endif
static const attnb_plugin kPlugin = {TEST_PLUGIN_ABI, TEST_PLUGIN_SIZE, TEST_PLUGIN_NAME,
                                     "test plugin whose forward always fails", ATTNB_DEVICE_CPU, 0, NULL,
                                     test_supports, NULL, test_prepare, test_forward, NULL, test_teardown};

ATTNB_PLUGIN_EXPORT const attnb_plugin* attnbench_plugin_entry(void) { return &kPlugin; }
