// normgate/kernels/plan.h: the work decomposition every variant and every CPU
// model shares. Everything here is a documented function of (T, H) alone:
// never of the device (SM count, L2 size) and never of pointer alignment, so a
// CPU model reproduces the GPU's accumulation structure exactly.
//
// The backward's chunk plan (which rows feed which dw partial) is in
// chunk_plan.h, which only the backward's sources include, so that a change
// of it leaves the forward variants' source hashes (registry.h) as they are.
//
// Row geometry (who owns which columns of a row). A row of H columns is cut
//    into nvec = ceil(H/8) groups of 8 consecutive columns (one 16-byte BF16
//    vector each). A "team" of `team` threads normalizes one row; thread t of
//    the team owns the groups g = k*team + t for k < slots, i.e. the columns
//    8*g .. 8*g+7 (those >= H are zero-filled and write nothing).
//       slots = nvec <= 256 ? 1 : 2
//       per   = ceil(nvec / slots)
//       team  = per <= 512 ? roundup(per, 32) : roundup(per, 64)   (32 .. 1024)
//    (the forward's geometry: two slots from H > 2048 on halve the warps per
//    row, and with them the per-row binary64 shuffles of the team sum; at
//    [131072, 4096] on the H200 one slot took 662.0 us, two 541.5 us:
//    docs/perf/forward.md, D1 and D4.)
//    The backward has its own geometry (bwd_row_geometry), one slot as long
//    as one CTA can hold the team:
//       slots = nvec <= 1024 ? 1 : 2
//       team  = slots == 1 ? roundup(nvec, 32) : roundup(ceil(nvec / 2), 64)
//    so a 1-slot team of up to 1024 threads is one CTA (at 64 registers, the
//    register file holds it), and a 2-slot team (H > 8192, 576..1024
//    threads) runs as a cluster of two CTAs of team/2 threads; the arithmetic
//    is that of one team. (Two slots for 4096 < H <= 8192 took 128 registers,
//    12 warps per SM: issue-latency bound, docs/perf/backward.md, D2.)
//    Row sums (sum of squares in the forward, sum of g*xhat in the backward)
//    are reduced as: each thread accumulates its own columns in order
//    (k ascending, then column ascending) with fma_rn; then a warp butterfly
//    (xor-shuffle with offsets 16, 8, 4, 2, 1; each lane adds its partner's
//    value to its own); then, for teams of more than one warp, lane l of every
//    warp takes warp l's total (0 for l >= team/32) and does the same
//    butterfly. The same geometry, hence the same rounding tree, is used
//    whether the 16-byte vector path or the scalar path loads the data.
#pragma once

#include <cstdint>

#include "normgate/core/hd.h"

namespace normgate::kernels {

/// Supported range of the normalized length H (every variant).
inline constexpr int64_t kMinH = 1;
inline constexpr int64_t kMaxH = 16384;
/// Largest supported T (rows).
inline constexpr int64_t kMaxT = int64_t{1} << 32;
/// BF16 elements per 16-byte vector (one column group).
inline constexpr int kGroup = 8;
/// Largest team (threads per row) of the row geometries (a CTA's thread
/// limit), and the largest team one CTA of the backward's two-CTAs-per-SM
/// kernels holds (a 2-slot team above it runs as a 2-CTA cluster).
inline constexpr int kMaxTeam = 1024;
inline constexpr int kMaxCtaTeam = 512;

/// Team size and groups per thread for rows of H columns (see file comment).
struct RowGeometry {
  int team = 32;   ///< threads per row, a multiple of 32 (of 64 when split over a 2-CTA cluster), <= 1024
  int slots = 1;   ///< column groups of 8 per thread: 1 or 2
};

/// Row geometry of H (1 <= H <= kMaxH).
NG_HD RowGeometry row_geometry(int64_t H) {
  const int64_t nvec = (H + kGroup - 1) / kGroup;
  const int slots = nvec <= 256 ? 1 : 2;
  const int64_t per = (nvec + slots - 1) / slots;
  const int64_t q = per <= 512 ? 32 : 64;
  RowGeometry g;
  g.slots = slots;
  g.team = static_cast<int>((per + q - 1) / q * q);
  return g;
}

/// Backward row geometry of H (1 <= H <= kMaxH; see file comment): one slot
/// and a team of roundup(nvec, 32) <= 1024 threads for nvec <= 1024, else two
/// slots and a team of roundup(ceil(nvec/2), 64) (a 2-CTA cluster).
NG_HD RowGeometry bwd_row_geometry(int64_t H) {
  const int64_t nvec = (H + kGroup - 1) / kGroup;
  RowGeometry g;
  if (nvec <= kMaxTeam) {
    g.slots = 1;
    g.team = static_cast<int>((nvec + 31) / 32 * 32);
  } else {
    g.slots = 2;
    g.team = static_cast<int>(((nvec + 1) / 2 + 63) / 64 * 64);
  }
  return g;
}

/// First column of the group owned by thread t, slot k, in a team of `team`.
NG_HD int64_t group_col0(int team, int k, int t) {
  return static_cast<int64_t>(kGroup) * (static_cast<int64_t>(k) * team + t);
}

/// floor((2^64 - 1) / d) + 1 for 2 <= d <= 2^32 (d = 1 would wrap to 0):
/// the magic of div_by_magic, 2^64/d + e with 0 <= e <= 1 (e = 0 when d
/// divides 2^64). Per-head views divide row indices by heads with it; one
/// 64-bit division, so compute it once per thread, not per row.
NG_HD uint64_t heads_magic(int64_t heads) { return ~uint64_t{0} / static_cast<uint64_t>(heads) + 1; }

/// r / d for 0 <= r < 2^32 and 2 <= d <= 2^32, as the high word of r *
/// heads_magic(d): with magic = 2^64/d + e, 0 <= e <= 1, r*magic/2^64 exceeds
/// r/d by less than 2^-32 <= 1/d, too little to reach the next integer
/// (rows <= kMaxT = 2^32, so every row index qualifies).
NG_HD uint64_t div_by_magic(uint64_t r, uint64_t magic) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(r, magic);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(r) * magic) >> 64);
#endif
}

}  // namespace normgate::kernels
