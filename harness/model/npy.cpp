#include "harness/model/npy.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "harness/model/errors.hpp"
#include "harness/model/thread_pool.hpp"

namespace attnbench::npy {

static_assert(std::endian::native == std::endian::little,
              "npy: the reader and writer assume a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;  // data offset alignment written by NumPy >= 1.14

/// Cursor over the header dict literal; every failure names the header text.
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& file, const std::string& field)
      : s_(text), file_(file), field_(field) {}

  [[noreturn]] void fail(const std::string& what) const {
    std::string shown = s_;
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.pop_back();
    if (shown.size() > 120) shown = shown.substr(0, 117) + "...";
    throw InputError(file_, field_, "malformed .npy header (" + what + "): " + shown);
  }
  void skip_ws() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool peek(char c) {
    skip_ws();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string string_lit() {
    skip_ws();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) fail("expected a quoted string");
    const char q = s_[pos_++];
    const size_t end = s_.find(q, pos_);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = s_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  bool bool_lit() {
    skip_ws();
    if (s_.compare(pos_, 4, "True") == 0) { pos_ += 4; return true; }
    if (s_.compare(pos_, 5, "False") == 0) { pos_ += 5; return false; }
    fail("expected True or False");
  }
  std::vector<int64_t> tuple_lit() {
    expect('(');
    std::vector<int64_t> dims;
    while (!peek(')')) {
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == '-') fail("negative dimension");
      if (pos_ >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_])))
        fail("expected a dimension");
      int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("dimension too large");
        v = v * 10 + (s_[pos_++] - '0');
      }
      if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 long suffix
      dims.push_back(v);
      if (peek(',')) ++pos_;
      else if (!peek(')')) fail("expected ',' or ')' in shape");
    }
    ++pos_;
    return dims;
  }
  bool at_end() {
    skip_ws();
    return pos_ >= s_.size();
  }

 private:
  const std::string& s_;
  const std::string& file_;
  const std::string& field_;
  size_t pos_ = 0;
};

bool parse_descr(const std::string& d, Dtype& out) {
  if (d == "<f8") out = Dtype::f8;
  else if (d == "<f4") out = Dtype::f4;
  else if (d == "<i8") out = Dtype::i8;
  else if (d == "<i4") out = Dtype::i4;
  else if (d == "<u2") out = Dtype::u2;
  else return false;
  return true;
}

}  // namespace

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

const char* descr(Dtype t) {
  switch (t) {
    case Dtype::f8: return "<f8";
    case Dtype::f4: return "<f4";
    case Dtype::i8: return "<i8";
    case Dtype::i4: return "<i4";
    case Dtype::u2: return "<u2";
  }
  return "?";
}

int itemsize(Dtype t) { return (t == Dtype::f8 || t == Dtype::i8) ? 8 : t == Dtype::u2 ? 2 : 4; }

bool is_float(Dtype t) { return t == Dtype::f8 || t == Dtype::f4; }

int64_t Array::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string Array::shape_str() const { return npy::shape_str(shape); }

std::vector<double> Array::to_double() const {
  const size_t n = static_cast<size_t>(numel());
  std::vector<double> out(n);
  // One loop per dtype (memcpy per element keeps unaligned data legal); chunks run
  // on the pass pool: a 134M-element float32 output took 1.6 s on one thread.
  auto convert = [&](auto tag) {
    using T = decltype(tag);
    parallel_chunks(n, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        T v;
        std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
        out[i] = static_cast<double>(v);
      }
    });
  };
  switch (dtype) {
    case Dtype::f8: convert(double{}); break;
    case Dtype::f4: convert(float{}); break;
    case Dtype::i8: convert(int64_t{}); break;
    case Dtype::i4: convert(int32_t{}); break;
    case Dtype::u2: convert(uint16_t{}); break;
  }
  return out;
}

std::vector<int64_t> Array::to_int64() const {
  if (is_float(dtype))
    throw std::invalid_argument(std::string("npy: to_int64 on a float array (") + descr(dtype) + ")");
  const size_t n = static_cast<size_t>(numel());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (dtype == Dtype::i8) {
      std::memcpy(&out[i], raw.data() + i * 8, 8);
    } else if (dtype == Dtype::u2) {
      uint16_t v;
      std::memcpy(&v, raw.data() + i * 2, 2);
      out[i] = v;
    } else {
      int32_t v;
      std::memcpy(&v, raw.data() + i * 4, 4);
      out[i] = v;
    }
  }
  return out;
}

namespace {

/// The dtype and shape of a .npy file whose first bytes are `bytes` (at least its
/// preamble and header) and whose whole size is `file_size`; `*data_offset` is
/// where its data starts. Every check of parse() (the data size included).
Array parse_header(const std::string& bytes, size_t file_size, const std::string& file, const std::string& field,
                   size_t* data_offset) {
  auto fail = [&](const std::string& msg) -> void { throw InputError(file, field, msg); };
  if (bytes.size() < kMagicLen + 2 || bytes.compare(0, kMagicLen, kMagic, kMagicLen) != 0)
    fail("not a .npy file (missing the \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  size_t header_len = 0, prefix = 0;
  if (major == 1 && minor == 0) {
    if (bytes.size() < 10) fail("truncated .npy preamble");
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    prefix = 10;
  } else if (major == 2 && minor == 0) {
    if (bytes.size() < 12) fail("truncated .npy preamble");
    for (int b = 0; b < 4; ++b)
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + b])) << (8 * b);
    prefix = 12;
  } else {
    fail("unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
         " (supported: 1.0, 2.0)");
  }
  if (bytes.size() < prefix + header_len) fail("truncated .npy header");
  const std::string header = bytes.substr(prefix, header_len);

  HeaderParser hp(header, file, field);
  Array a;
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  std::string descr_text;
  hp.expect('{');
  while (!hp.peek('}')) {
    const std::string key = hp.string_lit();
    hp.expect(':');
    if (key == "descr") {
      descr_text = hp.string_lit();
      have_descr = true;
    } else if (key == "fortran_order") {
      fortran = hp.bool_lit();
      have_order = true;
    } else if (key == "shape") {
      a.shape = hp.tuple_lit();
      have_shape = true;
    } else {
      hp.fail("unknown key '" + key + "'");
    }
    if (hp.peek(',')) hp.expect(',');
    else if (!hp.peek('}')) hp.fail("expected ',' or '}'");
  }
  hp.expect('}');
  if (!hp.at_end()) hp.fail("text after the closing '}'");
  if (!have_descr || !have_order || !have_shape)
    hp.fail("needs the keys 'descr', 'fortran_order' and 'shape'");
  if (!parse_descr(descr_text, a.dtype))
    fail("unsupported dtype '" + descr_text + "' (supported: '<f8', '<f4', '<i8', '<i4', '<u2', little-endian)");
  if (fortran) fail("fortran_order arrays are not supported (write C-order arrays, e.g. np.ascontiguousarray)");

  // Size of the data, guarding against overflow from absurd shapes.
  const size_t avail = file_size - prefix - header_len;
  size_t need = static_cast<size_t>(itemsize(a.dtype));
  bool overflow = false;
  for (auto d : a.shape) overflow = overflow || __builtin_mul_overflow(need, static_cast<size_t>(d), &need);
  if (overflow || need != avail)
    fail("data size mismatch: shape " + a.shape_str() + " of " + descr_text + " needs " +
         (overflow ? std::string("more than 2^64") : std::to_string(need)) + " bytes, the file holds " +
         std::to_string(avail));
  *data_offset = prefix + header_len;
  return a;
}

/// Bytes a preamble announces: the preamble and header length of `bytes` (its
/// first 12 bytes or fewer), 0 when they are not a .npy preamble (parse_header says why).
size_t announced_prefix(const std::string& bytes) {
  if (bytes.size() < 10 || bytes.compare(0, kMagicLen, kMagic, kMagicLen) != 0) return 0;
  const auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<unsigned char>(bytes[i])); };
  if (bytes[6] == 1 && bytes[7] == 0) return 10 + (byte(8) | byte(9) << 8);
  if (bytes[6] == 2 && bytes[7] == 0 && bytes.size() >= 12)
    return 12 + (byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24);
  return 0;
}

}  // namespace

Array parse(const std::string& bytes, const std::string& file, const std::string& field) {
  size_t offset = 0;
  Array a = parse_header(bytes, bytes.size(), file, field, &offset);
  a.raw.assign(bytes.begin() + static_cast<std::ptrdiff_t>(offset), bytes.end());
  return a;
}

Array read(const std::string& path, const std::string& field) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw InputError(path, field, std::string("cannot open file: ") + std::strerror(errno));
  const std::streamoff size = in.tellg();
  if (size < 0) throw InputError(path, field, "cannot determine the file size");
  const size_t file_size = static_cast<size_t>(size);
  // The preamble and header first, then the data straight into the array (one
  // read, no copy of the file's bytes: an output of a B4 S4096 H32 D96 row is 100 MB).
  std::string head(std::min<size_t>(file_size, 12), '\0');
  in.seekg(0);
  if (!head.empty() && !in.read(head.data(), static_cast<std::streamsize>(head.size())))
    throw InputError(path, field, "short read");
  const size_t prefix = std::min(announced_prefix(head), file_size);
  if (prefix > head.size()) {
    head.resize(prefix);
    if (!in.read(head.data() + 12, static_cast<std::streamsize>(prefix - 12)))
      throw InputError(path, field, "short read");
  }
  size_t offset = 0;
  Array a = parse_header(head, file_size, path, field, &offset);
  a.raw.resize(file_size - offset);
  in.seekg(static_cast<std::streamoff>(offset));
  if (!a.raw.empty() && !in.read(reinterpret_cast<char*>(a.raw.data()), static_cast<std::streamsize>(a.raw.size())))
    throw InputError(path, field, "short read");
  return a;
}

namespace {

/// Elements of `shape` (product of the dimensions); std::invalid_argument on a negative one.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw std::invalid_argument("npy: negative dimension " + std::to_string(d));
    n *= d;
  }
  return n;
}

/// The magic, version, header length and the padded header of a C-order array.
std::string preamble_and_header(Dtype t, const std::vector<int64_t>& shape) {
  std::string header = std::string("{'descr': '") + descr(t) + "', 'fortran_order': False, 'shape': " +
                       shape_str(shape) + ", }";
  // Pad with spaces so that preamble + header + '\n' is a multiple of kAlign; the
  // preamble is 10 bytes (1.0, uint16 length) unless the header needs 2.0 (12 bytes).
  auto padded = [&](size_t pre) {
    std::string h = header;
    h.append((kAlign - (pre + h.size() + 1) % kAlign) % kAlign, ' ');
    h.push_back('\n');
    return h;
  };
  size_t prefix = 10;
  std::string text = padded(prefix);
  if (text.size() > 65535) {
    prefix = 12;
    text = padded(prefix);
  }
  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(prefix == 10 ? 1 : 2));
  out.push_back(0);
  const size_t hl = text.size();
  for (size_t b = 0; b < prefix - 8; ++b) out.push_back(static_cast<char>((hl >> (8 * b)) & 0xFF));
  return out + text;
}

}  // namespace

std::string serialize(Dtype t, const std::vector<int64_t>& shape, const void* data) {
  const int64_t n = checked_numel(shape);
  std::string out = preamble_and_header(t, shape);
  out.append(static_cast<const char*>(data), static_cast<size_t>(n) * static_cast<size_t>(itemsize(t)));
  return out;
}

void write(const std::string& path, Dtype t, const std::vector<int64_t>& shape, const void* data) {
  const int64_t n = checked_numel(shape);
  const std::string head = preamble_and_header(t, shape);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  // The data straight from the caller's buffer (no serialized copy).
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n) * itemsize(t));
  out.close();
  if (!out) throw std::runtime_error("error while writing " + path);
}

void write(const std::string& path, const std::vector<int64_t>& shape, const double* data) {
  write(path, Dtype::f8, shape, data);
}
void write(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  write(path, Dtype::f4, shape, data);
}
void write(const std::string& path, const std::vector<int64_t>& shape, const int64_t* data) {
  write(path, Dtype::i8, shape, data);
}
void write(const std::string& path, const std::vector<int64_t>& shape, const int32_t* data) {
  write(path, Dtype::i4, shape, data);
}
void write(const std::string& path, const std::vector<int64_t>& shape, const uint16_t* data) {
  write(path, Dtype::u2, shape, data);
}

}  // namespace attnbench::npy
