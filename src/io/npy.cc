// The .npy format as specified by numpy/lib/format.py (NEP 1, "A Simple File Format for NumPy
// Arrays"): the magic string "\x93NUMPY", a major and a minor version byte, the header length
// (uint16 little-endian in version 1.0, uint32 in 2.0 and 3.0), then an ASCII (3.0: UTF-8) Python
// dict literal with the keys 'descr', 'fortran_order' and 'shape', padded with spaces and ended by
// '\n', then the raw C-order data.
#include "posenc/npy.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "posenc/error.h"
#include "posenc/files.h"

namespace posenc {
namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
// numpy aligns the data start to 64 bytes (format.ARRAY_ALIGN) so that files can be memory-mapped.
constexpr size_t kArrayAlign = 64;
// Headers are a short dict; numpy's own reader refuses more than 10,000 bytes unless told
// otherwise (max_header_size). Far more than any real file, far less than the 4 GiB the v2
// length field allows.
constexpr uint64_t kMaxHeaderBytes = uint64_t{1} << 20;

// product(shape) when every extent is >= 0 and the product fits in int64; nullopt otherwise.
std::optional<int64_t> ElementCount(std::span<const int64_t> shape) {
  int64_t count = 1;
  for (int64_t extent : shape) {
    if (extent < 0) return std::nullopt;
    if (extent > 0 && count > std::numeric_limits<int64_t>::max() / extent) return std::nullopt;
    count *= extent;
  }
  return count;
}

// Every read error names the file and what in it is wrong.
[[noreturn]] void ReadError(const std::string& path, std::string_view what, std::string_view rule,
                            const std::string& value) {
  throw Error(ErrorMessage("npy.read", path + ": " + std::string(what), rule, value));
}

// Little-endian integers of `bytes` bytes, independent of the host's byte order.
uint64_t LoadLittleEndian(const char* p, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(p[i]);
  return value;
}

void StoreLittleEndian(uint64_t value, int bytes, std::string& out) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

// The header numpy.save writes for a C-order float32 array (format.py, _write_array_header and
// _wrap_header): keys sorted, each "'key': repr(value), ", then '}', spaces so that the data starts
// on a multiple of 64 bytes, then '\n'. numpy pads with ARRAY_ALIGN - (length % ARRAY_ALIGN)
// spaces, which is a full 64 when the length is already aligned; we do the same. Version 1.0
// unless the header does not fit its uint16 length, as numpy chooses. (Since numpy PR #20321,
// numpy also puts ~20 spare spaces before the padding so that a header can grow in place; every
// reader, numpy's included, treats them as the padding they are.)
std::string NpyHeader(std::span<const int64_t> shape) {
  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + NpyShapeString(shape) + ", }";
  for (int major : {1, 2}) {
    const int length_bytes = major == 1 ? 2 : 4;
    const size_t unpadded = kMagic.size() + 2 + length_bytes + dict.size() + 1;
    const size_t padding = kArrayAlign - unpadded % kArrayAlign;
    const size_t header_length = dict.size() + padding + 1;
    if (major == 1 && header_length > std::numeric_limits<uint16_t>::max()) continue;
    std::string header(kMagic);
    header += static_cast<char>(major);
    header += '\0';
    StoreLittleEndian(header_length, length_bytes, header);
    header += dict;
    header.append(padding, ' ');
    header += '\n';
    return header;
  }
  // A version 2.0 length is 32 bits; a header of 4 GiB would need a shape of ~10^9 dimensions.
  throw Error(ErrorMessage("npy.write", "shape", "have a header shorter than 4 GiB", shape.size()));
}

// A parser for the header dict: a Python literal of strings, True/False and tuples of integers,
// with keys in any order and optional whitespace, as numpy's own reader (ast.literal_eval) takes.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  struct Header {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
  };

  Header Parse() {
    Header header;
    bool has_descr = false, has_fortran_order = false, has_shape = false;
    Expect('{');
    while (!Accept('}')) {
      const std::string key = ParseString();
      Expect(':');
      if (key == "descr") {
        Once(has_descr, key);
        header.descr = ParseString();
      } else if (key == "fortran_order") {
        Once(has_fortran_order, key);
        header.fortran_order = ParseBool();
      } else if (key == "shape") {
        Once(has_shape, key);
        header.shape = ParseShape();
      } else {
        Fail("header", "have only the keys 'descr', 'fortran_order' and 'shape'", "'" + key + "'");
      }
      if (!Accept(',')) {
        Expect('}');
        break;
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) {
      Fail("header", "end after the dict (only spaces and '\\n' may follow)",
           Quote(text_.substr(pos_)));
    }
    if (!has_descr) Fail("header", "have the key 'descr'", Quote(text_));
    if (!has_fortran_order) Fail("header", "have the key 'fortran_order'", Quote(text_));
    if (!has_shape) Fail("header", "have the key 'shape'", Quote(text_));
    return header;
  }

 private:
  [[noreturn]] void Fail(std::string_view what, std::string_view rule,
                         const std::string& value) const {
    ReadError(path_, what, rule, value);
  }

  // The offending text in quotes, control bytes escaped and cut short so messages stay readable.
  static std::string Quote(std::string_view text) {
    constexpr size_t kMaxShown = 80;
    std::string quoted = "'";
    for (char c : text.substr(0, kMaxShown)) {
      const auto byte = static_cast<unsigned char>(c);
      if (c == '\n') {
        quoted += "\\n";
      } else if (byte < 0x20 || byte >= 0x7f) {
        constexpr char kHex[] = "0123456789abcdef";
        quoted += {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
      } else {
        quoted += c;
      }
    }
    quoted += '\'';
    if (text.size() > kMaxShown) quoted += "...";
    return quoted;
  }

  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  bool Accept(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void Expect(char c) {
    if (!Accept(c)) {
      Fail("header",
           "be a Python dict literal with '" + std::string(1, c) + "' at offset " +
               std::to_string(pos_),
           Quote(text_));
    }
  }

  void Once(bool& seen, const std::string& key) {
    if (seen) Fail("header", "name each key once", "'" + key + "' twice");
    seen = true;
  }

  // A single- or double-quoted string without escapes (numpy's descr and keys never need them).
  std::string ParseString() {
    SkipSpace();
    const char quote = pos_ < text_.size() ? text_[pos_] : '\0';
    if (quote != '\'' && quote != '"') {
      Fail("header", "have a quoted string at offset " + std::to_string(pos_), Quote(text_));
    }
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) Fail("header", "close every string", Quote(text_));
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }

  bool ParseBool() {
    SkipSpace();
    for (const auto& [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (text_.substr(pos_, std::strlen(word)) == word) {
        pos_ += std::strlen(word);
        return value;
      }
    }
    Fail("fortran_order", "be True or False", Quote(text_.substr(pos_)));
  }

  // A tuple of non-negative integers: "()", "(5,)", "(3, 4)". Leniently, Python 2's "3L" and a
  // lone "(5)" (Python's integer 5; numpy writes "(5,)") are read too.
  std::vector<int64_t> ParseShape() {
    std::vector<int64_t> shape;
    Expect('(');
    while (!Accept(')')) {
      SkipSpace();
      const size_t start = pos_;
      int64_t extent = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        const int digit = text_[pos_++] - '0';
        if (extent > (std::numeric_limits<int64_t>::max() - digit) / 10) {
          Fail("shape", "have extents that fit in int64", Quote(text_.substr(start)));
        }
        extent = extent * 10 + digit;
      }
      if (pos_ == start) {
        Fail("shape", "be a tuple of non-negative integers", Quote(text_.substr(start)));
      }
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
      shape.push_back(extent);
      if (!Accept(',')) {
        Expect(')');
        break;
      }
    }
    return shape;
  }

  std::string_view text_;
  const std::string& path_;
  size_t pos_ = 0;
};

// Reads exactly n bytes or fails: the file shrank after it was sized.
void ReadExactly(const InputFile& file, uint64_t offset, char* out, size_t n,
                 const std::string& path) {
  if (file.ReadAt(offset, out, n) != n) {
    ReadError(path, "file", "keep its size while being read",
              "fewer than the " + std::to_string(file.size()) + " bytes it had");
  }
}

}  // namespace

std::string NpyShapeString(std::span<const int64_t> shape) {
  std::string repr = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) repr += ", ";
    repr += std::to_string(shape[i]);
  }
  if (shape.size() == 1) repr += ',';
  return repr + ')';
}

NpyArray ReadNpy(const std::string& path, uint64_t max_bytes) {
  const InputFile file("npy.read", path);
  const uint64_t file_size = file.size();
  if (file_size > max_bytes) {
    ReadError(path, "file", "be at most max_bytes = " + std::to_string(max_bytes) + " bytes",
              std::to_string(file_size) + " bytes");
  }

  // The fixed prefix: magic, version, header length.
  char prefix[kMagic.size() + 2 + 4] = {};
  const size_t prefix_read = file.ReadAt(0, prefix, std::min<uint64_t>(sizeof prefix, file_size));
  const std::string_view start(prefix, prefix_read);
  if (start.size() < kMagic.size() + 2 || start.substr(0, kMagic.size()) != kMagic) {
    ReadError(path, "file", "start with the .npy magic string \"\\x93NUMPY\"",
              std::to_string(file_size) + " bytes without it");
  }
  const int major = static_cast<unsigned char>(start[kMagic.size()]);
  const int minor = static_cast<unsigned char>(start[kMagic.size() + 1]);
  if (!((major == 1 || major == 2 || major == 3) && minor == 0)) {
    ReadError(path, "version", "be 1.0, 2.0 or 3.0",
              std::to_string(major) + "." + std::to_string(minor));
  }
  const size_t length_bytes = major == 1 ? 2 : 4;
  const size_t header_start = kMagic.size() + 2 + length_bytes;
  if (file_size < header_start) {
    ReadError(path, "file", "hold the header length",
              "a file of " + std::to_string(file_size) + " bytes");
  }
  const uint64_t header_length =
      LoadLittleEndian(prefix + kMagic.size() + 2, static_cast<int>(length_bytes));
  if (header_length > kMaxHeaderBytes) {
    ReadError(path, "header", "be at most " + std::to_string(kMaxHeaderBytes) + " bytes",
              std::to_string(header_length) + " bytes");
  }
  if (header_length > file_size - header_start) {
    ReadError(path, "header",
              "fit in the file (" + std::to_string(file_size - header_start) +
                  " bytes after the length field)",
              std::to_string(header_length) + " bytes");
  }
  std::string header_text(static_cast<size_t>(header_length), '\0');
  ReadExactly(file, header_start, header_text.data(), header_text.size(), path);
  const auto header = HeaderParser(header_text, path).Parse();

  if (header.descr.size() == 3 && header.descr[0] == '>' && header.descr[1] == 'f') {
    ReadError(path, "descr", "be little-endian ('<f4' or '<f8'); big-endian data is not supported",
              "'" + header.descr + "'");
  }
  if (header.descr != "<f4" && header.descr != "<f8") {
    ReadError(path, "descr", "be '<f4' (float32) or '<f8' (float64)", "'" + header.descr + "'");
  }
  if (header.fortran_order) {
    ReadError(path, "fortran_order", "be False (only C-order arrays are supported)", "True");
  }
  // The data's size is checked against the file's before anything is allocated for it.
  const size_t item_size = header.descr == "<f4" ? 4 : 8;
  const auto count = ElementCount(header.shape);
  const uint64_t data_start = header_start + header_length;
  const uint64_t data_bytes = file_size - data_start;
  if (!count || static_cast<uint64_t>(*count) > data_bytes / item_size ||
      static_cast<uint64_t>(*count) * item_size != data_bytes) {
    ReadError(path, "data",
              "be product(shape) * " + std::to_string(item_size) + " bytes for shape " +
                  NpyShapeString(header.shape),
              std::to_string(data_bytes) + " bytes");
  }

  // float64 -> float32 rounds to nearest and overflows to +-inf under IEEE 754, as numpy's
  // astype(np.float32) does.
  static_assert(std::numeric_limits<float>::is_iec559 && std::numeric_limits<double>::is_iec559);
  NpyArray array;
  array.shape = header.shape;
  array.data.resize(static_cast<size_t>(*count));
  if (item_size == 4 && std::endian::native == std::endian::little) {
    ReadExactly(file, data_start, reinterpret_cast<char*>(array.data.data()), data_bytes, path);
    return array;
  }
  // float64, or a big-endian host: convert a block at a time, so memory stays the output's.
  constexpr size_t kBlockItems = 8192;
  std::vector<char> block(kBlockItems * item_size);
  for (size_t done = 0; done < array.data.size();) {
    const size_t items = std::min(kBlockItems, array.data.size() - done);
    ReadExactly(file, data_start + done * item_size, block.data(), items * item_size, path);
    const char* p = block.data();
    for (size_t i = 0; i < items; ++i, p += item_size) {
      array.data[done + i] =
          item_size == 4 ? std::bit_cast<float>(static_cast<uint32_t>(LoadLittleEndian(p, 4)))
                         : static_cast<float>(std::bit_cast<double>(LoadLittleEndian(p, 8)));
    }
    done += items;
  }
  return array;
}

void WriteNpy(const std::string& path, std::span<const float> data,
              std::span<const int64_t> shape) {
  for (size_t i = 0; i < shape.size(); ++i) {
    Require(shape[i] >= 0, "npy.write", "shape[" + std::to_string(i) + "]", "be >= 0", shape[i]);
  }
  const auto count = ElementCount(shape);
  Require(count.has_value(), "npy.write", "shape", "have a product that fits in int64",
          NpyShapeString(shape));
  Require(static_cast<uint64_t>(*count) == data.size(), "npy.write", "data.size()",
          "equal product(shape " + NpyShapeString(shape) + ") = " + std::to_string(*count),
          data.size());

  std::string bytes = NpyHeader(shape);
  bytes.reserve(bytes.size() + 4 * data.size());
  for (float value : data) StoreLittleEndian(std::bit_cast<uint32_t>(value), 4, bytes);

  WriteFileAtomically("npy.write", path, bytes);
}

}  // namespace posenc
