// The study's text: the King James Bible from Debian's bible-kjv-text, read through its `bible`
// program, as characters. The last 10% (from the middle of the New Testament on) is held out
// for evaluation; the model never trains on it.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace posenc::study {

struct Corpus {
  std::string symbols;  // the alphabet, sorted; a character's id is its index here
  torch::Tensor train;  // int64 ids
  torch::Tensor held_out;
};

// Runs `bible` for Genesis 1:1 to Revelation 22:21 at a fixed line width. Throws
// std::runtime_error, saying which Debian packages provide it, when the program is missing or
// prints too little.
std::string ReadKingJamesBible();

Corpus MakeCorpus(const std::string& text, double held_out_fraction = 0.1);

}  // namespace posenc::study
