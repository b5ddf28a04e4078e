// Runs an attention test body under each bfloat16 arithmetic of the kernel that this CPU has.
#pragma once

#include <gtest/gtest.h>

#include "attention_bf16.h"

namespace posenc::testing_support {

// Runs body with the kernel's bfloat16 arithmetic as this CPU chooses it, then, where the CPU has
// AVX512-BF16, with the other one forced (internal::Bf16DotProductsPay): bfloat16 dot products
// and float32 products of widened inputs are both held to every check on such a machine.
template <typename F>
void ForEachBf16Arithmetic(F&& body) {
  body();
  if (!internal::HasBf16DotProducts()) return;
  const int other = internal::Bf16DotProductsPay() ? 0 : 1;
  SCOPED_TRACE(other == 1 ? "AVX512-BF16 dot products" : "bfloat16 widened to float32");
  internal::SetBf16DotProductsForTest(other);
  body();
  internal::SetBf16DotProductsForTest(-1);
}

}  // namespace posenc::testing_support
