// normgate/core/json_number.h: doubles in normgate's JSON files (reports,
// journals, approvals). JSON has no inf or nan, so those are written as the
// strings "inf", "-inf", "nan" and read back from them. Header-only; needs
// nlohmann/json (normgate_core links it as an interface dependency).
#pragma once

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace normgate {

/// v as JSON: a number, or "inf" / "-inf" / "nan". Never throws.
inline nlohmann::json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

/// The inverse of json_number: a JSON number, or one of its three strings.
/// Throws std::invalid_argument naming `what` (the field) otherwise.
inline double from_json_number(const nlohmann::json& j, const std::string& what) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  throw std::invalid_argument("field '" + what + "' must be a number");
}

}  // namespace normgate
