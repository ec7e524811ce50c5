// kernels/src/bwd_chunk_pass_f32.cuh (internal): bwd_chunk_pass.cuh's chunk
// pass with FP32 dw partials, for bwd_fp32_blocked. A copy of
// bwd_chunk_pass() (that file is hashed into the approved variants, and its
// Sink receives FP64 Acc64 accumulators), changed in the dw accumulation only:
//   acc_j = fmaf(FP32_rn(dy*x), rstd, acc_j)    (FP32; acc_j = 0 at the chunk start)
// with the forward's FP32 rstd (the refined binary64 rstd is not staged and
// a.msq is not read: rounded to FP32 it is this rstd, except about one row in
// 10^7 where the rounding of m straddles a boundary, rstd.h). dy*x is exact
// in FP32 for BF16 dy and x (16 significant bits) unless it underflows
// FP32's normal range or overflows it; the fma rounds once per row. dx, the
// row loop, loads, barriers and the dh_new ring are bwd_chunk_pass()'s,
// statement for statement, so dx is bitwise bwd_det_chunked's.
// Each column has exactly one owner thread, so its chunk partial is a
// sequential FP32 sum over the chunk's rows in order: the CPU model replays it
// (kernels/models/src/model_bwd_fp32_blocked.cpp).
#pragma once

#include "bwd_chunk_pass.cuh"

namespace normgate::kernels::dev {

/// The FP32 chunk pass (see file comment) for one CTA (kCtas == 1) or one
/// CTA of a 2-CTA cluster (kCtas == 2; the team is both CTAs' threads). Sink
/// is called once per owned group with col0 < H: sink(chunk, col0, acc) (col0
/// an int), where acc[e] is column col0+e's FP32 partial (entries for columns
/// >= H hold zeros and must be ignored).
template <int kSlots, int kCtas, bool kRes, class WT, bool kHeads, class Sink>
__device__ __forceinline__ void bwd_chunk_pass_f32(const BwdRows<WT, kHeads>& a, const Sink& sink) {
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
  float acc[kSlots][8];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    col0[k] = static_cast<int>(group_col0(team, k, t));
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[k][e] = 0.0f;
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

  // No refined rstd (bwd_chunk_pass.cuh stages one for its FP64 dw): the
  // FP32 products use the FP32 rstd (file comment), so a.msq is not read.
  const int rows = static_cast<int>(r1 - r0);  // <= T / num_chunks + 1

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
    // While the barrier completes: the FP32 dw accumulators (they need no c):
    // p = FP32_rn(dy*x) (exact for BF16 dy, x in FP32's normal range), then
    // acc = fmaf(p, rstd, acc), one rounding per row.
    auto accumulate_dw = [&] {
#pragma unroll
      for (int k = 0; k < kSlots; ++k)
#pragma unroll
        for (int e = 0; e < 8; ++e)
          acc[k][e] = fma_rn(mul_rn(group_at(cur.dy[k], e), group_at(cur.x[k], e)), rs, acc[k][e]);
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

/// The FP32 chunk-pass kernels (bwd_chunk_pass.cuh's, same launch bounds). One
/// slot: teams of up to 512 threads (two CTAs per SM), per-head rows (H =
/// 256: 32-thread CTAs, many per SM whatever their register count, so they
/// are allowed more registers for the head arithmetic), and teams of 544 to
/// 1024 threads in one CTA (the wide kernel); two slots: the 2-CTA cluster.
template <bool kRes, class WT, class Sink, bool kHeads = false>
__global__ void __launch_bounds__(kMaxCtaTeam, kHeads ? 1 : 2)
    bwd_chunk_f32_kernel(const BwdRows<WT, kHeads> a, const Sink sink) {
  bwd_chunk_pass_f32<1, 1, kRes>(a, sink);
}
template <bool kRes, class WT, class Sink>
__global__ void __launch_bounds__(kMaxTeam, 1) bwd_chunk_f32_wide_kernel(const BwdRows<WT> a, const Sink sink) {
  bwd_chunk_pass_f32<1, 1, kRes>(a, sink);
}
template <bool kRes, class WT, class Sink>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kMaxCtaTeam, 1)
    bwd_chunk_f32_cluster_kernel(const BwdRows<WT> a, const Sink sink) {
  bwd_chunk_pass_f32<2, 2, kRes>(a, sink);
}

}  // namespace normgate::kernels::dev
