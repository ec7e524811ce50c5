// Private helpers of seeds/: strict number parsing and shortest round-trip
// printing for case ids and seed sets.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace normgate::seeds::detail {

/// Parse a decimal unsigned integer: one or more ASCII digits and nothing else
/// (no sign, no spaces, no '.', no exponent). Throws std::invalid_argument
/// "is not a non-negative integer" or "is out of range (0..max)".
inline uint64_t parse_u64(std::string_view v, uint64_t max) {
  if (v.empty()) throw std::invalid_argument("is empty");
  for (char ch : v)
    if (ch < '0' || ch > '9') throw std::invalid_argument("is not a non-negative integer");
  uint64_t x = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x, 10);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && x > max))
    throw std::invalid_argument("is out of range (0.." + std::to_string(max) + ")");
  if (ec != std::errc() || ptr != v.data() + v.size()) throw std::invalid_argument("is not a non-negative integer");
  return x;
}

/// Parse a finite decimal floating-point number (std::from_chars, general
/// format: "1e-6", "0.5", "100000000"); the whole text must be consumed.
/// Throws std::invalid_argument "is not a number" / "is not finite" /
/// "is out of range".
inline double parse_double(std::string_view v) {
  if (v.empty()) throw std::invalid_argument("is empty");
  double x = 0.0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x, std::chars_format::general);
  if (ec == std::errc::result_out_of_range) throw std::invalid_argument("is out of range for a double");
  if (ec != std::errc() || ptr != v.data() + v.size()) throw std::invalid_argument("is not a number");
  if (!std::isfinite(x)) throw std::invalid_argument("is not finite");
  return x;
}

/// Shortest decimal text that parses back to exactly d (std::to_chars without
/// a precision: the %.17g value made as short as round-tripping allows).
inline std::string format_double(double d) {
  char buf[64];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, d);
  if (ec != std::errc()) return "?";
  return std::string(buf, ptr);
}

}  // namespace normgate::seeds::detail
