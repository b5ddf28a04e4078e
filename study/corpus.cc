#include "corpus.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <stdexcept>

namespace posenc::study {

std::string ReadKingJamesBible() {
  // -l80: wrap at 80 columns whatever the terminal says, so the text (and so the study) does
  // not depend on $COLUMNS.
  const char* command = "bible -l80 Gen1:1-Rev22:21 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command, "r"), pclose);
  std::string text;
  if (pipe) {
    std::array<char, 1 << 16> buffer;
    size_t n;
    while ((n = fread(buffer.data(), 1, buffer.size(), pipe.get())) > 0)
      text.append(buffer.data(), n);
  }
  if (text.size() < 1'000'000) {
    throw std::runtime_error(
        "[study] the King James Bible must be readable with `bible` (Debian packages bible-kjv "
        "and bible-kjv-text; `make setup` installs them), got " +
        std::to_string(text.size()) + " bytes");
  }
  return text;
}

Corpus MakeCorpus(const std::string& text, double held_out_fraction) {
  Corpus corpus;
  std::array<bool, 256> seen{};
  for (unsigned char c : text) seen[c] = true;
  std::array<int64_t, 256> id{};
  for (int c = 0; c < 256; ++c) {
    if (!seen[c]) continue;
    id[c] = static_cast<int64_t>(corpus.symbols.size());
    corpus.symbols.push_back(static_cast<char>(c));
  }
  torch::Tensor ids = torch::empty({static_cast<int64_t>(text.size())}, torch::kInt64);
  int64_t* out = ids.data_ptr<int64_t>();
  for (unsigned char c : text) *out++ = id[c];
  const auto split =
      static_cast<int64_t>(static_cast<double>(text.size()) * (1.0 - held_out_fraction));
  corpus.train = ids.slice(0, 0, split);
  corpus.held_out = ids.slice(0, split);
  return corpus;
}

}  // namespace posenc::study
