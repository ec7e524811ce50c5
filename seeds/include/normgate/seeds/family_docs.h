// normgate/seeds/family_docs.h: human-readable descriptions of the input
// families, for `normgate families` (docs/families.md has the long form).
#pragma once

#include <string_view>

#include "normgate/seeds/case_id.h"

namespace normgate::seeds {

/// One line (no newline, under 100 characters): what the family is for.
/// Static storage; "unknown family" for an out-of-range value. Never throws.
std::string_view family_summary(Family f);
/// Several '\n'-separated lines (no trailing newline): the distributions of
/// x, dy, w (and u, dh_new for res) and the family's purpose and parameters,
/// as implemented in families.h. Static storage; never throws.
std::string_view family_details(Family f);

}  // namespace normgate::seeds
