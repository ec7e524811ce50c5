// normgate/core/output_digest.h: a 64-bit digest of an output tensor's bits,
// the same on the host and on the device.
//
// What it is for: proving that two builds of a variant produce bitwise
// identical outputs on a campaign's cases without copying the outputs to the
// host (`normgate digest`, docs/perf/routes.md D19). It detects accidental
// differences, not forgeries: it is not a cryptographic hash. The files that
// hold digests are sealed with SHA-256 (seeds::sha256_hex) like every record
// a verdict rests on.
//
// Definition. For a tensor of n elements e_0 .. e_{n-1} (their bit patterns
// as unsigned integers, 16-bit for BF16, 32-bit for FP32, 64-bit for
// binary64), in the order of
// the tensor packed over normalized rows (Outputs' layout, core/types.h):
//   term(i, e) = mix64(mix64(i + K) ^ e)           (K = 0x9E3779B97F4A7C15)
//   sum        = sum_i term(i, e_i)  mod 2^64       (any order: the device
//                                                    reduces in parallel)
//   digest     = mix64(sum ^ mix64(n ^ (width << 56)))   (width in bytes)
// mix64 is the finalizer of SplitMix64 (Steele, Lea, Flood, "Fast splittable
// pseudorandom number generators", OOPSLA 2014; constants as in Vigna's
// public-domain splitmix64.c), a bijection of 64-bit words. Changing one
// element changes exactly one term, so any single difference changes the
// digest; several differences cancel only by a 64-bit coincidence. Moving a
// value to another index changes its term (the index enters before e).
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"

namespace normgate::core {

/// SplitMix64's finalizer: a bijection of 64-bit words.
NG_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The contribution of element i (0-based, packed order) with bit pattern e.
NG_HD uint64_t digest_term(uint64_t i, uint64_t e) { return mix64(mix64(i + 0x9E3779B97F4A7C15ull) ^ e); }

/// The digest of n elements of `width` bytes whose terms sum to `sum`.
NG_HD uint64_t digest_finish(uint64_t sum, uint64_t n, unsigned width) {
  return mix64(sum ^ mix64(n ^ (static_cast<uint64_t>(width) << 56)));
}

/// Host digest of n BF16 (or other 16-bit) patterns, packed.
inline uint64_t digest_u16(const uint16_t* p, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; ++i) s += digest_term(i, p[i]);
  return digest_finish(s, n, 2);
}

/// Host digest of n FP32 values (their bit patterns), packed.
inline uint64_t digest_u32(const uint32_t* p, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; ++i) s += digest_term(i, p[i]);
  return digest_finish(s, n, 4);
}

/// Host digest of n 8-byte patterns (binary64 values such as msq), packed.
inline uint64_t digest_u64(const uint64_t* p, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; ++i) s += digest_term(i, p[i]);
  return digest_finish(s, n, 8);
}

}  // namespace normgate::core
