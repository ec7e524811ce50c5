// normgate/validators/check.h: validate one implementation's outputs for one
// case against the oracle, element by element.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/oracle/reference.h"
#include "normgate/validators/stats.h"

namespace normgate::validators {

/// Result of validating one case.
struct CaseResult {
  std::vector<RatioStats> tensors;  ///< y, rstd, dx, dw (and h_new for res)
  /// dw error relative to the FP32 baseline on the same inputs:
  /// max_j |dw_got - ref| / max_j |dw_fp32 - ref| (NaN when no baseline given,
  /// 0/0 -> 1). A value <= 1 means "not worse than FP32 eager".
  double dw_vs_fp32_worst = 0;
  /// Median over columns of |dw_got - ref| / |dw_fp32 - ref| (columns where
  /// the baseline error is 0 are skipped).
  double dw_vs_fp32_median = 0;
  /// Worst dw column's conditioning sum|dy*xhat| / |sum dy*xhat|.
  double dw_worst_condition = 0;
  bool pass() const;
  const RatioStats& get(Output o) const;
};

/// Validate `got` for problem p. `ref` is the FP64 reference (RstdMode::fp64);
/// `ideal` the same problem in RstdMode::fp32_rounded (used for the forced
/// part of dx/dw errors; y/rstd forced parts come from rounding ref once).
/// `baseline` is the FP32 baseline's outputs (may be null).
/// Throws std::invalid_argument if any output has the wrong size.
CaseResult validate_case(const oracle::Problem& p, const Outputs& got, const oracle::Reference& ref,
                         const oracle::Reference& ideal, const Outputs* baseline, int threads = 0);

}  // namespace normgate::validators
