// normgate/kernels/multirow.h: how many rows one team of the forward variant
// fwd_multirow (kernels/src/fwd_multirow.cu) normalizes per CTA: R(H), a
// documented function of H alone (never of the device, never of T), shared
// by the launcher and the tests that pick T at a CTA's edge.
//
// fwd_multirow keeps fwd_rowwise's row geometry (plan.h row_geometry: team,
// slots, each thread's columns, the reduction tree) and rstd.h arithmetic,
// so its y, rstd and msq are bitwise fwd_rowwise's whatever R is; R only
// sets how many bytes each thread has in flight: a team issues the loads of
// all its R rows (16 bytes per slot and row, twice that for form res: h and
// u) before it reduces any of them.
//
//   R(H) = 8  for H <= 512          (one slot, teams of 32 or 64 threads: 8 x 16 B of x
//                                    per thread, 4 .. 8 KiB in flight per team)
//        = 4  for 512 < H <= 2048  (one slot, teams of 96..256: 4 x 16 B per thread,
//                                    4 .. 16 KiB per team)
//        = 2  for H > 2048         (two slots, teams of 160..1024: 2 x 2 x 16 B per
//                                    thread, 8 .. 64 KiB per team; a team of up to 1024
//                                    threads is one CTA at 64 registers per thread)
// Form res loads u beside h: twice the bytes. Why these: R = 2 and 4 rows per
// team were measured on the H200 as a bench experiment of the same loop
// (bench/fwd_rows.cuh; docs/perf/forward.md, "Open leads": R = 4 -16.1% and
// -9.5% of fwd_rowwise's time at [65537, 1536] and [65537, 2048], -14.5% at
// [262148, 256]; R = 2 -4.9% at [131072, 4096], -8.9% at [65537, 6144]);
// R = 8 below H = 512 takes the per-team bytes of the 256-wide rows (the
// per-head views) from 2 to 4 KiB, unmeasured; R = 4 with two slots spilled
// in form res (ptxas: 104 bytes), R = 2 does not.
//
// CTA shape: max(1, 256 / team) teams (as fwd_rowwise), each taking R rows:
// CTA b holds rows [b*teams*R, (b+1)*teams*R), team ti its rows
// b*teams*R + j*teams + ti for j < R (neighbouring teams read neighbouring
// rows at every step j).
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"
#include "normgate/kernels/plan.h"

namespace normgate::kernels {

/// Rows per team of fwd_multirow for rows of H columns (1 <= H <= kMaxH): 8, 4 or 2 (see file comment).
NG_HD int fwd_multirow_rows(int64_t H) { return H <= 512 ? 8 : H <= 2048 ? 4 : 2; }

/// Teams per CTA of fwd_multirow (as fwd_rowwise's): max(1, 256 / team).
NG_HD int fwd_multirow_teams(int64_t H) {
  const int team = row_geometry(H).team;
  return team >= 256 ? 1 : 256 / team;
}

}  // namespace normgate::kernels
