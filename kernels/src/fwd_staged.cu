// kernels/src/fwd_staged.cu: variant fwd_staged (forward, deterministic),
// plain rows and form res (fused residual add), any H.
//
// Why (docs/perf/forward.md, D16): at short T the forward waits on latency,
// and the profiles beside TC's find TC holding 1.4x the resident warps at
// 31-32 registers a thread, where the register-held kernels (fwd_rowwise,
// fwd_wide) take 38-48 to keep the row; a bound of 32 registers spills.
// Here a thread copies its groups of the row into its own shared-memory
// slots (cp.async) and reads them back twice, so the row costs shared
// memory instead of registers: at most 32 registers (ptxas, nvcc 13.0, no
// bound, no spill), so 2048 threads an SM by registers, in every instance
// but form res above H = 8192 (three and four slots: 40 registers, three
// CTAs of 512 an SM; the BF16-w four-slot one spills 8 bytes, listed in
// tests/data/kernel_spills.txt).
//
// Geometry: staged.h (team, slots; fwd_staged_geometry). CTAs of
// max(1, 256/team) teams, one row a team; every copy of the row issued
// before its first sum (form res: h's and u's). Per row, in this order
// (the CPU model, model_fwd_rowwise.cpp, repeats it on h_new):
//   form res: h_new = BF16(h + u) per element (sum_group: one rounding of
//          the exact sum, core/bf16.h bf16_sum_rn), from the two slots of
//          each group, stored to h_new and into h's slot (x below is h_new);
//   ss   = fma(x, x, ss) in binary64 over the thread's groups k ascending,
//          then the 8 columns ascending (x^2 is exact), each group read
//          from the thread's slot;
//   the warp butterfly of ss (xor offsets 16, 8, 4, 2, 1); for teams of
//          more than one warp, the warp totals go to shared memory and,
//          after one barrier, the team's first warp takes warp l's total in
//          lane l (0 for l >= team/32) and butterflies again;
//   rstd = row_rstd_fp64(ss, 1/H, eps) (rstd.h: the FP32 nearest to
//          1/sqrt(m), m = fma(ss, 1/H, eps)), m written to msq when given,
//          both by the first warp, rstd handed over in shared memory behind
//          a second barrier (a team of one warp: each lane computes them,
//          no barrier);
//   y    = BF16_rn((x * rstd) * w) (mul_rn twice), x read from the slot
//          again, w read per group after the barrier (L1 and L2 hold it).
// The sum associates as staged.h says (fwd_rowwise's order for H <= 256
// and 2048 < H <= 8192). The scalar path (H % 8 != 0, or rows, strides or w not
// 16-byte aligned) is the same kernel with load_group's guarded 2-byte
// loads stored into the slots synchronously (stage_group). Rows past the
// end stage zeros, take part in the barriers and write nothing. One CTA a
// group of rows, no grid-stride loop (a 2-D grid past 2^31 - 1 CTAs).
// Shared memory: inputs * slots * block * 16 bytes, dynamic (inputs: 1
// plain, 2 res): at most 32 KiB plain; res at most 32 KiB for H <= 8192
// (16 KiB for CTAs of 256 threads, up to 32 KiB for one team of 288 to
// 512 threads at two slots), 48 KiB at three slots and 64 KiB at four
// above, which with the static buffers is past the 48 KiB a launch takes
// without the opt-in (ring_allow, device_blocks.cuh).
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "device_blocks.cuh"
#include "launch.h"
#include "normgate/kernels/rstd.h"
#include "normgate/kernels/staged.h"

namespace normgate::kernels {
namespace dev {
namespace {

constexpr int kStagedCta = 256;                       // threads a CTA when team <= 256
constexpr int kStagedMaxTeams = kStagedCta / 32;      // teams a CTA at most (teams of 32)
constexpr int kStagedMaxWarps = kStagedMaxTeam / 32;  // warps a CTA at most (one team of 512)
static_assert(kStagedMaxTeam >= kStagedCta, "a team of up to kStagedMaxTeam threads is one CTA");
// The kernel's static shared memory (red, rs_sh below), counted with the
// slots against the 48 KiB a launch may take without the opt-in.
constexpr size_t kStagedStaticSmem = kStagedMaxWarps * sizeof(double) + kStagedMaxTeams * sizeof(float);

template <class WT>
struct StagedArgs {
  Rows<const __nv_bfloat16> x{nullptr, 0};
  const WT* w = nullptr;
  Rows<__nv_bfloat16> y{nullptr, 0};
  Rows<const __nv_bfloat16> u{nullptr, 0};  ///< form res: the residual branch (x holds h)
  Rows<__nv_bfloat16> h_new{nullptr, 0};    ///< form res: BF16(h + u), written here
  float* rstd = nullptr;
  double* msq = nullptr;  ///< optional [rows] (FwdArgs::msq)
  int64_t rows = 0;
  int H = 0;
  int team = 32;
  bool vec = false;
  double inv_h = 0;  ///< 1.0 / H, correctly rounded (rstd.h, as the CPU model)
  double eps64 = 0;  ///< eps as binary64 (exact)
};

template <int kSlots, class WT, bool kRes>
__global__ void __launch_bounds__(kStagedMaxTeam) fwd_staged_kernel(const StagedArgs<WT> a) {
  extern __shared__ uint4 slots_sh[];              // [k * blockDim.x + thread]: the thread's groups (res: h's
                                                   // slots k, then u's at kSlots + k)
  __shared__ double red[kStagedMaxWarps];          // [warp of the CTA]: warp totals
  __shared__ float rs_sh[kStagedMaxTeams];         // [team]: rstd handed to the team
  const int team = a.team;
  const int block = static_cast<int>(blockDim.x);
  const int teams = block / team;
  const int ti = static_cast<int>(threadIdx.x) / team;
  const int t = static_cast<int>(threadIdx.x) % team;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int first_warp = ti * (team >> 5);
  const int64_t base = (static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * teams;
  if (base >= a.rows) return;  // uniform across the CTA (only in the 2-D grid's last row of CTAs)
  const int64_t r = base + ti;
  const bool live = r < a.rows;
  uint4* mine = slots_sh + threadIdx.x;  // slot k at mine[k * block]; res: u's slot k at mine[(kSlots + k) * block]
  {
    const __nv_bfloat16* xr = live ? a.x.row(r) : nullptr;
    const __nv_bfloat16* ur = kRes && live ? a.u.row(r) : nullptr;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int c = static_cast<int>(group_col0(team, k, t));
      if (live) {
        stage_group(mine + k * block, xr, c, a.H, a.vec);
        if constexpr (kRes) stage_group(mine + (kSlots + k) * block, ur, c, a.H, a.vec);
      } else {
        mine[k * block] = make_uint4(0u, 0u, 0u, 0u);
        if constexpr (kRes) mine[(kSlots + k) * block] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
    cp_async_commit();
    cp_async_wait_pending(0);  // this thread's copies: only it reads its slots
  }
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    Group8 g;
    g.u = mine[k * block];
    if constexpr (kRes) {  // g = h_new = BF16(h + u), stored at once and kept in h's slot for y
      Group8 uu;
      uu.u = mine[(kSlots + k) * block];
      float hf[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) hf[e] = group_at(g, e);
      g = sum_group(hf, uu);
      if (live) store_group_bits(a.h_new.row(r), static_cast<int>(group_col0(team, k, t)), a.H, a.vec, g);
      mine[k * block] = g.u;
    }
    ss = add_squares(g, ss);
  }
  ss = team_sum_publish(ss, red);
  float rs;
  if (team <= 32) {  // uniform: the warp total is the team total
    if (a.msq != nullptr && live && lane == 0) a.msq[r] = row_m(ss, a.inv_h, a.eps64);
    rs = row_rstd_fp64(ss, a.inv_h, a.eps64);
    asm volatile("" ::: "memory");  // read the slots again below rather than hold the row in registers
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
  if (!live) return;
  if (t == 0) a.rstd[r] = rs;
  __nv_bfloat16* yr = a.y.row(r);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int c = static_cast<int>(group_col0(team, k, t));
    if (c >= a.H) continue;
    Group8 g;
    g.u = mine[k * block];
    float wk[8];
    load_weights(a.w, c, a.H, a.vec, wk);
    store_y_group(yr, c, a.H, a.vec, g, rs, wk);
  }
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_fwd_staged(const FwdArgs& a, bool vec, Stream s) {
  if (a.heads > 1 || (a.form != Form::plain && a.form != Form::res))
    throw std::invalid_argument("fwd_staged: plain rows or form res only (got form " + std::string(to_string(a.form)) +
                                ")");
  const bool res = a.form == Form::res;
  const RowGeometry geo = fwd_staged_geometry(a.H);
  const int teams = fwd_staged_teams(a.H);
  if (geo.team > kStagedMaxTeam || teams > dev::kStagedMaxTeams || geo.slots < 1 || geo.slots > kStagedMaxSlots)
    throw std::logic_error("fwd_staged: no kernel for team " + std::to_string(geo.team) + ", slots " +
                           std::to_string(geo.slots));
  const int block = geo.team * teams;
  const int64_t rows = a.T;
  const int64_t need = (rows + teams - 1) / teams;
  if (need == 0) return;
  constexpr int64_t kMaxX = 0x7FFFFFFF;
  const dim3 grid(static_cast<unsigned>(need < kMaxX ? need : kMaxX), static_cast<unsigned>((need + kMaxX - 1) / kMaxX));
  const size_t smem = static_cast<size_t>(res ? 2 : 1) * static_cast<size_t>(geo.slots) * static_cast<size_t>(block) *
                      sizeof(uint4);
  auto go = [&](auto wtag) {
    using WT = decltype(wtag);
    dev::StagedArgs<WT> f;
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
    if (res) {
      f.u = {reinterpret_cast<const __nv_bfloat16*>(a.u), a.u_stride};
      f.h_new = {reinterpret_cast<__nv_bfloat16*>(a.h_new), a.h_new_stride};
    }
    auto run = [&](auto slots_tag) {
      constexpr int kS = decltype(slots_tag)::value;
      auto launch = [&](auto* kernel) {
        // Past 48 KiB with the static buffers (res above H = 8192: 48 KiB of
        // slots at three, 64 KiB at four) the kernel needs the opt-in.
        if (smem + dev::kStagedStaticSmem > 48 * 1024) NG_CUDA(dev::ring_allow(kernel));
        kernel<<<grid, block, smem, s>>>(f);
      };
      if (res)
        launch(&dev::fwd_staged_kernel<kS, WT, true>);
      else
        launch(&dev::fwd_staged_kernel<kS, WT, false>);
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
  NG_CUDA_LAUNCHED("fwd_staged_kernel");
}

}  // namespace detail
}  // namespace normgate::kernels
