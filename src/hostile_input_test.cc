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
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "posenc/error.h"
#include "posenc/hf_config.h"
#include "posenc/npy.h"
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
  struct stat before {};
  ::stat(path.c_str(), &before);
  return [path, before] {
    struct stat after {};
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
       "[hf_config] path must name a file of at most 67108864 bytes, got '" +
           sparse_config_path + "' of 2147483648 bytes",
       FileUnchanged(sparse_config_path)},
      {"/dev/zero as a config", [] { LoadHfConfig("/dev/zero"); },
       "[hf_config] path must name a regular file (not a device, pipe or socket), got "
       "'/dev/zero'",
       [] { return true; }},
      {"a directory as a config", [&] { LoadHfConfig(dir); },
       "[hf_config] path must name a file, not a directory, got '" + dir + "'",
       [&] { return std::filesystem::is_empty(dir); }},
      {"/dev/zero as an .npy", [] { ReadNpy("/dev/zero"); },
       "[npy.read] path must name an existing regular file, got '/dev/zero'", [] { return true; }},
      {"a directory as an .npy", [&] { ReadNpy(dir); },
       "[npy.read] path must name an existing regular file, got '" + dir + "'",
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

}  // namespace
}  // namespace posenc
