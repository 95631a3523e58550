// Typed, path-aware reads from nlohmann::json for input files. Every failure
// throws InputError naming the file, the JSON pointer and the offending value.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/model/errors.hpp"

namespace attnbench::jsonu {

/// JSON pointer of a child: child_path("/mask", 0) == "/mask/0".
std::string child_path(const std::string& path, const std::string& key);
std::string child_path(const std::string& path, size_t index);

/// The value as compact JSON text, shortened to ~80 characters for messages.
std::string show(const nlohmann::json& v);

/// Deepest nesting of arrays and objects that parse_text() and load_file() accept
/// (the document root is level 1: `[[1]]` is 2 deep). Deeper input is rejected
/// while parsing, before any recursive code (dump, flatten, comparison) sees it.
inline constexpr int kMaxJsonDepth = 256;

/// Parse JSON text; `source` names it in messages (a file name). The one JSON
/// parser for every input file: it builds the document through a SAX handler
/// that rejects, each with InputError naming `source`:
///   - nesting deeper than kMaxJsonDepth (path: the pointer where the limit is
///     crossed; the message gives the depth and the limit);
///   - a number that overflows to infinity, e.g. 1e400 (path: its JSON pointer;
///     the message quotes the number's text);
///   - a key repeated within one object (path: the key's JSON pointer; the
///     message quotes the key);
///   - malformed JSON (path ""; the message carries the parser's line and column).
nlohmann::json parse_text(const std::string& text, const std::string& source);

/// Read and parse a JSON file with parse_text(). Throws InputError (path "")
/// when the file cannot be opened, and parse_text()'s InputErrors otherwise.
nlohmann::json load_file(const std::string& file);

/// What stream_file() hands each element of the streamed array: the element
/// (moved out, never kept), its index in the array, and the root object as
/// read so far (the members before the array; the array itself empty).
using ElementSink = std::function<void(nlohmann::json&& element, size_t index, const nlohmann::json& root)>;

/// Read and parse a JSON file under parse_text()'s rules and errors, but hand
/// each element of the root object's member `array_key` (when it is an array)
/// to `sink` as soon as the element is complete, so that one element at a time
/// is in memory: the returned document holds every other member, and
/// `array_key` as an empty array. The file is read in 1 MiB blocks, never
/// whole. Error paths count the handed elements ("/results/7/status"). Throws
/// InputError (path "") when the file cannot be opened or read, parse_text()'s
/// InputErrors, and whatever `sink` throws.
nlohmann::json stream_file(const std::string& file, const std::string& array_key, const ElementSink& sink);

/// What a streamed member's producer (dump_streamed()) calls once per element:
/// with the element, or with dump_streamed_element() of it (text already written
/// as dump_streamed() writes an element: kept, e.g. in a file, and copied as is).
class ElementWriter {
 public:
  using Text = std::function<void(std::string_view)>;
  ElementWriter(std::function<void(const nlohmann::json&)> element, Text text)
      : element_(std::move(element)), text_(std::move(text)) {}
  void operator()(const nlohmann::json& element) const { element_(element); }
  /// An element given as dump_streamed_element() wrote it.
  void dumped(std::string_view text) const { text_(text); }

 private:
  std::function<void(const nlohmann::json&)> element_;
  Text text_;
};

/// An element of a streamed array as dump_streamed() writes it (nlohmann's dump
/// at indent 1, nested two levels deep), for ElementWriter::dumped().
std::string dump_streamed_element(const nlohmann::json& element);
/// Produces the elements of one streamed array member, calling the writer once each.
using ArrayProducer = std::function<void(const ElementWriter& emit)>;

/// Write, piece by piece through `write`, the text that
/// `doc.dump(1, ' ', false, error_handler_t::replace)` gives for the object
/// `doc` = `head` plus one array member per entry of `arrays` (its elements as
/// the producer emits them): the members in nlohmann's order (sorted keys), one
/// element in memory at a time. No newline at the end. Throws
/// std::invalid_argument when `head` is not an object or already has a key of
/// `arrays`; whatever `write` or a producer throws.
void dump_streamed(const nlohmann::json& head, const std::map<std::string, ArrayProducer>& arrays,
                   const std::function<void(std::string_view)>& write);

/// Throws InputError unless `j` is an object.
void require_object(const nlohmann::json& j, const std::string& file, const std::string& path);
/// Throws InputError listing the first key of `j` not in `allowed`.
void reject_unknown_keys(const nlohmann::json& j, const std::vector<std::string>& allowed,
                         const std::string& file, const std::string& path);

/// Integer field (must be integral JSON number). Throws InputError on a wrong type.
int64_t get_int(const nlohmann::json& j, const std::string& file, const std::string& path);
/// Number field (integer or float).
double get_number(const nlohmann::json& j, const std::string& file, const std::string& path);
std::string get_string(const nlohmann::json& j, const std::string& file, const std::string& path);
bool get_bool(const nlohmann::json& j, const std::string& file, const std::string& path);
std::vector<int64_t> get_int_array(const nlohmann::json& j, const std::string& file,
                                   const std::string& path);

/// Optional member reads: return `fallback` when `key` is absent (or null for the
/// nullable variants); throw InputError when present with the wrong type.
int64_t opt_int(const nlohmann::json& obj, const std::string& key, int64_t fallback,
                const std::string& file, const std::string& path);
double opt_number(const nlohmann::json& obj, const std::string& key, double fallback,
                  const std::string& file, const std::string& path);
std::string opt_string(const nlohmann::json& obj, const std::string& key,
                       const std::string& fallback, const std::string& file,
                       const std::string& path);
/// Required member: throws InputError "missing required field" if absent.
const nlohmann::json& require(const nlohmann::json& obj, const std::string& key,
                              const std::string& file, const std::string& path);

}  // namespace attnbench::jsonu
