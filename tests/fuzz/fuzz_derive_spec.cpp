// Fuzz target: derivation specs (TOML; routing/derive.h parse_derive_spec).
// Contract: a DeriveSpec or RouteTableError. A parsed spec keeps its rules:
// T grid ascending from 1 up to kMaxT, bench values in range, and every
// group has a candidate.
#include "fuzz_util.h"
#include "normgate/routing/derive.h"
#include "normgate/seeds/case_id.h"

using namespace normgate;
using namespace normgate::kernels;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = ngfuzz::as_text(data, size);
  DeriveSpec s;
  if (!ngfuzz::accepts<RouteTableError>("parse_derive_spec", [&] { s = parse_derive_spec(text, "fuzz.derive.toml"); }))
    return 0;
  NG_FUZZ_CHECK(!s.t_grid.empty() && s.t_grid.front() == 1 && s.t_grid.back() <= seeds::kMaxT);
  for (size_t i = 1; i < s.t_grid.size(); ++i) NG_FUZZ_CHECK(s.t_grid[i - 1] < s.t_grid[i]);
  NG_FUZZ_CHECK(s.rounds >= 2 && s.reps >= 20 && s.crossover_steps >= 0 && s.crossover_steps <= 12);
  for (const DeriveGroup& g : s.groups) {
    NG_FUZZ_CHECK(!s.candidates(g).empty());
    (void)g.key();
  }
  return 0;
}
