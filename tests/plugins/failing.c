/* Test plugin "test-failing": declines Sq != Sk, and its forward always returns
 * an error (rows `unsupported` and `error`). */
#define TEST_PLUGIN_NAME "test-failing"
#define TEST_PLUGIN_ABI ATTNB_PLUGIN_ABI_VERSION
#include "common.h"
