// Fuzz target: case ids (seeds/case_id.h parse_case).
// Contract: a CaseId or std::invalid_argument. A parsed case is valid
// (validate_case), prints canonically and parses back to itself, and its
// canonical text is a fixed point of parse + print.
#include <stdexcept>

#include "fuzz_util.h"
#include "normgate/seeds/case_id.h"

using namespace normgate::seeds;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = ngfuzz::as_text(data, size);
  CaseId c;
  if (!ngfuzz::accepts<std::invalid_argument>("parse_case", [&] { c = parse_case(text); })) return 0;
  if (!ngfuzz::accepts<std::invalid_argument>("validate_case", [&] { validate_case(c); }))
    ngfuzz::fail("parse_case accepted a case validate_case refuses: " + std::string(text));
  const std::string canon = to_string(c);
  CaseId back;
  if (!ngfuzz::accepts<std::invalid_argument>("parse_case", [&] { back = parse_case(canon); }))
    ngfuzz::fail("the canonical form '" + canon + "' of '" + std::string(text) + "' does not parse");
  NG_FUZZ_CHECK(back == c);
  NG_FUZZ_CHECK(to_string(back) == canon);
  NG_FUZZ_CHECK(c.rows() >= 0);
  return 0;
}
