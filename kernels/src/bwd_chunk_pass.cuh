// kernels/src/bwd_chunk_pass.cuh (internal): the backward's per-chunk pass,
// shared by every backward variant; a variant supplies the Sink that receives
// each column's FP64 chunk partial (accum.h Acc64).
//
// One CTA (two clustered CTAs for a 2-slot team) = one chunk of rows (plan.h
// chunk plan) = one team of plan.h's backward row geometry. The team walks its
// rows in increasing order; for each row it
//   1. has already issued the loads of the next row (register double buffer)
//      and an L2 prefetch of the row after (vector path); form res stages
//      the next row's dh_new into a shared-memory ring (cp.async); its
//      refined rstd comes from shared memory, staged 32 rows at a time by
//      the CTA's first warp,
//   2. forms part = sum over its columns of fma(g, xhat, .) with
//      xhat = x*rstd, g = dy*w, and team-reduces it (one __syncthreads, or one
//      cluster barrier, per row; two alternating shared buffers); while the
//      barrier completes it adds dy*(x*rstd') to each owned column's Acc64
//      (accum.h add_triple: one FP64 fma), rstd' = rstd refined in binary64
//      against the forward's msq when given (rstd.h rstd_refined), else rstd,
//   3. writes dx = BF16_rn(rstd * fma(-xhat, c, g)), c = sum * FP32_rn(1/H)
//      (a product, not a division: keeps the division's slow-path call, and
//      the registers it pins, out of the row loop).
// Each column has exactly one owner thread, so its chunk partial is a
// sequential sum over the chunk's rows in order: the CPU model replays it.
#pragma once

#include <type_traits>

#include "device_blocks.cuh"
#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/rmsnorm.h"
#include "normgate/kernels/rstd.h"

namespace normgate::kernels::dev {

/// Rows per batch of refined rstd staged in shared memory (one per lane of the
/// CTA's first warp).
inline constexpr int kRstdBatch = 32;

/// One row's inputs for a thread's kSlots column groups and the row's FP32
/// rstd (its refined rstd comes from the staged batch, see bwd_chunk_pass).
template <int kSlots>
struct RowIn {
  Group8 x[kSlots];
  Group8 dy[kSlots];
  float rstd;
};

template <int kSlots, class WT, bool kHeads>
__device__ __forceinline__ void load_row(RowIn<kSlots>& in, const BwdRows<WT, kHeads>& a, const __nv_bfloat16* xr,
                                         const __nv_bfloat16* dyr, int64_t r, const int (&col0)[kSlots]) {
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    in.x[k] = load_group(xr, col0[k], a.H, a.vec);
    in.dy[k] = load_group(dyr, col0[k], a.H, a.vec);
  }
  in.rstd = __ldg(a.rstd + r);
}

// Register budget of the chunk kernels (their __launch_bounds__ below): 64
// per thread for one group per thread (2 x 512 or 1 x 1024 threads per SM),
// 128 for two groups (the cluster kernel: the dw accumulators alone take 32).

/// Whether w stays in registers for the whole chunk (else it is re-read from
/// L1 for each row). FP32 weights take 8 registers a group where BF16 ones
/// can stay packed in 4: at one group per thread (64 registers) FP32 w is
/// re-read.
template <int kSlots, class WT>
inline constexpr bool kChunkCacheW = !(kSlots == 1 && std::is_same_v<WT, float>);

/// The chunk pass (see file comment) for one CTA (kCtas == 1) or one CTA of a
/// 2-CTA cluster (kCtas == 2; the team is both CTAs' threads). Sink is called
/// once per owned group with col0 < H: sink(chunk, col0, acc) (col0 an int),
/// where acc[e] is column col0+e's Acc64 (entries for columns >= H hold
/// zeros and must be ignored).
template <int kSlots, int kCtas, bool kRes, class WT, bool kHeads, class Sink>
__device__ __forceinline__ void bwd_chunk_pass(const BwdRows<WT, kHeads>& a, const Sink& sink) {
  __shared__ float red[2][32];
  // Clusters are kCtas consecutive CTAs: chunk = cluster index, rank inside it.
  int rank = 0;
  if constexpr (kCtas > 1) rank = static_cast<int>(cooperative_groups::this_cluster().block_rank());
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) / kCtas;
  const int team = static_cast<int>(blockDim.x) * kCtas;
  const int t = rank * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
  const int64_t r0 = chunk_begin(a.T, a.num_chunks, chunk);
  const int64_t r1 = chunk_begin(a.T, a.num_chunks, chunk + 1);
  const float inv_h = div_rn(1.0f, static_cast<float>(a.H));  // FP32_rn(1/H); H <= 2^24 is exact
  // One thread per CTA asks the L2 for the row after the one in flight.
  const bool l2_prefetch = a.vec && threadIdx.x == 0 && rank == 0;
  const uint32_t row_bytes = static_cast<uint32_t>(a.H) * 2u;

  constexpr bool kCacheW = kChunkCacheW<kSlots, WT>;
  int col0[kSlots];
  float wc[kCacheW ? kSlots : 1][8];  // the weights of the owned columns
  Acc64 acc[kSlots][8];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    col0[k] = static_cast<int>(group_col0(team, k, t));
    if constexpr (kCacheW) load_weights(a.w, col0[k], a.H, a.vec, wc[k]);
  }
  auto weights = [&](int k, float (&w)[8]) {
    if constexpr (kCacheW) {
#pragma unroll
      for (int e = 0; e < 8; ++e) w[e] = wc[k][e];
    } else {
      load_weights(a.w, col0[k], a.H, a.vec, w);
    }
  };

  // Form res, vector path: dh_new staged through a 2-stage ring in dynamic
  // shared memory, [stage][slot][thread] 16-byte entries, each read only by
  // the thread that copied it (no barrier: cp.async.wait_group orders it).
  // The launcher provides 2 * kSlots * blockDim.x * 16 bytes when it stages.
  // kRes (form res: a.add.p != nullptr) is a compile-time choice, so plain
  // launches carry none of this code (measured: +2-5% plain time when they did).
  static_assert(!(kRes && kHeads), "per-head rows never have dh_new (validated)");
  const bool stage_add = kRes && a.vec;
  extern __shared__ uint4 add_ring[];
  auto add_slot = [&](int stage, int k) {
    return add_ring + (static_cast<unsigned>(stage * kSlots + k) * blockDim.x + threadIdx.x);
  };
  if (stage_add && r0 < r1) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k)
      if (col0[k] < a.H) cp_async16(add_slot(0, k), a.add.row(r0) + col0[k]);
    cp_async_commit();
  }

  // Each row's refined binary64 rstd for dw (rstd_refined of the forward's
  // m, a.msq; the FP32 rstd widened without it), computed 32 rows at a time
  // by the CTA's first warp (one row a lane) into shared memory. Per row the
  // team then reads one shared 8-byte value (the FP32 rstd is still loaded
  // with the row), and no row carries rstd_refined's dependent chain (a
  // global load of m and four FP64 operations): each row computing its own
  // cost +1-12% backward time on the H200 (docs/perf/backward.md, D3: the
  // table of versions). Batch b lives in slot b & 1. Batch b+1 is written at
  // the end of row 32b, after that row's barrier: the last read of batch b-1,
  // whose slot it takes, came before that barrier (row 32b-1's value, read at
  // its own top), and the barrier of row 32b+1 publishes it before its first
  // read (at the top of row 32b+32).
  __shared__ double rs_dw_s[2][kRstdBatch];
  const int rows = static_cast<int>(r1 - r0);  // <= T / num_chunks + 1
  auto stage_rstd = [&](int first) {  // rows r0+first .. +kRstdBatch-1 into slot (first / kRstdBatch) & 1
    const int j = first + static_cast<int>(threadIdx.x);
    if (threadIdx.x < kRstdBatch && j < rows) {
      const int slot = (first / kRstdBatch) & 1;
      const float r = __ldg(a.rstd + r0 + j);
      rs_dw_s[slot][threadIdx.x] = rstd_refined(a.msq != nullptr ? __ldg(a.msq + r0 + j) : 0.0, r);
    }
  };
  stage_rstd(0);
  __syncthreads();

  // Row addresses: each view's pointer to the current row r, advanced a row
  // at a time, so the loop neither multiplies r by a stride (plain rows) nor
  // divides it by heads (per-head rows; Rows::row's 64-bit division and
  // remainder compiled to a call per view and row). The backward is
  // issue-bound (docs/perf/backward.md, D2 and D9) and its per-row
  // instructions are shared by only 8 columns a thread. Plain rows: row r+d
  // is p + d*stride. Per-head rows r = t*heads + h (hh = h, tracked): row r+d
  // (d <= 2 <= heads) is p + d*stride_h within the token, else
  // p + stride + (d - heads)*stride_h.
  const __nv_bfloat16* px = a.x.row(r0);
  const __nv_bfloat16* pdy = a.dy.row(r0);
  __nv_bfloat16* pdx = a.dx.row(r0);
  const __nv_bfloat16* padd = kRes ? a.add.row(r0) : nullptr;
  const int heads = static_cast<int>(a.x.heads);  // every view's (validated: a few dozen at most)
  int hh = kHeads ? static_cast<int>(r0 % a.x.heads) : 0;
  auto row_at = [&](const auto& view, auto* p, int64_t, int d) {
    if constexpr (kHeads) {
      return hh + d < heads ? p + d * view.stride_h : p + view.stride + static_cast<int64_t>(d - heads) * view.stride_h;
    } else {
      return p + d * view.stride;
    }
  };
  auto add_at = [&](int d) { return padd + d * a.add.stride; };  // form res rows are plain

  RowIn<kSlots> cur, nxt;
  load_row(cur, a, px, pdy, r0, col0);
  nxt = cur;
  int buf = 0;
  for (int i = 0; i < rows; ++i) {
    const int64_t r = r0 + i;
    if (l2_prefetch && i + 2 < rows) {
      prefetch_l2_bulk(row_at(a.x, px, r, 2), row_bytes);
      prefetch_l2_bulk(row_at(a.dy, pdy, r, 2), row_bytes);
      if constexpr (kRes) prefetch_l2_bulk(add_at(2), row_bytes);
    }
    if (i + 1 < rows) load_row(nxt, a, row_at(a.x, px, r, 1), row_at(a.dy, pdy, r, 1), r + 1, col0);
    // Form res, vector path: dh_new of the next row into this thread's other
    // ring stage (cp.async: no registers held while it flies); this row's
    // stage is read at the dx store.
    if (stage_add) {
      if (i + 1 < rows) {
#pragma unroll
        for (int k = 0; k < kSlots; ++k)
          if (col0[k] < a.H) cp_async16(add_slot((i + 1) & 1, k), add_at(1) + col0[k]);
      }
      cp_async_commit();  // one group per row, empty on the last
    }
    const float rs = cur.rstd;
    const double rs_dw = rs_dw_s[(i / kRstdBatch) & 1][i % kRstdBatch];

    // Phase 1: this thread's share of sum(g * xhat), published for the team.
    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      float w[8];
      weights(k, w);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float xhat = mul_rn(group_at(cur.x[k], e), rs);
        const float g = mul_rn(group_at(cur.dy[k], e), w[e]);
        part = fma_rn(g, xhat, part);
      }
    }
    const float warp_total = team_sum_publish(part, red[buf]);
    // While the barrier completes: the dw accumulators (they need no c).
    auto accumulate_dw = [&] {
#pragma unroll
      for (int k = 0; k < kSlots; ++k)
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[k][e].add_triple(group_at(cur.dy[k], e), group_at(cur.x[k], e), rs_dw);
    };
    float sum;
    if constexpr (kCtas == 1) {
      accumulate_dw();
      __syncthreads();
      sum = team <= 32 ? warp_total : team_sum_collect(red[buf], team, 0);
    } else {
      namespace cg = cooperative_groups;
      auto token = cg::this_cluster().barrier_arrive();  // release: red[buf] is visible after the wait
      accumulate_dw();
      cg::this_cluster().barrier_wait(std::move(token));
      sum = cluster_team_sum_collect(red[buf], team);
    }
    const float c = mul_rn(sum, inv_h);
    buf ^= 1;

    // Phase 2: dx.
    __nv_bfloat16* dxr = pdx;  // row r
    if (stage_add) cp_async_wait_pending(1);  // this row's dh_new has landed (the next row's may fly)
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      float w[8];
      weights(k, w);
      float d[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float xhat = mul_rn(group_at(cur.x[k], e), rs);
        const float g = mul_rn(group_at(cur.dy[k], e), w[e]);
        d[e] = mul_rn(rs, fma_rn(-xhat, c, g));
      }
      if constexpr (kRes) {  // form res: dh = BF16(dx + dh_new), one rounding
        Group8 add;
        if (stage_add) add.u = col0[k] < a.H ? *add_slot(i & 1, k) : make_uint4(0u, 0u, 0u, 0u);
        else add = load_group(add_at(0), col0[k], a.H, a.vec);  // scalar path: a plain load
        store_group_bits(dxr, col0[k], a.H, a.vec, sum_group_fast(d, add));
      } else {
        store_group(dxr, col0[k], a.H, a.vec, d);
      }
    }
    if (i % kRstdBatch == 0) stage_rstd(i + kRstdBatch);
    px = row_at(a.x, px, r, 1);
    pdy = row_at(a.dy, pdy, r, 1);
    pdx = row_at(a.dx, pdx, r, 1);
    if constexpr (kHeads) hh = hh + 1 == heads ? 0 : hh + 1;
    if constexpr (kRes) padd += a.add.stride;
    cur = nxt;
  }
#pragma unroll
  for (int k = 0; k < kSlots; ++k)
    if (col0[k] < a.H) sink(chunk, col0[k], acc[k]);
  if constexpr (kCtas > 1) cooperative_groups::this_cluster().sync();  // peers may still read `red`
}

/// The chunk-pass kernels; instantiated by each variant for its Sink. One
/// slot: teams of up to 512 threads (two CTAs per SM), per-head rows (H =
/// 256: 32-thread CTAs, many per SM whatever their register count, so they
/// are allowed more registers for the head arithmetic), and teams of 544 to
/// 1024 threads in one CTA (the wide kernel); two slots: the 2-CTA cluster.
template <bool kRes, class WT, class Sink, bool kHeads = false>
__global__ void __launch_bounds__(kMaxCtaTeam, kHeads ? 1 : 2)
    bwd_chunk_kernel(const BwdRows<WT, kHeads> a, const Sink sink) {
  bwd_chunk_pass<1, 1, kRes>(a, sink);
}
template <bool kRes, class WT, class Sink>
__global__ void __launch_bounds__(kMaxTeam, 1) bwd_chunk_wide_kernel(const BwdRows<WT> a, const Sink sink) {
  bwd_chunk_pass<1, 1, kRes>(a, sink);
}
template <bool kRes, class WT, class Sink>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kMaxCtaTeam, 1)
    bwd_chunk_cluster_kernel(const BwdRows<WT> a, const Sink sink) {
  bwd_chunk_pass<2, 2, kRes>(a, sink);
}

/// Enqueue the chunk pass for validated args: one CTA per chunk holding
/// plan.h's backward team (bwd_row_geometry), or two clustered CTAs for a
/// 2-slot team. Instantiations: {1 slot narrow, 1 slot wide, 2 slots
/// clustered} x {plain, res} x WT {bf16, float}, plus {1 slot} x WT with
/// per-head rows (heads > 1: H = 256).
template <class Sink>
inline cudaError_t enqueue_chunk_pass(const BwdArgs& a, bool vec, const Sink& sink, cudaStream_t s) {
  const RowGeometry geo = bwd_row_geometry(a.H);
  const int64_t rows = a.T * a.heads;  // normalized rows
  const int64_t n = num_chunks(rows, a.H);
  auto go = [&](auto wtag) -> cudaError_t {
    using WT = decltype(wtag);
    auto make = [&](auto heads_tag) {  // the kernel arguments, plain or per-head rows
      constexpr bool kHeads = decltype(heads_tag)::value;
      return BwdRows<WT, kHeads>{{reinterpret_cast<const __nv_bfloat16*>(a.dy), a.dy_stride, a.heads, a.dy_stride_h},
                                 {reinterpret_cast<const __nv_bfloat16*>(a.x), a.x_stride, a.heads, a.x_stride_h},
                                 static_cast<const WT*>(a.w.p),
                                 a.rstd,
                                 {reinterpret_cast<__nv_bfloat16*>(a.dx), a.dx_stride, a.heads, a.dx_stride_h},
                                 rows,
                                 static_cast<int>(a.H),
                                 n,
                                 vec,
                                 {reinterpret_cast<const __nv_bfloat16*>(a.dh_new), a.dh_new_stride},
                                 a.msq};
    };
    if (a.heads > 1) {  // per-head views: H = 256 (validated), so one slot and one CTA
      if (geo.slots != 1 || geo.team > kMaxCtaTeam) return cudaErrorInvalidConfiguration;
      bwd_chunk_kernel<false, WT, Sink, true>
          <<<dim3(static_cast<unsigned>(n)), dim3(static_cast<unsigned>(geo.team)), 0, s>>>(make(std::true_type{}), sink);
      return cudaGetLastError();
    }
    const BwdRows<WT> r = make(std::false_type{});
    // Form res on the vector path: the dh_new ring, 2 stages x slots x CTA
    // threads x 16 bytes, which is 2 x team x 16 bytes in every kernel (a
    // 2-slot team's CTA holds team/2 threads): at most 32 KiB, no opt-in needed.
    const size_t ring = a.dh_new != nullptr && vec ? static_cast<size_t>(2 * geo.team) * sizeof(uint4) : 0;
    const dim3 team(static_cast<unsigned>(geo.team));
    auto launch = [&](auto res_tag) {
      constexpr bool kRes = decltype(res_tag)::value;
      if (geo.slots == 2) {
        bwd_chunk_cluster_kernel<kRes, WT, Sink><<<dim3(static_cast<unsigned>(2 * n)),
                                                   dim3(static_cast<unsigned>(geo.team / 2)),
                                                   ring, s>>>(r, sink);
      } else if (geo.team <= kMaxCtaTeam) {
        bwd_chunk_kernel<kRes, WT, Sink><<<dim3(static_cast<unsigned>(n)), team, ring, s>>>(r, sink);
      } else {
        bwd_chunk_wide_kernel<kRes, WT, Sink><<<dim3(static_cast<unsigned>(n)), team, ring, s>>>(r, sink);
      }
    };
    if (a.dh_new != nullptr) {
      launch(std::true_type{});
    } else {
      launch(std::false_type{});
    }
    return cudaGetLastError();
  };
  return a.w.dtype == WDtype::fp32 ? go(float{}) : go(__nv_bfloat16{});
}

}  // namespace normgate::kernels::dev
