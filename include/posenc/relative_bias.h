// T5-style relative position buckets (Raffel et al. 2020, "Exploring the Limits of Transfer
// Learning", arXiv:1910.10683; Hugging Face's T5Attention._relative_position_bucket).
//
// No position is added to the tokens. Each head h adds a learned scalar to its attention scores,
// looked up by the bucket of the distance between key and query:
//
//   bias_h(i, j) = table[bucket(key_pos[j] - query_pos[i])][h]
//
// Buckets: relative distances below max_exact = num_buckets' / 2 each get their own bucket; larger
// ones share logarithmically wider buckets up to max_distance, and everything farther falls into
// the last bucket. Bidirectional (encoder) splits the buckets in half, num_buckets' =
// num_buckets / 2, the upper half for keys after the query; causal (decoder) uses all
// num_buckets for keys at or before the query and bucket 0 for keys after it.
#pragma once

#include <cstdint>
#include <span>

namespace posenc {

struct RelativeBuckets {
  int64_t num_buckets = 32;    // T5's relative_attention_num_buckets
  int64_t max_distance = 128;  // T5's relative_attention_max_distance
  bool bidirectional = true;   // T5's encoder: true; decoder (causal): false

  // Throws posenc::Error naming the field, value and rule: max_exact (num_buckets / 2, halved
  // again when bidirectional) must be >= 1 and max_distance must exceed it.
  void Validate() const;
};

// The bucket of relative_position = key_pos - query_pos (Hugging Face's memory_position -
// context_position), in [0, num_buckets). Bit-exact with Hugging Face's float32 computation.
// Validates buckets; |relative_position| must be <= 2^32 (posenc/positions.h).
int64_t RelativePositionBucket(const RelativeBuckets& buckets, int64_t relative_position);

// The learned bias of T5's attention layers (the first layer of each stack holds it; the other
// layers reuse its output).
struct RelativeBias {
  RelativeBuckets buckets;
  int64_t num_heads = 0;         // heads of the layer, > 0
  std::span<const float> table;  // [num_buckets, num_heads], row-major: T5's
                                 // relative_attention_bias.weight (nn.Embedding(buckets, heads))
  // Throws posenc::Error: buckets valid, num_heads > 0, table.size() == num_buckets * num_heads,
  // every entry finite.
  void Validate() const;
};

}  // namespace posenc
