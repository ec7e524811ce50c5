// normgate/core/hd.h: host/device qualifiers and explicitly rounded FP32/FP64
// arithmetic shared by CPU and GPU code.
//
// Why: nvcc contracts a*b+c into an FMA by default while the host compiler
// (built with -ffp-contract=off, see CMakeLists.txt) does not. Code whose last
// bit must agree between CPU and GPU (the input generator, the CPU models of
// the kernels) therefore spells every rounding out: mul_rn/add_rn never fuse,
// fma_rn always fuses. On the device they map to __fmul_rn/__fadd_rn/__fmaf_rn
// (CUDA Math API: "never merged into an FMA"); on the host to plain IEEE-754
// binary32 operations and std::fma.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define NG_HD __host__ __device__ __forceinline__
#define NG_DEVICE_CODE_POSSIBLE 1
#else
#define NG_HD inline
#endif

namespace normgate {

/// Round-to-nearest-even binary32 product, never contracted into an FMA.
NG_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// Round-to-nearest-even binary32 sum, never contracted into an FMA.
NG_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/// Round-to-nearest-even binary32 difference, never contracted.
NG_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

/// Fused multiply-add a*b+c with a single rounding (IEEE-754 fusedMultiplyAdd).
NG_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// Correctly rounded binary32 square root (IEEE-754 squareRoot). nvcc's default
/// -prec-sqrt=true gives the same on the device; __fsqrt_rn states it.
NG_HD float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

/// Correctly rounded binary32 division.
NG_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// Round-to-nearest-even binary64 sum, never contracted.
NG_HD double dadd_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

/// Fused multiply-add in binary64, one rounding (device __fma_rn, host std::fma).
NG_HD double dfma_rn(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// Round-to-nearest-even binary64 product, never contracted into an FMA.
NG_HD double dmul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

/// Round-to-nearest-even binary64 difference, never contracted.
NG_HD double dsub_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}

/// add_rn or dadd_rn by the operands' type: one spelling for reductions
/// written once over float and double (the team sums of plan.h).
NG_HD float sum_rn(float a, float b) { return add_rn(a, b); }
NG_HD double sum_rn(double a, double b) { return dadd_rn(a, b); }

/// Bit cast float -> uint32 (host and device).
NG_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
#endif
}

/// Bit cast uint32 -> float (host and device).
NG_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}

}  // namespace normgate
