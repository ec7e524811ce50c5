// normgate/oracle/reference.h: FP64 reference for RMSNorm training, with a
// rigorous per-element bound on the oracle's own error.
//
// Math (plain form; x, dy BF16 [R, H] rows; w BF16 or FP32 [H]; eps > 0):
//   rstd_r = 1 / sqrt(mean_j x_rj^2 + eps)
//   y_rj   = x_rj * rstd_r * w_j
//   xhat   = x * rstd;  g = dy * w;  c_r = mean_j(g_rj * xhat_rj)
//   dx_rj  = rstd_r * (g_rj - xhat_rj * c_r)
//   dw_j   = sum_r dy_rj * xhat_rj
// (RMSNorm: Zhang & Sennrich 2019; gradient by the chain rule, as in every
// framework's reference implementation.)
//
// Sums (sum of squares, c_r, dw_j) use compensated FP64 summation (Ogita,
// Rump & Oishi 2005, Sum2/Dot2 with TwoSum/TwoProduct); each returned value v
// comes with `bound` such that |v - exact| <= bound, where "exact" is the
// real-number result on the given BF16/FP32 inputs (the bounds follow Higham,
// Accuracy and Stability of Numerical Algorithms, 2nd ed., ch. 3-4, and ORO
// 2005 Prop. 4.5 / Thm. 5.3, with every step's rounding error propagated).
//
// Threads: OpenMP over rows, and over column blocks for dw. Each column's sum
// visits rows in order r = 0..R-1 whatever the thread count, so results are
// bitwise identical for any number of threads.
#pragma once

#include <cstdint>
#include <vector>

#include "normgate/core/types.h"

namespace normgate::oracle {

/// A reference value and a rigorous bound on its absolute error.
struct VB {
  double v = 0;
  double bound = 0;
};

/// Which rstd the backward part uses.
///  fp64:         the oracle's own FP64 rstd (the reference).
///  fp32_rounded: rstd rounded to the nearest FP32, as the forward hands it to
///                the backward: the "ideal kernel" used for admissibility and
///                to split an error into the part the interface forces.
enum class RstdMode { fp64, fp32_rounded };

struct Options {
  int threads = 0;  ///< OpenMP threads; <= 0 means the OpenMP default
  RstdMode rstd = RstdMode::fp64;
};

/// The inputs of one plain-form problem (views; nothing is copied).
/// Requirements (else std::invalid_argument naming the bad field):
/// x and dy have equal rows() and cols >= 1; w.cols == x.cols; eps finite > 0;
/// non-null pointers when rows*cols > 0.
struct Problem {
  RowView<uint16_t> x;
  RowView<uint16_t> dy;
  WeightView w;
  double eps = 1e-6;
};

/// FP64 reference for one problem. compute() does the O(R*H) work once
/// (rstd, c per row, dw per column); y(r,j) and dx(r,j) are then O(1) each,
/// computed on demand from the inputs so a [131072, 6144] case needs no
/// [R,H] FP64 arrays. The Problem's buffers must outlive the Reference.
class Reference {
 public:
  /// Compute the reference. Throws std::invalid_argument on a bad Problem.
  static Reference compute(const Problem& p, const Options& o = {});

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

  /// rstd of row r with bound (the FP64 rstd even in fp32_rounded mode).
  VB rstd(int64_t r) const;
  /// y(r, j) (uses the FP64 rstd in both modes: the forward has no FP32 rstd input).
  VB y(int64_t r, int64_t j) const;
  /// dx(r, j) (uses the mode's rstd).
  VB dx(int64_t r, int64_t j) const;
  /// dw(j) (uses the mode's rstd).
  VB dw(int64_t j) const;
  /// c_r = mean_j(g*xhat) with bound (uses the mode's rstd).
  VB c(int64_t r) const;
  /// Sum over rows of |dy_rj * xhat_rj| for column j (conditioning numerator).
  double dw_abs(int64_t j) const { return dw_abs_[j]; }

 private:
  Problem p_{};
  Options o_{};
  int64_t rows_ = 0, cols_ = 0;
  std::vector<double> rstd_, rstd_b_;   // FP64 rstd and bound
  std::vector<double> rstd_use_, rstd_use_b_;  // rstd fed to the backward
  std::vector<double> c_, c_b_;
  std::vector<double> dw_, dw_b_, dw_abs_;
  friend class ReferenceBuilder;
};

/// FP32 baseline ("FP32 eager"): the same formulas in plain binary32, each sum
/// sequential over its index in order (sum of squares over j, c over j, dw over
/// rows r = 0..R-1), outputs y/dx rounded to BF16. It is the yardstick for
/// "the kernel's dw error is not worse than FP32 eager on the same inputs".
/// Parallel over rows (and column blocks for dw); bitwise independent of threads.
Outputs fp32_baseline(const Problem& p, int threads = 0);

}  // namespace normgate::oracle
