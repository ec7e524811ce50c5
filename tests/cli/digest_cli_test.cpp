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
#include <map>
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

// One bit of the dw digest of line `k` of a digests entry flipped (its
// lines_sha256 updated; the file still needs resealed_digests).
void flip_dw(json& e, size_t k) {
  std::string l = e["lines"][k].get<std::string>();
  const size_t at = l.find(" dw=") + 4;
  l[at] = l[at] == '0' ? '1' : '0';
  e["lines"][k] = l;
  e["lines_sha256"] = lines_sha(e["lines"]);
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
    const CliRun g = cli("gate " + dir + "/small.toml --windows variant=" + variant_ + " --approve" + kFast);
    ASSERT_EQ(g.code, 0) << g.out;
    json a = json::parse(slurp(approvals));
    size_t n = 0;
    for (auto& r : a["approvals"])
      if (r["variant"] == variant_) {
        real = r["source_sha256"].get<std::string>();
        r["source_sha256"] = kFake;
        r = sealed(r);
        ++n;
      }
    ASSERT_EQ(n, windows_);  // the table's windows of the variant
    spit(approvals, a.dump(1));
    before = slurp(approvals);
    const CliRun d = cli("digest " + approvals + " --variant " + variant_ + " --backend cpu --threads 1 --out " + dir +
                         "/old.json");
    ASSERT_EQ(d.code, 0) << d.out;
    json old = json::parse(slurp(dir + "/old.json"));
    ASSERT_EQ(old["variants"][variant_], real);  // this build's hash, recorded
    old["variants"][variant_] = kFake;           // as if the approved build had run it
    old["normgate_commit"] = "0123456789ab";              // ... another commit
    spit(dir + "/old.json", resealed_digests(old).dump(1));
    const CliRun e = cli("digest " + approvals + " --variant " + variant_ + " --backend cpu --threads 1 --out " + dir +
                         "/new.json");
    ASSERT_EQ(e.code, 0) << e.out;
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string dir, approvals, real, before;
  std::string variant_ = "bwd_det_chunked";
  size_t windows_ = 3;  // small.toml's windows of variant_
  // NEW with one bit of the dw digest of case k of its second entry flipped
  // (sealed again).
  void flip_new_dw(size_t k) const {
    json nd = json::parse(slurp(dir + "/new.json"));
    flip_dw(nd["entries"][1], k);
    spit(dir + "/new.json", resealed_digests(nd).dump(1));
  }
  // `approvals APPROVALS --carry OLD NEW` with `extra` options.
  CliRun carry(const std::string& extra = "") const {
    return cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new.json" + extra);
  }
};
// The same fixture on the nondet variant's two windows.
class CarryNondet : public Carry {
 protected:
  CarryNondet() {
    variant_ = "bwd_nondet_atomic";
    windows_ = 2;
  }
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
  // A rebuilt campaign whose size is not the record's says both counts.
  size_t other_count = 0;
  for (const auto& e : nd["entries"]) other_count += e["cases"] != e["approval_cases"] ? 1 : 0;
  EXPECT_EQ(occurrences(c.out, "(the record says "), other_count) << c.out;
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
  // Digests of another file's records: said, not silent.
  json other = json::parse(slurp(approvals));
  other["approvals"] = json::array();
  spit(dir + "/other.approvals.json", other.dump(1));
  const CliRun o = cli("approvals " + dir + "/other.approvals.json --carry " + dir + "/old.json " + dir + "/new.json");
  EXPECT_EQ(o.code, 0) << o.out;
  EXPECT_TRUE(contains(o.out, "no record of " + dir + "/other.approvals.json is in both digests files")) << o.out;
  EXPECT_TRUE(contains(o.out, "written from \"" + approvals + "\"")) << o.out;
  EXPECT_TRUE(contains(o.out, "nothing to carry")) << o.out;
}

TEST_F(Carry, OneDifferentDigestRefusesEverything) {
  flip_new_dw(5);  // one bit of one case's dw digest
  const CliRun c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new.json");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "outputs differ at case 6 of")) << c.out;
  EXPECT_TRUE(contains(c.out, "nothing written")) << c.out;
  EXPECT_EQ(slurp(approvals), before);
}

// --partial: a record whose outputs differ is LEFT stale and the others are
// carried and written (exit 1); a refusal of another kind still writes nothing.
TEST_F(CarryNondet, PartialCarriesTheRecordsThatAgreeAndLeavesTheRest) {
  flip_new_dw(3);
  const CliRun c = carry(" --partial");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_EQ(occurrences(c.out, "\nLEFT "), 1u) << c.out;
  EXPECT_TRUE(contains(c.out, "outputs differ at case 4 of")) << c.out;
  EXPECT_TRUE(contains(c.out, "1 record carried")) << c.out;
  EXPECT_TRUE(contains(c.out, "1 record left as it is")) << c.out;
  const json a = json::parse(slurp(approvals));
  size_t carried = 0, left = 0;
  for (const auto& r : a["approvals"]) {
    if (r["variant"] != variant_) continue;
    EXPECT_EQ(sealed(r), r);
    if (r.contains("carried") && !r["carried"].empty()) {
      EXPECT_EQ(r["source_sha256"], real);
      ++carried;
    } else {
      EXPECT_EQ(r["source_sha256"], kFake);  // the one whose dw differs stays stale
      ++left;
    }
  }
  EXPECT_EQ(carried, 1u);
  EXPECT_EQ(left, 1u);
  // Run again: the carried ones are already this build's; the flipped one is
  // LEFT again, nothing written.
  const std::string after = slurp(approvals);
  const CliRun again = carry(" --partial");
  EXPECT_EQ(again.code, 1) << again.out;
  EXPECT_TRUE(contains(again.out, "nothing carried")) << again.out;
  EXPECT_EQ(slurp(approvals), after);
}

// A deterministic variant's bits must not vary: --partial leaves none of
// its records; one differing case refuses the whole carry as without it.
TEST_F(Carry, PartialDoesNotLeaveADeterministicVariantsRecords) {
  flip_new_dw(3);
  const CliRun c = carry(" --partial");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "REFUSED")) << c.out;
  EXPECT_TRUE(contains(c.out, "leaves only a nondet variant's records")) << c.out;
  EXPECT_FALSE(contains(c.out, "\nLEFT ")) << c.out;
  EXPECT_TRUE(contains(c.out, "nothing written")) << c.out;
  EXPECT_EQ(slurp(approvals), before);
}

TEST_F(CarryNondet, PartialStillRefusesEverythingOnAnyOtherRefusal) {
  json nd = json::parse(slurp(dir + "/new.json"));
  flip_dw(nd["entries"][1], 3);  // one record's outputs differ ...
  {
    auto& e = nd["entries"][0];  // ... and another's campaign lost a case
    e["lines"].erase(e["lines"].size() - 1);
    e["cases"] = e["lines"].size();
    e["lines_sha256"] = lines_sha(e["lines"]);
  }
  spit(dir + "/new.json", resealed_digests(nd).dump(1));
  const CliRun c = carry(" --partial");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "REFUSED")) << c.out;
  EXPECT_TRUE(contains(c.out, "nothing written")) << c.out;
  EXPECT_EQ(slurp(approvals), before);
  // A bit difference does not hide a later case that lost outputs on one
  // side (the same record): still a refusal, nothing written.
  nd = json::parse(slurp(dir + "/new.json"));
  {
    auto& e0 = nd["entries"][0];
    e0["lines"] = json::parse(slurp(dir + "/old.json"))["entries"][0]["lines"];  // the short campaign undone
    e0["cases"] = e0["lines"].size();
    e0["lines_sha256"] = lines_sha(e0["lines"]);
    auto& e = nd["entries"][1];  // its dw bit at case 4 still flipped
    std::string l = e["lines"][5].get<std::string>();
    l.erase(l.find(" dx="));  // case 6: dx and dw digested on OLD's side only
    e["lines"][5] = l;
    e["lines_sha256"] = lines_sha(e["lines"]);
  }
  spit(dir + "/new.json", resealed_digests(nd).dump(1));
  const CliRun masked = carry(" --partial");
  EXPECT_EQ(masked.code, 1) << masked.out;
  EXPECT_TRUE(contains(masked.out, "REFUSED")) << masked.out;
  EXPECT_TRUE(contains(masked.out, "digested different outputs")) << masked.out;
  EXPECT_TRUE(contains(masked.out, "nothing written")) << masked.out;
  EXPECT_EQ(slurp(approvals), before);
  // --partial belongs to --carry.
  const CliRun u = cli("approvals " + approvals + " --partial");
  EXPECT_EQ(u.code, 2) << u.out;
  EXPECT_TRUE(contains(u.out, "--partial goes with --carry only")) << u.out;
}

// Rewrites every line of one digests file with f, into `to` (default: the
// same file), with another format string when one is given; sealed again.
template <class F>
void edit_lines(const std::string& path, F&& f, const std::string& to = "", const std::string& format = "") {
  json d = json::parse(slurp(path));
  if (!format.empty()) d["format"] = format;
  for (auto& e : d["entries"]) {
    for (auto& l : e["lines"]) l = f(l.get<std::string>());
    e["lines_sha256"] = lines_sha(e["lines"]);
  }
  spit(to.empty() ? path : to, resealed_digests(d).dump(1));
}
// The line with " msq=<16 hex>" inserted after its rstd digest.
std::string with_msq(const std::string& l, char fill) {
  const size_t at = l.find(" rstd=") + 6 + 16;
  return l.substr(0, at) + " msq=" + std::string(16, fill) + l.substr(at);
}

// The fixture as if it had run on a GPU: the records' backend and device and
// both files' set to "gpu" / kGpu (all sealed again), msq on every line of
// both files as a /2 file of the GPU has.
const std::string kGpu = "NVIDIA H200";
void as_gpu(const std::string& approvals, const std::string& dir) {
  json a = json::parse(slurp(approvals));
  std::map<std::string, std::string> resealed;  // old record_sha256 -> new
  for (auto& r : a["approvals"])
    if (r["variant"] == "bwd_det_chunked") {
      const std::string was = r["record_sha256"].get<std::string>();
      r["backend"] = "gpu";
      r["gpu"] = kGpu;
      r["driver"] = "580.159.04";  // what a GPU gate records ("-" only in cpu-model records)
      r["cuda"] = "13.0";
      r = sealed(r);
      resealed[was] = r["record_sha256"].get<std::string>();
    }
  spit(approvals, a.dump(1));
  for (const char* f : {"/old.json", "/new.json"}) {
    json d = json::parse(slurp(dir + f));
    d["backend"] = "gpu";
    d["gpu"] = kGpu;
    if (d.contains("driver")) d["driver"] = "580.159.04";
    for (auto& e : d["entries"]) e["record_sha256"] = resealed.at(e["record_sha256"].get<std::string>());
    spit(dir + f, resealed_digests(d).dump(1));
    edit_lines(dir + f, [](const std::string& l) { return with_msq(l, 'c'); });
  }
}

// A well-formed GPU line made malformed in one of six ways: a second y, two
// spaces, an upper-case hex digit, no msq, dw without dx's partner, no case id.
std::string spoiled_line(int kind, std::string l) {
  switch (kind) {
    case 0: l.insert(l.find(" rstd="), " y=" + std::string(16, '0')); break;
    case 1: l.replace(l.find(" rstd="), 1, "  "); break;
    case 2: l[l.find(" y=") + 3] = 'A'; break;
    case 3: l.erase(l.find(" msq="), 21); break;
    case 4: l.erase(l.find(" dw=")); break;
    default: l = l.substr(l.find(' ') + 1); break;
  }
  return l;
}

TEST_F(Carry, MsqIsComparedWhereBothFilesHoldIt) {
  as_gpu(approvals, dir);
  const std::string gpu_before = slurp(approvals);
  // Both /2 files of the GPU, msq equal: carried, no note.
  CliRun c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new.json");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "3 records carried")) << c.out;
  EXPECT_FALSE(contains(c.out, "msq was digested on one side only")) << c.out;
  spit(approvals, gpu_before);
  // msq differing in one case: refused, naming msq, nothing written.
  {
    json d = json::parse(slurp(dir + "/new.json"));
    auto& e = d["entries"][0];
    std::string l = e["lines"][2].get<std::string>();
    l.replace(l.find(" msq=") + 5, 16, std::string(16, 'd'));
    e["lines"][2] = l;
    e["lines_sha256"] = lines_sha(e["lines"]);
    spit(dir + "/new_d.json", resealed_digests(d).dump(1));
  }
  c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new_d.json");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "outputs differ at case 3 of")) << c.out;
  EXPECT_TRUE(contains(c.out, "(msq)")) << c.out;
  EXPECT_EQ(slurp(approvals), gpu_before);
  // OLD from before msq was digested (a /1 file of the GPU, no msq): carried
  // on every other output, with a note saying msq was not compared.
  edit_lines(dir + "/old.json", [](std::string l) { return l.erase(l.find(" msq="), 21); }, dir + "/old1.json",
             "normgate-digests/1");
  c = cli("approvals " + approvals + " --carry " + dir + "/old1.json " + dir + "/new.json");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "3 records carried")) << c.out;
  EXPECT_TRUE(contains(c.out, "msq was digested on one side only for 3 of them")) << c.out;
  spit(approvals, gpu_before);
  // Other outputs on one side only (NEW without dx and dw): refused.
  edit_lines(dir + "/new.json", [](std::string l) { return l.erase(l.find(" dx=")); }, dir + "/new_fwd.json");
  c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new_fwd.json");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "OLD and NEW digested different outputs at case 1 of")) << c.out;
  EXPECT_TRUE(contains(c.out, "dw (OLD only)")) << c.out;
  EXPECT_EQ(slurp(approvals), gpu_before);
  // Lines that are not the writer's form, and msq where the format has none
  // or missing where it must be: the file is refused (exit 2), nothing written.
  const char* const needles[] = {"is not an output digest in its place", "is not an output digest in its place",
                                  "is not 16 lower-case hex digits", "no msq digest", "dx and dw not both digested",
                                  "does not start with a case id"};
  for (int kind = 0; kind < 6; ++kind) {
    const std::string needle = needles[kind];
    edit_lines(dir + "/new.json", [kind](const std::string& l) { return spoiled_line(kind, l); }, dir + "/new_bad.json");
    c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new_bad.json");
    EXPECT_EQ(c.code, 2) << needle << "\n" << c.out;
    EXPECT_TRUE(contains(c.out, needle)) << c.out;
    EXPECT_EQ(slurp(approvals), gpu_before);
  }
  edit_lines(dir + "/old.json", [](const std::string& l) { return l; }, dir + "/old1msq.json", "normgate-digests/1");
  c = cli("approvals " + approvals + " --carry " + dir + "/old1msq.json " + dir + "/new.json");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_TRUE(contains(c.out, "an msq digest (a normgate-digests/1 file")) << c.out;
}

TEST_F(Carry, DigestsOfTheCpuModelsHoldNoMsqAndInvalidRecordsAreNamed) {
  // msq in a file of the CPU models: refused as the wrong form.
  edit_lines(dir + "/new.json", [](const std::string& l) { return with_msq(l, 'c'); }, dir + "/new_msq.json");
  CliRun c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new_msq.json");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_TRUE(contains(c.out, "an msq digest (a normgate-digests/2 file of backend cpu-model has none)")) << c.out;
  // A record edited without its seal: named as INVALID and refused, nothing written.
  json a = json::parse(slurp(approvals));
  for (auto& r : a["approvals"])
    if (r["variant"] == "bwd_det_chunked") {
      r["cases"] = r["cases"].get<int>() + 1;
      break;
    }
  spit(approvals, a.dump(1));
  const std::string edited = slurp(approvals);
  c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new.json");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "is INVALID (")) << c.out;
  EXPECT_FALSE(contains(c.out, "no record of")) << c.out;
  EXPECT_EQ(slurp(approvals), edited);
  // A document nested deeper than the schema allows: refused before its seal is computed.
  std::string deep = R"({"format":"normgate-digests/2","file_sha256":"x","deep":)";
  deep += std::string(100000, '[') + std::string(100000, ']') + "}";
  spit(dir + "/deep.json", deep);
  c = cli("approvals " + approvals + " --carry " + dir + "/deep.json " + dir + "/new.json");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_TRUE(contains(c.out, "unknown key 'deep'")) << c.out;
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

TEST_F(Carry, OnlyEvidenceOfTheRecordsOwnSourceAndCampaignCounts) {
  // OLD run by this build, not by the approved one: it says nothing of the
  // records (keyed to kFake): nothing carried, the file unchanged.
  json n2 = json::parse(slurp(dir + "/new.json"));
  n2["normgate_commit"] = "fedcba987654";
  spit(dir + "/new2.json", resealed_digests(n2).dump(1));
  CliRun c = cli("approvals " + approvals + " --carry " + dir + "/new2.json " + dir + "/new.json");
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "OLD's build has " + real.substr(0, 12) + "; left as it is")) << c.out;
  EXPECT_TRUE(contains(c.out, "nothing to carry")) << c.out;
  EXPECT_EQ(slurp(approvals), before);
  // The two files swapped: the same.
  c = cli("approvals " + approvals + " --carry " + dir + "/new.json " + dir + "/old.json");
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(slurp(approvals), before);
  // Both files cut to one case each (sealed again): not the record's campaign.
  for (const char* f : {"/old.json", "/new.json"}) {
    json d = json::parse(slurp(dir + f));
    for (auto& e : d["entries"]) {
      e["lines"] = json::array({e["lines"][0]});
      e["lines_sha256"] = lines_sha(e["lines"]);
    }
    spit(dir + f + std::string(".cut"), resealed_digests(d).dump(1));
  }
  c = cli("approvals " + approvals + " --carry " + dir + "/old.json.cut " + dir + "/new.json.cut");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "OLD holds 1 cases, the record's campaign")) << c.out;
  EXPECT_FALSE(contains(c.out, "bit for bit")) << c.out;  // nothing claimed on a refusal
  EXPECT_EQ(slurp(approvals), before);
  // OLD and NEW from one clean commit cannot be two sources.
  json o1 = json::parse(slurp(dir + "/old.json")), n1 = json::parse(slurp(dir + "/new.json"));
  o1["normgate_commit"] = n1["normgate_commit"] = "0123456789ab";
  spit(dir + "/o1.json", resealed_digests(o1).dump(1));
  spit(dir + "/n1.json", resealed_digests(n1).dump(1));
  c = cli("approvals " + approvals + " --carry " + dir + "/o1.json " + dir + "/n1.json");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_TRUE(contains(c.out, "one commit holds one source")) << c.out;
  EXPECT_EQ(slurp(approvals), before);
  // A digests file whose format is not a string, or whose entries are not an array: usage errors.
  json bad = json::parse(slurp(dir + "/new.json"));
  bad["entries"] = json::object();
  spit(dir + "/bad.json", resealed_digests(bad).dump(1));
  c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/bad.json");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_TRUE(contains(c.out, "'entries' is not an array")) << c.out;
  bad = json::parse(slurp(dir + "/new.json"));
  bad["format"] = 1;
  spit(dir + "/bad.json", bad.dump(1));
  c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/bad.json");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_TRUE(contains(c.out, "bad.json: format is not")) << c.out;
  EXPECT_EQ(slurp(approvals), before);
}

TEST_F(Carry, ARecordReKeyedAfterACarryCarriesAgain) {
  // Carry once, then a comment-only re-key moves source_sha256 (the chain
  // keeps its hashes): a second carry from the re-keyed hash is valid.
  ASSERT_EQ(cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new.json").code, 0);
  const std::string rekeyed(64, 'c');
  json a = json::parse(slurp(approvals));
  for (auto& r : a["approvals"])
    if (r["variant"] == "bwd_det_chunked") {
      r["source_sha256"] = rekeyed;
      r = sealed(r);
    }
  spit(approvals, a.dump(1));
  ASSERT_EQ(cli("approvals " + approvals).code, 0);
  for (const char* side : {"old", "new"}) {
    const CliRun d = cli("digest " + approvals + " --variant bwd_det_chunked --backend cpu --threads 1 --out " + dir +
                         "/" + side + "2.json");
    ASSERT_EQ(d.code, 0) << d.out;
  }
  json o2 = json::parse(slurp(dir + "/old2.json"));
  o2["variants"]["bwd_det_chunked"] = rekeyed;
  o2["normgate_commit"] = "0123456789ab";
  spit(dir + "/old2.json", resealed_digests(o2).dump(1));
  const CliRun c = cli("approvals " + approvals + " --carry " + dir + "/old2.json " + dir + "/new2.json");
  ASSERT_EQ(c.code, 0) << c.out;
  const CliRun v = cli("approvals " + approvals);
  EXPECT_EQ(v.code, 0) << v.out;
  // (The parsed file held in a variable: a range-for over a member of a
  // temporary would walk a destroyed object and check nothing.)
  const json after = json::parse(slurp(approvals));
  size_t n = 0;
  for (const auto& r : after["approvals"])
    if (r["variant"] == "bwd_det_chunked") {
      ++n;
      ASSERT_EQ(r["carried"].size(), 2u);
      EXPECT_EQ(r["carried"][1]["from_source_sha256"], rekeyed);
      EXPECT_EQ(r["source_sha256"], real);
    }
  EXPECT_EQ(n, 3u);
}

TEST_F(Carry, TheLastCarrysNewDigestsServeAsTheNextCarrysOld) {
  // The records as a carry left them: carried from kFrom to kFake by a
  // digests file F (the NEW side of that carry: its build is kFake, its
  // entries name each record as it was before, keyed to kFrom). A carry
  // gives a record a new record_sha256, so F's entries match no record by
  // it; they match through the record's last carry, which names F.
  const std::string kFrom(64, 'b');
  const json base = json::parse(slurp(approvals));
  json od = json::parse(slurp(dir + "/old.json"));
  for (auto& e : od["entries"]) e["source_sha256"] = kFrom;
  od = resealed_digests(od);
  spit(dir + "/old.json", od.dump(1));
  // The approvals with that last carry naming digests file `f`; NEW digests
  // of them by this build to new2.json.
  auto chain_to = [&](const json& f) {
    json a = base;
    for (auto& r : a["approvals"])
      if (r["variant"] == "bwd_det_chunked") {
        r["carried"] = json::array({json{{"from_source_sha256", kFrom}, {"to_source_sha256", kFake},
                                         {"digests_old", std::string(64, 'd')}, {"digests_new", f["file_sha256"]},
                                         {"cases", 10}, {"gpu", "cpu-model"}, {"date", "2026-12-01T00:00:00Z"},
                                         {"normgate_commit", "0123456789ab"}}});
        r = sealed(r);
      }
    spit(approvals, a.dump(1));
    const CliRun v = cli("approvals " + approvals);
    EXPECT_EQ(v.code, 0) << v.out;
    const CliRun d = cli("digest " + approvals + " --variant bwd_det_chunked --backend cpu --threads 1 --out " +
                         dir + "/new2.json");
    EXPECT_EQ(d.code, 0) << d.out;
    return slurp(approvals);
  };
  // F's entry naming another source than the one the record was carried
  // from is not the record's campaign: refused, nothing written.
  json wrong = od;
  wrong["entries"][0]["source_sha256"] = kFake;
  wrong = resealed_digests(wrong);
  spit(dir + "/wrong.json", wrong.dump(1));
  std::string chained = chain_to(wrong);
  CliRun c = cli("approvals " + approvals + " --carry " + dir + "/wrong.json " + dir + "/new2.json");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "names another record")) << c.out;
  EXPECT_EQ(slurp(approvals), chained);
  // A digests file the last carry does not name (F sealed again): the
  // records are in one file only, nothing carried.
  chained = chain_to(od);
  json other = od;
  other["date"] = "2026-12-02T00:00:00Z";
  spit(dir + "/other.json", resealed_digests(other).dump(1));
  c = cli("approvals " + approvals + " --carry " + dir + "/other.json " + dir + "/new2.json");
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(occurrences(c.out, "in one digests file only"), 3u) << c.out;
  EXPECT_TRUE(contains(c.out, "nothing to carry")) << c.out;
  EXPECT_EQ(slurp(approvals), chained);
  // F itself: every record carried, the chain one longer.
  c = cli("approvals " + approvals + " --carry " + dir + "/old.json " + dir + "/new2.json");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "3 records carried")) << c.out;
  EXPECT_TRUE(contains(c.out, "3 of them found in OLD through their last carry")) << c.out;
  EXPECT_EQ(cli("approvals " + approvals).code, 0);
  const json after = json::parse(slurp(approvals));
  size_t n = 0;
  for (const auto& r : after["approvals"])
    if (r["variant"] == "bwd_det_chunked") {
      ++n;
      ASSERT_EQ(r["carried"].size(), 2u);
      EXPECT_EQ(r["carried"][1]["from_source_sha256"], kFake);
      EXPECT_EQ(r["carried"][1]["digests_old"], od["file_sha256"]);
      EXPECT_EQ(r["source_sha256"], real);
    }
  EXPECT_EQ(n, 3u);
}

// Approval by bitwise equivalence (docs/perf/routes.md D23), on the CPU
// models: bwd_det_wreg runs bwd_det_chunked's approved campaigns bit for
// bit, so it gets their records with a 'vouched' entry; a variant whose
// bits differ (bwd_fp32_blocked: FP32 partials) is refused, writing nothing.
TEST(Vouch, AnEquivalentVariantGetsTheRecordsAndADifferentOneIsRefused) {
  const std::string dir = std::string(NORMGATE_BINARY_DIR) + "/vouch_cli_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kData + "/small.toml", dir + "/small.toml");
  std::filesystem::copy_file(kData + "/small.policy.toml", dir + "/small.policy.toml");
  const std::string ap = dir + "/small.approvals.json";
  ASSERT_EQ(cli("gate " + dir + "/small.toml --windows variant=bwd_det_chunked --approve" + kFast).code, 0);
  const std::string dig = "digest " + ap + " --variant bwd_det_chunked --backend cpu --threads 1 --out " + dir;
  ASSERT_EQ(cli(dig + "/v.json").code, 0);
  CliRun c = cli(dig + "/w.json --as bwd_det_wreg");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "-> bwd_det_chunked run as bwd_det_wreg")) << c.out;
  const json wd = json::parse(slurp(dir + "/w.json"));
  EXPECT_EQ(wd["ran_as"], json({{"bwd_det_chunked", "bwd_det_wreg"}}));
  ASSERT_TRUE(wd["variants"].contains("bwd_det_wreg"));
  // Usage errors before any work: the same variant, a nondet or control
  // one, another op, a variant that does not run a record's window.
  for (const auto& [as, why] : std::vector<std::pair<std::string, std::string>>{
           {"bwd_det_chunked", "the same variant"},
           {"bwd_nondet_atomic", "not deterministic"},
           {"ctl_fp32_seq", "a negative control"},
           {"fwd_rowwise", "a fwd variant"},
           {"bwd_det_wide", "does not run bwd det H=64"}}) {
    c = cli(dig + "/x.json --as " + as);
    EXPECT_EQ(c.code, 2) << as << ": " << c.out;
    EXPECT_TRUE(contains(c.out, why)) << as << ": " << c.out;
    EXPECT_FALSE(std::filesystem::exists(dir + "/x.json"));
  }
  // A `digest --as` file is no evidence for a carry.
  c = cli("approvals " + ap + " --carry " + dir + "/v.json " + dir + "/w.json");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_TRUE(contains(c.out, "evidence for --vouch, not for a carry")) << c.out;
  // The files in the wrong order, or a plain file where --as was needed.
  const std::string before = slurp(ap);
  c = cli("approvals " + ap + " --vouch " + dir + "/w.json " + dir + "/v.json");
  EXPECT_EQ(c.code, 2) << c.out;
  c = cli("approvals " + ap + " --vouch " + dir + "/v.json " + dir + "/v.json");
  EXPECT_EQ(c.code, 2) << c.out;
  // Different bits: refused, nothing written.
  ASSERT_EQ(cli(dig + "/f.json --as bwd_fp32_blocked").code, 0);
  c = cli("approvals " + ap + " --vouch " + dir + "/v.json " + dir + "/f.json");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_EQ(occurrences(c.out, "REFUSED"), 3u) << c.out;
  EXPECT_TRUE(contains(c.out, "outputs differ: dw at case")) << c.out;
  EXPECT_EQ(slurp(ap), before);
  // The same bits: three records of bwd_det_wreg, each its voucher's
  // verdict and campaign, sealed, the file valid.
  c = cli("approvals " + ap + " --vouch " + dir + "/v.json " + dir + "/w.json");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "3 records of bwd_det_wreg added")) << c.out;
  EXPECT_EQ(cli("approvals " + ap).code, 0);
  const json a = json::parse(slurp(ap));
  const json vd = json::parse(slurp(dir + "/v.json"));
  std::map<std::string, json> chunked;
  for (const auto& r : a["approvals"])
    if (r["variant"] == "bwd_det_chunked") chunked[r["record_sha256"].get<std::string>()] = r;
  size_t n = 0;
  for (const auto& r : a["approvals"]) {
    if (r["variant"] != "bwd_det_wreg") continue;
    ++n;
    ASSERT_TRUE(r.contains("vouched")) << r.dump();
    const json& v = r["vouched"];
    EXPECT_EQ(v["variant"], "bwd_det_chunked");
    EXPECT_EQ(v["digests_v"], vd["file_sha256"]);
    EXPECT_EQ(v["digests_w"], wd["file_sha256"]);
    ASSERT_TRUE(chunked.count(v["record_sha256"].get<std::string>())) << v.dump();
    const json& from = chunked[v["record_sha256"].get<std::string>()];
    EXPECT_EQ(r["window"], from["window"]);
    EXPECT_EQ(r["max_err_tol"], from["max_err_tol"]);
    EXPECT_EQ(r["seed_set"], from["seed_set"]);
    EXPECT_EQ(r["source_sha256"], wd["variants"]["bwd_det_wreg"]);
    EXPECT_EQ(sealed(r), r);
  }
  EXPECT_EQ(n, 3u);
  // A table that routes bwd_det_wreg there finds its windows approved, and
  // `normgate routes` says by what.
  std::string table = slurp(dir + "/small.toml");
  for (size_t at; (at = table.find("\"bwd_det_chunked\"")) != std::string::npos;)
    table.replace(at, 17, "\"bwd_det_wreg\"");
  spit(dir + "/w.toml", table);
  std::filesystem::copy_file(ap, dir + "/w.approvals.json");
  std::filesystem::copy_file(dir + "/small.policy.toml", dir + "/w.policy.toml");
  c = cli("routes " + dir + "/w.toml --accept-cpu-model");
  EXPECT_EQ(occurrences(c.out, "vouched for by bwd_det_chunked's record"), 3u) << c.out;
  // Again: the same records replaced by equal ones (one per window).
  c = cli("approvals " + ap + " --vouch " + dir + "/v.json " + dir + "/w.json");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(occurrences(c.out, "replaced cpu-model approval"), 3u) << c.out;
  EXPECT_EQ(json::parse(slurp(ap))["approvals"].size(), a["approvals"].size());
  // A vouched record does not vouch (one step: a failure of the gated
  // record reaches every record resting on it).
  const std::string wdig = "digest " + ap + " --variant bwd_det_wreg --backend cpu --threads 1 --out " + dir;
  ASSERT_EQ(cli(wdig + "/wv.json").code, 0);
  ASSERT_EQ(cli(wdig + "/wo.json --as bwd_det_onepass").code, 0);
  const std::string vouched_file = slurp(ap);
  c = cli("approvals " + ap + " --vouch " + dir + "/wv.json " + dir + "/wo.json");
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(occurrences(c.out, "a vouched record does not vouch"), 3u) << c.out;
  EXPECT_TRUE(contains(c.out, "nothing to vouch for")) << c.out;
  EXPECT_EQ(slurp(ap), vouched_file);
  // ran_as naming V for itself (a digests file edited and sealed again).
  json self = wd;
  self["ran_as"] = {{"bwd_det_chunked", "bwd_det_chunked"}};
  spit(dir + "/self.json", resealed_digests(self).dump(1));
  c = cli("approvals " + ap + " --vouch " + dir + "/v.json " + dir + "/self.json");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_TRUE(contains(c.out, "for itself")) << c.out;
  // W's own current gate record of a window stays; a current rejection of
  // W inside a window refuses the vouch there.
  spit(ap, before);
  ASSERT_EQ(cli("gate " + dir + "/w.toml --windows variant=bwd_det_wreg --approve" + kFast).code, 0);
  const std::string wgated = slurp(dir + "/w.approvals.json");
  c = cli("approvals " + dir + "/w.approvals.json --vouch " + dir + "/v.json " + dir + "/w.json");
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_EQ(occurrences(c.out, "has a current record of its own gate there"), 3u) << c.out;
  EXPECT_EQ(slurp(dir + "/w.approvals.json"), wgated);
  json rj = {{"format", "normgate-rejections/1"}, {"rejections", json::array()}};
  json rec = {{"backend", "cpu-model"}, {"date", "2026-12-04T12:00:00Z"}, {"gated_T", {1, 100}}, {"gpu", "cpu-model"},
              {"normgate_commit", "0123456789ab"}, {"normgate_version", "0.2.0"},
              {"source_sha256", wd["variants"]["bwd_det_wreg"]}, {"variant", "bwd_det_wreg"},
              {"window", {{"H", 64}, {"T", {50, 60}}, {"form", "plain"}, {"mode", "det"}, {"op", "bwd"}, {"w", "bf16"}}},
              {"worst_case", "H=64,T=50,w=bf16,form=plain,family=cancel,seed=0"}, {"worst_err_tol", 1.5},
              {"worst_output", "dw"}};
  rj["rejections"].push_back(sealed(rec));
  spit(dir + "/small.rejections.json", rj.dump(1));
  c = cli("approvals " + ap + " --vouch " + dir + "/v.json " + dir + "/w.json");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "bwd_det_wreg is rejected inside this window")) << c.out;
  EXPECT_EQ(slurp(ap), before);
  std::filesystem::remove(dir + "/small.rejections.json");
  // An INVALID record of V that both files hold refuses the vouch.
  json inv = json::parse(before);
  for (auto& r : inv["approvals"])
    if (r["variant"] == "bwd_det_chunked") {
      r["cases"] = r["cases"].get<int>() + 1;  // its seal no longer holds
      break;
    }
  spit(ap, inv.dump(1));
  const std::string invalid_file = slurp(ap);
  c = cli("approvals " + ap + " --vouch " + dir + "/v.json " + dir + "/w.json");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "is INVALID")) << c.out;
  EXPECT_EQ(slurp(ap), invalid_file);
  std::filesystem::remove_all(dir);
}

// --windows runs only the records whose window the filter selects (gate
// --windows syntax), --current only those of this build's source; --this-gpu (gpu records gated on this GPU model) needs
// the gpu backend. Refusals before any work, nothing written.
TEST_F(Carry, DigestWindowsSelectsRecordsAndThisGpuNeedsTheGpuBackend) {
  const std::string base = "digest " + approvals + " --variant bwd_det_chunked --backend cpu --threads 1 --out ";
  CliRun r = cli(base + dir + "/w.json --windows 'H=64,T=50'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "note: 2 records outside --windows left out")) << r.out;
  const json w = json::parse(slurp(dir + "/w.json"));
  ASSERT_EQ(w["entries"].size(), 1u);
  EXPECT_EQ(w["entries"][0]["window"], "bwd det H=64 w=bf16 form=plain T=1..100");
  // Its lines are the unfiltered run's for that record, bit for bit.
  const json all = json::parse(slurp(dir + "/new.json"));
  bool found = false;
  for (const auto& e : all["entries"])
    if (e["record_sha256"] == w["entries"][0]["record_sha256"]) {
      EXPECT_EQ(e["lines"], w["entries"][0]["lines"]);
      found = true;
    }
  EXPECT_TRUE(found);
  r = cli(base + dir + "/x.json --windows 'H=999'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "3 outside --windows")) << r.out;
  r = cli(base + dir + "/x.json --windows 'colour=red'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "colour")) << r.out;
  // The fixture's records are keyed to an older source (kFake): --current runs none.
  r = cli(base + dir + "/x.json --current");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "3 of another source (--current)")) << r.out;
  r = cli(base + dir + "/x.json --this-gpu");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--this-gpu: selects gpu records by the GPU model they were gated on; it needs "
                               "--backend gpu"))
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.json"));
}

TEST(Digest, UsageErrorsBeforeAnyWork) {
  const std::string dir = std::string(NORMGATE_BINARY_DIR) + "/digest_cli_usage_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  CliRun r = cli("digest " + dir + "/none.json --variant bwd_det_chunked --backend cpu --out " + dir + "/d.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "none.json: no such file")) << r.out;
  spit(dir + "/empty.approvals.json", "{\"format\": \"normgate-approvals/1\", \"approvals\": []}");
  r = cli("digest " + dir + "/empty.approvals.json --variant bwd_det_chunked --backend cpu --out " + dir + "/d.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "holds no valid cpu-model approval")) << r.out;
  r = cli("digest " + dir + "/empty.approvals.json --variant bwd_det_chunked --backend cpu --out -");
  EXPECT_EQ(r.code, 2) << r.out;
  r = cli("digest " + dir + "/empty.approvals.json --variant no_such_variant --backend cpu --out " + dir + "/d.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "no_such_variant")) << r.out;
  r = cli("digest " + dir + "/empty.approvals.json --variant bwd_det_chunked --backend cpu --deadline -1 --out " + dir +
          "/d.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/d.json"));
  std::filesystem::remove_all(dir);
}

}  // namespace
