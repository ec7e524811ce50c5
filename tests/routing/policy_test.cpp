// tests/routing/policy_test.cpp: the approval policy file (policy.h), the
// campaign strength of approval records (routing.h, Approval), and approval
// by containment (approval_status).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "normgate/kernels/registry.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/routing.h"

namespace {

using namespace normgate;
using namespace normgate::kernels;

const std::string kSrc = NORMGATE_SOURCE_DIR;

// A valid policy; line numbers are fixed (tests name them).
const std::string kMinimum =
    "[minimum]\n"                  // 1
    "seeds = \"3x16\"\n"           // 2
    "t_per_window = 8\n"           // 3
    "dense_points = 16\n"          // 4
    "dense_step = 64\n"            // 5
    "fresh_factor = 1\n"           // 6
    "backends = [\"gpu\"]\n";      // 7

std::string message_of(const std::string& text) {
  try {
    (void)parse_policy(text, "p.toml");
  } catch (const PolicyError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Policy, ParsesTheCommittedPolicies) {
  const auto p = load_policy(kSrc + "/routes/sm90a.policy.toml");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->minimum.seeds, "3x16");
  EXPECT_EQ(p->minimum.families, (std::vector<std::string>{"normal", "llm", "cancel"}));
  EXPECT_EQ(p->minimum.seeds_per_family, 16u);
  EXPECT_EQ(p->minimum.dense_points, 16);
  EXPECT_EQ(p->minimum.dense_step, 64);
  EXPECT_EQ(p->minimum.fresh_factor, 1);
  EXPECT_EQ(p->minimum.backends, (std::vector<std::string>{"gpu"}));
  EXPECT_FALSE(p->minimum.dw_not_worse_than_fp32);
  ASSERT_TRUE(p->target.has_value());
  EXPECT_EQ(p->target->seeds_per_family, 120u);
  EXPECT_EQ(p->target->name, "seed PR standard");
  EXPECT_TRUE(p->target->dw_not_worse_than_fp32);
  // Each policy file sits beside its table, at policy_path_for's path.
  EXPECT_EQ(policy_path_for("routes/sm90a.toml"), "routes/sm90a.policy.toml");
  EXPECT_EQ(policy_path_for("x/t.tbl"), "x/t.tbl.policy.toml");
  EXPECT_EQ(policy_path_for_approvals("routes/sm90a.approvals.json"), "routes/sm90a.policy.toml");
  EXPECT_EQ(policy_path_for_approvals("x/a.json"), "x/a.json.policy.toml");
  for (const char* t : {"/routes/sm90a-ci.toml", "/tests/data/routes/small.toml"})
    EXPECT_TRUE(load_policy(policy_path_for(kSrc + t)).has_value()) << t;
  // No file: no policy (not an error).
  EXPECT_FALSE(load_policy(kSrc + "/routes/no-such.policy.toml").has_value());
}

TEST(Policy, ErrorsNameFileLineAndKey) {
  struct Bad {
    std::string text, where, needle;
  };
  const Bad cases[] = {
      {"[minimum]\nseeds = \"3x16\"\n", "p.toml:1:", "misses key 't_per_window'"},
      {kMinimum + "colour = 1\n", "p.toml:8:", "[minimum] unknown key 'colour'"},
      {kMinimum + "[extra]\n", "p.toml:8:", "unknown top-level key 'extra'"},
      {"description = \"x\"\n", "p.toml:1:", "missing section [minimum]"},
      {"[minimum]\nseeds = \"4x16\"\n", "p.toml:2:", "[minimum] key 'seeds'"},
      {"[minimum]\nseeds = 16\n", "p.toml:2:", "'seeds' must be a string"},
      {"[minimum]\nseeds = \"3x16\"\nt_per_window = 1\n", "p.toml:3:", "'t_per_window' = 1 out of range 2.."},
      {"[minimum]\nseeds = \"3x16\"\nt_per_window = \"8\"\n", "p.toml:3:", "'t_per_window' must be an integer"},
      {"[minimum]\nseeds = \"3x16\"\nt_per_window = 8\ndense_points = 4\nfresh_factor = 1\nbackends = [\"gpu\"]\n",
       "p.toml:1:", "misses key 'dense_step'"},
      {"[minimum]\nseeds = \"3x16\"\nt_per_window = 8\ndense_points = 0\nfresh_factor = 1\nbackends = [\"tpu\"]\n",
       "p.toml:6:", "'backends' holds an unknown backend"},
      {"[minimum]\nseeds = \"3x16\"\nt_per_window = 8\ndense_points = 0\nfresh_factor = 1\nbackends = []\n",
       "p.toml:6:", "'backends' must be a non-empty list"},
      {kMinimum + "dense_seeds = \"some\"\n", "p.toml:8:", "'dense_seeds' must be \"worst\" or \"all\""},
      {kMinimum + "dw_not_worse_than_fp32 = 1\n", "p.toml:8:", "'dw_not_worse_than_fp32' must be true or false"},
      {kMinimum + "[target]\nseeds = \"3x120\"\n", "p.toml:8:", "[target] misses key 't_per_window'"},
      {"[minimum\n", "p.toml:1:", "TOML syntax error"},
  };
  for (const auto& c : cases) {
    const std::string m = message_of(c.text);
    EXPECT_EQ(m.rfind(c.where, 0), 0u) << c.text << "\n-> " << m;
    EXPECT_NE(m.find(c.needle), std::string::npos) << c.text << "\n-> " << m;
  }
  // A folder where the file should be.
  const std::string dir = std::string(NORMGATE_BINARY_DIR) + "/policy_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir + "/t.policy.toml");
  EXPECT_THROW((void)load_policy(dir + "/t.policy.toml"), PolicyError);
  // A FIFO beside a table (the open blocked: `normgate routes` hung) and a
  // device (read without end) are refused unopened, naming the path.
  ASSERT_EQ(::mkfifo((dir + "/f.policy.toml").c_str(), 0600), 0);
  for (const std::string& p : {dir + "/f.policy.toml", std::string("/dev/zero")}) {
    try {
      (void)load_policy(p);
      ADD_FAILURE() << p << " was read";
    } catch (const PolicyError& e) {
      EXPECT_NE(std::string(e.what()).find(p + ": cannot read approval policy: not a regular file"), std::string::npos)
          << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

CampaignStrength strong() {
  return {.seed_set = "3x16", .t_per_window = 8, .dense_points = 16, .dense_step = 64, .fresh_factor = 2,
          .backend = "gpu"};
}

TEST(Policy, ShortfallsNameEachMissingRequirement) {
  const ApprovalPolicy p = parse_policy(kMinimum, "routes/x.policy.toml");
  const PolicyLevel& m = p.minimum;
  EXPECT_TRUE(m.shortfalls(strong()).empty());
  // More seeds, another range of the same size, a finer dense grid: still met.
  CampaignStrength c = strong();
  c.seed_set = "seeds=200..215";
  c.dense_step = 32;
  c.dense_points = 40;
  EXPECT_TRUE(m.shortfalls(c).empty());
  // The new user's campaign of the issue: every item named with FILE:LINE.
  c = {.seed_set = "3x1", .t_per_window = 2, .dense_points = 0, .dense_step = 64, .fresh_factor = 0,
       .backend = "cpu-model"};
  const auto s = m.shortfalls(c);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0], "seeds 3x1 below the policy minimum 3x16 (routes/x.policy.toml:2): 1 seed per family, the "
                  "policy needs 16");
  EXPECT_EQ(s[1], "T points per window 2 below the policy minimum 8 (--t-per-window; routes/x.policy.toml:3)");
  EXPECT_EQ(s[2], "no dense refinement (the policy minimum needs 16 points each side, step <= 64; "
                  "routes/x.policy.toml:4)");
  EXPECT_EQ(s[3], "no fresh seeds (the policy minimum needs --fresh-factor >= 1; routes/x.policy.toml:6)");
  EXPECT_EQ(s[4], "backend cpu-model not accepted by the policy minimum (accepts gpu; routes/x.policy.toml:7)");
  // Partly there: a coarse or short dense grid, one family only.
  c = strong();
  c.dense_points = 8;
  c.dense_step = 128;
  c.seed_set = "normal:0..99";
  const auto t = m.shortfalls(c);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0], "seeds normal:0..99 lack families llm, cancel of the policy minimum 3x16 (routes/x.policy.toml:2)");
  EXPECT_NE(t[1].find("dense refinement 8 points each side below the policy minimum 16"), std::string::npos) << t[1];
  EXPECT_NE(t[2].find("dense step 128 above the policy minimum's maximum 64"), std::string::npos) << t[2];
  // dense_seeds = "all" demands --dense-seeds all.
  const ApprovalPolicy all = parse_policy(kMinimum + "dense_seeds = \"all\"\n", "p.toml");
  ASSERT_EQ(all.minimum.shortfalls(strong()).size(), 1u);
  EXPECT_NE(all.minimum.shortfalls(strong())[0].find("--dense-seeds all; p.toml:8"), std::string::npos);
  c = strong();
  c.dense_all_seeds = true;
  EXPECT_TRUE(all.minimum.shortfalls(c).empty());
}

TEST(Policy, DwNotWorseThanFp32AppliesToFp32BackwardWindowsOnly) {
  const ApprovalPolicy p = parse_policy(kMinimum + "dw_not_worse_than_fp32 = true\n", "p.toml");
  const PolicyLevel& m = p.minimum;
  EXPECT_EQ(m.window_shortfall(Op::bwd, WDtype::fp32, 1.0), "");  // equal is not worse
  EXPECT_EQ(m.window_shortfall(Op::bwd, WDtype::bf16, 1.74), "");
  EXPECT_EQ(m.window_shortfall(Op::fwd, WDtype::fp32, std::nan("")), "");
  const std::string s = m.window_shortfall(Op::bwd, WDtype::fp32, 1.74);
  EXPECT_NE(s.find("dw vs FP32 worst 1.74 > 1"), std::string::npos) << s;
  EXPECT_NE(s.find("p.toml:8"), std::string::npos) << s;
  EXPECT_NE(m.window_shortfall(Op::bwd, WDtype::fp32, std::nan("")).find("no FP32 baseline"), std::string::npos);
  EXPECT_NE(m.window_shortfall(Op::bwd, WDtype::fp32, INFINITY), "");
  // Off (the default): nothing is refused.
  EXPECT_EQ(parse_policy(kMinimum, "p.toml").minimum.window_shortfall(Op::bwd, WDtype::fp32, 1.74), "");
}

// An approval record of window (bwd det H=2048 bf16 plain) [lo, hi].
Approval record(int64_t lo, int64_t hi, const std::string& variant_name = "bwd_det_chunked") {
  Approval a;
  a.op = Op::bwd;
  a.mode = Mode::det;
  a.H = 2048;
  a.w = WDtype::bf16;
  a.form = Form::plain;
  a.t_lo = lo;
  a.t_hi = hi;
  a.variant = variant_name;
  a.source_sha256 = std::string(variant(variant_name).source_sha256);
  a.backend = "gpu";
  a.gpu = "NVIDIA H200";
  a.driver = "580.159.04";
  a.cuda = "13.0";
  a.seed_set = "3x16";
  a.t_points = {lo, hi};
  a.cases = 100;
  a.max_err_tol = {{"y", 0.3}, {"rstd", 0.01}, {"dx", 0.4}, {"dw", 0.2}};
  a.worst_case = "H=2048,T=" + std::to_string(lo) + ",w=bf16,form=plain,family=cancel,seed=0";
  a.date = "2026-12-01T00:00:00Z";
  a.normgate_commit = "abc";
  a.normgate_version = "0.2.0";
  return a;
}

Approval with_strength(Approval a) {
  a.has_strength = true;
  a.t_per_window = 8;
  a.dense_points = 16;
  a.dense_step = 64;
  a.fresh_factor = 2;
  a.fresh_seeds = "cancel:16..47";
  a.oracle = "auto";
  a.dw_vs_fp32_worst = 0.5;
  return a;
}

TEST(Approvals, StrengthRoundTripsAndOldRecordsStillLoad) {
  const std::string dir = std::string(NORMGATE_BINARY_DIR) + "/policy_test_rt_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  Approvals a;
  a.path = dir + "/t.approvals.json";
  a.records.push_back(record(1, 100));                  // old: no strength
  a.records.push_back(with_strength(record(101, 200)));
  Approval inf = with_strength(record(201, 300));
  inf.dw_vs_fp32_worst = std::numeric_limits<double>::infinity();
  a.records.push_back(inf);
  save_approvals(a);
  const std::string text = approvals_to_json_text(a);
  // The old record is written without strength fields, the others with them.
  auto count = [&text](const std::string& key) {
    int n = 0;
    for (size_t k = text.find(key); k != std::string::npos; k = text.find(key, k + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("\"t_per_window\": 8"), 2);
  EXPECT_EQ(count("\"dw_vs_fp32_worst\""), 2);
  EXPECT_EQ(count("\"dw_vs_fp32_worst\": \"inf\""), 1);
  EXPECT_EQ(count("\"dense_seeds\": \"worst\""), 2);
  const Approvals b = load_approvals(a.path);
  ASSERT_EQ(b.records.size(), 3u);
  EXPECT_EQ(approvals_to_json_text(b), text);
  EXPECT_FALSE(b.records[0].has_strength);
  EXPECT_TRUE(b.records[1].has_strength);
  EXPECT_EQ(b.records[1].fresh_seeds, "cancel:16..47");
  EXPECT_EQ(b.records[1].dense_step, 64);
  EXPECT_EQ(b.records[1].dw_vs_fp32_worst, 0.5);
  EXPECT_TRUE(std::isinf(b.records[2].dw_vs_fp32_worst));
  // describe_strength says what ran, or that it was not recorded.
  EXPECT_EQ(describe_strength(b.records[1]),
            "seeds 3x16, T points 2 (t-per-window 8), dense 16 x 64 (worst seed), fresh x2 (cancel:16..47), "
            "oracle auto, backend gpu, dw vs FP32 0.5");
  EXPECT_EQ(describe_strength(b.records[0]), "seeds 3x16, T points 2, backend gpu; campaign strength not recorded");
  // A policy check of the old record says it cannot be checked.
  const ApprovalPolicy p = parse_policy(kMinimum, "p.toml");
  ASSERT_EQ(p.minimum.record_shortfalls(b.records[0]).size(), 1u);
  EXPECT_NE(p.minimum.record_shortfalls(b.records[0])[0].find("not recorded"), std::string::npos);
  EXPECT_TRUE(p.minimum.record_shortfalls(b.records[1]).empty());

  // Strength half present: the record is INVALID, naming it and the missing field.
  {
    std::string bad = text;
    const auto k = bad.find("      \"fresh_seeds\": \"cancel:16..47\",\n");
    ASSERT_NE(k, std::string::npos);
    bad.erase(k, std::string("      \"fresh_seeds\": \"cancel:16..47\",\n").size());
    std::ofstream(a.path) << bad;
  }
  {
    const Approvals c = load_approvals(a.path);
    ASSERT_EQ(c.records.size(), 3u);
    EXPECT_EQ(c.records[1].invalid, "record 1: missing field 'fresh_seeds'");
    EXPECT_EQ(invalid_count(c), 1u);
  }
  std::filesystem::remove_all(dir);
}

// A route of the table below: bwd det H=2048 bf16 plain, [lo, hi].
const char* kSplit =
    "arch = \"sm90a\"\nroute = [\n"
    "  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 4096], variant = "
    "\"bwd_det_chunked\" },\n"
    "  { op = \"bwd\", mode = \"det\", H = 2048, w = \"bf16\", form = \"plain\", T = [4097, 131072], variant = "
    "\"bwd_det_chunked\" },\n"
    "  { op = \"bwd\", mode = \"det\", H = 4096, w = \"bf16\", form = \"plain\", T = [1, 4096], variant = "
    "\"bwd_det_chunked\" },\n"
    "]\n";

TEST(ApprovalContainment, AWiderApprovedWindowApprovesItsParts) {
  const RouteTable t = parse_route_table(kSplit, "t.toml");
  const Route& low = t.routes[0];    // [1, 4096]
  const Route& high = t.routes[1];   // [4097, 131072]
  const Route& other_h = t.routes[2];
  Approvals a;
  a.records.push_back(record(1, 131072));  // the whole range, as today's tables approve it
  // Contained windows are current, and say of what wider window.
  for (const Route* r : {&low, &high}) {
    const ApprovalStatus s = approval_status(*r, a, false);
    EXPECT_EQ(s.state, ApprovalState::current) << r->describe();
    EXPECT_TRUE(s.wider);
    EXPECT_EQ(s.record, &a.records[0]);
    EXPECT_NE(s.detail.find("approved as part of T=1..131072 (gpu gate of"), std::string::npos) << s.detail;
  }
  // Another H is not contained.
  EXPECT_EQ(approval_status(other_h, a, false).state, ApprovalState::missing);
  // A record that covers only part of the route's window does not approve it.
  Approvals part;
  part.records.push_back(record(1, 100000));
  EXPECT_EQ(approval_status(low, part, false).state, ApprovalState::current);
  EXPECT_EQ(approval_status(high, part, false).state, ApprovalState::missing);
  Approvals shifted;
  shifted.records.push_back(record(2, 131072));  // reaches outside at the low end
  EXPECT_EQ(approval_status(low, shifted, false).state, ApprovalState::missing);
  // Another mode is not contained either.
  Approvals nondet;
  nondet.records.push_back(record(1, 131072));
  nondet.records[0].mode = Mode::nondet;
  EXPECT_EQ(approval_status(low, nondet, false).state, ApprovalState::missing);
  // A stale wider record is stale, naming the wider window.
  Approvals stale;
  stale.records.push_back(record(1, 131072));
  stale.records[0].source_sha256 = std::string(64, 'b');
  const ApprovalStatus st = approval_status(high, stale, false);
  EXPECT_EQ(st.state, ApprovalState::stale);
  EXPECT_NE(st.detail.find("bbbbbbbbbbbb as part of T=1..131072"), std::string::npos) << st.detail;
  // A wider record of another variant: missing, saying which variant it approves.
  Approvals other;
  other.records.push_back(record(1, 131072, "bwd_nondet_atomic"));
  const ApprovalStatus ov = approval_status(low, other, false);
  EXPECT_EQ(ov.state, ApprovalState::missing);
  EXPECT_NE(ov.detail.find("(as part of T=1..131072) is for variant bwd_nondet_atomic"), std::string::npos)
      << ov.detail;
  // The dispatcher serves a call inside the contained window.
  const Dispatcher disp(t, a);
  const Decision d = disp.pick({Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain, 5000});
  EXPECT_EQ(d.route, &disp.table().routes[1]);
  EXPECT_EQ(d.approval.state, ApprovalState::current);
  EXPECT_TRUE(d.approval.wider);
}

// The det window's record of a deterministic variant answers for the nondet
// window of the same group and T (the gate runs one campaign for both; the
// variant's bits do not depend on the mode: docs/perf/routes.md D21); a
// nondet record never answers for a det window, nor a det-mode record of a
// nondet variant for anything.
TEST(ApprovalContainment, ADetRecordAnswersForTheNondetWindowOfADetVariant) {
  const RouteTable t = parse_route_table(
      "arch = \"sm90a\"\nroute = [\n"
      "  { op = \"bwd\", mode = \"nondet\", H = 2048, w = \"bf16\", form = \"plain\", T = [1, 4096], variant = "
      "\"bwd_det_chunked\" },\n"
      "  { op = \"bwd\", mode = \"nondet\", H = 2048, w = \"bf16\", form = \"plain\", T = [4097, 131072], variant = "
      "\"bwd_nondet_atomic\" },\n"
      "]\n",
      "t.toml");
  const Route& det_variant = t.routes[0];
  const Route& atomic = t.routes[1];
  Approvals a;
  a.records.push_back(record(1, 131072));  // det mode, bwd_det_chunked
  ApprovalStatus s = approval_status(det_variant, a, false);
  EXPECT_EQ(s.state, ApprovalState::current);
  EXPECT_TRUE(s.wider);
  EXPECT_NE(s.detail.find("as part of T=1..131072"), std::string::npos) << s.detail;
  EXPECT_NE(s.detail.find("the det window's record"), std::string::npos) << s.detail;
  EXPECT_TRUE(uncovered_spans(det_variant, a, "gpu").empty());
  // The same T: not "wider", though the record's mode is det.
  Approvals exact;
  exact.records.push_back(record(1, 4096));
  s = approval_status(det_variant, exact, false);
  EXPECT_EQ(s.state, ApprovalState::current);
  EXPECT_FALSE(s.wider);
  EXPECT_EQ(s.detail.find("as part of"), std::string::npos) << s.detail;
  // A nondet record of the same window is preferred to the det one.
  exact.records.push_back(record(1, 4096));
  exact.records[1].mode = Mode::nondet;
  s = approval_status(det_variant, exact, false);
  EXPECT_EQ(s.record, &exact.records[1]);
  EXPECT_EQ(s.detail.find("the det window's record"), std::string::npos) << s.detail;
  // Parts of both modes cover the window together; a gap is still a gap.
  Approvals parts;
  parts.records.push_back(record(1, 2048));
  parts.records.push_back(record(2049, 4096));
  parts.records[1].mode = Mode::nondet;
  EXPECT_EQ(approval_status(det_variant, parts, false).state, ApprovalState::current);
  parts.records[1].t_lo = 3000;
  EXPECT_EQ(approval_status(det_variant, parts, false).state, ApprovalState::missing);
  EXPECT_EQ(uncovered_spans(det_variant, parts, "gpu"), (std::vector<std::pair<int64_t, int64_t>>{{2049, 2999}}));
  // A det record of the old source is stale, not current.
  Approvals stale;
  stale.records.push_back(record(1, 131072));
  stale.records[0].source_sha256 = std::string(64, 'b');
  EXPECT_EQ(approval_status(det_variant, stale, false).state, ApprovalState::stale);
  // A nondet variant: a det-mode record of it answers for nothing.
  Approvals of_atomic;
  of_atomic.records.push_back(record(1, 131072, "bwd_nondet_atomic"));
  EXPECT_EQ(approval_status(atomic, of_atomic, false).state, ApprovalState::missing);
  EXPECT_EQ(uncovered_spans(atomic, of_atomic, "gpu"), (std::vector<std::pair<int64_t, int64_t>>{{4097, 131072}}));
  // Never the other way: the nondet record of a det variant does not answer
  // for its det window.
  const RouteTable d = parse_route_table(kSplit, "d.toml");
  Approvals nondet;
  nondet.records.push_back(record(1, 131072));
  nondet.records[0].mode = Mode::nondet;
  EXPECT_EQ(approval_status(d.routes[0], nondet, false).state, ApprovalState::missing);
  EXPECT_EQ(uncovered_spans(d.routes[0], nondet, "gpu"), (std::vector<std::pair<int64_t, int64_t>>{{1, 4096}}));
  // The dispatcher serves a nondet call on the det record.
  const Dispatcher disp(t, a);
  const Decision dc = disp.pick({Op::bwd, Mode::nondet, 2048, WDtype::bf16, Form::plain, 100});
  EXPECT_EQ(dc.route, &disp.table().routes[0]);
  EXPECT_EQ(dc.approval.state, ApprovalState::current);
}

// A window approved as parts meets a policy level only where every part
// does: status_shortfalls reads each part, not the first alone.
TEST(ApprovalContainment, EveryPartMeetsThePolicyOrTheWindowDoesNot) {
  const RouteTable t = parse_route_table(kSplit, "t.toml");
  const Route& low = t.routes[0];  // [1, 4096]
  const ApprovalPolicy p = parse_policy(kMinimum, "p.toml");
  Approvals a;
  a.records.push_back(with_strength(record(1, 2048)));
  a.records.push_back(with_strength(record(2049, 4096)));
  ApprovalStatus s = approval_status(low, a, false);
  ASSERT_EQ(s.state, ApprovalState::current);
  ASSERT_EQ(s.parts.size(), 2u);
  EXPECT_TRUE(p.minimum.status_shortfalls(s).empty());
  a.records[1].seed_set = "3x8";  // the second part below the minimum's 3x16
  s = approval_status(low, a, false);
  ASSERT_EQ(s.parts.size(), 2u);
  EXPECT_TRUE(p.minimum.record_shortfalls(*s.parts.front()).empty());
  const auto miss = p.minimum.status_shortfalls(s);
  ASSERT_EQ(miss.size(), 1u);
  EXPECT_NE(miss[0].find("seeds 3x8"), std::string::npos) << miss[0];
  // One record: its own shortfalls; no record: none.
  Approvals one;
  one.records.push_back(with_strength(record(1, 4096)));
  one.records[0].seed_set = "3x8";
  EXPECT_EQ(p.minimum.status_shortfalls(approval_status(low, one, false)).size(), 1u);
  EXPECT_TRUE(p.minimum.status_shortfalls(approval_status(low, Approvals{}, false)).empty());
}

TEST(ApprovalContainment, ExactWindowPreferredThenTheNarrowest) {
  const RouteTable t = parse_route_table(kSplit, "t.toml");
  const Route& low = t.routes[0];
  Approvals a;
  a.records.push_back(record(1, 131072));
  a.records.push_back(record(1, 8192));
  a.records.push_back(record(1, 4096));
  a.records[2].date = "exact";
  ApprovalStatus s = approval_status(low, a, false);
  EXPECT_EQ(s.record, &a.records[2]);
  EXPECT_FALSE(s.wider);
  EXPECT_EQ(s.detail.find("as part of"), std::string::npos) << s.detail;
  a.records.pop_back();
  s = approval_status(low, a, false);
  EXPECT_EQ(s.record, &a.records[1]);  // the narrowest containing window
  EXPECT_NE(s.detail.find("as part of T=1..8192"), std::string::npos) << s.detail;
  // A current wider GPU record beats an exact stale one.
  Approvals mixed;
  mixed.records.push_back(record(1, 4096));
  mixed.records[0].source_sha256 = std::string(64, 'c');
  mixed.records.push_back(record(1, 131072));
  s = approval_status(low, mixed, false);
  EXPECT_EQ(s.state, ApprovalState::current);
  EXPECT_EQ(s.record, &mixed.records[1]);
}

TEST(ApprovalContainment, NeighbouringRecordsCoverTogetherWithoutAGap) {
  // Route [4097, 131072] across today's split at 65536: the two records
  // cover it together.
  const RouteTable t = parse_route_table(kSplit, "t.toml");
  const Route& high = t.routes[1];
  Approvals a;
  a.records.push_back(record(65537, 131072));
  a.records.push_back(record(1, 65536));
  ApprovalStatus s = approval_status(high, a, false);
  EXPECT_EQ(s.state, ApprovalState::current);
  ASSERT_EQ(s.parts.size(), 2u);
  EXPECT_EQ(s.parts[0], &a.records[1]);  // T order
  EXPECT_EQ(s.record, &a.records[1]);
  EXPECT_NE(s.detail.find("approved as parts T=1..65536 + T=65537..131072"), std::string::npos) << s.detail;
  // A gap of one T: not covered.
  a.records[1].t_hi = 65535;
  s = approval_status(high, a, false);
  EXPECT_EQ(s.state, ApprovalState::missing) << s.detail;
  EXPECT_TRUE(s.parts.empty());
  // A part of another source hash does not count.
  a.records[1].t_hi = 65536;
  a.records[1].source_sha256 = std::string(64, 'd');
  EXPECT_NE(approval_status(high, a, false).state, ApprovalState::current);
  // cpu-model parts count only when accepted, and never mixed with gpu ones.
  Approvals c;
  c.records.push_back(record(1, 65536));
  c.records.push_back(record(65537, 131072));
  c.records[1].backend = "cpu-model";
  EXPECT_NE(approval_status(high, c, true).state, ApprovalState::current);
  c.records[0].backend = "cpu-model";
  EXPECT_EQ(approval_status(high, c, true).state, ApprovalState::current);
  EXPECT_NE(approval_status(high, c, false).state, ApprovalState::current);
}

}  // namespace
