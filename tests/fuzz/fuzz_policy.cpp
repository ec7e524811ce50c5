// Fuzz target: approval policy files (TOML; routing/policy.h parse_policy).
// Contract: an ApprovalPolicy or PolicyError. A loaded policy keeps the
// documented ranges, and its never-throwing methods (describe, shortfalls,
// window_shortfall, record_shortfalls) do not throw.
#include <cmath>

#include "fuzz_util.h"
#include "normgate/routing/policy.h"

using namespace normgate;
using namespace normgate::kernels;

namespace {

void check_level(const PolicyLevel& l) {
  NG_FUZZ_CHECK(l.t_per_window >= 2);
  NG_FUZZ_CHECK(l.dense_points >= 0);
  NG_FUZZ_CHECK(l.dense_points == 0 || l.dense_step >= 1);
  NG_FUZZ_CHECK(l.fresh_factor >= 0);
  NG_FUZZ_CHECK(!l.backends.empty());
  NG_FUZZ_CHECK(!l.families.empty() && l.seeds_per_family >= 1);
  (void)l.describe();
  (void)l.label();
  (void)l.where("seeds");
  CampaignStrength strong{"3x16", 8, 16, 64, true, 1, "gpu"};
  CampaignStrength weak{"normal:0..0", 2, 0, 0, false, 0, "cpu-model"};
  CampaignStrength odd{"not a seed set", -1, -1, -1, false, -1, ""};
  for (const auto& c : {strong, weak, odd}) (void)l.shortfalls(c);
  for (double d : {0.5, 1.0, 2.0, double(NAN), double(INFINITY)})
    for (WDtype w : {WDtype::bf16, WDtype::fp32}) (void)l.window_shortfall(Op::bwd, w, d);
  Approval a;
  (void)l.record_shortfalls(a);
  a.has_strength = true;
  a.seed_set = "3x16";
  a.t_per_window = 8;
  a.w = WDtype::fp32;
  a.backend = "gpu";
  (void)l.record_shortfalls(a);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = ngfuzz::as_text(data, size);
  ApprovalPolicy p;
  if (!ngfuzz::accepts<PolicyError>("parse_policy", [&] { p = parse_policy(text, "fuzz.policy.toml"); })) return 0;
  NG_FUZZ_CHECK(p.minimum.section == "minimum");
  check_level(p.minimum);
  if (p.target) {
    NG_FUZZ_CHECK(p.target->section == "target");
    check_level(*p.target);
  }
  return 0;
}
