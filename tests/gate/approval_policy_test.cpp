// tests/gate/approval_policy_test.cpp: the approval policy in the gate's
// approve path (gate.h: check_approval_request, approve, update_approvals):
// records carry the campaign's strength; a campaign weaker than the policy
// minimum is refused before any work and again after it; a window failing the
// policy's window requirement is refused. CPU models, small table.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "normgate/gate/gate.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/routing.h"
#include "gate/gate_test_util.h"

namespace {

using namespace normgate;
using namespace normgate::validators;
using test::small_opts;

std::string temp_dir(const std::string& name) { return test::fresh_dir("test_gate_policy", name); }

// A policy for the copy of small.toml in `dir` (line numbers fixed).
void write_policy(const std::string& dir, const std::string& extra = "") {
  std::ofstream(dir + "/t.policy.toml") << "[minimum]\n"                          // 1
                                           "seeds = \"3x1\"\n"                    // 2
                                           "t_per_window = 4\n"                   // 3
                                           "dense_points = 2\n"                   // 4
                                           "dense_step = 64\n"                    // 5
                                           "fresh_factor = 1\n"                   // 6
                                           "backends = [\"cpu-model\"]\n"         // 7
                                        << extra;                                 // 8
}

// A CPU-model gate result whose one window, `route`, failed.
GateResult one_failed_window(const kernels::Route& route) {
  GateResult r;
  r.backend = "cpu-model";
  WindowResult w;
  w.route = route;
  w.pass = false;
  r.windows.push_back(w);
  return r;
}

// A record of `variant` on bwd det H=64 w=bf16 plain T=1..700 (it holds the
// small table's [1, 100] and [101, 700]), of `backend`.
kernels::Approval wide_record(const std::string& variant, const std::string& backend) {
  kernels::Approval a;
  a.op = kernels::Op::bwd;
  a.mode = kernels::Mode::det;
  a.H = 64;
  a.t_lo = 1;
  a.t_hi = 700;
  a.variant = variant;
  a.backend = backend;
  return a;
}

std::string copy_table(const std::string& dir) {
  const std::string table = dir + "/t.toml";
  std::filesystem::copy_file(test::kSmallTable, table);
  return table;
}

TEST(ApprovalPolicy, RecordsCarryTheCampaignStrength) {
  GateOptions o = small_opts();
  o.windows = "H=256|64,op=bwd,T=1..100";  // bwd det H=256 fp32 [1, 300] and the H=64 [1, 100] windows
  const GateResult r = run_gate(o);
  ASSERT_TRUE(r.pass());
  const auto t = kernels::load_route_table(test::kSmallTable);
  kernels::Approvals a;
  (void)update_approvals(a, r, t.routes);
  ASSERT_EQ(a.records.size(), r.windows.size());
  for (size_t i = 0; i < r.windows.size(); ++i) {
    const WindowResult& w = r.windows[i];
    const kernels::Approval* x = nullptr;
    for (const auto& rec : a.records)
      if (rec.same_window(w.route)) x = &rec;
    ASSERT_NE(x, nullptr) << w.route.describe();
    EXPECT_TRUE(x->has_strength);
    EXPECT_EQ(x->seed_set, "3x1");
    EXPECT_EQ(x->t_per_window, 4);
    EXPECT_EQ(x->dense_points, 2);
    EXPECT_EQ(x->dense_step, 64);
    EXPECT_FALSE(x->dense_all_seeds);
    EXPECT_EQ(x->fresh_factor, 2);
    // 2 x 1 fresh seeds right after seed 0, in the worst family.
    EXPECT_EQ(x->fresh_seeds, w.fresh.seeds);
    EXPECT_EQ(x->fresh_seeds, w.fresh_family + ":1..2");
    EXPECT_EQ(x->oracle, "auto");
    ASSERT_TRUE(std::isfinite(w.dw_vs_fp32_worst));
    EXPECT_EQ(x->dw_vs_fp32_worst, w.dw_vs_fp32_worst);
  }
  // A forward window's record has no dw vs FP32.
  GateOptions f = small_opts();
  f.windows = "op=fwd";
  const GateResult rf = run_gate(f);
  kernels::Approvals af;
  (void)update_approvals(af, rf, t.routes);
  ASSERT_EQ(af.records.size(), 1u);
  EXPECT_TRUE(af.records[0].has_strength);
  EXPECT_TRUE(std::isnan(af.records[0].dw_vs_fp32_worst));
  EXPECT_EQ(kernels::approvals_to_json_text(af).find("dw_vs_fp32_worst"), std::string::npos);
}

TEST(ApprovalPolicy, WeakCampaignRefusedBeforeAnyWork) {
  const std::string dir = temp_dir("request");
  const std::string table = copy_table(dir);
  // No policy: refused, saying where to write one.
  GateOptions o = small_opts(table);
  try {
    check_approval_request(o, Backend::cpu);
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--approve needs an approval policy"), std::string::npos) << m;
    EXPECT_NE(m.find("write " + dir + "/t.policy.toml"), std::string::npos) << m;
  }
  // An explicit policy path (normgate derive: its output table's policy).
  write_policy(dir);
  std::filesystem::rename(dir + "/t.policy.toml", dir + "/out.policy.toml");
  EXPECT_THROW(check_approval_request(o, Backend::cpu), std::invalid_argument);
  EXPECT_NO_THROW(check_approval_request(o, Backend::cpu, dir + "/out.policy.toml"));
  std::filesystem::rename(dir + "/out.policy.toml", dir + "/t.policy.toml");
  EXPECT_NO_THROW(check_approval_request(o, Backend::cpu));
  // The same campaign on the GPU backend is not accepted by this policy.
  try {
    check_approval_request(o, Backend::gpu);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("backend gpu not accepted by the policy minimum (accepts cpu-model; " + dir +
                                         "/t.policy.toml:7)"),
              std::string::npos)
        << e.what();
  }
  // The new-user campaign: --seeds 3x1 --t-per-window 2, no refinement.
  write_policy(dir);
  std::ofstream(dir + "/t.policy.toml", std::ios::trunc)
      << "[minimum]\nseeds = \"3x16\"\nt_per_window = 8\ndense_points = 16\ndense_step = 64\nfresh_factor = 1\n"
         "backends = [\"cpu-model\"]\n";
  o.t_per_window = 2;
  o.dense_points = 0;
  o.fresh_factor = 0;
  try {
    check_approval_request(o, Backend::cpu);
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    const std::string p = dir + "/t.policy.toml";
    for (const std::string& needle :
         {"seeds 3x1 below the policy minimum 3x16 (" + p + ":2)",
          "T points per window 2 below the policy minimum 8 (--t-per-window; " + p + ":3)",
          "no dense refinement (the policy minimum needs 16 points each side, step <= 64; " + p + ":4)",
          "no fresh seeds (the policy minimum needs --fresh-factor >= 1; " + p + ":6)",
          std::string("nothing was run or written")})
      EXPECT_NE(m.find(needle), std::string::npos) << needle << "\n" << m;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/t.approvals.json"));
  std::filesystem::remove_all(dir);
}

TEST(ApprovalPolicy, ApproveRechecksTheResultAndRefusesWindows) {
  const std::string dir = temp_dir("approve");
  const std::string table = copy_table(dir);
  write_policy(dir, "dw_not_worse_than_fp32 = true\n");
  GateOptions o = small_opts(table);
  o.windows = "H=256";  // bwd det H=256 w=fp32 [1, 300]
  GateResult r = run_gate(o);
  ASSERT_TRUE(r.pass());
  ASSERT_EQ(r.windows.size(), 1u);
  const std::string apath = kernels::approvals_path_for(table);

  // A result weaker than the policy (e.g. through the library, not the CLI):
  // refused as a whole, nothing written.
  GateResult weak = r;
  weak.fresh_factor = 0;
  kernels::Approvals a = kernels::load_approvals(apath);
  try {
    (void)approve(a, weak, o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no fresh seeds"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(apath));
  // A refused window with no record to revoke changes nothing: no file.
  r.windows[0].dw_vs_fp32_worst = 1.5;
  ASSERT_EQ(approve(a, r, o).size(), 1u);
  EXPECT_FALSE(std::filesystem::exists(apath));

  // dw not worse than FP32 eager: approved at 0.5 ...
  r.windows[0].dw_vs_fp32_worst = 0.5;
  auto changes = approve(a, r, o);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rfind("approved cpu-model bwd det H=256", 0), 0u) << changes[0];
  ASSERT_EQ(kernels::load_approvals(apath).records.size(), 1u);
  EXPECT_EQ(kernels::load_approvals(apath).records[0].dw_vs_fp32_worst, 0.5);
  // ... refused at 1.5, and the earlier approval of the window revoked.
  r.windows[0].dw_vs_fp32_worst = 1.5;
  changes = approve(a, r, o);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].rfind("refused cpu-model bwd det H=256 w=fp32 form=plain T=1..300 -> bwd_det_chunked: dw "
                             "worse than FP32 eager (dw vs FP32 worst 1.5 > 1)",
                             0),
            0u)
      << changes[0];
  EXPECT_NE(changes[0].find(dir + "/t.policy.toml:8"), std::string::npos) << changes[0];
  EXPECT_NE(changes[0].find("its earlier cpu-model approval is revoked"), std::string::npos) << changes[0];
  EXPECT_TRUE(kernels::load_approvals(apath).records.empty());
  // Refused again: nothing to revoke now, so the file is not written.
  const auto written = std::filesystem::last_write_time(apath);
  std::filesystem::last_write_time(apath, written - std::chrono::hours(1));
  ASSERT_EQ(approve(a, r, o).size(), 1u);
  EXPECT_EQ(std::filesystem::last_write_time(apath), written - std::chrono::hours(1));
  std::filesystem::remove_all(dir);
}

// A record of a wider window survives a later approve of the table that
// splits it; a record of a window the table no longer contains is removed.
TEST(ApprovalPolicy, UpdateKeepsRecordsThatContainTableWindows) {
  const auto t = kernels::load_route_table(test::kSmallTable);
  GateResult r;  // nothing gated
  r.backend = "cpu-model";
  kernels::Approvals a;
  const kernels::Approval wide = wide_record("bwd_det_chunked", "gpu");
  kernels::Approval outside = wide;
  outside.t_hi = 800;  // reaches past the table's windows... but still contains [1, 100]
  kernels::Approval gone = wide;
  gone.H = 128;  // no window of the table
  a.records = {wide, outside, gone};
  const auto changes = update_approvals(a, r, t.routes);
  ASSERT_EQ(a.records.size(), 2u);
  EXPECT_EQ(a.records[0].t_hi, 700);
  EXPECT_EQ(a.records[1].t_hi, 800);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_NE(changes[0].find("removed gpu approval of bwd det H=128"), std::string::npos) << changes[0];
}

// A window that fails inside a wider approved window takes that approval
// (same backend, variant and source) with it: it approved the failing part.
TEST(ApprovalPolicy, FailureInsideAWiderApprovalRevokesIt) {
  const auto t = kernels::load_route_table(test::kSmallTable);
  const kernels::Route& low = t.routes[1];  // bwd det H=64 bf16 plain [1, 100]
  ASSERT_EQ(low.t_hi, 100);
  GateResult r = one_failed_window(low);
  kernels::Approval wide = wide_record("bwd_det_chunked", "cpu-model");
  wide.source_sha256 = std::string(low.variant->source_sha256);
  kernels::Approval gpu = wide;  // another backend: its own evidence
  gpu.backend = "gpu";
  kernels::Approval old = wide;  // another source: stale anyway, left as it is
  old.source_sha256 = std::string(64, 'd');
  kernels::Approvals a;
  a.records = {wide, gpu, old};
  const auto changes = update_approvals(a, r, t.routes);
  ASSERT_EQ(a.records.size(), 2u);
  EXPECT_EQ(a.records[0].backend, "gpu");
  EXPECT_EQ(a.records[1].source_sha256, std::string(64, 'd'));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0], "revoked cpu-model approval of bwd det H=64 w=bf16 form=plain T=1..700 -> bwd_det_chunked "
                        "(the gate failed on bwd det H=64 w=bf16 form=plain T=1..100 inside it)");
  // A passing window leaves the wider record alone.
  r.windows[0].pass = true;
  r.windows[0].route = t.routes[2];  // [101, 700]
  a.records = {wide};
  (void)update_approvals(a, r, t.routes);
  EXPECT_EQ(a.records.size(), 2u);  // the wider one and the new exact one
}

// A failed window also revokes the variant's narrower records that overlap
// it where it failed: records [1, 100] and [101, 700] approve [1, 700]
// together (as parts), so a failure of [1, 700] left the T it failed at
// approved. Without the failing T (none recorded) every overlapping record
// goes; a record of another H or another source stays. (Found by an
// adversarial pass.)
TEST(ApprovalPolicy, AFailureRevokesTheNarrowerRecordsItOverlaps) {
  const auto t = kernels::load_route_table(test::kSmallTable);
  kernels::Route whole = t.routes[1];  // bwd det H=64 bf16 plain, bwd_det_chunked
  whole.t_hi = 700;
  const GateResult r = one_failed_window(whole);
  auto part = [&](int64_t lo, int64_t hi) {
    kernels::Approval x = wide_record("bwd_det_chunked", "cpu-model");
    x.source_sha256 = std::string(whole.variant->source_sha256);
    x.t_lo = lo;
    x.t_hi = hi;
    return x;
  };
  kernels::Approval other_h = part(1, 300);  // the table's bwd det H=256 w=fp32 window
  other_h.H = 256;
  other_h.w = normgate::WDtype::fp32;
  kernels::Approval other_src = part(1, 100);
  other_src.source_sha256 = std::string(64, 'e');
  kernels::Approvals a;
  a.records = {part(1, 100), part(101, 700), other_h, other_src};
  const auto changes = update_approvals(a, r, t.routes);
  ASSERT_EQ(a.records.size(), 2u);
  EXPECT_EQ(a.records[0].H + a.records[1].H, 64 + 256);  // other_h and other_src
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0], "revoked cpu-model approval of bwd det H=64 w=bf16 form=plain T=1..100 -> bwd_det_chunked "
                        "(the gate failed on bwd det H=64 w=bf16 form=plain T=1..700, which overlaps it)");
  EXPECT_EQ(changes[1], "revoked cpu-model approval of bwd det H=64 w=bf16 form=plain T=101..700 -> bwd_det_chunked "
                        "(the gate failed on bwd det H=64 w=bf16 form=plain T=1..700, which overlaps it)");
  // With the failing cases' T known (650 here), only the record holding one
  // goes: [1, 100] held only T the gate passed. (Found by a review: the
  // first version revoked every overlapping record.)
  GateResult at = r;
  at.windows[0].failed_t = {650};
  a.records = {part(1, 100), part(101, 700)};
  const auto some = update_approvals(a, at, t.routes);
  ASSERT_EQ(a.records.size(), 1u);
  EXPECT_EQ(a.records[0].t_hi, 100);
  ASSERT_EQ(some.size(), 1u);
  EXPECT_NE(some[0].find("T=101..700 -> bwd_det_chunked (the gate failed on"), std::string::npos) << some[0];
  // A window the policy refused (no failure) leaves the narrower records.
  GateResult refused = r;
  refused.windows[0].pass = true;
  a.records = {part(1, 100), part(101, 700)};
  (void)update_approvals(a, refused, t.routes, {"below the policy minimum"});
  EXPECT_EQ(a.records.size(), 2u);
}

// Contradictions are applied after every window of the run: a det window
// that fails before a wider nondet window of the same deterministic variant
// passes (one campaign's outputs in both modes) leaves no record of either.
TEST(ApprovalPolicy, AFailureRevokesAWiderRecordWrittenLaterInTheSameRun) {
  const auto t = kernels::load_route_table(test::kSmallTable);
  const kernels::Route& low = t.routes[1];  // bwd det H=64 bf16 plain [1, 100], bwd_det_chunked
  ASSERT_EQ(low.t_hi, 100);
  ASSERT_EQ(low.variant->mode, kernels::Mode::det);
  GateResult r;
  r.backend = "cpu-model";
  WindowResult fail;
  fail.route = low;
  fail.pass = false;
  WindowResult wide;
  wide.route = low;
  wide.route.mode = kernels::Mode::nondet;
  wide.route.t_hi = 700;
  wide.pass = true;
  r.windows = {fail, wide};
  kernels::Approvals a;
  auto changes = update_approvals(a, r, t.routes);
  EXPECT_TRUE(a.records.empty()) << a.records.size();
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0], "approved cpu-model " + wide.route.describe());
  EXPECT_EQ(changes[1], "revoked cpu-model approval of bwd nondet H=64 w=bf16 form=plain T=1..700 -> "
                        "bwd_det_chunked (the gate failed on bwd det H=64 w=bf16 form=plain T=1..100 inside it)");
  // The other order gives the same file.
  r.windows = {wide, fail};
  changes = update_approvals(a, r, t.routes);
  EXPECT_TRUE(a.records.empty()) << a.records.size();
  // Without the failure the wider record stays.
  r.windows = {wide};
  (void)update_approvals(a, r, t.routes);
  EXPECT_EQ(a.records.size(), 1u);
}

// A failure of a variant also revokes the records it vouched for (routes.md
// D23), whatever source of it vouched: its record may have been carried
// since. A record of the other variant's own gate stays.
TEST(ApprovalPolicy, AFailureRevokesTheRecordsTheVariantVouchedFor) {
  const auto t = kernels::load_route_table(test::kSmallTable);
  const kernels::Route& low = t.routes[1];  // bwd det H=64 bf16 plain [1, 100], bwd_det_chunked
  ASSERT_EQ(std::string(low.variant->name), "bwd_det_chunked");
  GateResult r = one_failed_window(low);
  kernels::Approval vouched = wide_record("bwd_det_wreg", "cpu-model");
  vouched.source_sha256 = std::string(kernels::variant("bwd_det_wreg").source_sha256);
  vouched.has_vouch = true;
  vouched.vouched.variant = "bwd_det_chunked";
  vouched.vouched.source_sha256 = std::string(low.variant->source_sha256);
  kernels::Approval older = vouched;  // vouched for by an earlier source of the voucher (since carried)
  older.vouched.source_sha256 = std::string(64, 'e');
  older.t_hi = 100;
  kernels::Approval other = vouched;  // vouched for by another variant: not this failure's
  other.vouched.variant = "bwd_det_onepass";
  kernels::Approval plain = vouched;  // bwd_det_wreg's own gate record: its own evidence
  plain.has_vouch = false;
  plain.t_hi = 100;
  kernels::Approvals a;
  a.records = {vouched, older, other, plain};
  const auto changes = update_approvals(a, r, t.routes);
  ASSERT_EQ(a.records.size(), 2u);
  EXPECT_EQ(a.records[0].vouched.variant, "bwd_det_onepass");
  EXPECT_FALSE(a.records[1].has_vouch);
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0], "revoked cpu-model approval of bwd det H=64 w=bf16 form=plain T=1..700 -> bwd_det_wreg "
                        "(the gate failed on bwd det H=64 w=bf16 form=plain T=1..100 inside it)");
  EXPECT_EQ(changes[1], "revoked cpu-model approval of bwd det H=64 w=bf16 form=plain T=1..100 -> bwd_det_wreg "
                        "(the gate failed on bwd det H=64 w=bf16 form=plain T=1..100 inside it)");
}

}  // namespace
