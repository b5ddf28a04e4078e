// Text from a config or a path, made safe to print on a terminal: a model_type holding escape
// sequences must not retitle the window, clear the screen or hide the lines around it.
#pragma once

#include <string>
#include <string_view>

namespace posenc::cli {

// text with every control character (C0, DEL and the C1 range U+0080-U+009F) and every byte
// that is not part of valid UTF-8 written as \xNN; everything else, non-ASCII letters included,
// is kept as it is.
std::string Printable(std::string_view text);

// Printable line by line: the line breaks of a message stay line breaks, every other control
// character is escaped.
std::string PrintableLines(std::string_view text);

}  // namespace posenc::cli
