// libFuzzer target for the Hugging Face config loader: any byte string must either load or be
// rejected with posenc::Error. Anything else (another exception, a crash, a leak, undefined
// behaviour under ASan + UBSan) is a bug; its input goes into fuzz/regressions once fixed.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "posenc/error.h"
#include "posenc/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const posenc::PositionScheme scheme = posenc::ParseHfConfig(text);
    const auto* rope = std::get_if<posenc::RopeScheme>(&scheme);
    if (rope == nullptr) return 0;
    // A loaded scheme must also compute: both precisions, construction time and long inputs.
    for (const posenc::RopeLayerScheme& layer : rope->layers) {
      for (const auto precision : {posenc::RopePrecision::kReference, posenc::RopePrecision::kExact}) {
        for (const std::optional<int64_t> seq_len :
             {std::optional<int64_t>{}, std::optional<int64_t>{1},
              std::optional<int64_t>{int64_t{1} << 40}}) {
          posenc::MakeRope(*rope, layer, {.precision = precision, .seq_len = seq_len});
        }
      }
    }
  } catch (const posenc::Error&) {
    // The documented outcome for bad input.
  }
  return 0;
}
