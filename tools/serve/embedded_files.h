// Files built into the posenc binary for `posenc serve` (cmake/embed_files.cmake): the explorer
// page (HTML, CSS and JavaScript in one file) and the model configs its Stretching panel offers,
// so that the server needs no installed assets of its own and reads no path a request names.
#pragma once

#include <span>
#include <string_view>

namespace posenc::serve {

struct EmbeddedFile {
  std::string_view name;  // "explorer.html", "configs/llama3.1-8b.json", ...
  std::string_view bytes;
};

std::span<const EmbeddedFile> EmbeddedFiles();

}  // namespace posenc::serve
