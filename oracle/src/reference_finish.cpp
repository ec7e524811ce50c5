// oracle/src/reference_finish.cpp: the end of the reference's pass, per
// RstdMode (derivation in reference.cpp): (5)'s dw values and bounds, and the
// MPFR escalation (7) of flagged rows and dw columns.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "eft.h"
#include "mpfr_eval.h"
#include "reference_parts.h"
#include "normgate/oracle/reference.h"

namespace normgate::oracle {

using namespace detail;

// (5) finalization and (7) escalation of rows and dw columns, for one side.
void ReferenceBuilder::finish(Side& sd, const Problem& p, const Options& o, double secs,
                              const std::vector<int32_t>& rs_bits, const std::vector<uint8_t>& rs_unmet) {
  Reference& ref = *sd.ref;
  const int64_t R = p.x.rows(), H = p.x.cols;
  const bool fp32 = sd.fp32;
  const int nt = o.threads > 0 ? o.threads : omp_get_max_threads();
  const EscalationPolicy& pol = o.escalation;
  const bool esc_all = o.oracle == OracleMode::mpfr;
  const bool escalating = o.oracle != OracleMode::fp64;
  const double eps = p.eps;
  const double* w = ref.w_.data();
  const std::vector<double>& use_lo = sd.use_lo;
  const std::vector<double>& use_e = sd.use_e;
  const std::vector<uint8_t>& row_bad = sd.row_bad;
  const std::vector<uint8_t>& row_flag = sd.row_flag;
  double* P = ref.dw_.data();
  const double* Sacc = sd.Sacc.data();
  double* A = ref.dw_abs_.data();
  const double* hi = ref.use_.data();

  // forward_only: no (5) and no MPFR dw columns; the MPFR rows of (7) below
  // still run (a row escalated for its dx has its y from MPFR too).
  const bool fwd_only = o.forward_only;
  // (5) finalization.
  bool any_bad = false;
  double lambda = 0, rho = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (row_bad[r]) {
      any_bad = true;
      continue;
    }
    lambda = std::max(lambda, std::fabs(use_lo[r]) / ref.use_[r] * (1 + 0x1p-50));
    rho = std::max(rho, use_e[r] / ref.use_[r] * (1 + 0x1p-50));
  }
  const double Rd = static_cast<double>(R);
  const double gR = gamma_up(Rd), gR2 = gamma_up(Rd + 2);
  const double coef = inflate(inflate(gR2 * (gR + lambda) + rho) / (1 - gR));
  std::vector<int64_t> bad_cols;
  for (int64_t j = 0; j < H && !fwd_only; ++j) {
    double v = P[j] + Sacc[j];
    P[j] = v;
    if (!std::isfinite(v)) {
      bad_cols.push_back(j);
      ref.dw_b_[j] = INF;
    } else {
      ref.dw_b_[j] = any_bad ? INF : inflate(UP * std::fabs(v) + ETA + coef * A[j]);
    }
  }
  if (!bad_cols.empty()) {
    // Plain FP64 recomputation (IEEE propagation) for non-finite columns.
    const int64_t nbad = static_cast<int64_t>(bad_cols.size());
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < nbad; ++b) {
      const int64_t j = bad_cols[b];
      double s = 0;
      for (int64_t r = 0; r < R; ++r) s = s + (bf(p.dy.row(r)[j]) * bf(p.x.row(r)[j])) * hi[r];
      P[j] = s;
    }
  }
  if (!escalating) return;

  // (7) MPFR rows: c, y, dx of every flagged row. Slots in row order.
  Escalations& es = ref.esc_;
  for (int64_t r = 0; r < R; ++r) {
    if (!ref.rs_mp_[r]) continue;
    ++es.rstd;
    es.max_bits = std::max(es.max_bits, static_cast<int>(rs_bits[r]));
    es.unmet += rs_unmet[r];
  }
  // Budget of MPFR elements (auto mode): rows first, in row order, then columns.
  int64_t budget = esc_all ? std::numeric_limits<int64_t>::max() : pol.max_elements;
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < R; ++r) {
    if (!row_flag[r]) continue;
    es.y += (row_flag[r] & 1) ? 1 : 0;
    es.dx += (row_flag[r] & 2) ? 1 : 0;
    if (budget < H) {
      ++es.skipped;
      continue;
    }
    budget -= H;
    ref.row_slot_[r] = static_cast<int32_t>(rows.size());
    rows.push_back(r);
  }
  es.rows = static_cast<int64_t>(rows.size());
  auto t0 = Clock::now();
  if (!rows.empty()) {
    const int64_t nrows = es.rows;
    ref.esc_y_.assign(static_cast<size_t>(nrows * H), VB{});
    ref.esc_dx_.assign(static_cast<size_t>(nrows * H), VB{});
    std::vector<int32_t> bits(nrows, 0);
    std::vector<uint8_t> met(nrows, 0);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t i = 0; i < nrows; ++i) {
      const int64_t r = rows[i];
      const RowMp mr = mpfr_row(p.x.row(r), p.dy.row(r), w, H, eps, fp32, ref.rs32_[r], pol);
      std::copy(mr.y.begin(), mr.y.end(), ref.esc_y_.begin() + i * H);
      std::copy(mr.dx.begin(), mr.dx.end(), ref.esc_dx_.begin() + i * H);
      ref.c_[r] = mr.c.v;
      ref.c_b_[r] = mr.c.bound;
      bits[i] = mr.bits;
      met[i] = mr.met ? 1 : 0;
    }
    for (int64_t i = 0; i < nrows; ++i) {
      es.max_bits = std::max(es.max_bits, static_cast<int>(bits[i]));
      es.unmet += met[i] ? 0 : 1;
    }
  }

  // (7) MPFR dw columns.
  if (!any_bad && !fwd_only) {
    std::vector<int64_t> todo;
    for (int64_t j = 0; j < H; ++j) {
      const double v = P[j];
      if (!std::isfinite(v)) continue;
      if (esc_all || !(ref.dw_b_[j] <= pol.fraction * (pol.dw.atol + pol.dw.rtol * std::fabs(v)))) {
        if (budget < R) {
          ++es.skipped;
          continue;
        }
        budget -= R;
        todo.push_back(j);
        ref.dw_mp_[j] = 1;
      }
    }
    es.dw = static_cast<int64_t>(todo.size());
    RstdTable table;
    for (int bits = pol.bits; !todo.empty(); bits = 2 * bits) {
      if (!fp32) table.build(p.x, eps, bits, nt);
      const int64_t n = static_cast<int64_t>(todo.size());
      std::vector<uint8_t> met(n, 0);
#pragma omp parallel num_threads(nt)
      {
        ColScratch sc;
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; ++i) {
          const int64_t j = todo[i];
          const Finished f = mpfr_dw(p.x, p.dy, j, fp32, ref.rs32_.data(), fp32 ? nullptr : &table, bits, sc);
          P[j] = f.vb.v;
          ref.dw_b_[j] = f.vb.bound;
          met[i] = meets(f, pol.dw, pol.target) ? 1 : 0;
        }
      }
      es.max_bits = std::max(es.max_bits, bits);
      std::vector<int64_t> next;
      for (int64_t i = 0; i < n; ++i)
        if (!met[i]) next.push_back(todo[i]);
      if (bits * 2 > pol.max_bits) {
        es.unmet += static_cast<int64_t>(next.size());
        break;
      }
      todo.swap(next);
    }
  }
  es.seconds = secs + since(t0);
}

}  // namespace normgate::oracle
