// kernels/src/fwd_wide.cu: variant fwd_wide (forward, deterministic), plain
// rows and form res (fused), any H.
//
// Why (docs/perf/forward.md, D12): fwd_rowwise's forward spends most of its
// issue slots on per-row work (butterflies, barriers, the binary64 rstd)
// over 8 or 16 columns a thread; with 32 columns a thread (wide.h: up to
// four 8-column groups, teams of H/32 threads) the same work is spread over
// more elements, and one row per team keeps the registers low enough for
// five CTAs of 256 threads an SM.
//
// Geometry: wide.h (team, slots, columns; fwd_wide_geometry). CTAs of
// max(1, 256/team) teams, one row a team; every load of the row (and of u
// for form res) issued before its first sum, straight into registers.
// Per row, in this order (the CPU model, model_fwd_rowwise.cpp, repeats it):
//   form res: h_new = BF16(h + u) per element (sum_group: one rounding of
//          the exact sum), stored, and normalized in its place;
//   ss   = fma(x, x, ss) in binary64 over the thread's groups k ascending,
//          then the 8 columns ascending (x^2 is exact);
//   the warp butterfly of ss (xor offsets 16, 8, 4, 2, 1); for teams of
//          more than one warp, the warp totals go to shared memory and,
//          after one barrier, the team's first warp takes warp l's total in
//          lane l (0 for l >= team/32) and butterflies again;
//   rstd = row_rstd_fp64(ss, 1/H, eps) (rstd.h: the FP32 nearest to
//          1/sqrt(m), m = fma(ss, 1/H, eps)), m written to msq when given,
//          both by the first warp, rstd handed over in shared memory behind
//          a second barrier;
//   y    = BF16_rn((x * rstd) * w) (mul_rn twice), w read per group after
//          the barrier (L1 and L2 hold it).
// The sum associates differently from fwd_rowwise's (wide.h), so msq may
// differ in its last bit and rstd only for rows within about 2^-47 of an
// FP32 rounding boundary. The scalar path (H % 8 != 0, or rows, strides or
// w not 16-byte aligned) is the same kernel with load_group's guarded
// 2-byte loads. Rows past the end load zeros, take part in the barriers
// and write nothing. One CTA a group of rows, no grid-stride loop (a 2-D
// grid past 2^31 - 1 CTAs).
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "device_blocks.cuh"
#include "launch.h"
#include "normgate/kernels/rstd.h"
#include "normgate/kernels/wide.h"

namespace normgate::kernels {
namespace dev {
namespace {

constexpr int kWideCtaThreads = 256;                // threads a CTA when team <= 256
constexpr int kWideMaxTeams = kWideCtaThreads / 32;  // teams a CTA at most (teams of 32)

template <class WT>
struct WideArgs {
  Rows<const __nv_bfloat16> x{nullptr, 0};  ///< form res: h
  const WT* w = nullptr;
  Rows<__nv_bfloat16> y{nullptr, 0};
  float* rstd = nullptr;
  double* msq = nullptr;                    ///< optional [rows] (FwdArgs::msq)
  Rows<const __nv_bfloat16> u{nullptr, 0};  ///< form res: the residual branch
  Rows<__nv_bfloat16> h_new{nullptr, 0};    ///< form res: BF16(h + u), written here
  int64_t rows = 0;
  int H = 0;
  int team = 32;
  bool vec = false;
  double inv_h = 0;  ///< 1.0 / H, correctly rounded (rstd.h, as the CPU model)
  double eps64 = 0;  ///< eps as binary64 (exact)
};

// Teams of up to 512 threads (H <= 16384): one CTA.
// Registers (forward.md, D14): with no minimum of CTAs an SM, ptxas holds
// the four-slot plain FP32-w kernel at 40 registers and spills 12 bytes,
// 3.5-4.4% of its time at H = 2048-6144; a minimum of one CTA an SM lets it
// take 48 and spill nothing. Every other kernel keeps no minimum (ptxas
// reads 0 as none): the res kernels lose 4-11% at the 66 registers a
// minimum gives them, the three-slot plain FP32-w kernel (H = 1536) 4-5%
// at 44 registers (5 CTAs an SM where 40 fit 6).
template <int kSlots, class WT, bool kRes>
__global__ void __launch_bounds__(2 * kWideCtaThreads, std::is_same_v<WT, float> && !kRes && kSlots == 4 ? 1 : 0)
    fwd_wide_kernel(const WideArgs<WT> a) {
  __shared__ double red[2 * kWideCtaThreads / 32];  // [warp of the CTA]: warp totals
  __shared__ float rs_sh[kWideMaxTeams];           // [team]: rstd handed to the team
  const int team = a.team;
  const int teams = static_cast<int>(blockDim.x) / team;
  const int ti = static_cast<int>(threadIdx.x) / team;
  const int t = static_cast<int>(threadIdx.x) % team;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int first_warp = ti * (team >> 5);
  int col0[kSlots];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) col0[k] = static_cast<int>(group_col0(team, k, t));
  // One row a team, no loop: a grid-stride loop would let the compiler hoist
  // the weight loads out of it and hold up to 32 weights a thread in
  // registers across rows (98 instead of 48 registers at four slots). The
  // grid is 2-D when the CTAs exceed 2^31 - 1 (T up to kMaxT = 2^32 rows).
  const int64_t base = (static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * teams;
  if (base >= a.rows) return;  // uniform across the CTA (only in the 2-D grid's last row of CTAs)
  {
    const int64_t r = base + ti;
    const bool live = r < a.rows;
    Group8 cur[kSlots];
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      cur[k].u = make_uint4(0u, 0u, 0u, 0u);
      if (live) cur[k] = load_group(a.x.row(r), col0[k], a.H, a.vec);
    }
    if constexpr (kRes) {  // cur = h_new = BF16(h + u), stored at once
      Group8 uu[kSlots];
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        uu[k].u = make_uint4(0u, 0u, 0u, 0u);
        if (live) uu[k] = load_group(a.u.row(r), col0[k], a.H, a.vec);
      }
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        float hf[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) hf[e] = group_at(cur[k], e);
        cur[k] = sum_group(hf, uu[k]);
        if (live) store_group_bits(a.h_new.row(r), col0[k], a.H, a.vec, cur[k]);
      }
    }
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) ss = add_squares(cur[k], ss);
    ss = team_sum_publish(ss, red);
    float rs;
    if (team <= 32) {  // uniform: the warp total is the team total
      if (a.msq != nullptr && live && lane == 0) a.msq[r] = row_m(ss, a.inv_h, a.eps64);
      rs = row_rstd_fp64(ss, a.inv_h, a.eps64);
    } else {
      __syncthreads();
      if (static_cast<int>(threadIdx.x >> 5) == first_warp) {  // warp-uniform: the team's first warp
        const double s = team_sum_collect(red, team, first_warp);
        if (lane == 0) {
          if (a.msq != nullptr && live) a.msq[r] = row_m(s, a.inv_h, a.eps64);
          rs_sh[ti] = row_rstd_fp64(s, a.inv_h, a.eps64);
        }
      }
      __syncthreads();
      rs = rs_sh[ti];
    }
    if (live) {
      if (t == 0) a.rstd[r] = rs;
      __nv_bfloat16* yr = a.y.row(r);
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        float wk[8];
        load_weights(a.w, col0[k], a.H, a.vec, wk);
        store_y_group(yr, col0[k], a.H, a.vec, cur[k], rs, wk);
      }
    }
  }
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_fwd_wide(const FwdArgs& a, bool vec, Stream s) {
  if (a.heads > 1 || a.form == Form::heads24 || a.form == Form::heads4)
    throw std::invalid_argument("fwd_wide: plain rows or form res only (got form " + std::string(to_string(a.form)) +
                                ")");
  const RowGeometry geo = fwd_wide_geometry(a.H);
  const int teams = fwd_wide_teams(a.H);
  if (geo.team > 2 * dev::kWideCtaThreads || teams > dev::kWideMaxTeams || geo.slots < 1 ||
      geo.slots > kWideMaxSlots)
    throw std::logic_error("fwd_wide: no kernel for team " + std::to_string(geo.team) + ", slots " +
                           std::to_string(geo.slots));
  const int block = geo.team * teams;
  const int64_t rows = a.T;
  const int64_t need = (rows + teams - 1) / teams;
  if (need == 0) return;
  constexpr int64_t kMaxX = 0x7FFFFFFF;
  const dim3 grid(static_cast<unsigned>(need < kMaxX ? need : kMaxX), static_cast<unsigned>((need + kMaxX - 1) / kMaxX));
  auto go = [&](auto wtag) {
    using WT = decltype(wtag);
    dev::WideArgs<WT> f;
    f.x = {reinterpret_cast<const __nv_bfloat16*>(a.x), a.x_stride};
    f.w = static_cast<const WT*>(a.w.p);
    f.y = {reinterpret_cast<__nv_bfloat16*>(a.y), a.y_stride};
    f.rstd = a.rstd;
    f.msq = a.msq;
    f.rows = rows;
    f.H = static_cast<int>(a.H);
    f.team = geo.team;
    f.vec = vec;
    f.inv_h = 1.0 / static_cast<double>(a.H);  // rstd.h, as the CPU model
    f.eps64 = static_cast<double>(a.eps);
    const bool res = a.form == Form::res;
    if (res) {
      f.u = {reinterpret_cast<const __nv_bfloat16*>(a.u), a.u_stride};
      f.h_new = {reinterpret_cast<__nv_bfloat16*>(a.h_new), a.h_new_stride};
    }
    auto run = [&](auto slots_tag) {
      constexpr int kS = decltype(slots_tag)::value;
      if (res)
        dev::fwd_wide_kernel<kS, WT, true><<<grid, block, 0, s>>>(f);
      else
        dev::fwd_wide_kernel<kS, WT, false><<<grid, block, 0, s>>>(f);
    };
    switch (geo.slots) {
      case 1: run(std::integral_constant<int, 1>{}); break;
      case 2: run(std::integral_constant<int, 2>{}); break;
      case 3: run(std::integral_constant<int, 3>{}); break;
      default: run(std::integral_constant<int, 4>{}); break;
    }
  };
  if (a.w.dtype == WDtype::fp32)
    go(float{});
  else
    go(__nv_bfloat16{});
  NG_CUDA_LAUNCHED("fwd_wide_kernel");
}

}  // namespace detail
}  // namespace normgate::kernels
