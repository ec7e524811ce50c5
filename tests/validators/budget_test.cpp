// tests/validators/budget_test.cpp: Tests for validators/budget: the table, tolerance() and ratio() including
// the non-finite rules and zero tolerances.
#include "normgate/validators/budget.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace nv = normgate::validators;
using nv::Output;

namespace {
const double inf = std::numeric_limits<double>::infinity();
const double nan_ = std::numeric_limits<double>::quiet_NaN();
const Output kAll[] = {Output::y, Output::rstd, Output::dx, Output::dw, Output::h_new};
}  // namespace

TEST(Budget, TableMatchesSpec) {
  // Values straight from the spec (budget.h file comment).
  EXPECT_EQ(nv::budget(Output::y).atol, 1e-2);
  EXPECT_EQ(nv::budget(Output::y).rtol, 1e-2);
  EXPECT_FALSE(nv::budget(Output::y).exact);
  EXPECT_EQ(nv::budget(Output::rstd).atol, 0.0);
  EXPECT_EQ(nv::budget(Output::rstd).rtol, 1e-5);
  EXPECT_FALSE(nv::budget(Output::rstd).exact);
  EXPECT_EQ(nv::budget(Output::dx).atol, 1e-2);
  EXPECT_EQ(nv::budget(Output::dx).rtol, 1e-2);
  EXPECT_FALSE(nv::budget(Output::dx).exact);
  EXPECT_EQ(nv::budget(Output::dw).atol, 1e-4);
  EXPECT_EQ(nv::budget(Output::dw).rtol, 1e-4);
  EXPECT_FALSE(nv::budget(Output::dw).exact);
  EXPECT_TRUE(nv::budget(Output::h_new).exact);
  EXPECT_THROW(nv::budget(static_cast<Output>(99)), std::invalid_argument);
}

TEST(Budget, Names) {
  EXPECT_EQ(nv::to_string(Output::y), "y");
  EXPECT_EQ(nv::to_string(Output::rstd), "rstd");
  EXPECT_EQ(nv::to_string(Output::dx), "dx");
  EXPECT_EQ(nv::to_string(Output::dw), "dw");
  EXPECT_EQ(nv::to_string(Output::h_new), "h_new");
}

TEST(Budget, ToleranceAndFiniteRatio) {
  const nv::Budget y = nv::budget(Output::y);
  EXPECT_EQ(nv::tolerance(y, -3.0), 1e-2 + 1e-2 * 3.0);
  EXPECT_EQ(nv::tolerance(nv::budget(Output::h_new), 5.0), 0.0);
  // err = 0.5, tol = 1e-2 + 1e-2*|1|.
  EXPECT_EQ(nv::ratio(y, 1.5, 1.0), 0.5 / (1e-2 + 1e-2 * 1.0));
  EXPECT_EQ(nv::ratio(y, 0.5, 1.0), 0.5 / (1e-2 + 1e-2 * 1.0));  // symmetric in sign of err
  // rtol uses |ref|, not |got|.
  EXPECT_EQ(nv::ratio(nv::budget(Output::dw), 0.0, -2.0), 2.0 / (1e-4 + 1e-4 * 2.0));
  EXPECT_EQ(nv::ratio(y, 7.0, 7.0), 0.0);
}

TEST(Budget, ExactlyAtBudgetIsRatioOne) {
  // Dyadic budget so every quantity is exact: tol(2) = 0.25 + 0.5*2 = 1.25.
  const nv::Budget b{0.25, 0.5, false};
  EXPECT_EQ(nv::ratio(b, 2.0 + 1.25, 2.0), 1.0);
  EXPECT_EQ(nv::ratio(b, 2.0 - 1.25, 2.0), 1.0);
  EXPECT_GT(nv::ratio(b, std::nextafter(3.25, inf), 2.0), 1.0);
  EXPECT_LT(nv::ratio(b, std::nextafter(3.25, 0.0), 2.0), 1.0);
}

TEST(Budget, ZeroTolerance) {
  // rstd has atol 0: at ref == 0 the tolerance is 0.
  const nv::Budget r = nv::budget(Output::rstd);
  EXPECT_EQ(nv::tolerance(r, 0.0), 0.0);
  EXPECT_EQ(nv::ratio(r, 0.0, 0.0), 0.0);
  EXPECT_EQ(nv::ratio(r, -0.0, 0.0), 0.0);  // not an exact budget: -0 == +0
  EXPECT_EQ(nv::ratio(r, 1e-300, 0.0), inf);
  EXPECT_EQ(nv::ratio(r, std::numeric_limits<double>::denorm_min(), 0.0), inf);
  // A budget with atol = rtol = 0 but not marked exact behaves the same.
  const nv::Budget z{0.0, 0.0, false};
  EXPECT_EQ(nv::ratio(z, 3.0, 3.0), 0.0);
  EXPECT_EQ(nv::ratio(z, std::nextafter(3.0, 4.0), 3.0), inf);
}

TEST(Budget, NonFiniteRules) {
  for (Output o : kAll) {
    const nv::Budget b = nv::budget(o);
    SCOPED_TRACE(std::string(nv::to_string(o)));
    // NaN reference expects NaN.
    EXPECT_EQ(nv::ratio(b, nan_, nan_), 0.0);
    EXPECT_EQ(nv::ratio(b, -nan_, nan_), 0.0);
    EXPECT_EQ(nv::ratio(b, 1.0, nan_), inf);
    EXPECT_EQ(nv::ratio(b, inf, nan_), inf);
    // +-Inf reference expects the same signed Inf.
    EXPECT_EQ(nv::ratio(b, inf, inf), 0.0);
    EXPECT_EQ(nv::ratio(b, -inf, -inf), 0.0);
    EXPECT_EQ(nv::ratio(b, -inf, inf), inf);
    EXPECT_EQ(nv::ratio(b, inf, -inf), inf);
    EXPECT_EQ(nv::ratio(b, nan_, inf), inf);
    EXPECT_EQ(nv::ratio(b, 3.0e38, inf), inf);
    // Non-finite where the reference is finite fails.
    EXPECT_EQ(nv::ratio(b, nan_, 1.0), inf);
    EXPECT_EQ(nv::ratio(b, inf, 1.0), inf);
    EXPECT_EQ(nv::ratio(b, -inf, 0.0), inf);
  }
  EXPECT_TRUE(nv::nonfinite_failure(nan_, 1.0));
  EXPECT_TRUE(nv::nonfinite_failure(1.0, nan_));
  EXPECT_TRUE(nv::nonfinite_failure(-inf, inf));
  EXPECT_FALSE(nv::nonfinite_failure(nan_, nan_));
  EXPECT_FALSE(nv::nonfinite_failure(inf, inf));
  EXPECT_FALSE(nv::nonfinite_failure(100.0, 1.0));  // finite failures are not non-finite ones
}

TEST(Budget, ExactBudget) {
  const nv::Budget h = nv::budget(Output::h_new);
  EXPECT_EQ(nv::ratio(h, 1.5, 1.5), 0.0);
  EXPECT_EQ(nv::ratio(h, std::nextafter(1.5, 2.0), 1.5), inf);
  EXPECT_EQ(nv::ratio(h, 0.0, 0.0), 0.0);
  EXPECT_EQ(nv::ratio(h, -0.0, 0.0), inf);  // different bits
  EXPECT_EQ(nv::ratio(h, 0.0, -0.0), inf);
  EXPECT_EQ(nv::ratio(h, nan_, nan_), 0.0);
  EXPECT_EQ(nv::ratio(h, inf, inf), 0.0);
  EXPECT_EQ(nv::ratio(h, 1.0, nan_), inf);
}
