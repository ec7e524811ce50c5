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

/// Parse a seed-set spelling (above). Throws std::invalid_argument naming the
/// bad text (e.g. "3x0", "seeds=9..3", unknown family).
SeedSet parse_seed_set(std::string_view s);
/// Canonical spelling: "3x120" when it is the gate families from seed 0,
/// "seeds=A..B" for the gate families otherwise, "family:A..B" for one family.
std::string to_string(const SeedSet& s);

}  // namespace normgate::seeds
