// kernels/models/src/model_controls.cpp: the model-only NEGATIVE CONTROLS
// (registry.h lists them with the public report of each bug class). They
// have no GPU kernel: this file is their definition (and their hashed
// "source", kernels/CMakeLists.txt). Each is fwd_rowwise / bwd_det_chunked
// (model_fwd_rowwise.cpp, model_bwd.cpp) with one fault:
//   forward faults (control_forward_fault; model_fwd_control below): the
//   row's binary64 sum of squares ss is fwd_rowwise's (row geometry, team
//   sum), then
//     ctl_rstd_bf16           r = BF16_rn(row_rstd_fp64(ss, 1/H, eps))
//     ctl_eps_outside_sqrt    r = FP32_rn(1 / (sqrt(ss * (1/H)) + eps)), binary64
//     ctl_eps_dropped         r = row_rstd_fp64(ss, 1/H, 0)
//     ctl_eps_bf16            r = row_rstd_fp64(ss, 1/H, BF16_rn(eps))
//     ctl_padded_lanes        r = row_rstd_fp64(ss, 1/bit_ceil(H), eps)
//     ctl_heads_shared_stats  per token t: ss_t = the heads' ss added in head
//                             order (binary64), r = row_rstd_fp64(ss_t,
//                             1/(heads*H), eps) for each of its heads
//     ctl_sumsq_bf16          s = BF16_rn(fmaf(x_j, x_j, s)) over j = 0..H-1 in
//                             order from s = 0, r = row_rstd_fp64(s, 1/H, eps)
//   and y = BF16((x * r) * w) as fwd_rowwise; the backward gets that r and
//   no msq.
//   backward faults (model_bwd.cpp): ctl_res_grad_early (dy' = BF16(dy +
//   dh_new)), ctl_warp64_dw (drop_warp64_columns), ctl_heads_dw_mixed
//   (model_dw_heads_mixed).
#include <omp.h>

#include <bit>
#include <cmath>
#include <vector>

#include "model_common.h"
#include "normgate/core/hd.h"
#include "normgate/kernels/accum.h"
#include "normgate/kernels/rstd.h"

namespace normgate::kernels::detail {

bool control_forward_fault(const Variant& v) {
  switch (v.id) {
    case VariantId::ctl_rstd_bf16:
    case VariantId::ctl_eps_outside_sqrt:
    case VariantId::ctl_eps_dropped:
    case VariantId::ctl_eps_bf16:
    case VariantId::ctl_sumsq_bf16:
    case VariantId::ctl_padded_lanes:
    case VariantId::ctl_heads_shared_stats:
      return !v.external;
    default:
      return false;
  }
}

namespace {

/// fwd_rowwise's binary64 sum of squares of one row (model_fwd_rowwise.cpp).
double row_sum_squares(const uint16_t* xr, int64_t H, const RowGeometry& geo, std::vector<double>& part) {
  for (int t = 0; t < geo.team; ++t) {
    double ss = 0.0;
    for (int k = 0; k < geo.slots; ++k) {
      const int64_t c0 = group_col0(geo.team, k, t);
      for (int e = 0; e < kGroup; ++e) {
        const double xd = static_cast<double>(elem(xr, c0 + e, H));
        ss = dfma_rn(xd, xd, ss);
      }
    }
    part[static_cast<size_t>(t)] = ss;
  }
  return model_team_sum(part.data(), geo.team);
}

}  // namespace

FwdResult model_fwd_control(const Variant& v, RowView<uint16_t> x, WeightView w, float eps, int64_t heads,
                            int threads) {
  if (!control_forward_fault(v)) model_bad(v, "not a control with a forward fault");
  check_view(v, "x", x);
  check_weight(v, w, x.cols);
  if (!std::isfinite(eps) || eps < 0.0f) model_bad(v, "eps is not finite and >= 0");
  const int64_t R = x.rows(), H = x.cols;
  if (heads < 1 || R % heads != 0)
    model_bad(v, "heads = " + std::to_string(heads) + " does not divide the " + std::to_string(R) + " rows");
  const RowGeometry geo = row_geometry(H);
  const double inv_h = 1.0 / static_cast<double>(H);
  const double e = static_cast<double>(eps);
  std::vector<float> wf(static_cast<size_t>(H));
  for (int64_t j = 0; j < H; ++j) wf[static_cast<size_t>(j)] = weight_at(w, j);

  // Each row's sum of squares (the control's own for ctl_sumsq_bf16).
  std::vector<double> ss(static_cast<size_t>(R));
  const int nth = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel num_threads(nth) if (R > 64)
  {
    std::vector<double> part(static_cast<size_t>(geo.team));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const uint16_t* xr = x.row(r);
      if (v.id == VariantId::ctl_sumsq_bf16) {
        float s = 0.0f;
        for (int64_t j = 0; j < H; ++j) {
          const float xf = bf16_to_float(xr[j]);
          s = round_bf16(fma_rn(xf, xf, s));
        }
        ss[static_cast<size_t>(r)] = static_cast<double>(s);
      } else {
        ss[static_cast<size_t>(r)] = row_sum_squares(xr, H, geo, part);
      }
    }
  }

  FwdResult out;
  out.y.resize(static_cast<size_t>(R * H));
  out.rstd.resize(static_cast<size_t>(R));
  out.msq.resize(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    const double s = ss[static_cast<size_t>(r)];
    float rs = 0.0f;
    switch (v.id) {
      case VariantId::ctl_rstd_bf16:
        rs = round_bf16(row_rstd_fp64(s, inv_h, e));
        break;
      case VariantId::ctl_eps_outside_sqrt:
        rs = static_cast<float>(1.0 / dadd_rn(std::sqrt(dmul_rn(s, inv_h)), e));
        break;
      case VariantId::ctl_eps_dropped:
        rs = row_rstd_fp64(s, inv_h, 0.0);
        break;
      case VariantId::ctl_eps_bf16:
        rs = row_rstd_fp64(s, inv_h, static_cast<double>(round_bf16(eps)));
        break;
      case VariantId::ctl_padded_lanes:
        rs = row_rstd_fp64(s, 1.0 / static_cast<double>(std::bit_ceil(static_cast<uint64_t>(H))), e);
        break;
      case VariantId::ctl_heads_shared_stats: {
        const int64_t t0 = r - r % heads;
        double tot = 0.0;
        for (int64_t h = 0; h < heads; ++h) tot = dadd_rn(tot, ss[static_cast<size_t>(t0 + h)]);
        rs = row_rstd_fp64(tot, 1.0 / static_cast<double>(heads * H), e);
        break;
      }
      case VariantId::ctl_sumsq_bf16:
        rs = row_rstd_fp64(s, inv_h, e);
        break;
      default:
        model_bad(v, "not a control with a forward fault");
    }
    out.rstd[static_cast<size_t>(r)] = rs;
    out.msq[static_cast<size_t>(r)] = row_m(s, inv_h, e);
    const uint16_t* xr = x.row(r);
    uint16_t* yr = out.y.data() + r * H;
    for (int64_t j = 0; j < H; ++j)
      yr[j] = bf16_from_float(mul_rn(mul_rn(bf16_to_float(xr[j]), rs), wf[static_cast<size_t>(j)]));
  }
  return out;
}

void drop_warp64_columns(std::vector<float>& dw) {
  for (size_t j = 0; j < dw.size(); ++j)
    if (j % 64 >= 32) dw[j] = 0.0f;
}

std::vector<float> model_dw_heads_mixed(RowView<uint16_t> x, RowView<uint16_t> dy, const std::vector<float>& rstd,
                                        const std::vector<double>* msq, int64_t heads) {
  const int64_t R = x.rows(), H = x.cols;
  const int64_t T = R / heads;
  std::vector<double> part(static_cast<size_t>(heads * H), 0.0);
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<Acc64> acc(static_cast<size_t>(H));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t r = t * heads + h;
      const float rs = rstd[static_cast<size_t>(r)];
      const double r_dw = rstd_refined(msq ? (*msq)[static_cast<size_t>(r)] : 0.0, rs);
      const uint16_t* xr = x.row(r);
      const uint16_t* dyr = dy.row(r);
      for (int64_t j = 0; j < H; ++j) acc[static_cast<size_t>(j)].add_triple(bf16_to_float(dyr[j]), bf16_to_float(xr[j]), r_dw);
    }
    for (int64_t j = 0; j < H; ++j) part[static_cast<size_t>(h * H + j)] = acc[static_cast<size_t>(j)].s;
  }
  std::vector<float> dw(static_cast<size_t>(H));
  for (int64_t j = 0; j < H; ++j) {
    double s = 0.0;
    for (int64_t h = 0; h < heads; ++h) s = dadd_rn(s, part[static_cast<size_t>((h & ~int64_t{1}) * H + j)]);
    dw[static_cast<size_t>(j)] = static_cast<float>(s);
  }
  return dw;
}

}  // namespace normgate::kernels::detail
