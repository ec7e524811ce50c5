// tests/cli/digest_cli_test.cpp: `normgate digest` and `normgate approvals
// --carry` as a user meets them (docs/perf/routes.md D19), on the CPU
// models. An "older source" is simulated by re-keying the approvals to a
// made-up source hash (and the OLD digests file's build to the same hash):
// the carry then brings them back to this build's hash when the bits agree,
// and refuses, writing nothing, when one digest differs, a file was edited,
// or OLD was not run by the approved build.
#include <gtest/gtest.h>

#include "cli_util.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/seeds/generate.h"  // sha256_hex

namespace {

using normgate::test::contains;
using normgate::test::CliRun;
using nlohmann::json;

const std::string kData = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes";
const std::string kFast = " --backend cpu --threads 1 --seeds 3x1 --t-per-window 4 --dense-points 2 --quiet";
const std::string kFake(64, 'a');  // the "older source" of bwd_det_chunked

CliRun cli(const std::string& args) { return normgate::test::run_normgate(args); }

using normgate::test::occurrences;
using normgate::test::slurp;
using normgate::test::spit;

json sealed(json rec) {
  rec.erase("record_sha256");
  const std::string d = rec.dump();
  rec["record_sha256"] = normgate::seeds::sha256_hex(d.data(), d.size());
  return rec;
}
// A digests file re-sealed after an edit (file_sha256 over the rest).
json resealed_digests(json d) {
  d.erase("file_sha256");
  const std::string b = d.dump();
  d["file_sha256"] = normgate::seeds::sha256_hex(b.data(), b.size());
  return d;
}
std::string lines_sha(const json& lines) {
  std::string all;
  for (const auto& l : lines) all += l.get<std::string>() + "\n";
  return normgate::seeds::sha256_hex(all.data(), all.size());
}

// A folder with small.toml gated and approved on the CPU models, its
// bwd_det_chunked records re-keyed to kFake (sealed again), and OLD.json:
// those records' digests as if run by the build of kFake.
class Carry : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = std::string(NORMGATE_BINARY_DIR) + "/digest_cli_" + std::to_string(::getpid()) + "_" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(kData + "/small.toml", dir + "/small.toml");
    std::filesystem::copy_file(kData + "/small.policy.toml", dir + "/small.policy.toml");
    approvals = dir + "/small.approvals.json";
    const CliRun g = cli("gate " + dir + "/small.toml --windows variant=bwd_det_chunked --approve" + kFast);
    ASSERT_EQ(g.code, 0) << g.out;
    json a = json::parse(slurp(approvals));
    size_t n = 0;
    for (auto& r : a["approvals"])
      if (r["variant"] == "bwd_det_chunked") {
        real = r["source_sha256"].get<std::string>();
        r["source_sha256"] = kFake;
        r = sealed(r);
        ++n;
      }
    ASSERT_EQ(n, 3u);  // the table's three bwd_det_chunked windows
    spit(approvals, a.dump(1));
    before = slurp(approvals);
    const CliRun d = cli("digest " + approvals + " --variant bwd_det_chunked --backend cpu --threads 1 --out " + dir +
                         "/old.json");
    ASSERT_EQ(d.code, 0) << d.out;
    json old = json::parse(slurp(dir + "/old.json"));
    ASSERT_EQ(old["variants"]["bwd_det_chunked"], real);  // this build's hash, recorded
    old["variants"]["bwd_det_chunked"] = kFake;           // as if the approved build had run it
    spit(dir + "/old.json", resealed_digests(old).dump(1));
    const CliRun e = cli("digest " + approvals + " --variant bwd_det_chunked --backend cpu --threads 1 --out " + dir +
                         "/new.json");
    ASSERT_EQ(e.code, 0) << e.out;
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string dir, approvals, real, before;
};

TEST_F(Carry, SameBitsCarryTheRecordsToThisBuild) {
  const json nd = json::parse(slurp(dir + "/new.json"));
  ASSERT_EQ(nd["entries"].size(), 3u);
  for (const auto& e : nd["entries"]) {
    EXPECT_EQ(e["source_sha256"], kFake);
    EXPECT_GT(e["cases"].get<int>(), 20);  // grid 3 families x 4 T points at least, plus refinement
    // Backward windows digest every output: y, rstd, dx, dw.
    EXPECT_TRUE(contains(e["lines"][0].get<std::string>(), " dx=")) << e["lines"][0];
    EXPECT_TRUE(contains(e["lines"][0].get<std::string>(), " dw=")) << e["lines"][0];
  }
  const CliRun c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new.json");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "3 records carried")) << c.out;
  const json a = json::parse(slurp(approvals));
  const json old = json::parse(slurp(dir + "/old.json"));
  size_t carried = 0;
  for (const auto& r : a["approvals"]) {
    if (r["variant"] != "bwd_det_chunked") {
      EXPECT_FALSE(r.contains("carried"));
      continue;
    }
    ++carried;
    EXPECT_EQ(r["source_sha256"], real);
    ASSERT_EQ(r["carried"].size(), 1u);
    EXPECT_EQ(r["carried"][0]["from_source_sha256"], kFake);
    EXPECT_EQ(r["carried"][0]["to_source_sha256"], real);
    EXPECT_EQ(r["carried"][0]["digests_old"], old["file_sha256"]);
    EXPECT_EQ(r["carried"][0]["gpu"], "cpu-model");
    EXPECT_EQ(sealed(r), r);  // sealed again over the new bytes
  }
  EXPECT_EQ(carried, 3u);
  // `normgate routes` says which approvals were carried.
  const CliRun routes = cli("routes " + dir + "/small.toml --accept-cpu-model");
  EXPECT_EQ(occurrences(routes.out, "carried by digests once"), 3u) << routes.out;
  // The file is valid, and a second carry finds nothing left to do.
  const CliRun v = cli("approvals " + approvals);
  EXPECT_EQ(v.code, 0) << v.out;
  const CliRun again = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new.json");
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(contains(again.out, "nothing to carry")) << again.out;
}

TEST_F(Carry, OneDifferentDigestRefusesEverything) {
  json nd = json::parse(slurp(dir + "/new.json"));
  auto& e = nd["entries"][1];
  std::string l = e["lines"][5].get<std::string>();
  const size_t at = l.find(" dw=") + 4;
  l[at] = l[at] == '0' ? '1' : '0';  // one bit of one case's dw digest
  e["lines"][5] = l;
  e["lines_sha256"] = lines_sha(e["lines"]);
  spit(dir + "/new.json", resealed_digests(nd).dump(1));
  const CliRun c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new.json");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "outputs differ at case 6 of")) << c.out;
  EXPECT_TRUE(contains(c.out, "nothing written")) << c.out;
  EXPECT_EQ(slurp(approvals), before);
}

TEST_F(Carry, AnEditedDigestsFileIsAUsageError) {
  std::string t = slurp(dir + "/new.json");
  const size_t at = t.find(" rstd=") + 6;
  t[at] = t[at] == '0' ? '1' : '0';  // edited without sealing again
  spit(dir + "/new.json", t);
  const CliRun c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new.json");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_TRUE(contains(c.out, "does not match its lines") || contains(c.out, "file_sha256 does not match")) << c.out;
  EXPECT_EQ(slurp(approvals), before);
}

TEST_F(Carry, OldMustBeTheApprovedBuild) {
  // NEW given twice in effect: OLD run by this build, not by the approved one.
  std::filesystem::copy_file(dir + "/new.json", dir + "/new2.json");
  json n2 = json::parse(slurp(dir + "/new2.json"));
  n2["date"] = "2000-01-01T00:00:00Z";  // another file, same build
  spit(dir + "/new2.json", resealed_digests(n2).dump(1));
  const CliRun c = cli("approvals " + approvals + " --carry " + dir + "/new2.json " + dir + "/new.json");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "OLD was not run by the build it was gated on")) << c.out;
  EXPECT_EQ(slurp(approvals), before);
  // And the two files swapped: NEW is not this build.
  const CliRun s = cli("approvals " + approvals + " --carry " + dir + "/new.json " + dir + "/old.json");
  EXPECT_EQ(s.code, 1) << s.out;
  EXPECT_EQ(slurp(approvals), before);
}

TEST(Digest, UsageErrorsBeforeAnyWork) {
  const std::string dir = std::string(NORMGATE_BINARY_DIR) + "/digest_cli_usage_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string ap = kData + "/../routes/small.toml";  // not an approvals file
  CliRun r = cli("digest " + dir + "/none.json --variant bwd_det_chunked --backend cpu --out " + dir + "/d.json");
  EXPECT_EQ(r.code, 2) << r.out;  // a missing approvals file holds no approval
  EXPECT_TRUE(contains(r.out, "holds no valid cpu-model approval")) << r.out;
  r = cli("digest " + dir + "/none.json --variant no_such_variant --backend cpu --out " + dir + "/d.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "no_such_variant")) << r.out;
  r = cli("digest " + dir + "/none.json --variant bwd_det_chunked --backend cpu --deadline -1 --out " + dir + "/d.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/d.json"));
  std::filesystem::remove_all(dir);
  (void)ap;
}

}  // namespace
