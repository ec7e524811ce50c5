// tests/cli/check_outputs_fwd_cli_test.cpp: `normgate check --outputs fwd`
// checks y, rstd (and h_new) of one case: the report says so and lists no
// dx or dw, the JSON has "outputs": "fwd"; a grid refuses it (exit 2); a
// value other than all or fwd is a usage error. On the CPU models.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace {

using normgate::test::contains;
using normgate::test::run_normgate;
using normgate::test::slurp;

TEST(CheckOutputsFwd, ForwardOnlyReportAndRefusals) {
  const std::string dir = normgate::test::fresh_dir("test_cli", "outputs_fwd");
  const std::string id = "H=64,T=7,w=bf16,form=plain,family=cancel,seed=1";
  const auto fwd = run_normgate("check --backend cpu --variant bwd_det_chunked --case " + id +
                                " --outputs fwd --json " + dir + "/f.json");
  EXPECT_EQ(fwd.code, 0) << fwd.out;
  EXPECT_TRUE(contains(fwd.out, "outputs  forward only")) << fwd.out;
  EXPECT_FALSE(contains(fwd.out, "\ndx ")) << fwd.out;
  EXPECT_FALSE(contains(fwd.out, "\ndw ")) << fwd.out;
  const auto j = nlohmann::json::parse(slurp(dir + "/f.json"));
  EXPECT_EQ(j.value("outputs", ""), "fwd");
  EXPECT_FALSE(j["impls"][0]["outputs"].contains("dx"));
  EXPECT_TRUE(j["impls"][0]["outputs"].contains("rstd"));
  const auto all = run_normgate("check --backend cpu --variant bwd_det_chunked --case " + id);
  EXPECT_EQ(all.code, 0);
  EXPECT_TRUE(contains(all.out, "\ndx ")) << all.out;
  EXPECT_FALSE(contains(all.out, "outputs  forward only"));
  const auto grid = run_normgate("check --backend cpu --seeds 3x1 --H 64 --T 3 --outputs fwd");
  EXPECT_EQ(grid.code, 2);
  EXPECT_TRUE(contains(grid.out, "checks one --case")) << grid.out;
  EXPECT_EQ(run_normgate("check --backend cpu --case " + id + " --outputs bwd").code, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
