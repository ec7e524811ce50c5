// Fuzz target: gate and check reports as `normgate export` and `normgate
// repro --from-report` read them (audit/export.h: report_format_version,
// export_plan, report_windows, select_report_window). Input: JSON text (other
// inputs are skipped). Contract: a value or std::invalid_argument naming the
// field, for each of the four.
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "normgate/audit/export.h"

using namespace normgate::validators;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  int version = -1;
  if (ngfuzz::accepts<std::invalid_argument>("report_format_version", [&] { version = report_format_version(j); }))
    NG_FUZZ_CHECK(version == 0 || version == 1);
  (void)ngfuzz::accepts<std::invalid_argument>("export_plan", [&] { (void)export_plan(j, 2, false); });
  (void)ngfuzz::accepts<std::invalid_argument>("export_plan(all)", [&] { (void)export_plan(j, 1, true); });
  std::vector<ReportWindow> ws;
  if (ngfuzz::accepts<std::invalid_argument>("report_windows", [&] { ws = report_windows(j); }))
    for (size_t i = 0; i < ws.size(); ++i) NG_FUZZ_CHECK(ws[i].index == i);
  (void)ngfuzz::accepts<std::invalid_argument>("select_report_window", [&] { (void)select_report_window(j, "0"); });
  if (!ws.empty())
    (void)ngfuzz::accepts<std::invalid_argument>("select_report_window",
                                                 [&] { (void)select_report_window(j, ws.back().label); });
  return 0;
}
