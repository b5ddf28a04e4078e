// Capped reads and atomic writes: the two ways files enter and leave posenc.
#include "posenc/files.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "posenc/error.h"

namespace posenc {
namespace {

namespace fs = std::filesystem;

fs::path Scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("posenc-files-test-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string Contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string ErrorOf(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ReadFileCapped, ReadsUpToTheCapAndRefusesOneByteMore) {
  const fs::path dir = Scratch("read");
  std::ofstream(dir / "ten") << "0123456789";
  EXPECT_EQ(ReadFileCapped("test", (dir / "ten").string(), 10), "0123456789");
  EXPECT_EQ(ErrorOf([&] { ReadFileCapped("test", (dir / "ten").string(), 9); }),
            "[test] path must name a file of at most 9 bytes, got '" + (dir / "ten").string() +
                "' of 10 bytes");
  std::ofstream(dir / "empty");
  EXPECT_EQ(ReadFileCapped("test", (dir / "empty").string(), 0), "");
}

TEST(ReadFileCapped, RefusesWhatIsNotARegularFile) {
  const fs::path dir = Scratch("special");
  EXPECT_EQ(ErrorOf([&] { ReadFileCapped("test", dir.string(), 100); }),
            "[test] path must name a file, not a directory, got '" + dir.string() + "'");
  EXPECT_EQ(ErrorOf([] { ReadFileCapped("test", "/dev/zero", 100); }),
            "[test] path must name a regular file (not a device, pipe or socket), got "
            "'/dev/zero'");
  EXPECT_EQ(ErrorOf([&] { ReadFileCapped("test", (dir / "missing").string(), 100); }),
            "[test] path must name a readable file (No such file or directory), got '" +
                (dir / "missing").string() + "'");
}

TEST(WriteFileAtomically, ReplacesTheFileKeepingItsPermissions) {
  const fs::path dir = Scratch("write");
  const std::string path = (dir / "out.txt").string();
  std::ofstream(path) << "old";
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  WriteFileAtomically("test", path, "new contents");
  EXPECT_EQ(Contents(path), "new contents");
  struct stat info{};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0640u);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(WriteFileAtomically, WritesThroughASymbolicLink) {
  const fs::path dir = Scratch("link");
  std::ofstream(dir / "target.txt") << "old";
  fs::create_symlink("target.txt", dir / "link.txt");
  WriteFileAtomically("test", (dir / "link.txt").string(), "new");
  EXPECT_TRUE(fs::is_symlink(dir / "link.txt"));
  EXPECT_EQ(Contents(dir / "target.txt"), "new");
}

TEST(WriteFileAtomically, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  const fs::path dir = Scratch("fail");
  const std::string path = (dir / "keep.bin").string();
  std::ofstream(path) << "the old file";
  // In a child, under a 4 KiB file-size limit, with SIGXFSZ ignored as the posenc tool does.
  const pid_t pid = fork();
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    const std::string message =
        ErrorOf([&] { WriteFileAtomically("test", path, std::string(8192, 'x')); });
    _exit(message ==
                  "[test] path must be written completely (write: File too large); nothing "
                  "was changed, got '" +
                      path + "'"
              ? 0
              : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(Contents(path), "the old file");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

TEST(WriteFileAtomically, DevicesAreWrittenInPlaceAndTheirErrorsReported) {
  WriteFileAtomically("test", "/dev/null", "discarded");
  EXPECT_EQ(ErrorOf([] { WriteFileAtomically("test", "/dev/full", "x"); }),
            "[test] path must be written completely (write: No space left on device), got "
            "'/dev/full'");
  const fs::path dir = Scratch("dir");
  EXPECT_EQ(ErrorOf([&] { WriteFileAtomically("test", dir.string(), "x"); }),
            "[test] path must name a file, not a directory, got '" + dir.string() + "'");
}

}  // namespace
}  // namespace posenc
