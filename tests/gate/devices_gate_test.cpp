// tests/gate/devices_gate_test.cpp: a gate spread over a device list
// (GateOptions::devices, validators::run_checks) gives the reports and the
// journal of a gate on one GPU, but for timestamps and wall times. GPU only:
// three workers on device 0 stand for three GPUs (cases prepared ahead on
// several workers, finished in order).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/gate/gate.h"
#include "normgate/gate/journal.h"
#include "normgate/kernels/device.h"
#include "gate/gate_test_util.h"

namespace {

using namespace normgate;
using namespace normgate::validators;

// The journal's lines without the wall time of each case (the one field that
// differs between runs of a campaign) and the chain member over the line
// before (which holds that line's time).
std::vector<std::string> journal_without_seconds(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = parse_journal_line(line);
    j.erase("seconds");
    j.erase("prev");
    out.push_back(j.dump());
  }
  return out;
}

// The pipeline's element count is the plan's: rows*H summed over the
// distinct cases (no refinement here, so the grid is the whole campaign).
TEST(GateDevices, StatsCountThePlansElements) {
  const GateOptions o = test::grid_only_opts();
  const GatePlan plan = plan_gate(o);
  const GateResult r = run_gate(o);
  ASSERT_GT(plan.grid_cases_distinct, 0);
  EXPECT_EQ(r.pipeline.cases, plan.grid_cases_distinct);
  EXPECT_EQ(static_cast<double>(r.pipeline.elements), plan.grid_elements_distinct);
  EXPECT_TRUE(r.pipeline.devices.empty());  // CPU models: no device
  EXPECT_GT(r.pipeline.phases.reference, 0.0);
  EXPECT_GT(r.pipeline.phases.validation, 0.0);
  EXPECT_GT(r.pipeline.phases.kernels, 0.0);
  EXPECT_GT(r.pipeline.phases.journal, 0.0);
}

TEST(GateDevices, RepeatedDeviceGivesTheReportsAndJournalOfOneWorker) {
  if (!kernels::gpu_available()) GTEST_SKIP() << "no usable CUDA device";
  const std::string dir = test::fresh_dir("test_gate_devices", "workers");
  GateOptions o = test::small_opts();
  o.seeds = "3x2";
  o.backend = Backend::gpu;
  o.threads = 0;
  o.devices = {0};
  o.journal_path = dir + "/one.jsonl";
  const GateResult one = run_gate(o);
  o.devices = {0, 0, 0};
  o.journal_path = dir + "/three.jsonl";
  const GateResult three = run_gate(o);

  EXPECT_EQ(one.pipeline.devices, (std::vector<int>{0}));
  EXPECT_EQ(three.pipeline.devices, (std::vector<int>{0, 0, 0}));
  EXPECT_GT(three.cases_run_now, 3);  // more cases than workers
  EXPECT_EQ(three.pipeline.elements, one.pipeline.elements);
  EXPECT_EQ(test::strip_date(format_gate_markdown(three)), test::strip_date(format_gate_markdown(one)));
  EXPECT_EQ(test::json_without_date(three), test::json_without_date(one));
  EXPECT_EQ(journal_without_seconds(dir + "/three.jsonl"), journal_without_seconds(dir + "/one.jsonl"));
  std::filesystem::remove_all(dir);
}

}  // namespace
