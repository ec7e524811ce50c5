// kernels/models/src/model_bwd.cpp: CPU models of the backward variants. Each step
// mirrors the kernel that does it on the GPU:
//   chunk_pass()         bwd_chunk_pass.cuh      (dx, Acc64 partials)
//   combine_fixed()      bwd_det_chunked.cu      (combine_partials_kernel)
//   combine_in_order()   bwd_nondet_atomic.cu    (atomics, taken in chunk order)
//   round_partials_bf16  bwd_controls.cu         (partials_to_bf16_kernel)
//   column_sum_fp32      bwd_controls.cu         (column_sum_fp32_kernel)
// bwd_det_onepass runs bwd_det_chunked's arithmetic in one kernel (its last
// chunk CTA does combine_partials_kernel's combine), so its model is
// bwd_det_chunked's: chunk_pass() then combine_fixed(). bwd_fp32_blocked's dx
// is chunk_pass()'s; its FP32 dw is model_bwd_fp32_blocked.cpp's.
#include <omp.h>

#include <array>
#include <vector>

#include "model_common.h"
#include "nondet_replicas.h"
#include "normgate/core/hd.h"
#include "normgate/kernels/accum.h"
#include "normgate/kernels/chunk_plan.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/rstd.h"

namespace normgate::kernels {

namespace {

struct Inputs {
  RowView<uint16_t> x, dy, add;  // add: dx addend (res: dh_new), p == nullptr when none
  const std::vector<float>* rstd;
  const std::vector<double>* msq;  // null: none
  std::vector<float> w;  // FP32 [H]
  int64_t R, H;
  int threads;
};

/// dx for every row and the FP64 chunk partials [num_chunks, H].
std::vector<double> chunk_pass(const Inputs& in, std::vector<uint16_t>& dx) {
  const int64_t R = in.R, H = in.H;
  const int64_t n = num_chunks(R, H);
  const RowGeometry geo = bwd_row_geometry(H);
  const float inv_h = div_rn(1.0f, static_cast<float>(H));  // as the kernel: c = sum * FP32_rn(1/H)
  std::vector<double> partials(static_cast<size_t>(n * H));
  dx.assign(static_cast<size_t>(R * H), 0);
#pragma omp parallel num_threads(in.threads) if (n > 1)
  {
    std::vector<Acc64> acc(static_cast<size_t>(H));
    std::vector<float> part(static_cast<size_t>(geo.team));
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < n; ++c) {
      for (auto& a : acc) a = Acc64{};
      const int64_t r0 = chunk_begin(R, n, c), r1 = chunk_begin(R, n, c + 1);
      for (int64_t r = r0; r < r1; ++r) {
        const uint16_t* xr = in.x.row(r);
        const uint16_t* dyr = in.dy.row(r);
        const float rs = (*in.rstd)[static_cast<size_t>(r)];
        const double rs_dw = rstd_refined(in.msq ? (*in.msq)[static_cast<size_t>(r)] : 0.0, rs);  // as the kernel
        for (int t = 0; t < geo.team; ++t) {
          float p = 0.0f;
          for (int k = 0; k < geo.slots; ++k) {
            const int64_t c0 = group_col0(geo.team, k, t);
            for (int e = 0; e < kGroup; ++e) {
              const int64_t j = c0 + e;
              const float xhat = mul_rn(detail::elem(xr, j, H), rs);
              const float g = mul_rn(detail::elem(dyr, j, H), j < H ? in.w[static_cast<size_t>(j)] : 0.0f);
              p = fma_rn(g, xhat, p);
            }
          }
          part[static_cast<size_t>(t)] = p;
        }
        const float cr = mul_rn(model_team_sum(part.data(), geo.team), inv_h);
        uint16_t* dxr = dx.data() + r * H;
        for (int64_t j = 0; j < H; ++j) {
          const float xf = bf16_to_float(xr[j]);
          const float dyf = bf16_to_float(dyr[j]);
          const float xhat = mul_rn(xf, rs);
          const float g = mul_rn(dyf, in.w[static_cast<size_t>(j)]);
          const float d = mul_rn(rs, fma_rn(-xhat, cr, g));
          dxr[j] = in.add.p != nullptr ? bf16_sum_rn(d, bf16_to_float(in.add.row(r)[j])) : bf16_from_float(d);
          acc[static_cast<size_t>(j)].add_triple(dyf, xf, rs_dw);
        }
      }
      double* out = partials.data() + c * H;
      for (int64_t j = 0; j < H; ++j) out[j] = acc[static_cast<size_t>(j)].s;
    }
  }
  return partials;
}

/// combine_partials_kernel: per column, kCombineLanes lanes over chunks
/// L, L+32, ..., then the lanes in order.
std::vector<float> combine_fixed(const std::vector<double>& partials, int64_t n, int64_t H, int threads) {
  std::vector<float> dw(static_cast<size_t>(H));
#pragma omp parallel for num_threads(threads) schedule(static) if (n * H > 65536)
  for (int64_t j = 0; j < H; ++j) {
    std::array<Comp64, kCombineLanes> lanes{};
    for (int L = 0; L < kCombineLanes; ++L)
      for (int64_t c = L; c < n; c += kCombineLanes) lanes[static_cast<size_t>(L)].add(partials[static_cast<size_t>(c * H + j)]);
    Comp64 tot;
    for (int L = 0; L < kCombineLanes; ++L) {
      tot.add(lanes[static_cast<size_t>(L)].s);
      tot.add(lanes[static_cast<size_t>(L)].comp);
    }
    dw[static_cast<size_t>(j)] = static_cast<float>(tot.value());
  }
  return dw;
}

/// bwd_nondet_atomic's FP64 accumulators (nondet_replicas.h kAtomicReplicas), with each
/// replica's atomics taken in chunk order, then the replicas added in order.
std::vector<float> combine_in_order(const std::vector<double>& partials, int64_t n, int64_t H) {
  std::vector<float> dw(static_cast<size_t>(H));
  for (int64_t j = 0; j < H; ++j) {
    double rep[kAtomicReplicas] = {};
    for (int64_t c = 0; c < n; ++c) {
      double& acc = rep[c % kAtomicReplicas];
      acc = dadd_rn(acc, partials[static_cast<size_t>(c * H + j)]);
    }
    double tot = 0.0;
    for (double r : rep) tot = dadd_rn(tot, r);
    dw[static_cast<size_t>(j)] = static_cast<float>(tot);
  }
  return dw;
}

/// partials_to_bf16_kernel: p -> BF16_rn(FP32_rn(p)).
void round_partials_bf16(std::vector<double>& partials) {
  for (double& p : partials) p = static_cast<double>(round_bf16(static_cast<float>(p)));
}

/// column_sum_fp32_kernel: plain FP32 sum over all rows in order.
std::vector<float> column_sum_fp32(const Inputs& in) {
  std::vector<float> dw(static_cast<size_t>(in.H), 0.0f);
  for (int64_t r = 0; r < in.R; ++r) {
    const uint16_t* xr = in.x.row(r);
    const uint16_t* dyr = in.dy.row(r);
    const float rs = (*in.rstd)[static_cast<size_t>(r)];
    for (int64_t j = 0; j < in.H; ++j) {
      const float xhat = mul_rn(bf16_to_float(xr[j]), rs);
      dw[static_cast<size_t>(j)] = add_rn(dw[static_cast<size_t>(j)], mul_rn(bf16_to_float(dyr[j]), xhat));
    }
  }
  return dw;
}

}  // namespace

BwdResult model_bwd(const Variant& v, RowView<uint16_t> x, RowView<uint16_t> dy, WeightView w,
                    const std::vector<float>& rstd, int threads, RowView<uint16_t> dx_add,
                    const std::vector<double>* msq, int64_t heads) {
  if (v.external) detail::model_bad(v, "an external variant has no CPU model (it runs through its own callback)");
  if (v.op != Op::bwd) detail::model_bad(v, "not a backward variant");
  detail::check_view(v, "x", x);
  detail::check_view(v, "dy", dy);
  if (dy.rows() != x.rows() || dy.cols != x.cols)
    detail::model_bad(v, "dy shape [" + std::to_string(dy.rows()) + ", " + std::to_string(dy.cols) +
                             "] differs from x shape [" + std::to_string(x.rows()) + ", " + std::to_string(x.cols) +
                             "]");
  detail::check_weight(v, w, x.cols);
  if (static_cast<int64_t>(rstd.size()) != x.rows())
    detail::model_bad(v, "rstd has " + std::to_string(rstd.size()) + " values for " + std::to_string(x.rows()) +
                             " rows");
  if (dx_add.p != nullptr) {
    detail::check_view(v, "dx_add", dx_add);
    if (dx_add.rows() != x.rows() || dx_add.cols != x.cols)
      detail::model_bad(v, "dx_add shape [" + std::to_string(dx_add.rows()) + ", " + std::to_string(dx_add.cols) +
                               "] differs from x shape [" + std::to_string(x.rows()) + ", " +
                               std::to_string(x.cols) + "]");
  }
  if (msq != nullptr && static_cast<int64_t>(msq->size()) != x.rows())
    detail::model_bad(v, "msq has " + std::to_string(msq->size()) + " values for " + std::to_string(x.rows()) + " rows");
  if (heads < 1 || x.rows() % heads != 0)
    detail::model_bad(v, "heads = " + std::to_string(heads) + " does not divide the " + std::to_string(x.rows()) + " rows");
  // ctl_res_grad_early: dh_new goes into the gradient the norm backward sees
  // (dy' = BF16(dy + dh_new), one rounding) and is not added to dx after.
  std::vector<uint16_t> dy_early;
  if (v.id == VariantId::ctl_res_grad_early && dx_add.p != nullptr) {
    dy_early = model_residual_add(dy, dx_add);
    dy = RowView<uint16_t>::plain(dy_early.data(), x.rows(), x.cols);
    dx_add = {};
  }
  Inputs in{x, dy, dx_add, &rstd, msq, {}, x.rows(), x.cols, threads > 0 ? threads : omp_get_max_threads()};
  in.w.resize(static_cast<size_t>(in.H));
  for (int64_t j = 0; j < in.H; ++j) in.w[static_cast<size_t>(j)] = detail::weight_at(w, j);

  BwdResult out;
  if (in.R == 0) {
    out.dw.assign(static_cast<size_t>(in.H), 0.0f);
    return out;
  }
  const int64_t n = num_chunks(in.R, in.H);
  std::vector<double> partials = chunk_pass(in, out.dx);
  switch (v.id) {
    case VariantId::bwd_det_chunked:
    case VariantId::bwd_det_onepass:  // the same partials and combine, in one kernel
    case VariantId::bwd_det_wide:     // the same kernels' arithmetic, another register bound
    case VariantId::bwd_det_heads:    // the same, FP32 w held in registers
    case VariantId::bwd_det_wreg:     // the same, FP32 w held in registers
    case VariantId::bwd_det_lean:     // the same arithmetic in a kernel of fewer instructions
      out.dw = combine_fixed(partials, n, in.H, in.threads);
      break;
    case VariantId::bwd_fp32_blocked:  // dx above; dw from FP32 partials (msq unused)
      out.dw = detail::model_dw_fp32_blocked(in.x, in.dy, rstd, in.threads);
      break;
    case VariantId::bwd_nondet_atomic:  // short chunks: the det combine (nondet_replicas.h)
      out.dw = nondet_uses_atomics(in.R, in.H) ? combine_in_order(partials, n, in.H)
                                               : combine_fixed(partials, n, in.H, in.threads);
      break;
    case VariantId::ctl_bf16_partials:
      round_partials_bf16(partials);
      out.dw = combine_fixed(partials, n, in.H, in.threads);
      break;
    case VariantId::ctl_fp32_seq:
      out.dw = column_sum_fp32(in);
      break;
    case VariantId::ctl_rstd_bf16:  // faults in the forward (run_model): bwd_det_chunked's backward
    case VariantId::ctl_eps_outside_sqrt:
    case VariantId::ctl_eps_dropped:
    case VariantId::ctl_eps_bf16:
    case VariantId::ctl_sumsq_bf16:
    case VariantId::ctl_padded_lanes:
    case VariantId::ctl_heads_shared_stats:
    case VariantId::ctl_res_grad_early:  // its fault is dy above
      out.dw = combine_fixed(partials, n, in.H, in.threads);
      break;
    case VariantId::ctl_warp64_dw:
      out.dw = combine_fixed(partials, n, in.H, in.threads);
      detail::drop_warp64_columns(out.dw);
      break;
    case VariantId::ctl_heads_dw_mixed:
      out.dw = detail::model_dw_heads_mixed(in.x, in.dy, rstd, msq, heads);
      break;
    case VariantId::fwd_rowwise:
    case VariantId::fwd_multirow:
    case VariantId::fwd_narrow:
    case VariantId::fwd_wide:
      detail::model_bad(v, "not a backward variant");
  }
  return out;
}

std::vector<uint16_t> model_residual_add(RowView<uint16_t> h, RowView<uint16_t> u) {
  if (h.rows() != u.rows() || h.cols != u.cols)
    throw std::invalid_argument("model_residual_add: u shape [" + std::to_string(u.rows()) + ", " +
                                std::to_string(u.cols) + "] differs from h shape [" + std::to_string(h.rows()) + ", " +
                                std::to_string(h.cols) + "]");
  const int64_t R = h.rows(), H = h.cols;
  std::vector<uint16_t> out(static_cast<size_t>(R * H));
  for (int64_t r = 0; r < R; ++r) {
    const uint16_t* hr = h.row(r);
    const uint16_t* ur = u.row(r);
    for (int64_t j = 0; j < H; ++j) out[static_cast<size_t>(r * H + j)] = bf16_sum_rn(bf16_to_float(hr[j]), bf16_to_float(ur[j]));
  }
  return out;
}

Outputs run_model(const Variant& bwd, RowView<uint16_t> x, RowView<uint16_t> dy, WeightView w, float eps,
                  int threads, RowView<uint16_t> u, RowView<uint16_t> dh_new, int64_t heads) {
  return run_model(default_fwd(), bwd, x, dy, w, eps, threads, u, dh_new, heads);
}

Outputs run_model(const Variant& fwd, const Variant& bwd, RowView<uint16_t> x, RowView<uint16_t> dy, WeightView w,
                  float eps, int threads, RowView<uint16_t> u, RowView<uint16_t> dh_new, int64_t heads,
                  bool forward_only) {
  if (fwd.op != Op::fwd) detail::model_bad(fwd, "run_model needs a forward variant for its forward step");
  if (bwd.op != Op::bwd) detail::model_bad(bwd, "run_model needs a backward variant");
  std::vector<uint16_t> h_new;
  if (u.p != nullptr) {
    h_new = model_residual_add(x, u);
    x = RowView<uint16_t>::plain(h_new.data(), x.rows(), x.cols);
  }
  // A control whose fault is in the forward runs its own forward instead
  // (model_controls.cpp); its backward then has no msq (rstd alone).
  const bool fwd_fault = detail::control_forward_fault(bwd);
  FwdResult f = fwd_fault ? detail::model_fwd_control(bwd, x, w, eps, heads, threads) : model_fwd(fwd, x, w, eps, threads);
  BwdResult b;
  if (!forward_only) b = model_bwd(bwd, x, dy, w, f.rstd, threads, dh_new, fwd_fault ? nullptr : &f.msq, heads);
  Outputs o;
  o.h_new = std::move(h_new);
  o.y = std::move(f.y);
  o.rstd = std::move(f.rstd);
  o.dx = std::move(b.dx);
  o.dw = std::move(b.dw);
  return o;
}

}  // namespace normgate::kernels
