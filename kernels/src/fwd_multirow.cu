// kernels/src/fwd_multirow.cu: variant fwd_multirow (forward, deterministic).
//
// fwd_rowwise's per-row arithmetic on fwd_rowwise's row geometry (plan.h:
// team, slots, each thread's columns, the reduction tree; rstd.h: the
// binary64 sum of squares and the FP32 rstd nearest to 1/sqrt(m)), so y,
// rstd and msq are bitwise fwd_rowwise's, and its CPU model is fwd_rowwise's
// (model_fwd_rowwise.cpp). What differs is how rows reach the registers:
// short CTAs of max(1, 256/team) teams (fwd_rowwise's simple kernel's shape),
// each team normalizing R = fwd_multirow_rows(H) rows (multirow.h: 8, 4 or 2)
// and issuing the loads of all R rows straight into registers before it
// reduces any, so each thread has R x slots 16-byte loads in flight (2x for
// form res: h and u) instead of slots. Every form takes this path: plain
// rows, form res fused (h_new = BF16(h + u) formed in registers, stored, and
// normalized: sum_group, as fwd_rowwise's fused path), and the per-head
// views (row r = t*heads + h at t*stride + h*stride_h, one shared w[256]),
// which fwd_rowwise sends through its shared-memory ring. The scalar path
// (H % 8 != 0, or rows and w not 16-byte aligned) is the same kernel with
// load_group's guarded 2-byte loads.
//
// Per row, as fwd_rowwise (device_blocks.cuh, rstd.h):
//   ss  = fma(x, x, ss) in binary64 over the thread's columns (slot k
//         ascending, then column ascending);
//   the warp butterfly of ss (offsets 16..1), then for teams of more than
//   one warp: lane l of one warp takes warp l's total of the team (0 for
//   l >= team/32) and butterflies again (the same sums in the same order:
//   which warp of the team does it does not change the bits);
//   rstd = row_rstd_fp64(total, 1/H, eps), m = row_m(total, 1/H, eps);
//   y    = BF16_rn((x * rstd) * w).
// The R rows of a team share one barrier pair: every warp publishes its R
// warp totals, one __syncthreads, then warp q of the team finishes rows
// j = q, q + warps, ... (collect, rstd, msq) and hands rstd over in shared
// memory behind the second __syncthreads. Teams of one warp (H <= 256) need
// no barrier. Rows past the end load zeros, take part in the barriers and
// write nothing.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "device_blocks.cuh"
#include "launch.h"
#include "normgate/kernels/multirow.h"
#include "normgate/kernels/rstd.h"

namespace normgate::kernels {
namespace dev {
namespace {

/// The most teams one CTA holds (256 threads of 32-thread teams).
constexpr int kMultirowMaxTeams = 8;

template <class WT, bool kHeads>
struct MultirowArgs {
  Rows<const __nv_bfloat16, kHeads> x{nullptr, 0};  ///< form res: h
  const WT* w = nullptr;
  Rows<__nv_bfloat16, kHeads> y{nullptr, 0};
  float* rstd = nullptr;
  double* msq = nullptr;  ///< optional [rows] (FwdArgs::msq)
  Rows<const __nv_bfloat16> u{nullptr, 0};  ///< form res: the residual branch
  Rows<__nv_bfloat16> h_new{nullptr, 0};    ///< form res: BF16(h + u), written here
  int64_t rows = 0;  ///< normalized rows (T * heads)
  int H = 0;
  int team = 32;
  bool vec = false;
  double inv_h = 0;  ///< 1.0 / H, correctly rounded (rstd.h, as the CPU model)
  double eps64 = 0;  ///< eps as binary64 (exact)
};

/// h_new = BF16(h + u) of one group (sum_group: one rounding of each exact sum).
__device__ __forceinline__ Group8 add_residual_group(const Group8& h, const Group8& u) {
  float hf[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) hf[e] = group_at(h, e);
  return sum_group(hf, u);
}

// Launch bounds: one slot, CTAs of at most 256 threads; two slots, one team
// per CTA of up to kMaxTeam threads (64 registers per thread).
template <int kSlots, int kR, class WT, bool kHeads, bool kRes>
__global__ void __launch_bounds__(kSlots == 1 ? 256 : kMaxTeam)
    fwd_multirow_kernel(const MultirowArgs<WT, kHeads> a) {
  static_assert(!(kRes && kHeads), "the fused residual form has plain rows");
  __shared__ double red[kR][32];                 // [row j][warp of the CTA]: warp totals
  __shared__ float rs_sh[kR][kMultirowMaxTeams];  // [row j][team]: rstd handed to the team
  const int team = a.team;
  const int teams = static_cast<int>(blockDim.x) / team;
  const int ti = static_cast<int>(threadIdx.x) / team;
  const int t = static_cast<int>(threadIdx.x) % team;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warps = team >> 5;         // warps per team
  const int first_warp = ti * warps;   // the team's first warp in the CTA
  const int wq = t >> 5;               // this warp's index within its team

  // Weights stay in registers for the CTA's rows with one slot; with two
  // (teams of up to 1024 threads at 64 registers) they are re-read from L1
  // per row, as fwd_rowwise's simple kernel does.
  constexpr bool kCacheW = kSlots == 1;
  int col0[kSlots];
  float w[kCacheW ? kSlots : 1][8];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    col0[k] = static_cast<int>(group_col0(team, k, t));
    if constexpr (kCacheW) load_weights(a.w, col0[k], a.H, a.vec, w[k]);
  }
  const uint64_t hm = kHeads ? heads_magic(a.x.heads) : 0;
  const int64_t per_cta = static_cast<int64_t>(teams) * kR;
  // One trip unless the grid was capped at 2^31 - 1 CTAs; the trip count is
  // uniform across the CTA (base is), so every thread meets every barrier.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_cta; base < a.rows;
       base += static_cast<int64_t>(gridDim.x) * per_cta) {
    // Every load of the team's R rows first (x, and u for form res).
    Group8 cur[kR][kSlots];
    Group8 uu[kRes ? kR : 1][kSlots];
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      const int64_t r = base + static_cast<int64_t>(j) * teams + ti;
      const bool live = r < a.rows;
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        cur[j][k].u = make_uint4(0u, 0u, 0u, 0u);
        if (live) cur[j][k] = load_group(a.x.row(r, hm), col0[k], a.H, a.vec);
        if constexpr (kRes) {
          uu[j][k].u = make_uint4(0u, 0u, 0u, 0u);
          if (live) uu[j][k] = load_group(a.u.row(r), col0[k], a.H, a.vec);
        }
      }
    }
    if constexpr (kRes) {  // cur = h_new = BF16(h + u), stored at once
#pragma unroll
      for (int j = 0; j < kR; ++j) {
        const int64_t r = base + static_cast<int64_t>(j) * teams + ti;
#pragma unroll
        for (int k = 0; k < kSlots; ++k) {
          cur[j][k] = add_residual_group(cur[j][k], uu[j][k]);
          if (r < a.rows) store_group_bits(a.h_new.row(r), col0[k], a.H, a.vec, cur[j][k]);
        }
      }
    }
    // Sums of squares and their warp totals, row by row (independent rows: ILP).
    double tot[kR];
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      double ss = 0.0;
#pragma unroll
      for (int k = 0; k < kSlots; ++k) ss = add_squares(cur[j][k], ss);
      tot[j] = warp_sum(ss);
    }
    float rs[kR];
    if (team <= 32) {  // uniform: the warp total is the team total
#pragma unroll
      for (int j = 0; j < kR; ++j) {
        const int64_t r = base + static_cast<int64_t>(j) * teams + ti;
        if (a.msq != nullptr && lane == 0 && r < a.rows) a.msq[r] = row_m(tot[j], a.inv_h, a.eps64);
        rs[j] = row_rstd_fp64(tot[j], a.inv_h, a.eps64);
      }
    } else {
      if (lane == 0) {
#pragma unroll
        for (int j = 0; j < kR; ++j) red[j][threadIdx.x >> 5] = tot[j];
      }
      __syncthreads();
      // Warp wq of the team finishes rows wq, wq + warps, ... (warp-uniform loop).
      for (int j = wq; j < kR; j += warps) {
        const double s = warp_sum(lane < warps ? red[j][first_warp + lane] : 0.0);
        const int64_t r = base + static_cast<int64_t>(j) * teams + ti;
        if (lane == 0) {
          if (a.msq != nullptr && r < a.rows) a.msq[r] = row_m(s, a.inv_h, a.eps64);
          rs_sh[j][ti] = row_rstd_fp64(s, a.inv_h, a.eps64);
        }
      }
      __syncthreads();
#pragma unroll
      for (int j = 0; j < kR; ++j) rs[j] = rs_sh[j][ti];
    }
    // rstd and y of the live rows.
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      const int64_t r = base + static_cast<int64_t>(j) * teams + ti;
      if (r >= a.rows) continue;
      if (t == 0) a.rstd[r] = rs[j];
      __nv_bfloat16* yr = a.y.row(r, hm);
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        if constexpr (kCacheW) {
          store_y_group(yr, col0[k], a.H, a.vec, cur[j][k], rs[j], w[k]);
        } else {
          float wk[8];
          load_weights(a.w, col0[k], a.H, a.vec, wk);
          store_y_group(yr, col0[k], a.H, a.vec, cur[j][k], rs[j], wk);
        }
      }
    }
  }
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_fwd_multirow(const FwdArgs& a, bool vec, Stream s) {
  const RowGeometry geo = row_geometry(a.H);
  const int R = fwd_multirow_rows(a.H);
  const int teams = fwd_multirow_teams(a.H);
  if (teams > dev::kMultirowMaxTeams)
    throw std::logic_error("fwd_multirow: " + std::to_string(teams) + " teams per CTA (at most 8)");
  const int block = geo.team * teams;
  const int64_t rows = a.T * a.heads;  // normalized rows
  const int64_t per_cta = static_cast<int64_t>(teams) * R;
  const int64_t need = (rows + per_cta - 1) / per_cta;
  const unsigned grid = static_cast<unsigned>(need < 0x7FFFFFFF ? need : 0x7FFFFFFF);  // the kernel strides beyond
  auto go = [&](auto wtag) {
    using WT = decltype(wtag);
    auto args = [&](auto heads_tag) {
      constexpr bool kHeads = decltype(heads_tag)::value;
      dev::MultirowArgs<WT, kHeads> f;
      f.x = {reinterpret_cast<const __nv_bfloat16*>(a.x), a.x_stride, a.heads, a.x_stride_h};
      f.w = static_cast<const WT*>(a.w.p);
      f.y = {reinterpret_cast<__nv_bfloat16*>(a.y), a.y_stride, a.heads, a.y_stride_h};
      f.rstd = a.rstd;
      f.msq = a.msq;
      f.rows = rows;
      f.H = static_cast<int>(a.H);
      f.team = geo.team;
      f.vec = vec;
      f.inv_h = 1.0 / static_cast<double>(a.H);  // rstd.h, as the CPU model
      f.eps64 = static_cast<double>(a.eps);
      return f;
    };
    auto run = [&](auto slots_tag, auto rows_tag) {
      constexpr int kS = decltype(slots_tag)::value;
      constexpr int kR = decltype(rows_tag)::value;
      if (a.heads > 1) {  // per-head views: H = 256 (validated): one slot, R = 8
        if constexpr (kS == 1 && kR == 8) {
          dev::fwd_multirow_kernel<kS, kR, WT, true, false><<<grid, block, 0, s>>>(args(std::true_type{}));
        } else {
          throw std::invalid_argument("fwd_multirow: per-head rows need H = 256 (one slot, R = 8)");
        }
        return;
      }
      dev::MultirowArgs<WT, false> f = args(std::false_type{});
      if (a.form == Form::res) {  // x is h; u read beside it; h_new written here
        f.u = {reinterpret_cast<const __nv_bfloat16*>(a.u), a.u_stride};
        f.h_new = {reinterpret_cast<__nv_bfloat16*>(a.h_new), a.h_new_stride};
        dev::fwd_multirow_kernel<kS, kR, WT, false, true><<<grid, block, 0, s>>>(f);
      } else {
        dev::fwd_multirow_kernel<kS, kR, WT, false, false><<<grid, block, 0, s>>>(f);
      }
    };
    if (geo.slots == 1 && R == 8)
      run(std::integral_constant<int, 1>{}, std::integral_constant<int, 8>{});
    else if (geo.slots == 1 && R == 4)
      run(std::integral_constant<int, 1>{}, std::integral_constant<int, 4>{});
    else if (geo.slots == 2 && R == 2)
      run(std::integral_constant<int, 2>{}, std::integral_constant<int, 2>{});
    else
      throw std::logic_error("fwd_multirow: no kernel for slots = " + std::to_string(geo.slots) +
                             ", R = " + std::to_string(R));
  };
  if (a.w.dtype == WDtype::fp32)
    go(float{});
  else
    go(__nv_bfloat16{});
  NG_CUDA_LAUNCHED("fwd_multirow_kernel");
}

}  // namespace detail
}  // namespace normgate::kernels
