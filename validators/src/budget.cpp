// budget.cpp: the budget table and the per-element err/tol ratio.
#include "normgate/validators/budget.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace normgate::validators {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

std::string_view to_string(Output o) {
  switch (o) {
    case Output::y: return "y";
    case Output::rstd: return "rstd";
    case Output::dx: return "dx";
    case Output::dw: return "dw";
    case Output::h_new: return "h_new";
  }
  return "?";
}

Budget budget(Output o) {
  switch (o) {
    case Output::y: return {1e-2, 1e-2, false};
    case Output::rstd: return {0.0, 1e-5, false};
    case Output::dx: return {1e-2, 1e-2, false};
    case Output::dw: return {1e-4, 1e-4, false};
    case Output::h_new: return {0.0, 0.0, true};
  }
  throw std::invalid_argument("budget: unknown output " + std::to_string(static_cast<int>(o)));
}

double tolerance(const Budget& b, double ref) {
  if (b.exact) return 0.0;
  return b.atol + b.rtol * std::fabs(ref);
}

bool nonfinite_failure(double got, double ref) {
  if (std::isnan(ref)) return !std::isnan(got);
  if (std::isinf(ref)) return got != ref;  // NaN != anything; -Inf != +Inf
  return !std::isfinite(got);
}

double ratio(const Budget& b, double got, double ref) {
  if (b.exact) {
    if (std::isnan(got) && std::isnan(ref)) return 0.0;
    // Bitwise on the value: equal and the same sign (so +0 vs -0 fails).
    return (got == ref && std::signbit(got) == std::signbit(ref)) ? 0.0 : kInf;
  }
  if (!std::isfinite(ref) || !std::isfinite(got)) {
    return nonfinite_failure(got, ref) ? kInf : 0.0;
  }
  const double err = std::fabs(got - ref);
  const double tol = tolerance(b, ref);
  if (err == 0.0) return 0.0;
  if (!(tol > 0.0)) return kInf;
  return err / tol;  // may overflow to +inf for a huge err and a tiny tol
}

bool certified(const Budget& b, double got, double ref, double bound) {
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
