// Fuzz target: one journal record (gate/journal.h case_record_from_json).
// Input: JSON text (inputs that are not JSON are skipped: the journal's own
// JSON parse is covered by fuzz_journal_file). Contract: a CaseRecord or
// std::invalid_argument. A parsed record prints (to_json) to JSON that parses
// back to a record printing the same (numbers bit for bit, non-finite ones
// as strings).
#include <stdexcept>

#include "fuzz_util.h"
#include "normgate/gate/journal.h"

using namespace normgate::validators;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  CaseRecord r;
  if (!ngfuzz::accepts<std::invalid_argument>("case_record_from_json", [&] { r = case_record_from_json(j); })) return 0;
  NG_FUZZ_CHECK(!r.error.empty() || r.results.size() == r.impls.size());
  const nlohmann::json out = to_json(r);
  const std::string text = out.dump();
  CaseRecord back;
  if (!ngfuzz::accepts<std::invalid_argument>("case_record_from_json",
                                              [&] { back = case_record_from_json(nlohmann::json::parse(text)); }))
    ngfuzz::fail("a record printed by to_json does not parse back: " + text);
  NG_FUZZ_CHECK(to_json(back).dump() == text);
  NG_FUZZ_CHECK(back.case_id == r.case_id && back.impls == r.impls && back.error == r.error);
  return 0;
}
