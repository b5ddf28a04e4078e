// Accurate cos and sin of pos * freq for SIMD kernels, compiled per Highway target (included by
// each kernel's -inl.h inside HWY_NAMESPACE).
//
// A float32 angle near 10^6 rad is a multiple of 1/16 rad, and even a double product pos * freq
// is off by up to 2^-30 rad at pos = 2^24 (half an ulp of the angle), which is 2 float32 ulps of
// a cos or sin near 2^-8. So the angle is never rounded as a whole: freq = hi + lo, where hi
// keeps 26 significant bits, so that pos * hi is exact for pos < 2^27; pos * hi is reduced mod
// 2 pi exactly (three Cody-Waite steps, exact for pos * hi < 8e8 rad, i.e. 2^24 positions at any
// freq <= 50); then pos * lo (tiny) is added. The reduced angle is within ~2^-51 rad of exact;
// Highway's double Sin and Cos (3 double ulps, valid for |x| <= 39000; here |x| <= pi + 1e-7)
// add ~1e-16. Rounded to float32, cos and sin are then within half a float32 ulp plus 2^-40 of
// the exact values.

// Per-target include guard: this file is re-included once per target by foreach_target.h.
#if defined(POSENC_ANGLES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_ANGLES_INL_H_
#undef POSENC_ANGLES_INL_H_
#else
#define POSENC_ANGLES_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// r = x mod 2 pi in [-pi, pi]. 2 pi = kC1 + kC2 + kC3, where kC1 and kC2 carry 26 significant
// bits each, so k * kC1 and k * kC2 are exact for |k| < 2^27.
template <class DD, class VD = hn::Vec<DD>>
HWY_INLINE VD ReduceTwoPi(DD dd, VD x) {
  constexpr double kInvTwoPi = 0.15915494309189535;
  constexpr double kC1 = 6.283185362815857;       // 2 pi to 26 bits
  constexpr double kC2 = -5.563627070159782e-08;  // the next 26 bits
  constexpr double kC3 = 2.4492935982947064e-16;  // the rest
  const VD k = hn::Round(hn::Mul(x, hn::Set(dd, kInvTwoPi)));
  VD r = hn::NegMulAdd(k, hn::Set(dd, kC1), x);
  r = hn::NegMulAdd(k, hn::Set(dd, kC2), r);
  return hn::NegMulAdd(k, hn::Set(dd, kC3), r);
}

// freq = hi + lo exactly, hi with 26 significant bits (27 low mantissa bits cleared).
HWY_INLINE void SplitFrequency(double freq, double* hi, double* lo) {
  uint64_t bits;
  std::memcpy(&bits, &freq, sizeof(bits));
  bits &= ~((uint64_t{1} << 27) - 1);
  std::memcpy(hi, &bits, sizeof(bits));
  *lo = freq - *hi;
}

// pos * (hi + lo) mod 2 pi, in [-pi - 1e-7, pi + 1e-7].
template <class DD, class VD = hn::Vec<DD>>
HWY_INLINE VD AngleMod2Pi(DD dd, VD pos, VD hi, VD lo) {
  return hn::MulAdd(pos, lo, ReduceTwoPi(dd, hn::Mul(pos, hi)));
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_ANGLES_INL_H_
