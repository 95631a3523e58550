// A small reader and writer for NumPy .npy files (format versions 1.0 and 2.0),
// enough for the `attnbench reference` contract (docs/semantics.md section 11): C-order
// arrays of little-endian float64 ('<f8'), float32 ('<f4'), int64 ('<i8'),
// int32 ('<i4') and uint16 ('<u2': the peer protocol carries fp16 / bf16 bits in
// them, docs/peers.md).
//
// File layout (numpy/lib/format.py, "NPY format" NEP 1):
//   "\x93NUMPY", major, minor (1 byte each),
//   header length: uint16 LE (1.0) or uint32 LE (2.0),
//   header: ASCII Python dict literal
//     {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }
//   padded with spaces and ended by '\n' so that the data starts at a multiple of 64,
//   data: the elements in C (row-major) order.
// Everything else (big-endian, Fortran order, other dtypes, version 3.0, object
// arrays) is rejected with a message that says what was found and what is supported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnbench::npy {

/// Element types this module reads and writes.
enum class Dtype { f8, f4, i8, i4, u2 };

/// The .npy descriptor of `t`: "<f8", "<f4", "<i8", "<i4", "<u2".
const char* descr(Dtype t);
/// Bytes per element (8, 4, 8, 4, 2).
int itemsize(Dtype t);
/// True for f8 and f4.
bool is_float(Dtype t);

/// A shape rendered as in NumPy: "(2, 3)", "(5,)", "()".
std::string shape_str(const std::vector<int64_t>& shape);

/// One array as read from a file: dtype, shape (empty for a 0-d scalar) and the
/// raw little-endian element bytes in C order.
struct Array {
  Dtype dtype = Dtype::f8;
  std::vector<int64_t> shape;
  std::vector<unsigned char> raw;

  /// Product of the shape (1 for a 0-d array).
  int64_t numel() const;
  /// Elements as float64 (exact for f8/f4 and for integers below 2^53; u2 as the
  /// integer value, not as fp16 / bf16 bits).
  std::vector<double> to_double() const;
  /// Elements as int64. Throws std::invalid_argument for float dtypes.
  std::vector<int64_t> to_int64() const;
  /// shape_str(shape).
  std::string shape_str() const;
};

/// Parse the bytes of a .npy file. `file` and `field` only label errors.
/// Throws attnbench::InputError(file, field, message) on a malformed or unsupported
/// file: bad magic, unsupported version, unparsable header, missing or unknown
/// header keys, unsupported descr (big-endian, other types), fortran_order True,
/// negative dimensions, or a data size that does not match the shape.
Array parse(const std::string& bytes, const std::string& file, const std::string& field = "");

/// Read and parse a .npy file. Throws InputError (file, field) when the file cannot
/// be opened or is malformed (see parse()).
Array read(const std::string& path, const std::string& field = "");

/// The bytes of a .npy file holding `numel(shape)` elements of type `t` at `data`
/// (C order). Version 1.0 unless the header needs more than 65535 bytes (then 2.0).
/// Throws std::invalid_argument for a negative dimension.
std::string serialize(Dtype t, const std::vector<int64_t>& shape, const void* data);

/// Write a .npy file. Throws std::runtime_error naming `path` when it cannot be
/// written.
void write(const std::string& path, Dtype t, const std::vector<int64_t>& shape, const void* data);
/// Typed conveniences for write().
void write(const std::string& path, const std::vector<int64_t>& shape, const double* data);
void write(const std::string& path, const std::vector<int64_t>& shape, const float* data);
void write(const std::string& path, const std::vector<int64_t>& shape, const int64_t* data);
void write(const std::string& path, const std::vector<int64_t>& shape, const int32_t* data);
void write(const std::string& path, const std::vector<int64_t>& shape, const uint16_t* data);

}  // namespace attnbench::npy
