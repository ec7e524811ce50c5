// tests/cli/approvals_cli_test.cpp: the approvals file as a user meets it:
// records with impossible values are INVALID (never current; `normgate
// routes` lists them and exits 1, `--pick` refuses), a changed byte fails the
// record's digest, `normgate approvals` checks and seals files, and gates that
// approve side by side keep every record (the binary locks PATH.lock from
// its re-read to after the rename).
#include <gtest/gtest.h>

#include "cli_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/routing/rejections.h"
#include "util/rejection_fixture.h"
#include "normgate/seeds/generate.h"  // sha256_hex

namespace {

using normgate::test::contains;
using normgate::test::CliRun;
using nlohmann::json;

const std::string kBin = normgate::test::normgate_bin();
const std::string kData = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes";
// The CLI tests' fast campaign (meets small.policy.toml's minimum on the CPU models).
const std::string kFast = " --backend cpu --threads 1 --seeds 3x1 --t-per-window 4 --dense-points 2 --quiet";
// The call that the H=256 window (bwd det w=fp32 T=1..300) of small.toml serves.
const std::string kPick = " --pick op=bwd,mode=det,H=256,w=fp32,T=200 --accept-cpu-model";

CliRun cli(const std::string& args) { return normgate::test::run_normgate(args); }

using normgate::test::occurrences;
using normgate::test::slurp;
using normgate::test::spit;

// A scratch folder holding small.toml and its policy.
std::string scratch(const std::string& name) {
  const std::string d = std::string(NORMGATE_BINARY_DIR) + "/approvals_cli_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  std::filesystem::copy_file(kData + "/small.toml", d + "/small.toml");
  std::filesystem::copy_file(kData + "/small.policy.toml", d + "/small.policy.toml");
  return d;
}

// The record's digest as routing.h defines it: SHA-256 of its compact dump
// without record_sha256.
json sealed(json rec) {
  rec.erase("record_sha256");
  const std::string d = rec.dump();
  rec["record_sha256"] = normgate::seeds::sha256_hex(d.data(), d.size());
  return rec;
}

// An approvals file holding `records` as they are (sealed or not).
void spit_approvals(const std::string& path, const json& records) {
  spit(path, json{{"format", "normgate-approvals/1"}, {"approvals", records}}.dump(2) + "\n");
}

// One real approval (gate --approve of the H=256 window), made once.
class ApprovalsCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string d = scratch("origin");
    const CliRun g = cli("gate " + d + "/small.toml" + kFast + " --windows H=256 --approve");
    ASSERT_EQ(g.code, 0) << g.out;
    origin_ = new json(json::parse(slurp(d + "/small.approvals.json")));
    ASSERT_EQ((*origin_)["approvals"].size(), 1u);
    std::filesystem::remove_all(d);
  }
  static void TearDownTestSuite() {
    delete origin_;
    origin_ = nullptr;
  }
  // small.toml in a scratch folder with the approval after edit(record).
  static std::string with_record(const std::string& name, const std::function<void(json&)>& edit) {
    const std::string d = scratch(name);
    json doc = *origin_;
    edit(doc["approvals"][0]);
    spit(d + "/small.approvals.json", doc.dump(2) + "\n");
    return d;
  }
  static json* origin_;
};
json* ApprovalsCli::origin_ = nullptr;

TEST_F(ApprovalsCli, AGatedRecordIsCurrent) {
  ASSERT_NE(origin_, nullptr);
  // Re-sealed as it is (the tests' digest is routing.h's): still current.
  const std::string d = with_record("same", [](json& r) { r = sealed(r); });
  // One route current, five without a record: the dispatcher refuses those
  // five, so the listing exits 1 and says so.
  const CliRun list = cli("routes " + d + "/small.toml --accept-cpu-model");
  EXPECT_EQ(list.code, 1) << list.out;
  EXPECT_TRUE(contains(list.out, "routes    6: 1 current, 5 missing")) << list.out;
  EXPECT_TRUE(contains(list.out, "verdict   5 of 6 routes without a current approval")) << list.out;
  const CliRun pick = cli("routes " + d + "/small.toml" + kPick);
  EXPECT_EQ(pick.code, 0) << pick.out;
  EXPECT_TRUE(contains(pick.out, "approval current")) << pick.out;
  // The pick names the route's line and its window's T range (small.toml:12, T = [1, 300]).
  EXPECT_TRUE(contains(pick.out, "-> bwd_det_chunked (route " + d + "/small.toml:12, window T=1..300; approval current)"))
      << pick.out;
  std::filesystem::remove_all(d);
}

// Issue 35, point 2: each impossible value, in a record whose digest is
// right (a writer that sealed nonsense), is INVALID with its reason: never
// current, listed by `routes` (exit 1), refused by `--pick`.
TEST_F(ApprovalsCli, ImpossibleValuesAreInvalidNeverCurrent) {
  ASSERT_NE(origin_, nullptr);
  struct Bad {
    const char* name;
    std::function<void(json&)> edit;
    const char* reason;
  };
  const std::vector<Bad> bad = {
      {"y_5", [](json& r) { r["max_err_tol"]["y"] = 5.0; }, "max_err_tol.y 5 outside [0, 1]"},
      {"y_nan", [](json& r) { r["max_err_tol"]["y"] = "nan"; }, "max_err_tol.y nan outside [0, 1]"},
      {"y_inf", [](json& r) { r["max_err_tol"]["y"] = "inf"; }, "max_err_tol.y inf outside [0, 1]"},
      {"y_neg", [](json& r) { r["max_err_tol"]["y"] = -3; }, "max_err_tol.y -3 outside [0, 1]"},
      {"y_obj", [](json& r) { r["max_err_tol"]["y"] = json::object(); }, "field 'max_err_tol.y' must be a number"},
      {"mx_empty", [](json& r) { r["max_err_tol"] = json::object(); }, "max_err_tol has {}"},
      {"cases_0", [](json& r) { r["cases"] = 0; }, "cases 0 (needs >= 1"},
      {"cases_neg", [](json& r) { r["cases"] = -5; }, "cases -5 (needs >= 1"},
      {"seeds_empty", [](json& r) { r["seed_set"] = ""; }, "seed_set: "},
      {"seeds_garbage", [](json& r) { r["seed_set"] = "garbage"; }, "seed_set: "},
      {"t_empty", [](json& r) { r["t_points"] = json::array(); }, "t_points is empty"},
      {"t_outside", [](json& r) { r["t_points"] = {1, 301}; }, "t_points[1] 301 outside the window T=1..300"},
      // A NUL and an escape sequence in a field: printed escaped, whole.
      {"gpu_ctl", [](json& r) { r["gpu"] = std::string("cpu-model\0\x1b[31m", 15); },
       "field 'gpu' holds a control character ('cpu-model\\x00\\x1b[31m'; normgate writes none)"},
      // A newline and indent: it cannot print a line of its own that reads
      // as normgate's (the reason is one line wherever it is shown). Any
      // string field, the ones no other rule reads included.
      {"gpu_nl", [](json& r) { r["gpu"] = "cpu-model\n  normgate: verdict  PASS"; },
       "field 'gpu' holds a control character ('cpu-model\\x0a  normgate: verdict  PASS'; normgate writes none)"},
      {"commit_nl", [](json& r) { r["normgate_commit"] = "abc\n  normgate: verdict  PASS"; },
       "field 'normgate_commit' holds a control character ('abc\\x0a  normgate: verdict  PASS'"},
      {"driver_esc", [](json& r) { r["driver"] = "580\x1b[2J"; },
       "field 'driver' holds a control character ('580\\x1b[2J'"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.name);
    const std::string d = with_record(b.name, [&b](json& r) {
      b.edit(r);
      r = sealed(r);
    });
    // --allow-unapproved: the five routes without a record do not count
    // toward the exit code, so exit 1 is the invalid record's alone.
    const CliRun list = cli("routes " + d + "/small.toml --accept-cpu-model --allow-unapproved");
    EXPECT_EQ(list.code, 1) << list.out;
    EXPECT_FALSE(contains(list.out, "[current]")) << list.out;
    EXPECT_TRUE(contains(list.out, "routes    6: 1 invalid, 5 missing")) << list.out;
    EXPECT_TRUE(contains(list.out, "[invalid] record 0: " + std::string(b.reason))) << list.out;
    EXPECT_TRUE(contains(list.out, "1 INVALID record in " + d + "/small.approvals.json")) << list.out;
    const CliRun pick = cli("routes " + d + "/small.toml" + kPick);
    EXPECT_EQ(pick.code, 1) << pick.out;
    EXPECT_TRUE(contains(pick.out, "REFUSED")) << pick.out;
    // CPU-model approvals count here (kPick): a CPU gate would do.
    EXPECT_TRUE(contains(pick.out, ". Gate it (normgate gate ")) << pick.out;
    EXPECT_TRUE(contains(pick.out, "invalid: record 0: " + std::string(b.reason))) << pick.out;
    EXPECT_TRUE(contains(pick.out, "note      " + d + "/small.approvals.json holds 1 INVALID record (")) << pick.out;
    std::filesystem::remove_all(d);
  }
}

// Issue 35, point 2 and "Done when": one changed bit in a field (not
// re-sealed) fails the digest.
TEST_F(ApprovalsCli, AFlippedBitFailsTheDigest) {
  ASSERT_NE(origin_, nullptr);
  const std::string d = with_record("flip", [](json& r) {
    r = sealed(r);
    r["cases"] = r["cases"].get<int64_t>() ^ 1;  // one bit of one field
  });
  const CliRun list = cli("routes " + d + "/small.toml --accept-cpu-model --allow-unapproved");
  EXPECT_EQ(list.code, 1) << list.out;  // the invalid record alone (see above)
  EXPECT_TRUE(contains(list.out, "[invalid] record 0: record_sha256 mismatch")) << list.out;
  EXPECT_FALSE(contains(list.out, "[current]")) << list.out;
  std::filesystem::remove_all(d);
}

// `normgate approvals`: lists; --seal seals only a file whose every other
// record is valid, else writes nothing.
TEST_F(ApprovalsCli, CheckAndSeal) {
  ASSERT_NE(origin_, nullptr);
  // A record of before approvals carried seals (dated before
  // 2026-12-02T02:53:15Z, routing.h) has none: sealable.
  static constexpr const char* kOld = "2026-12-01T09:30:00Z";
  const std::string d = with_record("seal", [](json& r) {
    r["date"] = kOld;
    r.erase("record_sha256");
  });
  const std::string f = d + "/small.approvals.json";
  const CliRun check = cli("approvals " + f);
  EXPECT_EQ(check.code, 1) << check.out;
  EXPECT_TRUE(contains(check.out, "1 records, 0 valid, 1 without record_sha256, 0 INVALID")) << check.out;
  EXPECT_TRUE(contains(check.out, "or its seal removed. `normgate approvals --seal " + f + "` trusts such records"))
      << check.out;
  // The same record dated today (the gate's own date) without its seal:
  // removed after writing, INVALID, and --seal refuses it.
  {
    const std::string dn = with_record("seal_new", [](json& r) { r.erase("record_sha256"); });
    const std::string fn = dn + "/small.approvals.json";
    const std::string text = slurp(fn);
    const CliRun c = cli("approvals " + fn);
    EXPECT_EQ(c.code, 1) << c.out;
    EXPECT_TRUE(contains(c.out, "1 records, 0 valid, 0 without record_sha256, 1 INVALID")) << c.out;
    EXPECT_TRUE(contains(c.out, "when every normgate writer sealed its records (from 2026-12-02T02:53:15Z): its "
                                "seal was removed, or a build older than that wrote it"))
        << c.out;
    const CliRun s = cli("approvals --seal " + fn);
    EXPECT_EQ(s.code, 1) << s.out;
    EXPECT_TRUE(contains(s.out, "seal     refused: 1 INVALID record")) << s.out;
    EXPECT_EQ(slurp(fn), text);
    std::filesystem::remove_all(dn);
  }
  const CliRun before = cli("routes " + d + "/small.toml --accept-cpu-model --allow-unapproved");
  EXPECT_EQ(before.code, 1) << before.out;  // the unsealed record alone: the other routes are overridden
  EXPECT_TRUE(contains(before.out, "[invalid] record 0: no record_sha256")) << before.out;
  EXPECT_TRUE(contains(before.out, "(1 records, 1 INVALID, 1 of them only for want of record_sha256")) << before.out;
  // A second file with a really bad record: nothing of either is written.
  const std::string d2 = with_record("seal_bad", [](json& r) { r["cases"] = 0; });
  const std::string f2 = d2 + "/small.approvals.json";
  const std::string f_text = slurp(f), f2_text = slurp(f2);
  const CliRun refused = cli("approvals --seal " + f + " " + f2);
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_TRUE(contains(refused.out, "refused")) << refused.out;
  EXPECT_EQ(slurp(f), f_text);
  EXPECT_EQ(slurp(f2), f2_text);
  // Alone, it is sealed: current again, the same digest as the gate wrote,
  // and the file keeps the mode it had.
  ASSERT_EQ(::chmod(f.c_str(), 0640), 0);
  std::filesystem::remove(f + ".lock");  // made anew by the seal, with the file's bits
  const CliRun seal = cli("approvals --seal " + f);
  EXPECT_EQ(seal.code, 0) << seal.out;
  EXPECT_TRUE(contains(seal.out, "1 record sealed")) << seal.out;
  {
    json want = (*origin_)["approvals"][0];
    want["date"] = kOld;
    EXPECT_EQ(json::parse(slurp(f))["approvals"][0]["record_sha256"], sealed(want)["record_sha256"]);
  }
  {
    struct stat st {};
    ASSERT_EQ(::stat(f.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    // The lock takes the approvals file's read/write bits less the umask,
    // so whoever may write the approvals may also lock them.
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ASSERT_EQ(::stat((f + ".lock").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u & ~mask);
  }
  const CliRun after = cli("routes " + d + "/small.toml --accept-cpu-model --allow-unapproved");
  EXPECT_EQ(after.code, 0) << after.out;
  EXPECT_TRUE(contains(after.out, "routes    6: 1 current, 5 missing")) << after.out;
  EXPECT_EQ(cli("approvals " + f).code, 0);
  EXPECT_EQ(cli("approvals " + d + "/nonexistent.json").code, 2);
  std::filesystem::remove_all(d);
  std::filesystem::remove_all(d2);
}

// `normgate approvals FILES --merge-into TARGET` (docs/perf/routes.md D8):
// a record already there (same digest) is skipped, one of the same window,
// variant and backend replaces the file's only when it is newer and not
// stale where the file's is current, another variant's is appended; an
// INVALID record anywhere, one below the table's policy minimum, or two
// records of one slot and date write nothing; the target itself, --seal
// beside it, or a missing target are usage errors; a link to the target
// takes the target's lock.
TEST_F(ApprovalsCli, MergeInto) {
  ASSERT_NE(origin_, nullptr);
  const json a = (*origin_)["approvals"][0];
  ASSERT_EQ(a["date"].get<std::string>().size(), 20u) << a.dump();  // YYYY-MM-DDTHH:MM:SSZ
  json newer = a, older = a, other = a;
  newer["date"] = "2999-01-01T00:00:00Z";
  newer["cases"] = a["cases"].get<int64_t>() + 7;
  older["date"] = "2000-01-01T00:00:00Z";
  other["variant"] = "bwd_det_onepass";  // another slot: appended (its source hash makes it stale, not invalid)
  const std::string d = scratch("merge");
  const std::string target = d + "/small.approvals.json";
  spit_approvals(target, json::array({a}));
  const std::string src1 = d + "/one.approvals.json", src2 = d + "/two.approvals.json";
  spit_approvals(src1, json::array({sealed(a), sealed(older), sealed(other)}));
  spit_approvals(src2, json::array({sealed(newer)}));
  const CliRun m = cli("approvals " + src1 + " " + src2 + " --merge-into " + target);
  ASSERT_EQ(m.code, 0) << m.out;
  EXPECT_TRUE(contains(m.out, "1 added, 1 replaced, 1 already there, 1 kept as they were")) << m.out;
  const json got = json::parse(slurp(target));
  ASSERT_EQ(got["approvals"].size(), 2u) << got.dump(1);
  EXPECT_EQ(got["approvals"][0]["date"], "2999-01-01T00:00:00Z");  // replaced in place
  EXPECT_EQ(got["approvals"][0]["cases"], a["cases"].get<int64_t>() + 7);
  EXPECT_EQ(got["approvals"][0]["record_sha256"], sealed(newer)["record_sha256"]);
  EXPECT_EQ(got["approvals"][1]["variant"], "bwd_det_onepass");
  EXPECT_EQ(cli("approvals " + target).code, 0);
  // Again: nothing changes, the file is not rewritten.
  const std::string merged = slurp(target);
  const CliRun again = cli("approvals " + src1 + " " + src2 + " --merge-into " + target);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(contains(again.out, "0 added, 0 replaced, 2 already there, 2 kept as they were")) << again.out;
  EXPECT_EQ(slurp(target), merged);
  // An INVALID record in a source (a value changed under its seal): refused, nothing written.
  json tampered = sealed(other);
  tampered["variant"] = "fwd_rowwise";
  const std::string bad = d + "/bad.approvals.json";
  spit_approvals(bad, json::array({sealed(a), tampered}));
  // The source is judged before the lock: refused at once while another
  // writer holds the target's lock (the run would block otherwise).
  const int lock_fd = ::open((target + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(lock_fd, 0);
  ASSERT_EQ(::flock(lock_fd, LOCK_EX), 0);
  const CliRun refused = normgate::test::run_normgate_timeout("approvals " + bad + " --merge-into " + target, 30);
  ::close(lock_fd);
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_TRUE(contains(refused.out, "merge    refused: 1 INVALID or unsealed record")) << refused.out;
  EXPECT_FALSE(contains(refused.out, "waiting for the lock")) << refused.out;
  EXPECT_EQ(slurp(target), merged);
  // A later record of another source hash (stale) does not replace the current one.
  json stale = newer;
  stale["date"] = "3000-01-01T00:00:00Z";
  stale["source_sha256"] = std::string(64, '0');
  const std::string st = d + "/stale.approvals.json";
  spit_approvals(st, json::array({sealed(stale)}));
  const CliRun keep = cli("approvals " + st + " --merge-into " + target);
  EXPECT_EQ(keep.code, 0) << keep.out;
  EXPECT_TRUE(contains(keep.out, "(stale: another source hash)")) << keep.out;
  EXPECT_EQ(slurp(target), merged);
  // Below the policy minimum of the target's table (small.policy.toml: dense 2 x 64): refused.
  json weak = other;
  weak["variant"] = "bwd_det_wreg";
  weak["dense_step"] = 128;
  const std::string wk = d + "/weak.approvals.json";
  spit_approvals(wk, json::array({sealed(weak)}));
  const CliRun weak_run = cli("approvals " + wk + " --merge-into " + target);
  EXPECT_EQ(weak_run.code, 1) << weak_run.out;
  EXPECT_TRUE(contains(weak_run.out, "REFUSED")) << weak_run.out;
  EXPECT_TRUE(contains(weak_run.out, "small.policy.toml")) << weak_run.out;
  EXPECT_EQ(slurp(target), merged);
  // Two different records of one new slot with one date: refused.
  json twin = other;
  twin["variant"] = "bwd_det_wreg";
  json twin2 = twin;
  twin2["cases"] = twin["cases"].get<int64_t>() + 1;
  const std::string tw = d + "/twins.approvals.json";
  spit_approvals(tw, json::array({sealed(twin), sealed(twin2)}));
  const CliRun twins = cli("approvals " + tw + " --merge-into " + target);
  EXPECT_EQ(twins.code, 1) << twins.out;
  EXPECT_TRUE(contains(twins.out, "different records of the same date")) << twins.out;
  EXPECT_EQ(slurp(target), merged);
  // Through a link: the target's own lock (held here, so the merge waits),
  // and the file behind the link is written.
  const std::string link = d + "/link.approvals.json";
  std::filesystem::create_symlink(target, link);
  json more = twin;
  const std::string mo = d + "/more.approvals.json";
  spit_approvals(mo, json::array({sealed(more)}));
  {
    const int fd = ::open((target + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    const CliRun blocked = normgate::test::run_normgate_timeout("approvals " + mo + " --merge-into " + link, 2);
    EXPECT_NE(blocked.code, 0) << "merged through a link while the target's lock was held: " << blocked.out;
    ::close(fd);
  }
  EXPECT_EQ(slurp(target), merged);
  const CliRun via = cli("approvals " + mo + " --merge-into " + link);
  EXPECT_EQ(via.code, 0) << via.out;
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(json::parse(slurp(target))["approvals"].size(), 3u);
  const std::string merged3 = slurp(target);
  // Usage errors, before any work.
  const CliRun self = cli("approvals " + target + " --merge-into " + target);
  EXPECT_EQ(self.code, 2) << self.out;
  EXPECT_TRUE(contains(self.out, "is the --merge-into file itself")) << self.out;
  const CliRun seal = cli("approvals --seal " + src1 + " --merge-into " + target);
  EXPECT_EQ(seal.code, 2) << seal.out;
  const CliRun missing = cli("approvals " + src1 + " --merge-into " + d + "/none.approvals.json");
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_TRUE(contains(missing.out, "none.approvals.json: no such file (an approvals file is needed)")) << missing.out;
  EXPECT_EQ(slurp(target), merged3);
  std::filesystem::remove_all(d);
}

// `normgate approvals` on a rejections file (told apart by its "format"):
// every record valid and sealed passes; one changed value (seal kept) makes
// the file INVALID, named with the record; --seal refuses beside it and
// writes nothing.
TEST(ApprovalsCliRejections, ChecksRejectionsFiles) {
  namespace k = normgate::kernels;
  const k::Rejection r = normgate::test::valid_rejection();
  k::Rejections rs;
  rs.records = {r, r};
  rs.records[1].t_lo = 9;
  rs.records[1].t_hi = 20;
  const std::string d = std::string(NORMGATE_BINARY_DIR) + "/approvals_cli_rej_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  const std::string f = d + "/small.rejections.json";
  spit(f, k::rejections_to_json_text(rs));
  const CliRun ok = cli("approvals " + f);
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(contains(ok.out, "2 rejection records, 2 valid, 0 INVALID")) << ok.out;
  // Tampered: record 1's worst_err_tol changed, its seal kept.
  json doc = json::parse(slurp(f));
  ASSERT_TRUE(doc.contains("rejections")) << doc.dump();
  doc["rejections"][1]["worst_err_tol"] = 1.5;
  const std::string tampered = doc.dump(2) + "\n";
  spit(f, tampered);
  const CliRun bad = cli("approvals " + f);
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_TRUE(contains(bad.out, "rejections file INVALID")) << bad.out;
  EXPECT_TRUE(contains(bad.out, "record 1")) << bad.out;
  EXPECT_TRUE(contains(bad.out, "record_sha256")) << bad.out;
  const CliRun seal = cli("approvals --seal " + f);
  EXPECT_EQ(seal.code, 1) << seal.out;
  EXPECT_TRUE(contains(seal.out, "refused")) << seal.out;
  EXPECT_EQ(slurp(f), tampered);
  std::filesystem::remove_all(d);
}

// A det record of a deterministic variant answers for its nondet window
// (routing.h, approval_status; routes.md D21), so what the gate finds in
// either mode holds for both: a nondet window that fails revokes the det
// record around it, and a gate that prunes records whose window overlaps no
// table window keeps a det record that only a nondet route reads.
TEST(ApprovalsCliModes, AFailureInEitherModeRevokesADetVariantsRecords) {
  const std::string d = std::string(NORMGATE_BINARY_DIR) + "/approvals_cli_modes_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  spit(d + "/t.policy.toml",
       "description = \"one seed\"\n[minimum]\nname = \"one\"\nseeds = \"normal:0..0\"\nt_per_window = 2\n"
       "dense_points = 0\ndense_step = 64\nfresh_factor = 0\nbackends = [\"gpu\", \"cpu-model\"]\n");
  const std::string head = "arch = \"sm90a\"\ndescription = \"modes\"\nroute = [\n"
                           "  { op = \"fwd\", H = 64, w = \"fp32\", form = \"plain\", T = [1, 700], variant = \"fwd_rowwise\" },\n";
  // The table: the forward route and a backward route H = 64 FP32 T = 1..64
  // of `variant` in each of `modes`.
  auto table = [&](const std::string& variant, std::initializer_list<const char*> modes) {
    std::string t = head;
    for (const char* m : modes)
      t += std::string("  { op = \"bwd\", mode = \"") + m +
           "\", H = 64, w = \"fp32\", form = \"plain\", T = [1, 64], variant = \"" + variant + "\" },\n";
    spit(d + "/t.toml", t + "]\n");
  };
  table("bwd_fp32_blocked", {"det", "nondet"});
  const std::string one = " --backend cpu --threads 1 --seeds normal:0..0 --t-per-window 2 --dense-points 0 "
                          "--fresh-factor 0 --quiet";
  // Cancel seeds: FP32 partials leave the budget from T = 2.
  const std::string cancel = " --approve --backend cpu --threads 1 --seeds 3x1 --t-per-window 2 --dense-points 0 "
                             "--fresh-factor 0 --quiet";
  // One normal seed: FP32 partials stay inside the budget; the det window passes.
  CliRun g = cli("gate " + d + "/t.toml --windows mode=det --approve" + one);
  ASSERT_EQ(g.code, 0) << g.out;
  CliRun rt = cli("routes " + d + "/t.toml --accept-cpu-model --pick op=bwd,mode=nondet,H=64,w=fp32,form=plain,T=5");
  EXPECT_EQ(rt.code, 0) << rt.out;
  EXPECT_TRUE(contains(rt.out, "approval current")) << rt.out;
  EXPECT_TRUE(contains(rt.out, "the det window's record")) << rt.out;  // --pick says why
  // At T = 0 a pick says how it looked the call up.
  rt = cli("routes " + d + "/t.toml --accept-cpu-model --pick op=bwd,mode=det,H=64,w=fp32,form=plain,T=0");
  EXPECT_EQ(rt.code, 0) << rt.out;
  EXPECT_TRUE(contains(rt.out, "T = 0: no rows; looked up as T = 1")) << rt.out;
  rt = cli("routes " + d + "/t.toml --accept-cpu-model");
  EXPECT_TRUE(contains(rt.out, "T=1..64 -> bwd_fp32_blocked  [current] approved (cpu-model gate of")) << rt.out;
  EXPECT_TRUE(contains(rt.out, "the det window's record")) << rt.out;
  // The nondet window with cancel seeds fails: the det record goes too.
  g = cli("gate " + d + "/t.toml --windows mode=nondet" + cancel);
  EXPECT_EQ(g.code, 1) << g.out;
  EXPECT_TRUE(contains(g.out, "revoked cpu-model approval of bwd det H=64 w=fp32 form=plain T=1..64 -> "
                              "bwd_fp32_blocked"))
      << g.out;
  rt = cli("routes " + d + "/t.toml --accept-cpu-model --pick op=bwd,mode=nondet,H=64,w=fp32,form=plain,T=5");
  EXPECT_EQ(rt.code, 1) << rt.out;
  // Pruning: a table whose only backward route is nondet keeps the det
  // record that approves it when another window is gated with --approve.
  std::filesystem::remove(d + "/t.approvals.json");
  table("bwd_det_chunked", {"det", "nondet"});
  ASSERT_EQ(cli("gate " + d + "/t.toml --windows mode=det --approve" + one).code, 0);
  table("bwd_det_chunked", {"nondet"});
  g = cli("gate " + d + "/t.toml --windows op=fwd --approve" + one);
  EXPECT_EQ(g.code, 0) << g.out;
  EXPECT_FALSE(contains(g.out, "removed cpu-model approval of bwd det")) << g.out;
  rt = cli("routes " + d + "/t.toml --accept-cpu-model");
  EXPECT_EQ(rt.code, 0) << rt.out;
  // The other way: a det window that fails revokes the nondet record of the
  // same deterministic variant around it. (The failure remembered above
  // would refuse that record's approval: routes.md D28; start afresh.)
  std::filesystem::remove(d + "/t.approvals.json");
  std::filesystem::remove(d + "/t.rejections.json");
  table("bwd_fp32_blocked", {"det", "nondet"});
  ASSERT_EQ(cli("gate " + d + "/t.toml --windows mode=nondet --approve" + one).code, 0);
  g = cli("gate " + d + "/t.toml --windows mode=det" + cancel);
  EXPECT_EQ(g.code, 1) << g.out;
  EXPECT_TRUE(contains(g.out, "revoked cpu-model approval of bwd nondet H=64 w=fp32 form=plain T=1..64 -> "
                              "bwd_fp32_blocked"))
      << g.out;
  std::filesystem::remove_all(d);
}

// A failed gate --approve remembers its failure in the table's rejections
// file; `approvals --merge-into` refuses to bring back, from an older copy of
// the approvals file, the record that gate revoked, and `routes` does not
// count it when the old file is copied over by hand (without the rejections
// file both take it: the refusals are the rejection's).
TEST(ApprovalsCliRejections, MergeIntoDoesNotBringBackARevokedRecord) {
  const std::string d = std::string(NORMGATE_BINARY_DIR) + "/approvals_cli_revoked_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  spit(d + "/t.policy.toml",
       "description = \"one seed\"\n[minimum]\nname = \"one\"\nseeds = \"normal:0..0\"\nt_per_window = 2\n"
       "dense_points = 0\ndense_step = 64\nfresh_factor = 0\nbackends = [\"gpu\", \"cpu-model\"]\n");
  spit(d + "/t.toml",
       "arch = \"sm90a\"\ndescription = \"revoked\"\nroute = [\n"
       "  { op = \"fwd\", H = 64, w = \"fp32\", form = \"plain\", T = [1, 700], variant = \"fwd_rowwise\" },\n"
       "  { op = \"bwd\", mode = \"det\", H = 64, w = \"fp32\", form = \"plain\", T = [1, 64], "
       "variant = \"bwd_fp32_blocked\" },\n]\n");
  const std::string base = " --windows op=bwd --approve --backend cpu --threads 1 --t-per-window 2 --dense-points 0 "
                           "--fresh-factor 0 --quiet";
  // One normal seed passes (FP32 partials inside the budget): approved.
  CliRun g = cli("gate " + d + "/t.toml --seeds normal:0..0" + base);
  ASSERT_EQ(g.code, 0) << g.out;
  std::filesystem::copy_file(d + "/t.approvals.json", d + "/old.approvals.json");
  EXPECT_FALSE(std::filesystem::exists(d + "/t.rejections.json"));
  // Cancel seeds fail it (FP32 partials leave the budget from T = 2): revoked and remembered.
  g = cli("gate " + d + "/t.toml --seeds 3x1" + base);
  EXPECT_EQ(g.code, 1) << g.out;
  EXPECT_TRUE(contains(g.out, "revoked cpu-model approval of bwd det H=64 w=fp32 form=plain T=1..64")) << g.out;
  const json rej = json::parse(slurp(d + "/t.rejections.json"));
  ASSERT_EQ(rej["rejections"].size(), 1u) << rej.dump(1);
  EXPECT_EQ(rej["rejections"][0]["variant"], "bwd_fp32_blocked");
  EXPECT_GT(rej["rejections"][0]["worst_err_tol"].get<double>(), 1.0);
  // The worst case's T alone is excluded; the gated window beside it.
  const int64_t t_fail = rej["rejections"][0]["window"]["T"][0].get<int64_t>();
  EXPECT_EQ(rej["rejections"][0]["window"]["T"], json({t_fail, t_fail}));
  EXPECT_TRUE(t_fail >= 2 && t_fail <= 64) << t_fail;  // FP32 partials fail from T = 2
  EXPECT_TRUE(contains(rej["rejections"][0]["worst_case"].get<std::string>(), "T=" + std::to_string(t_fail)))
      << rej.dump(1);
  EXPECT_EQ(rej["rejections"][0]["gated_T"], json({1, 64}));
  const std::string tf = std::to_string(t_fail);
  EXPECT_TRUE(contains(g.out, "remembered the failure of bwd det H=64 w=fp32 form=plain T=" + tf + ".." + tf +
                                  " -> bwd_fp32_blocked"))
      << g.out;
  CliRun chk = cli("approvals " + d + "/t.rejections.json");
  EXPECT_EQ(chk.code, 0) << chk.out;  // a valid, sealed rejections file
  const std::string after_fail = slurp(d + "/t.approvals.json");
  ASSERT_EQ(json::parse(after_fail)["approvals"].size(), 0u) << after_fail;
  // The older copy's record is refused: nothing written, the pick still refused.
  CliRun m = cli("approvals " + d + "/old.approvals.json --merge-into " + d + "/t.approvals.json");
  EXPECT_EQ(m.code, 1) << m.out;
  EXPECT_TRUE(contains(m.out, "REFUSED")) << m.out;
  EXPECT_TRUE(contains(m.out, "the gate failed this variant's source there")) << m.out;
  EXPECT_TRUE(contains(m.out, "nothing written")) << m.out;
  EXPECT_EQ(slurp(d + "/t.approvals.json"), after_fail);
  const std::string pick = "routes " + d + "/t.toml --accept-cpu-model --pick op=bwd,mode=det,H=64,w=fp32,form=plain,T=5";
  CliRun rt = cli(pick);
  EXPECT_EQ(rt.code, 1) << rt.out;
  // The older file copied over the current one by hand: `routes` does not
  // count the refuted record, and says why.
  std::filesystem::copy_file(d + "/old.approvals.json", d + "/t.approvals.json",
                             std::filesystem::copy_options::overwrite_existing);
  rt = cli(pick);
  EXPECT_EQ(rt.code, 1) << rt.out;
  EXPECT_TRUE(contains(rt.out, "REFUTED   cpu-model approval of bwd det H=64 w=fp32 form=plain T=1..64 -> "
                               "bwd_fp32_blocked, not counted"))
      << rt.out;
  rt = cli("routes " + d + "/t.toml --accept-cpu-model");
  EXPECT_EQ(rt.code, 1) << rt.out;
  EXPECT_TRUE(contains(rt.out, "(1 records, 1 REFUTED by a remembered failure, not counted)")) << rt.out;
  // A folder where the lock file belongs: a usage error before any work.
  std::filesystem::create_directory(d + "/t.approvals.json.lock.d");
  std::filesystem::remove(d + "/t.approvals.json.lock");
  std::filesystem::rename(d + "/t.approvals.json.lock.d", d + "/t.approvals.json.lock");
  m = cli("approvals " + d + "/old.approvals.json --merge-into " + d + "/t.approvals.json");
  EXPECT_EQ(m.code, 2) << m.out;
  EXPECT_TRUE(contains(m.out, "t.approvals.json.lock exists and is not a regular file")) << m.out;
  std::filesystem::remove(d + "/t.approvals.json.lock");
  // Through a link elsewhere, named otherwise, the merge is refused too.
  spit(d + "/t.approvals.json", after_fail);
  std::filesystem::create_directories(d + "/elsewhere");
  std::filesystem::create_symlink(d + "/t.approvals.json", d + "/elsewhere/cur.json");
  m = cli("approvals " + d + "/old.approvals.json --merge-into " + d + "/elsewhere/cur.json");
  EXPECT_EQ(m.code, 1) << m.out;
  EXPECT_TRUE(contains(m.out, "the gate failed this variant's source there")) << m.out;
  EXPECT_EQ(slurp(d + "/t.approvals.json"), after_fail);
  // A passing gate of a window holding the failing T is not approved (what
  // routes would refute); a window beside it is.
  g = cli("gate " + d + "/t.toml --seeds normal:0..0" + base);
  EXPECT_TRUE(contains(g.out, "refutes it")) << g.out;
  EXPECT_EQ(g.code, 1) << g.out;  // the kernels passed; the approval asked for did not happen
  EXPECT_TRUE(contains(g.out, "verdict  PASS")) << g.out;
  EXPECT_TRUE(contains(g.out, "approval refused for 1 passing window (above): not approved; exit 1")) << g.out;
  // routes says why the route cannot be approved, and names the file.
  rt = cli("routes " + d + "/t.toml --accept-cpu-model");
  EXPECT_TRUE(contains(rt.out, "rejections " + d + "/t.rejections.json (1 remembered failures)")) << rt.out;
  EXPECT_TRUE(contains(rt.out, "    failed: bwd_fp32_blocked (this source) failed a cpu-model gate at bwd det H=64 "
                               "w=fp32 form=plain T=" + tf + ".." + tf))
      << rt.out;
  rt = cli(pick);
  EXPECT_TRUE(contains(rt.out, "REFUSED") && contains(rt.out, "    failed: bwd_fp32_blocked (this source)")) << rt.out;
  EXPECT_EQ(json::parse(slurp(d + "/t.approvals.json"))["approvals"].size(), 0u);
  spit(d + "/t.toml",
       "arch = \"sm90a\"\ndescription = \"revoked\"\nroute = [\n"
       "  { op = \"fwd\", H = 64, w = \"fp32\", form = \"plain\", T = [1, 700], variant = \"fwd_rowwise\" },\n"
       "  { op = \"bwd\", mode = \"det\", H = 64, w = \"fp32\", form = \"plain\", T = [1, 1], "
       "variant = \"bwd_fp32_blocked\" },\n"
       "  { op = \"bwd\", mode = \"det\", H = 64, w = \"fp32\", form = \"plain\", T = [2, 64], "
       "variant = \"bwd_det_chunked\" },\n]\n");
  g = cli("gate " + d + "/t.toml --seeds 3x1" + base);
  EXPECT_EQ(g.code, 0) << g.out;
  rt = cli("routes " + d + "/t.toml --accept-cpu-model --pick op=bwd,mode=det,H=64,w=fp32,form=plain,T=1");
  EXPECT_EQ(rt.code, 0) << rt.out;
  EXPECT_FALSE(contains(rt.out, "REFUTED")) << rt.out;
  // The gate never writes a report over the rejections file.
  g = cli("gate " + d + "/t.toml --seeds 3x1" + base + " --report-md " + d + "/t.rejections.json");
  EXPECT_EQ(g.code, 2) << g.out;
  EXPECT_TRUE(contains(g.out, "rejections file")) << g.out;
  EXPECT_NO_THROW((void)json::parse(slurp(d + "/t.rejections.json")));
  // Without the remembered failure the old file approves (the refusals
  // above are the rejection's), and the same merge adds the record.
  spit(d + "/t.toml",
       "arch = \"sm90a\"\ndescription = \"revoked\"\nroute = [\n"
       "  { op = \"fwd\", H = 64, w = \"fp32\", form = \"plain\", T = [1, 700], variant = \"fwd_rowwise\" },\n"
       "  { op = \"bwd\", mode = \"det\", H = 64, w = \"fp32\", form = \"plain\", T = [1, 64], "
       "variant = \"bwd_fp32_blocked\" },\n]\n");
  std::filesystem::copy_file(d + "/old.approvals.json", d + "/t.approvals.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove(d + "/t.rejections.json");
  rt = cli(pick);
  EXPECT_EQ(rt.code, 0) << rt.out;
  EXPECT_FALSE(contains(rt.out, "REFUTED")) << rt.out;
  spit(d + "/t.approvals.json", after_fail);
  m = cli("approvals " + d + "/old.approvals.json --merge-into " + d + "/t.approvals.json");
  EXPECT_EQ(m.code, 0) << m.out;
  EXPECT_TRUE(contains(m.out, "added")) << m.out;
  std::filesystem::remove_all(d);
}

// --base against a table without approvals: a window with the base's bounds
// and variant is still gated (nothing proves its sources unchanged), and the
// gate says so on stdout, window by window, with the reason.
TEST(GateBaseCli, SaysWhyAWindowLikeTheBaseIsGated) {
  const std::string d = scratch("base");
  const CliRun r = cli("gate " + d + "/small.toml --base " + d + "/small.toml --windows H=256" + kFast);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "windows  1 gated, 0 skipped (unchanged vs base)")) << r.out;
  EXPECT_TRUE(contains(r.out, "base     gated with the base's bounds and variant: ")) << r.out;
  EXPECT_TRUE(contains(r.out, "no current approval in")) << r.out;
  // Approved: the window is unchanged vs the base, skipped; with the filter
  // selecting only it that is no error (nothing to gate, exit 0).
  ASSERT_EQ(cli("gate " + d + "/small.toml --windows H=256 --approve" + kFast).code, 0);
  const CliRun again = cli("gate " + d + "/small.toml --base " + d + "/small.toml --windows H=256" + kFast);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(contains(again.out, "windows  0 gated, 1 skipped (unchanged vs base)")) << again.out;
  EXPECT_FALSE(contains(again.out, "base     gated")) << again.out;
  std::filesystem::remove_all(d);
}

// Form res approvals record h_new (0: gated bit for bit), and `approvals
// --journal` finds it in the journal; a res record without it (made before
// the gate checked h_new) still approves, but `gate --base` gates its
// window again and says why.
TEST(GateBaseCli, ResApprovalsRecordHNewAndOlderOnesAreGatedAgain) {
  const std::string d = scratch("res_h_new");
  spit(d + "/res.toml", "arch = \"sm90a\"\nroute = [\n"
                        "  { op = \"fwd\", H = 64, w = \"bf16\", form = \"res\", T = [1, 64], variant = \"fwd_rowwise\" },\n"
                        "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"res\", T = [1, 64], "
                        "variant = \"bwd_det_chunked\" },\n]\n");
  std::filesystem::copy_file(kData + "/small.policy.toml", d + "/res.policy.toml");
  const std::string t = d + "/res.toml", f = d + "/res.approvals.json", j = d + "/res.jsonl";
  const CliRun g = cli("gate " + t + kFast + " --approve --journal " + j);
  ASSERT_EQ(g.code, 0) << g.out;
  json recs = json::parse(slurp(f))["approvals"];
  ASSERT_EQ(recs.size(), 2u) << recs.dump(2);
  for (const auto& r : recs) {
    ASSERT_TRUE(r["max_err_tol"].contains("h_new")) << r.dump(2);
    EXPECT_EQ(r["max_err_tol"]["h_new"], 0) << r.dump(2);
    EXPECT_EQ(r["max_err_tol"].size(), r.at("window").at("op") == "bwd" ? 5u : 3u) << r.dump(2);
  }
  // The journal holds each record's h_new err/tol: OK, not "no result holds".
  const CliRun chk = cli("approvals " + f + " --journal " + j);
  EXPECT_EQ(chk.code, 0) << chk.out;
  EXPECT_EQ(occurrences(chk.out, "\nOK       "), 2u) << chk.out;
  // Unchanged against itself: both windows skipped.
  const CliRun same = cli("gate " + t + " --base " + t + kFast);
  EXPECT_EQ(same.code, 0) << same.out;
  EXPECT_TRUE(contains(same.out, "windows  0 gated, 2 skipped (unchanged vs base)")) << same.out;
  // The backward record as a gate before h_new wrote it: no h_new (sealed
  // again, without its journal binding, which the edit would break).
  for (auto& r : recs)
    if (r.at("window").at("op") == "bwd") {
      r["max_err_tol"].erase("h_new");
      r.erase("journal_head");
      r.erase("journal_lines");
      r = sealed(r);
    }
  spit_approvals(f, recs);
  const CliRun routes = cli("routes " + t + " --accept-cpu-model");
  EXPECT_EQ(routes.code, 0) << routes.out;
  EXPECT_EQ(occurrences(routes.out, "h_new not checked by that gate"), 1u) << routes.out;
  EXPECT_TRUE(contains(routes.out, "\nh_new     1 current form res approval rests on a gate that did not check "
                                   "h_new"))
      << routes.out;
  const CliRun again = cli("gate " + t + " --base " + t + kFast);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(contains(again.out, "windows  1 gated, 1 skipped (unchanged vs base)")) << again.out;
  EXPECT_TRUE(contains(again.out, "base     gated with the base's bounds and variant: ")) << again.out;
  EXPECT_TRUE(contains(again.out, "bwd det H=64 w=bf16 form=res T=1..64 -> bwd_det_chunked: h_new not gated yet: "
                                  "the gate of its current approval in " + f + " did not check h_new"))
      << again.out;
  std::filesystem::remove_all(d);
}

// approvals --seal on one file under two spellings (./F and F): checked and
// locked once (two flocks of one file would wait forever), and no lock file
// beside a rejections file, which --seal never writes.
TEST(ApprovalsCliRejections, OneFileUnderTwoNamesIsCheckedOnce) {
  const std::string d = scratch("twonames");
  ASSERT_EQ(cli("gate " + d + "/small.toml --windows H=256 --approve" + kFast).code, 0);
  const std::string f = d + "/small.approvals.json";
  const CliRun r = normgate::test::run_normgate_timeout("approvals --seal " + f + " " + d + "/./small.approvals.json", 60);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(occurrences(r.out, "small.approvals.json: 1 records"), 1u) << r.out;
  const std::string rj = d + "/small.rejections.json";
  spit(rj, "{\"format\": \"normgate-rejections/1\", \"rejections\": []}\n");
  const CliRun s = normgate::test::run_normgate_timeout("approvals --seal " + rj + " " + d + "/./small.rejections.json", 60);
  EXPECT_EQ(s.code, 0) << s.out;
  EXPECT_EQ(occurrences(s.out, "0 rejection records"), 1u) << s.out;
  EXPECT_FALSE(std::filesystem::exists(rj + ".lock"));
  std::filesystem::remove_all(d);
}

// A gate --approve keeps an invalid record as it was (never dropped, never
// re-sealed) and says so.
TEST_F(ApprovalsCli, ApproveKeepsInvalidRecords) {
  ASSERT_NE(origin_, nullptr);
  const std::string d = with_record("keep", [](json& r) {
    r = sealed(r);
    r["cases"] = r["cases"].get<int64_t>() + 1;  // not re-sealed: digest mismatch
  });
  const std::string f = d + "/small.approvals.json";
  const json bad = json::parse(slurp(f))["approvals"][0];
  const CliRun g = cli("gate " + d + "/small.toml" + kFast + " --windows op=fwd --approve");
  EXPECT_EQ(g.code, 0) << g.out;
  EXPECT_TRUE(contains(g.out, "kept INVALID record 0: record_sha256 mismatch")) << g.out;
  const json after = json::parse(slurp(f))["approvals"];
  ASSERT_EQ(after.size(), 2u) << after.dump(2);
  EXPECT_EQ(after[1], bad);  // as it was read
  std::filesystem::remove_all(d);
}

pid_t spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<std::string> a = args;
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    ::execv(kBin.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

std::vector<std::string> gate_args(const std::string& dir, const std::string& windows, const std::string& md) {
  return {kBin,       "gate",    dir + "/small.toml", "--backend", "cpu",     "--threads", "1",
          "--seeds",  "3x1",     "--t-per-window",    "4",         "--dense-points", "2", "--quiet",
          "--windows", windows,  "--approve",         "--report-md", md};
}

// The binary locks the approvals file for its read-modify-write: while
// another process holds PATH.lock, a finished gate waits before writing.
TEST(ApprovalsLock, GateApproveWaitsForTheLock) {
  const std::string d = scratch("lock");
  const std::string lock = d + "/small.approvals.json.lock";
  // O_CLOEXEC: a gate forked below must not inherit (and so hold) this lock.
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  const pid_t pid = spawn(gate_args(d, "H=256", d + "/r.md"), d + "/gate.log");
  ASSERT_GT(pid, 0);
  // The report is written before the approvals: once it is there, the gate
  // has only the approvals left.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!std::filesystem::exists(d + "/r.md") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(std::filesystem::exists(d + "/r.md")) << slurp(d + "/gate.log");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  int st = 0;
  EXPECT_EQ(::waitpid(pid, &st, WNOHANG), 0) << "the gate did not wait for the lock: " << slurp(d + "/gate.log");
  EXPECT_FALSE(std::filesystem::exists(d + "/small.approvals.json")) << slurp(d + "/gate.log");
  // It said why it waits, naming the lock, once.
  const std::string log = slurp(d + "/gate.log");
  EXPECT_TRUE(contains(log, "normgate: waiting for the lock '")) << log;
  EXPECT_TRUE(contains(log, "small.approvals.json.lock': another writer of the approvals file holds it")) << log;
  ::close(fd);  // releases the lock
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << slurp(d + "/gate.log");
  EXPECT_EQ(WEXITSTATUS(st), 0) << slurp(d + "/gate.log");
  EXPECT_EQ(json::parse(slurp(d + "/small.approvals.json"))["approvals"].size(), 1u);
  std::filesystem::remove_all(d);
}

// Four gates approving different windows of one table side by side: every
// window's record survives.
TEST(ApprovalsLock, ConcurrentGatesKeepEveryRecord) {
  const std::string d = scratch("concurrent");
  const std::vector<std::string> windows = {"op=fwd", "H=256", "op=bwd,mode=nondet", "op=bwd,mode=det,H=64"};
  std::vector<pid_t> pids;
  for (size_t i = 0; i < windows.size(); ++i)
    pids.push_back(spawn(gate_args(d, windows[i], d + "/r" + std::to_string(i) + ".md"),
                         d + "/gate" + std::to_string(i) + ".log"));
  for (size_t i = 0; i < pids.size(); ++i) {
    int st = 0;
    ASSERT_EQ(::waitpid(pids[i], &st, 0), pids[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << slurp(d + "/gate" + std::to_string(i) + ".log");
  }
  const json recs = json::parse(slurp(d + "/small.approvals.json"))["approvals"];
  EXPECT_EQ(recs.size(), 6u) << recs.dump(1);
  const CliRun list = cli("routes " + d + "/small.toml --accept-cpu-model");
  EXPECT_EQ(list.code, 0) << list.out;
  EXPECT_TRUE(contains(list.out, "routes    6: 6 current")) << list.out;
  std::filesystem::remove_all(d);
}

}  // namespace

// gate --journal --approve binds each record to its journal (its chain head
// and line count, routing.h Approval::journal_head); `approvals FILE
// --journal J` checks records against J: still OK after a later run appended
// to J; FAIL for a record whose numbers were changed and resealed; J
// INVALID after a changed line; no record resting on J is exit 1; a file
// that is no journal is exit 2; a gate without --journal writes no binding.
TEST(ApprovalsJournalCli, RecordsAreCheckedAgainstTheirJournal) {
  const std::string d = scratch("journal");
  const std::string j = d + "/j.jsonl", approvals = d + "/small.approvals.json";
  CliRun g = cli("gate " + d + "/small.toml" + kFast + " --windows H=256 --approve --journal " + j);
  ASSERT_EQ(g.code, 0) << g.out;
  const json rec = json::parse(slurp(approvals))["approvals"][0];
  ASSERT_TRUE(rec.contains("journal")) << rec.dump();
  const std::string text = slurp(j);
  const int lines = occurrences(text, "\n");
  EXPECT_EQ(rec["journal"]["lines"], lines);
  // The head is the last line's seal.
  const std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);
  EXPECT_TRUE(contains(last, "\"sha256\":\"" + rec["journal"]["head"].get<std::string>() + "\"}")) << last;

  CliRun c = cli("approvals " + approvals + " --journal " + j);
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "OK       bwd det H=256")) << c.out;
  EXPECT_TRUE(contains(c.out, "line " + std::to_string(lines) + " is its head")) << c.out;

  // A later run of other windows appends to the journal: the record's head
  // is still its line, and the check still holds.
  g = cli("gate " + d + "/small.toml" + kFast + " --windows H=64 --journal " + j);
  ASSERT_EQ(g.code, 0) << g.out;
  ASSERT_GT(occurrences(slurp(j), "\n"), lines);
  c = cli("approvals " + approvals + " --journal " + j);
  EXPECT_EQ(c.code, 0) << c.out;

  // The record's largest err/tol lowered and the record resealed: its
  // record_sha256 holds, the journal does not back it.
  {
    json doc = json::parse(slurp(approvals));
    auto& m = doc["approvals"][0]["max_err_tol"];
    std::string out;
    double worst = -1;
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it.value().get<double>() > worst) {
        worst = it.value().get<double>();
        out = it.key();
      }
    m[out] = worst * 0.5;
    doc["approvals"][0] = sealed(doc["approvals"][0]);
    spit(d + "/edited.approvals.json", doc.dump(2) + "\n");
    ASSERT_EQ(cli("approvals " + d + "/edited.approvals.json").code, 0);  // valid and sealed as a file
    c = cli("approvals " + d + "/edited.approvals.json --journal " + j);
    EXPECT_EQ(c.code, 1) << c.out;
    EXPECT_TRUE(contains(c.out, "FAIL     bwd det H=256")) << c.out;
    EXPECT_TRUE(contains(c.out, "no result of its worst case")) << c.out;
  }
  // A record of the file edited by `edit`, resealed, checked against j.
  auto forged = [&](const std::string& name, const std::function<void(json&)>& edit) {
    json doc = json::parse(slurp(approvals));
    edit(doc["approvals"][0]);
    doc["approvals"][0] = sealed(doc["approvals"][0]);
    spit(d + "/" + name, doc.dump(2) + "\n");
    EXPECT_EQ(cli("approvals " + d + "/" + name).code, 0) << name << ": not a valid record";
    return cli("approvals " + d + "/" + name + " --journal " + j);
  };
  // Edits the journal contradicts, each resealed: a wider window (its last T
  // point has no case), the campaign's seeds and backend, a lower err/tol
  // of another output with the worst moved to a smaller case.
  {
    c = forged("wider.json", [](json& r) {
      r["window"]["T"][1] = 4096;
      r["t_points"].push_back(4096);
    });
    EXPECT_EQ(c.code, 1) << c.out;
    EXPECT_TRUE(contains(c.out, "at its T points 4096")) << c.out;
    c = forged("campaign.json", [](json& r) {
      r["backend"] = "gpu";
      r["gpu"] = "NVIDIA H200";
      r["driver"] = "580.159.04";
      r["cuda"] = "13.0";
    });
    EXPECT_EQ(c.code, 1) << c.out;
    EXPECT_TRUE(contains(c.out, "gpu NVIDIA H200 in the record, cpu in the journal's campaign")) << c.out;
    EXPECT_TRUE(contains(c.out, "backend gpu in the record, cpu-model in the journal's campaign")) << c.out;
    // Another case of the window, with its own largest ratio as the record's.
    std::string other_case, other_out;
    double other_ratio = -1;
    {
      std::istringstream in(slurp(j));
      std::string line;
      std::getline(in, line);
      while (std::getline(in, line) && other_case.empty()) {
        const json r = json::parse(line);
        if (r["case"] == rec["worst_case"] || !contains(r["case"].get<std::string>(), "H=256,")) continue;
        for (const auto& res : r["results"])
          if (res["impl"] == rec["variant"])
            for (const auto& [k, v] : rec["max_err_tol"].items())
              if (res[k][0].get<double>() > other_ratio) {
                other_ratio = res[k][0].get<double>();
                other_out = k;
                other_case = r["case"];
              }
      }
    }
    ASSERT_FALSE(other_case.empty());
    ASSERT_LT(other_ratio, rec["max_err_tol"][other_out].get<double>());
    c = forged("moved.json", [&](json& r) {
      r["worst_case"] = other_case;
      for (auto& [k, v] : r["max_err_tol"].items()) v = std::min(v.get<double>(), other_ratio);
      r["max_err_tol"][other_out] = other_ratio;
    });
    EXPECT_EQ(c.code, 1) << c.out;
    EXPECT_TRUE(contains(c.out, "the journal holds a larger")) << c.out;
  }
  // One case fewer: not confirmed (UNSURE, exit 1): the journal's extra
  // case could be another run's.
  c = forged("fewer.json", [](json& r) { r["cases"] = r["cases"].get<int64_t>() - 1; });
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "UNSURE   bwd det H=256")) << c.out;
  // A head in the middle of the journal (before the refinement): its fresh
  // seeds have no cases there.
  {
    std::istringstream in(slurp(j));
    std::string line, seal;
    for (int k = 0; k < 30 && std::getline(in, line); ++k) seal = json::parse(line).value("sha256", "");
    ASSERT_EQ(seal.size(), 64u);
    c = forged("early.json", [&](json& r) { r["journal"] = {{"head", seal}, {"lines", 30}}; });
    EXPECT_EQ(c.code, 1) << c.out;
    EXPECT_TRUE(contains(c.out, "FAIL     bwd det H=256")) << c.out;
  }
  // An INVALID record (edited, not resealed) is exit 1, named.
  {
    json doc = json::parse(slurp(approvals));
    doc["approvals"][0]["cases"] = 3;
    spit(d + "/unsealed.json", doc.dump(2) + "\n");
    c = cli("approvals " + d + "/unsealed.json --journal " + j);
    EXPECT_EQ(c.code, 1) << c.out;
    EXPECT_TRUE(contains(c.out, "INVALID  ")) << c.out;
  }
  // The same journal twice is read once; --backend goes with --recheck only.
  c = cli("approvals " + approvals + " --journal " + j + " " + j);
  EXPECT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(contains(c.out, "given before (as the same file); read once")) << c.out;
  EXPECT_EQ(cli("approvals " + approvals + " --journal " + j + " --backend cpu").code, 2);
  // A journal a gate holds is refused as busy (exit 2), not called INVALID.
  {
    const int fd = ::open(j.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX), 0);
    c = cli("approvals " + approvals + " --journal " + j);
    ::close(fd);
    EXPECT_EQ(c.code, 2) << c.out;
    EXPECT_TRUE(contains(c.out, "in use by a running normgate gate")) << c.out;
  }
  // A changed header line: the journal is INVALID (exit 1), as for any line.
  {
    std::string t = slurp(j);
    const size_t p = t.find("\"seeds\":\"3x1\"");
    ASSERT_NE(p, std::string::npos);
    t[p + 11] = '2';
    spit(d + "/badhead.jsonl", t);
    c = cli("approvals " + approvals + " --journal " + d + "/badhead.jsonl");
    EXPECT_EQ(c.code, 1) << c.out;
    EXPECT_TRUE(contains(c.out, "INVALID (changed after normgate wrote it")) << c.out;
  }
  // A malformed binding makes the record INVALID, resealed or not.
  for (const json& bad : {json{{"head", "abc"}, {"lines", lines}}, json{{"head", rec["journal"]["head"]}, {"lines", 1}},
                          json{{"head", rec["journal"]["head"]}, {"lines", lines}, {"path", "j"}}}) {
    json doc = json::parse(slurp(approvals));
    doc["approvals"][0]["journal"] = bad;
    doc["approvals"][0] = sealed(doc["approvals"][0]);
    spit(d + "/malformed.approvals.json", doc.dump(2) + "\n");
    c = cli("approvals " + d + "/malformed.approvals.json");
    EXPECT_EQ(c.code, 1) << bad.dump() << "\n" << c.out;
    EXPECT_TRUE(contains(c.out, "INVALID  ") && contains(c.out, "journal")) << c.out;
  }
  // One digit of a record line changed: the journal is INVALID.
  {
    std::string t = slurp(j);
    const size_t p = t.find("\"seconds\":", t.find('\n') + 1);
    ASSERT_NE(p, std::string::npos);
    t[p + 10] = t[p + 10] == '1' ? '2' : '1';
    spit(d + "/bad.jsonl", t);
    c = cli("approvals " + approvals + " --journal " + d + "/bad.jsonl");
    EXPECT_EQ(c.code, 1) << c.out;
    EXPECT_TRUE(contains(c.out, "INVALID")) << c.out;
  }
  // A journal no record rests on.
  g = cli("gate " + d + "/small.toml" + kFast + " --windows H=64 --journal " + d + "/other.jsonl");
  ASSERT_EQ(g.code, 0) << g.out;
  c = cli("approvals " + approvals + " --journal " + d + "/other.jsonl");
  EXPECT_EQ(c.code, 1) << c.out;
  EXPECT_TRUE(contains(c.out, "no record of")) << c.out;
  EXPECT_TRUE(contains(c.out, "1 bound to a journal not given")) << c.out;
  EXPECT_TRUE(contains(c.out, "unchecked bwd det H=256")) << c.out;
  // Not a journal; with another option.
  EXPECT_EQ(cli("approvals " + approvals + " --journal " + d + "/small.toml").code, 2);
  EXPECT_EQ(cli("approvals " + approvals + " --journal " + j + " --seal").code, 2);
  // Without --journal the gate binds nothing.
  {
    const std::string e = scratch("journal_none");
    g = cli("gate " + e + "/small.toml" + kFast + " --windows H=256 --approve");
    ASSERT_EQ(g.code, 0) << g.out;
    EXPECT_FALSE(json::parse(slurp(e + "/small.approvals.json"))["approvals"][0].contains("journal"));
    std::filesystem::remove_all(e);
  }
  std::filesystem::remove_all(d);
}
