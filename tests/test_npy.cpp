// The .npy reader/writer: round trips for every supported dtype and shape kind,
// byte-exact headers as NumPy writes them, and every rejection path.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <unistd.h>
#include <vector>

#include "harness/model/errors.hpp"
#include "harness/model/npy.hpp"

using namespace attnbench;

namespace {

/// A v1.0 file with the given header dict (padded like NumPy) and raw data bytes.
std::string make_file(const std::string& dict, const std::string& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string h = dict;
  h.append((64 - (prefix + h.size() + 1) % 64) % 64, ' ');
  h.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  for (size_t b = 0; b < prefix - 8; ++b) out.push_back(static_cast<char>((h.size() >> (8 * b)) & 0xFF));
  return out + h + data;
}

std::string doubles(std::initializer_list<double> v) {
  std::string s(v.size() * 8, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

/// parse()'s error for `bytes` (empty when it parses), after checking that read()
/// of the same bytes in a file (which reads the header first and the data straight
/// into the array) says the same, with the file's path for "x.npy", and reads the
/// same array.
std::string error_of(const std::string& bytes) {
  std::string parsed, from_file;
  npy::Array a, b;
  try {
    a = npy::parse(bytes, "x.npy", "q");
  } catch (const InputError& e) {
    parsed = e.what();
  }
  const std::string path = (std::filesystem::temp_directory_path() / ("npy_error_of_" + std::to_string(::getpid()) + ".npy")).string();
  std::ofstream(path, std::ios::binary) << bytes;
  try {
    b = npy::read(path, "q");
  } catch (const InputError& e) {
    from_file = e.what();
  }
  std::filesystem::remove(path);
  if (!parsed.empty()) CHECK(from_file == path + parsed.substr(5));  // "x.npy" -> the path
  else CHECK((from_file.empty() && a.raw == b.raw && a.shape == b.shape && a.dtype == b.dtype));
  return parsed;
}

}  // namespace

TEST_CASE("serialize writes the header NumPy writes") {
  const double v[6] = {1, 2, 3, 4, 5, 6};
  const std::string bytes = npy::serialize(npy::Dtype::f8, {2, 3}, v);
  REQUIRE(bytes.size() == 128 + 48);
  CHECK(bytes.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) == 0);
  CHECK(static_cast<unsigned char>(bytes[8]) == 118);  // header length, little-endian uint16
  CHECK(bytes[9] == 0);
  const std::string header = bytes.substr(10, 118);
  CHECK(header.rfind("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 0) == 0);
  CHECK(header.back() == '\n');
  double back[6];
  std::memcpy(back, bytes.data() + 128, 48);
  CHECK(back[5] == 6.0);
  // 1-d shapes carry Python's trailing comma; 0-d is "()".
  CHECK(npy::serialize(npy::Dtype::i4, {5}, std::vector<int32_t>(5).data()).find("'shape': (5,), }") !=
        std::string::npos);
  const float one = 1.0f;
  CHECK(npy::serialize(npy::Dtype::f4, {}, &one).find("'shape': (), }") != std::string::npos);
}

TEST_CASE("round trips for every dtype through files") {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("attnbench_test_npy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<double> d = {0.5, -1.25, std::numeric_limits<double>::infinity(), 1e-300, -0.0, 3.0};
  const std::vector<float> f = {1.5f, -2.0f, 1e-30f, 7.0f};
  const std::vector<int64_t> i8 = {0, -1, INT64_C(1) << 40, 7};
  const std::vector<int32_t> i4 = {5, -6, 2147483647};
  npy::write((dir / "d.npy").string(), {3, 2}, d.data());
  npy::write((dir / "f.npy").string(), {2, 1, 2}, f.data());
  npy::write((dir / "i8.npy").string(), {4}, i8.data());
  npy::write((dir / "i4.npy").string(), {3}, i4.data());
  npy::write((dir / "empty.npy").string(), {0, 4}, d.data());
  const std::vector<uint16_t> u2 = {0x3f80, 0xbfc0, 0x7c00};  // bf16 1.0, -1.5; fp16 inf
  npy::write((dir / "u2.npy").string(), {3}, u2.data());

  const npy::Array a = npy::read((dir / "d.npy").string());
  CHECK(a.dtype == npy::Dtype::f8);
  CHECK(a.shape == std::vector<int64_t>{3, 2});
  CHECK(a.to_double() == d);
  CHECK(std::signbit(a.to_double()[4]));
  const npy::Array b = npy::read((dir / "f.npy").string());
  CHECK(b.dtype == npy::Dtype::f4);
  CHECK(b.shape_str() == "(2, 1, 2)");
  CHECK(b.to_double() == std::vector<double>(f.begin(), f.end()));
  CHECK_THROWS_AS(b.to_int64(), std::invalid_argument);
  const npy::Array c = npy::read((dir / "i8.npy").string());
  CHECK(c.dtype == npy::Dtype::i8);
  CHECK(c.to_int64() == i8);
  CHECK(c.to_double()[2] == 1099511627776.0);
  const npy::Array e = npy::read((dir / "i4.npy").string());
  CHECK(e.shape_str() == "(3,)");
  CHECK(e.to_int64() == std::vector<int64_t>{5, -6, 2147483647});
  const npy::Array u = npy::read((dir / "u2.npy").string());
  CHECK(u.dtype == npy::Dtype::u2);
  CHECK(u.raw.size() == 6);
  CHECK(u.to_int64() == std::vector<int64_t>{0x3f80, 0xbfc0, 0x7c00});  // the integers, not decoded
  CHECK(npy::serialize(npy::Dtype::u2, {3}, u2.data()).find("'descr': '<u2'") != std::string::npos);
  const npy::Array z = npy::read((dir / "empty.npy").string());
  CHECK(z.numel() == 0);
  CHECK(z.to_double().empty());
  std::filesystem::remove_all(dir);
}

TEST_CASE("hand-written headers: quotes, spacing, key order, version 2.0") {
  // Key order and double quotes as other writers produce them.
  npy::Array a = npy::parse(
      make_file("{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<f8\"}", doubles({1.5, 2.5})), "x.npy");
  CHECK(a.shape == std::vector<int64_t>{2});
  CHECK(a.to_double() == std::vector<double>{1.5, 2.5});
  // Version 2.0 (uint32 header length).
  a = npy::parse(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1), }", doubles({4.0}), 2),
                 "x.npy");
  CHECK(a.to_double() == std::vector<double>{4.0});
  // Fortran order is harmless for a 1-d or scalar array but still rejected: the
  // contract is C order.
  CHECK(error_of(make_file("{'descr': '<f8', 'fortran_order': True, 'shape': (1,), }", doubles({1})))
            .find("fortran_order") != std::string::npos);
}

TEST_CASE("malformed and unsupported files are rejected with the file and field named") {
  const std::string ok_dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
  CHECK(error_of(make_file(ok_dict, doubles({1, 2}))).empty());
  CHECK(error_of("hello").find("x.npy: q: not a .npy file") == 0);
  CHECK(error_of(make_file(ok_dict, doubles({1, 2}), 3)).find("unsupported .npy format version 3.0") !=
        std::string::npos);
  CHECK(error_of(make_file(ok_dict, doubles({1}))).find("data size mismatch: shape (2,) of <f8 needs 16 bytes, the file holds 8") !=
        std::string::npos);
  CHECK(error_of(make_file(ok_dict, doubles({1, 2, 3}))).find("data size mismatch") != std::string::npos);
  CHECK(error_of(make_file("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", doubles({1, 2})))
            .find("unsupported dtype '>f8'") != std::string::npos);
  CHECK(error_of(make_file("{'descr': '<f2', 'fortran_order': False, 'shape': (8,), }", doubles({1, 2})))
            .find("unsupported dtype '<f2'") != std::string::npos);
  CHECK(error_of(make_file("{'descr': '|b1', 'fortran_order': False, 'shape': (16,), }", doubles({1, 2})))
            .find("unsupported dtype") != std::string::npos);
  CHECK(error_of(make_file("{'descr': '<f8', 'fortran_order': False, }", doubles({1, 2})))
            .find("needs the keys") != std::string::npos);
  CHECK(error_of(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'extra': 1}", doubles({1, 2})))
            .find("unknown key 'extra'") != std::string::npos);
  CHECK(error_of(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (-2,), }", doubles({1, 2})))
            .find("negative dimension") != std::string::npos);
  CHECK(error_of(make_file("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (2,), }", doubles({1, 2})))
            .find("expected True or False") != std::string::npos);
  CHECK(error_of(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,) ", doubles({1, 2})))
            .find("malformed .npy header") != std::string::npos);
  CHECK(error_of(make_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }",
                           doubles({1, 2})))
            .find("data size mismatch") != std::string::npos);
  // Truncated preamble / header.
  CHECK(error_of(std::string("\x93NUMPY\x01\x00\x40", 9)).find("truncated") != std::string::npos);
  CHECK(error_of(make_file(ok_dict, "").substr(0, 40)).find("truncated .npy header") != std::string::npos);
  // A missing file names the path and the field.
  try {
    npy::read("/nonexistent/dir/q.npy", "q");
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("/nonexistent/dir/q.npy: q: cannot open file") == 0);
  }
}

TEST_CASE("write reports unwritable paths") {
  const double v = 1;
  CHECK_THROWS_AS(npy::write("/nonexistent/dir/x.npy", {1}, &v), std::runtime_error);
  CHECK_THROWS_AS(npy::serialize(npy::Dtype::f8, {-1}, &v), std::invalid_argument);
}
