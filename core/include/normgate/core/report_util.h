// normgate/core/report_util.h (internal): small formatting helpers shared by
// the check pipeline's and the gate's reports.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/core/json_number.h"

namespace normgate::validators::detail {

using Clock = std::chrono::steady_clock;

/// The current time as UTC ISO 8601, "YYYY-MM-DDTHH:MM:SSZ" (the dates of
/// reports, approvals, timings and digests files).
inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// Seconds elapsed since t0.
inline double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// printf-style formatting of one double (f is a format with one conversion).
inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// A count and its noun, in the singular for 1: counted(1, "case") is
/// "1 case", counted(3, "case") "3 cases" (nouns with a plain -s plural).
inline std::string counted(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

/// A double as JSON (core/json_number.h: inf and nan as strings).
inline nlohmann::json num(double v) { return json_number(v); }

}  // namespace normgate::validators::detail
