// normgate/validators/budget.h: the accuracy budgets and the per-element ratio.
//
// Per element: err = |got - ref|, tol = atol + rtol*|ref|, ratio = err/tol.
// Budgets (one table, budget() below):
//   y      atol 1e-2  rtol 1e-2
//   rstd   atol 0     rtol 1e-5
//   dx     atol 1e-2  rtol 1e-2   (form res: applies to dh)
//   dw     atol 1e-4  rtol 1e-4   (vs FP64)
//   h_new  exact (bitwise equal to the oracle's BF16(h+u))
// Non-finite values: a NaN reference expects NaN (ratio 0 if got is NaN, inf
// otherwise); a +-Inf reference expects the same Inf; NaN or Inf where the
// reference is finite is a failure with ratio = inf.
//
// An element passes when ratio <= 1. All values are in the tensor's own units
// (got widened exactly to double: BF16 and FP32 values are doubles).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

namespace normgate::validators {

/// The outputs of one training step that are validated, in report order.
enum class Output : uint8_t { y = 0, rstd = 1, dx = 2, dw = 3, h_new = 4 };
inline constexpr int kNumOutputs = 5;

/// Name of an output: "y", "rstd", "dx", "dw", "h_new" ("?" for a value
/// outside the enum). Never throws.
std::string_view to_string(Output o);

/// One budget: tol = atol + rtol*|ref|, or bitwise equality when `exact`.
struct Budget {
  double atol = 0;
  double rtol = 0;
  bool exact = false;  ///< bitwise equality required (ratio 0 or inf)
};

/// The budget table (see file comment). Throws std::invalid_argument for a
/// value outside the Output enum.
Budget budget(Output o);

/// tol = atol + rtol*|ref| (0 for exact budgets). For ref = +-Inf and rtol > 0
/// this is inf; for NaN ref it is NaN (ratio() never uses tol there).
inline double tolerance(const Budget& b, double ref);

/// err/tol with the non-finite rules above. For exact budgets: 0 if got == ref
/// (both NaN counts as equal; +0 and -0 differ, as their bits do), inf
/// otherwise. When tol == 0 and err == 0 the ratio is 0; when tol == 0 and
/// err > 0 it is inf. The result is never NaN and never negative; it is +inf
/// for every non-finite failure (and may also be +inf when err/tol overflows).
inline double ratio(const Budget& b, double got, double ref);

/// True when (got, ref) fails by the non-finite rules alone: NaN/Inf got where
/// ref is finite, non-NaN got where ref is NaN, or a different value where
/// ref is +-Inf. Independent of the budget. Never throws.
inline bool nonfinite_failure(double got, double ref);

/// Certification of one comparison: true when the verdict ratio(b, got, ref) <= 1
/// (pass or fail) is the same for EVERY real X with |X - ref| <= bound, i.e.
/// err/tol cannot cross 1 within the reference's error bound (the oracle's
/// bound, oracle/reference.h). For real X,
///   |got - X| <= err + bound  and  atol + rtol|X| >= tol - rtol bound,
/// so a pass is certain when err + (1 + rtol) bound <= tol and a failure when
/// err > tol + (1 + rtol) bound (err = |got - ref|, tol = tolerance(b, ref));
/// both sides are compared with a relative margin of 2^-50, which dominates
/// the rounding of this double-precision test (so "certified" is itself
/// rigorous). Rules: exact budgets, a non-finite ref (the non-finite rules
/// decide; such a reference is the IEEE propagation of non-finite inputs),
/// bound == 0 (the reference is exact) and a non-finite got against a finite
/// ref (fails for every X) are certified; a finite ref with bound +inf or NaN
/// (no enclosure) is not. Never throws.
inline bool certified(const Budget& b, double got, double ref, double bound);

// Definitions (inline: called once per element in validation sweeps).

inline double tolerance(const Budget& b, double ref) {
  if (b.exact) return 0.0;
  return b.atol + b.rtol * std::fabs(ref);
}

inline bool nonfinite_failure(double got, double ref) {
  if (std::isnan(ref)) return !std::isnan(got);
  if (std::isinf(ref)) return got != ref;  // NaN != anything; -Inf != +Inf
  return !std::isfinite(got);
}

inline double ratio(const Budget& b, double got, double ref) {
  if (b.exact) {
    if (std::isnan(got) && std::isnan(ref)) return 0.0;
    // Bitwise on the value: equal and the same sign (so +0 vs -0 fails).
    return (got == ref && std::signbit(got) == std::signbit(ref)) ? 0.0 : std::numeric_limits<double>::infinity();
  }
  if (!std::isfinite(ref) || !std::isfinite(got)) {
    return nonfinite_failure(got, ref) ? std::numeric_limits<double>::infinity() : 0.0;
  }
  const double err = std::fabs(got - ref);
  const double tol = tolerance(b, ref);
  if (err == 0.0) return 0.0;
  if (!(tol > 0.0)) return std::numeric_limits<double>::infinity();
  return err / tol;  // may overflow to +inf for a huge err and a tiny tol
}

inline bool certified(const Budget& b, double got, double ref, double bound) {
  if (b.exact || !std::isfinite(ref)) return true;
  if (std::isnan(bound)) return false;
  if (bound == 0.0) return true;
  if (!std::isfinite(got)) return true;  // NaN/Inf against a finite X: fails for every X
  if (std::isinf(bound)) return false;
  constexpr double up = 1 + 0x1p-50, dn = 1 - 0x1p-50;
  const double err = std::fabs(got - ref);
  const double tol = tolerance(b, ref);
  const double m = (1 + b.rtol) * std::fabs(bound);
  if (ratio(b, got, ref) <= 1.0) return (err + m) * up <= tol * dn;
  return err * dn > (tol + m) * up;
}

}  // namespace normgate::validators
