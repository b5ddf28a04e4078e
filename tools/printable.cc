#include "printable.h"

#include <algorithm>
#include <cstdint>

namespace posenc::cli {
namespace {

void AppendEscaped(unsigned char byte, std::string& out) {
  constexpr char kHex[] = "0123456789abcdef";
  out += {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
}

// The length of the valid UTF-8 sequence that starts text, or 0 (RFC 3629: no overlong forms,
// no surrogates, nothing past U+10FFFF).
size_t Utf8Length(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  uint32_t code = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, code = lead & 0x1f;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, code = lead & 0x0f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, code = lead & 0x07;
  } else {
    return 0;
  }
  if (text.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return 0;
    code = (code << 6) | (byte(i) & 0x3f);
  }
  const uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < smallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

}  // namespace

std::string Printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte >= 0x20 && byte < 0x7f) {
      out += text[i++];
      continue;
    }
    const size_t length = byte >= 0x80 ? Utf8Length(text.substr(i)) : 0;
    // C1 controls (U+0080-U+009F) are two bytes, 0xc2 then 0x80-0x9f: CSI among them.
    const bool c1 = length == 2 && byte == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0;
    if (length == 0 || c1) {
      AppendEscaped(byte, out);
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

std::string PrintableLines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    out += Printable(text.substr(begin, end - begin));
    if (end < text.size()) out += '\n';
    begin = end + 1;
  }
  return out;
}

}  // namespace posenc::cli
