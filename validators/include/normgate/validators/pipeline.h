// normgate/validators/pipeline.h: one check, end to end: generate a case, run
// the implementation under test, compute the FP64 reference (and the ideal
// kernel for the forced part of each error), validate every element.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "normgate/seeds/case_id.h"
#include "normgate/validators/check.h"

namespace normgate::validators {

/// The implementation under test. "fp32-baseline" is the FP32 eager yardstick
/// (oracle::fp32_baseline). Kernel variants join with the kernels.
struct CheckRequest {
  seeds::CaseId id;
  std::string impl = "fp32-baseline";
  int threads = 0;  ///< OpenMP threads for generator, oracle, validation (<= 0: default)
};

/// What a check found, with enough provenance to reproduce it.
struct CheckReport {
  CheckRequest request;
  std::string backend;  ///< where the implementation ran, e.g. "cpu (FP32 baseline)"
  CaseResult result;
  double dw_worst_abs_sum = 0;  ///< sum_r |dy*xhat| of the worst dw column
  double seconds_generate = 0, seconds_impl = 0, seconds_oracle = 0, seconds_validate = 0;
};

/// Run one check. Throws std::invalid_argument for an unknown impl or a case
/// the implementation does not support.
CheckReport run_check(const CheckRequest& req);

/// Short human-readable table: one line per output (max err/tol, worst index,
/// over-budget count, forced part, oracle bound/tol), the dw comparison with
/// the FP32 baseline, the verdict, and for each failing output where it fails
/// (index, value, reference, bound).
std::string format_report(const CheckReport& rep);

/// Every number of the report as JSON.
nlohmann::json to_json(const CheckReport& rep);

}  // namespace normgate::validators
