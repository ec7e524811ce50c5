// budget.cpp: the budget table and the per-element err/tol ratio.
#include "normgate/validators/budget.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace normgate::validators {

std::string_view to_string(Output o) {
  switch (o) {
    case Output::y: return "y";
    case Output::rstd: return "rstd";
    case Output::dx: return "dx";
    case Output::dw: return "dw";
    case Output::h_new: return "h_new";
  }
  return "?";
}

Budget budget(Output o) {
  switch (o) {
    case Output::y: return {1e-2, 1e-2, false};
    case Output::rstd: return {0.0, 1e-5, false};
    case Output::dx: return {1e-2, 1e-2, false};
    case Output::dw: return {1e-4, 1e-4, false};
    case Output::h_new: return {0.0, 0.0, true};
  }
  throw std::invalid_argument("budget: unknown output " + std::to_string(static_cast<int>(o)));
}

}  // namespace normgate::validators
