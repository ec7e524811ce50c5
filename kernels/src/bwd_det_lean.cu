// kernels/src/bwd_det_lean.cu: variant bwd_det_lean (deterministic).
//
// bwd_det_chunked's two stages, the same arithmetic in the same order, so dx
// and dw are bitwise bwd_det_chunked's (the CPU model is its model), with a
// chunk kernel that issues fewer instructions a row where the rows allow it
// (bwd_det_lean.h lean_kernel_applies: the vector path, one full 8-column
// group for every thread of plan.h's one-slot team, plain rows, form res, or
// dense per-head views run as plain rows of 256). Everything else runs
// bwd_det_chunked's own chunk pass. Why: the chunk pass is bound by issuing
// instructions, not by memory: Nsight Compute counts about twice the
// instructions of torch.compile's kernels at res [131072, 1536] and heads4
// [131072, 4, 256], and a static count of the row loop's SASS
// (tools/sass_hotpath.py) puts the pass at 358 instructions a thread-row for
// res (44.8 an element), 234 for plain rows and 242 for heads
// (docs/perf/backward.md, D16). Where the time goes and what this kernel
// drops:
//   - per-thread bounds checks and the scalar load and store paths in the
//     loop (each 16-byte load, the cp.async of dh_new, the ring read and the
//     dx store carried a col0 < H test, a vec test and a convergence barrier);
//   - the per-head row stepping (a branch and a 64-bit multiply a view and
//     row) where the views are dense;
//   - form res: sum_group_fast's test for a BF16 midpoint or a non-finite
//     sum took two tests an element plus flags the compiler kept for the
//     slow path (47 instructions a row); here a midpoint is found two
//     elements at a time (the low halves of two sums in one word, a
//     zero-half test) and only a NaN sum needs the exact path besides a
//     midpoint (an infinite sum converts as bf16_from_float does);
//   - the FP32 rstd comes from the shared batch that already holds its
//     refined binary64 value (one shared load instead of a global load and
//     its address).
// Stage 2: bwd_det_chunked's combine (bwd_det_chunked.h), unchanged.
#include <cstdint>
#include <type_traits>

#include "bwd_chunk_pass.cuh"
#include "bwd_det_chunked.h"
#include "bwd_det_lean.h"
#include "sum_group_lean.cuh"
#include "cuda_check.h"
#include "launch.h"

namespace normgate::kernels {
namespace dev {
namespace {

/// The lean kernel's rows: row r of each tensor at p + r * stride (dense
/// per-head views come as rows of 256 with stride 256). add == nullptr: no
/// dh_new (plain rows, per-head views, form res without dh_new).
template <class WT>
struct LeanRows {
  const __nv_bfloat16* x;
  const __nv_bfloat16* dy;
  __nv_bfloat16* dx;
  const __nv_bfloat16* add;
  int64_t x_stride, dy_stride, dx_stride, add_stride;
  const WT* w;
  const float* rstd;
  const double* msq;  ///< optional, as BwdRows::msq
  int64_t rows;       ///< normalized rows
  int H;              ///< = 8 * blockDim.x (lean_kernel_applies)
  int64_t num_chunks;
  double* part;  ///< [num_chunks, H] FP64 chunk partials (bwd_det_chunked's workspace)
};

__device__ __forceinline__ uint4 ldg16(const __nv_bfloat16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

/// One CTA = one chunk of rows = one team of blockDim.x threads, thread t
/// owning columns 8t .. 8t+7 (all < H). The arithmetic of bwd_chunk_pass.cuh
/// for one slot in one CTA, step for step: part = fma_rn(g, xhat, part) over
/// the thread's columns in order, the team sum of plan.h (warp butterfly,
/// barrier, collect), the dw step add_triple(dy, x, rstd') while the barrier
/// completes, c = sum * FP32_rn(1/H), dx = BF16_rn(rstd * fma(-xhat, c, g))
/// (form res: with dh_new added, one rounding); the refined rstd' and the
/// FP32 rstd staged 32 rows at a time by the first warp (the batch scheme of
/// bwd_chunk_pass.cuh, same slots and barriers).
template <bool kRes, class WT>
__device__ __forceinline__ void lean_pass(const LeanRows<WT>& a) {
  __shared__ float red[2][32];
  __shared__ double rs_dw_s[2][kRstdBatch];
  __shared__ float rs_s[2][kRstdBatch];
  extern __shared__ uint4 add_ring[];  // kRes: [2 stages][blockDim.x], 16 bytes each
  const int64_t chunk = blockIdx.x;
  const int team = static_cast<int>(blockDim.x);
  const int t = static_cast<int>(threadIdx.x);
  const int64_t r0 = chunk_begin(a.rows, a.num_chunks, chunk);
  const int rows = static_cast<int>(chunk_begin(a.rows, a.num_chunks, chunk + 1) - r0);
  const float inv_h = div_rn(1.0f, static_cast<float>(a.H));
  const bool l2_prefetch = t == 0;
  const uint32_t row_bytes = static_cast<uint32_t>(a.H) * 2u;
  const int col0 = static_cast<int>(kGroup) * t;
  float w[8];
  load_weights(a.w, col0, a.H, true, w);  // kept for the whole chunk
  Acc64 acc[8];

  const __nv_bfloat16* px = a.x + r0 * a.x_stride;
  const __nv_bfloat16* pdy = a.dy + r0 * a.dy_stride;
  __nv_bfloat16* pdx = a.dx + r0 * a.dx_stride;
  const __nv_bfloat16* padd = kRes ? a.add + r0 * a.add_stride : nullptr;
  if constexpr (kRes) {
    if (rows > 0) cp_async16(add_ring + t, padd + col0);
    cp_async_commit();
  }
  auto stage_rstd = [&](int first) {  // rows r0+first .. +kRstdBatch-1 into slot (first / kRstdBatch) & 1
    const int j = first + t;
    if (t < kRstdBatch && j < rows) {
      const int slot = (first / kRstdBatch) & 1;
      const float r = __ldg(a.rstd + r0 + j);
      rs_s[slot][t] = r;
      rs_dw_s[slot][t] = rstd_refined(a.msq != nullptr ? __ldg(a.msq + r0 + j) : 0.0, r);
    }
  };
  stage_rstd(0);
  __syncthreads();

  // One row: xc, dyc hold row i; xn, dyn receive row i + 1.
  auto step = [&](const Group8& xc, const Group8& dyc, Group8& xn, Group8& dyn, int i, int buf) {
    if (l2_prefetch && i + 2 < rows) {
      prefetch_l2_bulk(px + 2 * a.x_stride, row_bytes);
      prefetch_l2_bulk(pdy + 2 * a.dy_stride, row_bytes);
      if constexpr (kRes) prefetch_l2_bulk(padd + 2 * a.add_stride, row_bytes);
    }
    if (i + 1 < rows) {
      xn.u = ldg16(px + a.x_stride + col0);
      dyn.u = ldg16(pdy + a.dy_stride + col0);
    }
    if constexpr (kRes) {
      if (i + 1 < rows) cp_async16(add_ring + ((i + 1) & 1) * team + t, padd + a.add_stride + col0);
      cp_async_commit();  // one group per row, empty on the last
    }
    const float rs = rs_s[(i / kRstdBatch) & 1][i % kRstdBatch];
    const double rs_dw = rs_dw_s[(i / kRstdBatch) & 1][i % kRstdBatch];

    float part = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float xhat = mul_rn(group_at(xc, e), rs);
      const float g = mul_rn(group_at(dyc, e), w[e]);
      part = fma_rn(g, xhat, part);
    }
    const float warp_total = team_sum_publish(part, red[buf]);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e].add_triple(group_at(dyc, e), group_at(xc, e), rs_dw);
    __syncthreads();
    const float sum = team <= 32 ? warp_total : team_sum_collect(red[buf], team, 0);
    const float c = mul_rn(sum, inv_h);

    float d[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float xhat = mul_rn(group_at(xc, e), rs);
      const float g = mul_rn(group_at(dyc, e), w[e]);
      d[e] = mul_rn(rs, fma_rn(-xhat, c, g));
    }
    if constexpr (kRes) {
      cp_async_wait_pending(1);  // this row's dh_new has landed (the next row's may fly)
      Group8 add;
      add.u = add_ring[(i & 1) * team + t];
      *reinterpret_cast<uint4*>(pdx + col0) = lean_sum_group(d, add).u;
    } else {
      uint32_t q[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(d[2 * k], d[2 * k + 1]);
        q[k] = *reinterpret_cast<const uint32_t*>(&h);
      }
      *reinterpret_cast<uint4*>(pdx + col0) = make_uint4(q[0], q[1], q[2], q[3]);
    }
    if (i % kRstdBatch == 0) stage_rstd(i + kRstdBatch);
    px += a.x_stride;
    pdy += a.dy_stride;
    pdx += a.dx_stride;
    if constexpr (kRes) padd += a.add_stride;
  };

  Group8 xa, dya, xb, dyb;
  xa.u = dya.u = xb.u = dyb.u = make_uint4(0u, 0u, 0u, 0u);
  if (rows > 0) {
    xa.u = ldg16(px + col0);
    dya.u = ldg16(pdy + col0);
  }
  // One row an iteration, the next row's registers copied into the current
  // row's (8 moves a row). Two rows an iteration with the buffers swapping
  // roles saves the moves but spills 40-132 bytes at 64 registers (ptxas,
  // nvcc 13.0), so it is not done.
  for (int i = 0; i < rows; ++i) {
    step(xa, dya, xb, dyb, i, i & 1);
    xa = xb;
    dya = dyb;
  }

  double2* q = reinterpret_cast<double2*>(a.part + chunk * a.H + col0);  // 64-byte aligned: H % 8 == 0
#pragma unroll
  for (int k = 0; k < 4; ++k) q[k] = make_double2(acc[2 * k].s, acc[2 * k + 1].s);
}

template <bool kRes, class WT>
__global__ void __launch_bounds__(kMaxCtaTeam, 2) bwd_lean_kernel(const LeanRows<WT> a) {
  lean_pass<kRes>(a);
}
template <bool kRes, class WT>
__global__ void __launch_bounds__(kMaxTeam, 1) bwd_lean_wide_kernel(const LeanRows<WT> a) {
  lean_pass<kRes>(a);
}

template <class WT>
void enqueue_lean(const BwdArgs& a, cudaStream_t s) {
  const RowGeometry geo = bwd_row_geometry(a.H);
  const int64_t rows = a.T * a.heads;
  const bool heads = a.heads > 1;  // dense (lean_kernel_applies): rows of H at stride H
  const LeanRows<WT> r{reinterpret_cast<const __nv_bfloat16*>(a.x),
                       reinterpret_cast<const __nv_bfloat16*>(a.dy),
                       reinterpret_cast<__nv_bfloat16*>(a.dx),
                       reinterpret_cast<const __nv_bfloat16*>(a.dh_new),
                       heads ? a.H : a.x_stride,
                       heads ? a.H : a.dy_stride,
                       heads ? a.H : a.dx_stride,
                       a.dh_new_stride,
                       static_cast<const WT*>(a.w.p),
                       a.rstd,
                       a.msq,
                       rows,
                       static_cast<int>(a.H),
                       num_chunks(rows, a.H),
                       static_cast<double*>(a.workspace)};
  const dim3 grid(static_cast<unsigned>(r.num_chunks)), block(static_cast<unsigned>(geo.team));
  auto go = [&](auto res_tag) {
    constexpr bool kRes = decltype(res_tag)::value;
    const size_t ring = kRes ? static_cast<size_t>(2 * geo.team) * sizeof(uint4) : 0;  // <= 32 KiB
    if (geo.team <= kMaxCtaTeam) {
      bwd_lean_kernel<kRes, WT><<<grid, block, ring, s>>>(r);
    } else {
      bwd_lean_wide_kernel<kRes, WT><<<grid, block, ring, s>>>(r);
    }
  };
  if (a.dh_new != nullptr) {
    go(std::true_type{});
  } else {
    go(std::false_type{});
  }
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_bwd_det_lean(const BwdArgs& a, bool vec, Stream s) {
  if (!lean_kernel_applies(a, vec)) {  // bwd_det_chunked's kernels: the same bits
    enqueue_det_chunk_pass(a, vec, s);
  } else {
    if (a.w.dtype == WDtype::fp32) {
      dev::enqueue_lean<float>(a, s);
    } else {
      dev::enqueue_lean<__nv_bfloat16>(a, s);
    }
    NG_CUDA_LAUNCHED("bwd_lean_kernel");
  }
  enqueue_combine_partials(a, s);
}

}  // namespace detail
}  // namespace normgate::kernels
