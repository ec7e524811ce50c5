// tests/cli: `normgate gate --shard K/N` and `--merge` as a user runs them:
// bad --shard values exit 2 naming the value before any work; a shard exits
// 0 with an INCOMPLETE verdict; merging every shard writes the unsharded
// run's JSON and Markdown reports (but the date) and exits 0; merging 2 of 3
// shards exits 1, INCOMPLETE; a merge input that is not there, or not a
// journal (a table after the journals), exits 2 naming it.
#include <gtest/gtest.h>

#include "cli_util.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

using normgate::test::contains;
using normgate::test::slurp;
using normgate::test::spit;
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
  EXPECT_TRUE(contains(r.out, "table is required: normgate gate TABLE [options]")) << r.out;
  EXPECT_TRUE(contains(r.out, "(normgate gate --help)")) << r.out;
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
  // Its differing fields one a line (not \x0a escapes), and the merge's
  // advice, not the resume's (--journal, journal= in Python).
  EXPECT_TRUE(contains(r.out, "differing fields:\n  dense_step: journal 64, this run 32\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "\nmerge the shard journals of this campaign only")) << r.out;
  EXPECT_FALSE(contains(r.out, "\\x0a")) << r.out;
  EXPECT_FALSE(contains(r.out, "journal= in Python")) << r.out;
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

// Shards written under a journal key (NORMGATE_JOURNAL_KEY_FILE) merge under
// it into the unkeyed run's report; a shard line made to pass and sealed
// again with a plain SHA-256 (what a forger without the key can do) is
// refused naming the file and line; without the key, or with a key file
// the gate refuses, the merge exits 2 before any work.
TEST(ShardCli, KeyedShardsCannotBeForged) {
  const std::string dir = temp_dir("keyed");
  const std::string key = dir + "/key";
  std::ofstream(key) << "0123456789abcdef0123456789abcdef0123456789abcdef\n";
  std::filesystem::permissions(key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const std::string env = "NORMGATE_JOURNAL_KEY_FILE=" + key;
  auto r = cli("gate " + kSmall + kFast + " --quiet --report-json " + dir + "/full.json");
  ASSERT_EQ(r.code, 0) << r.out;
  for (int k = 1; k <= 2; ++k)
    ASSERT_EQ(normgate::test::run_normgate_with(env, "gate " + kSmall + kFast + " --quiet --shard " +
                                                        std::to_string(k) + "/2 --journal " + dir + "/s" +
                                                        std::to_string(k) + ".jsonl").code,
              0);
  EXPECT_TRUE(contains(slurp(dir + "/s1.jsonl"), "\"hmac_sha256\":\""));
  EXPECT_FALSE(contains(slurp(dir + "/s1.jsonl"), "\"sha256\":\""));
  const std::string merge = "gate " + kSmall + kFast + " --quiet --merge " + dir + "/s1.jsonl " + dir + "/s2.jsonl";
  r = normgate::test::run_normgate_with(env, merge + " --journal " + dir + "/m.jsonl --report-json " + dir + "/m.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(without_dates(slurp(dir + "/m.json")), without_dates(slurp(dir + "/full.json")));
  // Without the key: refused before any work, saying what to set.
  r = cli(merge + " --journal " + dir + "/n.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "sealed with a journal key") && contains(r.out, "NORMGATE_JOURNAL_KEY_FILE")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/n.jsonl"));
  // Line 2 of shard 1 re-sealed with a plain SHA-256 (python3's hashlib, as a forger would).
  const std::string py = "import hashlib,sys\n"
                         "L=open(sys.argv[1]).read().split('\\n')\n"
                         "b=L[1][:L[1].rindex(',\"hmac_sha256\"')]+'}'\n"
                         "L[1]=b[:-1]+',\"sha256\":\"'+hashlib.sha256(b.encode()).hexdigest()+'\"}'\n"
                         "open(sys.argv[2],'w').write('\\n'.join(L))\n";
  std::ofstream(dir + "/forge.py") << py;
  ASSERT_EQ(std::system(("python3 " + dir + "/forge.py " + dir + "/s1.jsonl " + dir + "/f1.jsonl").c_str()), 0);
  r = normgate::test::run_normgate_with(env, "gate " + kSmall + kFast + " --quiet --merge " + dir + "/f1.jsonl " + dir +
                                                 "/s2.jsonl --journal " + dir + "/f.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, dir + "/f1.jsonl") && contains(r.out, "line 2") &&
              contains(r.out, "plain SHA-256, which anyone can recompute"))
      << r.out;
  // A key file open to every user: exit 2 naming the variable, no journal.
  std::filesystem::permissions(key, std::filesystem::perms::others_read, std::filesystem::perm_options::add);
  r = normgate::test::run_normgate_with(env, "gate " + kSmall + kFast + " --quiet --shard 1/2 --journal " + dir +
                                                 "/o.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "NORMGATE_JOURNAL_KEY_FILE") && contains(r.out, "chmod o-rw")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/o.jsonl"));
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
  EXPECT_FALSE(contains(r.out, "its only one")) << r.out;
  // No journal before `-- TABLE`: --merge takes the table, and says it had nothing else.
  r = cli("gate" + kFast + " --merge -- " + table);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--merge took '" + table + "' as a shard journal (its only one: --merge needs a shard "
                              "journal before the table)"))
      << r.out;
  // The table given, and another after the journals: not a journal, named
  // before any work (no "gate" line, no journal written).
  const std::string other = std::string(NORMGATE_SOURCE_DIR) + "/routes/sm90a-ci.toml";
  r = cli("gate " + kSmall + kFast + journals + " " + other + " --journal " + dir + "/m.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--merge " + other + ": not a shard journal")) << r.out;
  EXPECT_TRUE(contains(r.out, "--merge takes every argument up to the next option")) << r.out;
  EXPECT_FALSE(contains(r.out, "gate     ")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.jsonl"));
  // A shard journal rewritten with CR LF line ends: named as such (not as
  // "not a shard journal" with advice about the order of arguments).
  {
    std::string crlf;
    for (char c : slurp(s2)) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    spit(dir + "/s2crlf.jsonl", crlf);
    r = cli("gate " + kSmall + kFast + " --merge " + s1 + " " + dir + "/s2crlf.jsonl --journal " + dir + "/m.jsonl");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "s2crlf.jsonl: its first line ends in CR LF")) << r.out;
    EXPECT_FALSE(contains(r.out, "--merge takes every argument")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(dir + "/m.jsonl"));
  }
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
