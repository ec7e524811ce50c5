// normgate/core/bf16.h: bfloat16 <-> binary32 conversion, host and device.
//
// BF16 is the upper 16 bits of an IEEE-754 binary32 (1 sign, 8 exponent,
// 7 fraction bits). Storage everywhere in normgate is uint16_t bit patterns.
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"

namespace normgate {

/// Widen BF16 bits to binary32 (exact: every BF16 value is a binary32 value).
NG_HD float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

/// Round binary32 to BF16 bits, round to nearest, ties to even (IEEE-754
/// roundTiesToEven on the 16 dropped bits). NaN stays NaN (quiet bit forced so a
/// signalling-NaN payload cannot round to Inf); +-Inf and +-0 are kept; values
/// above the largest finite BF16 (0x7F7F = 3.3895e38) after rounding become Inf,
/// as IEEE-754 requires. Subnormals round like any other value.
NG_HD uint16_t bf16_from_float(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

/// Round binary32 to the nearest BF16 value, returned as binary32.
NG_HD float round_bf16(float f) { return bf16_to_float(bf16_from_float(f)); }

/// BF16 bits of the exact sum a + b rounded once to nearest, ties to even:
/// never the double rounding RN_bf16(RN_fp32(a + b)), which differs when the
/// FP32 sum lands exactly halfway between two BF16 values while the exact sum
/// does not. Used for h_new = BF16(h + u) and dh = BF16(dx + dh_new).
/// Method: TwoSum (Knuth; Muller et al., Handbook of Floating-Point
/// Arithmetic, 2nd ed., Alg. 4.4) gives s = RN_fp32(a + b) and the exact error
/// e = (a + b) - s whenever s is finite. If s is a BF16 midpoint (low 16 bits
/// 0x8000) and e != 0, the exact sum lies on e's side of it: round away from
/// zero when e has s's sign, toward zero otherwise (never a tie). Else, as no
/// midpoint lies strictly between s and s + e (|e| <= half an FP32 ulp of s
/// and midpoints are FP32 values), RN_bf16(s) is the answer. Non-finite s
/// (overflow, Inf or NaN inputs) is converted as bf16_from_float does.
NG_HD uint16_t bf16_sum_rn(float a, float b) {
  const float s = add_rn(a, b);
  const uint32_t u = float_bits(s);
  if ((u & 0x7F800000u) == 0x7F800000u) return bf16_from_float(s);
  const float bb = sub_rn(s, a);
  const float e = add_rn(sub_rn(a, sub_rn(s, bb)), sub_rn(b, bb));
  if ((u & 0xFFFFu) == 0x8000u && e != 0.0f) {
    const bool away = (float_bits(e) >> 31) == (u >> 31);
    return static_cast<uint16_t>((away ? u + 0x8000u : u - 0x8000u) >> 16);
  }
  return bf16_from_float(s);
}

}  // namespace normgate
