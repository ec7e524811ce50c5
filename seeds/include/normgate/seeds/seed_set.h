// normgate/seeds/seed_set.h: sets of (family, seed) pairs a check or gate runs.
//
// Accepted spellings:
//   "3x120"          the seed's three families (normal, llm, cancel) x seeds 0..119
//   "seeds=120..239" those three families x seeds 120..239 (inclusive)
//   "5x120"          the gate's default set x seeds 0..119: the three above,
//                    epsnear at each eps of kEpsSweep, and cancel at each
//                    kappa of kKappaSweep (cancel at 1e8 is the third);
//                    9 (family, eps, kappa) points per seed
//   "sweep=120..239" the same points x seeds 120..239
//   "normal:0..7"    one family (any family name) x an inclusive seed range
//   "cancel,kappa=1e4:0..7", "epsnear,eps=1e-05:0..7"
//                    one family at a given kappa (cancel only) and/or eps;
//                    without them, the case id defaults (eps 1e-6, kappa 1e8)
// A "3x"/"seeds=" set means exactly what it meant before the sweep existed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "normgate/seeds/case_id.h"

namespace normgate::seeds {

/// The eps values the default set (5xN) runs epsnear at: 1e-6 (the case id
/// default), 1e-5, and 2^-23 (torch.nn.RMSNorm's default, FP32 epsilon:
/// exact in BF16, unlike the other two).
inline constexpr double kEpsSweep[] = {1e-6, 1e-5, 1.1920928955078125e-07};
/// The kappa values the default set (5xN) runs cancel at besides the
/// default 1e8: the conditioning sweep behind a report's headroom (the
/// highest of kKappaLevels at which a variant passes).
inline constexpr double kKappaSweep[] = {1e2, 1e4, 1e6};
/// Every conditioning level of the default set, ascending (the sweep, then 1e8).
inline constexpr double kKappaLevels[] = {1e2, 1e4, 1e6, kDefaultKappa};

/// One point of a seed set: a family at one eps and kappa.
struct FamilyPoint {
  Family family{};
  double eps = kDefaultEps;
  double kappa = kDefaultKappa;
  bool operator==(const FamilyPoint&) const = default;
};

/// The label of a point: the family name, then ",eps=E" and ",kappa=K"
/// where they differ from the case id defaults (numbers as in case ids),
/// e.g. "cancel,kappa=10000", "epsnear,eps=1e-05".
std::string to_string(const FamilyPoint& p);

struct SeedSet {
  std::vector<Family> families;
  uint64_t first = 0;  ///< first seed, inclusive
  uint64_t last = 0;   ///< last seed, inclusive
  /// The default gate set (5xN, sweep=A..B): families normal, llm, cancel,
  /// epsnear, with epsnear at every eps of kEpsSweep and cancel also at
  /// every kappa of kKappaSweep (points()).
  bool sweep = false;
  /// One-family sets only (and not sweep): that family's eps and kappa
  /// (kappa != kDefaultKappa only for cancel).
  double eps = kDefaultEps;
  double kappa = kDefaultKappa;
  /// The (family, eps, kappa) points, in case order: each family in order;
  /// with sweep, epsnear once per kEpsSweep value and cancel at 1e8 then at
  /// each kKappaSweep value (appended after the families).
  std::vector<FamilyPoint> points() const;
  /// Number of (point, seed) pairs.
  uint64_t size() const { return points().size() * (last - first + 1); }
  bool operator==(const SeedSet&) const = default;
};

/// Most seeds a set may hold (last - first + 1): 65,536, about 550 times the
/// seed's standard of 120 per family. A plan holds every (point, seed, T)
/// case in memory, so a larger set ran out of memory (std::bad_alloc, no
/// value named) instead of being refused.
inline constexpr uint64_t kMaxSeedCount = uint64_t{1} << 16;

/// Parse a seed-set spelling (above). Seeds are decimal digits only (no
/// sign, no spaces), 0..2^64-1; ranges are inclusive with first <= last.
/// Families are in the order normal, llm, cancel (then epsnear for 5x and
/// sweep=) for the gate spellings. Throws std::invalid_argument quoting the
/// input and naming the bad part: empty text, unrecognized spelling, a count
/// other than "3x" or "5x", count 0, non-integer or out-of-range seed,
/// missing "..", first > last, unknown family, an unknown parameter, kappa
/// for a family other than cancel, an eps or kappa a case id refuses, more
/// than kMaxSeedCount seeds.
SeedSet parse_seed_set(std::string_view s);
/// Canonical spelling: "3x120" / "5x120" when it is the three / the default
/// set from seed 0, "seeds=A..B" / "sweep=A..B" otherwise,
/// "family[,eps=E][,kappa=K]:A..B" for one family (eps and kappa only when
/// not the default). parse_seed_set(to_string(s)) == s. Throws
/// std::invalid_argument when s has first > last or a family list with no
/// spelling (several families other than exactly normal, llm, cancel (and
/// epsnear with sweep) in that order).
std::string to_string(const SeedSet& s);

/// Append the cases of one shape for every (point, seed) of s, points in
/// s.points() order, seeds ascending: {H, T, w, form, family, seed, eps,
/// kappa}. Each is checked with validate_case (which throws
/// std::invalid_argument naming the bad field, e.g. a head form with H != 256).
void append_cases(const SeedSet& s, int64_t H, int64_t T, WDtype w, Form form, std::vector<CaseId>& out);

/// The one-family seed set of case c's point (family, eps, kappa) over seeds
/// first..last: what the gate's refinement runs at a worst case.
SeedSet point_seed_set(const CaseId& c, uint64_t first, uint64_t last);

}  // namespace normgate::seeds
