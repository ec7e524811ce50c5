// bench/cli_args.h: the positional arguments of the host benchmarks, parsed
// strictly, and the project's handling of bad input around a tool's main:
//   -h / --help (anywhere)   the usage to stdout, exit 0;
//   a bad argument           "TOOL: <what>" on one line to stderr, exit 2,
//                            before any work (a missing or extra argument, a
//                            number that is not whole or out of range, a bad
//                            case id or variant);
//   any other exception      "TOOL: <what()>" to stderr, exit 1.
// Numbers: std::from_chars over the whole text (no sign '+', no spaces, no
// trailing characters, no hex), range-checked.
#pragma once

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstdio>
#include <exception>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace normgate::bench_cli {

/// A bad command line: run_main prints "TOOL: what()" to stderr, exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The positional arguments (argv[1..]); at(i) is argument i (1-based), or
/// nullptr when it was not given.
class Args {
 public:
  Args(int argc, char** argv) : argc_(argc), argv_(argv) {}
  int count() const { return argc_ - 1; }
  bool has(int i) const { return i >= 1 && i < argc_; }
  const char* at(int i) const { return has(i) ? argv_[i] : nullptr; }
  /// Argument i, or a UsageError "missing NAME (see --help)" when it was not given.
  const char* required(int i, std::string_view name) const {
    if (!has(i)) throw UsageError("missing " + std::string(name) + " (see --help)");
    return argv_[i];
  }

 private:
  int argc_;
  char** argv_;
};

/// `text` as a whole number of type T in min..max; otherwise a UsageError
/// "NAME must be a whole number >= MIN, got 'TEXT'" (">= MIN" when max is
/// T's largest value, else "in MIN..MAX").
template <std::integral T>
T parse_int(std::string_view name, std::string_view text, T min, T max = std::numeric_limits<T>::max()) {
  T v{};
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 10);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || v < min || v > max) {
    const std::string range = max == std::numeric_limits<T>::max()
                                  ? ">= " + std::to_string(min)
                                  : "in " + std::to_string(min) + ".." + std::to_string(max);
    throw UsageError(std::string(name) + " must be a whole number " + range + ", got '" + std::string(text) + "'");
  }
  return v;
}

/// Argument i as parse_int, or `fallback` when it was not given.
template <std::integral T>
T int_arg(const Args& a, int i, std::string_view name, T fallback, T min, T max = std::numeric_limits<T>::max()) {
  return a.has(i) ? parse_int<T>(name, a.at(i), min, max) : fallback;
}

/// `text` as a finite decimal number in min..max (std::from_chars, general
/// format); otherwise a UsageError "NAME must be a number in MIN..MAX, got 'TEXT'".
inline double parse_number(std::string_view name, std::string_view text, double min, double max) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v, std::chars_format::general);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v) || v < min ||
      v > max) {
    char range[64];
    std::snprintf(range, sizeof range, "%g..%g", min, max);
    throw UsageError(std::string(name) + " must be a number in " + range + ", got '" + std::string(text) + "'");
  }
  return v;
}

/// f(), with a std::invalid_argument it throws (a library's parser naming
/// the bad value: parse_case, kernels::variant) turned into the UsageError
/// "NAME: what()".
template <class F>
decltype(auto) as_usage(std::string_view name, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string(name) + ": " + e.what());
  }
}

/// main's body with the handling above: `usage` (one or more lines, each
/// ending in '\n') for -h / --help; more than max_args arguments is a
/// UsageError. body(args) parses every argument before it starts any work
/// and returns the exit status.
template <class F>
int run_main(const char* tool, const char* usage, int argc, char** argv, int max_args, F&& body) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
  }
  try {
    if (argc - 1 > max_args)
      throw UsageError("unexpected argument '" + std::string(argv[max_args + 1]) + "' (at most " +
                       std::to_string(max_args) + "; see --help)");
    return std::forward<F>(body)(Args(argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return 1;
  } catch (...) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: unknown exception\n", tool);
    return 1;
  }
}

}  // namespace normgate::bench_cli
