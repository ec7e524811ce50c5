// kernels/src/fwd_rowwise.cu: variant fwd_rowwise (forward, deterministic).
//
// One team (plan.h row geometry) per row. Two kernels with the same per-row
// arithmetic (same bits): the simple kernel (the default, pipeline.h
// fwd_simple / fwd_res_simple: one row per team, a grid of ceil(rows / teams)
// CTAs, each thread's groups loaded straight into registers) and the ring
// kernel (per-head views, the scalar path, and the knobs that ask for it: a
// CTA holds max(1, 256/team) teams and walks rows with a grid-stride loop or
// in blocks, staging rows through shared memory; the grid depends on the
// device, the per-row arithmetic does not). Per row, each thread
//   ss = fma(x, x, ss) in binary64 over its columns (k ascending, column
//        ascending; x^2 is exact, the sum cannot overflow),
//   team-reduces ss in binary64 (plan.h), and computes (by default in the
//   team's first warp only, handed on through shared memory: team_rstd)
//   rstd = FP32 nearest to 1 / sqrt(fma(ss, 1/H, eps))  (rstd.h)
//   y    = BF16_rn((x * rstd) * w)  (mul_rn twice, cvt.rn.bf16x2.f32)
// Thread 0 of the team writes rstd and, when FwdArgs::msq is given, the
// row's binary64 m = fma(ss, 1/H, eps) for the backward's refined rstd
// (rstd.h rstd_refined). In the ring kernel each thread stages its groups of
// the team's next `depth` rows into its own shared-memory ring slots
// (device_blocks.cuh input rings; pipeline.h depth), so that many rows of
// loads are in flight without holding registers; optionally thread 0 of the
// team asks the L2 for a row further ahead (pipeline.h fwd_l2). w is loaded
// once per CTA.
#include <stdexcept>
#include <string>
#include <type_traits>
#include "cuda_check.h"
#include "device_blocks.cuh"
#include "launch.h"
#include "normgate/kernels/pipeline.h"
#include "normgate/kernels/rstd.h"

namespace normgate::kernels {
namespace dev {
namespace {

template <class WT, bool kHeads = false>
struct FwdRows {
  Rows<const __nv_bfloat16, kHeads> x;
  const WT* w;
  Rows<__nv_bfloat16, kHeads> y;
  float* rstd;
  int64_t T;
  int H;
  int team;
  bool vec;
  int depth;       ///< ring stages, 1..kMaxPipelineDepth
  int l2;          ///< L2 prefetch distance beyond the ring, in the team's rows (0: none)
  int block_rows;  ///< rows per team per CTA (0: persistent grid-stride over all rows)
  Rows<const __nv_bfloat16> u{nullptr, 0};  ///< fused form res (kRes): the residual branch; x holds h
  Rows<__nv_bfloat16> h_new{nullptr, 0};    ///< fused form res (kRes): BF16(h + u), written here
  // rstd.h's binary64 constants, computed once on the host (IEEE binary64:
  // the bits the CPU model uses); kernel parameters cost no registers.
  double inv_h = 0;  ///< 1.0 / H, correctly rounded
  double eps64 = 0;  ///< eps as binary64 (exact)
  bool rstd_warp = true;  ///< pipeline.h fwd_rstd_warp: the team's first warp alone collects and computes rstd
  double* msq = nullptr;  ///< optional [T]: each row's m (FwdArgs::msq)
};

/// The row's rstd for every thread of its team from this thread's share ss of
/// the sum of squares (binary64): team_sum in binary64 (plan.h order), then
/// row_rstd_fp64 (rstd.h). With one_warp and a team of several warps only the
/// team's first warp collects the warp totals and computes rstd; lane 0 hands
/// it to the team through rs_sh[team index] behind a second barrier (same
/// bits: the same sums in the same order). Contains __syncthreads for teams
/// of more than one warp: every thread of the CTA must call it. red and rs_sh
/// must not be rewritten before every thread has passed one more barrier.
/// Row r's m = fma(ss, 1/H, eps) (when a.msq is given and r >= 0) is written
/// by the team's thread 0 (first_warp's lane 0), which holds the team total,
/// before the rstd is computed (so m is not kept live through it: at the
/// simple kernels' 32 registers that spilled).
template <class WT, bool kHeads>
__device__ __forceinline__ float team_rstd(double ss, double* red, float* rs_sh, int team, int ti, int first_warp,
                                           const FwdRows<WT, kHeads>& a, int64_t r) {
  auto finish = [&](double tot) {
    if (a.msq != nullptr && r >= 0 && static_cast<int>(threadIdx.x) == first_warp * 32)
      a.msq[r] = row_m(tot, a.inv_h, a.eps64);
    return row_rstd_fp64(tot, a.inv_h, a.eps64);
  };
  const double w_tot = team_sum_publish(ss, red);
  if (team <= 32) return finish(w_tot);
  __syncthreads();
  if (!a.rstd_warp) return finish(team_sum_collect(red, team, first_warp));
  if (static_cast<int>(threadIdx.x >> 5) == first_warp) {  // warp-uniform
    const float rs = finish(team_sum_collect(red, team, first_warp));
    if ((threadIdx.x & 31u) == 0u) rs_sh[ti] = rs;
  }
  __syncthreads();
  return rs_sh[ti];
}

/// h_new = BF16(h + u) of one 8-column group (sum_group: one rounding of
/// each exact sum), h given as its BF16 group.
__device__ __forceinline__ Group8 add_residual(const Group8& h, const Group8& u) {
  float hf[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) hf[e] = group_at(h, e);
  return sum_group(hf, u);
}

/// This thread's share of the row's sum of squares in binary64: its groups'
/// elements with dfma_rn, slot k ascending, then column ascending (plan.h).
template <int kSlots>
__device__ __forceinline__ double sum_squares(const Group8 (&g)[kSlots]) {
  double ss = 0.0;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) ss = add_squares(g[k], ss);
  return ss;
}

/// Form res, first step: h_new = BF16(h + u) element-wise (one rounding of
/// each exact sum). One thread per 8-column group, grid-stride over all rows.
__global__ void residual_add_kernel(Rows<const __nv_bfloat16> h, Rows<const __nv_bfloat16> u,
                                    Rows<__nv_bfloat16> h_new, int64_t rows, int H, bool vec) {
  const int64_t groups = (H + 7) / 8;
  for (int64_t i = global_thread(); i < rows * groups; i += global_threads()) {
    const int64_t r = i / groups;
    const int col0 = static_cast<int>(i % groups) * 8;
    store_group_bits(h_new.row(r), col0, H, vec,
                     add_residual(load_group(h.row(r), col0, H, vec), load_group(u.row(r), col0, H, vec)));
  }
}

// No minimum-blocks bound: forcing 32 registers (four 512-thread CTAs per
// SM) or 40 (three) spilled and measured slower than 55 registers at two
// CTAs per SM (docs/perf/forward.md, D8).
// kRes (fused form res, plain rows only): the ring stages h and u; each
// thread forms h_new = BF16(h + u) of its groups (sum_group: the same rounding
// as residual_add_kernel), stores it, and normalizes it: h_new is never read
// back from memory (4 tensor passes instead of 5: 8n bytes instead of 10n), same bits.
template <int kSlots, class WT, bool kHeads = false, bool kRes = false>
__global__ void __launch_bounds__(kMaxTeam)
    fwd_rowwise_kernel(const FwdRows<WT, kHeads> a) {
  static_assert(!(kRes && kHeads), "the fused residual form has plain rows");
  constexpr int kIn = kRes ? 2 : 1;  // staged inputs per row: x (h), and u
  // [depth][kIn][kSlots][blockDim.x]: slot (s, i, k) of thread j at ((s*kIn + i)*kSlots + k)*nthr + j
  extern __shared__ uint4 ring[];
  __shared__ double red[2][32];
  __shared__ float rs_sh[2][32];
  const int team = a.team;
  const int nthr = static_cast<int>(blockDim.x);
  const int teams = nthr / team;
  const int ti = static_cast<int>(threadIdx.x) / team;
  const int t = static_cast<int>(threadIdx.x) % team;
  const int first_warp = ti * (team >> 5);
  const int depth = a.depth;

  // w stays in registers for the whole loop, except FP32 w with two slots
  // (16 registers): re-read from L1 per row there, where caching it spilled
  // once the sum of squares went binary64 (ptxas: 32 bytes at 64 registers).
  constexpr bool kCacheW = !(kSlots == 2 && std::is_same_v<WT, float>);
  int col0[kSlots];
  float w[kCacheW ? kSlots : 1][8];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    col0[k] = static_cast<int>(group_col0(team, k, t));
    if constexpr (kCacheW) load_weights(a.w, col0[k], a.H, a.vec, w[k]);
  }
  uint4* const mine = ring + threadIdx.x;
  auto slot = [&](int s, int k, int i = 0) { return mine + ((s * kIn + i) * kSlots + k) * nthr; };
  // The rows of this CTA: [row0, end) with its teams' rows interleaved.
  //   persistent (block_rows == 0): team ti takes rows blockIdx*teams + ti +
  //     j*gridDim*teams for all j (grid-stride over every row);
  //   blocked: team ti takes rows row0 + ti + j*teams, j < block_rows.
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * teams * (a.block_rows > 0 ? a.block_rows : 1);
  const int64_t step = a.block_rows > 0 ? teams : static_cast<int64_t>(gridDim.x) * teams;
  const int64_t end = a.block_rows > 0 ? min(a.T, row0 + static_cast<int64_t>(teams) * a.block_rows) : a.T;
  // Per-head rows: the division by heads as a multiply (Rows::row(r, magic)).
  const uint64_t hm = kHeads ? heads_magic(a.x.heads) : 0;
  // Stage this team's row r (if any) into ring stage s; one copy group per call.
  auto fill = [&](int s, int64_t r) {
    if (r < end) {
      const __nv_bfloat16* xr = a.x.row(r, hm);
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        stage_group(slot(s, k), xr, col0[k], a.H, a.vec);
        if constexpr (kRes) stage_group(slot(s, k, 1), a.u.row(r), col0[k], a.H, a.vec);
      }
    }
    cp_async_commit();
  };

  // The team's j-th row (row0 + ti + j*step) lives in stage j mod depth.
  for (int s = 0; s < depth; ++s) fill(s, row0 + ti + s * step);
  // Optional: thread 0 of the team asks the L2 for the row a.l2 rows beyond
  // the ring (vector path: whole 16-byte aligned rows of H*2 bytes).
  const int64_t l2_ahead = a.l2 > 0 && a.vec && t == 0 ? static_cast<int64_t>(depth + a.l2) * step : 0;
  const uint32_t row_bytes = static_cast<uint32_t>(a.H) * 2u;
  int s = 0;
  int buf = 0;
  for (int64_t base = row0; base < end; base += step) {  // trip count uniform across the CTA
    const int64_t r = base + ti;
    if (l2_ahead > 0 && r + l2_ahead < end) prefetch_l2_bulk(a.x.row(r + l2_ahead, hm), row_bytes);
    cp_async_wait_pending(depth - 1);  // this row's group (the oldest) has landed
    Group8 cur[kSlots];
#pragma unroll
    for (int k = 0; k < kSlots; ++k) cur[k].u = *slot(s, k);
    if constexpr (kRes) {  // cur = h_new = BF16(h + u), stored at once (before the reduction)
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        Group8 uu;
        uu.u = *slot(s, k, 1);
        cur[k] = add_residual(cur[k], uu);
        if (r < end) store_group_bits(a.h_new.row(r), col0[k], a.H, a.vec, cur[k]);
      }
    }
    const float rs = team_rstd(sum_squares(cur), red[buf], rs_sh[buf], team, ti, first_warp, a, r < end ? r : -1);
    buf ^= 1;
    if (r < end) {
      if (t == 0) a.rstd[r] = rs;
      __nv_bfloat16* yr = a.y.row(r, hm);
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        if constexpr (kCacheW) {
          store_y_group(yr, col0[k], a.H, a.vec, cur[k], rs, w[k]);
        } else {
          float wk[8];
          load_weights(a.w, col0[k], a.H, a.vec, wk);
          store_y_group(yr, col0[k], a.H, a.vec, cur[k], rs, wk);
        }
      }
    }
    // Refill stage s with the row `depth` steps ahead. Issued after the team
    // sum, whose shuffles consumed every value read from the stage (in-order
    // issue); a row past `end` stores nothing and fills nothing (an empty
    // group, so every iteration commits exactly one).
    fill(s, r + depth * step);
    s = s + 1 == depth ? 0 : s + 1;
  }
  cp_async_wait_pending(0);
}

/// pipeline.h fwd_simple: one row per team, no ring, no grid-stride loop;
/// 16-byte path only. The arithmetic of fwd_rowwise_kernel in the same order
/// (same bits). Teams of the last CTA past the end still take part in the
/// team sum's barrier.
// One slot: CTAs of at most 512 threads (plan.h), four per SM at 32
// registers (100% occupancy), three for form res (at 32 registers it spilled
// 20 / 24 bytes; at three, 38 registers with BF16 w and 40 with FP32 w, no
// spill: docs/perf/forward.md, D15); two slots: teams up to kMaxTeam
// threads.
template <int kSlots, class WT, bool kRes = false>
__global__ void __launch_bounds__(kSlots == 1 ? 512 : kMaxTeam, kSlots == 1 ? (kRes ? 3 : 4) : 1)
    fwd_simple_kernel(const FwdRows<WT> a) {
  __shared__ double red[32];
  __shared__ float rs_sh[32];
  const int team = a.team;
  const int teams = static_cast<int>(blockDim.x) / team;
  const int ti = static_cast<int>(threadIdx.x) / team;
  const int t = static_cast<int>(threadIdx.x) % team;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * teams + ti;
  const bool live = r < a.T;
  int col0[kSlots];
  Group8 cur[kSlots];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    col0[k] = static_cast<int>(group_col0(team, k, t));
    cur[k].u = make_uint4(0u, 0u, 0u, 0u);
    if (live) cur[k] = load_group(a.x.row(r), col0[k], a.H, true);
  }
  if constexpr (kRes) {  // cur = h_new = BF16(h + u), stored at once
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      Group8 uu;
      uu.u = make_uint4(0u, 0u, 0u, 0u);
      if (live) uu = load_group(a.u.row(r), col0[k], a.H, true);
      cur[k] = add_residual(cur[k], uu);
      if (live) store_group_bits(a.h_new.row(r), col0[k], a.H, true, cur[k]);
    }
  }
  const float rs = team_rstd(sum_squares(cur), red, rs_sh, team, ti, ti * (team >> 5), a, live ? r : int64_t{-1});
  if (!live) return;
  if (t == 0) a.rstd[r] = rs;
  __nv_bfloat16* yr = a.y.row(r);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    float w[8];
    load_weights(a.w, col0[k], a.H, true, w);
    store_y_group(yr, col0[k], a.H, true, cur[k], rs, w);
  }
}

int sm_count() {
  int dev = 0, n = 0;
  NG_CUDA(cudaGetDevice(&dev));
  NG_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n > 0 ? n : 1;
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_fwd_rowwise(const FwdArgs& a, bool vec, Stream s) {
  const RowGeometry geo = row_geometry(a.H);
  const int teams = geo.team >= 256 ? 1 : 256 / geo.team;
  const int block = geo.team * teams;
  const int64_t rows = a.T * a.heads;  // normalized rows
  const int64_t need = (rows + teams - 1) / teams;
  const PipelineDepth knobs = pipeline_depth();  // read once: one consistent setting per launch
  // Form res fused into the normalizing kernel (pipeline.h fwd_res_fused)?
  const bool fused = a.form == Form::res && a.heads == 1 && knobs.fwd_res_fused;
  // Ring: depth stages of one 16-byte slot per thread and group (and per input: h and u when fused).
  const size_t stage_bytes = static_cast<size_t>(block) * geo.slots * sizeof(uint4) * (fused ? 2 : 1);
  const int depth = dev::ring_depth(knobs.fwd, stage_bytes);
  const size_t smem = stage_bytes * static_cast<size_t>(depth);
  // Persistent grid (fwd_block == 0): as many CTAs as fit on the device at
  // once (registers and the ring's shared memory), none beyond the rows.
  // Blocked: one CTA per fwd_block rows of each team (at most 2^31 - 1 CTAs).
  auto grid_for = [&](auto kernel) {
    NG_CUDA(dev::ring_allow(kernel));
    if (knobs.fwd_block > 0) {
      const int64_t ctas = (need + knobs.fwd_block - 1) / knobs.fwd_block;
      if (ctas > 0x7FFFFFFF)
        throw std::invalid_argument("fwd_rowwise: fwd_block = " + std::to_string(knobs.fwd_block) + " needs " +
                                    std::to_string(ctas) + " CTAs (more than 2^31 - 1)");
      return static_cast<unsigned>(ctas);
    }
    int per_sm = 0;
    NG_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, smem));
    const int64_t cap = static_cast<int64_t>(dev::sm_count()) * (per_sm > 0 ? per_sm : 1);
    return static_cast<unsigned>(need < cap ? need : cap);
  };
  // Form res, unfused: h_new = BF16(h + u) first (its own pass), then h_new is normalized.
  const uint16_t* xin = a.x;
  int64_t xin_stride = a.x_stride;
  if (a.form == Form::res && !fused) {
    const int64_t work = rows * ((a.H + 7) / 8);
    const int64_t cap_e = static_cast<int64_t>(dev::sm_count()) * 8;
    const int64_t blocks_e = (work + 255) / 256;
    dev::residual_add_kernel<<<static_cast<unsigned>(blocks_e < cap_e ? blocks_e : cap_e), 256, 0, s>>>(
        {reinterpret_cast<const __nv_bfloat16*>(a.x), a.x_stride},
        {reinterpret_cast<const __nv_bfloat16*>(a.u), a.u_stride}, {reinterpret_cast<__nv_bfloat16*>(a.h_new), a.h_new_stride},
        rows, static_cast<int>(a.H), vec);
    NG_CUDA_LAUNCHED("residual_add_kernel");
    xin = a.h_new;
    xin_stride = a.h_new_stride;
  }
  auto go = [&](auto wtag) {
    using WT = decltype(wtag);
    auto make = [&](auto heads_tag) {  // the kernel arguments, plain or per-head rows
      constexpr bool kHeads = decltype(heads_tag)::value;
      dev::FwdRows<WT, kHeads> f{{reinterpret_cast<const __nv_bfloat16*>(xin), xin_stride, a.heads, a.x_stride_h},
                                      static_cast<const WT*>(a.w.p),
                                      {reinterpret_cast<__nv_bfloat16*>(a.y), a.y_stride, a.heads, a.y_stride_h},
                                      a.rstd,
                                      rows,
                                      static_cast<int>(a.H),
                                      geo.team,
                                      vec,
                                      depth,
                                      knobs.fwd_l2,
                                      knobs.fwd_block};
      f.inv_h = 1.0 / static_cast<double>(a.H);  // rstd.h, as the CPU model
      f.eps64 = static_cast<double>(a.eps);
      f.rstd_warp = knobs.fwd_rstd_warp;
      f.msq = a.msq;
      return f;
    };
    if (a.heads > 1) {  // per-head views: H = 256 (validated), one slot
      if (geo.slots != 1) throw std::invalid_argument("fwd_rowwise: per-head rows need one slot (H = 256)");
      auto* k = dev::fwd_rowwise_kernel<1, WT, true>;
      k<<<grid_for(k), block, smem, s>>>(make(std::true_type{}));
      return;
    }
    dev::FwdRows<WT> r = make(std::false_type{});
    if (fused) {  // x is h; u read beside it; h_new written by the same kernel
      r.u = {reinterpret_cast<const __nv_bfloat16*>(a.u), a.u_stride};
      r.h_new = {reinterpret_cast<__nv_bfloat16*>(a.h_new), a.h_new_stride};
    }
    // pipeline.h fwd_simple / fwd_res_simple: one row per team, no ring
    const bool simple = fused ? knobs.fwd_res_simple : knobs.fwd_simple;
    if (simple && vec && need <= 0x7FFFFFFF) {
      const unsigned ctas = static_cast<unsigned>(need);
      if (fused) {
        auto* k = geo.slots == 1 ? dev::fwd_simple_kernel<1, WT, true> : dev::fwd_simple_kernel<2, WT, true>;
        k<<<ctas, block, 0, s>>>(r);
      } else {
        auto* k = geo.slots == 1 ? dev::fwd_simple_kernel<1, WT> : dev::fwd_simple_kernel<2, WT>;
        k<<<ctas, block, 0, s>>>(r);
      }
      return;
    }
    if (fused) {
      auto* k = geo.slots == 1 ? dev::fwd_rowwise_kernel<1, WT, false, true> : dev::fwd_rowwise_kernel<2, WT, false, true>;
      k<<<grid_for(k), block, smem, s>>>(r);
      return;
    }
    auto* k = geo.slots == 1 ? dev::fwd_rowwise_kernel<1, WT> : dev::fwd_rowwise_kernel<2, WT>;
    k<<<grid_for(k), block, smem, s>>>(r);
  };
  if (a.w.dtype == WDtype::fp32)
    go(float{});
  else
    go(__nv_bfloat16{});
  NG_CUDA_LAUNCHED("fwd_rowwise_kernel");
}

}  // namespace detail
}  // namespace normgate::kernels
