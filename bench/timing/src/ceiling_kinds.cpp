// bench/timing/src/ceiling_kinds.cpp: the names of the ceiling streams
// (timing.h), in every build.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "normgate/bench/timing.h"

namespace normgate::kernels {

std::vector<std::string> ceiling_kinds() {
  return {"vec16_grid4", "vec16_tile1", "vec16_tile2", "vec16_tile4", "vec16_tile8", "vec16_tile16", "memcpy", "tma_bulk", "read_only", "write_only"};
}

bool ceiling_kind_is_copy(const std::string& kind) {
  const auto k = ceiling_kinds();
  if (std::find(k.begin(), k.end(), kind) == k.end())
    throw std::invalid_argument("ceiling kind '" + kind + "' is not one of ceiling_kinds()");
  return kind != "read_only" && kind != "write_only";
}

}  // namespace normgate::kernels
