// normgate/kernels/chunk_plan.h: the backward's chunk plan, which rows feed
// which dw partial. Like plan.h (the row geometry it builds on) it is a
// documented function of (T, H) alone, never of the device, so a CPU model
// reproduces the GPU's accumulation structure exactly. Only the backward's
// sources include it (kernels/CMakeLists.txt, ng_chunk), so a change here
// changes the backward variants' source hashes and no forward one's.
//
//       cap0(H)          = 264 * clamp(floor(2^22 / (264 * H)), 1, 8)
//       ctas(H)          = min(floor(1024 / team(H)), 32)   (team: bwd_row_geometry)
//       cap(H)           = min(cap0(H), 132 * ctas(H))  if ctas(H) >= 4
//                        = cap0(H)                      otherwise
//       num_chunks(T, H) = 0                          if T == 0
//                        = min(ceil(T / 16), cap(H))  otherwise
//       chunk c holds rows [floor(c*T/n), floor((c+1)*T/n))     (n = num_chunks;
//                                                                every chunk >= 1 row)
// One CTA per chunk walks its rows in increasing order; each dw column is
// accumulated by exactly one thread of that CTA, so the chunk partial of
// column j is a strictly sequential (FP64) sum over the chunk's rows. The
// partials [n, H] are then combined column by column:
//    lane L (0 <= L < 32) sums chunks c = L, L+32, L+64, ... in increasing
//    order; the 32 lane results are then summed in order L = 0..31
// (see accum.h for the arithmetic of each step).
//
// Why these caps. cap0 keeps the partials at most max(2^22, 264*H) doubles
// (32 MiB; 34.6 MB at H = 16384) and is a multiple of 264 = 2 x 132 so that
// at large T the chunks fill an H200's 132 SMs in whole waves of 2 CTAs per
// SM. The narrow 1-slot chunk kernel runs at 64 registers, so an SM holds
// ctas(H) of its CTAs (1024 threads' worth of registers; 32 CTAs at most):
// 8 at H = 1024, 5 at 1536, 4 at 1537..2048 (teams of 224 and 256), 2 at
// 3072 and 4096. Where that is 4 or more, cap0 is several partial waves of
// the real residency (3.2 at H = 1536, 3.5 at 2048), and one whole wave of
// it (132 * ctas: 660 chunks at H = 1536, 528 at 2048) ran faster on the
// H200 (docs/results/kernels/chunk-cap-2026-12-04/: fewer partials to write
// and combine, no partly empty last wave): at H = 1536, 0.86-0.93x the time
// of cap0's plan on plain rows and 0.93-0.97x with form res at T =
// 65537-131072; at H = 2048, 0.91-0.94x on plain rows at T = 65537 and
// 0.94-0.99x at 131072, 0.95x with form res at 65537 and 0.99-1.00x at
// 131072 (docs/perf/backward.md, D14 and D18). Where an SM holds 2 (H =
// 2049..4096) cap0 stands: one wave there gained 0.94-0.98x at T = 65537 and
// 0.98-1.01x at 131072, less than the re-gating of every window it would
// change. The constants were chosen for that chip; they are constants, not
// queried, so results never depend on the device.
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"
#include "normgate/kernels/plan.h"

namespace normgate::kernels {

/// Rows of one chunk at least (when T allows), and the chunk-count caps.
inline constexpr int64_t kMinRowsPerChunk = 16;
inline constexpr int64_t kChunkBudget = int64_t{1} << 22;  // ~ num_chunks * H
inline constexpr int64_t kChunkWave = 264;                  // 2 x 132 SMs
inline constexpr int64_t kMaxChunkWaves = 8;
/// The H200's SMs (one wave of one CTA an SM), and the narrow chunk kernel's
/// CTAs an SM from which the cap is one wave of them (file comment).
inline constexpr int64_t kSms = 132;
inline constexpr int64_t kWaveCapMinCtas = 4;
/// Chunk lanes per column in the final combine of chunk partials.
inline constexpr int kCombineLanes = 32;

/// CTAs of the narrow 1-slot chunk kernel an SM holds at 64 registers a
/// thread: floor(1024 / team), at most 32 (see file comment, ctas(H)).
/// H < 1 is read as 1.
NG_HD int64_t chunk_ctas_per_sm(int64_t H) {
  const int64_t c = 1024 / bwd_row_geometry(H < 1 ? 1 : H).team;
  return c > 32 ? 32 : c;
}

/// Number of backward chunks for T rows of H columns (see file comment): 0
/// for T <= 0, else min(ceil(T / 16), cap(H)), 1..2112. H < 1 is read as 1.
NG_HD int64_t num_chunks(int64_t T, int64_t H) {
  if (T <= 0) return 0;
  int64_t waves = kChunkBudget / (kChunkWave * (H < 1 ? 1 : H));
  waves = waves < 1 ? 1 : (waves > kMaxChunkWaves ? kMaxChunkWaves : waves);
  int64_t cap = kChunkWave * waves;
  const int64_t ctas = chunk_ctas_per_sm(H);
  if (ctas >= kWaveCapMinCtas && kSms * ctas < cap) cap = kSms * ctas;
  const int64_t want = (T + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
  return want < cap ? want : cap;
}

/// First row of chunk c (c may equal n: returns T). Requires 0 <= c <= n, n >= 1.
NG_HD int64_t chunk_begin(int64_t T, int64_t n, int64_t c) { return c * T / n; }

}  // namespace normgate::kernels
