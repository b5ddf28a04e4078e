// Reading and writing NumPy .npy files (format version 1.0 to 3.0), so that tables and tensors
// move between posenc and numpy without conversion code.
//
// Supported: little-endian float32 ('<f4') and float64 ('<f8', converted to float32 on read),
// C order. Anything else is a posenc::Error naming the file and what was found.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace posenc {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, product(shape) elements
};

// The default cap on the size of a file ReadNpy reads: 16 GiB, four billion float32 values.
inline constexpr uint64_t kNpyMaxBytes = uint64_t{16} << 30;

// Throws posenc::Error naming the path and the problem: a missing file, a directory or device, a
// file larger than max_bytes, a bad magic string or version, a header over 1 MiB or corrupt, an
// unsupported dtype or order, or data of the wrong length. Memory stays bounded by the file:
// the file is sized with stat, the header is read and checked first, and the data's length
// (product(shape) * itemsize) must equal what the file holds before the output is allocated.
NpyArray ReadNpy(const std::string& path, uint64_t max_bytes = kNpyMaxBytes);

// Writes data as a float32 array of the given shape; product(shape) must equal data.size(). The
// header is the one numpy.save writes (version 1.0, padded so that the data starts on a multiple of
// 64 bytes). Everything is validated before the file is created, and the file is written to a
// temporary name and renamed (posenc/files.h): a failed write leaves an existing file untouched.
void WriteNpy(const std::string& path, std::span<const float> data, std::span<const int64_t> shape);

// Python's repr of a shape tuple, as in .npy headers and error messages: "()", "(5,)", "(3, 4)".
std::string NpyShapeString(std::span<const int64_t> shape);

}  // namespace posenc
