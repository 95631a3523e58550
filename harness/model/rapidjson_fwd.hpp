// rapidjson::Value for declarations, with or without RapidJSON (Debian
// rapidjson-dev, optional: ATTNBENCH_HAVE_RAPIDJSON is set when the build found
// it). Without it, Value is a class that is never defined: the fast reader's
// interfaces still declare it, and nothing builds or hands one
// (harness/model/json_fast.hpp reads every element the nlohmann way).
#pragma once

#if defined(ATTNBENCH_HAVE_RAPIDJSON)
#include <rapidjson/fwd.h>
#else
namespace rapidjson {
class Value;
}  // namespace rapidjson
#endif
