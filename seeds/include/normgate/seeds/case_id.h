// normgate/seeds/case_id.h: the canonical, pasteable name of one generated case.
//
// Syntax: comma-separated key=value pairs, e.g.
//   H=4096,T=65537,w=bf16,form=plain,family=cancel,seed=17
// Keys (all required unless a default is given):
//   H       normalized length (columns), 1..16384 (forms heads24/heads4: must be 256)
//   T       tokens (rows of the leading dimension), 0..2^31
//   w       weight dtype: bf16 | fp32
//   form    plain | res | heads24 | heads4                (default plain)
//   family  normal | llm | cancel | epsnear | zeros | tiny | huge | specials
//   seed    0..2^64-1
//   eps     RMSNorm epsilon, finite, in kMinEps..kMaxEps (the normal
//           binary32 range, 1.1754943508222875e-38..3.4028234663852886e+38;
//           default 1e-6): the kernels take float32(eps); the oracle
//           solves the problem with the binary64 eps as given;
//           family epsnear also scales its rows by it (their mean
//           square is near eps), every other family ignores it
//   kappa   cancel only: target per-column condition number
//           sum|dy*xhat| / |sum dy*xhat|, 1e2..1e12       (default 1e8)
// Keys may come in any order when parsed; to_string() prints the canonical
// order H,T,w,form,family,seed[,eps][,kappa] and omits defaults, so
// parse(to_string(c)) == c and to_string(parse(s)) is the canonical form of s.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

#include "normgate/core/types.h"

namespace normgate::seeds {

/// Input families. Gate families: normal, llm, cancel, epsnear. Robustness:
/// the rest. (The value is part of the Philox counter: never reused.)
enum class Family : uint8_t {
  normal = 0,
  llm = 1,
  cancel = 2,
  zeros = 3,
  tiny = 4,
  huge = 5,
  specials = 6,
  epsnear = 7
};

/// Family name as used in case ids.
std::string_view to_string(Family f);
/// Parse a family name; throws std::invalid_argument naming the bad value.
Family parse_family(std::string_view s);
/// True for the families the gate runs by default (normal, llm, cancel,
/// epsnear: seed_set.h's 5xN).
bool is_gate_family(Family f);

inline constexpr double kDefaultEps = 1e-6;
/// The eps range of every entry point (case ids, seed sets, the C ABI's
/// ng_fwd, the Python package): the normal binary32 numbers. The kernels
/// take eps as float32: below FLT_MIN it would be a subnormal (or 0, and an
/// all-zero row's y NaN) there, above FLT_MAX infinite.
inline constexpr double kMinEps = 0x1p-126;                    ///< FLT_MIN, 1.1754943508222875e-38
inline constexpr double kMaxEps = 0x1.fffffep127;              ///< FLT_MAX, 3.4028234663852886e+38

/// "" when eps is finite and in kMinEps..kMaxEps, else why not, naming the
/// value as given (shortest round-trip text), e.g. "eps=1e-45 is below the
/// smallest normal float32 1.1754943508222875e-38 (the kernels take
/// float32(eps): 1e-45 would be a subnormal there)".
std::string eps_problem(double eps);

inline constexpr double kDefaultKappa = 1e8;
inline constexpr int64_t kMaxH = 16384;                 ///< largest H a case id accepts
inline constexpr int64_t kMaxT = int64_t{1} << 31;      ///< largest T a case id accepts
inline constexpr double kMinKappa = 1e2;                ///< smallest kappa a case id accepts
inline constexpr double kMaxKappa = 1e12;               ///< largest kappa a case id accepts

/// One case: shape, dtype, form, family, seed and numeric parameters.
struct CaseId {
  int64_t H = 0;
  int64_t T = 0;
  WDtype w = WDtype::bf16;
  Form form = Form::plain;
  Family family = Family::normal;
  uint64_t seed = 0;
  double eps = kDefaultEps;
  double kappa = kDefaultKappa;

  /// Rows per token (1 for plain/res, 24 or 4 for the head forms).
  int64_t heads() const;
  /// Normalized rows = T * heads().
  int64_t rows() const { return T * heads(); }
  bool operator==(const CaseId&) const = default;
};

/// Canonical string (see file comment): H,T,w,form,family,seed always
/// (form too, even when plain), eps and kappa only when they differ from
/// kDefaultEps/kDefaultKappa; doubles in the shortest text that parses back to
/// the same value (std::to_chars). Never throws and does not validate: for a
/// valid c (validate_case), parse_case(to_string(c)) == c.
std::string to_string(const CaseId& c);

/// Check a programmatically built case against the rules parse_case enforces
/// (H in 1..16384, T in 0..2^31, H == 256 for head forms, eps finite in
/// kMinEps..kMaxEps (eps_problem),
/// kappa in [1e2, 1e12] for cancel and == kDefaultKappa otherwise, a known
/// family). Throws std::invalid_argument naming the offending field.
void validate_case(const CaseId& c);

/// Parse a case id. Throws std::invalid_argument with a message that starts
/// "case id: ", names the offending key or value and quotes the whole input:
/// empty input or pair, pair without '=', empty value, unknown key, duplicate
/// key, missing required key, non-numeric or out-of-range number (integers:
/// digits only, so '4096.5', '-1', '+1' and values past the range are
/// rejected; doubles: std::from_chars, finite), kappa given for a family other
/// than cancel, H != 256 for a head form, unknown w/form/family name.
CaseId parse_case(std::string_view s);

}  // namespace normgate::seeds
