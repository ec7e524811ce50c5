// tests/gate/mutation_test.cpp: the mutation score (gate/mutation.h) and the
// conditioning headroom and kernel margins of the gate's reports. The CI
// assertion of issue 34: the default family set kills every negative control
// on the CPU models, and no real variant fails it.
#include "normgate/gate/mutation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/gate/gate.h"
#include "normgate/kernels/registry.h"
#include "gate/gate_test_util.h"

namespace {

using namespace normgate;
using namespace normgate::validators;

const MutationResult& default_score() {
  static const MutationResult r = [] {
    MutationOptions o;
    o.expect_fail = {"bwd_fp32_blocked"};  // accuracy for speed: rejected on cancel, as the gate must
    return run_mutation(o);
  }();
  return r;
}

const MutationRow& row(const std::string& v) {
  const auto& rows = default_score().rows;
  const auto it = std::find_if(rows.begin(), rows.end(), [&](const MutationRow& r) { return r.variant == v; });
  if (it == rows.end()) throw std::runtime_error("no row " + v);
  return *it;
}

// Which points kill a variant ("" when none).
std::vector<std::string> killers(const std::string& v) {
  std::vector<std::string> out;
  const MutationRow& r = row(v);
  for (size_t i = 0; i < r.cells.size(); ++i)
    if (r.cells[i] == 'X') out.push_back(default_score().points[i]);
  return out;
}

bool killed_by(const std::string& v, const std::string& point) {
  const auto k = killers(v);
  return std::find(k.begin(), k.end(), point) != k.end();
}

TEST(Mutation, DefaultFamiliesKillEveryControlAndNoRealVariantFails) {
  const MutationResult& r = default_score();
  EXPECT_TRUE(r.survivors().empty()) << format_mutation(r);
  EXPECT_TRUE(r.real_failures().empty()) << format_mutation(r);
  EXPECT_TRUE(r.pass()) << format_mutation(r);
  // Every registered control is a row, and it ran somewhere.
  int controls = 0;
  for (const auto& v : kernels::variants())
    if (v.control) {
      ++controls;
      EXPECT_GT(row(std::string(v.name)).cases, 0) << v.name;
    }
  EXPECT_EQ(controls, 12);
  EXPECT_EQ(r.points.size(), 9u);
  // A real variant no default shape reaches (bwd_det_wide serves H =
  // 4097..6144) ran no case: the verdict line says so, and names no variant
  // that did run.
  const std::string text = format_mutation(r);
  EXPECT_EQ(row("bwd_det_wide").cases, 0);
  EXPECT_NE(text.find("; not run (no case of these shapes applies): bwd_det_wide"), std::string::npos) << text;
  EXPECT_EQ(text.find("not run (no case of these shapes applies): bwd_det_chunked"), std::string::npos) << text;
  std::printf("%s", text.c_str());
}

// The eps classes are invisible to the seed's three families (rows of mean
// square ~1) and killed by epsnear: the blind spot the family closes.
TEST(Mutation, EpsClassesNeedTheEpsFamily) {
  for (const char* c : {"ctl_eps_outside_sqrt", "ctl_eps_dropped", "ctl_eps_bf16"}) {
    EXPECT_FALSE(killed_by(c, "normal")) << c;
    EXPECT_FALSE(killed_by(c, "llm")) << c;
    EXPECT_FALSE(killed_by(c, "cancel")) << c;
    EXPECT_TRUE(killed_by(c, "epsnear")) << c;
  }
  // eps = 2^-23 is exact in BF16: rounding it changes nothing there.
  EXPECT_FALSE(killed_by("ctl_eps_bf16", "epsnear,eps=1.1920928955078125e-07"));
  EXPECT_TRUE(killed_by("ctl_eps_bf16", "epsnear,eps=1e-05"));
  EXPECT_TRUE(killed_by("ctl_eps_dropped", "epsnear,eps=1.1920928955078125e-07"));
}

// The FP32 column sum fails cancel from some kappa on: the sweep shows where.
TEST(Mutation, ConditioningHeadroom) {
  for (const char* v : {"bwd_det_chunked", "bwd_nondet_atomic", "bwd_det_onepass"})
    EXPECT_EQ(row(v).kappa_headroom, 1e8) << v;  // every level of the sweep passes
  const double blocked = row("bwd_fp32_blocked").kappa_headroom;
  EXPECT_GE(blocked, 0);
  EXPECT_LT(blocked, 1e8);  // fails at the default kappa, passes below
  EXPECT_TRUE(row("bwd_fp32_blocked").expect_fail);
  EXPECT_TRUE(killed_by("ctl_fp32_seq", "cancel"));
  EXPECT_EQ(row("ctl_fp32_seq").kappa_headroom < 1e8, true);
  // A fault outside dw's conditioning either fails every level (headroom below
  // the lowest) or none: cancel's rows all have one mean square, so heads
  // sharing statistics changes nothing there.
  EXPECT_EQ(row("ctl_warp64_dw").kappa_headroom, 0);
  EXPECT_EQ(row("ctl_heads_shared_stats").kappa_headroom, 1e8);
  EXPECT_FALSE(killed_by("ctl_heads_shared_stats", "cancel"));
  EXPECT_EQ(format_headroom(0), "<100");
  EXPECT_EQ(format_headroom(-1), "none");
  EXPECT_EQ(format_headroom(1e6), "1e+06");
}

TEST(Mutation, ShapeAndFormControlsRunOnlyWhereTheyApply) {
  // res: one shape of three; heads: one of three. '-' marks a point with no applicable case.
  EXPECT_EQ(row("ctl_res_grad_early").cases, 9);
  EXPECT_EQ(row("ctl_heads_dw_mixed").cases, 9);
  EXPECT_EQ(row("ctl_rstd_bf16").cases, 27);
  const nlohmann::json j = to_json(default_score());
  EXPECT_EQ(j["format"], kMutationFormat);
  EXPECT_TRUE(j["pass"].get<bool>());
  for (const auto& r : j["rows"]) {
    if (r["control"].get<bool>()) {
      EXPECT_FALSE(r["killed_by"].empty()) << r.dump();
    }
  }
}

TEST(Mutation, BadOptionsAreRefusedBeforeWork) {
  MutationOptions o;
  o.expect_fail = {"ctl_fp32_seq"};
  EXPECT_THROW(run_mutation(o), std::invalid_argument);
  o.expect_fail = {"bwd_fast"};
  EXPECT_THROW(run_mutation(o), std::invalid_argument);
  o.expect_fail.clear();
  o.seeds = "4x1";
  EXPECT_THROW(run_mutation(o), std::invalid_argument);
  o.seeds = "5x1";
  o.shapes.clear();
  EXPECT_THROW(run_mutation(o), std::invalid_argument);
}

// The gate's reports: each window's conditioning headroom and, per output,
// the kernel's excess over the forced part.
// tests/data/routes/headroom.toml's two windows (bwd_det_chunked, then
// bwd_fp32_blocked), gated on the grid alone at two T.
GateResult headroom_gate(const std::string& seeds) {
  GateOptions o = test::grid_only_opts(std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/headroom.toml");
  o.seeds = seeds;
  o.t_per_window = 2;
  return run_gate(o);
}

TEST(GateHeadroom, ReportsShowHeadroomAndKernelMargins) {
  const GateResult r = headroom_gate("5x1");
  ASSERT_EQ(r.windows.size(), 2u);
  EXPECT_TRUE(r.windows[0].pass);
  EXPECT_EQ(r.windows[0].kappa_headroom, 1e8);
  EXPECT_FALSE(r.windows[1].pass);
  EXPECT_LT(r.windows[1].kappa_headroom, 1e8);
  // The families list points, cancel once per kappa.
  std::map<std::string, int64_t> fam;
  for (const auto& f : r.windows[0].families) fam[f.family] = f.cases;
  EXPECT_EQ(fam.size(), 9u);
  EXPECT_EQ(fam["cancel,kappa=10000"], fam["normal"]);  // every point at every grid T
  EXPECT_GT(fam["normal"], 0);
  const nlohmann::json j = gate_to_json(r);
  EXPECT_EQ(j["format"], "normgate-gate-report/2");
  EXPECT_EQ(j["kappa_headroom"]["bwd_det_chunked"].get<double>(), 1e8);
  EXPECT_LT(j["kappa_headroom"]["bwd_fp32_blocked"].get<double>(), 1e8);
  const auto& dx = j["windows"][0]["outputs"]["dx"];
  EXPECT_DOUBLE_EQ(dx["kernel_excess"].get<double>(), dx["max_err_tol"].get<double>() - dx["forced"].get<double>());
  const std::string md = format_gate_markdown(r);
  EXPECT_NE(md.find("## Conditioning headroom"), std::string::npos) << md;
  EXPECT_NE(md.find("| bwd_det_chunked | 1 | 1e+08 |"), std::string::npos) << md;
  EXPECT_NE(md.find("## Margins: forced and kernel"), std::string::npos) << md;
  EXPECT_NE(md.find("the kernel's own excess"), std::string::npos) << md;
}

// A seed set without the kappa sweep (3xN runs cancel at 1e8 only): a
// variant failing its cancel cases has no measured headroom, and the
// Markdown lists it below the lowest level run instead of dropping the
// section (a new-user pass found it gone for a failing kernel).
TEST(GateHeadroom, AFailureAtTheOnlyLevelRunIsListedBelowIt) {
  const GateResult r = headroom_gate("3x1");
  ASSERT_EQ(r.windows.size(), 2u);
  EXPECT_EQ(r.windows[0].kappa_headroom, 1e8);
  ASSERT_FALSE(r.windows[1].pass);
  int64_t cancel_failed = 0;
  for (const auto& f : r.windows[1].families) cancel_failed += f.family == "cancel" ? f.failed : 0;
  ASSERT_GT(cancel_failed, 0);
  EXPECT_EQ(r.windows[1].kappa_headroom, -1);
  const std::string md = format_gate_markdown(r);
  EXPECT_NE(md.find("| bwd_det_chunked | 1 | 1e+08 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| bwd_fp32_blocked | 1 | <1e+08 (the lowest level run; none below it ran) |"), std::string::npos)
      << md;
  EXPECT_EQ(kappa_failed_below(r.windows[1]), 1e8);
  EXPECT_EQ(kappa_failed_below(r.windows[0]), 0);
  // The JSON says the same: null (below the lowest level run), not absent.
  const nlohmann::json j = gate_to_json(r);
  EXPECT_EQ(j["kappa_headroom"]["bwd_det_chunked"].get<double>(), 1e8);
  ASSERT_TRUE(j["kappa_headroom"].contains("bwd_fp32_blocked")) << j["kappa_headroom"].dump();
  EXPECT_TRUE(j["kappa_headroom"]["bwd_fp32_blocked"].is_null()) << j["kappa_headroom"].dump();
}

TEST(GateHeadroom, HeadroomIsTheHighestLevelWithEveryLevelBelowPassing) {
  using FC = WindowResult::FamilyCount;
  EXPECT_EQ(kappa_headroom({}), -1);
  EXPECT_EQ(kappa_headroom({{"normal", 3, 0}, {"cancel", 3, 0}}), 1e8);
  EXPECT_EQ(kappa_headroom({{"cancel,kappa=100", 1, 0}, {"cancel,kappa=10000", 1, 1}, {"cancel", 1, 0}}), 100);
  EXPECT_EQ(kappa_headroom({{"cancel,kappa=100", 1, 1}, {"cancel", 1, 0}}), 0);
  // Failing at 1e8 with no lower level run (a 3xN set): not measured, not "below 1e2".
  EXPECT_EQ(kappa_headroom({{"normal", 3, 0}, {"cancel", 3, 1}}), -1);
  EXPECT_EQ(kappa_headroom(std::vector<FC>{{"cancel,kappa=100", 1, 0}, {"cancel,kappa=1e+06", 2, 0}}), 1e6);
}

}  // namespace
