// tests/util/kernel_test_util.h: helpers shared by the kernels tests: a
// small double-precision reference (the oracle lives elsewhere), budget and
// bitwise comparisons, case names for parameterized tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "normgate/core/bf16.h"
#include "normgate/kernels/pipeline.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace normgate::kernels::test {

/// A variant and a case: one parameter of the per-variant suites.
struct VariantCase {
  const Variant* v = nullptr;
  seeds::CaseId c;
};

/// "bwd_det_chunked_H4096_T65537_cancel_s17" (+ "_wfp32" for FP32 weights, + "_heads24" etc. for a form
/// other than plain).
inline std::string case_name(const Variant& v, const seeds::CaseId& c) {
  std::string s = std::string(v.name) + "_H" + std::to_string(c.H) + "_T" + std::to_string(c.T) + "_" +
                  std::string(seeds::to_string(c.family)) + "_s" + std::to_string(c.seed);
  if (c.w == WDtype::fp32) s += "_wfp32";
  if (c.form != Form::plain) {
    s += '_';  // piecewise: "_" + std::string(...) trips GCC 12's -Wrestrict (a false positive)
    s += to_string(c.form);
  }
  return s;
}

/// Whether v's dw trades accuracy for speed by design (bwd_fp32_blocked: FP32
/// products, uncompensated FP32 chunk partials and combine): it is no control
/// and may be routed, but its dw may exceed the budget on long or cancelling
/// columns (the `cancel` family), and the gate decides where it routes. The
/// per-variant suites expect it to fail dw on their long cancel case, as the
/// controls do, and hold it to the dw budget on the other families.
inline bool lossy_dw(const Variant& v) { return v.id == VariantId::bwd_fp32_blocked; }

/// gtest value printer: the case name instead of the struct's bytes.
inline void PrintTo(const VariantCase& p, std::ostream* os) { *os << case_name(*p.v, p.c); }

inline seeds::CaseId make_case(int64_t H, int64_t T, seeds::Family f, uint64_t seed, WDtype w = WDtype::bf16) {
  seeds::CaseId c;
  c.H = H;
  c.T = T;
  c.family = f;
  c.seed = seed;
  c.w = w;
  return c;
}

/// Restores the process-wide pipeline setting (pipeline.h) on scope exit.
struct DepthGuard {
  PipelineDepth saved = pipeline_depth();
  ~DepthGuard() { set_pipeline_depth(saved); }
};

/// Neumaier-compensated double sum (the reference's sums; independent of
/// the kernels' accum.h on purpose).
struct KahanD {
  double s = 0, c = 0;
  void add(double v) {
    const double t = s + v;
    if (std::fabs(s) >= std::fabs(v))
      c += (s - t) + v;
    else
      c += (v - t) + s;
    s = t;
  }
  double value() const { return s + c; }
};

inline float w_at(const seeds::HostInputs& in, int64_t j) {
  return in.id.w == WDtype::bf16 ? bf16_to_float(in.w_bf16[static_cast<size_t>(j)]) : in.w_f32[static_cast<size_t>(j)];
}

/// Forward reference in double: rstd with the FP64 mean, y = x * rstd * w.
struct RefFwd {
  std::vector<double> rstd, y;
};
inline RefFwd ref_fwd(const seeds::HostInputs& in, double eps) {
  const int64_t R = in.rows, H = in.cols;
  RefFwd o;
  o.rstd.resize(static_cast<size_t>(R));
  o.y.resize(static_cast<size_t>(R * H));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    KahanD ss;
    for (int64_t j = 0; j < H; ++j) {
      const double x = bf16_to_float(in.x[static_cast<size_t>(r * H + j)]);
      ss.add(x * x);
    }
    const double rs = 1.0 / std::sqrt(ss.value() / static_cast<double>(H) + eps);
    o.rstd[static_cast<size_t>(r)] = rs;
    for (int64_t j = 0; j < H; ++j)
      o.y[static_cast<size_t>(r * H + j)] = bf16_to_float(in.x[static_cast<size_t>(r * H + j)]) * rs * w_at(in, j);
  }
  return o;
}

/// Backward reference in double, given the rstd the implementation used
/// (FP32, as its forward handed it over): the "ideal kernel" of that rstd,
/// so what remains is the kernel's own error.
struct RefBwd {
  std::vector<double> dx, dw;
};
inline RefBwd ref_bwd(const seeds::HostInputs& in, const std::vector<float>& rstd) {
  const int64_t R = in.rows, H = in.cols;
  RefBwd o;
  o.dx.resize(static_cast<size_t>(R * H));
  o.dw.assign(static_cast<size_t>(H), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    const double rs = rstd[static_cast<size_t>(r)];
    KahanD cs;
    for (int64_t j = 0; j < H; ++j) {
      const double x = bf16_to_float(in.x[static_cast<size_t>(r * H + j)]);
      const double dy = bf16_to_float(in.dy[static_cast<size_t>(r * H + j)]);
      cs.add(dy * w_at(in, j) * x * rs);
    }
    const double c = cs.value() / static_cast<double>(H);
    for (int64_t j = 0; j < H; ++j) {
      const double x = bf16_to_float(in.x[static_cast<size_t>(r * H + j)]);
      const double dy = bf16_to_float(in.dy[static_cast<size_t>(r * H + j)]);
      o.dx[static_cast<size_t>(r * H + j)] = rs * (dy * w_at(in, j) - x * rs * c);
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < H; ++j) {
    KahanD s;  // dy*x is exact in double, and so is its product with an FP32 rstd
    for (int64_t r = 0; r < R; ++r)
      s.add(static_cast<double>(bf16_to_float(in.dy[static_cast<size_t>(r * H + j)])) *
            bf16_to_float(in.x[static_cast<size_t>(r * H + j)]) * rstd[static_cast<size_t>(r)]);
    o.dw[static_cast<size_t>(j)] = s.value();
  }
  return o;
}

/// Elements outside |got - ref| <= atol + rtol*|ref| (NaN counts as outside).
struct Budget {
  int64_t bad = 0;
  int64_t worst = -1;
  double worst_ratio = 0;  ///< max |got-ref| / (atol + rtol|ref|)
  double got = 0, ref = 0;
  std::string str() const {
    std::ostringstream o;
    o << bad << " elements over budget; worst index " << worst << " ratio " << worst_ratio << " (got " << got
      << ", ref " << ref << ")";
    return o.str();
  }
};
template <class Get>
Budget check_budget(int64_t n, Get got_at, const std::vector<double>& ref, double atol, double rtol) {
  Budget b;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got_at(i), r = ref[static_cast<size_t>(i)];
    const double ratio = std::fabs(g - r) / (atol + rtol * std::fabs(r));
    if (!(ratio <= 1.0)) ++b.bad;
    if (!(ratio <= b.worst_ratio)) {
      b.worst_ratio = ratio;
      b.worst = i;
      b.got = g;
      b.ref = r;
    }
  }
  return b;
}
inline Budget budget_bf16(const std::vector<uint16_t>& got, const std::vector<double>& ref, double atol,
                          double rtol) {
  return check_budget(static_cast<int64_t>(got.size()),
                      [&](int64_t i) { return static_cast<double>(bf16_to_float(got[static_cast<size_t>(i)])); },
                      ref, atol, rtol);
}
inline Budget budget_f32(const std::vector<float>& got, const std::vector<double>& ref, double atol, double rtol) {
  return check_budget(static_cast<int64_t>(got.size()),
                      [&](int64_t i) { return static_cast<double>(got[static_cast<size_t>(i)]); }, ref, atol, rtol);
}

/// Bitwise comparison where any NaN equals any NaN (host and device NaN
/// payloads differ). Returns the number of differing elements and the first.
struct BitDiff {
  int64_t count = 0;
  int64_t first = -1;
  std::string str() const { return std::to_string(count) + " differing elements, first at " + std::to_string(first); }
};
inline bool nan_bf16(uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x007Fu) != 0u; }
inline BitDiff bit_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  BitDiff d;
  if (a.size() != b.size()) return {-1, -1};
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && !(nan_bf16(a[i]) && nan_bf16(b[i]))) {
      if (d.first < 0) d.first = static_cast<int64_t>(i);
      ++d.count;
    }
  return d;
}
inline BitDiff bit_diff(const std::vector<float>& a, const std::vector<float>& b) {
  BitDiff d;
  if (a.size() != b.size()) return {-1, -1};
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    if (x != y && !(std::isnan(a[i]) && std::isnan(b[i]))) {
      if (d.first < 0) d.first = static_cast<int64_t>(i);
      ++d.count;
    }
  }
  return d;
}

/// Count of NaN values (poison left behind counts).
inline int64_t count_nan(const std::vector<uint16_t>& v) {
  int64_t n = 0;
  for (uint16_t b : v) n += nan_bf16(b);
  return n;
}
inline int64_t count_nan(const std::vector<float>& v) {
  int64_t n = 0;
  for (float f : v) n += std::isnan(f);
  return n;
}

}  // namespace normgate::kernels::test
