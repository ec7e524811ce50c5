// tests/cli: `--devices` of gate and check (bad values exit 2 naming them,
// before any work) and `gate --stats-json` (per-phase throughput, written
// atomically, outside the reports).
#include <gtest/gtest.h>

#include "cli_util.h"

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "normgate/core/host_memory.h"
#include "normgate/kernels/device.h"

namespace {

using normgate::test::contains;
using normgate::test::slurp;
using normgate::test::without_dates;
using normgate::test::run_normgate;

const std::string kSmall = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.toml";
const std::string kFastAnyBackend =
    " --threads 1 --seeds 3x1 --t-per-window 4 --dense-points 2 --windows 'H=64,T=1..100'";
const std::string kFast = " --backend cpu" + kFastAnyBackend;

std::string temp_dir(const std::string& name) { return normgate::test::fresh_dir("devices_cli", name); }

TEST(DevicesCli, BadDeviceListsExit2BeforeAnyWork) {
  const std::string dir = temp_dir("bad");
  const std::string journal = dir + "/j.jsonl";
  struct Bad {
    std::string value, says;
  };
  // 4096 exceeds any host's device count (and this machine may have none).
  // --backend auto: with --backend cpu, --devices is refused whatever its value.
  for (const Bad& b : {Bad{"0,x", "'x' is not a device index"}, Bad{"4096", "device 4096 does not exist"},
                       Bad{"-1", "device -1 is negative"}, Bad{"0,,1", "an empty entry"}}) {
    const auto r = run_normgate("gate " + kSmall + " --backend auto" + kFastAnyBackend + " --journal " + journal +
                                " --devices=" + b.value);
    EXPECT_EQ(r.code, 2) << b.value << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "--devices") && contains(r.out, b.says) &&
                contains(r.out, "'" + b.value + "'"))
        << b.value << "\n" << r.out;
    EXPECT_FALSE(std::filesystem::exists(journal)) << b.value;  // nothing ran
    const auto c = run_normgate("check --case H=64,T=10,w=bf16,form=plain,family=normal,seed=0 --backend auto "
                                "--devices=" + b.value);
    EXPECT_EQ(c.code, 2) << b.value << "\n" << c.out;
    EXPECT_TRUE(contains(c.out, "--devices") && contains(c.out, b.says)) << c.out;
  }
}

// The CPU models run on no device: --devices with --backend cpu is a usage
// error naming both options (exit 2, before any work), on a machine with a
// GPU as on one without; not "device 0 does not exist".
TEST(DevicesCli, DevicesWithBackendCpuIsAUsageError) {
  const std::string dir = temp_dir("cpu");
  const std::string journal = dir + "/j.jsonl";
  for (const std::string value : {"0", "all", "0,0"}) {
    const auto r = run_normgate("gate " + kSmall + kFast + " --journal " + journal + " --devices " + value);
    EXPECT_EQ(r.code, 2) << value << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "--devices " + value) && contains(r.out, "no effect with --backend cpu")) << r.out;
    EXPECT_FALSE(contains(r.out, "does not exist")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(journal)) << value;  // nothing ran
    const auto c = run_normgate("check --case H=64,T=10,w=bf16,form=plain,family=normal,seed=0 --backend cpu "
                                "--devices " + value);
    EXPECT_EQ(c.code, 2) << value << "\n" << c.out;
    EXPECT_TRUE(contains(c.out, "--devices " + value) && contains(c.out, "no effect with --backend cpu")) << c.out;
    EXPECT_FALSE(contains(c.out, "note     no GPU")) << c.out;  // refused before the run's first line
  }
  std::filesystem::remove_all(dir);
}

TEST(DevicesCli, StatsJsonHasEveryPhase) {
  const std::string dir = temp_dir("stats");
  const std::string stats = dir + "/stats.json", md = dir + "/r.md";
  // Unwritable: refused before any work.
  auto r = run_normgate("gate " + kSmall + kFast + " --report-md " + md + " --stats-json " + dir + "/no/such/s.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--stats-json")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(md));
  r = run_normgate("gate " + kSmall + kFast + " --plan --stats-json " + stats);
  EXPECT_EQ(r.code, 2) << r.out;

  r = run_normgate("gate " + kSmall + kFast + " --quiet --report-md " + md + " --stats-json " + stats);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "throughput ")) << r.out;
  EXPECT_TRUE(contains(r.out, "% of the host copy bandwidth")) << r.out;
  std::ifstream f(stats);
  ASSERT_TRUE(f.good());
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j.at("format"), "normgate-pipeline-stats/1");
  EXPECT_GT(j.at("cases").get<int64_t>(), 0);
  EXPECT_GT(j.at("elements").get<int64_t>(), 0);
  EXPECT_TRUE(j.at("devices").empty());  // CPU models
  const double e = j.at("elements").get<double>();
  for (const char* phase : {"generation", "kernels", "reference", "validation", "journal"}) {
    const auto& p = j.at("phases").at(phase);
    const double secs = p.at("seconds").get<double>(), rate = p.at("elements_per_second").get<double>();
    EXPECT_GT(secs, 0.0) << phase;
    EXPECT_TRUE(std::isfinite(rate) && rate > 0) << phase;
    EXPECT_NEAR(rate, e / secs, 1e-9 * rate) << phase;
  }
  EXPECT_TRUE(j.at("phases").at("downloads").at("elements_per_second").is_null());  // no GPU
  const double e2e = j.at("end_to_end").at("elements_per_second").get<double>();
  const double bw = j.at("host_copy").at("bytes_per_second").get<double>();
  EXPECT_GT(bw, 0.0);
  EXPECT_NEAR(j.at("end_to_end_fraction_of_host_copy").get<double>(), e2e * 8 / bw, 1e-9);
  // Not in the reports.
  std::ifstream m(md);
  std::stringstream ss;
  ss << m.rdbuf();
  EXPECT_FALSE(contains(ss.str(), "elements/s")) << ss.str();
  std::filesystem::remove_all(dir);
}

// A journal's lines without each case's wall time, the digest over it and
// the chain member holding the line before it's.
std::string journal_without_seconds(const std::string& path) {
  std::istringstream in(slurp(path));
  std::string line, out;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    j.erase("seconds");
    j.erase("sha256");
    j.erase("prev");
    out += j.dump() + "\n";
  }
  return out;
}

// GPU only: the same small gate with --devices 0 and --devices 0,0,0 (three
// workers on one GPU) writes the same reports and journal but for dates and
// wall times.
TEST(DevicesCli, RepeatedDeviceGivesTheSameReportsAndJournal) {
  if (!normgate::kernels::gpu_available()) GTEST_SKIP() << "no usable CUDA device";
  const std::string dir = temp_dir("gpu");
  for (const char* d : {"0", "0,0,0"}) {
    const std::string tag = std::string(d) == "0" ? "one" : "three";
    const auto r = run_normgate("gate " + kSmall +
                                " --backend gpu --seeds 3x2 --t-per-window 4 --dense-points 2 --quiet --devices " + d +
                                " --journal " + dir + "/" + tag + ".jsonl --report-md " + dir + "/" + tag +
                                ".md --report-json " + dir + "/" + tag + ".json --stats-json " + dir + "/" + tag +
                                ".stats.json");
    ASSERT_EQ(r.code, 0) << d << "\n" << r.out;
  }
  EXPECT_EQ(without_dates(slurp(dir + "/three.md")), without_dates(slurp(dir + "/one.md")));
  EXPECT_EQ(without_dates(slurp(dir + "/three.json")), without_dates(slurp(dir + "/one.json")));
  EXPECT_EQ(journal_without_seconds(dir + "/three.jsonl"), journal_without_seconds(dir + "/one.jsonl"));
  const auto one = nlohmann::json::parse(slurp(dir + "/one.stats.json"));
  const auto three = nlohmann::json::parse(slurp(dir + "/three.stats.json"));
  EXPECT_EQ(three.at("devices"), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(three.at("elements"), one.at("elements"));
  EXPECT_GT(three.at("phases").at("downloads").at("seconds").get<double>(), 0.0);
  std::filesystem::remove_all(dir);
}

// GPU only: the gate's host-memory check counts the cases its pipeline holds
// at once (harness/pipeline.h cases_in_host_memory): a window whose largest
// case fits alone (about 0.6 of the usable memory) but not twice is refused
// before any work, naming the count, with one worker (2 held) and with three
// (4 held); the pinned staging buffers are named too.
TEST(DevicesCli, GateCountsTheCasesItsGpuPipelineHolds) {
  if (!normgate::kernels::gpu_available()) GTEST_SKIP() << "no usable CUDA device";
  const uint64_t usable = normgate::core::host_memory().usable();
  if (usable == 0) GTEST_SKIP() << "this host does not say its memory";
  // Plain backward, one implementation: x, dy, y and dx in BF16, 8 bytes an element.
  const uint64_t per_t = uint64_t{8} * 16384;
  const uint64_t t = usable / 10 * 6 / per_t;
  ASSERT_GT(t, 0u);
  ASSERT_LT(t, uint64_t{2147483647});
  const std::string dir = temp_dir("held");
  const std::string table = dir + "/big.toml";
  std::ofstream(table) << "arch = \"sm90a\"\nroute = [\n"
                          "  { op = \"bwd\", mode = \"det\", H = 16384, w = \"bf16\", form = \"plain\", "
                          "T = [1, " << t << "], variant = \"bwd_det_chunked\" },\n]\n";
  const std::string journal = dir + "/j.jsonl";
  for (const auto& [devices, held] : {std::pair<std::string, std::string>{"0", "2 cases held at once (the case being "
                                                                                 "checked and the next one prepared on the GPU)"},
                                      {"0,0,0", "4 cases held at once (the case being checked and one prepared ahead by "
                                                "each of 3 GPU workers)"}}) {
    const auto r = run_normgate("gate " + table + " --backend gpu --seeds 3x1 --t-per-window 4 --dense-points 2 "
                                "--devices " + devices + " --journal " + journal);
    EXPECT_EQ(r.code, 2) << devices << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "case H=16384,T=" + std::to_string(t) + ",")) << r.out;
    EXPECT_TRUE(contains(r.out, held + ", each up to " + normgate::core::gib_and_bytes(t * per_t) + ", ")) << r.out;
    EXPECT_TRUE(contains(r.out, "0.1 GiB (134217728 bytes) of pinned staging buffers, ")) << r.out;
    EXPECT_FALSE(contains(r.out, "phase")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(journal) && !slurp(journal).empty()) << slurp(journal);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
