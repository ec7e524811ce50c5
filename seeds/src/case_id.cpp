// Case ids: parse and print (syntax in normgate/seeds/case_id.h).
#include <ostream>
#include "normgate/seeds/case_id.h"

#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "parse_util.h"

namespace normgate::seeds {

namespace {

constexpr std::array<Family, 8> kFamilies = {Family::normal, Family::llm,  Family::cancel,   Family::epsnear,
                                             Family::zeros,  Family::tiny, Family::huge,     Family::specials};
constexpr std::string_view kKnownKeys = "H,T,w,form,family,seed,eps,kappa";

[[noreturn]] void fail(std::string_view input, const std::string& what) {
  throw std::invalid_argument("case id: " + what + " in '" + std::string(input) + "'");
}

std::string quote(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q.push_back('\'');
  q.append(s);
  q.push_back('\'');
  return q;
}

}  // namespace

std::string_view to_string(Family f) {
  switch (f) {
    case Family::normal: return "normal";
    case Family::llm: return "llm";
    case Family::cancel: return "cancel";
    case Family::zeros: return "zeros";
    case Family::tiny: return "tiny";
    case Family::huge: return "huge";
    case Family::specials: return "specials";
    case Family::epsnear: return "epsnear";
  }
  return "?";
}

Family parse_family(std::string_view s) {
  for (Family f : kFamilies)
    if (s == to_string(f)) return f;
  throw std::invalid_argument("bad family '" + std::string(s) +
                              "' (expected normal, llm, cancel, epsnear, zeros, tiny, huge or specials)");
}

bool is_gate_family(Family f) {
  return f == Family::normal || f == Family::llm || f == Family::cancel || f == Family::epsnear;
}

int64_t CaseId::heads() const { return heads_of(form); }

namespace {
std::string eps_problem_text(double eps);
}

std::string eps_problem(double eps) {
  // What to do, after what is wrong: the range every caller accepts.
  const std::string why = eps_problem_text(eps);
  return why.empty() ? why
                     : why + "; give eps in [1.1754943508222875e-38, 3.4028234663852886e+38], e.g. 1e-06 (the "
                             "default)";
}

namespace {
std::string eps_problem_text(double eps) {
  static_assert(kMinEps == static_cast<double>(std::numeric_limits<float>::min()));
  static_assert(kMaxEps == static_cast<double>(std::numeric_limits<float>::max()));
  const std::string e = "eps=" + detail::format_double(eps);
  if (!(std::isfinite(eps) && eps > 0.0)) return e + " must be finite and > 0";
  // The kernels take float32(eps): a larger eps is infinite there.
  // (Within half an ulp of FLT_MAX float32(eps) would still be FLT_MAX, but
  // the oracle would use the binary64 eps above it: the range is on eps.)
  if (eps > kMaxEps)
    return e + " is above the largest float32 3.4028234663852886e+38" +
           (eps < 0x1p128 - 0x1p103 ? std::string(" (float32(eps) rounds down to it, but the oracle would use eps as "
                                                  "given: give at most 3.4028234663852886e+38)")
                                    : std::string(": the kernels use float32(eps), which is inf there"));
  // A smaller one is a subnormal there (or 0: then an all-zero row's rstd is
  // inf and its y NaN), not the problem the oracle would solve.
  if (eps < kMinEps) {
    const float f = static_cast<float>(eps);
    std::string there;
    if (f == 0.0f)
      there = ": the kernels use float32(eps), which is 0 there";
    else if (static_cast<double>(f) < kMinEps)
      there = ": the kernels use float32(eps), a subnormal " + detail::format_double(static_cast<double>(f)) + " there";
    else  // within half an ulp below FLT_MIN: float32(eps) is FLT_MIN itself
      there = " (float32(eps) rounds up to it, but the oracle would use eps as given: give at least "
              "1.1754943508222875e-38)";
    return e + " is below the smallest normal float32 1.1754943508222875e-38" + there;
  }
  return "";
}
}  // namespace

void validate_case(const CaseId& c) {
  const std::string ctx = "case id: ";
  if (c.H < 1 || c.H > kMaxH)
    throw std::invalid_argument(ctx + "H=" + std::to_string(c.H) + " is out of range (1.." + std::to_string(kMaxH) + ")");
  if (c.T < 0 || c.T > kMaxT)
    throw std::invalid_argument(ctx + "T=" + std::to_string(c.T) + " is out of range (0.." + std::to_string(kMaxT) + ")");
  if ((c.form == Form::heads24 || c.form == Form::heads4) && c.H != 256)
    throw std::invalid_argument(ctx + "form=" + std::string(to_string(c.form)) + " needs H=256 (got H=" +
                                std::to_string(c.H) + ")");
  if (const std::string why = eps_problem(c.eps); !why.empty()) throw std::invalid_argument(ctx + why);
  if (c.family == Family::cancel) {
    if (!(c.kappa >= kMinKappa && c.kappa <= kMaxKappa))
      throw std::invalid_argument(ctx + "kappa=" + detail::format_double(c.kappa) + " is out of range (1e2..1e12)");
  } else if (c.kappa != kDefaultKappa) {
    throw std::invalid_argument(ctx + "kappa is only valid with family=cancel (got family=" +
                                std::string(to_string(c.family)) + ")");
  }
  if (static_cast<uint8_t>(c.family) > static_cast<uint8_t>(Family::epsnear))
    throw std::invalid_argument(ctx + "invalid family value " + std::to_string(static_cast<int>(c.family)));
}

std::string to_string(const CaseId& c) {
  std::string s = "H=" + std::to_string(c.H) + ",T=" + std::to_string(c.T) + ",w=" + std::string(to_string(c.w)) +
                  ",form=" + std::string(to_string(c.form)) + ",family=" + std::string(to_string(c.family)) +
                  ",seed=" + std::to_string(c.seed);
  if (c.eps != kDefaultEps) s += ",eps=" + detail::format_double(c.eps);
  if (c.kappa != kDefaultKappa) s += ",kappa=" + detail::format_double(c.kappa);
  return s;
}

namespace {
std::string_view trim_spaces(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const CaseId& c) { return os << to_string(c); }

CaseId parse_case(std::string_view s) {
  if (s.empty()) throw std::invalid_argument("case id: empty string (expected e.g. 'H=4096,T=65537,w=bf16,family=normal,seed=0')");
  std::optional<std::string_view> H, T, w, form, family, seed, eps, kappa;
  struct Slot {
    std::string_view name;
    std::optional<std::string_view>* value;
  };
  const std::array<Slot, 8> slots = {Slot{"H", &H},          Slot{"T", &T},       Slot{"w", &w},
                                     Slot{"form", &form},    Slot{"family", &family}, Slot{"seed", &seed},
                                     Slot{"eps", &eps},      Slot{"kappa", &kappa}};
  size_t pos = 0;
  while (true) {
    const size_t comma = s.find(',', pos);
    const std::string_view item = s.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (item.empty()) fail(s, "empty key=value pair at offset " + std::to_string(pos));
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) fail(s, "pair " + quote(item) + " has no '='");
    // Spaces around keys and values are tolerated ("H=4096, T=65537" pastes often).
    const std::string_view key = trim_spaces(item.substr(0, eq));
    const std::string_view value = trim_spaces(item.substr(eq + 1));
    const Slot* slot = nullptr;
    for (const Slot& sl : slots)
      if (sl.name == key) slot = &sl;
    if (slot == nullptr) fail(s, "unknown key " + quote(key) + " (known: " + std::string(kKnownKeys) + ")");
    if (slot->value->has_value()) fail(s, "duplicate key " + quote(key));
    if (value.empty()) fail(s, "empty value for key " + quote(key));
    *slot->value = value;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  std::string missing;
  for (const auto& [name, value] : {std::pair<std::string_view, bool>{"H", H.has_value()},
                                    {"T", T.has_value()},
                                    {"w", w.has_value()},
                                    {"family", family.has_value()},
                                    {"seed", seed.has_value()}})
    if (!value) {
      if (!missing.empty()) missing.append(", ");
      missing.append(quote(name));
    }
  if (!missing.empty()) fail(s, "missing required key(s) " + missing);

  auto integer = [&](std::string_view key, std::string_view v, uint64_t max) -> uint64_t {
    try {
      return detail::parse_u64(v, max);
    } catch (const std::invalid_argument& e) {
      fail(s, std::string(key) + "=" + quote(v) + ": " + e.what());
    }
  };
  auto real = [&](std::string_view key, std::string_view v) -> double {
    try {
      return detail::parse_double(v);
    } catch (const std::invalid_argument& e) {
      fail(s, std::string(key) + "=" + quote(v) + ": " + e.what());
    }
  };
  auto name = [&](std::string_view key, auto parse, std::string_view v) {
    try {
      return parse(v);
    } catch (const std::invalid_argument& e) {
      fail(s, std::string(key) + ": " + e.what());
    }
  };

  CaseId c;
  // One message for both ends of H's range (and for values past uint64).
  uint64_t h = 0;
  try {
    h = detail::parse_u64(*H, std::numeric_limits<uint64_t>::max());
  } catch (const std::invalid_argument& e) {
    if (std::string_view(e.what()).rfind("is out of range", 0) != 0) fail(s, "H=" + quote(*H) + ": " + e.what());
    h = std::numeric_limits<uint64_t>::max();
  }
  if (h < 1 || h > static_cast<uint64_t>(kMaxH))
    fail(s, "H=" + quote(*H) + " is out of range (1.." + std::to_string(kMaxH) + ")");
  c.H = static_cast<int64_t>(h);
  c.T = static_cast<int64_t>(integer("T", *T, kMaxT));
  c.w = name("w", parse_wdtype, *w);
  if (form) c.form = name("form", parse_form, *form);
  c.family = name("family", parse_family, *family);
  c.seed = integer("seed", *seed, std::numeric_limits<uint64_t>::max());
  if (eps) {
    c.eps = real("eps", *eps);
    if (!(c.eps > 0.0)) fail(s, "eps=" + quote(*eps) + ": must be > 0");
  }
  if (kappa) {
    if (c.family != Family::cancel)
      fail(s, "kappa is only valid with family=cancel (got family=" + std::string(to_string(c.family)) + ")");
    c.kappa = real("kappa", *kappa);
    if (!(c.kappa >= kMinKappa && c.kappa <= kMaxKappa))
      fail(s, "kappa=" + quote(*kappa) + ": out of range (1e2..1e12)");
  }
  if ((c.form == Form::heads24 || c.form == Form::heads4) && c.H != 256)
    fail(s, "form=" + std::string(to_string(c.form)) + " needs H=256 (got H=" + std::to_string(c.H) + ")");
  validate_case(c);  // belt and braces: the same rules as for programmatic ids
  return c;
}

}  // namespace normgate::seeds
