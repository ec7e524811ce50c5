// Fuzz target: route tables (TOML; routing/routing.h parse_route_table).
// Contract: a RouteTable or RouteTableError, with and without allow_controls.
// A loaded table keeps the loader's rules: every route has a variant, 1 <= lo
// <= hi <= kMaxT, and find() at both ends of a window returns that route
// (windows of a group neither overlap nor leave gaps); a dispatcher over a
// table without controls inspects every route without throwing.
#include "fuzz_util.h"
#include "normgate/routing/routing.h"
#include "normgate/seeds/case_id.h"

using namespace normgate;
using namespace normgate::kernels;

namespace {

void check_table(const RouteTable& t) {
  NG_FUZZ_CHECK(t.arch == "sm90a");
  NG_FUZZ_CHECK(t.sha256.size() == 64);
  for (const Route& r : t.routes) {
    NG_FUZZ_CHECK(r.variant != nullptr);
    NG_FUZZ_CHECK(r.t_lo >= 1 && r.t_lo <= r.t_hi && r.t_hi <= seeds::kMaxT);
    NG_FUZZ_CHECK(r.H >= 1 && r.H <= seeds::kMaxH);
    NG_FUZZ_CHECK(r.line >= 1);
    for (const int64_t T : {r.t_lo, r.t_hi}) {
      const Route* f = t.find(r.op, r.mode, r.H, r.w, r.form, T);
      NG_FUZZ_CHECK(f != nullptr && f->same_window(r));
    }
    NG_FUZZ_CHECK(t.find_window(r) != nullptr);
    (void)r.describe();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = ngfuzz::as_text(data, size);
  RouteTable t;
  if (ngfuzz::accepts<RouteTableError>("parse_route_table", [&] { t = parse_route_table(text, "fuzz.toml"); })) {
    check_table(t);
    bool ok = ngfuzz::accepts<RouteTableError>("Dispatcher", [&] {
      const Dispatcher d(t, Approvals{}, DispatchPolicy{true, false});
      for (const Route& r : t.routes) {
        const Decision dec = d.inspect(CallKey{r.op, r.mode, r.H, r.w, r.form, r.t_hi});
        NG_FUZZ_CHECK(dec.route != nullptr && dec.route->same_window(r));
        NG_FUZZ_CHECK(dec.approval.state == ApprovalState::missing);
      }
    });
    NG_FUZZ_CHECK(ok);  // controls are refused by the loader without allow_controls
  }
  RouteTable c;
  if (ngfuzz::accepts<RouteTableError>("parse_route_table(allow_controls)",
                                       [&] { c = parse_route_table(text, "fuzz.toml", LoadOptions{true}); }))
    check_table(c);
  return 0;
}
