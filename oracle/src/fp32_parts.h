// oracle/src/fp32_parts.h (internal): the FP32 baseline's row and column
// steps (formulas in reference.h, fp32_baseline), shared by its own pass
// (fp32_baseline.cpp) and by the reference pair's pass, which computes the
// baseline's rstd and dw from the same read of x and dy
// (Reference::compute_pair with a baseline; reference_pass.cpp). Both call
// these, so both give the same bits.
#pragma once

#include <cstdint>
#include <limits>

#include "normgate/core/hd.h"

namespace normgate::oracle::detail {

/// Rows whose sums of squares fp32_sum_squares runs side by side.
constexpr int kFp32Rows = 8;

/// ss[i] = ((0 + x_0^2) + x_1^2) + ... in binary32 over BF16 row x[i],
/// i < nr <= kFp32Rows, H columns (fp32_baseline.cpp). Each row's sum is one
/// chain of dependent additions; the rows' chains run interleaved (nr ==
/// kFp32Rows keeps the adder busy; fewer rows run one after the other).
void fp32_sum_squares(const uint16_t* const* x, int nr, int64_t H, float* ss);

/// The baseline's rstd of a row from its sum of squares ss:
/// 1 / sqrt(ss / Hf + eps32), each operation rounded to binary32.
inline float fp32_rstd(float ss, float Hf, float eps32) {
  return div_rn(1.0f, sqrt_rn(add_rn(div_rn(ss, Hf), eps32)));
}

/// One row's term of the baseline's dw column: dw + dy * (x * rstd), each
/// operation rounded to binary32 (x, dy: the BF16 inputs as floats).
inline float fp32_dw_step(float dw, float x, float dy, float rstd) {
  return add_rn(dw, mul_rn(dy, mul_rn(x, rstd)));
}

/// v, or the default quiet NaN (+NaN, bits 0x7FC00000) when v is a NaN.
/// Which operand's NaN an addition passes on is not specified (C++ lets
/// the compiler swap the operands of +, and the loops of the two passes
/// and of each clone are vectorized differently), so the baseline's rstd
/// and dw NaNs are made one NaN before they are returned.
inline float fp32_canonical_nan(float v) { return v != v ? std::numeric_limits<float>::quiet_NaN() : v; }

}  // namespace normgate::oracle::detail
