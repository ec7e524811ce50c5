// Fuzz target: approvals files (JSON; routing/routing.h load_approvals).
// The input is written to a scratch file and loaded. Contract: Approvals or
// RouteTableError. Loaded records serialize (approvals_to_json_text) to a
// text that loads back to the same text; approval_status, describe_strength
// and a policy's record_shortfalls never throw on them.
#include "fuzz_util.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/routing.h"

using namespace normgate;
using namespace normgate::kernels;

namespace {

const RouteTable& table() {
  static const RouteTable t = parse_route_table(R"(arch = "sm90a"
route = [
  { op = "fwd", H = 2048, w = "bf16", form = "plain", T = [1, 128], variant = "fwd_rowwise" },
  { op = "bwd", mode = "det", H = 2048, w = "bf16", form = "plain", T = [1, 128], variant = "bwd_det_chunked" },
  { op = "bwd", mode = "det", H = 2048, w = "bf16", form = "plain", T = [129, 512], variant = "bwd_det_chunked" },
  { op = "bwd", mode = "nondet", H = 2048, w = "fp32", form = "plain", T = [1, 512], variant = "bwd_nondet_atomic" },
  { op = "bwd", mode = "det", H = 64, w = "bf16", form = "plain", T = [1, 5], variant = "bwd_det_onepass" },
]
)", "fuzz-approvals.toml");
  return t;
}

const ApprovalPolicy& policy() {
  static const ApprovalPolicy p = parse_policy(R"([minimum]
seeds = "3x16"
t_per_window = 8
dense_points = 16
dense_step = 64
fresh_factor = 1
backends = ["gpu", "cpu-model"]
dw_not_worse_than_fp32 = true
)", "fuzz.policy.toml");
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ngfuzz::write_scratch("fuzz.approvals.json", data, size);
  Approvals a;
  if (!ngfuzz::accepts<RouteTableError>("load_approvals", [&] { a = load_approvals(path); })) return 0;
  for (const Approval& r : a.records) {
    NG_FUZZ_CHECK(r.t_lo <= r.t_hi);
    (void)r.window();
    (void)describe_strength(r);
    (void)policy().minimum.record_shortfalls(r);
  }
  for (const Route& r : table().routes)
    for (bool cpu : {false, true}) {
      const ApprovalStatus s = approval_status(r, a, cpu);
      if (s.state == ApprovalState::current) NG_FUZZ_CHECK(s.record != nullptr && s.record->variant == r.variant->name);
    }
  const std::string text = approvals_to_json_text(a);
  const std::string again = ngfuzz::write_scratch("fuzz-again.approvals.json",
                                                  reinterpret_cast<const uint8_t*>(text.data()), text.size());
  Approvals back;
  if (!ngfuzz::accepts<RouteTableError>("load_approvals", [&] { back = load_approvals(again); }))
    ngfuzz::fail("approvals written by approvals_to_json_text do not load back");
  NG_FUZZ_CHECK(back.records.size() == a.records.size());
  NG_FUZZ_CHECK(approvals_to_json_text(back) == text);
  return 0;
}
