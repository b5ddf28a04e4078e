// Text from a request (a query value, a path, a body) as the server checks and quotes it. Every
// answer is JSON, whose strings must be UTF-8: a value is checked before it is read, and a
// value quoted in an error message is cut between characters, never inside one.
#pragma once

#include <string>
#include <string_view>

namespace posenc::serve {

// Whether text is valid UTF-8 (no overlong forms, surrogates or values past U+10FFFF).
bool IsUtf8(std::string_view text);

// A value as error messages show it: quoted, cut after 40 characters ("..." marks the cut),
// with control characters and bytes that are not valid UTF-8 shown as '?'.
std::string Quoted(std::string_view text);

}  // namespace posenc::serve
