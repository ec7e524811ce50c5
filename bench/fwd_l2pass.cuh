// bench/fwd_l2pass.cuh: a forward experiment for kernels_bench --fwd-exp (not
// a variant; nothing routes it). TC's forward shape (docs/perf/forward.md,
// "Tried and rejected": two-pass L2 forward): CTAs of 512 threads, a team of
// min(roundup(H/8, 32), 256) threads per row (so 2..16 rows per CTA), the row
// NOT kept in registers: pass 1 loads each of the thread's 16-byte groups,
// adds its squares to the binary64 sum and drops it; after the team sum and
// rstd (rstd.h, as fwd_rowwise), pass 2 loads the groups again (from L2:
// evict-first loads) and writes y. Few registers, full occupancy, many
// short-lived CTAs (docs/perf/peers.md, D2: a one-tile-per-CTA copy moves
// 4.26-4.28 TB/s). Vector path only (H % 8 == 0, 16-byte aligned rows). Its
// sum of squares has the rounding tree of its own geometry; with rstd the
// nearest FP32 value of a binary64 m its bits equal fwd_rowwise's except in
// rows where the two sums' last-bit difference straddles a rounding boundary
// (~1e-7 of rows): kernels_bench counts them.
#pragma once

#include "device_blocks.cuh"
#include "normgate/kernels/rstd.h"

namespace fwdexp {

using normgate::kernels::dev::Group8;

inline int team_for(int H) {
  const int nvec = H / 8;
  const int t = (nvec + 31) / 32 * 32;
  return t < 256 ? t : 256;
}

template <class WT>
__global__ void __launch_bounds__(512) fwd_l2pass_kernel(const __nv_bfloat16* __restrict__ x, const WT* __restrict__ w,
                                                          __nv_bfloat16* __restrict__ y, float* __restrict__ rstd,
                                                          int64_t T, int H, int team, double inv_h, double eps) {
  namespace dv = normgate::kernels::dev;
  __shared__ double red[16];  // one per warp of the 512-thread CTA
  const int teams = static_cast<int>(blockDim.x) / team;
  const int ti = static_cast<int>(threadIdx.x) / team;
  const int t = static_cast<int>(threadIdx.x) % team;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * teams + ti;
  const bool live = r < T;
  const int nvec = H / 8;
  const uint4* xr = reinterpret_cast<const uint4*>(x + (live ? r : 0) * static_cast<int64_t>(H));
  double ss = 0.0;
  if (live) {
    for (int g = t; g < nvec; g += team) {  // group k*team + t, k ascending (plan.h's slot order)
      Group8 v;
      v.u = __ldg(xr + g);
      ss = dv::add_squares(v, ss);
    }
  }
  const double tot = dv::team_sum(ss, red, team, ti * (team >> 5));
  if (!live) return;
  const float rs = normgate::kernels::row_rstd_fp64(tot, inv_h, eps);
  if (t == 0) rstd[r] = rs;
  __nv_bfloat16* yr = y + r * static_cast<int64_t>(H);
  for (int g = t; g < nvec; g += team) {
    Group8 v;
    v.u = __ldcs(xr + g);  // the second read: from L2, evict first
    float wv[8];
    dv::load_weights(w, 8 * g, H, true, wv);
    dv::store_y_group(yr, 8 * g, H, true, v, rs, wv);
  }
}

/// Launch on stream s for [T, H] contiguous rows (H % 8 == 0, H <= 16384).
template <class WT>
void launch_fwd_l2pass(const uint16_t* x, const void* w, uint16_t* y, float* rstd, int64_t T, int H, float eps,
                       cudaStream_t s) {
  const int team = team_for(H);
  const int teams = 512 / team;
  const int64_t ctas = (T + teams - 1) / teams;
  if (ctas == 0) return;
  fwd_l2pass_kernel<WT><<<static_cast<unsigned>(ctas), 512, 0, s>>>(
      reinterpret_cast<const __nv_bfloat16*>(x), static_cast<const WT*>(w), reinterpret_cast<__nv_bfloat16*>(y), rstd, T,
      H, team, 1.0 / static_cast<double>(H), static_cast<double>(eps));
}

}  // namespace fwdexp
