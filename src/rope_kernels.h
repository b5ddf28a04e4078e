// The vectorised RoPE kernel behind ApplyRope: an internal interface, free of Highway types, that
// rope.cc calls once per public call after validating everything.
#pragma once

#include <cstdint>

#include "posenc/rope.h"
#include "posenc/storage.h"

namespace posenc::internal {

// The most position streams a kernel call takes (M-RoPE's time, height, width and one spare,
// as llama.cpp's four).
inline constexpr int kMaxRopeStreams = 4;

// One tensor: row (t, h) of `in` is rotated into row (t, h) of `out` (the same memory when in
// place). Strides are in elements of the storage type.
struct RopeTensor {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t num_heads = 0;
  int64_t in_token_stride = 0, in_head_stride = 0;
  int64_t out_token_stride = 0, out_head_stride = 0;
};

// Everything the kernel needs, already validated: the angles of a token are formed once and
// shared by every head of every tensor.
struct RopeKernelArgs {
  StorageType storage = StorageType::kFloat32;
  RopeLayout layout = RopeLayout::kHalfSplit;
  int64_t tokens = 0;
  int64_t head_dim = 0;
  int64_t rotary_offset = 0;  // features [rotary_offset, rotary_offset + rotary_dim) rotate
  int64_t rotary_dim = 0;
  const double* inv_freq = nullptr;  // rotary_dim / 2 entries
  double cos_scale = 1.0;            // attention_factor
  double sin_scale = 1.0;            // attention_factor, negated for the inverse rotation
  // Position of token t in stream s: positions[s * position_stream_stride + t *
  // position_token_stride]. Pair i turns by stream pair_stream[i] (all stream 0 when null: 1-D
  // RoPE).
  const int64_t* positions = nullptr;
  int64_t position_token_stride = 1;
  int64_t position_stream_stride = 0;
  int num_streams = 1;
  const int64_t* pair_stream = nullptr;  // rotary_dim / 2 entries in [0, num_streams), or null
  RopeTensor tensors[2];
  int num_tensors = 0;
};

// Runs on the best SIMD target of this CPU (one dispatch), with OpenMP threads over tokens when
// the call is large enough to pay for them.
void RopeKernel(const RopeKernelArgs& args);

// The Highway target RopeKernel runs on now, e.g. "AVX3" or "AVX2" (for tests and benchmarks).
const char* KernelTargetName();

}  // namespace posenc::internal
