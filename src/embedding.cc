#include "posenc/embedding.h"

#include <string>

#include "posenc/error.h"
#include "posenc/positions.h"
#include "row_kernels.h"

namespace posenc {
namespace {

constexpr const char* kFunction = "embed_tokens";

void CheckTokenTable(const TokenTable& tokens) {
  Require(tokens.vocab_size > 0, kFunction, "tokens.vocab_size", "be > 0", tokens.vocab_size);
  Require(tokens.d_model > 0, kFunction, "tokens.d_model", "be > 0", tokens.d_model);
  const auto width = static_cast<size_t>(tokens.d_model);
  Require(tokens.data.size() % width == 0 &&
              tokens.data.size() / width == static_cast<size_t>(tokens.vocab_size),
          kFunction, "tokens.data.size()",
          "equal vocab_size (" + std::to_string(tokens.vocab_size) + ") * d_model (" +
              std::to_string(tokens.d_model) + ")",
          tokens.data.size());
}

void CheckIds(const TokenTable& tokens, std::span<const int64_t> ids) {
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] >= 0 && ids[t] < tokens.vocab_size) continue;
    const std::string name = "ids[" + std::to_string(t) + "]";
    Require(ids[t] >= 0, kFunction, name, "be >= 0", ids[t]);
    Require(ids[t] < tokens.vocab_size, kFunction, name,
            "be < vocab_size (" + std::to_string(tokens.vocab_size) + ")", ids[t]);
  }
}

// The scheme must produce vectors as wide as the token rows, and every position must have one.
void CheckScheme(const AbsolutePositions& scheme, int64_t d_model,
                 std::span<const int64_t> positions) {
  const std::string rule = "equal tokens.d_model (" + std::to_string(d_model) + ")";
  if (const auto* spec = std::get_if<Sinusoidal>(&scheme)) {
    spec->Validate();
    Require(spec->dim == d_model, kFunction, "sinusoidal dim", rule, spec->dim);
  } else {
    const LearnedPositions& table = std::get<1>(scheme).get();
    Require(table.d_model() == d_model, kFunction, "learned d_model", rule, table.d_model());
    table.CheckPositions(kFunction, positions);
  }
}

}  // namespace

void EmbedTokens(const TokenTable& tokens, std::span<const int64_t> ids,
                 std::span<const int64_t> positions, const AbsolutePositions& scheme,
                 std::span<float> out) {
  CheckTokenTable(tokens);
  CheckIds(tokens, ids);
  ValidatePositions(kFunction, positions, static_cast<int64_t>(ids.size()));
  CheckScheme(scheme, tokens.d_model, positions);
  const auto width = static_cast<size_t>(tokens.d_model);
  Require(
      out.size() % width == 0 && out.size() / width == ids.size(), kFunction, "out.size()",
      "equal tokens (" + std::to_string(ids.size()) + ") * d_model (" + std::to_string(width) + ")",
      out.size());

  // Everything is valid. The sum is taken in float, which is what GPT-2 (wte(ids) +
  // wpe(positions)) and the Transformer's x + pe[:T] compute in float32: a learned table is
  // gathered and added in one pass; sinusoidal vectors are written first, then the token rows
  // are added to them.
  if (ids.empty()) return;
  const auto count = static_cast<int64_t>(ids.size());
  if (const auto* spec = std::get_if<Sinusoidal>(&scheme)) {
    FillSinusoidal(*spec, positions, out);
    internal::GatherAdd(tokens.data.data(), ids.data(), nullptr, nullptr, count, tokens.d_model,
                        out.data());
  } else {
    internal::GatherAdd(tokens.data.data(), ids.data(), std::get<1>(scheme).get().table().data(),
                        positions.data(), count, tokens.d_model, out.data());
  }
}

}  // namespace posenc
