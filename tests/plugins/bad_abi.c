/* Test plugin: reports ABI version 999 (the loader must refuse it). */
#define TEST_PLUGIN_NAME "test-bad-abi"
#define TEST_PLUGIN_ABI 999u
#include "common.h"
