// Fuzz target: gate window filters (--windows; gate/gate.h parse_window_filter).
// Contract: a WindowFilter or std::invalid_argument. A parsed filter has no
// empty term or value, prints back (key=v1|v2,...) to a text that parses to
// the same terms, and matches() never throws on the routes of a real table.
#include <stdexcept>

#include "fuzz_util.h"
#include "normgate/gate/gate.h"
#include "normgate/routing/routing.h"

using namespace normgate;
using namespace normgate::validators;

namespace {

const kernels::RouteTable& table() {
  static const kernels::RouteTable t = kernels::parse_route_table(R"(arch = "sm90a"
route = [
  { op = "fwd", H = 64, w = "bf16", form = "plain", T = [1, 700], variant = "fwd_rowwise" },
  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "plain", T = [1, 100], variant = "bwd_det_chunked" },
  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "plain", T = [101, 2147483648], variant = "bwd_det_chunked" },
  { op = "bwd", mode = "nondet", H = 256, w = "fp32", form = "heads4", T = [7, 9], variant = "bwd_nondet_atomic" },
]
)", "fuzz-filter.toml");
  return t;
}

std::string print(const WindowFilter& f) {
  std::string s;
  for (const auto& t : f.terms) {
    if (!s.empty()) s += ',';
    s += t.key + '=';
    for (size_t i = 0; i < t.values.size(); ++i) s += (i ? "|" : "") + t.values[i];
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = ngfuzz::as_text(data, size);
  WindowFilter f;
  if (!ngfuzz::accepts<std::invalid_argument>("parse_window_filter", [&] { f = parse_window_filter(text); })) return 0;
  for (const auto& t : f.terms) {
    NG_FUZZ_CHECK(!t.key.empty());
    NG_FUZZ_CHECK(!t.values.empty());
    for (const auto& v : t.values) NG_FUZZ_CHECK(!v.empty());
  }
  std::vector<bool> hit;  // matches() of a parsed filter never throws (an exception here ends the run)
  for (const auto& r : table().routes) hit.push_back(f.matches(r));
  const std::string canon = print(f);
  WindowFilter back;
  if (!ngfuzz::accepts<std::invalid_argument>("parse_window_filter", [&] { back = parse_window_filter(canon); }))
    ngfuzz::fail("the printed filter '" + canon + "' of '" + std::string(text) + "' does not parse");
  NG_FUZZ_CHECK(print(back) == canon);
  for (size_t i = 0; i < hit.size(); ++i) NG_FUZZ_CHECK(back.matches(table().routes[i]) == hit[i]);
  return 0;
}
