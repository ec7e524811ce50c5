// normgate/kernels/rmsnorm.h: launch API of the RMSNorm training kernels.
//
// Forms (FwdArgs/BwdArgs::form): plain: x, dy, y, dx are [T, H] BF16
// (uint16_t bit patterns), row t at p + t*stride (stride in ELEMENTS, >= H;
// inner dimension contiguous). heads24/heads4: [T, heads, 256] views, row
// t*heads + h at p + t*stride + h*stride_h. res: plain rows plus the fused
// residual add (u, h_new in the forward, dh_new in the backward). w is [H]
// (one w[256] shared by all heads), BF16 or FP32. All pointers are DEVICE pointers; the
// calls enqueue work on `stream` and return without synchronizing.
//
// Math (FP32 unless stated; every rounding explicit, see core/hd.h):
//   forward, row r (the order of the sum is plan.h's row geometry):
//     ss      = sum_j fma(x_j, x_j, .)       (binary64: cannot overflow)
//     m       = fma(ss, 1/H, eps)            (binary64, 1/H rounded once)
//     rstd_r  = FP32 nearest to 1/sqrt(m)    (rstd.h: an exact midpoint test;
//               the correctly rounded rstd of the exact mean + eps except
//               where m's own error, ~sqrt(H)*2^-53, straddles a rounding
//               boundary: about one row in 10^7 at H = 4096)
//     y_rj    = BF16_rn((x_rj * rstd_r) * w_j)  (two FP32 products, then RNE)
//     msq_r   = m                            (optional output, binary64)
//   backward, row r, with the forward's FP32 rstd_r (and optionally msq_r):
//     xhat = x*rstd;  g = dy*w;  s_r = sum_j fma(g, xhat, .)  (same geometry)
//     c_r  = s_r * FP32_rn(1/H)          (a product: exact division for H = 2^k)
//     dx   = BF16_rn(rstd * fma(-xhat, c_r, g))
//     r'_r = rstd.h rstd_refined(msq_r, rstd_r): one binary64 Newton step
//            (~6e-15 relative of 1/sqrt(m)); (double)rstd_r without msq
//     dw_j = sum_r dy*x*r': per chunk of rows (plan.h) an FP64 sum (accum.h
//            Acc64: s = fma(dy, x*r', s) in binary64: x*r' rounds once with a
//            binary64 r', is exact with an FP32 one), then the chunk
//            partials combined in FP64 (variant-specific).
//            Except bwd_fp32_blocked (accuracy for speed): per chunk an FP32
//            sum from 0 of fmaf(FP32_rn(dy*x), rstd_r, .) (FP32 rstd; msq
//            unused), the FP32 partials combined in FP32 in plan.h's order.
//
// Range: every finite BF16 row has a finite sum of squares in binary64, so
// rows with RMS above ~1.8e19 (the `huge` family) get their true rstd (down
// to FP32 subnormals), and the backward's dw products stay finite and
// accurate in binary64 for every finite input and finite rstd (dy*x above
// 3.4e38 included). Rows
// holding Inf or NaN give rstd 0 or NaN. With eps = 0 (allowed), an all-zero
// row, or one whose 1/sqrt(mean) exceeds FP32's range (tiny subnormals), gets
// rstd = +inf, so its y is NaN (0 * inf) or +-inf, and the dw columns it
// touches are NaN or +-inf.
//
// Vector path: 16-byte loads/stores are used when H % 8 == 0, w and every
// [T, H] tensor pointer are 16-byte aligned and every row stride is a multiple
// of 8;
// otherwise a scalar path computes the same values (bitwise: same rounding
// tree). BF16 pointers must be 2-byte aligned, FP32 pointers 4-byte aligned.
//
// Errors: invalid arguments throw std::invalid_argument (message names the
// bad value) BEFORE anything is enqueued; a failing CUDA call throws
// std::runtime_error naming the call, the source location and
// cudaGetErrorString. A library built without CUDA validates, then throws
// std::runtime_error("... built without CUDA").
#pragma once

#include <cstddef>
#include <cstdint>

#include "normgate/core/types.h"
#include "normgate/kernels/registry.h"

// Same type as cudaStream_t (both are `struct CUstream_st*`), spelled without
// including CUDA headers so this header works in a CPU-only build.
struct CUstream_st;

namespace normgate::kernels {

/// A CUDA stream (nullptr: the legacy default stream).
using Stream = CUstream_st*;

/// Forward arguments. Shapes: x, y [T, H] BF16; rstd [T] FP32; w [H]. Per-head
/// forms (heads > 1): x, y [T, heads, H], rstd [T*heads].
struct FwdArgs {
  const uint16_t* x = nullptr;  ///< BF16 bits, device
  int64_t x_stride = 0;         ///< elements between rows of x, >= H
  WeightView w;                 ///< device pointer; w.cols must equal H
  uint16_t* y = nullptr;        ///< BF16 bits, device; must not overlap x, w, rstd
  int64_t y_stride = 0;         ///< elements between rows of y, >= H
  float* rstd = nullptr;        ///< FP32 [T], device
  int64_t T = 0;                ///< rows (tokens when heads > 1), T*heads in 0 .. kMaxT (0: nothing is launched)
  int64_t H = 0;                ///< columns, the variant's range (1 .. 16384)
  float eps = 1e-6f;            ///< finite, >= 0
  Form form = Form::plain;      ///< plain, res, heads24 or heads4
  /// Per-head forms: x and y are [T, heads, H] (rows r = t*heads + h, rstd
  /// [T*heads]); *_stride is then the distance between tokens and *_stride_h
  /// the distance between heads of one token, in elements. plain: heads = 1.
  int64_t heads = 1;
  int64_t x_stride_h = 0;
  int64_t y_stride_h = 0;
  /// Form res (fused residual add; heads = 1): x holds h; u [T, H] BF16 is the
  /// residual branch; h_new [T, H] BF16 receives BF16(h + u), one rounding of
  /// the exact sum (core/bf16.h bf16_sum_rn), and is what gets normalized.
  /// Required for res (h_new must not overlap x, u, w, y, rstd; u must not
  /// overlap the outputs y, rstd, msq), null otherwise.
  const uint16_t* u = nullptr;
  int64_t u_stride = 0;         ///< >= H
  uint16_t* h_new = nullptr;
  int64_t h_new_stride = 0;     ///< >= H
  /// Optional binary64 [T] (T*heads), device, 8-byte aligned: each row's m =
  /// fma(sum of x^2, 1/H, eps) in binary64, whose 1/sqrt the FP32 rstd rounds
  /// (rstd.h). Null: not written. Hand it to the backward (BwdArgs::msq) for a
  /// dw free of the FP32 rstd's rounding. Must not overlap the other buffers.
  double* msq = nullptr;
};

/// Backward arguments. Shapes: dy, x, dx [T, H] BF16 ([T, heads, H] when heads > 1);
/// rstd [T*heads] FP32 (from the
/// forward); w [H]; dw [H] FP32. dx and dw must not overlap any input or the
/// workspace. No eps: the backward uses the forward's rstd (dx: rstd; dw:
/// rstd refined against the forward's msq when given, rstd.h rstd_refined).
struct BwdArgs {
  const uint16_t* dy = nullptr;  ///< BF16 bits, device
  int64_t dy_stride = 0;         ///< >= H
  const uint16_t* x = nullptr;   ///< BF16 bits, device
  int64_t x_stride = 0;          ///< >= H
  WeightView w;                  ///< device pointer; w.cols must equal H
  const float* rstd = nullptr;   ///< FP32 [T], device
  uint16_t* dx = nullptr;        ///< BF16 bits, device
  int64_t dx_stride = 0;         ///< >= H
  float* dw = nullptr;           ///< FP32 [H], device; always written (0 when T == 0)
  int64_t T = 0;                 ///< rows (tokens when heads > 1), T*heads in 0 .. kMaxT
  int64_t H = 0;                 ///< columns, the variant's range
  void* workspace = nullptr;     ///< device, 16-byte aligned, caller-owned;
                                 ///< may be null when bwd_workspace_bytes() == 0
  size_t workspace_bytes = 0;    ///< >= bwd_workspace_bytes(variant, T, H)
  Form form = Form::plain;       ///< plain, res, heads24 or heads4
  /// Per-head forms, as in FwdArgs: [T, heads, H] views, rstd [T*heads].
  int64_t heads = 1;
  int64_t dy_stride_h = 0;       ///< may be 0 (one dy for every head), as may dy_stride
  int64_t x_stride_h = 0;
  int64_t dx_stride_h = 0;
  /// Form res: x is the forward's h_new; dh_new [T, H] BF16, the gradient
  /// reaching h_new from the residual stream, is added to each FP32 dx value
  /// with one rounding (bf16_sum_rn), so dx receives dh (= du). Optional for
  /// res (null: dh = dx), must be null for the other forms.
  const uint16_t* dh_new = nullptr;
  int64_t dh_new_stride = 0;     ///< >= H
  /// Optional binary64 [T*heads], device, 8-byte aligned: the forward's
  /// FwdArgs::msq. dw then uses each row's rstd refined in binary64 against
  /// it (rstd.h rstd_refined); null: rstd alone, whose FP32 rounding (up to
  /// 2^-24 relative per row) adds up over a long column (dw err/tol 2.43 on
  /// an H200 gate case, docs/perf/numerics.md, D2). Must not overlap dx, dw or
  /// the workspace. An m that is not this rstd's is detected only when the
  /// Newton step would move rstd by more than 2^-23 (then rstd is used).
  const double* msq = nullptr;
};

/// Whether a backward may run a negative control.
enum class ControlUse : uint8_t { refuse = 0, allow = 1 };

/// Device workspace a backward call needs, in bytes (0 when T == 0). Contents
/// on entry do not matter: every variant initializes what it reads.
///   bwd_det_chunked, bwd_det_wide, bwd_det_heads, bwd_det_wreg, bwd_det_lean, ctl_bf16_partials,
///   ctl_fp32_seq: num_chunks(T,H)*H*8
///       (one FP64 partial per chunk and column, plan.h)
///   bwd_nondet_atomic: 8*H*8 (8 FP64 accumulators per column), or for
///       short chunks (fewer than 128 rows each: nondet_replicas.h) the det
///       variant's num_chunks(T,H)*H*8
///   bwd_det_onepass: roundup(num_chunks(T,H)*H*8, 16) + 16 (the FP64
///       partials, then its ticket counter; the call zeroes the counter
///       with a 4-byte cudaMemsetAsync before its one kernel)
///   bwd_fp32_blocked: roundup(num_chunks(T,H)*H*4, 16) (FP32 partials)
/// Throws std::invalid_argument if v is not a backward variant, T < 0 or
/// T > kMaxT, or H is outside the variant's range.
size_t bwd_workspace_bytes(const Variant& v, int64_t T, int64_t H);

/// Check forward arguments without launching anything. Throws
/// std::invalid_argument naming the first bad value: v not a forward variant;
/// form not supported; T < 0 or > kMaxT; H outside v's range; w.cols != H;
/// w dtype not supported; eps not finite or < 0; a null or misaligned pointer
/// (when T > 0); a stride < H or a row extent overflowing int64; y
/// overlapping x, w or rstd, or rstd overlapping x or w; msq (when given)
/// not 8-byte aligned or overlapping x, w, y, rstd, u or h_new.
void validate_fwd(const Variant& v, const FwdArgs& a);

/// Check backward arguments without launching anything. Throws
/// std::invalid_argument naming the first bad value: as validate_fwd, plus
/// v not a backward variant; v a control and ctl == refuse; dw null (any T);
/// workspace null, misaligned or smaller than bwd_workspace_bytes(); dx or dw
/// overlapping an input, each other or the workspace; msq (when given) not
/// 8-byte aligned or overlapping dx, dw or the workspace.
void validate_bwd(const Variant& v, const BwdArgs& a, ControlUse ctl = ControlUse::refuse);

/// True when rmsnorm_fwd would take the 16-byte vector path for these args.
bool fwd_vector_path(const FwdArgs& a);
/// True when rmsnorm_bwd would take the 16-byte vector path for these args.
bool bwd_vector_path(const BwdArgs& a);

/// RMSNorm forward: writes y and rstd (and h_new for res, msq when given).
/// validate_fwd() first, then enqueues (T == 0: nothing). Deterministic:
/// bitwise identical for identical inputs, and bitwise equal to model_fwd()
/// (models.h) except NaN payloads.
void rmsnorm_fwd(const Variant& v, const FwdArgs& a, Stream stream = nullptr);

/// RMSNorm backward: writes dx and dw, using the workspace. validate_bwd()
/// first, then enqueues. T == 0 enqueues only dw = 0 (H values).
/// dx: bitwise deterministic for every variant and equal to the CPU model.
/// dw: bwd_det_chunked, bwd_det_onepass, bwd_det_wide, bwd_det_heads,
/// bwd_det_wreg, bwd_det_lean, bwd_fp32_blocked and the controls are bitwise
/// deterministic (whatever the workspace held) and equal to their CPU model
/// given the same rstd and msq (or none); bwd_det_onepass's, bwd_det_wide's,
/// bwd_det_heads's, bwd_det_wreg's and bwd_det_lean's dx and dw equal
/// bwd_det_chunked's
/// bit for bit; bwd_nondet_atomic varies in the
/// last bits with the order of the atomics. Every call is capturable in a
/// CUDA graph and replays correctly; bwd_det_onepass enqueues a 4-byte memset
/// and ONE kernel (bwd_det_chunked: two kernels).
void rmsnorm_bwd(const Variant& v, const BwdArgs& a, Stream stream = nullptr,
                 ControlUse ctl = ControlUse::refuse);

}  // namespace normgate::kernels
