#include "posenc/npy.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "posenc/error.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::TempFile;

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Little-endian bytes of `bytes`-byte unsigned integers.
std::string LittleEndian(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
  return out;
}

std::string Float32Bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) out += LittleEndian(std::bit_cast<uint32_t>(v), 4);
  return out;
}

std::string Float64Bytes(std::initializer_list<double> values) {
  std::string out;
  for (double v : values) out += LittleEndian(std::bit_cast<uint64_t>(v), 8);
  return out;
}

// An .npy file assembled by hand: magic, version major.0, the length field, dict, data. No padding
// is added, which the format allows (only numpy's writer aligns).
std::string NpyBytes(const std::string& dict, const std::string& data, int major = 1) {
  std::string bytes("\x93NUMPY", 6);
  bytes += static_cast<char>(major);
  bytes += '\0';
  bytes += LittleEndian(dict.size(), major == 1 ? 2 : 4);
  return bytes + dict + data;
}

// The bytes numpy.save(f, np.array([[1, -2, 0.5], [0, 3.25, 1024]], np.float32)) writes (before
// numpy PR #20321 added spare spaces ahead of the padding): 10 bytes of prefix, 59 of dict, 58
// spaces and '\n' (header length 118 = 0x76, so that the data starts at byte 128), then the six
// floats little-endian.
std::string Known2x3File() {
  std::string bytes("\x93NUMPY\x01\x00\x76\x00", 10);
  bytes += "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  bytes += std::string(58, ' ') + "\n";
  bytes += std::string(
      "\x00\x00\x80\x3f"   // 1.0f = 0x3f800000
      "\x00\x00\x00\xc0"   // -2.0f = 0xc0000000
      "\x00\x00\x00\x3f"   // 0.5f = 0x3f000000
      "\x00\x00\x00\x00"   // 0.0f
      "\x00\x00\x50\x40"   // 3.25f = 0x40500000
      "\x00\x00\x80\x44",  // 1024.0f = 0x44800000
      24);
  return bytes;
}

std::vector<float> Known2x3Values() { return {1.0f, -2.0f, 0.5f, 0.0f, 3.25f, 1024.0f}; }

TEST(Npy, ReadsAHandWrittenFile) {
  const TempFile file("known.npy");
  const std::string& path = file.path();
  WriteBytes(path, Known2x3File());
  const NpyArray array = ReadNpy(path);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(array.data, Known2x3Values());
}

TEST(Npy, WritesTheBytesNumpyWrites) {
  const TempFile file("written.npy");
  const std::string& path = file.path();
  const std::vector<int64_t> shape{2, 3};
  WriteNpy(path, Known2x3Values(), shape);
  const std::string bytes = ReadBytes(path);
  EXPECT_EQ(bytes.size(), 128u + 24u);
  EXPECT_EQ(bytes, Known2x3File());
}

TEST(Npy, HeaderReprOfShapesAndAlignment) {
  const TempFile file("shapes.npy");
  const std::string& path = file.path();
  struct Case {
    std::vector<int64_t> shape;
    std::string repr;
    size_t header_size;
  };
  // numpy pads with 64 - (unpadded % 64) spaces, a full 64 when the unpadded header (prefix +
  // dict + '\n') is already aligned: the 21-D shape's is 10 + 117 + 1 = 128, so it becomes 192.
  std::vector<int64_t> aligned(21, 1);
  aligned[0] = 10;
  const Case cases[] = {
      {{5}, "(5,)", 64 * 2},
      {{}, "()", 64 * 2},
      {{3, 4}, "(3, 4)", 64 * 2},
      {{2, 0, 3}, "(2, 0, 3)", 64 * 2},
      {aligned, "(10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)", 64 * 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.repr);
    size_t count = 1;
    for (int64_t e : c.shape) count *= static_cast<size_t>(e);
    const std::vector<float> data(count, 2.0f);
    WriteNpy(path, data, c.shape);
    const std::string bytes = ReadBytes(path);
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': " + c.repr + ", }";
    ASSERT_EQ(bytes.size(), c.header_size + 4 * count);
    EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    EXPECT_EQ(static_cast<size_t>(static_cast<unsigned char>(bytes[8]) +
                                  256 * static_cast<unsigned char>(bytes[9])),
              c.header_size - 10);
    EXPECT_EQ(bytes.substr(10, dict.size()), dict);
    EXPECT_EQ(bytes.find_first_not_of(' ', 10 + dict.size()), c.header_size - 1);
    EXPECT_EQ(bytes[c.header_size - 1], '\n');
    EXPECT_EQ(NpyShapeString(c.shape), c.repr);
    const NpyArray array = ReadNpy(path);
    EXPECT_EQ(array.shape, c.shape);
    EXPECT_EQ(array.data, data);
  }
}

TEST(Npy, RoundTripKeepsEveryBit) {
  const TempFile file("round.npy");
  const std::string& path = file.path();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> data{
      0.0f,  -0.0f, 1.0f / 3.0f,   -1e-45f, std::numeric_limits<float>::max(),
      inf,   -inf,  std::nanf(""), 1e-38f,  -123456.789f,
      0.02f, 7.0f};
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{12}, std::vector<int64_t>{3, 4}, std::vector<int64_t>{2, 3, 2},
        std::vector<int64_t>{1, 1, 12, 1}}) {
    WriteNpy(path, data, shape);
    const NpyArray array = ReadNpy(path);
    EXPECT_EQ(array.shape, shape);
    ASSERT_EQ(array.data.size(), data.size());
    for (size_t i = 0; i < data.size(); ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(array.data[i]), std::bit_cast<uint32_t>(data[i])) << i;
    }
  }
  const std::vector<float> scalar{42.5f};
  WriteNpy(path, scalar, std::span<const int64_t>());
  const NpyArray zero_d = ReadNpy(path);
  EXPECT_TRUE(zero_d.shape.empty());
  EXPECT_EQ(zero_d.data, scalar);
}

TEST(Npy, HeadersTooLongForVersion1UseVersion2) {
  // A 30000-D shape has a ~90 kB header, past version 1.0's uint16 length; numpy then writes 2.0.
  const TempFile file("v2.npy");
  const std::string& path = file.path();
  const std::vector<int64_t> shape(30000, 1);
  const std::vector<float> data{-5.5f};
  WriteNpy(path, data, shape);
  const std::string bytes = ReadBytes(path);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x02\x00", 8));
  const size_t header_length = static_cast<unsigned char>(bytes[8]) |
                               static_cast<unsigned char>(bytes[9]) << 8 |
                               static_cast<unsigned char>(bytes[10]) << 16 |
                               static_cast<size_t>(static_cast<unsigned char>(bytes[11])) << 24;
  EXPECT_GT(header_length, 65535u);
  EXPECT_EQ((12 + header_length) % 64, 0u);
  EXPECT_EQ(bytes.size(), 12 + header_length + 4);
  const NpyArray array = ReadNpy(path);
  EXPECT_EQ(array.shape, shape);
  EXPECT_EQ(array.data, data);
}

TEST(Npy, ReaderAcceptsEveryValidSpelling) {
  const TempFile file("spellings.npy");
  const std::string& path = file.path();
  const std::string data = Float32Bytes({1.5f, -2.5f, 3.5f, -4.5f, 5.5f, -6.5f});
  const std::vector<float> values{1.5f, -2.5f, 3.5f, -4.5f, 5.5f, -6.5f};
  const std::string dicts[] = {
      "{'shape':(2,3),'fortran_order':False,'descr':'<f4'}",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}\n",
      "{ 'fortran_order' : False , 'descr' : '<f4' , 'shape' : ( 2 , 3 , ) , }   \n",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }\n",
  };
  for (const std::string& dict : dicts) {
    for (int major : {1, 2, 3}) {
      SCOPED_TRACE(testing::Message() << "version " << major << " " << dict);
      WriteBytes(path, NpyBytes(dict, data, major));
      const NpyArray array = ReadNpy(path);
      EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3}));
      EXPECT_EQ(array.data, values);
    }
  }
}

TEST(Npy, Float64IsConvertedToFloat32) {
  const TempFile file("f8.npy");
  const std::string& path = file.path();
  WriteBytes(path, NpyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }\n",
                            Float64Bytes({0.1, -1e300, 1.0 / 3.0, 65504.0})));
  const NpyArray array = ReadNpy(path);
  EXPECT_EQ(array.shape, (std::vector<int64_t>{4}));
  ASSERT_EQ(array.data.size(), 4u);
  EXPECT_EQ(array.data[0], 0.1f);  // nearest float, as numpy's astype(np.float32)
  EXPECT_EQ(array.data[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(array.data[2], 1.0f / 3.0f);
  EXPECT_EQ(array.data[3], 65504.0f);
}

TEST(Npy, MalformedFilesThrowErrorsNamingThePathAndTheProblem) {
  const TempFile file("bad.npy");
  const std::string& path = file.path();
  const std::string six = Float32Bytes({1, 2, 3, 4, 5, 6});
  auto f4 = [](const std::string& shape) {
    return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }\n";
  };
  auto with_descr = [](const std::string& descr) {
    return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (2, 3), }\n";
  };
  std::string version4 = NpyBytes(f4("(2, 3)"), six);
  version4[6] = 4;
  std::string version11 = NpyBytes(f4("(2, 3)"), six);
  version11[7] = 1;
  std::string long_header = NpyBytes(f4("(2, 3)"), six);
  long_header[8] = static_cast<char>(0xff);
  long_header[9] = static_cast<char>(0xff);
  struct Case {
    const char* name;
    std::string bytes;
    const char* problem;  // a part of the expected message
  };
  const Case cases[] = {
      {"empty file", "", "magic"},
      {"text file", "hello, world: not an array at all", "magic"},
      {"magic only", std::string("\x93NUMPY", 6), "magic"},
      {"version 4.0", version4, "version must be 1.0, 2.0 or 3.0, got 4.0"},
      {"version 1.1", version11, "got 1.1"},
      {"length cut short", std::string("\x93NUMPY\x01\x00\x10", 9), "header length"},
      {"header past the end", long_header, "header must fit in the file"},
      {"big-endian", NpyBytes(with_descr(">f4"), six), "big-endian"},
      {"big-endian f8", NpyBytes(with_descr(">f8"), six + six), "big-endian"},
      {"not-applicable order", NpyBytes(with_descr("|f4"), six), "got '|f4'"},
      {"int32", NpyBytes(with_descr("<i4"), six), "descr must be '<f4' (float32) or '<f8'"},
      {"float16", NpyBytes(with_descr("<f2"), six), "got '<f2'"},
      {"fortran order",
       NpyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", six),
       "fortran_order must be False"},
      {"fortran order not a bool",
       NpyBytes("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }\n", six), "True or False"},
      {"truncated data", NpyBytes(f4("(2, 3)"), six.substr(0, 23)), "got 23 bytes"},
      {"extra data", NpyBytes(f4("(2, 3)"), six + "x"), "got 25 bytes"},
      {"f8 data for f4 shape", NpyBytes(with_descr("<f8"), six), "got 24 bytes"},
      {"no shape", NpyBytes("{'descr': '<f4', 'fortran_order': False}\n", six),
       "have the key 'shape'"},
      {"no descr", NpyBytes("{'fortran_order': False, 'shape': (2, 3)}\n", six),
       "have the key 'descr'"},
      {"unknown key",
       NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}\n", six),
       "only the keys"},
      {"duplicate key",
       NpyBytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}\n", six),
       "'descr' twice"},
      {"unterminated string", NpyBytes("{'descr: '<f4}\n", six), "header"},
      {"not a dict", NpyBytes("[1, 2, 3]\n", six), "dict"},
      {"descr not a string",
       NpyBytes("{'descr': 5, 'fortran_order': False, 'shape': (2, 3)}\n", six), "quoted"},
      {"negative extent", NpyBytes(f4("(2, -3)"), six), "shape must be a tuple"},
      {"extent not a number", NpyBytes(f4("(2, x)"), six), "shape must be a tuple"},
      {"shape not a tuple", NpyBytes(f4("[2, 3]"), six), "header"},
      {"extent past int64", NpyBytes(f4("(99999999999999999999,)"), six), "fit in int64"},
      {"product past int64", NpyBytes(f4("(4294967296, 4294967296, 4)"), six), "data"},
      {"text after the dict", NpyBytes(f4("(2, 3)") + "x", six), "end after the dict"},
      {"binary header", NpyBytes(std::string("\xff\xfe\x00\x01", 4), six), "header"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    WriteBytes(path, c.bytes);
    try {
      ReadNpy(path);
      ADD_FAILURE() << "expected posenc::Error";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("[npy.read] " + path + ": ", 0), 0u) << message;
      EXPECT_NE(message.find(c.problem), std::string::npos) << message;
    }
  }
}

TEST(Npy, MissingFileOrDirectoryIsAnError) {
  const TempFile file("missing.npy");
  const std::string& path = file.path();
  try {
    ReadNpy(path);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[npy.read] path must name a readable file (No such file or directory), got '" +
                  path + "'");
  }
  EXPECT_THROW(ReadNpy(testing::TempDir()), Error);
}

TEST(Npy, BadWritesThrowWithoutCreatingTheFile) {
  const TempFile file("never.npy");
  const std::string& path = file.path();
  const std::vector<float> five(5, 1.0f);
  const std::vector<int64_t> two_by_three{2, 3};
  try {
    WriteNpy(path, five, two_by_three);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[npy.write] data.size() must equal product(shape (2, 3)) = 6, got 5");
  }
  const std::vector<int64_t> negative{-1, -5};
  EXPECT_THROW(WriteNpy(path, five, negative), Error);
  const std::vector<int64_t> huge{int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_THROW(WriteNpy(path, five, huge), Error);
  EXPECT_FALSE(std::filesystem::exists(path));

  const TempFile directory("no_such_directory");
  const std::string no_directory = directory.path() + "/x.npy";
  const std::vector<int64_t> five_shape{5};
  try {
    WriteNpy(no_directory, five, five_shape);
    FAIL() << "expected posenc::Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[npy.write] path must be written completely (create a temporary file beside it: "
              "No such file or directory); nothing was changed, got '" +
                  no_directory + "'");
  }
}

TEST(Npy, Float64ArraysLongerThanOneReadBlockConvert) {
  // The float64 reader converts a block of 8192 values at a time: 20000 values span three.
  const TempFile file("long_f8.npy");
  std::string data;
  for (int i = 0; i < 20000; ++i) data += Float64Bytes({0.25 * i - 1.0 / 3.0});
  WriteBytes(file.path(),
             NpyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (20000,), }\n", data));
  const NpyArray array = ReadNpy(file.path());
  ASSERT_EQ(array.data.size(), 20000u);
  for (int i = 0; i < 20000; ++i) {
    ASSERT_EQ(array.data[i], static_cast<float>(0.25 * i - 1.0 / 3.0)) << i;
  }
}

TEST(Npy, MaxBytesCapsTheFileAndDefaultsTo16GiB) {
  EXPECT_EQ(kNpyMaxBytes, uint64_t{16} << 30);
  const TempFile file("capped.npy");
  WriteBytes(file.path(), Known2x3File());  // 152 bytes
  EXPECT_EQ(ReadNpy(file.path(), 152).data, Known2x3Values());
  testing_support::ExpectError(
      [&] { ReadNpy(file.path(), 151); },
      "[npy.read] " + file.path() + ": file must be at most max_bytes = 151 bytes, got 152 bytes");
}

TEST(Npy, FuzzCorpusAndRegressionsReadOrFailCleanly) {
  // Every seed and regression of fuzz/npy_fuzzer.cc: an array of product(shape) floats or a
  // posenc::Error, nothing else.
  const std::filesystem::path fuzz = std::filesystem::path(POSENC_GOLDEN_DIR) / "../../fuzz";
  int inputs = 0, arrays = 0;
  for (const char* dir : {"npy_corpus", "npy_regressions"}) {
    for (const auto& entry : std::filesystem::directory_iterator(fuzz / dir)) {
      SCOPED_TRACE(entry.path().string());
      try {
        const NpyArray array = ReadNpy(entry.path().string());
        int64_t count = 1;
        for (const int64_t extent : array.shape) count *= extent;
        EXPECT_EQ(static_cast<size_t>(count), array.data.size());
        ++arrays;
      } catch (const Error&) {
      }
      ++inputs;
    }
  }
  EXPECT_GE(inputs, 14);
  EXPECT_GE(arrays, 7);  // the float seeds numpy wrote
}

}  // namespace
}  // namespace posenc
