// The RapidJSON reader of large JSON files: see json_fast.hpp.
#include "harness/model/json_fast.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <system_error>

#if defined(ATTNBENCH_HAVE_RAPIDJSON)
#include <rapidjson/document.h>
#include <rapidjson/reader.h>
#endif

namespace attnbench::jsonu {

#if defined(ATTNBENCH_HAVE_RAPIDJSON)

namespace {

std::atomic<bool>& fast_switch() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("ATTNBENCH_FAST_JSON");
    return e == nullptr || std::string_view(e) != "0";
  }()};
  return on;
}

/// The fast reader stepped back: the file goes to stream_file().
struct StepBack {};

/// Checks that bytes are UTF-8 (RFC 3629: no overlong form, no surrogate, at
/// most U+10FFFF), block after block: a sequence may straddle two blocks.
class Utf8Check {
 public:
  /// False at the first byte that is not valid UTF-8.
  bool feed(const char* data, size_t n) {
    const auto* p = reinterpret_cast<const unsigned char*>(data);
    size_t i = 0;
    while (i < n) {
      if (need_ == 0) {
        // ASCII runs, eight bytes at a time
        while (i + 8 <= n) {
          uint64_t w;
          std::memcpy(&w, p + i, 8);
          if (w & 0x8080808080808080ull) break;
          i += 8;
        }
        if (i == n) break;
        const unsigned char c = p[i++];
        if (c < 0x80) continue;
        if (c < 0xC2 || c > 0xF4) return false;
        need_ = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
        lo_ = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        hi_ = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
      } else {
        const unsigned char c = p[i++];
        if (c < lo_ || c > hi_) return false;
        lo_ = 0x80, hi_ = 0xBF;
        --need_;
      }
    }
    return true;
  }
  /// True when no sequence is left open.
  bool complete() const { return need_ == 0; }

 private:
  int need_ = 0;  ///< continuation bytes still expected
  unsigned char lo_ = 0x80, hi_ = 0xBF;  ///< the range of the next one
};

/// A RapidJSON input stream over a file read in 1 MiB blocks. Steps back on a
/// NUL byte (RapidJSON reads it as the end of the input; nlohmann rejects it),
/// on bytes that are not UTF-8 (RapidJSON copies them into strings unchecked)
/// and on a read error (stream_file() reports it).
class BlockStream {
 public:
  using Ch = char;
  explicit BlockStream(std::FILE* f) : f_(f), buf_(1 << 20) { fill(); }
  Ch Peek() const { return at_ < end_ ? buf_[at_] : '\0'; }
  Ch Take() {
    if (at_ >= end_) return '\0';
    const Ch c = buf_[at_++];
    if (at_ == end_) fill();
    return c;
  }
  size_t Tell() const { return consumed_ + at_; }
  // Output methods RapidJSON's stream concept names; never called for input.
  Ch* PutBegin() { return nullptr; }
  void Put(Ch) {}
  void Flush() {}
  size_t PutEnd(Ch*) { return 0; }

 private:
  void fill() {
    consumed_ += end_;
    at_ = 0;
    end_ = std::fread(buf_.data(), 1, buf_.size(), f_);
    if (std::ferror(f_) || std::memchr(buf_.data(), '\0', end_) != nullptr || !utf8_.feed(buf_.data(), end_) ||
        (end_ == 0 && !utf8_.complete()))
      throw StepBack{};
  }
  std::FILE* f_;
  std::vector<char> buf_;
  size_t at_ = 0, end_ = 0, consumed_ = 0;
  Utf8Check utf8_;
};

/// True when `s` holds an encoded UTF-16 surrogate (U+D800..U+DFFF: bytes ED
/// A0..BF): RapidJSON writes a lone "\uDC00" escape so; nlohmann rejects it.
bool has_surrogate(const char* s, size_t n) {
  for (size_t i = 0; i + 1 < n; ++i)
    if (static_cast<unsigned char>(s[i]) == 0xED && static_cast<unsigned char>(s[i + 1]) >= 0xA0) return true;
  return false;
}

bool same_name(const rapidjson::Value& a, const rapidjson::Value& b) {
  const size_t n = a.GetStringLength();
  return n == b.GetStringLength() && (n == 0 || (a.GetString()[0] == b.GetString()[0] &&
                                                 std::memcmp(a.GetString(), b.GetString(), n) == 0));
}

/// True when two members of object `v` share a name.
bool duplicate_member(const rapidjson::Value& v) {
  const size_t n = v.MemberCount();
  if (n < 2) return false;
  const auto first = v.MemberBegin();
  auto name = [&](size_t i) { return std::string_view(first[i].name.GetString(), first[i].name.GetStringLength()); };
  size_t sorted = 1;  // names strictly increasing (as nlohmann writes them): none repeats
  while (sorted < n && name(sorted - 1) < name(sorted)) ++sorted;
  if (sorted == n) return false;
  if (n <= 16) {
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j)
        if (same_name(first[i].name, first[j].name)) return true;
    return false;
  }
  thread_local std::vector<std::string_view> names;
  names.clear();
  for (auto m = first; m != v.MemberEnd(); ++m) names.emplace_back(m->name.GetString(), m->name.GetStringLength());
  std::sort(names.begin(), names.end());
  return std::adjacent_find(names.begin(), names.end()) != names.end();
}

/// RapidJSON SAX handler (numbers as text) that builds each value as a RapidJSON
/// value, hands each element of the root object's array `key` to the sink and
/// keeps the root's other members as nlohmann JSON. Throws StepBack on anything
/// parse_text() would not read as it reads it.
class FastBuilder {
 public:
  FastBuilder(const std::string& key, const FastElementSink& sink, size_t& handed)
      : key_(key), sink_(sink), handed_(handed), pool_(chunk_, sizeof(chunk_)) {
    stack_.reserve(64);
    keys_.reserve(64);
  }

  bool Null() { return add(rapidjson::Value()); }
  bool Bool(bool b) { return add(rapidjson::Value(b)); }
  bool Int(int) { throw StepBack{}; }  // numbers come as text (kParseNumbersAsStringsFlag)
  bool Uint(unsigned) { throw StepBack{}; }
  bool Int64(int64_t) { throw StepBack{}; }
  bool Uint64(uint64_t) { throw StepBack{}; }
  bool Double(double) { throw StepBack{}; }
  bool RawNumber(const char* s, rapidjson::SizeType n, bool) { return add(number(s, n)); }
  bool String(const char* s, rapidjson::SizeType n, bool) {
    if (has_surrogate(s, n)) throw StepBack{};
    return add(rapidjson::Value(s, n, pool_));
  }
  bool StartObject() { return open(rapidjson::kObjectType); }
  bool StartArray() { return open(rapidjson::kArrayType); }
  bool Key(const char* s, rapidjson::SizeType n, bool) {
    if (has_surrogate(s, n)) throw StepBack{};
    if (stack_.size() == 1) {  // root members: kept out of the pool, as nlohmann JSON
      root_key_.assign(s, n);
      if (root_.contains(root_key_)) throw StepBack{};  // a duplicate key of the root
    } else {
      keys_.back().SetString(s, n, pool_);
    }
    return true;
  }
  bool EndObject(rapidjson::SizeType) {
    if (duplicate_member(stack_.back())) throw StepBack{};
    return close();
  }
  bool EndArray(rapidjson::SizeType) { return close(); }

  nlohmann::json& root() { return root_; }

 private:
  /// A number as nlohmann's lexer types it: integer text without '-' is
  /// unsigned, with '-' signed, either as a float when out of its range; floats
  /// correctly rounded (from_chars, as strtod). "-0" and out-of-range floats
  /// step back (nlohmann reads "-0" as a signed 0; parse_text() rejects overflow).
  static rapidjson::Value number(const char* s, size_t n) {
    const char* end = s + n;
    if (std::find_if(s, end, [](char c) { return c == '.' || c == 'e' || c == 'E'; }) == end) {
      if (*s == '-') {
        int64_t i = 0;
        const auto r = std::from_chars(s, end, i);
        if (r.ec == std::errc() && r.ptr == end) {
          if (i == 0) throw StepBack{};
          return rapidjson::Value(i);
        }
      } else {
        uint64_t u = 0;
        const auto r = std::from_chars(s, end, u);
        if (r.ec == std::errc() && r.ptr == end) return rapidjson::Value(u);
      }
    }
    double d = 0;
    const auto r = std::from_chars(s, end, d);
    if (r.ec != std::errc() || r.ptr != end || !std::isfinite(d)) throw StepBack{};
    return rapidjson::Value(d);
  }

  bool open(rapidjson::Type type) {
    if (stack_.size() + 1 > static_cast<size_t>(kMaxJsonDepth)) throw StepBack{};
    if (stack_.size() == 1 && stack_[0].IsObject() && type == rapidjson::kArrayType && root_key_ == key_) {
      streaming_ = true;
      root_[root_key_] = nlohmann::json::array();  // as stream_file() shows the root to the sink: the array empty
    }
    if (stack_.empty() && type == rapidjson::kObjectType) root_ = nlohmann::json::object();
    stack_.emplace_back(type);
    keys_.emplace_back();
    return true;
  }

  bool close() {
    rapidjson::Value done(std::move(stack_.back()));
    stack_.pop_back();
    keys_.pop_back();
    if (stack_.size() == 1 && streaming_) {  // the streamed array ends: it stays empty in the root
      streaming_ = false;
      pool_.Clear();
      return true;
    }
    return add(std::move(done));
  }

  bool add(rapidjson::Value&& v) {
    if (stack_.empty()) {  // the root itself: an object's members are in root_ already
      if (!v.IsObject()) root_ = to_nlohmann(v);
      return true;
    }
    if (stack_.size() == 1) {  // a root member, or an element of a root array
      if (stack_[0].IsObject()) {
        root_[root_key_] = to_nlohmann(v);
      } else {
        stack_[0].PushBack(v, pool_);
        return true;
      }
      pool_.Clear();
      return true;
    }
    if (stack_.size() == 2 && streaming_) {
      sink_(v, handed_, root_);
      ++handed_;
      pool_.Clear();
      return true;
    }
    rapidjson::Value& top = stack_.back();
    if (top.IsArray()) top.PushBack(v, pool_);
    else top.AddMember(keys_.back(), v, pool_);
    return true;
  }

  const std::string& key_;
  const FastElementSink& sink_;
  size_t& handed_;
  alignas(16) char chunk_[1 << 18];  ///< the pool's first chunk, reused from element to element
  rapidjson::MemoryPoolAllocator<> pool_;
  std::vector<rapidjson::Value> stack_;  ///< open containers
  std::vector<rapidjson::Value> keys_;   ///< per open object below the root: its pending key
  std::string root_key_;                 ///< the root object's pending key
  bool streaming_ = false;               ///< inside the root's array `key_`
  nlohmann::json root_;
};

}  // namespace

void set_fast_json_reading(bool on) { fast_switch() = on; }
bool fast_json_reading() { return fast_switch(); }

nlohmann::json to_nlohmann(const rapidjson::Value& v, const nlohmann::json* keep) {
  if (keep != nullptr && !keep->is_object()) keep = nullptr;  // true: the whole value
  switch (v.GetType()) {
    case rapidjson::kNullType: return nullptr;
    case rapidjson::kFalseType: return false;
    case rapidjson::kTrueType: return true;
    case rapidjson::kStringType: return std::string(v.GetString(), v.GetStringLength());
    case rapidjson::kNumberType:
      if (v.IsDouble()) return v.GetDouble();
      if (v.IsUint64()) return v.GetUint64();
      return v.GetInt64();
    case rapidjson::kArrayType: {
      nlohmann::json out = nlohmann::json::array();
      auto& a = out.get_ref<nlohmann::json::array_t&>();
      a.reserve(v.Size());
      for (const auto& e : v.GetArray()) a.push_back(to_nlohmann(e, keep));
      return out;
    }
    case rapidjson::kObjectType: {
      nlohmann::json out = nlohmann::json::object();
      auto& o = out.get_ref<nlohmann::json::object_t&>();
      for (auto m = v.MemberBegin(); m != v.MemberEnd(); ++m) {
        std::string name(m->name.GetString(), m->name.GetStringLength());
        const nlohmann::json* sub = nullptr;
        if (keep != nullptr) {
          const auto it = keep->find(name);
          if (it == keep->end()) continue;
          sub = &*it;
        }
        // Members mostly come sorted (nlohmann writes them so): the end is the hint.
        o.emplace_hint(o.end(), std::move(name), to_nlohmann(m->value, sub));
      }
      return out;
    }
  }
  return nullptr;
}

nlohmann::json stream_file_fast(const std::string& file, const std::string& array_key, const FastElementSink& fast,
                                const ElementSink& slow) {
  size_t handed = 0;
  if (fast_json_reading()) {
    try {
      std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(file.c_str(), "rb"), &std::fclose);
      if (!f) throw StepBack{};
      BlockStream in(f.get());
      auto builder = std::make_unique<FastBuilder>(array_key, fast, handed);
      rapidjson::Reader reader;
      // Recursive descent (faster than kParseIterativeFlag): FastBuilder steps
      // back at kMaxJsonDepth levels, so the recursion stays as shallow. UTF-8 is
      // checked by BlockStream, faster than kParseValidateEncodingFlag.
      constexpr unsigned kFlags = rapidjson::kParseNumbersAsStringsFlag;
      if (reader.Parse<kFlags>(in, *builder)) return std::move(builder->root());
    } catch (const StepBack&) {
    }
  }
  // Step back: stream_file() reads the file again and names what is wrong;
  // the elements already handed are skipped.
  return stream_file(file, array_key, [&](nlohmann::json&& element, size_t index, const nlohmann::json& root) {
    if (index >= handed) slow(std::move(element), index, root);
  });
}

#else  // without RapidJSON: every element the nlohmann way

void set_fast_json_reading(bool) {}
bool fast_json_reading() { return false; }

nlohmann::json to_nlohmann(const rapidjson::Value&, const nlohmann::json*) {
  throw std::logic_error("jsonu::to_nlohmann: built without RapidJSON (no rapidjson::Value exists)");
}

nlohmann::json stream_file_fast(const std::string& file, const std::string& array_key, const FastElementSink&,
                                const ElementSink& slow) {
  return stream_file(file, array_key, slow);
}

#endif

}  // namespace attnbench::jsonu
