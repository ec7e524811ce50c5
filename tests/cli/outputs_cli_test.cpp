// tests/cli: what every subcommand checks before any work: numeric options in
// range (exit 2 naming the option and value, never a hang or a wrong grid),
// empty values, output paths (a missing folder, a folder or a non-file as
// the journal, two outputs on one file, an output over an input), and route
// windows the gate cannot name (T beyond the case ids' 2^31).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace {

using normgate::test::CliRun;
using normgate::test::contains;
namespace fs = std::filesystem;

const std::string kSmall = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.toml";
// One window (H = 256), CPU models, one thread: about a second.
const std::string kOne = " --windows H=256 --backend cpu --threads 1 --seeds 3x1 --t-per-window 4 --quiet";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Dir {
  fs::path p;
  explicit Dir(const std::string& name) {
    p = fs::path(NORMGATE_BINARY_DIR) / ("outputs_cli_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(p);
    fs::create_directories(p);
  }
  ~Dir() { fs::remove_all(p); }
  std::string operator/(const std::string& f) const { return (p / f).string(); }
};

// `normgate ARGS` under a 60 s timeout: a hang is exit 124, not a stuck test.
CliRun cli(const std::string& args) { return normgate::test::run_normgate_timeout(args, 60); }

struct Refusal {
  std::string args;
  std::vector<std::string> said;  // every one must be in the message
};

void expect_refused(const Refusal& r) {
  const CliRun run = cli(r.args);
  EXPECT_EQ(run.code, 2) << r.args << "\n" << run.out;
  for (const auto& s : r.said) EXPECT_TRUE(contains(run.out, s)) << "'" << s << "' not said for: " << r.args << "\n" << run.out;
  EXPECT_FALSE(contains(run.out, "phase    grid")) << "cases ran before the refusal: " << r.args << "\n" << run.out;
}

// --dense-points 2147483647 looped forever (an int loop bound at INT_MAX);
// --dense-step 9223372036854775807 overflowed k * step and put dense points
// 2 rows from the worst T. Every numeric campaign option is range-checked.
TEST(OutputsCli, NumericOptionsOutOfRangeAreRefusedByName) {
  const std::string g = "gate " + kSmall + kOne;
  const Refusal cases[] = {
      {g + " --dense-points 2147483647", {"--dense-points", "2147483647"}},
      {g + " --dense-step 9223372036854775807", {"--dense-step", "9223372036854775807"}},
      {g + " --dense-step 2147483649", {"--dense-step", "2147483649"}},
      {g + " --dense-step 0", {"--dense-step", "0"}},
      {g + " --dense-points -1", {"--dense-points", "-1"}},
      {g + " --t-per-window 2147483647", {"--t-per-window", "2147483647"}},
      {g + " --fresh-factor 2147483647", {"--fresh-factor", "2147483647"}},
      {g + " --fresh-factor -1", {"--fresh-factor", "-1"}},
      {"derive spec.toml --out t.toml --report r --dense-points 2147483647", {"--dense-points", "2147483647"}},
      {"derive spec.toml --out t.toml --report r --dense-step 9223372036854775807", {"--dense-step"}},
      {"check --seeds 3x1 --H 64 --T 2147483649 --backend cpu", {"--T", "2147483649"}},
      {"check --seeds 3x1 --H 0 --T 5 --backend cpu", {"--H", "'0'"}},
  };
  for (const auto& c : cases) expect_refused(c);
}

// The largest values accepted still run (and end): the dense grid keeps only
// the steps that land inside the window.
TEST(OutputsCli, LargestDenseOptionsRunAndEnd) {
  const Dir d("dense");
  const CliRun r = cli("gate " + kSmall + kOne + " --dense-points 1048576 --dense-step 2147483648 --report-json " +
                       (d / "r.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string json = slurp(d / "r.json");
  EXPECT_TRUE(contains(json, "\"dense_points\": 1048576")) << json;
  // No step of 2^31 rows lands inside T = 1..300: an empty dense grid.
  EXPECT_TRUE(contains(json, "\"t\": []")) << json;
}

// An output written over an existing file keeps that file's permission
// bits (it used to come back 0644 whatever they were); a new one is 0644
// less the umask.
TEST(OutputsCli, ARewriteKeepsTheFilesMode) {
  const Dir d("mode");
  const std::string out = (d.p / "c.json").string(), fresh = (d.p / "n.json").string();
  std::ofstream(out) << "old\n";
  ASSERT_EQ(::chmod(out.c_str(), 0640), 0);
  const std::string c = "check --case H=64,T=5,w=bf16,family=normal,seed=0 --backend cpu --variant bwd_det_chunked";
  const CliRun r = cli(c + " --json " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(slurp(out), "old\n");  // rewritten
  struct stat st {};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  // setuid, setgid and sticky are not carried over to new contents.
  ASSERT_EQ(::chmod(out.c_str(), 07750), 0);
  ASSERT_EQ(cli(c + " --json " + out).code, 0);
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  const CliRun n = cli(c + " --json " + fresh);
  ASSERT_EQ(n.code, 0) << n.out;
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u & ~mask);
}

// An approvals file that is a FIFO blocked `routes` forever: refused, exit 2.
TEST(OutputsCli, AnApprovalsFileThatIsNoRegularFileIsRefused) {
  const Dir d("fifo");
  const std::string t = (d.p / "t.toml").string();
  fs::copy_file(kSmall, t);
  ASSERT_EQ(::mkfifo((d.p / "t.approvals.json").c_str(), 0644), 0);
  expect_refused({"routes " + t, {"t.approvals.json: cannot read approvals: not a regular file"}});
}

// An empty value was taken as "not given": `--report-md ""` ran the whole
// gate and wrote no report, exit 0.
TEST(OutputsCli, EmptyValuesAreRefusedByName) {
  const Refusal cases[] = {
      {"gate " + kSmall + kOne + " --report-md ''", {"--report-md", "empty"}},
      {"gate " + kSmall + kOne + " --report-json ''", {"--report-json", "empty"}},
      {"gate " + kSmall + kOne + " --journal ''", {"--journal", "empty"}},
      {"gate " + kSmall + kOne + " --base ''", {"--base", "empty"}},
      {"check --case H=64,T=5,w=bf16,family=normal,seed=0 --backend cpu --json ''", {"--json", "empty"}},
      {"repro H=64,T=5,w=bf16,family=normal,seed=0 --variant bwd_det_chunked --backend cpu --save ''",
       {"--save", "empty"}},
      {"export report.json -o ''", {"--output", "empty"}},
  };
  for (const auto& c : cases) expect_refused(c);
}

// Two outputs on one file, or an output over a file the run reads: exit 2
// naming both, before any work, and the file untouched.
TEST(OutputsCli, OutputOverAnotherOutputOrAnInputIsRefused) {
  const Dir d("clash");
  const std::string t = d / "t.toml";
  fs::copy_file(kSmall, t);
  fs::copy_file(fs::path(NORMGATE_SOURCE_DIR) / "tests/data/routes/small.policy.toml", d / "t.policy.toml");
  const std::string table = slurp(t);
  const std::string g = "gate " + t + kOne;
  const Refusal cases[] = {
      {g + " --report-md " + t, {"--report-md", "table", t}},      // the report overwrote the route table
      {g + " --journal " + t, {"--journal", "table"}},
      {g + " --report-junit " + (d / "t.policy.toml"), {"--report-junit", "policy"}},
      {g + " --report-json " + (d / "t.approvals.json") + " --approve", {"--report-json", "--approve"}},
      {g + " --base " + t + " --report-json " + (d / "./t.toml"), {"--report-json", "table"}},
      {g + " --journal " + (d / "j.jsonl") + " --report-json " + (d / "j.jsonl"), {"--journal", "--report-json"}},
      {g + " --report-md " + (d / "r") + " --report-json " + (d / "../" + d.p.filename().string() + "/r"),
       {"--report-md", "--report-json", "one file"}},
      {"check --seeds 3x1 --H 64 --T 5 --backend cpu --json " + (d / "x") + " --md " + (d / "x"),
       {"--json", "--md", "one file"}},
  };
  for (const auto& c : cases) expect_refused(c);
  EXPECT_EQ(slurp(t), table);
  EXPECT_FALSE(fs::exists(d / "t.approvals.json"));
  // A symlink to the table is the table.
  fs::create_symlink(t, d / "link.md");
  expect_refused({g + " --report-md " + (d / "link.md"), {"--report-md", "table"}});
  EXPECT_EQ(slurp(t), table);
}

// Two spellings of one NEW file, relative to the working folder: "x.json"
// and "./x.json", or a dangling link and its target. weakly_canonical left
// the bare name relative and made "./x.json" absolute, so the two compared
// unequal: the stats JSON replaced the journal (the campaign's resume lost),
// or both reports were lost after the whole run (exit 3).
TEST(OutputsCli, TwoSpellingsOfOneNewFileAreRefused) {
  const Dir d("spellings");
  const fs::path back = fs::current_path();
  fs::current_path(d.p);
  fs::create_symlink("k.jsonl", "kl");  // dangling: k.jsonl does not exist yet
  const std::string g = "gate " + kSmall + kOne;
  const Refusal cases[] = {
      {g + " --journal j.jsonl --stats-json ./j.jsonl", {"--journal", "--stats-json", "one file"}},
      {g + " --report-json x.json --report-md ./x.json", {"--report-md", "--report-json", "one file"}},
      {g + " --report-json x.json --stats-json " + (d / "x.json"), {"--report-json", "--stats-json", "one file"}},
      {g + " --journal kl --stats-json k.jsonl", {"--journal", "--stats-json", "one file"}},
  };
  for (const auto& c : cases) expect_refused(c);
  const bool made = fs::exists("j.jsonl") || fs::exists("x.json") || fs::exists("k.jsonl");
  fs::current_path(back);
  EXPECT_FALSE(made) << "a refused run wrote a file";
}

// A missing folder is a usage error before any work (it was exit 3 after the
// whole campaign for the journal prefix of derive).
TEST(OutputsCli, MissingFolderIsRefusedBeforeAnyWork) {
  const std::string g = "gate " + kSmall + kOne;
  const Refusal cases[] = {
      {g + " --report-md /nonexistent-ng/r.md", {"--report-md", "/nonexistent-ng"}},
      {g + " --report-junit /nonexistent-ng/r.xml", {"--report-junit", "/nonexistent-ng"}},
      {g + " --journal /nonexistent-ng/j.jsonl", {"--journal", "/nonexistent-ng"}},
      {"check --case H=64,T=5,w=bf16,family=normal,seed=0 --backend cpu --json /nonexistent-ng/c.json",
       {"--json", "/nonexistent-ng"}},
      {"repro H=64,T=5,w=bf16,family=normal,seed=0 --variant bwd_det_chunked --backend cpu --save "
       "/nonexistent-ng/c.h5",
       {"--save", "/nonexistent-ng"}},
  };
  for (const auto& c : cases) expect_refused(c);
}

// A journal that is a folder, or not a regular file (a FIFO: the gate
// blocked on it, or took the records and resumed nothing), is refused by
// name; so is a report over a FIFO (the rename would replace it).
TEST(OutputsCli, JournalThatIsNotAFileIsRefused) {
  const Dir d("journal");
  fs::create_directories(d / "jdir");
  expect_refused({"gate " + kSmall + kOne + " --journal " + (d / "jdir"), {"--journal", "jdir", "folder"}});
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0600), 0);
  expect_refused({"gate " + kSmall + kOne + " --journal " + (d / "fifo"), {"--journal", "fifo", "not a regular file"}});
  expect_refused({"gate " + kSmall + kOne + " --report-md " + (d / "fifo"), {"--report-md", "not a regular file"}});
  EXPECT_TRUE(fs::is_fifo(d / "fifo"));
  if (::geteuid() != 0) {  // root reads any file
    std::ofstream(d / "j.jsonl") << "x\n";
    fs::permissions(d / "j.jsonl", fs::perms::owner_write);
    expect_refused({"gate " + kSmall + kOne + " --journal " + (d / "j.jsonl"), {"--journal", "j.jsonl"}});
  }
  // The approvals file beside the table, a folder: refused by name.
  fs::copy_file(kSmall, d / "t.toml");
  fs::copy_file(fs::path(NORMGATE_SOURCE_DIR) / "tests/data/routes/small.policy.toml", d / "t.policy.toml");
  fs::create_directories(d / "t.approvals.json");
  expect_refused({"gate " + (d / "t.toml") + kOne + " --approve", {"t.approvals.json", "folder"}});
}

// Case ids stop at T = 2^31: a window beyond it could be dispatched but never
// gated. The loader refuses it naming the file and line; 2^31 itself loads.
TEST(OutputsCli, RouteWindowBeyondTheCaseIdLimitIsRefusedAtLoad) {
  const Dir d("bigT");
  auto table = [&](const std::string& hi) {
    std::ofstream(d / "t.toml") << "arch = \"sm90a\"\nroute = [\n"
                                   "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, "
                                << hi << "], variant = \"bwd_det_chunked\" },\n]\n";
    return d / "t.toml";
  };
  for (const std::string hi : {"2147483649", "4294967296"}) {
    const std::string t = table(hi);
    expect_refused({"routes " + t, {t + ":3:", hi, "2147483648"}});
    expect_refused({"gate " + t + " --plan", {t + ":3:", hi}});
  }
  // Loads: exit 0 under the override (no approval is on file for it).
  const CliRun ok = cli("routes " + table("2147483648") + " --allow-unapproved");
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(contains(ok.out, "T=1..2147483648")) << ok.out;
}

}  // namespace

// An output that is a symbolic link is written through: the file it points
// to gets the report and the link stays a link (the rename replaced the link
// with a plain file and left its target stale). The approvals file of
// --approve linked to a shared copy likewise. A link into /dev or /proc
// (/dev/stdout) is refused before work: it is no file to replace.
TEST(OutputsCli, ALinkedOutputIsWrittenThroughAndStaysALink) {
  const Dir d("link");
  fs::create_directories(d.p / "shared");
  std::ofstream(d / "shared/target.json") << "old\n";
  fs::create_symlink(d.p / "shared/target.json", d.p / "link.json");
  const CliRun r = cli("gate " + kSmall + kOne + " --report-json " + (d / "link.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::is_symlink(d.p / "link.json"));
  EXPECT_TRUE(contains(slurp(d / "shared/target.json"), "\"windows\"")) << "the link's target was not written";

  // --approve through a linked approvals file beside a copied table.
  fs::copy_file(kSmall, d.p / "small.toml");
  const std::string policy = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.policy.toml";
  if (fs::exists(policy)) fs::copy_file(policy, d.p / "small.policy.toml");
  std::ofstream(d / "shared/small.approvals.json") << "{\"format\": \"normgate-approvals/1\", \"approvals\": []}\n";
  fs::create_symlink(d.p / "shared/small.approvals.json", d.p / "small.approvals.json");
  const CliRun a = cli("gate " + (d / "small.toml") + kOne + " --approve");
  ASSERT_EQ(a.code, 0) << a.out;
  EXPECT_TRUE(fs::is_symlink(d.p / "small.approvals.json"));
  EXPECT_TRUE(contains(slurp(d / "shared/small.approvals.json"), "record_sha256")) << "the shared approvals are stale";

  // A dangling link (relative, its target not made yet): the target is
  // created and the link kept (the rename replaced the link itself).
  fs::create_symlink("shared/new.json", d.p / "dangling.json");
  const CliRun n = cli("gate " + kSmall + kOne + " --report-json " + (d / "dangling.json"));
  ASSERT_EQ(n.code, 0) << n.out;
  EXPECT_TRUE(fs::is_symlink(d.p / "dangling.json"));
  EXPECT_TRUE(contains(slurp(d / "shared/new.json"), "\"windows\"")) << "the dangling link's target was not made";

  fs::create_symlink("/proc/self/fd/1", d.p / "stdout.json");
  expect_refused({"gate " + kSmall + kOne + " --report-json " + (d / "stdout.json"), {"--report-json", "stdout.json"}});

  // /dev/stdout with stdout appended to a file: the chain ends at that
  // regular file, which the rename replaced (the earlier log was lost).
  std::ofstream(d / "ci.log") << "EARLIER LINE\n";
  const CliRun app = cli("gate " + kSmall + kOne + " --report-json /dev/stdout >> " + (d / "ci.log"));
  EXPECT_EQ(app.code, 2) << slurp(d / "ci.log");
  const std::string log = slurp(d / "ci.log");
  EXPECT_TRUE(contains(log, "EARLIER LINE\n")) << log;
  EXPECT_TRUE(contains(log, "--report-json '/dev/stdout' is in /dev/, not a file to write")) << log;
  EXPECT_FALSE(contains(log, "\"windows\"")) << log;
  // inspect --upgrade too (it checked only that the folder was writable).
  const std::string v1 = std::string(NORMGATE_SOURCE_DIR) + "/tests/fuzz/corpus/case_file/res-H4-T2-fp32.h5";
  const CliRun up = cli("inspect '" + v1 + "' --upgrade /dev/stdout >> " + (d / "ci.log"));
  EXPECT_EQ(up.code, 2) << slurp(d / "ci.log");
  EXPECT_TRUE(contains(slurp(d / "ci.log"), "EARLIER LINE\n")) << slurp(d / "ci.log");
  EXPECT_TRUE(contains(slurp(d / "ci.log"), "--upgrade '/dev/stdout' is in /dev/, not a file to write"))
      << slurp(d / "ci.log");
}

// repro --save FOLDER/ makes the folder (and its parents) only for a run
// that writes the case file: a refused run (a variant that does not support
// the case) leaves none of them; a run that saves keeps them.
TEST(OutputsCli, AReproRefusedAfterItsSaveFolderLeavesNoFolder) {
  const Dir d("save");
  const CliRun r = cli("repro H=64,T=3,w=bf16,form=plain,family=cancel,seed=0 --variant ctl_res_grad_early "
                       "--backend cpu --save " + (d / "nd1/sub/"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "does not support case")) << r.out;
  EXPECT_FALSE(fs::exists(d.p / "nd1")) << r.out;
  fs::create_directories(d.p / "kept");
  const CliRun k = cli("repro H=64,T=3,w=bf16,form=plain,family=cancel,seed=0 --variant ctl_res_grad_early "
                       "--backend cpu --save " + (d / "kept/"));
  EXPECT_EQ(k.code, 2) << k.out;
  EXPECT_TRUE(fs::is_directory(d.p / "kept")) << "a folder this run did not make was removed";
  // A path through a missing folder and "..": only the folder under the
  // existing one is made and removed, never the existing one, no stray "x".
  const CliRun dots = cli("repro H=64,T=3,w=bf16,form=plain,family=cancel,seed=0 --variant ctl_res_grad_early "
                          "--backend cpu --save " + (d / "x/../kept/new/"));
  EXPECT_EQ(dots.code, 2) << dots.out;
  EXPECT_TRUE(fs::is_directory(d.p / "kept")) << dots.out;
  EXPECT_FALSE(fs::exists(d.p / "kept/new")) << dots.out;
  EXPECT_FALSE(fs::exists(d.p / "x")) << dots.out;
  const CliRun ok = cli("repro H=64,T=3,w=bf16,form=plain,family=cancel,seed=0 --variant bwd_det_chunked "
                        "--backend cpu --save " + (d / "nd2/sub/"));
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(contains(ok.out, "saved    " + (d / "nd2/sub/"))) << ok.out;
  EXPECT_TRUE(fs::is_directory(d.p / "nd2/sub")) << ok.out;
}

// Under --approve, a report over the approvals lock file (PATH.lock) is
// refused: the rename would give the lock a new inode, and an approver
// holding the old one would no longer exclude the next.
TEST(OutputsCli, AReportOverTheApprovalsLockIsRefused) {
  const Dir d("lock");
  fs::copy_file(kSmall, d.p / "small.toml");
  const std::string policy = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.policy.toml";
  if (fs::exists(policy)) fs::copy_file(policy, d.p / "small.policy.toml");
  std::ofstream(d / "small.approvals.json.lock") << "";
  expect_refused({"gate " + (d / "small.toml") + kOne + " --approve --report-junit " + (d / "small.approvals.json.lock"),
                  {"--report-junit", "approvals lock"}});
}
