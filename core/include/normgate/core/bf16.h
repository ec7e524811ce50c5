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

}  // namespace normgate
