#include "serve/text.h"

#include <cstddef>

namespace posenc::serve {
namespace {

// The length of the valid UTF-8 sequence that starts at text[i], or 0 when none does
// (the table of well-formed byte sequences in the Unicode standard, section 3.9).
size_t SequenceLength(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) lo = 0xa0;  // overlong
    if (lead == 0xed) hi = 0x9f;  // surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) lo = 0x90;  // overlong
    if (lead == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size() || byte(1) < lo || byte(1) > hi) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(k) < 0x80 || byte(k) > 0xbf) return 0;
  }
  return length;
}

}  // namespace

bool IsUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = SequenceLength(text, i);
    if (length == 0) return false;
    i += length;
  }
  return true;
}

std::string Quoted(std::string_view text) {
  constexpr size_t kShown = 40;  // characters: a long value is cut, never echoed whole
  std::string shown = "'";
  size_t i = 0;
  for (size_t characters = 0; i < text.size() && characters < kShown; ++characters) {
    const size_t length = SequenceLength(text, i);
    const unsigned char c = static_cast<unsigned char>(text[i]);
    // C1 controls (U+0080-U+009F) are two bytes, 0xc2 0x80-0x9f.
    const bool c1 = length == 2 && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0;
    const bool control = c < 0x20 || c == 0x7f || c1;
    if (length == 0 || control) {
      shown += '?';
      i += length == 0 ? 1 : length;
    } else {
      shown.append(text.substr(i, length));
      i += length;
    }
  }
  return shown + (i < text.size() ? "...'" : "'");
}

}  // namespace posenc::serve
