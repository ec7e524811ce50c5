// bench/fwd_rows.cuh: a forward experiment for kernels_bench --fwd-rows R (not
// a variant; nothing routes it). fwd_rowwise's simple kernel (pipeline.h
// fwd_simple: plan.h's row geometry, the row held in registers) with each
// team working on R adjacent rows at once instead of one: every load of the
// R rows is issued before the first sum (R x the bytes in flight per thread),
// the R team sums share one barrier, the team's first warp computes the R
// rstds (their FP64 sequences interleave), and the weights are loaded once
// for the R rows. Per row the arithmetic is fwd_rowwise's in the same order
// (the thread's groups slot-ascending into a binary64 sum, team_sum_publish /
// team_sum_collect, row_rstd_fp64, store_y_group), so y, rstd and msq must be
// bitwise fwd_rowwise's: kernels_bench counts the rows that differ (expected
// 0). Why: a one-row team spends its CTA's life after the load on the team
// sum, two barriers and the binary64 rstd, with no load in flight (per-row
// work, not DRAM, bounds the forward: docs/perf/forward.md, D6); TC's forward
// keeps two rows per program (forward.md, "Tried and rejected": two-pass L2
// forward). Results: docs/perf/forward.md#open-leads (R rows per team).
// Vector path only (H % 8 == 0, 16-byte aligned rows), plain rows.
//
// Three more knobs (kernels_bench --fwd-rows R:S:B:F), for the issue-bound
// forward (docs/perf/forward.md, "Current numbers": ours issues 1.37x TC's
// instructions at 75% occupancy where TC runs 100%):
//  S  column groups of 8 per thread (0: plan.h's row_geometry), the team
//     then roundup(ceil(H/8/S), 32): more columns per thread amortize the
//     per-row work (butterfly, barriers, rstd) over more elements. Another S
//     sums the row in another order, so msq (and, rarely, rstd) may differ.
//  B  __launch_bounds__(512, B) (0: none): B = 4 caps the kernel at 32
//     registers, 100% occupancy at 2048 threads per SM.
//  F  1: the sum of squares in FP32 per thread (one binary64 conversion per
//     thread and row instead of one per element), a bound on what the
//     per-element binary64 arithmetic costs; its rstd is not the correctly
//     rounded one, so rows differ by design.
// and a fifth, R:S:B:F:P, for the short-T forward (docs/perf/forward.md,
// Open leads, "Short T": suspect (2), w after the barrier):
//  P  1: the thread's weights loaded (and widened) right after its x, before
//     the sum and the barrier, and held in registers (8 floats a slot), so
//     no load follows the rstd; 0 (absent): after the barrier, as
//     fwd_rowwise does. The same arithmetic: rows bitwise fwd_rowwise's.
// and a sixth, R:S:B:F:P:K, for the long-T plain forward (forward.md, Tried
// and rejected, "Cache hints on the loads and y stores"): K the loads' and
// y stores' cache hints of
// bench/cache_hints.cuh (0: the variants' instructions). The same
// arithmetic: rows bitwise fwd_rowwise's.
#pragma once

#include "cache_hints.cuh"
#include "device_blocks.cuh"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/rstd.h"

namespace fwdrows {

using normgate::kernels::dev::Group8;

template <int kRows, int kSlots, int kMinB, int kF32, class WT, int kPreW = 0, int kHint = 0>
__global__ void __launch_bounds__(512, (kMinB > 0 ? kMinB : 1)) fwd_rows_kernel(const __nv_bfloat16* __restrict__ x, const WT* __restrict__ w,
                                                       __nv_bfloat16* __restrict__ y, float* __restrict__ rstd,
                                                       double* __restrict__ msq, int64_t T, int H, int team,
                                                       double inv_h, double eps) {
  namespace dv = normgate::kernels::dev;
  __shared__ double red[kRows][32];
  __shared__ float rs_sh[kRows][32];
  const int teams = static_cast<int>(blockDim.x) / team;
  const int ti = static_cast<int>(threadIdx.x) / team;
  const int t = static_cast<int>(threadIdx.x) % team;
  const int first_warp = ti * (team >> 5);
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * teams + ti) * kRows;
  int col0[kSlots];
  Group8 cur[kRows][kSlots];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) col0[k] = static_cast<int>(normgate::kernels::group_col0(team, k, t));
#pragma unroll
  for (int q = 0; q < kRows; ++q) {
    const bool live = r0 + q < T;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      cur[q][k].u = make_uint4(0u, 0u, 0u, 0u);
      if (live) {
        if constexpr (kHint == 0)
          cur[q][k] = dv::load_group(x + (r0 + q) * static_cast<int64_t>(H), col0[k], H, true);
        else if (col0[k] < H)  // load_group's guard: a last slot may reach past the row
          cur[q][k] = benchhints::hint_load<kHint>(x + (r0 + q) * static_cast<int64_t>(H) + col0[k]);
      }
    }
  }
  // P = 1: the weights now, in flight beside x (held to the stores).
  float wpre[kPreW ? kSlots : 1][8];
  if constexpr (kPreW != 0) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) dv::load_weights(w, col0[k], H, true, wpre[k]);
  }
  double tot[kRows];
#pragma unroll
  for (int q = 0; q < kRows; ++q) {
    double ss = 0.0;
    if constexpr (kF32 != 0) {
      float s32 = 0.0f;
#pragma unroll
      for (int k = 0; k < kSlots; ++k)
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float v = dv::group_at(cur[q][k], e);
          s32 = __fmaf_rn(v, v, s32);
        }
      ss = static_cast<double>(s32);
    } else {
#pragma unroll
      for (int k = 0; k < kSlots; ++k) ss = dv::add_squares(cur[q][k], ss);
    }
    tot[q] = dv::team_sum_publish(ss, red[q]);
  }
  float rs[kRows];
  if (team > 32) {
    __syncthreads();
    if (static_cast<int>(threadIdx.x >> 5) == first_warp) {  // warp-uniform: the team's first warp
#pragma unroll
      for (int q = 0; q < kRows; ++q) tot[q] = dv::team_sum_collect(red[q], team, first_warp);
#pragma unroll
      for (int q = 0; q < kRows; ++q) {
        if (msq != nullptr && r0 + q < T && (threadIdx.x & 31u) == 0u)
          msq[r0 + q] = normgate::kernels::row_m(tot[q], inv_h, eps);
        const float v = normgate::kernels::row_rstd_fp64(tot[q], inv_h, eps);
        if ((threadIdx.x & 31u) == 0u) rs_sh[q][ti] = v;
      }
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kRows; ++q) rs[q] = rs_sh[q][ti];
  } else {
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      if (msq != nullptr && r0 + q < T && t == 0) msq[r0 + q] = normgate::kernels::row_m(tot[q], inv_h, eps);
      rs[q] = normgate::kernels::row_rstd_fp64(tot[q], inv_h, eps);
    }
  }
  if (t == 0) {
#pragma unroll
    for (int q = 0; q < kRows; ++q)
      if (r0 + q < T) rstd[r0 + q] = rs[q];
  }
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    float wv[8];
    if constexpr (kPreW != 0) {
#pragma unroll
      for (int e = 0; e < 8; ++e) wv[e] = wpre[k][e];
    } else {
      dv::load_weights(w, col0[k], H, true, wv);
    }
#pragma unroll
    for (int q = 0; q < kRows; ++q)
      if (r0 + q < T) {
        if constexpr (kHint == 0)
          dv::store_y_group(y + (r0 + q) * static_cast<int64_t>(H), col0[k], H, true, cur[q][k], rs[q], wv);
        else if (col0[k] < H)  // store_y_group's guard
          benchhints::hint_store_y<kHint>(y + (r0 + q) * static_cast<int64_t>(H) + col0[k], cur[q][k], rs[q], wv);
      }
  }
}

/// One experiment setting (kernels_bench --fwd-rows R:S:B:F; see the file comment).
struct RowsSetting {
  int rows = 2;   ///< R: rows per team
  int slots = 0;  ///< S: groups of 8 per thread (0: plan.h's)
  int min_b = 0;  ///< B: __launch_bounds__ minimum blocks (0: none)
  int f32 = 0;    ///< F: 1 = FP32 sum of squares per thread
  int prew = 0;   ///< P: 1 = the weights loaded before the barrier
  int hint = 0;   ///< K: cache hints (bench/cache_hints.cuh), 0 = none
};

/// The settings this file instantiates, as "R:S:B:F", "R:S:B:F:P" or "R:S:B:F:P:K"
/// (kernels_bench checks --fwd-rows against it).
inline const char* const kRowsSettings[] = {"1:0:0:0", "1:1:0:0", "1:2:0:0", "1:4:0:0", "2:0:0:0", "2:1:0:0",
                                            "2:2:0:0", "2:4:0:0", "4:0:0:0", "4:1:0:0", "4:2:0:0", "1:1:4:0",
                                            "1:2:4:0", "2:1:4:0", "1:0:0:1", "1:2:0:1", "1:4:0:1", "2:2:0:1",
                                            "1:1:0:0:1", "1:2:0:0:1", "1:4:0:0:1",
                                            "1:4:0:0:0:1", "1:4:0:0:0:2", "1:4:0:0:0:3", "1:4:0:0:0:4",
                                            "1:2:0:0:0:2", "1:2:0:0:0:4"};

template <int R, int S, int B, int F, class WT, int P = 0, int K = 0>
void launch_rows_kernel(unsigned g, int block, const __nv_bfloat16* x, const WT* w, __nv_bfloat16* y, float* rstd,
                        double* msq, int64_t T, int H, int team, double inv_h, double eps, cudaStream_t s) {
  fwd_rows_kernel<R, S, B, F, WT, P, K><<<g, block, 0, s>>>(x, w, y, rstd, msq, T, H, team, inv_h, eps);
}

/// Launch on stream s for [T, H] contiguous rows (H % 8 == 0, a team of at
/// most 512 threads) with setting st (one of kRowsSettings, S resolved).
/// Returns false (nothing launched) for a shape or setting it does not cover.
template <class WT>
bool launch_fwd_rows(RowsSetting st, const uint16_t* x, const void* w, uint16_t* y, float* rstd, double* msq,
                     int64_t T, int H, float eps, cudaStream_t s) {
  const normgate::kernels::RowGeometry geo = normgate::kernels::row_geometry(H);
  if (H % 8 != 0) return false;
  const int slots = st.slots == 0 ? geo.slots : st.slots;
  const int nvec = H / 8;
  const int team = st.slots == 0 ? geo.team : ((nvec + slots - 1) / slots + 31) / 32 * 32;
  if (team > 512 || (slots > 1 && team * (slots - 1) >= nvec)) return false;  // no empty slot
  const int teams = team >= 256 ? 1 : 256 / team;
  const int block = team * teams;
  const int64_t per_cta = static_cast<int64_t>(teams) * st.rows;
  const int64_t ctas = (T + per_cta - 1) / per_cta;
  if (ctas == 0) return true;
  if (ctas > 0x7FFFFFFF) return false;
  auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  auto* wt = static_cast<const WT*>(w);
  auto* yb = reinterpret_cast<__nv_bfloat16*>(y);
  const double inv_h = 1.0 / static_cast<double>(H), e64 = static_cast<double>(eps);
  const unsigned g = static_cast<unsigned>(ctas);
  const int key = st.hint * 100000 + st.prew * 10000 + st.rows * 1000 + slots * 100 + st.min_b * 10 + st.f32;
  switch (key) {
#define NG_ROWS_CASE(R, S, B, F) \
  case R * 1000 + S * 100 + B * 10 + F: \
    launch_rows_kernel<R, S, B, F, WT>(g, block, xb, wt, yb, rstd, msq, T, H, team, inv_h, e64, s); \
    return true;
    NG_ROWS_CASE(1, 1, 0, 0)
    NG_ROWS_CASE(1, 2, 0, 0)
    NG_ROWS_CASE(1, 4, 0, 0)
    NG_ROWS_CASE(2, 1, 0, 0)
    NG_ROWS_CASE(2, 2, 0, 0)
    NG_ROWS_CASE(2, 4, 0, 0)
    NG_ROWS_CASE(4, 1, 0, 0)
    NG_ROWS_CASE(4, 2, 0, 0)
    NG_ROWS_CASE(1, 1, 4, 0)
    NG_ROWS_CASE(1, 2, 4, 0)
    NG_ROWS_CASE(2, 1, 4, 0)
    NG_ROWS_CASE(1, 1, 0, 1)
    NG_ROWS_CASE(1, 2, 0, 1)
    NG_ROWS_CASE(1, 4, 0, 1)
    NG_ROWS_CASE(2, 2, 0, 1)
#undef NG_ROWS_CASE
#define NG_ROWS_PREW(R, S) \
  case 10000 + R * 1000 + S * 100: \
    launch_rows_kernel<R, S, 0, 0, WT, 1>(g, block, xb, wt, yb, rstd, msq, T, H, team, inv_h, e64, s); \
    return true;
    NG_ROWS_PREW(1, 1)
    NG_ROWS_PREW(1, 2)
    NG_ROWS_PREW(1, 4)
#undef NG_ROWS_PREW
#define NG_ROWS_HINT(R, S, K) \
  case K * 100000 + R * 1000 + S * 100: \
    launch_rows_kernel<R, S, 0, 0, WT, 0, K>(g, block, xb, wt, yb, rstd, msq, T, H, team, inv_h, e64, s); \
    return true;
    NG_ROWS_HINT(1, 4, 1)
    NG_ROWS_HINT(1, 4, 2)
    NG_ROWS_HINT(1, 4, 3)
    NG_ROWS_HINT(1, 4, 4)
    NG_ROWS_HINT(1, 2, 2)
    NG_ROWS_HINT(1, 2, 4)
#undef NG_ROWS_HINT
    default:
      return false;
  }
}

}  // namespace fwdrows
