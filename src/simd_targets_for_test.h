// Runs a test body once per SIMD target that this binary was compiled for and this CPU supports,
// so that every Highway target of a kernel is held to its scalar twin, not only the best one.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "hwy/highway.h"
#include "hwy/targets.h"

namespace posenc::testing_support {

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
