/* Test plugin "test-lazy": its forward returns success without writing O or LSE
 * (the check must fail on the NaN-poisoned outputs). */
#define TEST_PLUGIN_NAME "test-lazy"
#define TEST_PLUGIN_ABI ATTNB_PLUGIN_ABI_VERSION
#define TEST_PLUGIN_LAZY 1
#include "common.h"
