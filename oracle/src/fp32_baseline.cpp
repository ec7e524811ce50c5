// oracle/src/fp32_baseline.cpp: the "FP32 eager" yardstick (formulas in
// reference.h). Every operation is an explicitly rounded binary32 operation
// (core/hd.h: never contracted into an FMA), every sum sequential in index
// order, so the result is one well-defined function of the inputs: bitwise
// independent of threads and of vectorization (which only runs independent
// rows' or columns' identical operation sequences side by side).
#include <omp.h>

#include <algorithm>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/core/hd.h"
#include "normgate/oracle/reference.h"

namespace normgate::oracle {

Outputs fp32_baseline(const Problem& p, int threads, bool rows_outputs) {
  validate(p);
  const int64_t R = p.x.rows(), H = p.x.cols;
  const int nt = threads > 0 ? threads : omp_get_max_threads();
  Outputs out;
  if (rows_outputs) {
    out.y.assign(static_cast<size_t>(R * H), 0);
    out.dx.assign(static_cast<size_t>(R * H), 0);
  }
  out.rstd.assign(static_cast<size_t>(R), 0.0f);
  out.dw.assign(static_cast<size_t>(H), 0.0f);
  if (R == 0) return out;

  std::vector<float> w(H);
  for (int64_t j = 0; j < H; ++j)  // R > 0 here, so w.p is non-null
    w[j] = p.w.dtype == WDtype::bf16 ? bf16_to_float(static_cast<const uint16_t*>(p.w.p)[j])
                                     : static_cast<const float*>(p.w.p)[j];
  const float eps32 = static_cast<float>(p.eps);
  const float Hf = static_cast<float>(H);

#pragma omp parallel num_threads(nt)
  {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < R; ++r) {
      const uint16_t* x = p.x.row(r);
      const uint16_t* dy = p.dy.row(r);
      float ss = 0.0f;
      for (int64_t j = 0; j < H; ++j) {
        float xv = bf16_to_float(x[j]);
        ss = add_rn(ss, mul_rn(xv, xv));
      }
      const float rstd = div_rn(1.0f, sqrt_rn(add_rn(div_rn(ss, Hf), eps32)));
      out.rstd[r] = rstd;
      if (!rows_outputs) continue;
      uint16_t* y = out.y.data() + r * H;
      float cs = 0.0f;
      for (int64_t j = 0; j < H; ++j) {
        float xh = mul_rn(bf16_to_float(x[j]), rstd);
        y[j] = bf16_from_float(mul_rn(xh, w[j]));
        float g = mul_rn(bf16_to_float(dy[j]), w[j]);
        cs = add_rn(cs, mul_rn(g, xh));
      }
      const float c = div_rn(cs, Hf);
      uint16_t* dx = out.dx.data() + r * H;
      for (int64_t j = 0; j < H; ++j) {
        float xh = mul_rn(bf16_to_float(x[j]), rstd);
        float g = mul_rn(bf16_to_float(dy[j]), w[j]);
        const float d = mul_rn(rstd, sub_rn(g, mul_rn(xh, c)));
        dx[j] = bf16_from_float(p.dx_add.p != nullptr ? add_rn(d, bf16_to_float(p.dx_add.row(r)[j])) : d);
      }
    }
    // dw: column blocks, rows in order r = 0..R-1 within each column.
    const int64_t CB = 256;
    const int64_t ncb = (H + CB - 1) / CB;
#pragma omp for schedule(dynamic, 1)
    for (int64_t cb = 0; cb < ncb; ++cb) {
      const int64_t j0 = cb * CB, j1 = std::min(H, j0 + CB);
      float* dw = out.dw.data();
      for (int64_t r = 0; r < R; ++r) {
        const uint16_t* x = p.x.row(r);
        const uint16_t* dy = p.dy.row(r);
        const float rstd = out.rstd[r];
        for (int64_t j = j0; j < j1; ++j) {
          float xh = mul_rn(bf16_to_float(x[j]), rstd);
          dw[j] = add_rn(dw[j], mul_rn(bf16_to_float(dy[j]), xh));
        }
      }
    }
  }
  return out;
}

}  // namespace normgate::oracle
