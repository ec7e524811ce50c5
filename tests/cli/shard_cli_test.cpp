// tests/cli: `normgate gate --shard K/N` and `--merge` as a user runs them:
// bad --shard values exit 2 naming the value before any work; a shard exits
// 0 with an INCOMPLETE verdict; merging every shard writes the unsharded
// run's JSON and Markdown reports (but the date) and exits 0; merging 2 of 3
// shards exits 1, INCOMPLETE; a merge input that is not there exits 2.
#include <gtest/gtest.h>

#include "cli_util.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

using normgate::test::contains;
using normgate::test::slurp;
using normgate::test::without_dates;
const std::string kSmall = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.toml";
const std::string kFast = " --backend cpu --threads 1 --seeds 3x1 --t-per-window 4 --dense-points 2 --windows H=64";

normgate::test::CliRun cli(const std::string& args) { return normgate::test::run_normgate(args); }

std::string temp_dir(const std::string& name) { return normgate::test::fresh_dir("shard_cli", name); }

TEST(ShardCli, BadShardValuesExit2NamingThem) {
  const std::string dir = temp_dir("bad");
  for (const char* bad : {"0/3", "4/3", "3", "x/3", "1/0", "2/-1"}) {
    const auto r = cli("gate " + kSmall + kFast + " --shard " + bad + " --journal " + dir + "/j.jsonl");
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_TRUE(contains(r.out, "--shard '" + std::string(bad) + "'")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(dir + "/j.jsonl")) << "work started before the check";
  }
  auto r = cli("gate " + kSmall + kFast + " --shard 1/2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--journal")) << r.out;
  r = cli("gate " + kSmall + kFast + " --shard 1/2 --journal " + dir + "/j.jsonl --merge " + dir + "/j.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  r = cli("gate " + kSmall + kFast + " --merge " + dir + "/absent.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--merge " + dir + "/absent.jsonl")) << r.out;
  // The table after the journals: --merge takes it too, and the message
  // says so (it said only "table is required").
  std::ofstream(dir + "/a.jsonl") << "x\n";
  r = cli("gate --merge " + dir + "/a.jsonl " + kSmall + kFast);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "table is required: --merge took '" + kSmall + "'")) << r.out;
  r = cli("gate" + kFast);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "table is required")) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(ShardCli, MergedShardsWriteTheUnshardedReports) {
  const std::string dir = temp_dir("merge");
  auto r = cli("gate " + kSmall + kFast + " --quiet --report-json " + dir + "/full.json --report-md " + dir + "/full.md");
  ASSERT_EQ(r.code, 0) << r.out;
  for (int k = 1; k <= 3; ++k) {
    r = cli("gate " + kSmall + kFast + " --quiet --shard " + std::to_string(k) + "/3 --journal " + dir + "/s" +
            std::to_string(k) + ".jsonl --report-json " + dir + "/s" + std::to_string(k) + ".json");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "verdict  INCOMPLETE: shard " + std::to_string(k) + "/3")) << r.out;
    EXPECT_TRUE(contains(slurp(dir + "/s" + std::to_string(k) + ".json"), "\"verdict\": \"incomplete\""));
  }
  r = cli("gate " + kSmall + kFast + " --quiet --merge " + dir + "/s1.jsonl " + dir + "/s2.jsonl --journal " + dir +
          "/part.jsonl --report-json " + dir + "/part.json");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "verdict  INCOMPLETE")) << r.out;
  EXPECT_TRUE(contains(r.out, "shards not given: 3/3")) << r.out;
  EXPECT_TRUE(contains(slurp(dir + "/part.json"), "\"pass\": false"));
  r = cli("gate " + kSmall + kFast + " --quiet --merge " + dir + "/s1.jsonl " + dir + "/s2.jsonl " + dir +
          "/s3.jsonl --journal " + dir + "/all.jsonl --report-json " + dir + "/all.json --report-md " + dir + "/all.md");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "verdict  PASS")) << r.out;
  EXPECT_EQ(without_dates(slurp(dir + "/all.json")), without_dates(slurp(dir + "/full.json")));
  EXPECT_EQ(without_dates(slurp(dir + "/all.md")), without_dates(slurp(dir + "/full.md")));
  std::filesystem::remove_all(dir);
}

}  // namespace
