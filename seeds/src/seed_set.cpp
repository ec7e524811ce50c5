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
const std::vector<Family> kGate5 = {Family::normal, Family::llm, Family::cancel, Family::epsnear};
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

[[noreturn]] void fail(std::string_view input, const std::string& what) {
  throw std::invalid_argument("seed set '" + std::string(input) + "': " + what +
                              " (expected '3x<count>', '5x<count>', 'seeds=<first>..<last>', 'sweep=<first>..<last>' or "
                              "'<family>[,eps=E][,kappa=K]:<first>..<last>')");
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
  if (n >= kMaxSeedCount)
    fail(input, (n == kU64Max ? std::string("2^64") : std::to_string(n + 1)) + " seeds, more than " +
                    std::to_string(kMaxSeedCount) + " (kMaxSeedCount)");
}

// "family[,eps=E][,kappa=K]" of a one-family spelling.
void parse_point(std::string_view input, std::string_view head, SeedSet& out) {
  const size_t comma = head.find(',');
  try {
    out.families = {parse_family(head.substr(0, comma))};
  } catch (const std::invalid_argument& e) {
    fail(input, e.what());
  }
  bool have_eps = false, have_kappa = false;
  for (size_t at = comma; at != std::string_view::npos;) {
    const size_t next = head.find(',', at + 1);
    const std::string_view kv = head.substr(at + 1, next == std::string_view::npos ? std::string_view::npos : next - at - 1);
    at = next;
    const size_t eq = kv.find('=');
    const std::string_view k = kv.substr(0, eq);
    if (eq == std::string_view::npos || (k != "eps" && k != "kappa"))
      fail(input, "parameter '" + std::string(kv) + "' is not eps=<value> or kappa=<value>");
    bool& seen = k == "eps" ? have_eps : have_kappa;
    if (seen) fail(input, "parameter " + std::string(k) + " given twice");
    seen = true;
    double v = 0;
    try {
      v = detail::parse_double(kv.substr(eq + 1));
    } catch (const std::invalid_argument& e) {
      fail(input, std::string(k) + " '" + std::string(kv.substr(eq + 1)) + "' " + e.what());
    }
    (k == "eps" ? out.eps : out.kappa) = v;
  }
  CaseId probe;  // the rules of a case id for eps and kappa
  probe.H = 1;
  probe.family = out.families[0];
  probe.eps = out.eps;
  probe.kappa = out.kappa;
  try {
    validate_case(probe);
  } catch (const std::invalid_argument& e) {
    fail(input, e.what());
  }
}

}  // namespace

SeedSet parse_seed_set(std::string_view s) {
  if (s.empty()) fail(s, "empty");
  SeedSet out;
  if (s.starts_with("seeds=")) {
    out.families = kGate;
    std::tie(out.first, out.last) = range(s, s.substr(6));
  } else if (s.starts_with("sweep=")) {
    out.families = kGate5;
    out.sweep = true;
    std::tie(out.first, out.last) = range(s, s.substr(6));
  } else if (const size_t colon = s.find(':'); colon != std::string_view::npos) {
    parse_point(s, s.substr(0, colon), out);
    std::tie(out.first, out.last) = range(s, s.substr(colon + 1));
  } else if (const size_t x = s.find('x'); x != std::string_view::npos) {
    const std::string_view k = s.substr(0, x);
    if (k != "3" && k != "5")
      fail(s, "only the 3 seed families or the 5 gate families can be counted ('3x<count>', '5x<count>'), got '" +
                  std::string(k) + "x'");
    const uint64_t count = number(s, "seed count", s.substr(x + 1));
    if (count == 0) fail(s, "seed count must be >= 1");
    out.families = k == "3" ? kGate : kGate5;
    out.sweep = k == "5";
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
  const bool defaults = s.eps == kDefaultEps && s.kappa == kDefaultKappa;
  if (s.sweep && s.families == kGate5 && defaults) {
    if (s.first == 0 && s.last != kU64Max) return "5x" + std::to_string(s.last + 1);
    return "sweep=" + r;
  }
  if (!s.sweep && s.families == kGate && defaults) {
    if (s.first == 0 && s.last != kU64Max) return "3x" + std::to_string(s.last + 1);
    return "seeds=" + r;
  }
  if (!s.sweep && s.families.size() == 1) {
    std::string head(to_string(s.families[0]));
    if (s.eps != kDefaultEps) head += ",eps=" + detail::format_double(s.eps);
    if (s.kappa != kDefaultKappa) head += ",kappa=" + detail::format_double(s.kappa);
    return head + ":" + r;
  }
  std::string names;
  for (Family f : s.families) {
    if (!names.empty()) names.push_back(',');
    names.append(to_string(f));
  }
  throw std::invalid_argument("seed set: families {" + names +
                              "} have no spelling (only the 3 seed families or the 5 gate families in order, or one family)");
}

std::string to_string(const FamilyPoint& p) {
  std::string s(to_string(p.family));
  if (p.eps != kDefaultEps) s += ",eps=" + detail::format_double(p.eps);
  if (p.kappa != kDefaultKappa) s += ",kappa=" + detail::format_double(p.kappa);
  return s;
}

std::vector<FamilyPoint> SeedSet::points() const {
  std::vector<FamilyPoint> out;
  for (Family f : families) {
    if (sweep && f == Family::epsnear) {
      for (double e : kEpsSweep) out.push_back({f, e, kDefaultKappa});
      continue;
    }
    out.push_back({f, eps, f == Family::cancel ? kappa : kDefaultKappa});
  }
  if (sweep)
    for (double k : kKappaSweep) out.push_back({Family::cancel, kDefaultEps, k});
  return out;
}

SeedSet point_seed_set(const CaseId& c, uint64_t first, uint64_t last) {
  SeedSet s;
  s.families = {c.family};
  s.first = first;
  s.last = last;
  s.eps = c.eps;
  s.kappa = c.kappa;
  return s;
}

void append_cases(const SeedSet& s, int64_t H, int64_t T, WDtype w, Form form, std::vector<CaseId>& out) {
  for (const FamilyPoint& pt : s.points())
    for (uint64_t seed = s.first;; ++seed) {  // inclusive range; last may be 2^64-1
      CaseId c;
      c.H = H;
      c.T = T;
      c.w = w;
      c.form = form;
      c.family = pt.family;
      c.seed = seed;
      c.eps = pt.eps;
      c.kappa = pt.kappa;
      validate_case(c);
      out.push_back(c);
      if (seed == s.last) break;
    }
}

}  // namespace normgate::seeds
