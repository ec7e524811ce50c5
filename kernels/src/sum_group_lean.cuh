// kernels/src/sum_group_lean.cuh (internal): BF16(a + b) for a group of
// 8, bwd_det_lean's form of device_blocks.cuh sum_group_fast (its own
// header so that tests/kernels/device_blocks_test.cu can check it).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "device_blocks.cuh"

namespace normgate::kernels::dev {

/// Element-wise BF16(a_e + b_e) with one rounding of each exact sum: the bits
/// of sum_group (core/bf16.h bf16_sum_rn for every element), as
/// sum_group_fast, with a cheaper test of when the hardware's RNE conversion
/// of s = RN_fp32(a + b) may differ from bf16_sum_rn: only when s is a BF16
/// midpoint (low 16 bits 0x8000; the double rounding case) or a NaN (the
/// conversion's canonical NaN against bf16_from_float's payload). An
/// infinite s converts to the same 0x7F80 / 0xFF80 either way. The midpoint
/// test takes two sums at once: with p = the two low halves in one word and
/// q = p ^ 0x80008000, some half of q is zero iff (q - 0x00010001) & ~q &
/// 0x80008000 != 0 (the zero-byte test of Warren, Hacker's Delight, 2nd ed.,
/// 6-1, on 16-bit lanes; a borrow out of a zero low half can only add a
/// false positive in the high half, which sends the group to the exact path,
/// never the other way). tests/kernels/device_blocks_test.cu checks it bit
/// for bit against bf16_sum_rn.
__device__ __forceinline__ Group8 lean_sum_group(const float (&a)[8], const Group8& b) {
  float s[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) s[e] = __fadd_rn(a[e], group_at(b, e));
  uint32_t zero_half = 0u;
  unsigned nan = 0u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t q = __byte_perm(__float_as_uint(s[2 * i]), __float_as_uint(s[2 * i + 1]), 0x5410) ^ 0x80008000u;
    zero_half |= (q - 0x00010001u) & ~q;
    unsigned p;
    asm("{\n\t.reg .pred q;\n\tsetp.nan.f32 q, %1, %2;\n\tselp.u32 %0, 1, 0, q;\n\t}" : "=r"(p) : "f"(s[2 * i]),
        "f"(s[2 * i + 1]));
    nan |= p;
  }
  if (((zero_half & 0x80008000u) | nan) != 0u) return sum_group(a, b);
  Group8 g;
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(s[2 * i], s[2 * i + 1]);  // .x (low half) = element 2i
    w[i] = *reinterpret_cast<const uint32_t*>(&h);
  }
  g.u = make_uint4(w[0], w[1], w[2], w[3]);
  return g;
}

}  // namespace normgate::kernels::dev
