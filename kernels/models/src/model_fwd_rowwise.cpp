// kernels/models/src/model_fwd_rowwise.cpp: CPU model of fwd_rowwise (and the team
// reduction of plan.h). Same operations in the same order as
// fwd_rowwise.cu, so y and rstd match the GPU bitwise (NaN payloads aside).
// It is also the model of fwd_multirow (fwd_multirow.cu: the same row
// geometry and per-row arithmetic; only how many rows a team loads at once
// differs, which changes no bit), of fwd_narrow (fwd_narrow.cu: rows of
// 256 on 16 lanes of two groups each, its own order of the binary64 sum)
// of fwd_wide (fwd_wide.cu: wide.h's geometry, up to four groups a
// thread, plan.h's reduction rule on it) and of fwd_staged (fwd_staged.cu:
// staged.h's geometry, the same rule; where the row waits, shared memory or
// registers, changes no bit).
#include <omp.h>

#include <array>
#include <cmath>
#include <vector>

#include "model_common.h"
#include "normgate/core/hd.h"
#include "normgate/kernels/models.h"
#include "normgate/kernels/rstd.h"
#include "normgate/kernels/staged.h"
#include "normgate/kernels/wide.h"

namespace normgate::kernels {

namespace {

/// Warp butterfly of device_blocks.cuh on N lane values (N = 32: a warp,
/// offsets 16..1; N = 16: the half warp of a fwd_narrow row, offsets 8..1):
/// every lane i becomes v[i] + v[i ^ off]; returns lane 0 (all lanes agree).
template <class T, size_t N>
T lane_butterfly(std::array<T, N> v) {
  for (size_t off = N / 2; off > 0; off >>= 1) {
    std::array<T, N> n;
    for (size_t i = 0; i < N; ++i) n[i] = sum_rn(v[i], v[i ^ off]);
    v = n;
  }
  return v[0];
}

template <class T>
T team_sum_any(const T* partials, int team) {
  const int nw = team / 32;
  std::array<T, 32> tot{};
  for (int w = 0; w < nw; ++w) {
    std::array<T, 32> lanes;
    for (int i = 0; i < 32; ++i) lanes[i] = partials[w * 32 + i];
    tot[w] = lane_butterfly(lanes);
  }
  if (team <= 32) return tot[0];
  return lane_butterfly(tot);  // lanes >= nw hold +0, as on the device
}

}  // namespace

float model_team_sum(const float* partials, int team) { return team_sum_any(partials, team); }
double model_team_sum(const double* partials, int team) { return team_sum_any(partials, team); }

FwdResult model_fwd(const Variant& v, RowView<uint16_t> x, WeightView w, float eps, int threads) {
  if (v.op != Op::fwd) detail::model_bad(v, "not a forward variant");
  // Forward variants with this model (a new forward variant gets its own or is added here).
  if (v.id != VariantId::fwd_rowwise && v.id != VariantId::fwd_multirow && v.id != VariantId::fwd_narrow &&
      v.id != VariantId::fwd_wide && v.id != VariantId::fwd_staged)
    detail::model_bad(v, "no CPU model of this forward variant");
  const bool narrow = v.id == VariantId::fwd_narrow;
  detail::check_view(v, "x", x);
  detail::check_weight(v, w, x.cols);
  if (!std::isfinite(eps) || eps < 0.0f) detail::model_bad(v, "eps is not finite and >= 0");
  const int64_t R = x.rows(), H = x.cols;
  // fwd_narrow (H = 256 only: check_view refused any other H): lane t of 16
  // holds the groups k = 0, 1 at columns (16*k + t)*8, group_col0(16, k, t).
  // fwd_wide: wide.h's team and up to four groups a thread; fwd_staged:
  // staged.h's team and groups.
  const RowGeometry geo = narrow                         ? RowGeometry{16, 2}
                          : v.id == VariantId::fwd_wide   ? fwd_wide_geometry(H)
                          : v.id == VariantId::fwd_staged ? fwd_staged_geometry(H)
                                                          : row_geometry(H);
  const double inv_h = 1.0 / static_cast<double>(H);  // as the kernel (rstd.h)
  std::vector<float> wf(static_cast<size_t>(H));
  for (int64_t j = 0; j < H; ++j) wf[static_cast<size_t>(j)] = detail::weight_at(w, j);

  FwdResult out;
  out.y.resize(static_cast<size_t>(R * H));
  out.rstd.resize(static_cast<size_t>(R));
  out.msq.resize(static_cast<size_t>(R));
  const int nth = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel num_threads(nth) if (R > 64)
  {
    std::vector<double> part(static_cast<size_t>(geo.team));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const uint16_t* xr = x.row(r);
      for (int t = 0; t < geo.team; ++t) {
        double ss = 0.0;
        for (int k = 0; k < geo.slots; ++k) {
          const int64_t c0 = group_col0(geo.team, k, t);
          for (int e = 0; e < kGroup; ++e) {
            const double xd = static_cast<double>(detail::elem(xr, c0 + e, H));
            ss = dfma_rn(xd, xd, ss);
          }
        }
        part[static_cast<size_t>(t)] = ss;
      }
      double tot = 0.0;
      if (narrow) {
        std::array<double, 16> lanes;
        for (int t = 0; t < 16; ++t) lanes[static_cast<size_t>(t)] = part[static_cast<size_t>(t)];
        tot = lane_butterfly(lanes);
      } else {
        tot = model_team_sum(part.data(), geo.team);
      }
      const float rs = row_rstd_fp64(tot, inv_h, static_cast<double>(eps));
      out.rstd[static_cast<size_t>(r)] = rs;
      out.msq[static_cast<size_t>(r)] = row_m(tot, inv_h, static_cast<double>(eps));
      uint16_t* yr = out.y.data() + r * H;
      for (int64_t j = 0; j < H; ++j)
        yr[j] = bf16_from_float(mul_rn(mul_rn(bf16_to_float(xr[j]), rs), wf[static_cast<size_t>(j)]));
    }
  }
  return out;
}

}  // namespace normgate::kernels
