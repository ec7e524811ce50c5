// Seed sets: parse and print (spellings in normgate/seeds/seed_set.h).
#include "normgate/seeds/seed_set.h"

#include <limits>
#include <tuple>
#include <utility>
#include <stdexcept>

#include "parse_util.h"

namespace normgate::seeds {

namespace {

const std::vector<Family> kGate = {Family::normal, Family::llm, Family::cancel};
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

[[noreturn]] void fail(std::string_view input, const std::string& what) {
  throw std::invalid_argument("seed set '" + std::string(input) + "': " + what +
                              " (expected '3x<count>', 'seeds=<first>..<last>' or '<family>:<first>..<last>')");
}

uint64_t number(std::string_view input, std::string_view what, std::string_view v) {
  try {
    return detail::parse_u64(v, kU64Max);
  } catch (const std::invalid_argument& e) {
    fail(input, std::string(what) + " '" + std::string(v) + "' " + e.what());
  }
}

// "A..B" -> (A, B), A <= B.
std::pair<uint64_t, uint64_t> range(std::string_view input, std::string_view r) {
  const size_t dots = r.find("..");
  if (dots == std::string_view::npos) fail(input, "seed range '" + std::string(r) + "' has no '..'");
  const uint64_t a = number(input, "first seed", r.substr(0, dots));
  const uint64_t b = number(input, "last seed", r.substr(dots + 2));
  if (a > b) fail(input, "first seed " + std::to_string(a) + " > last seed " + std::to_string(b));
  return {a, b};
}

void check_size(std::string_view input, const SeedSet& s) {
  const uint64_t n = s.last - s.first;  // count - 1, no overflow
  if (n == kU64Max || (n + 1) > kU64Max / s.families.size()) fail(input, "too many (family, seed) pairs for 64 bits");
}

}  // namespace

SeedSet parse_seed_set(std::string_view s) {
  if (s.empty()) fail(s, "empty");
  SeedSet out;
  if (s.starts_with("seeds=")) {
    out.families = kGate;
    std::tie(out.first, out.last) = range(s, s.substr(6));
  } else if (const size_t colon = s.find(':'); colon != std::string_view::npos) {
    try {
      out.families = {parse_family(s.substr(0, colon))};
    } catch (const std::invalid_argument& e) {
      fail(s, e.what());
    }
    std::tie(out.first, out.last) = range(s, s.substr(colon + 1));
  } else if (const size_t x = s.find('x'); x != std::string_view::npos) {
    if (s.substr(0, x) != "3") fail(s, "only the 3 gate families can be counted ('3x<count>'), got '" + std::string(s.substr(0, x)) + "x'");
    const uint64_t count = number(s, "seed count", s.substr(x + 1));
    if (count == 0) fail(s, "seed count must be >= 1");
    out.families = kGate;
    out.first = 0;
    out.last = count - 1;
  } else {
    fail(s, "unrecognized spelling");
  }
  check_size(s, out);
  return out;
}

std::string to_string(const SeedSet& s) {
  if (s.first > s.last)
    throw std::invalid_argument("seed set: first seed " + std::to_string(s.first) + " > last seed " +
                                std::to_string(s.last));
  const std::string r = std::to_string(s.first) + ".." + std::to_string(s.last);
  if (s.families == kGate) {
    if (s.first == 0 && s.last != kU64Max) return "3x" + std::to_string(s.last + 1);
    return "seeds=" + r;
  }
  if (s.families.size() == 1) return std::string(to_string(s.families[0])) + ":" + r;
  std::string names;
  for (Family f : s.families) {
    if (!names.empty()) names.push_back(',');
    names.append(to_string(f));
  }
  throw std::invalid_argument("seed set: families {" + names +
                              "} have no spelling (only the 3 gate families in order, or one family)");
}

void append_cases(const SeedSet& s, int64_t H, int64_t T, WDtype w, Form form, std::vector<CaseId>& out) {
  for (Family f : s.families)
    for (uint64_t seed = s.first;; ++seed) {  // inclusive range; last may be 2^64-1
      CaseId c;
      c.H = H;
      c.T = T;
      c.w = w;
      c.form = form;
      c.family = f;
      c.seed = seed;
      validate_case(c);
      out.push_back(c);
      if (seed == s.last) break;
    }
}

}  // namespace normgate::seeds
