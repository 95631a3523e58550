/* Test plugin: named "cpu", the in-tree backend's name (the loader must refuse it). */
#define TEST_PLUGIN_NAME "cpu"
#define TEST_PLUGIN_ABI ATTNB_PLUGIN_ABI_VERSION
#include "common.h"
