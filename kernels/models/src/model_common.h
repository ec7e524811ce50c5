// kernels/models/src/model_common.h (internal): argument checks and the host replay
// of plan.h's team reduction, shared by the CPU models.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/core/types.h"
#include "normgate/kernels/plan.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/registry.h"

namespace normgate::kernels::detail {

[[noreturn]] inline void model_bad(const Variant& v, const std::string& msg) {
  throw std::invalid_argument("model(" + std::string(v.name) + "): " + msg);
}

/// Checks a plain BF16 row view (heads == 1, cols in the variant's range).
inline void check_view(const Variant& v, const char* name, const RowView<uint16_t>& a) {
  if (a.heads != 1) model_bad(v, std::string(name) + ".heads = " + std::to_string(a.heads) + " (plain views only)");
  if (a.T_rows < 0) model_bad(v, std::string(name) + ".T_rows = " + std::to_string(a.T_rows) + " is negative");
  if (!v.supports_h(a.cols))
    model_bad(v, std::string(name) + ".cols = " + std::to_string(a.cols) + " is out of range " +
                     std::to_string(v.h_min) + ".." + std::to_string(v.h_max));
  if (a.T_rows > 0 && a.p == nullptr) model_bad(v, std::string(name) + " is null");
  if (a.T_rows > 1 && a.stride_t < a.cols)
    model_bad(v, std::string(name) + ".stride_t = " + std::to_string(a.stride_t) + " is less than cols");
}

inline void check_weight(const Variant& v, const WeightView& w, int64_t H) {
  if (!v.supports(w.dtype)) model_bad(v, "weight dtype " + std::string(to_string(w.dtype)) + " is not supported");
  if (w.cols != H) model_bad(v, "w.cols = " + std::to_string(w.cols) + " differs from H = " + std::to_string(H));
  if (w.p == nullptr) model_bad(v, "w is null");
}

/// w_j as FP32 (exact).
inline float weight_at(const WeightView& w, int64_t j) {
  return w.dtype == WDtype::bf16 ? bf16_to_float(static_cast<const uint16_t*>(w.p)[j])
                                 : static_cast<const float*>(w.p)[j];
}

/// BF16 element j of a row, +0 for j >= H (the kernels' zero fill).
inline float elem(const uint16_t* row, int64_t j, int64_t H) { return j < H ? bf16_to_float(row[j]) : 0.0f; }

/// bwd_fp32_blocked's dw [cols] (model_bwd_fp32_blocked.cpp): per chunk of
/// rows (plan.h) an FP32 sum from 0 of fmaf(FP32_rn(dy*x), rstd, .) in row
/// order, then the FP32 partials combined in FP32 in plan.h's lane order.
/// x, dy: checked plain views of equal shape; rstd: one value per row (msq
/// is not used: the kernel's FP32 products take the FP32 rstd). threads > 0.
std::vector<float> model_dw_fp32_blocked(RowView<uint16_t> x, RowView<uint16_t> dy, const std::vector<float>& rstd,
                                         int threads);

/// The model-only negative controls (model_controls.cpp, registry.h).
/// True for a control whose fault is in its forward step (rstd): run_model
/// then runs model_fwd_control instead of the forward variant.
bool control_forward_fault(const Variant& v);
/// The forward step of such a control: fwd_rowwise's rows (row geometry,
/// binary64 team sum of squares) with the control's fault in rstd; y =
/// BF16((x * rstd) * w) with that rstd; msq holds fma(ss, 1/H, eps) (not
/// used by run_model). heads: rows per token (ctl_heads_shared_stats groups
/// them); rows % heads == 0.
FwdResult model_fwd_control(const Variant& v, RowView<uint16_t> x, WeightView w, float eps, int64_t heads,
                            int threads);
/// ctl_warp64_dw: dw[j] = 0 for every j with j mod 64 >= 32.
void drop_warp64_columns(std::vector<float>& dw);
/// ctl_heads_dw_mixed's dw [cols]: per head h an FP64 partial over the
/// tokens in order (Acc64 of dy * x * r', r' = rstd_refined(msq, rstd)),
/// then dw_j = FP32(sum over h in order of partial[h & ~1][j]) in binary64.
std::vector<float> model_dw_heads_mixed(RowView<uint16_t> x, RowView<uint16_t> dy, const std::vector<float>& rstd,
                                        const std::vector<double>* msq, int64_t heads);

}  // namespace normgate::kernels::detail
