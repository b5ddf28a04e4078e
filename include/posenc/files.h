// Files from the outside world: read with a size cap checked before any allocation, written to a
// temporary file beside the target and renamed over it only once every byte is on disk, so that
// a failed write (full disk, quota, file-size limit) never destroys the file that was there.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace posenc {

// An open regular file whose size is known before anything is read, read at offsets: for
// readers that check a header before they allocate for what follows it (ReadNpy). Throws
// posenc::Error naming `function` and the path for a missing or unreadable file, a directory, or
// a device, pipe or socket (opened without blocking, so a FIFO cannot hang the caller).
class InputFile {
 public:
  InputFile(std::string_view function, const std::string& path);
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  // The size stat reported when the file was opened.
  uint64_t size() const { return size_; }
  // Reads up to n bytes from offset on, retrying short reads; returns how many were read (fewer
  // only at the end of the file). Throws posenc::Error on a read error.
  size_t ReadAt(uint64_t offset, char* out, size_t n) const;

 private:
  std::string function_, path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole of a regular file of at most max_bytes bytes. The size is checked with stat before
// anything is allocated or read, and one byte more than that size is asked for, so a file that
// grew in between is an error, not a cut read. Throws posenc::Error naming `function` and the
// path: InputFile's errors, a file over the cap (with the cap in the message), or a read error.
std::string ReadFileCapped(std::string_view function, const std::string& path, uint64_t max_bytes);

// Writes bytes to path atomically: into "<path>.tmp-XXXXXX" in the same directory, flushed,
// fsync'ed and closed with every error checked, then renamed over path. On any failure the
// temporary file is removed, path is left as it was, and posenc::Error names `function`, the path
// and the system's reason (for example "No space left on device" or "File too large").
// An existing file keeps its permissions; a symbolic link is written through (the link stays,
// its target is replaced). A directory is refused. A device such as /dev/stdout or /dev/full
// cannot be renamed over, so it is written in place; its errors are still reported.
void WriteFileAtomically(std::string_view function, const std::string& path,
                         std::string_view bytes);

}  // namespace posenc
