#include "harness/model/json_util.hpp"

#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace attnbench::jsonu {

namespace {
std::string escape_pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}
}  // namespace

std::string child_path(const std::string& path, const std::string& key) {
  return path + "/" + escape_pointer_token(key);
}
std::string child_path(const std::string& path, size_t index) {
  return path + "/" + std::to_string(index);
}

std::string show(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

namespace {

/// SAX handler that builds the DOM (as nlohmann's own DOM parser does) and
/// enforces the input rules of parse_text(). Errors are thrown as InputError
/// straight out of the parser; a syntax error is recorded and reported by the
/// caller.
class SafeDomBuilder {
 public:
  using json = nlohmann::json;
  explicit SafeDomBuilder(json& root, const std::string& source) : root_(root), source_(source) {}
  /// Hand each completed element of the root object's member `key` (an array)
  /// to `sink` instead of keeping it (stream_file()).
  SafeDomBuilder(json& root, const std::string& source, const std::string& key, const ElementSink& sink)
      : root_(root), source_(source), stream_key_(&key), sink_(&sink) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const std::string& text) {
    if (!std::isfinite(v)) throw InputError(source_, here(), out_of_range(text));
    return put(json(v));
  }
  bool string(std::string& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return put(json(std::move(v))); }

  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    Frame& f = stack_.back();
    // One lookup: the key goes in, or it was there already.
    const auto [slot, fresh] = f.node->get_ref<json::object_t&>().emplace(k, nullptr);
    if (!fresh)
      throw InputError(source_, child_path(container_path(), k),
                       "duplicate key \"" + k + "\" (each key may appear once in an object)");
    f.slot = &slot->second;
    f.key = std::move(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string& token, const nlohmann::detail::exception& ex) {
    if (ex.id == 406)  // out_of_range.406: the lexer's "number overflow" (1e400)
      throw InputError(source_, here(), out_of_range(token));
    error_ = ex.what();  // names line, column and byte
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  struct Frame {
    json* node = nullptr;   ///< the open object or array
    json* slot = nullptr;   ///< objects: the member the next value fills
    std::string key;        ///< objects: the key of that member
    size_t handed = 0;      ///< arrays: elements handed to the sink (no longer in node)
  };

  /// Arrays: the index the next element gets.
  static size_t next_index(const Frame& f) { return f.node->size() + f.handed; }

  /// After a value completed: when it is an element of the streamed array, hand
  /// it to the sink and drop it.
  void emit_if_streamed() {
    if (sink_ == nullptr || stack_.size() != 2 || !stack_[0].node->is_object() || !stack_[1].node->is_array() ||
        stack_[0].key != *stream_key_)
      return;
    Frame& f = stack_[1];
    json element = std::move(f.node->back());
    f.node->erase(f.node->size() - 1);
    (*sink_)(std::move(element), f.handed++, root_);
  }

  static std::string out_of_range(const std::string& text) {
    return "number " + text + " is out of range (it overflows a double to infinity)";
  }

  /// Where the next value goes; nullptr before the root.
  json* target() {
    if (stack_.empty()) return &root_;
    Frame& f = stack_.back();
    if (f.node->is_array()) {
      f.node->push_back(nullptr);
      return &f.node->back();
    }
    return f.slot;
  }

  bool put(json v) {
    *target() = std::move(v);
    emit_if_streamed();
    return true;
  }

  bool open(json empty) {
    if (stack_.size() + 1 > static_cast<std::size_t>(kMaxJsonDepth))
      throw InputError(source_, here(),
                       "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                           " levels (an array or object opens at depth " + std::to_string(stack_.size() + 1) + ")");
    json* t = target();
    *t = std::move(empty);
    stack_.push_back(Frame{t, nullptr, {}});
    return true;
  }

  bool close() {
    stack_.pop_back();
    emit_if_streamed();
    return true;
  }

  /// JSON pointer of the innermost open container: in each enclosing one, the
  /// member being filled (an array's last element, already pushed; an object's
  /// last key).
  std::string container_path() const {
    std::string p;
    for (std::size_t i = 0; i + 1 < stack_.size(); ++i) {
      const Frame& f = stack_[i];
      p = f.node->is_object() ? child_path(p, f.key) : child_path(p, next_index(f) - 1);
    }
    return p;
  }
  /// JSON pointer of the value being read now (not yet stored).
  std::string here() const {
    if (stack_.empty()) return "";
    const Frame& f = stack_.back();
    return f.node->is_object() ? child_path(container_path(), f.key) : child_path(container_path(), next_index(f));
  }

  json& root_;
  const std::string& source_;
  const std::string* stream_key_ = nullptr;
  const ElementSink* sink_ = nullptr;
  std::vector<Frame> stack_;
  std::string error_;
};

}  // namespace

nlohmann::json parse_text(const std::string& text, const std::string& source) {
  nlohmann::json root;
  SafeDomBuilder b(root, source);
  if (!nlohmann::json::sax_parse(text, &b))
    throw InputError(source, "", "malformed JSON: " + b.error());
  return root;
}

nlohmann::json load_file(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file, "", "cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_text(ss.str(), file);
}

namespace {

/// Reads a file in 1 MiB blocks: the input iterator of stream_file()'s parser
/// (nlohmann's iterator input adapter reads it one character at a time).
class BlockReader {
 public:
  explicit BlockReader(std::FILE* f) : f_(f), buf_(1 << 20) {}
  /// The next byte, or EOF.
  int get() {
    if (at_ == end_) {
      end_ = std::fread(buf_.data(), 1, buf_.size(), f_);
      at_ = 0;
      if (end_ == 0) return EOF;
    }
    return static_cast<unsigned char>(buf_[at_++]);
  }

 private:
  std::FILE* f_;
  std::vector<char> buf_;
  size_t at_ = 0, end_ = 0;
};

/// Input iterator over a BlockReader (end: reader null or exhausted).
class BlockIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  BlockIterator() = default;
  explicit BlockIterator(BlockReader* r) : r_(r) { advance(); }
  const char& operator*() const { return c_; }
  BlockIterator& operator++() {
    advance();
    return *this;
  }
  bool operator==(const BlockIterator& o) const { return r_ == o.r_; }
  bool operator!=(const BlockIterator& o) const { return r_ != o.r_; }

 private:
  void advance() {
    const int c = r_->get();
    if (c == EOF) r_ = nullptr;
    else c_ = static_cast<char>(c);
  }
  BlockReader* r_ = nullptr;
  char c_ = 0;
};

}  // namespace

nlohmann::json stream_file(const std::string& file, const std::string& array_key, const ElementSink& sink) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(file.c_str(), "rb"), &std::fclose);
  if (!f) throw InputError(file, "", "cannot open file");
  BlockReader reader(f.get());
  nlohmann::json root;
  SafeDomBuilder b(root, file, array_key, sink);
  const bool parsed = nlohmann::json::sax_parse(BlockIterator(&reader), BlockIterator(), &b);
  if (std::ferror(f.get())) throw InputError(file, "", std::string("read error: ") + std::strerror(errno));
  if (!parsed) throw InputError(file, "", "malformed JSON: " + b.error());
  return root;
}

namespace {

/// `text` (a value dumped at indent 1 from depth 0) as nlohmann writes it at
/// nesting depth `depth`: `depth` more spaces after each line break (dumped
/// strings hold no raw line break).
std::string indented(std::string text, int depth) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  const std::string pad(static_cast<size_t>(depth), ' ');
  size_t from = 0;
  for (size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', from)) {
    out.append(text, from, nl + 1 - from);
    out += pad;
    from = nl + 1;
  }
  out.append(text, from, std::string::npos);
  return out;
}

std::string dumped(const nlohmann::json& v, int depth) {
  return indented(v.dump(1, ' ', false, nlohmann::json::error_handler_t::replace), depth);
}

}  // namespace

std::string dump_streamed_element(const nlohmann::json& element) { return dumped(element, 2); }

void dump_streamed(const nlohmann::json& head, const std::map<std::string, ArrayProducer>& arrays,
                   const std::function<void(std::string_view)>& write) {
  if (!head.is_object()) throw std::invalid_argument("dump_streamed: the head is not an object");
  for (const auto& [key, producer] : arrays)
    if (head.contains(key)) throw std::invalid_argument("dump_streamed: \"" + key + "\" is both in the head and streamed");
  auto h = head.begin();
  auto a = arrays.begin();
  bool first = true;
  write("{");
  while (h != head.end() || a != arrays.end()) {
    const bool from_head = a == arrays.end() || (h != head.end() && h.key() < a->first);
    const std::string& key = from_head ? h.key() : a->first;
    write(first ? "\n " : ",\n ");
    first = false;
    write(nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    write(": ");
    if (from_head) {
      write(dumped(h.value(), 1));
      ++h;
      continue;
    }
    size_t n = 0;
    auto text = [&](std::string_view element) {
      write(n++ == 0 ? "[\n  " : ",\n  ");
      write(element);
    };
    a->second(ElementWriter([&](const nlohmann::json& element) { text(dump_streamed_element(element)); }, text));
    write(n == 0 ? "[]" : "\n ]");
    ++a;
  }
  write(first ? "}" : "\n}");
}

void require_object(const nlohmann::json& j, const std::string& file, const std::string& path) {
  if (!j.is_object()) throw InputError(file, path, "expected an object, got " + show(j));
}

void reject_unknown_keys(const nlohmann::json& j, const std::vector<std::string>& allowed,
                         const std::string& file, const std::string& path) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const auto& a : allowed) ok = ok || a == it.key();
    if (!ok) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw InputError(file, child_path(path, it.key()),
                       "unknown field \"" + it.key() + "\" (expected one of: " + list + ")");
    }
  }
}

int64_t get_int(const nlohmann::json& j, const std::string& file, const std::string& path) {
  // Unsigned first: a value above INT64_MAX would wrap to a negative int64 (e.g.
  // 18446744073709551615 -> -1, "unbounded" for a window).
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX))
      throw InputError(file, path, "integer out of range (at most 2^63 - 1), got " + show(j));
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) {
    // Casting a double outside [-2^63, 2^63) to int64 is undefined: range-check first.
    const double d = j.get<double>();
    if (std::isfinite(d) && d >= -9223372036854775808.0 && d < 9223372036854775808.0 && d == std::trunc(d))
      return static_cast<int64_t>(d);
    if (std::isfinite(d) && d == std::trunc(d))
      throw InputError(file, path, "integer out of range (at most 2^63 - 1), got " + show(j));
  }
  throw InputError(file, path, "expected an integer, got " + show(j));
}

double get_number(const nlohmann::json& j, const std::string& file, const std::string& path) {
  if (j.is_number()) return j.get<double>();
  throw InputError(file, path, "expected a number, got " + show(j));
}

std::string get_string(const nlohmann::json& j, const std::string& file, const std::string& path) {
  if (j.is_string()) return j.get<std::string>();
  throw InputError(file, path, "expected a string, got " + show(j));
}

bool get_bool(const nlohmann::json& j, const std::string& file, const std::string& path) {
  if (j.is_boolean()) return j.get<bool>();
  throw InputError(file, path, "expected true or false, got " + show(j));
}

std::vector<int64_t> get_int_array(const nlohmann::json& j, const std::string& file,
                                   const std::string& path) {
  if (!j.is_array()) throw InputError(file, path, "expected an array of integers, got " + show(j));
  std::vector<int64_t> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) out.push_back(get_int(j[i], file, child_path(path, i)));
  return out;
}

int64_t opt_int(const nlohmann::json& obj, const std::string& key, int64_t fallback,
                const std::string& file, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  return get_int(*it, file, child_path(path, key));
}

double opt_number(const nlohmann::json& obj, const std::string& key, double fallback,
                  const std::string& file, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  return get_number(*it, file, child_path(path, key));
}

std::string opt_string(const nlohmann::json& obj, const std::string& key,
                       const std::string& fallback, const std::string& file,
                       const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  return get_string(*it, file, child_path(path, key));
}

const nlohmann::json& require(const nlohmann::json& obj, const std::string& key,
                              const std::string& file, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) throw InputError(file, child_path(path, key), "missing required field");
  return *it;
}

}  // namespace attnbench::jsonu
