// normgate/kernels/staged.h: the row geometry of the forward variant
// fwd_staged (kernels/src/fwd_staged.cu), a documented function of H alone
// (never of the device, never of T), shared by the launcher and its CPU
// model.
//
// fwd_staged copies each thread's groups of its row (form res: of h and of
// u) into the thread's own shared-memory slots (cp.async) instead of
// holding them in registers, so the kernel runs at 32 registers (2048
// threads an SM by registers; form res above H = 8192: 40, 1536) where
// the register-held kernels take 38-48. Its geometry gives a thread two
// 8-column groups while a team fits 512 threads:
//
//   nvec  = ceil(H / 8)                                8-column groups of a row
//   team  = min(roundup(ceil(nvec / 2), 32), 512)       threads of a row
//   slots = ceil(nvec / team)                          groups a thread holds (1 .. 4)
//
// e.g. H <= 256: team 32, one slot; 512: 32, 2; 1536: 96, 2; 2048: 128, 2;
// 4096: 256, 2; 6144: 384, 2; 8192: 512, 2; 16384: 512, 4. Thread t of a
// team holds the groups k = 0 .. slots-1 at columns group_col0(team, k, t)
// (plan.h: 8 * (k * team + t)); groups at or past H hold zeros. The sum of
// squares follows plan.h's rule on this geometry (each thread's columns k
// ascending, then column ascending, in binary64 with fma; the warp
// butterfly; lane l of one warp takes warp l's total and butterflies
// again), so where this geometry differs from fwd_rowwise's (plan.h) or
// fwd_wide's (wide.h) the sum associates differently: ss, hence msq, may
// differ in the last bit, and rstd only for rows within about 2^-47 of an
// FP32 rounding boundary. (For H <= 256 and 2048 < H <= 8192 it is plan.h's
// geometry, hence fwd_rowwise's bits.)
//
// Why two groups: measured as the bench experiment of the same kernel
// (bench/fwd_smem.cuh, `kernels_bench --fwd-smem 2:0`; docs/perf/forward.md,
// Open leads, "Short T", step 4), on an H100 at T = 4097: 0.86x fwd_wide's
// time at H = 1536 (BF16 w), 0.95x at 2048, 0.94x at 4096; at T >= 65537
// the same as the register-held kernel of its geometry.
//
// CTA shape: max(1, 256 / team) teams, one row each: CTA b holds rows
// [b * teams, (b + 1) * teams).
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"
#include "normgate/kernels/plan.h"

namespace normgate::kernels {

/// Most threads in a team of fwd_staged (one CTA).
inline constexpr int kStagedMaxTeam = 512;
/// Most 8-column groups a thread of fwd_staged holds (H <= kMaxH = 16384).
inline constexpr int kStagedMaxSlots = 4;

/// Row geometry of fwd_staged for rows of H columns (1 <= H <= kMaxH; see file comment).
NG_HD RowGeometry fwd_staged_geometry(int64_t H) {
  const int64_t nvec = (H + kGroup - 1) / kGroup;
  const int64_t half = (nvec + 1) / 2;
  const int64_t team = (half + 31) / 32 * 32;
  RowGeometry g;
  g.team = static_cast<int>(team < kStagedMaxTeam ? team : kStagedMaxTeam);
  g.slots = static_cast<int>((nvec + g.team - 1) / g.team);
  return g;
}

/// Teams (rows) per CTA of fwd_staged: max(1, 256 / team).
NG_HD int fwd_staged_teams(int64_t H) {
  const int team = fwd_staged_geometry(H).team;
  return team >= 256 ? 1 : 256 / team;
}

}  // namespace normgate::kernels
