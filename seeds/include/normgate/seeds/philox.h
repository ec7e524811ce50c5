// normgate/seeds/philox.h: the Philox4x32-10 counter-based random number
// generator, host and device.
//
// Source: J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel random
// numbers: as easy as 1, 2, 3", SC'11 (doi:10.1145/2063384.2063405), Sec. 3.3,
// and its reference implementation Random123 (philox.h). Philox4x32-R maps a
// 128-bit counter and a 64-bit key to 128 random bits through R rounds of
//   (hi0, lo0) = mulhilo(M0, c0), (hi1, lo1) = mulhilo(M1, c2)
//   c' = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
// with the key bumped by the Weyl constants (W0, W1) between rounds. R = 10 is
// the variant the authors recommend ("Philox4x32-10") and the one cuRAND,
// oneMKL and Random123 ship; its outputs match Random123's tests/kat_vectors
// (tests/seeds/philox_test.cpp checks the three published vectors).
//
// Everything is a pure function of its arguments (no state), so any element of
// a random stream can be produced alone, on the host or in a CUDA kernel, with
// bitwise-identical results: only 32-bit integer multiply, xor and add are used.
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"

namespace normgate::seeds {

/// 128-bit Philox counter or output block: four 32-bit words, v[0] first.
/// A plain aggregate (no std::array) so it is usable in device code.
struct Philox4 {
  uint32_t v[4];
};

/// 64-bit Philox key: two 32-bit words, k[0] first.
struct Key2 {
  uint32_t k[2];
};

/// Philox4x32 multipliers and Weyl key increments (Salmon et al. 2011, Table 2;
/// Random123 PHILOX_M4x32_0/1 and PHILOX_W32_0/1).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  ///< golden ratio, 2^32 * (sqrt(5)-1)/2
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  ///< 2^32 * (sqrt(3)-1)

/// Full 64-bit product of two uint32 values: returns the low 32 bits and
/// stores the high 32 bits in *hi. Device: a*b (low) and __umulhi (high);
/// host: one 64-bit multiply. Exact integer arithmetic, never throws.
NG_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
#if defined(__CUDA_ARCH__)
  *hi = __umulhi(a, b);
  return a * b;
#else
  const uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
#endif
}

/// One Philox4x32 round (S-box + permutation) of counter block c under key k:
/// (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0), (hi0, lo0) = M0*c0, (hi1, lo1) = M1*c2.
/// Source: Salmon et al. 2011, Sec. 3.3; Random123 _philox4x32round.
NG_HD Philox4 philox4x32_round(Philox4 c, Key2 k) {
  uint32_t hi0, hi1;
  const uint32_t lo0 = mulhilo32(kPhiloxM0, c.v[0], &hi0);
  const uint32_t lo1 = mulhilo32(kPhiloxM1, c.v[2], &hi1);
  return Philox4{{hi1 ^ c.v[1] ^ k.k[0], lo1, hi0 ^ c.v[3] ^ k.k[1], lo0}};
}

/// Philox key schedule step: k + (W0, W1), each word modulo 2^32.
/// Source: Salmon et al. 2011, Sec. 3.3; Random123 _philox4x32bumpkey.
NG_HD Key2 philox4x32_bumpkey(Key2 k) {
  return Key2{{k.k[0] + kPhiloxW0, k.k[1] + kPhiloxW1}};
}

/// Philox4x32-R with R rounds (1 <= R <= 16): the key is bumped before every
/// round but the first, as in Random123's philox4x32_R. Pure function.
template <int R>
NG_HD Philox4 philox4x32_R(Philox4 ctr, Key2 key) {
  static_assert(R >= 1 && R <= 16, "Philox4x32: 1..16 rounds");
  ctr = philox4x32_round(ctr, key);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 1; i < R; ++i) {
    key = philox4x32_bumpkey(key);
    ctr = philox4x32_round(ctr, key);
  }
  return ctr;
}

/// Philox4x32-10: 128 random bits for counter `ctr` under key `key`.
/// Inputs: four and two uint32 words; output: four uint32 words, uniformly
/// distributed over 2^128 values as the counter varies (a bijection of the
/// counter for a fixed key). Published answers (Random123 tests/kat_vectors):
///   ctr 0,0,0,0 key 0,0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
NG_HD Philox4 philox4x32_10(Philox4 ctr, Key2 key) { return philox4x32_R<10>(ctr, key); }

}  // namespace normgate::seeds
