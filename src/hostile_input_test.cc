// Hostile input, one row per case: what an attacker or a careless user hands the library (huge
// or endless files, corrupt headers, NaN, extreme positions and factors), the exact error it must
// get, and a check that the inputs are as they were. Files are made sparse with ftruncate, so
// that a "2 GiB" file costs nothing on disk and a reader that sizes it by reading would show up
// as a multi-gigabyte allocation.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "posenc/alibi.h"
#include "posenc/attention.h"
#include "posenc/error.h"
#include "posenc/hf_config.h"
#include "posenc/npy.h"
#include "posenc/positions.h"
#include "posenc/rope.h"
#include "posenc/sinusoidal.h"
#include "test_support.h"

namespace posenc {
namespace {

using testing_support::TempFile;

struct HostileCase {
  std::string name;
  std::function<void()> call;       // must throw posenc::Error
  std::string message;              // exactly its message
  std::function<bool()> unchanged;  // the inputs are as they were before the call
};

void RunCases(const std::vector<HostileCase>& cases) {
  for (const HostileCase& c : cases) {
    SCOPED_TRACE(c.name);
    try {
      c.call();
      ADD_FAILURE() << "expected posenc::Error: " << c.message;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), c.message);
    }
    EXPECT_TRUE(c.unchanged()) << "inputs changed";
  }
}

// A file of `bytes` followed by zeros up to `size` bytes; past `bytes` it is a hole (no disk).
void MakeSparseFile(const std::string& path, const std::string& bytes, uint64_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0) << path;
}

// Size and modification time: what a reader must leave alone.
std::function<bool()> FileUnchanged(const std::string& path) {
  struct stat before{};
  ::stat(path.c_str(), &before);
  return [path, before] {
    struct stat after{};
    return ::stat(path.c_str(), &after) == 0 && after.st_size == before.st_size &&
           after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
           after.st_mtim.tv_nsec == before.st_mtim.tv_nsec;
  };
}

std::string LittleEndian(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
  return out;
}

// The prefix and header of a version `major`.0 .npy file with the given dict.
std::string NpyHeader(const std::string& dict, int major = 1) {
  std::string bytes("\x93NUMPY", 6);
  bytes += static_cast<char>(major);
  bytes += '\0';
  return bytes + LittleEndian(dict.size(), major == 1 ? 2 : 4) + dict;
}

std::string F4Dict(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }\n";
}

TEST(HostileInput, FilesAreSizedBeforeTheyAreRead) {
  const TempFile sparse_config("config.json"), sparse_npy("huge.npy"), lying_npy("lying.npy"),
      cut_npy("cut.npy"), long_header_npy("long_header.npy"), small_npy("small.npy"),
      directory("directory");
  std::filesystem::create_directory(directory.path());
  const std::string dir = directory.path();
  MakeSparseFile(sparse_config.path(), "{\"model_type\": \"llama\"", uint64_t{2} << 30);
  MakeSparseFile(sparse_npy.path(), NpyHeader(F4Dict("(4,)")), uint64_t{17} << 30);
  // Claims 2^29 floats (2 GiB) and holds 2 GiB + 4 bytes: refused before the 2 GiB is allocated.
  const std::string lying_header = NpyHeader(F4Dict("(536870912,)"));
  MakeSparseFile(lying_npy.path(), lying_header, lying_header.size() + (uint64_t{2} << 30) + 4);
  const std::string cut = NpyHeader(F4Dict("(2, 3)"));
  MakeSparseFile(cut_npy.path(), cut.substr(0, 50), 50);
  MakeSparseFile(long_header_npy.path(),
                 std::string("\x93NUMPY\x02\x00", 8) + LittleEndian((1 << 20) + 1, 4),
                 uint64_t{4} << 20);
  const std::string small = NpyHeader(F4Dict("(4,)")) + std::string(16, '\0');
  MakeSparseFile(small_npy.path(), small, small.size());

  const std::string sparse_config_path = sparse_config.path();
  const std::vector<HostileCase> cases = {
      {"2 GiB sparse config", [&] { LoadHfConfig(sparse_config_path); },
       "[hf_config] path must name a file of at most 67108864 bytes, got '" + sparse_config_path +
           "' of 2147483648 bytes",
       FileUnchanged(sparse_config_path)},
      {"/dev/zero as a config", [] { LoadHfConfig("/dev/zero"); },
       "[hf_config] path must name a regular file (not a device, pipe or socket), got "
       "'/dev/zero'",
       [] { return true; }},
      {"a directory as a config", [&] { LoadHfConfig(dir); },
       "[hf_config] path must name a file, not a directory, got '" + dir + "'",
       [&] { return std::filesystem::is_empty(dir); }},
      {"/dev/zero as an .npy", [] { ReadNpy("/dev/zero"); },
       "[npy.read] path must name a regular file (not a device, pipe or socket), got '/dev/zero'",
       [] { return true; }},
      {"a directory as an .npy", [&] { ReadNpy(dir); },
       "[npy.read] path must name a file, not a directory, got '" + dir + "'",
       [&] { return std::filesystem::is_empty(dir); }},
      {"17 GiB sparse .npy", [&] { ReadNpy(sparse_npy.path()); },
       "[npy.read] " + sparse_npy.path() +
           ": file must be at most max_bytes = 17179869184 bytes, got 18253611008 bytes",
       FileUnchanged(sparse_npy.path())},
      {".npy whose shape claims 2 GiB", [&] { ReadNpy(lying_npy.path()); },
       "[npy.read] " + lying_npy.path() +
           ": data must be product(shape) * 4 bytes for shape (536870912,), got 2147483652 bytes",
       FileUnchanged(lying_npy.path())},
      {"truncated .npy header", [&] { ReadNpy(cut_npy.path()); },
       "[npy.read] " + cut_npy.path() +
           ": header must fit in the file (40 bytes after the length field), got " +
           std::to_string(cut.size() - 10) + " bytes",
       FileUnchanged(cut_npy.path())},
      {".npy header over 1 MiB", [&] { ReadNpy(long_header_npy.path()); },
       "[npy.read] " + long_header_npy.path() +
           ": header must be at most 1048576 bytes, got 1048577 bytes",
       FileUnchanged(long_header_npy.path())},
      {".npy over a caller's cap", [&] { ReadNpy(small_npy.path(), 64); },
       "[npy.read] " + small_npy.path() + ": file must be at most max_bytes = 64 bytes, got " +
           std::to_string(small.size()) + " bytes",
       FileUnchanged(small_npy.path())},
  };
  RunCases(cases);
  std::filesystem::remove(dir);
}

// Buffers a row may read or write, with a copy to compare against after the call.
struct Buffer {
  std::vector<float> data, before;
  explicit Buffer(size_t n) : data(n) {
    for (size_t i = 0; i < n; ++i) data[i] = std::sin(0.5f * static_cast<float>(i));
    before = data;
  }
  bool Unchanged() const {
    return std::memcmp(data.data(), before.data(), data.size() * sizeof(float)) == 0;
  }
};

TEST(HostileInput, ArraysPositionsAndFactorsAreRefusedBeforeMemoryIsTouched) {
  const std::string position_rule =
      " must be <= 2^32 = 4294967296 (kMaxPosition, where float32 RoPE stops being accurate), "
      "got ";
  const std::string float32_rule =
      "a positive normal float32, in [1.1754943508222875e-38, 3.4028234663852886e+38], got ";
  const Rope rope = Rope::Default(8);
  Buffer x(2 * 8), q(2 * 2 * 8), k(2 * 8), v(2 * 4), out(2 * 2 * 4);
  const auto x_view = Heads<float>::Dense(x.data.data(), 2, 1, 8);
  const auto q_view = Heads<const float>::Dense(q.data.data(), 2, 2, 8);
  const auto k_view = Heads<const float>::Dense(k.data.data(), 2, 1, 8);
  const auto v_view = Heads<const float>::Dense(v.data.data(), 2, 1, 4);
  const auto out_view = Heads<float>::Dense(out.data.data(), 2, 2, 4);
  const auto all_unchanged = [&] {
    return x.Unchanged() && q.Unchanged() && k.Unchanged() && v.Unchanged() && out.Unchanged();
  };
  const std::vector<int64_t> ok{0, 1};
  const std::vector<int64_t> past_limit{0, kMaxPosition + 1}, huge{int64_t{1} << 60, 0},
      negative{0, -1};
  AttentionOptions huge_scale;
  huge_scale.scale = 1e300;
  AttentionOptions huge_bias;
  huge_bias.alibi = Alibi{.num_heads = 2, .max_bias = 1e308};
  Rope huge_factor = rope;
  huge_factor.attention_factor = 1e308;

  const std::vector<HostileCase> cases = {
      {"RoPE float32 at 2^32 + 1", [&] { ApplyRope(rope, past_limit, x_view); },
       "[rope] positions[1]" + position_rule + "4294967297", all_unchanged},
      {"RoPE float32 at 2^60", [&] { ApplyRope(rope, huge, x_view); },
       "[rope] positions[0]" + position_rule + "1152921504606846976", all_unchanged},
      {"attention key at 2^60", [&] { Attention({}, q_view, k_view, v_view, ok, huge, out_view); },
       "[attention] key_pos[0]" + position_rule + "1152921504606846976", all_unchanged},
      {"negative query position",
       [&] { Attention({}, q_view, k_view, v_view, negative, ok, out_view); },
       "[attention] query_pos[1] must be >= 0, got -1", all_unchanged},
      {"ALiBi distance 2^62 - (-2^62)",
       [] { AlibiBias(0.5, int64_t{1} << 62, -(int64_t{1} << 62)); },
       "[alibi_bias] query_pos" + position_rule + "4611686018427387904", all_unchanged},
      {"ALiBi negative key position", [] { AlibiBias(0.5, 0, -1); },
       "[alibi_bias] key_pos must be >= 0, got -1", all_unchanged},
      {"sinusoidal at 2^62", [] { SinusoidalValue({.dim = 8}, int64_t{1} << 62, 0); },
       "[sinusoidal] pos" + position_rule + "4611686018427387904", all_unchanged},
      {"attention scale 1e300 (inf in float32)",
       [&] { Attention(huge_scale, q_view, k_view, v_view, ok, ok, out_view); },
       "[attention] scale must be 0 (meaning 1 / sqrt(head_dim)) or " + float32_rule +
           "1.0000000000000001e+300",
       all_unchanged},
      {"RoPE attention_factor 1e308", [&] { ApplyRope(huge_factor, ok, x_view); },
       "[rope] attention_factor must be " + float32_rule + "1e+308", all_unchanged},
      {"ALiBi max_bias 1e308 (slopes 0)",
       [&] { Attention(huge_bias, q_view, k_view, v_view, ok, ok, out_view); },
       "[alibi] max_bias must be > 0 and <= 126 (the smallest slope, 2^-max_bias, must be a "
       "normal float32), got 1e+308",
       all_unchanged},
  };
  RunCases(cases);
}

TEST(HostileInput, NaNReachesTheOutputAsInTheMath) {
  // One query, two keys, one of them NaN: the row is NaN (softmax of a NaN score), not the
  // other key's value (the NaN key masked) and not zeros. attention_kernels_test holds every
  // case to the reference; this is the row of the table.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> q{1.0f, 0.0f}, k{1.0f, 0.0f, nan, 0.0f}, v{3.0f, 4.0f}, out(1);
  const std::vector<int64_t> query_pos{1}, key_pos{0, 1};
  Attention({}, Heads<const float>::Dense(q.data(), 1, 1, 2),
            Heads<const float>::Dense(k.data(), 2, 1, 2),
            Heads<const float>::Dense(v.data(), 2, 1, 1), query_pos, key_pos,
            Heads<float>::Dense(out.data(), 1, 1, 1));
  EXPECT_TRUE(std::isnan(out[0])) << out[0];
  q[0] = nan;
  k[2] = 0.0f;
  Attention({}, Heads<const float>::Dense(q.data(), 1, 1, 2),
            Heads<const float>::Dense(k.data(), 2, 1, 2),
            Heads<const float>::Dense(v.data(), 2, 1, 1), query_pos, key_pos,
            Heads<float>::Dense(out.data(), 1, 1, 1));
  EXPECT_TRUE(std::isnan(out[0])) << out[0];
}

}  // namespace
}  // namespace posenc
