// normgate/kernels/models.h: CPU models of the kernel variants.
//
// A model follows its variant's arithmetic step by step (same row geometry from
// plan.h and chunk plan from chunk_plan.h, same accumulators from accum.h, same
// order of every FP32/FP64 operation, core/hd.h roundings), so it predicts the
// GPU's bits:
//   fwd_rowwise, fwd_multirow, fwd_narrow, fwd_wide, fwd_staged:
//                       y, rstd, msq bitwise equal to the GPU (one model:
//                       fwd_multirow has fwd_rowwise's rows and arithmetic;
//                       fwd_narrow its own 16-lane order of the sum,
//                       fwd_wide and fwd_staged the order of their geometry,
//                       wide.h and staged.h)
//   every backward:     dx bitwise equal to the GPU (same reduction tree for c)
//   bwd_det_chunked, bwd_det_onepass, bwd_det_wide, bwd_det_heads, bwd_det_wreg, bwd_det_lean, ctl_fp32_seq,
//   ctl_bf16_partials, ctl_warp64_dw:
//                       dw bitwise equal to the GPU given the same rstd and
//                       msq (or none); bwd_det_onepass's model IS
//                       bwd_det_chunked's (same partials, same combine order,
//                       one kernel instead of two): their outputs are equal
//   bwd_fp32_blocked:   dw bitwise equal to the GPU given the same rstd (msq
//                       is not used: FP32 products with the FP32 rstd, FP32
//                       chunk partials, FP32 combine in plan.h's lane order)
//   bwd_nondet_atomic:  dw combines the chunk partials in increasing chunk
//                       order; the GPU's atomics use some order, so the GPU
//                       differs by FP64 reassociation of the partials followed
//                       by one FP32 rounding (normally 0 or 1 ulp of FP32)
// Exceptions: NaN payloads (host and device propagate different NaN bits),
// and the results of a compiler that contracts host FP operations (normgate
// builds with -ffp-contract=off).
//
// Models are compiled in every build (no CUDA needed) and are OpenMP-parallel
// over rows or chunks; results do not depend on `threads`.
#pragma once

#include <cstdint>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/kernels/registry.h"

namespace normgate::kernels {

/// Forward outputs of a model: y BF16 bits [rows, cols], rstd FP32 [rows].
struct FwdResult {
  std::vector<uint16_t> y;
  std::vector<float> rstd;
  std::vector<double> msq;  ///< each row's m (what FwdArgs::msq receives)
};

/// Backward outputs of a model: dx BF16 bits [rows, cols], dw FP32 [cols].
struct BwdResult {
  std::vector<uint16_t> dx;
  std::vector<float> dw;
};

/// Model of the forward variant `v` (fwd_rowwise or fwd_multirow: the same
/// model, their bits are equal; fwd_narrow: H = 256 only, its own order of
/// the binary64 sum, fwd_narrow.cu; fwd_wide and fwd_staged: plan.h's rule
/// on wide.h's and staged.h's geometry). x: plain view (heads == 1; per-head rows
/// are passed as the plain [T*heads, 256] rows they are) with 1 <= cols <=
/// kMaxH; w.cols == x.cols; eps finite >= 0. Throws std::invalid_argument
/// naming the bad argument otherwise, and for a backward variant or a
/// forward variant without a model.
/// threads <= 0: OpenMP default.
FwdResult model_fwd(const Variant& v, RowView<uint16_t> x, WeightView w, float eps, int threads = 0);

/// Model of backward variant `v`, given the forward's rstd (rstd.size() ==
/// rows) and optionally its msq (null: none; else msq->size() == rows: dw
/// uses rstd.h rstd_refined(msq, rstd), as BwdArgs::msq).
/// x, dy: plain views of equal shape; w.cols == cols. Form res:
/// dx_add (dh_new, same shape; p == nullptr: none) is added to each FP32 dx
/// value with one rounding to BF16 (core/bf16.h bf16_sum_rn), so dx holds dh.
/// heads: rows per token (24, 4 for the head forms, else 1; rows % heads
/// == 0); only ctl_heads_dw_mixed's dw depends on it.
/// Model-only controls (registry.h): those whose fault is in the forward
/// run bwd_det_chunked's backward here; ctl_res_grad_early adds dx_add to dy
/// (BF16, one rounding) before the backward instead of to dx after;
/// ctl_warp64_dw and ctl_heads_dw_mixed fault dw.
/// Throws std::invalid_argument naming the bad argument otherwise. Rows = 0
/// gives an empty dx and dw = 0.
BwdResult model_bwd(const Variant& v, RowView<uint16_t> x, RowView<uint16_t> dy, WeightView w,
                    const std::vector<float>& rstd, int threads = 0, RowView<uint16_t> dx_add = {},
                    const std::vector<double>* msq = nullptr, int64_t heads = 1);

/// The fused residual add of the res forward: h_new = BF16(h + u), one
/// rounding of the exact sum per element (bf16_sum_rn), contiguous [rows,
/// cols]. h, u: plain views of equal shape. Throws std::invalid_argument on
/// a shape mismatch.
std::vector<uint16_t> model_residual_add(RowView<uint16_t> h, RowView<uint16_t> u);

/// The whole step as the GPU pipeline runs it: model_fwd(fwd) for y, rstd
/// and msq, then model_bwd(bwd, ..., that rstd and msq). Outputs are
/// contiguous (h_new empty unless form res). `fwd` must be a forward variant
/// with a model, `bwd` a backward variant (controls allowed); otherwise
/// std::invalid_argument naming it.
/// Form res (u.p != nullptr): x holds h; h_new = model_residual_add(x, u) is
/// normalized instead of x and returned in Outputs::h_new, and dh_new (may be
/// absent: p == nullptr) is added to dx (Outputs::dx holds dh).
/// heads: rows per token (head forms 24 or 4, else 1), for the controls
/// that depend on the head structure. A model-only control whose fault sits
/// in the forward (rstd: ctl_rstd_bf16, ctl_eps_*, ctl_sumsq_bf16,
/// ctl_padded_lanes, ctl_heads_shared_stats) runs its own forward in place
/// of `fwd` and hands its backward no msq.
/// forward_only: the backward step is not run (what a forward-only check
/// reads, validators::CheckRequest::forward_only): Outputs::dx and dw stay
/// empty; y, rstd and h_new are those of the whole step, bit for bit.
Outputs run_model(const Variant& fwd, const Variant& bwd, RowView<uint16_t> x, RowView<uint16_t> dy, WeightView w,
                  float eps, int threads = 0, RowView<uint16_t> u = {}, RowView<uint16_t> dh_new = {},
                  int64_t heads = 1, bool forward_only = false);
/// run_model(default_fwd(), bwd, ...): a backward variant's step (its
/// forward is the default forward, fwd_rowwise).
Outputs run_model(const Variant& bwd, RowView<uint16_t> x, RowView<uint16_t> dy, WeightView w,
                  float eps, int threads = 0, RowView<uint16_t> u = {}, RowView<uint16_t> dh_new = {},
                  int64_t heads = 1);

/// The team reduction of plan.h, on the host: partials[team] (one value
/// per thread of the team, team a multiple of 32, <= 1024) reduced by the
/// warp butterfly, then across warps; FP32 (the backward's sum) or binary64
/// (the forward's sum of squares), round to nearest even at every add.
/// Exposed for tests. Throws nothing (team outside its range: undefined).
float model_team_sum(const float* partials, int team);
double model_team_sum(const double* partials, int team);

}  // namespace normgate::kernels
