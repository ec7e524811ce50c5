// normgate/seeds/families.h: the input families, one element at a time.
//
// CONTRACT (implemented in this header so it runs on host and device):
//   NG_HD float family_value(const FamilyParams& p, Tensor which, int64_t r, int64_t j)
// returns element (r, j) of tensor `which` for the case described by p, where
// r is the normalized row (t*heads + h) and j the column (ignored r for w).
// The result depends only on (family, seed, shape, kappa, which, r, j): no
// state, no order. Values of x, dy, u, dh_new are exactly representable in
// BF16; w is BF16-representable when p.w == bf16.
// All arithmetic uses normgate/core/hd.h's explicitly rounded operations and
// seeds/transforms.h, so host and device results are bitwise identical.
//
// The families (see docs/families.md for distributions and purpose) are
// documented beside their implementations below.
#pragma once

#include <cstdint>

#include "normgate/core/bf16.h"
#include "normgate/core/hd.h"
#include "normgate/core/types.h"
#include "normgate/seeds/case_id.h"
#include "normgate/seeds/philox.h"
#include "normgate/seeds/transforms.h"

namespace normgate::seeds {

/// Which input tensor an element belongs to. (x holds h for form res.)
enum class Tensor : uint8_t { x = 0, dy = 1, w = 2, u = 3, dh_new = 4 };

/// Plain-old-data description of a case for family_value (device-copyable).
struct FamilyParams {
  Family family;
  uint64_t seed;
  int64_t rows;   ///< normalized rows (T * heads)
  int64_t cols;   ///< normalized length
  WDtype w;
  float kappa;    ///< cancel strength (target condition number)
};

/// FamilyParams of a case id.
inline FamilyParams family_params(const CaseId& c) {
  return FamilyParams{c.family, c.seed, c.rows(), c.H, c.w, static_cast<float>(c.kappa)};
}

}  // namespace normgate::seeds
