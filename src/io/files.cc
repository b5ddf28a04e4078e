#include "posenc/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "posenc/error.h"

namespace posenc {
namespace {

std::string Quoted(const std::string& path) { return "'" + path + "'"; }

std::string Reason(int error) { return std::strerror(error); }

// Closes a descriptor on every path out of a scope.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now and reports close's own error (NFS and quotas report write errors there).
  int Close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

// Writes every byte, retrying short writes and EINTR; returns 0 or the errno of the failure.
int WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (written == 0) return EIO;
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return 0;
}

}  // namespace

InputFile::InputFile(std::string_view function, const std::string& path)
    : function_(function), path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below as not regular.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) {
    const int error = errno;
    throw Error(ErrorMessage(function, "path", "name a readable file (" + Reason(error) + ")",
                             Quoted(path)));
  }
  struct stat info{};
  const bool sized = ::fstat(fd_, &info) == 0;
  const char* wrong = !sized                  ? "be a file whose size can be read"
                      : S_ISDIR(info.st_mode) ? "name a file, not a directory"
                      : !S_ISREG(info.st_mode)
                          ? "name a regular file (not a device, pipe or socket)"
                          : nullptr;
  if (wrong != nullptr) {
    ::close(fd_);
    throw Error(ErrorMessage(function, "path", wrong, Quoted(path)));
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

size_t InputFile::ReadAt(uint64_t offset, char* out, size_t n) const {
  size_t filled = 0;
  while (filled < n) {
    const ssize_t got = ::pread(fd_, out + filled, n - filled, static_cast<off_t>(offset + filled));
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      const int error = errno;
      throw Error(ErrorMessage(function_, "path", "be readable to the end (" + Reason(error) + ")",
                               Quoted(path_)));
    }
    if (got == 0) break;
    filled += static_cast<size_t>(got);
  }
  return filled;
}

std::string ReadFileCapped(std::string_view function, const std::string& path, uint64_t max_bytes) {
  const InputFile file(function, path);
  const std::string cap = "name a file of at most " + std::to_string(max_bytes) + " bytes";
  Require(file.size() <= max_bytes, function, "path", cap,
          Quoted(path) + " of " + std::to_string(file.size()) + " bytes");
  // One byte more than stat said, so that a file that grew since is caught, not cut.
  std::string bytes(static_cast<size_t>(file.size()) + 1, '\0');
  bytes.resize(file.ReadAt(0, bytes.data(), bytes.size()));
  Require(bytes.size() <= file.size(), function, "path", "keep its size while being read",
          Quoted(path) + " (it grew past " + std::to_string(file.size()) + " bytes)");
  return bytes;
}

void WriteFileAtomically(std::string_view function, const std::string& path,
                         std::string_view bytes) {
  Require(!path.empty(), function, "path", "be a file name", "''");
  // `what` failed with `error`; `kept` says whether the file as it was is still there.
  auto fail = [&](int error, const std::string& what, bool kept = true) {
    throw Error(ErrorMessage(function, "path",
                             "be written completely (" + what + ": " + Reason(error) + ")" +
                                 (kept ? "; nothing was changed" : ""),
                             Quoted(path)));
  };
  struct stat info{};
  const bool exists = ::stat(path.c_str(), &info) == 0;
  if (exists && !S_ISREG(info.st_mode)) {
    // A device such as /dev/stdout or /dev/full: there is nothing to rename over.
    Require(!S_ISDIR(info.st_mode), function, "path", "name a file, not a directory", Quoted(path));
    FileDescriptor fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (fd.get() < 0) fail(errno, "open");
    if (const int error = WriteAll(fd.get(), bytes)) fail(error, "write", false);
    if (fd.Close() != 0) fail(errno, "close", false);
    return;
  }
  // Through a symbolic link, as a plain open writes: the link stays and its target is replaced.
  std::string target = path;
  std::error_code no_link;
  if (std::filesystem::is_symlink(path, no_link)) {
    const auto resolved = std::filesystem::weakly_canonical(path, no_link);
    if (!no_link) target = resolved.string();
  }
  std::string temporary = target + ".tmp-XXXXXX";
  FileDescriptor fd(::mkostemp(temporary.data(), O_CLOEXEC));
  if (fd.get() < 0) fail(errno, "create a temporary file beside it");
  // The permissions the file had, or those a plain open would give a new one (mkstemp: 0600).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd.get(), exists ? info.st_mode & 07777 : 0666 & ~mask);
  auto fail_and_remove = [&](int error, const std::string& what) {
    ::unlink(temporary.c_str());
    fail(error, what);
  };
  if (const int error = WriteAll(fd.get(), bytes)) fail_and_remove(error, "write");
  if (::fsync(fd.get()) != 0 && errno != EINVAL && errno != EROFS) {
    fail_and_remove(errno, "flush");
  }
  if (fd.Close() != 0) fail_and_remove(errno, "close");
  if (::rename(temporary.c_str(), target.c_str()) != 0) fail_and_remove(errno, "rename");
}

}  // namespace posenc
