// normgate/kernels/wide.h: the row geometry of the forward variant fwd_wide
// (kernels/src/fwd_wide.cu), a documented function of H alone (never of the
// device, never of T), shared by the launcher and its CPU model.
//
// fwd_rowwise's geometry (plan.h row_geometry) gives a thread one or two
// 8-column groups of a row (8 or 16 columns: a team of 256 threads at
// H = 4096). fwd_wide gives it up to four (32 columns), so the per-row work
// (the binary64 butterflies, the barriers, the team's rstd) is spread over
// twice or four times the elements:
//
//   nvec  = ceil(H / 8)                     8-column groups of a row
//   team  = roundup(ceil(nvec / 4), 32)     threads of a row (32 .. 512 for H <= 16384)
//   slots = ceil(nvec / team)               groups a thread holds (1 .. 4)
//
// e.g. H = 1536: team 64, 3 slots; 2048: 64, 4; 4096: 128, 4; 5120: 160, 4;
// 6144: 192, 4; 16384: 512, 4; H <= 256: 32, 1. Thread t of a team holds
// the groups k = 0 .. slots-1 at columns group_col0(team, k, t) (plan.h:
// 8 * (k * team + t)); groups at or past H hold zeros. The sum of squares
// follows plan.h's rule on this geometry (each thread's columns k
// ascending, then column ascending, in binary64 with fma; the warp
// butterfly; lane l of one warp takes warp l's total and butterflies
// again), so it associates differently from fwd_rowwise's wherever the
// geometries differ: ss, hence msq, may differ in the last bit, and rstd
// (correctly rounded from m) only for rows within about 2^-47 of an FP32
// rounding boundary.
//
// Why four: measured on the H200 as a bench experiment of the same loop
// (bench/fwd_rows.cuh, `kernels_bench --fwd-rows 1:4:0:0`;
// docs/perf/forward.md, D12): 0.81x fwd_rowwise's time at [65537, 2048],
// 0.95x at [131072, 4096], 0.92x at [131072, 6144]; with one or two groups
// or with more rows per team, slower.
//
// CTA shape: max(1, 256 / team) teams, one row each: CTA b holds rows
// [b * teams, (b + 1) * teams).
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"
#include "normgate/kernels/plan.h"

namespace normgate::kernels {

/// Most 8-column groups a thread of fwd_wide holds.
inline constexpr int kWideMaxSlots = 4;

/// Row geometry of fwd_wide for rows of H columns (1 <= H <= kMaxH; see file comment).
NG_HD RowGeometry fwd_wide_geometry(int64_t H) {
  const int64_t nvec = (H + kGroup - 1) / kGroup;
  const int64_t per = (nvec + kWideMaxSlots - 1) / kWideMaxSlots;
  RowGeometry g;
  g.team = static_cast<int>((per + 31) / 32 * 32);
  g.slots = static_cast<int>((nvec + g.team - 1) / g.team);
  return g;
}

/// Teams (rows) per CTA of fwd_wide: max(1, 256 / team).
NG_HD int fwd_wide_teams(int64_t H) {
  const int team = fwd_wide_geometry(H).team;
  return team >= 256 ? 1 : 256 / team;
}

}  // namespace normgate::kernels
