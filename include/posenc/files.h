// Files from the outside world: read with a size cap checked before any allocation, written to a
// temporary file beside the target and renamed over it only once every byte is on disk, so that
// a failed write (full disk, quota, file-size limit) never destroys the file that was there.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace posenc {

// The whole of a regular file of at most max_bytes bytes. The size is checked with stat before
// reading, and at most max_bytes + 1 bytes are ever read (a file that grows, or a special file
// that stat cannot size, is still caught). Throws posenc::Error naming `function` and the path:
// a missing file, a directory, a device or pipe, a file over the cap (with the cap in the
// message), or a read error.
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
