// normgate/seeds/seed_set.h: sets of (family, seed) pairs a check or gate runs.
//
// Accepted spellings:
//   "3x120"          the three gate families (normal, llm, cancel) x seeds 0..119
//   "seeds=120..239" the three gate families x seeds 120..239 (inclusive)
//   "normal:0..7"    one family (any family name) x an inclusive seed range
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "normgate/seeds/case_id.h"

namespace normgate::seeds {

struct SeedSet {
  std::vector<Family> families;
  uint64_t first = 0;  ///< first seed, inclusive
  uint64_t last = 0;   ///< last seed, inclusive
  /// Number of (family, seed) pairs.
  uint64_t size() const { return families.size() * (last - first + 1); }
  bool operator==(const SeedSet&) const = default;
};

/// Parse a seed-set spelling (above). Seeds are decimal digits only (no
/// sign, no spaces), 0..2^64-1; ranges are inclusive with first <= last.
/// Families are in the order normal, llm, cancel for the gate spellings.
/// Throws std::invalid_argument quoting the input and naming the bad part:
/// empty text, unrecognized spelling, a count other than "3x", count 0,
/// non-integer or out-of-range seed, missing "..", first > last, unknown
/// family, more than 2^64-1 (family, seed) pairs.
SeedSet parse_seed_set(std::string_view s);
/// Canonical spelling: "3x120" when it is the gate families from seed 0,
/// "seeds=A..B" for the gate families otherwise, "family:A..B" for one family.
/// parse_seed_set(to_string(s)) == s. Throws std::invalid_argument when s has
/// first > last or a family list with no spelling (several families other
/// than exactly normal, llm, cancel in that order).
std::string to_string(const SeedSet& s);

/// Append the cases of one shape for every (family, seed) of s, families in
/// s's order, seeds ascending: {H, T, w, form, family, seed} with the default
/// eps and kappa. Each is checked with validate_case (which throws
/// std::invalid_argument naming the bad field, e.g. a head form with H != 256).
void append_cases(const SeedSet& s, int64_t H, int64_t T, WDtype w, Form form, std::vector<CaseId>& out);

}  // namespace normgate::seeds
