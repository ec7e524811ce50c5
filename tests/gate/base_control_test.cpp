// tests/gate/base_control_test.cpp: `--base` compares the variants' source
// hashes too (through the approvals beside the base table, else the table's
// own): a window with the base's bounds and variant whose kernel changed is
// gated, not skipped. A negative control that passes a window is flagged in
// the reports (issue 35).
#include <gtest/gtest.h>

#include <algorithm>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/gate/gate.h"
#include "normgate/seeds/case_id.h"
#include "normgate/routing/routing.h"
#include "util/approval_fixture.h"
#include "gate/gate_test_util.h"

namespace {

using namespace normgate;
using namespace normgate::validators;
using test::grid_only_opts;

std::string temp_dir(const std::string& name) { return test::fresh_dir("test_gate_bc", name); }

// Approvals beside `table` for every route; `stale_line` (0: none): the
// route at that line approved with another source hash.
void approve_all(const std::string& table, int stale_line) {
  kernels::Approvals a;
  a.path = kernels::approvals_path_for(table);
  for (const auto& r : kernels::load_route_table(table).routes)
    a.records.push_back(test::valid_approval(r, r.line == stale_line ? std::string(64, 'a') : std::string()));
  kernels::save_approvals(a);
}

// Issue 35: `--base` compared window bounds and variant names only, so a
// changed kernel passed as "no window changed".
TEST(GateBase, AChangedKernelIsGated) {
  const std::string dir = temp_dir("hash");
  const std::string base = dir + "/base.toml", table = dir + "/table.toml";
  std::filesystem::copy_file(test::kSmallTable, base);
  std::filesystem::copy_file(test::kSmallTable, table);
  const int h256 = kernels::load_route_table(base).routes.back().line;  // bwd det H=256 fp32
  // Every window approved with this build's sources: nothing changed.
  approve_all(base, 0);
  GateOptions o = grid_only_opts(table);
  o.base_path = base;
  const GateResult same = run_gate(o);
  EXPECT_TRUE(same.windows.empty());
  EXPECT_EQ(same.skipped.size(), 6u);
  EXPECT_TRUE(same.source_changed.empty());
  // The H=256 window's approval is of other sources: its kernel changed
  // since the base was approved, so it is gated (and says why).
  approve_all(base, h256);
  const GateResult r = run_gate(o);
  ASSERT_EQ(r.windows.size(), 1u);
  EXPECT_EQ(r.windows[0].route.H, 256);
  EXPECT_EQ(r.skipped.size(), 5u);
  ASSERT_EQ(r.source_changed.size(), 1u);
  EXPECT_NE(r.source_changed[0].find("sources changed: approved source aaaaaaaaaaaa"), std::string::npos)
      << r.source_changed[0];
  EXPECT_NE(format_gate_markdown(r).find("sources changed or unproven"), std::string::npos);
  EXPECT_EQ(gate_to_json(r)["source_changed"].size(), 1u);
  // The table's own approvals prove it current again (after a gate renewed it).
  approve_all(table, 0);
  EXPECT_TRUE(run_gate(o).windows.empty());
  // No approval anywhere: nothing proves the sources, every window is gated.
  std::filesystem::remove(kernels::approvals_path_for(base));
  std::filesystem::remove(kernels::approvals_path_for(table));
  const GateResult none = run_gate(o);
  EXPECT_EQ(none.windows.size(), 6u);
  EXPECT_EQ(none.source_changed.size(), 6u);
  EXPECT_NE(none.source_changed[0].find("no current approval in"), std::string::npos) << none.source_changed[0];
  std::filesystem::remove_all(dir);
}

// A negative control that passes (ctl_fp32_seq where the window is too small
// for cancellation to show) is flagged: JSON field, Markdown warning line.
TEST(GateControl, AControlThatPassesIsFlagged) {
  const std::string dir = temp_dir("ctl");
  const std::string table = dir + "/ctl.toml";
  std::ofstream(table) << "arch = \"sm90a\"\nroute = [\n  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", "
                          "form = \"plain\", T = [1, 3], variant = \"ctl_fp32_seq\" },\n]\n";
  GateOptions o = grid_only_opts(table);
  o.allow_controls = true;
  o.seeds = "3x2";
  const GateResult r = run_gate(o);
  ASSERT_EQ(r.windows.size(), 1u);
  ASSERT_TRUE(r.windows[0].control);
  ASSERT_TRUE(r.windows[0].pass) << "ctl_fp32_seq failed T=1..3; the test needs a window it passes";
  EXPECT_TRUE(r.windows[0].control_passed());
  EXPECT_EQ(gate_to_json(r)["windows"][0]["control_passed"], true);
  const std::string md = format_gate_markdown(r);
  EXPECT_NE(md.find("**WARNING: negative control ctl_fp32_seq PASSED bwd det H=64 w=bf16 form=plain T=1..3**"),
            std::string::npos)
      << md;
  // On its usual window it fails, and nothing is flagged.
  std::ofstream(table) << "arch = \"sm90a\"\nroute = [\n  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", "
                          "form = \"plain\", T = [1, 600], variant = \"ctl_fp32_seq\" },\n]\n";
  const GateResult f = run_gate(o);
  ASSERT_EQ(f.windows.size(), 1u);
  EXPECT_FALSE(f.windows[0].pass);
  // failed_t: the T of the failing cases, increasing, inside the window,
  // one per failing T; the worst dw case's T among them (update_approvals
  // revokes the records holding them).
  const auto& ft = f.windows[0].failed_t;
  ASSERT_FALSE(ft.empty());
  EXPECT_TRUE(std::is_sorted(ft.begin(), ft.end()) && std::adjacent_find(ft.begin(), ft.end()) == ft.end());
  EXPECT_GE(ft.front(), 1);
  EXPECT_LE(ft.back(), 600);
  const int64_t worst_t = normgate::seeds::parse_case(f.windows[0].out[3].worst_case).T;
  EXPECT_TRUE(std::binary_search(ft.begin(), ft.end(), worst_t)) << worst_t;
  int64_t failing = 0;
  for (const auto& fam : f.windows[0].families) failing += fam.failed;
  EXPECT_LE(static_cast<int64_t>(ft.size()), failing);
  EXPECT_EQ(gate_to_json(f)["windows"][0]["control_passed"], false);
  EXPECT_EQ(format_gate_markdown(f).find("WARNING: negative control"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
