// Held-out loss at a given window length, in nats per character, by two protocols:
//
//   non-overlapping: the text is cut into windows of `length` characters and every character is
//     scored, so on average a character sees length / 2 characters of context;
//   sliding: windows of `length` advance by length / 4 and score only their last quarter (the
//     first window scores all of its characters), so every character scored after the first
//     window sees at least 3/4 * length characters of context.
//
// Both score the same first eval_chars characters of the held-out text.
#pragma once

#include <string>

#include "arms.h"
#include "model.h"

namespace posenc::study {

enum class Protocol { kNonOverlapping, kSliding };
std::string ProtocolName(Protocol protocol);  // "nonoverlapping" / "sliding"

// `reading`: how attention reads each window (long_context.h); all of it by default.
// A randomized-positions model reads each window at a random ordered subset of
// [0, random_position_range) (random_positions.h) drawn from the window's start and length, as
// it trained; the same windows get the same positions in every evaluation.
double HeldOutLoss(CharModel& model, const Rope& rope, const torch::Tensor& held_out,
                   int64_t length, Protocol protocol, int64_t eval_chars, int64_t batch_tokens,
                   const LongContext& reading = {}, int64_t random_position_range = 0);

}  // namespace posenc::study
