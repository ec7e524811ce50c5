// kernels/src/fwd_narrow.cu: variant fwd_narrow (forward, deterministic),
// rows of exactly H = 256: plain [T, 256] and the per-head views (heads4,
// heads24: row r = t*heads + h at t*stride + h*stride_h, one shared w[256]).
//
// Why (docs/perf/forward.md, D11): fwd_rowwise gives a row of 256 a whole
// warp (plan.h: team 32, one 8-column group a lane) and runs, per row and in
// every lane, the 5-step binary64 butterfly and the whole binary64 rstd;
// per-head rows also pass through its shared-memory ring. Here a row has 16
// lanes, so a warp holds two rows side by side and each lane's binary64
// rstd serves one of them, and each lane keeps two rows, every load of both
// issued before the first sum (short CTAs of 256 threads, loads straight
// into registers).
//
// Geometry: lane l (0..15) of a row holds the groups k = 0, 1 at columns
// c(k, l) = (16*k + l)*8 .. +7 (the 16 lanes of a row read adjacent 16-byte
// pieces). Warp w of CTA b takes rows R0 + 2*q + s, R0 = row_begin + (8*b +
// w)*4, for q = 0, 1 (the lane's two rows) and s = lane / 16 (the half of
// the warp); one launch (row_begin 0) unless the grid would pass 2^31 - 1.
// Per row, in this order (the CPU model, model_fwd_rowwise.cpp, repeats it):
//   ss_l = fma(x, x, ss_l) in binary64 over k ascending, then the 8 columns
//          of the group ascending (x^2 is exact, the sum cannot overflow);
//   the butterfly over the row's 16 lanes: xor offsets 8, 4, 2, 1, each lane
//          adding its partner's value to its own (every lane ends with the
//          same bits);
//   rstd = row_rstd_fp64(ss, 1/256, eps) (rstd.h: the FP32 nearest to
//          1/sqrt(fma(ss, 1/256, eps))), m = row_m(ss, 1/256, eps);
//   y    = BF16_rn((x * rstd) * w)  (mul_rn twice).
// The sum associates differently from fwd_rowwise's (32 lanes of one group,
// offsets 16..1), so ss may differ in its last bit; rstd is then the same
// except for rows within about 2^-47 (relative) of an FP32 rounding boundary
// of 1/sqrt(m) (rstd.h), and msq may differ in its last bit.
// Lane 0 of a row writes rstd and (when FwdArgs::msq is given) m. The
// scalar path (rows, w or strides not 16-byte aligned) is the same kernel
// instantiated with kVec = false: load_group's guarded 2-byte loads.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda_check.h"
#include "device_blocks.cuh"
#include "launch.h"
#include "normgate/kernels/rstd.h"

namespace normgate::kernels {
namespace dev {
namespace {

constexpr int kNarrowH = 256;
constexpr int kNarrowLanes = 16;      // lanes a row
constexpr int kNarrowGroups = 2;      // 8-column groups a lane holds per row
constexpr int kNarrowRowsLane = 2;    // rows a lane holds at once
constexpr int kNarrowThreads = 256;   // threads a CTA
constexpr int kNarrowRowsCta = kNarrowThreads / 32 * (32 / kNarrowLanes) * kNarrowRowsLane;  // 32

template <class WT, bool kHeads>
struct NarrowArgs {
  Rows<const __nv_bfloat16, kHeads> x{nullptr, 0};
  const WT* w = nullptr;
  Rows<__nv_bfloat16, kHeads> y{nullptr, 0};
  float* rstd = nullptr;
  double* msq = nullptr;  ///< optional [rows] (FwdArgs::msq)
  int64_t rows = 0;       ///< normalized rows (T * heads)
  int64_t row_begin = 0;  ///< first row of this launch's CTA 0 (launches of at most 2^31 - 1 CTAs)
  double inv_h = 0;  ///< 1.0 / 256 (exact)
  double eps64 = 0;  ///< eps as binary64 (exact)
  /// plan.h heads_magic(x.heads) for the per-head views (0 for plain rows),
  /// computed once on the host: on the device it is a 64-bit division,
  /// which every thread of these short CTAs would pay for its four rows
  /// (forward.md, D13).
  uint64_t heads_magic = 0;
};

// kVec: the 16-byte path (rows, strides and w 16-byte aligned), a template
// parameter so that each kernel holds one path only (forward.md, D13).
template <class WT, bool kHeads, bool kVec>
__global__ void __launch_bounds__(kNarrowThreads) fwd_narrow_kernel(const NarrowArgs<WT, kHeads> a) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  const int half = lane / kNarrowLanes, l = lane % kNarrowLanes;
  const uint64_t hm = a.heads_magic;
  const int64_t r0 = a.row_begin + static_cast<int64_t>(blockIdx.x) * kNarrowRowsCta +
                     static_cast<int64_t>(warp) * (2 * kNarrowRowsLane) + half;  // row of q = 0
  // Every load of both rows first, straight into registers.
  Group8 cur[kNarrowRowsLane][kNarrowGroups];
#pragma unroll
  for (int q = 0; q < kNarrowRowsLane; ++q) {
    const int64_t r = r0 + 2 * q;
#pragma unroll
    for (int k = 0; k < kNarrowGroups; ++k) {
      cur[q][k].u = make_uint4(0u, 0u, 0u, 0u);
      if (r < a.rows) cur[q][k] = load_group(a.x.row(r, hm), (k * kNarrowLanes + l) * 8, kNarrowH, kVec);
    }
  }
  // Both rows' sums and rstd, then y group by group (w loaded once per group,
  // after the sums, so it holds no registers while the loads are in flight).
  float rs[kNarrowRowsLane];
#pragma unroll
  for (int q = 0; q < kNarrowRowsLane; ++q) {
    const int64_t r = r0 + 2 * q;
    double ss = 0.0;
#pragma unroll
    for (int k = 0; k < kNarrowGroups; ++k) ss = add_squares(cur[q][k], ss);
#pragma unroll
    for (int off = kNarrowLanes / 2; off > 0; off >>= 1) ss = sum_rn(ss, __shfl_xor_sync(0xFFFFFFFFu, ss, off));
    if (l == 0 && r < a.rows && a.msq != nullptr) a.msq[r] = row_m(ss, a.inv_h, a.eps64);
    rs[q] = row_rstd_fp64(ss, a.inv_h, a.eps64);
    if (l == 0 && r < a.rows) a.rstd[r] = rs[q];
  }
#pragma unroll
  for (int k = 0; k < kNarrowGroups; ++k) {
    const int col0 = (k * kNarrowLanes + l) * 8;
    float w[8];
    load_weights(a.w, col0, kNarrowH, kVec, w);
#pragma unroll
    for (int q = 0; q < kNarrowRowsLane; ++q) {
      const int64_t r = r0 + 2 * q;
      if (r < a.rows) store_y_group(a.y.row(r, hm), col0, kNarrowH, kVec, cur[q][k], rs[q], w);
    }
  }
}

}  // namespace
}  // namespace dev

namespace detail {

void launch_fwd_narrow(const FwdArgs& a, bool vec, Stream s) {
  if (a.H != dev::kNarrowH || a.form == Form::res)
    throw std::invalid_argument("fwd_narrow: rows of H = 256, plain or per-head (got H = " + std::to_string(a.H) +
                                ", form " + std::string(to_string(a.form)) + ")");
  const int64_t rows = a.T * a.heads;  // normalized rows
  auto go = [&](auto wtag, auto heads_tag, auto vec_tag) {
    using WT = decltype(wtag);
    constexpr bool kHeads = decltype(heads_tag)::value;
    dev::NarrowArgs<WT, kHeads> f;
    f.x = {reinterpret_cast<const __nv_bfloat16*>(a.x), a.x_stride, a.heads, a.x_stride_h};
    f.w = static_cast<const WT*>(a.w.p);
    f.y = {reinterpret_cast<__nv_bfloat16*>(a.y), a.y_stride, a.heads, a.y_stride_h};
    f.rstd = a.rstd;
    f.msq = a.msq;
    f.rows = rows;
    f.inv_h = 1.0 / static_cast<double>(dev::kNarrowH);  // rstd.h, as the CPU model
    f.eps64 = static_cast<double>(a.eps);
    f.heads_magic = kHeads ? heads_magic(a.heads) : 0;
    // One launch of ceil(rows / 32) CTAs (at most 2^27 for rows <= 2^32);
    // launches of at most 2^31 - 1 CTAs each beyond that.
    constexpr int64_t kMaxGrid = 0x7FFFFFFF;
    for (int64_t begin = 0; begin < rows; begin += kMaxGrid * dev::kNarrowRowsCta) {
      const int64_t need = (rows - begin + dev::kNarrowRowsCta - 1) / dev::kNarrowRowsCta;
      f.row_begin = begin;
      dev::fwd_narrow_kernel<WT, kHeads, decltype(vec_tag)::value>
          <<<static_cast<unsigned>(need < kMaxGrid ? need : kMaxGrid), dev::kNarrowThreads, 0, s>>>(f);
    }
  };
  auto with_vec = [&](auto wtag, auto heads_tag) {
    if (vec)
      go(wtag, heads_tag, std::true_type{});
    else
      go(wtag, heads_tag, std::false_type{});
  };
  const bool fp32 = a.w.dtype == WDtype::fp32;
  if (a.heads > 1) {
    if (fp32)
      with_vec(float{}, std::true_type{});
    else
      with_vec(__nv_bfloat16{}, std::true_type{});
  } else {
    if (fp32)
      with_vec(float{}, std::false_type{});
    else
      with_vec(__nv_bfloat16{}, std::false_type{});
  }
  NG_CUDA_LAUNCHED("fwd_narrow_kernel");
}

}  // namespace detail
}  // namespace normgate::kernels
