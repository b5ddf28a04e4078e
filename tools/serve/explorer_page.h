// The explorer page (tools/serve/explorer.html: HTML, CSS and JavaScript in one file), embedded
// in the binary at build time so that `posenc serve` needs no installed assets of its own.
#pragma once

#include <string_view>

namespace posenc::serve {

std::string_view ExplorerPage();

}  // namespace posenc::serve
