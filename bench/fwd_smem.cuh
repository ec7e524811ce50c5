// bench/fwd_smem.cuh: a forward experiment behind kernels_bench
// --fwd-smem S:B (not a variant; nothing routes it). The geometry and the
// arithmetic of bench/fwd_rows.cuh at R = 1 (one row a team, S groups of 8
// a thread, teams of roundup(ceil(H/8/S), 32), the same sums in the same
// order, so y, rstd and msq are bitwise fwd_rows 1:S's), but the row is
// not held in registers: each thread copies its S groups into its own
// shared-memory slots with cp.async (16 bytes each, global -> L2 ->
// shared), waits for its own copies, sums the squares from shared memory,
// and after the team's rstd reads them again to normalize. Only the thread
// that issued a copy reads its slot, so no barrier orders them.
// Why (docs/perf/forward.md, Open leads, "Short T"): the forward's
// profiles beside TC's (short T, the per-head views) find TC holding 1.4x
// the resident warps at 31-32 registers a thread, where ours hold the row
// (4 registers a group) at 40-48; a bound of 32 registers spills (D12).
// Staged rows cost shared memory instead (S x 16 bytes a thread: 16 KiB a
// CTA of 256 at S = 4, eight CTAs an SM in 128 KiB).
//  S  groups of 8 a thread: 2 or 4
//  B  __launch_bounds__(256, B): 0 none, 8 (32 registers: 8 CTAs of 256)
// Vector path only (H % 8 == 0, 16-byte aligned rows), plain rows.
#pragma once

#include <string>

#include "device_blocks.cuh"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/rstd.h"

namespace fwdsmem {

using normgate::kernels::dev::Group8;

constexpr int kCta = 256;  // threads a CTA (teams of up to 256)

template <int kSlots, int kMinB, class WT>
__global__ void __launch_bounds__(kCta, (kMinB > 0 ? kMinB : 1))
    fwd_smem_kernel(const __nv_bfloat16* __restrict__ x, const WT* __restrict__ w, __nv_bfloat16* __restrict__ y,
                    float* __restrict__ rstd, double* __restrict__ msq, int64_t T, int H, int team, double inv_h,
                    double eps) {
  namespace dv = normgate::kernels::dev;
  __shared__ uint4 xs[kSlots * kCta];  // [slot][thread of the CTA]: this thread's staged groups
  __shared__ double red[kCta / 32];
  __shared__ float rs_sh[kCta / 32];
  const int teams = static_cast<int>(blockDim.x) / team;
  const int ti = static_cast<int>(threadIdx.x) / team;
  const int t = static_cast<int>(threadIdx.x) % team;
  const int first_warp = ti * (team >> 5);
  const int64_t r = static_cast<int64_t>(blockIdx.x) * teams + ti;
  const bool live = r < T;
  const __nv_bfloat16* xr = x + (live ? r : 0) * static_cast<int64_t>(H);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int c = static_cast<int>(normgate::kernels::group_col0(team, k, t));
    uint4* slot = &xs[k * kCta + threadIdx.x];
    if (live && c < H)
      dv::cp_async16(slot, xr + c);
    else
      *slot = make_uint4(0u, 0u, 0u, 0u);
  }
  dv::cp_async_commit();
  dv::cp_async_wait_pending(0);
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    Group8 g;
    g.u = xs[k * kCta + threadIdx.x];
    ss = dv::add_squares(g, ss);
  }
  ss = dv::team_sum_publish(ss, red);
  float rs;
  if (team > 32) {
    __syncthreads();
    if (static_cast<int>(threadIdx.x >> 5) == first_warp) {  // warp-uniform: the team's first warp
      const double s = dv::team_sum_collect(red, team, first_warp);
      if ((threadIdx.x & 31u) == 0u) {
        if (msq != nullptr && live) msq[r] = normgate::kernels::row_m(s, inv_h, eps);
        rs_sh[ti] = normgate::kernels::row_rstd_fp64(s, inv_h, eps);
      }
    }
    __syncthreads();
    rs = rs_sh[ti];
  } else {
    if (msq != nullptr && live && t == 0) msq[r] = normgate::kernels::row_m(ss, inv_h, eps);
    rs = normgate::kernels::row_rstd_fp64(ss, inv_h, eps);
    asm volatile("" ::: "memory");  // read the slots again below, not registers kept from the sum
  }
  if (!live) return;
  if (t == 0) rstd[r] = rs;
  __nv_bfloat16* yr = y + r * static_cast<int64_t>(H);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int c = static_cast<int>(normgate::kernels::group_col0(team, k, t));
    if (c >= H) continue;
    Group8 g;
    g.u = xs[k * kCta + threadIdx.x];
    float wv[8];
    dv::load_weights(w, c, H, true, wv);
    dv::store_y_group(yr, c, H, true, g, rs, wv);
  }
}

/// One setting (kernels_bench --fwd-smem S:B).
struct SmemSetting {
  int slots = 4;
  int min_b = 0;
  std::string name() const { return std::to_string(slots) + ":" + std::to_string(min_b); }
};
inline const char* const kSmemSettings[] = {"2:0", "4:0", "2:8", "4:8"};

/// Launch on stream s for [T, H] contiguous rows (H % 8 == 0, 16-byte
/// aligned), fwd_rows 1:S's geometry. Returns false (nothing launched) for a
/// shape or setting it does not cover.
template <class WT>
bool launch_fwd_smem(SmemSetting st, const uint16_t* x, const void* w, uint16_t* y, float* rstd, double* msq,
                     int64_t T, int H, float eps, cudaStream_t s) {
  if (H % 8 != 0) return false;
  const int slots = st.slots, nvec = H / 8;
  const int team = ((nvec + slots - 1) / slots + 31) / 32 * 32;
  if (team > kCta || (slots > 1 && team * (slots - 1) >= nvec)) return false;  // no empty slot
  const int teams = kCta / team;
  const int64_t ctas = (T + teams - 1) / teams;
  if (ctas == 0) return true;
  if (ctas > 0x7FFFFFFF) return false;
  auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  auto* wt = static_cast<const WT*>(w);
  auto* yb = reinterpret_cast<__nv_bfloat16*>(y);
  const double inv_h = 1.0 / static_cast<double>(H), e64 = static_cast<double>(eps);
  const unsigned g = static_cast<unsigned>(ctas);
  const int block = team * teams;
  switch (slots * 10 + st.min_b) {
    case 20: fwd_smem_kernel<2, 0, WT><<<g, block, 0, s>>>(xb, wt, yb, rstd, msq, T, H, team, inv_h, e64); return true;
    case 40: fwd_smem_kernel<4, 0, WT><<<g, block, 0, s>>>(xb, wt, yb, rstd, msq, T, H, team, inv_h, e64); return true;
    case 28: fwd_smem_kernel<2, 8, WT><<<g, block, 0, s>>>(xb, wt, yb, rstd, msq, T, H, team, inv_h, e64); return true;
    case 48: fwd_smem_kernel<4, 8, WT><<<g, block, 0, s>>>(xb, wt, yb, rstd, msq, T, H, team, inv_h, e64); return true;
    default: return false;
  }
}

}  // namespace fwdsmem
