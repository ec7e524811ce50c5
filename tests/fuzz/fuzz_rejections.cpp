// Fuzz target: rejections files (JSON; routing/rejections.h parse_rejections).
// Contract: Rejections or RouteTableError. Every loaded record is valid
// (validate_rejection says so) and names its window; the records serialize
// (rejections_to_json_text) to a text that parses back to the same text.
#include "fuzz_util.h"
#include "normgate/routing/rejections.h"
#include "normgate/routing/routing.h"

using namespace normgate;
using namespace normgate::kernels;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Rejections a;
  if (!ngfuzz::accepts<RouteTableError>("parse_rejections", [&] { a = parse_rejections(text, "fuzz.rejections.json"); }))
    return 0;
  for (const Rejection& r : a.records) {
    NG_FUZZ_CHECK(validate_rejection(r).empty());
    NG_FUZZ_CHECK(r.t_lo <= r.t_hi);
    NG_FUZZ_CHECK(!r.window().empty());
    NG_FUZZ_CHECK(r.same_claim(r));
  }
  a.path = "fuzz.rejections.json";
  const std::string out = rejections_to_json_text(a);
  Rejections back;
  if (!ngfuzz::accepts<RouteTableError>("parse_rejections", [&] { back = parse_rejections(out, "again.json"); }))
    ngfuzz::fail("rejections written by rejections_to_json_text do not parse back");
  NG_FUZZ_CHECK(back.records.size() == a.records.size());
  back.path = a.path;
  NG_FUZZ_CHECK(rejections_to_json_text(back) == out);
  return 0;
}
