/* Test plugin "test-v1": an ABI version 1 table (struct_size of version 1, no
 * options); attnbench must keep loading it and refuse any option for it. */
#define TEST_PLUGIN_NAME "test-v1"
#define TEST_PLUGIN_ABI 1u
#define TEST_PLUGIN_SIZE ATTNB_PLUGIN_V1_SIZE
#define TEST_PLUGIN_LAZY 1
#include "common.h"
