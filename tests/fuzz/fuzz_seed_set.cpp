// Fuzz target: seed sets (seeds/seed_set.h parse_seed_set).
// Contract: a SeedSet or std::invalid_argument. A parsed set has first <=
// last and at least one family; its canonical spelling parses back to it.
#include <stdexcept>

#include "fuzz_util.h"
#include "normgate/seeds/seed_set.h"

using namespace normgate::seeds;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = ngfuzz::as_text(data, size);
  SeedSet s;
  if (!ngfuzz::accepts<std::invalid_argument>("parse_seed_set", [&] { s = parse_seed_set(text); })) return 0;
  NG_FUZZ_CHECK(!s.families.empty());
  NG_FUZZ_CHECK(s.first <= s.last);
  std::string canon;
  if (!ngfuzz::accepts<std::invalid_argument>("to_string(SeedSet)", [&] { canon = to_string(s); }))
    ngfuzz::fail("a parsed seed set has no spelling: '" + std::string(text) + "'");
  SeedSet back;
  if (!ngfuzz::accepts<std::invalid_argument>("parse_seed_set", [&] { back = parse_seed_set(canon); }))
    ngfuzz::fail("the canonical spelling '" + canon + "' of '" + std::string(text) + "' does not parse");
  NG_FUZZ_CHECK(back == s);
  NG_FUZZ_CHECK(to_string(back) == canon);
  // size() must not wrap: at most 2^64-1 pairs is part of the contract.
  const uint64_t per_family = s.last - s.first + 1;
  NG_FUZZ_CHECK(per_family != 0 && s.families.size() <= UINT64_MAX / per_family);
  return 0;
}
