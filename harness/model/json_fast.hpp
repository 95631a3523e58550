// The fast reader of large JSON files (reports of 100k rows): RapidJSON (Debian
// rapidjson-dev) parses the file and builds each element of a streamed array as
// a RapidJSON value, several times faster than nlohmann's lexer and DOM. It
// accepts only what jsonu::parse_text() accepts, as parse_text() reads it:
// the same numbers (an integer is unsigned unless negative, as nlohmann
// types it; floats correctly rounded), no key twice in an object, at most
// kMaxJsonDepth levels, valid UTF-8. Whenever it meets anything else (malformed
// JSON, a duplicate key, a number that overflows, a lone surrogate escape, a NUL
// byte, a byte-order mark, deeper nesting) it steps back and the file is read
// again by jsonu::stream_file(), which then names the error exactly as it
// always did; elements already handed are not handed again.
//
// RapidJSON is optional (ATTNBENCH_HAVE_RAPIDJSON): without it every element
// is read by jsonu::stream_file(), fast_json_reading() is false and no
// FastElementSink is ever called.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/json_util.hpp"
#include "harness/model/rapidjson_fwd.hpp"

namespace attnbench::jsonu {

/// What stream_file_fast() hands each element it parsed itself: the element (a
/// RapidJSON value valid only during the call), its index in the array, and the
/// root object as read so far (as nlohmann JSON, as stream_file() gives it).
using FastElementSink = std::function<void(const rapidjson::Value& element, size_t index, const nlohmann::json& root)>;

/// stream_file() with RapidJSON: the same returned document, the same elements
/// in the same order and the same InputErrors. Each element of `array_key` goes
/// once to `fast`, or, from where the fast reader stepped back (see the top of
/// this file), to `slow` as stream_file() parses it. With fast reading off
/// (set_fast_json_reading(false), or ATTNBENCH_FAST_JSON=0 in the environment)
/// every element goes to `slow`. Memory: one element, the root's other members
/// and a 1 MiB read buffer. Throws what stream_file() and the sinks throw.
nlohmann::json stream_file_fast(const std::string& file, const std::string& array_key, const FastElementSink& fast,
                                const ElementSink& slow);

/// `v` as nlohmann JSON, as parse_text() would have built it from the same
/// text; with `keep`, only the parts `keep` names: an object `keep` keeps, of
/// an object, the members it has as keys, each converted with its value as
/// `keep` (`true`: the whole member), and applies to every element of an
/// array; a `keep` that is not an object keeps everything. E.g. {"status":
/// true, "check": {"tensors": {"pass": true}}} keeps a row's status and its
/// tensors' "pass". Recursion: one level per nesting level of `v`.
nlohmann::json to_nlohmann(const rapidjson::Value& v, const nlohmann::json* keep = nullptr);

/// Whether stream_file_fast() reads with RapidJSON (default: on, unless the
/// environment sets ATTNBENCH_FAST_JSON=0; always off in a build without
/// RapidJSON, where set_fast_json_reading() changes nothing). Process-wide; for
/// tests and for comparing the two readers.
void set_fast_json_reading(bool on);
bool fast_json_reading();

}  // namespace attnbench::jsonu
