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

namespace {

using namespace normgate;
using namespace normgate::validators;

// The journal's lines without the wall time of each case (the one field that
// differs between runs of a campaign).
std::vector<std::string> journal_without_seconds(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = parse_journal_line(line);
    j.erase("seconds");
    out.push_back(j.dump());
  }
  return out;
}

// The pipeline's element count is the plan's: rows*H summed over the
// distinct cases (no refinement here, so the grid is the whole campaign).
TEST(GateDevices, StatsCountThePlansElements) {
  GateOptions o;
  o.table_path = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.toml";
  o.seeds = "3x1";
  o.t_per_window = 4;
  o.dense_points = 0;
  o.fresh_factor = 0;
  o.backend = Backend::cpu;
  o.threads = 1;
  o.normgate_version = "test";
  o.normgate_commit = "test";
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
  const std::string dir =
      std::string(NORMGATE_BINARY_DIR) + "/test_gate_devices_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  GateOptions o;
  o.table_path = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.toml";
  o.seeds = "3x2";
  o.t_per_window = 4;
  o.dense_points = 2;
  o.backend = Backend::gpu;
  o.normgate_version = "test";
  o.normgate_commit = "test";
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
  auto md = [](const GateResult& r) {
    std::string s = format_gate_markdown(r), out;
    size_t pos = 0;
    while (pos < s.size()) {
      const size_t nl = s.find('\n', pos);
      const std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos + 1);
      if (line.rfind("- date: ", 0) != 0) out += line;
      pos = nl == std::string::npos ? s.size() : nl + 1;
    }
    return out;
  };
  auto js = [](const GateResult& r) {
    nlohmann::json j = gate_to_json(r);
    j.erase("date");
    return j.dump();
  };
  EXPECT_EQ(md(three), md(one));
  EXPECT_EQ(js(three), js(one));
  EXPECT_EQ(journal_without_seconds(dir + "/three.jsonl"), journal_without_seconds(dir + "/one.jsonl"));
  std::filesystem::remove_all(dir);
}

}  // namespace
