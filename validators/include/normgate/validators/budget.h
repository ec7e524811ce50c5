// normgate/validators/budget.h: the accuracy budgets and the per-element ratio.
//
// Per element: err = |got - ref|, tol = atol + rtol*|ref|, ratio = err/tol.
// Budgets (one table, budgets() below):
//   y      atol 1e-2  rtol 1e-2
//   rstd   atol 0     rtol 1e-5
//   dx     atol 1e-2  rtol 1e-2   (form res: applies to dh)
//   dw     atol 1e-4  rtol 1e-4   (vs FP64)
//   h_new  exact (bitwise equal to the oracle's BF16(h+u))
// Non-finite values: a NaN reference expects NaN (ratio 0 if got is NaN, inf
// otherwise); a +-Inf reference expects the same Inf; NaN or Inf where the
// reference is finite is a failure with ratio = inf.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace normgate::validators {

enum class Output : uint8_t { y = 0, rstd = 1, dx = 2, dw = 3, h_new = 4 };
inline constexpr int kNumOutputs = 5;

std::string_view to_string(Output o);

struct Budget {
  double atol = 0;
  double rtol = 0;
  bool exact = false;  ///< bitwise equality required (ratio 0 or inf)
};

/// The budget table (see file comment).
Budget budget(Output o);

/// tol = atol + rtol*|ref| (0 for exact budgets).
double tolerance(const Budget& b, double ref);

/// err/tol with the non-finite rules above. For exact budgets: 0 if got == ref
/// (both NaN counts as equal), inf otherwise. When tol == 0 and err == 0 the
/// ratio is 0; when tol == 0 and err > 0 it is inf.
double ratio(const Budget& b, double got, double ref);

}  // namespace normgate::validators
