// Loading and storing float32 vectors from any storage type (float32, bfloat16, float16),
// compiled per Highway target. Arithmetic is float32; only memory holds the narrow types.
//
// Rounding to bfloat16 and float16 is to nearest, ties to even, bit-identical to
// posenc::BFloat16::FromFloat and posenc::Float16::FromFloat: Highway 1.0.3's DemoteTo to
// bfloat16 truncates, and its float16 DemoteTo truncates too on targets without F16C.

#if defined(POSENC_SIMD_STORAGE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef POSENC_SIMD_STORAGE_INL_H_
#undef POSENC_SIMD_STORAGE_INL_H_
#else
#define POSENC_SIMD_STORAGE_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "posenc/storage.h"

HWY_BEFORE_NAMESPACE();
namespace posenc {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

template <class DF>
HWY_INLINE hn::Vec<DF> LoadF32(DF df, const float* HWY_RESTRICT p) {
  return hn::LoadU(df, p);
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF32(DF df, const hwy::bfloat16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF32(DF df, const hwy::float16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}

template <class DF>
HWY_INLINE void StoreF32(hn::Vec<DF> v, DF df, float* HWY_RESTRICT p) {
  hn::StoreU(v, df, p);
}

template <class DF>
HWY_INLINE void StoreF32(hn::Vec<DF> v, DF /* df */, hwy::bfloat16_t* HWY_RESTRICT p) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::RebindToSigned<DF> di32;
  const hn::Rebind<uint16_t, DF> du16;
  const auto bits = hn::BitCast(du32, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du32, 1u));
  auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(lsb, hn::Set(du32, 0x7FFFu))));
  // A NaN must stay NaN (quiet), not round into infinity.
  const auto quiet_nan = hn::Or(hn::ShiftRight<16>(bits), hn::Set(du32, 0x40u));
  rounded = hn::IfThenElse(hn::RebindMask(du32, hn::IsNaN(v)), quiet_nan, rounded);
  hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, rounded)), du16, reinterpret_cast<uint16_t*>(p));
}

template <class DF>
HWY_INLINE void StoreF32(hn::Vec<DF> v, DF df, hwy::float16_t* HWY_RESTRICT p) {
#if HWY_TARGET <= HWY_AVX2
  // F16C's vcvtps2ph rounds to nearest even, as Float16::FromFloat does.
  (void)df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  hn::StoreU(hn::DemoteTo(dh, v), dh, p);
#else
  // Without F16C, Highway 1.0.3 truncates; this path is for old CPUs only.
  constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
  HWY_ALIGN float lanes[kMaxLanes];
  hn::Store(v, df, lanes);
  for (size_t i = 0; i < hn::Lanes(df); ++i) {
    const Float16 h = Float16::FromFloat(lanes[i]);
    std::memcpy(p + i, &h, sizeof(h));
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace posenc
HWY_AFTER_NAMESPACE();

#endif  // POSENC_SIMD_STORAGE_INL_H_
