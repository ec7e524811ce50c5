// bench/timing/src/round_order.cpp: the slot order of one timing round
// (candidates.h round_order), in every build.
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/bench/candidates.h"

namespace normgate::kernels {

std::vector<size_t> round_order(size_t n, int r) {
  if (n < 1) throw std::invalid_argument("round_order: n = 0 candidates (needs at least 1)");
  if (r < 0) throw std::invalid_argument("round_order: round r = " + std::to_string(r) + " (needs r >= 0)");
  const size_t slots = n + 1;
  std::vector<size_t> out(slots);
  for (size_t k = 0; k < slots; ++k) out[k] = (k + static_cast<size_t>(r)) % slots;
  return out;
}

}  // namespace normgate::kernels
