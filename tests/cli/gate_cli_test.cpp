// tests/cli: `normgate gate` and `normgate routes` as a user runs them: exit
// codes (0 pass, 1 a window fails / a route is refused, 2 usage or input
// error), messages naming the bad value or FILE:LINE, the CPU-model label,
// approvals, and a campaign killed with SIGKILL and resumed from its journal
// giving the uninterrupted run's report byte for byte (but the date).
#include <gtest/gtest.h>

#include "cli_util.h"
#include "normgate/kernels/device.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

const std::string kBin = normgate::test::normgate_bin();
const std::string kSmall = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.toml";
const std::string kCtl = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/ctl_override.toml";
// Fast options for the small table (CPU models, one thread: robust timing on a busy machine).
const std::string kFast = " --backend cpu --threads 1 --seeds 3x1 --t-per-window 4 --dense-points 2";

using CliResult = normgate::test::CliRun;
using normgate::test::contains;
using normgate::test::slurp;
using normgate::test::without_dates;
CliResult cli(const std::string& args) { return normgate::test::run_normgate(args); }

std::string temp_dir(const std::string& name) { return normgate::test::fresh_dir("gate_cli", name); }

// The small table and its approval policy copied into `folder` (made):
// a table under a path of one's choosing.
void small_table_in(const std::string& folder) {
  std::filesystem::create_directories(folder);
  std::filesystem::copy_file(kSmall, folder + "/small.toml");
  std::filesystem::copy_file(std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.policy.toml",
                             folder + "/small.policy.toml");
}

int count_lines(const std::string& path) {
  const std::string s = slurp(path);
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

TEST(GateCli, HelpAndUsageErrors) {
  for (const char* sub : {"gate", "routes"}) {
    const CliResult r = cli(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(contains(r.out, "Usage")) << r.out;
    // The table is required by both (gate checks it itself, for --merge's
    // sake): never shown as optional.
    EXPECT_TRUE(contains(r.out, " [OPTIONS] table\n")) << r.out;
    EXPECT_FALSE(contains(r.out, "[table]")) << r.out;
  }
  const std::string dir = temp_dir("usage");
  const std::string gap = dir + "/gap.toml";
  std::ofstream(gap) << "arch = \"sm90a\"\nroute = [\n"
                        "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 100], "
                        "variant = \"bwd_det_chunked\" },\n"
                        "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [150, 200], "
                        "variant = \"bwd_det_chunked\" },\n]\n";
  struct Bad {
    std::string args, needle;
  };
  const Bad cases[] = {
      {"gate", "table"},
      {"gate /nonexistent/t.toml", "/nonexistent/t.toml"},
      {"gate " + kSmall + " --seeds 3x0", "3x0"},
      {"gate " + kSmall + " --windows H=x", "H=x"},
      {"gate " + kSmall + " --windows H=4096", "selects none"},
      {"gate " + kSmall + " --backend tpu", "tpu"},
      {"gate " + kSmall + " --t-per-window 1", "--t-per-window: Value 1 not in range 2"},
      {"gate " + kCtl, "ctl_override.toml:8: variant ctl_fp32_seq is a NEGATIVE CONTROL"},
      {"gate " + gap, "gap.toml:4: gap: T=101..149"},
      {"routes " + gap, "gap.toml:4:"},
      {"routes " + kSmall + " --pick op=bwd,H=64", "required"},
      // A backward call without its mode was dispatched as det: refused now.
      {"routes " + kSmall + " --pick op=bwd,H=64,w=bf16,T=5", "op=bwd needs mode=det or mode=nondet"},
      {"routes " + kSmall + " --pick op=fwd,H=64,H=128,w=bf16,T=5", "H given twice"},
      // A forward call has no mode: one given is refused, not ignored.
      {"routes " + kSmall + " --pick op=fwd,mode=det,H=64,w=bf16,T=5", "op=fwd takes no mode"},
      // Every --pick is parsed before any is answered.
      {"routes " + kSmall + " --pick op=bwd,mode=det,H=64,w=bf16,T=5 --pick op=fwd", "required"},
      {"routes " + kSmall + " --pick op=fwd,H=64,w=bf16,T=5,form=heads8", "--pick 'op=fwd,H=64,w=bf16,T=5,form=heads8': bad form 'heads8'"},
      // A call the library refuses is a usage error of --pick, before any answer.
      {"routes " + kSmall + " --pick op=fwd,H=64,w=bf16,T=5 --pick op=fwd,H=16385,w=bf16,T=5", "H = 16385 outside 1..16384"},
      {"routes " + kSmall + " --pick op=fwd,H=64,w=bf16,T=5 --pick op=fwd,H=4096,w=bf16,T=5,form=heads4",
       "fwd H=4096 w=bf16 form=heads4 T=5: H = 4096: form 'heads4' normalizes heads of 256"},
      {"routes " + kSmall + " --pick op=fwd,H=256,w=bf16,T=178956971,form=heads24",
       "T = 178956971 is out of range 0..178956970 (T*heads <= 4294967296)"},
      {"routes " + kSmall + " --pick op=fwd,H=64,w=bf16,T=4294967297", "T = 4294967297 is out of range 0..4294967296"},
      {"routes " + kSmall + " --pick op=fwd,H=+64,w=bf16,T=5", "bad H '+64' (decimal digits only)"},
      {"routes " + kSmall + " --pick op=fwd,H=64,w=bf16,T=-0", "bad T '-0'"},
      {"routes " + kSmall + " --pick op=fwd,H=64,w=bf16,T=9223372036854775808", "larger than 2^63 - 1"},
      {"routes " + kSmall + " --pick op=fwd,H=64,w=bf16,T=5,", "a trailing ','"},
      {"gate " + kSmall + " --plan --rate 0", "got '0'"},
      {"gate " + kSmall + " --plan --rate fast", "--rate: 'fast' is not a decimal number"},
      {"gate " + kSmall + " --plan --windows H=4096", "selects none"},
      {"gate " + kSmall + " --rate 1e8", "--plan"},                    // --rate only with --plan
      {"gate " + kSmall + " --rate-bwd 1e8", "--plan"},
      {"gate " + kSmall + " --plan --rate-fwd 0", "got '0'"},
      {"gate " + kSmall + " --plan --rate-bwd 1e300", "got '1e300'"},
      {"gate " + kSmall + " --plan --rate 1e9 --rate-fwd 2e9", "excludes"},  // one rate or the two
      {"gate " + kSmall + " --plan --journal j.jsonl", "--journal"},   // --plan runs nothing: no journal
      {"gate " + kSmall + " --plan --approve", "--approve"},
      // --plan checks the backend and oracle as the run would (scripts/main
      // validates with --plan before it deletes the last run's journal).
      {"gate " + kSmall + " --plan --backend tpu", "tpu"},
      {"gate " + kSmall + " --plan --oracle fp16", "fp16"},
      {"gate " + kSmall + " --threads 100000", "100000"},  // libgomp cannot start that many
      {"gate " + kSmall + " --threads abc", "--threads: 'abc' is not a decimal integer"},
  };
  for (const auto& b : cases) {
    const CliResult r = cli(b.args);
    EXPECT_EQ(r.code, 2) << b.args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, b.needle)) << b.args << "\n" << r.out;
  }
  {  // the bad second --pick: nothing answered for the first
    const CliResult r = cli("routes " + kSmall + " --pick op=bwd,mode=det,H=64,w=bf16,T=5 --pick op=fwd");
    EXPECT_FALSE(contains(r.out, "REFUSED") || contains(r.out, " -> ")) << r.out;
  }
  {  // a well-formed call outside every window is the table's answer, not a usage error: exit 1,
     // each call answered in order
    const CliResult r = cli("routes " + kSmall + " --pick op=bwd,mode=det,H=64,w=bf16,T=5 --pick op=bwd,mode=det,H=64,w=bf16,T=701");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(contains(r.out, "REFUSED bwd det H=64 w=bf16 form=plain T=5: window")) << r.out;  // no approvals
    EXPECT_TRUE(contains(r.out, "REFUSED bwd det H=64 w=bf16 form=plain T=701 is outside every window")) << r.out;
    EXPECT_TRUE(contains(r.out, "names no fallback for bwd det")) << r.out;
  }
  {  // a table with a fallback: the call outside its windows is served by it, said, and exit 1
    const CliResult r = cli("routes " + std::string(NORMGATE_SOURCE_DIR) +
                            "/tests/data/routes/dispatch.toml --pick op=bwd,mode=nondet,H=128,w=fp32,form=res,T=3");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_TRUE(contains(r.out, "FALLBACK bwd nondet H=128 w=fp32 form=res T=3 -> bwd_nondet_atomic")) << r.out;
  }
  std::filesystem::remove_all(dir);
}

// --backend gpu without a usable device: --plan refuses it as the run does,
// so scripts/main's check (a --plan before it deletes the last run's
// journal and reports) catches it before anything is deleted.
TEST(GateCli, PlanRefusesGpuBackendWithoutADevice) {
  if (normgate::kernels::gpu_available()) GTEST_SKIP() << "a usable CUDA device is present";
  for (const std::string plan : {" --plan", ""}) {
    const CliResult r = cli("gate " + kSmall + " --backend gpu --threads 1 --seeds 3x1 --t-per-window 4" + plan);
    EXPECT_EQ(r.code, 2) << plan << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "backend gpu requested but no usable CUDA device is present")) << plan << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "Nothing was run")) << r.out;
  }
}

// --devices with the CPU models is refused by --plan too, as by the run:
// scripts/main deletes the last run's journal once a --plan accepts its
// arguments.
TEST(GateCli, PlanRefusesWhatTheRunRefuses) {
  for (const std::string plan : {" --plan", ""}) {
    const CliResult r = cli("gate " + kSmall + kFast + " --devices 0" + plan);
    EXPECT_EQ(r.code, 2) << plan << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "--devices 0 has no effect with --backend cpu")) << plan << "\n" << r.out;
  }
}

// --plan runs nothing: no GPU, no case, exit 0, a table of the windows.
TEST(GateCli, PlanRunsNothing) {
  const CliResult r = cli("gate " + kSmall + kFast + " --plan --rate 2e6");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* said : {"6 windows gated", "Nothing was run", "at 2e+06 elements/s"})
    EXPECT_TRUE(contains(r.out, said)) << said << "\n" << r.out;
  for (const char* never : {"backend  ", "phase    grid", "verdict"})
    EXPECT_FALSE(contains(r.out, never)) << never << "\n" << r.out;
}

// A --journal whose status cannot be read (two links pointing at each
// other) is a usage error naming the reason, before any case; it was a
// runtime failure (exit 3) once the journal was opened.
TEST(GateCli, AJournalLinkLoopIsAUsageError) {
  const std::string dir = temp_dir("loop");
  std::filesystem::create_symlink(dir + "/b.jsonl", dir + "/a.jsonl");
  std::filesystem::create_symlink(dir + "/a.jsonl", dir + "/b.jsonl");
  const CliResult r = cli("gate " + kSmall + kFast + " --journal " + dir + "/a.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "--journal '" + dir + "/a.jsonl': Too many levels of symbolic links")) << r.out;
  EXPECT_FALSE(contains(r.out, "phase    grid")) << r.out;
  std::filesystem::remove_all(dir);
}

// Every file the gate will write is checked before any case runs: a report
// or approvals folder that does not exist is a usage error (exit 2).
TEST(GateCli, UnwritableOutputsRefusedBeforeAnyWork) {
  for (const std::string opt : {" --report-md /nonexistent-dir/g.md", " --report-json /nonexistent-dir/g.json"}) {
    const CliResult r = cli("gate " + kSmall + kFast + opt);
    EXPECT_EQ(r.code, 2) << opt << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "/nonexistent-dir")) << r.out;
    EXPECT_FALSE(contains(r.out, "phase    grid")) << "cases ran before the refusal:\n" << r.out;
  }
  // A report over an input of the run (the table's approval policy) is
  // refused, naming both.
  const std::string policy = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.policy.toml";
  const CliResult p = cli("gate " + kSmall + kFast + " --report-md " + policy);
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_TRUE(contains(p.out, "--report-md '" + policy + "' is also this run's input, the table's approval policy '"))
      << p.out;
}

// A report over the journal key file (NORMGATE_JOURNAL_KEY_FILE, an input of
// every run that sets it) is refused before any work: written, it left every
// journal sealed with the key unreadable (found by an adversarial pass).
TEST(GateCli, AReportOverTheJournalKeyFileIsRefused) {
  const std::string dir = temp_dir("keyout");
  const std::string key = dir + "/key";
  const std::string secret = "0123456789abcdef0123456789abcdef0123456789abcdef\n";
  std::ofstream(key) << secret;
  std::filesystem::permissions(key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  for (const std::string opt : {" --report-json ", " --report-md ", " --stats-json "}) {
    const auto r = normgate::test::run_normgate_with("NORMGATE_JOURNAL_KEY_FILE=" + key,
                                                          "gate " + kSmall + kFast + " --journal " + dir +
                                                              "/j.jsonl" + opt + key);
    EXPECT_EQ(r.code, 2) << opt << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "is also this run's input, NORMGATE_JOURNAL_KEY_FILE '" + key + "'")) << r.out;
    EXPECT_FALSE(contains(r.out, "phase    grid")) << r.out;
    EXPECT_EQ(slurp(key), secret) << opt;
    EXPECT_FALSE(std::filesystem::exists(dir + "/j.jsonl")) << opt;
  }
  std::filesystem::remove_all(dir);
}

#ifdef NG_FAULT_SHIM
// Cases that fail to run (every allocation of one BF16 [600, 64] tensor
// fails: tests/util/fault_shim.c), none over budget: the verdict is ERROR,
// exit 3 (a runtime failure), not FAIL, exit 1 (the kernels failed).
TEST(GateCli, CasesThatFailToRunAreAnErrorNotAFail) {
  const std::string dir = temp_dir("malloc");
  const std::string table = dir + "/one.toml";
  std::ofstream(table) << "arch = \"sm90a\"\nroute = [\n"
                          "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", "
                          "T = [1, 600], variant = \"bwd_det_chunked\" },\n]\n";
  const std::string fault =
      "env LD_PRELOAD=" + std::string(NG_FAULT_SHIM) + " NG_FAULT_MALLOC_BYTES=" + std::to_string(64 * 600 * 2);
  const CliResult r = normgate::test::run_normgate_with(
      fault, "gate " + table + kFast + " --report-md " + dir + "/r.md --report-json " + dir + "/r.json");
  EXPECT_EQ(r.code, 3) << r.out;
  // The reports say what stdout says: ERROR, not FAIL, for the window and the run.
  const std::string md = slurp(dir + "/r.md");
  EXPECT_TRUE(contains(md, "- verdict: **ERROR**: 0 of 1 gated windows pass; 1 ERROR (")) << md;
  EXPECT_TRUE(contains(md, "| **ERROR** |")) << md;
  EXPECT_FALSE(contains(md, "FAIL")) << md;
  const auto rep = nlohmann::json::parse(slurp(dir + "/r.json"));
  ASSERT_EQ(rep["windows"].size(), 1u) << rep.dump();
  EXPECT_EQ(rep["windows"][0]["verdict"], "error") << rep.dump();
  EXPECT_EQ(rep["windows"][0]["errored"], true) << rep.dump();
  EXPECT_EQ(rep["windows"][0]["pass"], false) << rep.dump();
  EXPECT_TRUE(contains(r.out, "fault_shim: malloc of the chosen size failed")) << r.out;
  EXPECT_TRUE(contains(r.out, "verdict  ERROR: 1 of 1 windows have cases that failed to run and none over budget "
                              "(first: H=64,T=600,")) << r.out;
  EXPECT_FALSE(contains(r.out, "verdict  FAIL")) << r.out;
  // Sharded, and merged with a shard missing: still ERROR (the journalled
  // errors decide it), and every output names the shard not given.
  const std::string j1 = dir + "/t1.jsonl";
  const CliResult s1 = normgate::test::run_normgate_with(fault, "gate " + table + kFast + " --shard 1/2 --journal " + j1);
  EXPECT_EQ(s1.code, 0) << s1.out;
  const CliResult m = cli("gate " + table + kFast + " --merge " + j1 + " --journal " + dir + "/m.jsonl --report-md " +
                          dir + "/m.md --report-json " + dir + "/m.json");
  EXPECT_EQ(m.code, 3) << m.out;
  EXPECT_TRUE(contains(m.out, "verdict  ERROR: 1 of 1 windows")) << m.out;
  EXPECT_TRUE(contains(m.out, " cases of those windows have no result (shards not given: 2/2)\n")) << m.out;
  EXPECT_TRUE(contains(slurp(dir + "/m.md"), "- **cases missing**: ")) << slurp(dir + "/m.md");
  const auto mj = nlohmann::json::parse(slurp(dir + "/m.json"));
  EXPECT_EQ(mj["shards_missing"], nlohmann::json::array({"2/2"})) << mj.dump();
  EXPECT_EQ(mj["windows"][0]["verdict"], "error") << mj.dump();
  EXPECT_GT(mj["windows"][0]["missing_cases"].get<int64_t>(), 0) << mj.dump();
  const CliResult ok = cli("gate " + table + kFast);  // the same run without the fault passes
  EXPECT_EQ(ok.code, 0) << ok.out;
  std::filesystem::remove_all(dir);
}
#endif

// A window whose largest case cannot fit in host memory is refused by name
// before any work (it ran its smaller grid cases first and ended in
// std::bad_alloc, exit 3, at the large ones): nothing in the journal, no
// phase line. --plan still answers (it allocates no case).
TEST(GateCli, AWindowBeyondHostMemoryIsRefusedBeforeAnyWork) {
  const std::string dir = temp_dir("memory");
  const std::string table = dir + "/big.toml";
  std::ofstream(table) << "arch = \"sm90a\"\nroute = [\n"
                          "  { op = \"bwd\", mode = \"det\", H = 16384, w = \"bf16\", form = \"plain\", "
                          "T = [1, 2147483647], variant = \"bwd_det_chunked\" },\n]\n";
  const std::string journal = dir + "/j.jsonl";
  const CliResult r = cli("gate " + table + kFast + " --journal " + journal);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "case H=16384,T=2147483647,")) << r.out;
  EXPECT_TRUE(contains(r.out, "of BF16 tensors (its inputs and the outputs of 1 implementation), "))
      << r.out;
  EXPECT_FALSE(contains(r.out, "phase")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(journal) && count_lines(journal) > 0) << slurp(journal);
  const CliResult p = cli("gate " + table + kFast + " --plan");
  EXPECT_EQ(p.code, 0) << p.out;
  std::filesystem::remove_all(dir);
}

// A forward-only window can be the largest case while a backward window of
// the same H and form needs more bytes a row: the refusal names which check
// the largest case is, and its advice (the largest T that fits) is the
// backward window's, the same as for a table of that window alone.
TEST(GateCli, MemoryAdviceCoversEveryWindowOfTheShape) {
  const std::string dir = temp_dir("memory_mixed");
  auto table = [&](const std::string& name, const std::string& routes) {
    const std::string t = dir + "/" + name + ".toml";
    std::ofstream(t) << "arch = \"sm90a\"\nroute = [\n" << routes << "]\n";
    return t;
  };
  const std::string fwd = "  { op = \"fwd\", H = 16384, w = \"bf16\", form = \"plain\", T = [1, 50000], "
                          "variant = \"fwd_rowwise\" },\n";
  const std::string bwd = "  { op = \"bwd\", mode = \"det\", H = 16384, w = \"bf16\", form = \"plain\", "
                          "T = [1, %T], variant = \"bwd_det_chunked\" },\n";
  auto with_t = [&](std::string r, const std::string& t) { return r.replace(r.find("%T"), 2, t); };
  auto advice = [&](const std::string& t) {
    const CliResult r = normgate::test::run_normgate_with("ulimit -v 3000000 &&", "gate " + t + kFast);
    EXPECT_EQ(r.code, 2) << r.out;
    const std::string key = "choose T <= ";
    const size_t at = r.out.find(key);
    EXPECT_NE(at, std::string::npos) << r.out;
    return std::make_pair(r.out, at == std::string::npos ? std::string() : r.out.substr(at + key.size(),
                                                                            r.out.find(' ', at + key.size()) - at - key.size()));
  };
  const auto mixed = advice(table("mixed", fwd + with_t(bwd, "30000")));
  EXPECT_TRUE(contains(mixed.first, "case H=16384,T=50000,")) << mixed.first;
  EXPECT_TRUE(contains(mixed.first, " rows of 16384, a forward-only check) needs about ")) << mixed.first;
  const auto alone = advice(table("alone", with_t(bwd, "60000")));
  EXPECT_FALSE(contains(alone.first, "-only check")) << alone.first;
  EXPECT_FALSE(mixed.second.empty());
  EXPECT_EQ(mixed.second, alone.second) << mixed.first << "\n" << alone.first;
  std::filesystem::remove_all(dir);
}

TEST(GateCli, SmallTablePassesAndSaysItRanCpuModels) {
  const std::string dir = temp_dir("pass");
  const CliResult r = cli("gate " + kSmall + kFast + " --report-md " + dir + "/r.md --report-json " + dir + "/r.json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "backend  cpu-model")) << r.out;
  EXPECT_TRUE(contains(r.out, "NOT as CUDA code")) << r.out;
  EXPECT_TRUE(contains(r.out, "verdict  PASS: 6 of 6 windows pass")) << r.out;
  // The pipeline line names the half that ran the kernels as it ran here.
  EXPECT_TRUE(contains(r.out, "CPU-model+generator half ")) << r.out;
  EXPECT_TRUE(contains(r.out, "oracle side idle waiting for the CPU models ")) << r.out;
  EXPECT_FALSE(contains(r.out, "GPU+generator half")) << r.out;
  const std::string md = slurp(dir + "/r.md");
  EXPECT_TRUE(contains(md, "| window | variant | y | rstd | dx | dw |")) << md;
  EXPECT_TRUE(contains(md, "closest to the budget")) << md;
  EXPECT_TRUE(contains(slurp(dir + "/r.json"), "\"backend\": \"cpu-model\""));
  // Not a terminal: no progress bar escape codes.
  EXPECT_FALSE(contains(r.out, "\033[K")) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(GateCli, ControlThroughOverrideFailsOnCancel) {
  const CliResult r = cli("gate " + kCtl + kFast + " --allow-controls");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "**FAIL**")) << r.out;
  EXPECT_TRUE(contains(r.out, "NEGATIVE CONTROL")) << r.out;
  EXPECT_TRUE(contains(r.out, "normal 0 of")) << r.out;
  EXPECT_TRUE(contains(r.out, "llm 0 of")) << r.out;
  EXPECT_TRUE(contains(r.out, "family=cancel")) << r.out;
}

TEST(GateCli, ApproveThenDispatch) {
  const std::string dir = temp_dir("approve");
  const std::string table = dir + "/small.toml";
  std::filesystem::copy_file(kSmall, table);
  // --approve needs the table's approval policy beside it (kFast meets its minimum).
  std::filesystem::copy_file(std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.policy.toml",
                             dir + "/small.policy.toml");
  const CliResult g = cli("gate " + table + kFast + " --windows H=256 --approve --quiet");
  EXPECT_EQ(g.code, 0) << g.out;
  EXPECT_TRUE(contains(g.out, "approved cpu-model bwd det H=256")) << g.out;
  ASSERT_TRUE(std::filesystem::exists(dir + "/small.approvals.json"));
  const std::string call = " --pick op=bwd,mode=det,H=256,w=fp32,T=200";
  const CliResult refused = cli("routes " + table + call);
  EXPECT_EQ(refused.code, 1) << refused.out;
  EXPECT_TRUE(contains(refused.out, "only a cpu-model approval")) << refused.out;
  const CliResult accepted = cli("routes " + table + call + " --accept-cpu-model");
  EXPECT_EQ(accepted.code, 0) << accepted.out;
  EXPECT_TRUE(contains(accepted.out, "-> bwd_det_chunked")) << accepted.out;
  const CliResult missing = cli("routes " + table + " --pick op=bwd,mode=nondet,H=64,w=bf16,T=5 --accept-cpu-model");
  EXPECT_EQ(missing.code, 1) << missing.out;
  EXPECT_TRUE(contains(missing.out, "missing")) << missing.out;
  // Without --accept-cpu-model the CPU-model approval does not count: the
  // dispatcher refuses that route too, and the listing exits 1.
  const CliResult list = cli("routes " + table);
  EXPECT_EQ(list.code, 1) << list.out;
  EXPECT_TRUE(contains(list.out, "[cpu-model only]")) << list.out;
  EXPECT_TRUE(contains(list.out, "(1 approved by CPU-model gates only, not counted without --accept-cpu-model)"))
      << list.out;
  std::filesystem::remove_all(dir);
}

// One flipped bit in a journal never changes a verdict: a window routing the
// negative control ctl_fp32_seq (bwd det, H = 64, T = [1, 5], cancel seed 0)
// fails; "T=1" turned into "T=5" in the case id of the journal's second line
// (one bit: '1' 0x31, '5' 0x35) made the record of T = 1 (which passes) stand
// for T = 5. The resume must stop with an error naming the journal and the
// line (exit 2), never report the window.
TEST(GateCli, FlippedBitInAJournalIsAnErrorNamingTheLine) {
  const std::string dir = temp_dir("flip");
  const std::string table = dir + "/ctl.toml";
  std::ofstream(table) << "arch = \"sm90a\"\nroute = [\n"
                          "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 5], "
                          "variant = \"ctl_fp32_seq\" },\n]\n";
  const std::string journal = dir + "/j.jsonl";
  const std::string args =
      "gate " + table + " --allow-controls --backend cpu --threads 1 --seeds cancel:0..0 --quiet --journal " + journal;
  const CliResult first = cli(args);
  ASSERT_EQ(first.code, 1) << first.out;
  EXPECT_TRUE(contains(first.out, "FAIL: 0 of 1 windows pass")) << first.out;
  std::string text = slurp(journal);
  const size_t line2 = text.find('\n') + 1;
  const size_t at = text.find("T=1,", line2);
  ASSERT_LT(at, text.find('\n', line2)) << "line 2 is not the case T = 1:\n" << text;
  text[at + 2] = '5';
  std::ofstream(journal, std::ios::binary | std::ios::trunc) << text;
  const CliResult resumed = cli(args);
  EXPECT_EQ(resumed.code, 2) << resumed.out;
  EXPECT_TRUE(contains(resumed.out, "journal " + journal + " line 2:")) << resumed.out;
  EXPECT_FALSE(contains(resumed.out, "PASS")) << resumed.out;
  EXPECT_FALSE(contains(resumed.out, "verdict")) << resumed.out;
  std::filesystem::remove_all(dir);
}

// A journal of the default family set (5xN: epsnear at several eps, cancel
// at several kappa) resumes: its cases are in the campaign's plan. (The plan
// check first accepted only the case id defaults of eps and kappa, and
// refused every finished 5xN journal on resume.)
TEST(GateCli, AJournalOfTheDefaultFamilyPointsResumes) {
  const std::string dir = temp_dir("points");
  const std::string journal = dir + "/j.jsonl";
  const std::string args = "gate " + kSmall + " --backend cpu --threads 1 --seeds 5x1 --t-per-window 2 --quiet --journal " +
                           journal;
  const CliResult first = cli(args + " --report-json " + dir + "/a.json");
  ASSERT_EQ(first.code, 0) << first.out;
  ASSERT_TRUE(contains(slurp(journal), ",eps=1e-05\"")) << "no epsnear case at eps 1e-5 in the journal";
  ASSERT_TRUE(contains(slurp(journal), ",kappa=10000\"")) << "no cancel case at kappa 1e4 in the journal";
  const CliResult again = cli(args + " --report-json " + dir + "/b.json");
  ASSERT_EQ(again.code, 0) << again.out;
  auto without_date = [](std::string t) {
    const size_t at = t.find("\"date\"");
    return at == std::string::npos ? t : t.erase(at, t.find('\n', at) - at);
  };
  EXPECT_EQ(without_date(slurp(dir + "/a.json")), without_date(slurp(dir + "/b.json")));
  std::filesystem::remove_all(dir);
}

// kill -9 in the middle of a campaign, resume with the same journal: nothing
// finished is redone and both reports equal the uninterrupted run's but the date.
TEST(GateCli, ResumeAfterKill9GivesTheSameReport) {
  const std::string dir = temp_dir("resume");
  const std::string opts = " --backend cpu --threads 1 --seeds 3x2 --t-per-window 6 --dense-points 2 --quiet";
  const CliResult full = cli("gate " + kSmall + opts + " --report-md " + dir + "/a.md --report-json " + dir + "/a.json");
  ASSERT_EQ(full.code, 0) << full.out;

  const std::string journal = dir + "/j.jsonl";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::dup2(devnull, 2);
    std::vector<std::string> args = {kBin,   "gate",       kSmall, "--backend", "cpu",           "--threads",
                                     "1",    "--seeds",    "3x2",  "--t-per-window", "6",        "--dense-points",
                                     "2",    "--quiet",    "--journal", journal, "--report-md", dir + "/b.md"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(kBin.c_str(), argv.data());
    _exit(127);
  }
  // Wait until the header and a few cases are on disk, then SIGKILL.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(journal) && count_lines(journal) >= 6) break;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "the gate finished before it could be killed";
  const int done_before = count_lines(journal) - 1;
  ASSERT_GE(done_before, 5);
  EXPECT_FALSE(std::filesystem::exists(dir + "/b.md"));

  const CliResult resumed =
      cli("gate " + kSmall + opts + " --journal " + journal + " --report-md " + dir + "/b.md --report-json " + dir +
          "/b.json");
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_TRUE(contains(resumed.out, "finished cases resumed")) << resumed.out;
  EXPECT_EQ(without_dates(slurp(dir + "/b.md")), without_dates(slurp(dir + "/a.md")));
  EXPECT_EQ(without_dates(slurp(dir + "/b.json")), without_dates(slurp(dir + "/a.json")));
  EXPECT_NE(slurp(dir + "/a.md").find("- date: "), std::string::npos);

  // Every case is in the journal exactly once: nothing finished was redone.
  std::istringstream in(slurp(journal));
  std::string line;
  std::set<std::string> ids;
  int records = 0;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const auto a = line.find("\"case\":\"");
    ASSERT_NE(a, std::string::npos) << line;
    const auto b = line.find('"', a + 8);
    ids.insert(line.substr(a + 8, b - a - 8) + "|" + line.substr(line.find("\"impls\":")).substr(0, 60));
    ++records;
  }
  EXPECT_EQ(static_cast<int>(ids.size()), records);
  EXPECT_GT(records, done_before);
  // Resuming a finished campaign runs nothing.
  const CliResult again = cli("gate " + kSmall + opts + " --journal " + journal);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_TRUE(contains(again.out, "resumed, 0 run now")) << again.out;
  std::filesystem::remove_all(dir);
}

}  // namespace

// A route table under a folder whose name holds a newline: the line the gate
// prints and the Markdown report's lines that name the table stay one line
// each (\x0a), so no path can start a line of its own in a report someone
// reads or parses (route places, file:line, are escaped the same way).
TEST(GateCli, ANewlineInTheTablePathStaysInsideItsLine) {
  const std::string dir = temp_dir("newline");
  const std::string odd = dir + "/a\nverdict  PASS";
  small_table_in(odd);
  const std::string md_path = dir + "/r.md";
  // Single quotes hold a newline in any POSIX shell (the tests' /bin/sh need not read $'...').
  const CliResult r = cli("gate '" + odd + "/small.toml'" + kFast +
                          " --windows op=fwd --report-md " + md_path);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "gate     " + dir + "/a\\x0averdict  PASS/small.toml\n")) << r.out;
  EXPECT_FALSE(contains(r.out, "\nverdict  PASS/small.toml")) << r.out;
  const std::string md = slurp(md_path);
  EXPECT_TRUE(contains(md, "# normgate gate: " + dir + "/a\\x0averdict  PASS/small.toml\n")) << md;
  EXPECT_FALSE(contains(md, "\nverdict  PASS/small.toml")) << md;
  std::filesystem::remove_all(dir);
}

// A table under a folder whose name is not UTF-8 (a Latin-1 byte): the JSON
// report is written, the byte as U+FFFD (it ended the finished gate with
// exit 3, "invalid UTF-8 byte", and no report).
TEST(GateCli, APathThatIsNotUtf8StillGetsItsJsonReport) {
  const std::string dir = temp_dir("latin1");
  const std::string odd = dir + "/caf\xe9";
  small_table_in(odd);
  const std::string json = dir + "/r.json";
  const CliResult r = cli("gate '" + odd + "/small.toml'" + kFast + " --windows op=fwd --report-json " + json);
  EXPECT_EQ(r.code, 0) << r.out;
  const auto rep = nlohmann::json::parse(slurp(json));
  EXPECT_EQ(rep["table"], dir + "/caf\xef\xbf\xbd/small.toml") << rep.dump();
  std::filesystem::remove_all(dir);
}

// A value given on the command line cannot forge a line of normgate's error
// message, not even an indented continuation line ("\n  "), and a tab in it
// is shown as \x09.
TEST(GateCli, AnArgumentCannotForgeAContinuationLine) {
  const CliResult r = cli("gate " + kSmall + kFast + " --windows 'op=fwdx\n  normgate: verdict  PASS'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "op=fwdx\\x0a  normgate: verdict  PASS")) << r.out;
  EXPECT_FALSE(contains(r.out, "\n  normgate: verdict  PASS")) << r.out;
  const CliResult t = cli("gate " + kSmall + kFast + " --windows 'op=fwd,H=64\t'");
  EXPECT_EQ(t.code, 2) << t.out;
  EXPECT_TRUE(contains(t.out, "64\\x09")) << t.out;
  EXPECT_FALSE(contains(t.out, "\t")) << t.out;
}
