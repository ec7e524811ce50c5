// examples/plugin/rmsnorm_math.h: the arithmetic both example plugins share,
// for host C++ and CUDA device code alike: BF16 <-> binary64 conversions
// (one correct rounding, ties to even), the weight, and row addressing.
// Self-contained: an outside plugin needs only normgate/plugin.h.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define EX_HD __host__ __device__ inline
#else
#define EX_HD inline
#endif

namespace ex {

/// The binary64 value of BF16 bits (exact).
EX_HD double bf16_to_double(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return static_cast<double>(f);
}

/// BF16 bits of v rounded once to nearest, ties to even (overflow to +-inf,
/// BF16 subnormals below 2^-126, NaN to the quiet NaN 0x7FC0 with v's sign).
EX_HD uint16_t bf16_from_double(double v) {
  uint64_t b;
  memcpy(&b, &v, 8);
  const uint16_t sign = static_cast<uint16_t>((b >> 48) & 0x8000u);
  uint64_t mag = b & 0x7FFFFFFFFFFFFFFFull;
  if (mag > 0x7FF0000000000000ull) return static_cast<uint16_t>(sign | 0x7FC0u);
  // 0x1.ffp127, halfway between the largest BF16 (0x1.fep127) and 2^128:
  // from here on (the tie goes to the even 2^128) the result is infinite.
  if (mag >= 0x47EFF00000000000ull) return static_cast<uint16_t>(sign | 0x7F80u);
  float f;
  if (mag < 0x3810000000000000ull) {  // below 2^-126: BF16's quantum is 2^-133
    const double q = rint(v * 0x1p133);  // exact scaling, then ties-to-even
    f = static_cast<float>(q * 0x1p-133);  // exact: a multiple of 2^-133 below 2^-126
  } else {  // normal: keep 7 of the 52 fraction bits, ties to even
    mag += ((uint64_t{1} << 44) - 1) + ((mag >> 45) & 1u);
    mag &= ~((uint64_t{1} << 45) - 1);
    double r;
    memcpy(&r, &mag, 8);
    f = static_cast<float>(r);  // exact: r is a BF16 value
  }
  uint32_t fb;
  memcpy(&fb, &f, 4);
  return static_cast<uint16_t>(sign | (fb >> 16));
}

/// w[j] as binary64; w_dtype 0: BF16 bits, 1: binary32.
EX_HD double weight(const void* w, int32_t w_dtype, int64_t j) {
  if (w_dtype == 0) return bf16_to_double(static_cast<const uint16_t*>(w)[j]);
  return static_cast<double>(static_cast<const float*>(w)[j]);
}

/// Offset of normalized row r = t*heads + h in a tensor of strides (stride, stride_h).
EX_HD int64_t row_offset(int64_t r, int64_t heads, int64_t stride, int64_t stride_h) {
  return (r / heads) * stride + (r % heads) * stride_h;
}

}  // namespace ex
