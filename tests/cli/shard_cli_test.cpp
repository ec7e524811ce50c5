// tests/cli: `normgate gate --shard K/N` and `--merge` as a user runs them:
// bad --shard values exit 2 naming the value before any work; a shard exits
// 0 with an INCOMPLETE verdict; merging every shard writes the unsharded
// run's JSON and Markdown reports (but the date) and exits 0; merging 2 of 3
// shards exits 1, INCOMPLETE; a merge input that is not there, or not a
// journal (a table after the journals), exits 2 naming it.
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
  // A merge refused for its shards (another dense step than theirs; a shard
  // twice) creates no --journal, so the corrected command then runs.
  r = cli("gate " + kSmall + kFast + " --dense-step 32 --quiet --merge " + dir + "/s1.jsonl " + dir + "/s2.jsonl " + dir +
          "/s3.jsonl --journal " + dir + "/m.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "belongs to a different campaign")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.jsonl")) << "a refused merge left its journal";
  r = cli("gate " + kSmall + kFast + " --quiet --merge " + dir + "/s1.jsonl " + dir + "/s1.jsonl --journal " + dir +
          "/m.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "given twice")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.jsonl")) << "a refused merge left its journal";
  r = cli("gate " + kSmall + kFast + " --quiet --merge " + dir + "/s1.jsonl " + dir + "/s2.jsonl " + dir +
          "/s3.jsonl --journal " + dir + "/m.jsonl --report-json " + dir + "/m.json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(without_dates(slurp(dir + "/m.json")), without_dates(slurp(dir + "/full.json")));
  // A shard whose last record was cut short: said under the shard's name,
  // not the merged journal's; the shard's file is left as it is.
  {
    const std::string s3 = slurp(dir + "/s3.jsonl");
    const size_t last = s3.rfind('\n', s3.size() - 2) + 1;
    const std::string torn = s3.substr(0, last) + s3.substr(last, 40);
    std::ofstream(dir + "/t3.jsonl", std::ios::binary) << torn;
    r = cli("gate " + kSmall + kFast + " --quiet --merge " + dir + "/s1.jsonl " + dir + "/s2.jsonl " + dir +
            "/t3.jsonl --journal " + dir + "/t.jsonl");
    EXPECT_TRUE(contains(r.out, "merge    " + dir + "/t3.jsonl: a torn last record (40 bytes) left out")) << r.out;
    EXPECT_FALSE(contains(r.out, "journal  " + dir + "/t.jsonl: 0 finished cases resumed, 0 run now, a torn"))
        << r.out;
    EXPECT_EQ(slurp(dir + "/t3.jsonl"), torn);
  }
  std::filesystem::remove_all(dir);
}

// --merge takes every argument up to the next option: a table after the
// journals is taken as one. The spellings that work: the table before
// --merge, after an option that follows the journals, or after --. A
// table after the journals is a usage error naming it, whatever its name,
// before any work; so is any --merge value that is not a journal.
TEST(ShardCli, TableAfterTheMergeJournals) {
  const std::string dir = temp_dir("spelling");
  const std::string s1 = dir + "/s1.jsonl", s2 = dir + "/s2.jsonl";
  for (int k = 1; k <= 2; ++k)
    ASSERT_EQ(cli("gate " + kSmall + kFast + " --quiet --shard " + std::to_string(k) + "/2 --journal " + dir + "/s" +
                  std::to_string(k) + ".jsonl").code, 0);
  const std::string journals = " --merge " + s1 + " " + s2;
  auto r = cli("gate " + kSmall + kFast + " --quiet" + journals + " --report-json " + dir + "/first.json");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string first = without_dates(slurp(dir + "/first.json"));
  for (const std::string& spelling : {"gate" + kFast + " --quiet" + journals + " --report-json " + dir + "/r.json " + kSmall,
                                      "gate" + kFast + " --quiet" + journals + " --report-json " + dir + "/r.json -- " + kSmall}) {
    std::filesystem::remove(dir + "/r.json");
    r = cli(spelling);
    EXPECT_EQ(r.code, 0) << spelling << "\n" << r.out;
    EXPECT_EQ(without_dates(slurp(dir + "/r.json")), first) << spelling;
  }
  // A table not named *.toml after the journals: named, with what to do.
  const std::string table = dir + "/table";
  std::filesystem::copy_file(kSmall, table);
  r = cli("gate" + kFast + journals + " " + table);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--merge took '" + table + "' as a shard journal")) << r.out;
  EXPECT_TRUE(contains(r.out, "gate TABLE --merge J1 J2") && contains(r.out, "--merge J1 J2 -- TABLE")) << r.out;
  // The table given, and another after the journals: not a journal, named
  // before any work (no "gate" line, no journal written).
  const std::string other = std::string(NORMGATE_SOURCE_DIR) + "/routes/sm90a-ci.toml";
  r = cli("gate " + kSmall + kFast + journals + " " + other + " --journal " + dir + "/m.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--merge " + other + ": not a shard journal")) << r.out;
  EXPECT_TRUE(contains(r.out, "--merge takes every argument up to the next option")) << r.out;
  EXPECT_FALSE(contains(r.out, "gate     ")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.jsonl"));
  // An option where the journals belong: named as an option, not as a file.
  r = cli("gate " + kSmall + kFast + " --merge --quiet --journal " + dir + "/m.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--merge took the option '--quiet' where a shard journal belongs")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.jsonl"));
  // gate --help says how to spell it.
  r = cli("gate --help");
  EXPECT_TRUE(contains(r.out, "--merge J1 J2 -- TABLE")) << r.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
