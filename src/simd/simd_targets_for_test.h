// Runs a test body once per SIMD target that this binary was compiled for and this CPU supports,
// so that every Highway target of a kernel is held to its scalar twin, not only the best one.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "hwy/highway.h"
#include "hwy/targets.h"

namespace posenc::testing_support {

// True in the AddressSanitizer build (make test-sanitizers). There a sweep that repeats the same
// memory accesses only to check more numbers (more option combinations over one shape and
// window) keeps the combinations that reach distinct code, and the release build checks them all.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

template <typename F>
void ForEachSimdTarget(F&& body) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(std::string("SIMD target ") + hwy::TargetName(target));
    body(target);
  }
  hwy::SetSupportedTargetsForTest(0);  // back to the best target
}

}  // namespace posenc::testing_support
