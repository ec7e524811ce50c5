// Fuzz target: derivation timings (JSON; routing/derive.h parse_timings).
// Contract: Timings or RouteTableError. Parsed timings have positive finite
// medians, and print (timings_to_json_text) to a text that parses back to
// the same text.
#include <cmath>

#include "fuzz_util.h"
#include "normgate/routing/derive.h"

using namespace normgate::kernels;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = ngfuzz::as_text(data, size);
  Timings t;
  if (!ngfuzz::accepts<RouteTableError>("parse_timings", [&] { t = parse_timings(text, "fuzz.timings.json"); }))
    return 0;
  for (const auto& [k, p] : t.points) {
    NG_FUZZ_CHECK(p.key == k);
    for (const auto& [v, us] : p.median_us) NG_FUZZ_CHECK(std::isfinite(us) && us > 0);
    NG_FUZZ_CHECK(t.find(k) == &p);
  }
  const std::string out = timings_to_json_text(t);
  Timings back;
  if (!ngfuzz::accepts<RouteTableError>("parse_timings", [&] { back = parse_timings(out, "fuzz.timings.json"); }))
    ngfuzz::fail("timings printed by timings_to_json_text do not parse back: " + out.substr(0, 400));
  NG_FUZZ_CHECK(timings_to_json_text(back) == out);
  return 0;
}
