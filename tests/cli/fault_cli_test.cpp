// tests/cli: write faults at every write site of the CLI, injected by the
// LD_PRELOAD shim tests/util/fault_shim.c (a full disk: ENOSPC after a byte
// budget; a broken one: EIO from fsync; a failing rename): the run exits 3
// naming the file, no crash, the file keeps its previous contents, no
// temporary file is left, and nothing already in the journal is lost (a
// resume gives the uninterrupted run's report).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace {

using normgate::test::CliRun;
using normgate::test::contains;
namespace fs = std::filesystem;

const std::string kSmall = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.toml";
const std::string kPolicy = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.policy.toml";
// CPU models, one thread, a small campaign (meets small.policy.toml's minimum).
const std::string kFast = " --backend cpu --threads 1 --seeds 3x1 --t-per-window 4 --dense-points 2 --quiet";

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string without_dates(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (!contains(line, "- date: ") && !contains(line, "\"date\":")) out += line + "\n";
  return out;
}

// The complete lines of a journal without each record's "seconds" (the
// time a case took: the only field that differs between two runs).
std::vector<std::string> untimed_lines(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1)
    // The time, the line's digest that covers it and the chain member that
    // holds the line before it's (journal format 3).
    out.push_back(std::regex_replace(
        text.substr(pos, nl - pos),
        std::regex(",\"seconds\":[^,}]*|,\"sha256\":\"[0-9a-f]{64}\"|\"prev\":\"[0-9a-f]{64}\","), ""));
  return out;
}

struct Dir {
  fs::path p;
  explicit Dir(const std::string& name) {
    p = fs::path(NORMGATE_BINARY_DIR) / ("fault_cli_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(p);
    fs::create_directories(p);
  }
  ~Dir() { fs::remove_all(p); }
  std::string operator/(const std::string& f) const { return (p / f).string(); }
  // Temporary files left in the folder (NAME.tmp.PID, NAME.old.PID).
  std::vector<std::string> temps() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(p))
      if (contains(e.path().filename().string(), ".tmp.") || contains(e.path().filename().string(), ".old."))
        out.push_back(e.path().string());
    return out;
  }
};

// A fault: which files (a path substring) and how they fail.
struct Fault {
  std::string path;        // NG_FAULT_PATH
  std::string how;         // "bytes=N", "call=N", "fsync" (the first fsync), "rename" (the first rename)
  std::string err = "ENOSPC";
};

CliRun run_with(const Fault& f, const std::string& args) {
  std::string env = "NG_FAULT_PATH='" + f.path + "' NG_FAULT_ERRNO=" + f.err;
  if (f.how.rfind("bytes=", 0) == 0) env += " NG_FAULT_BYTES=" + f.how.substr(6);
  else if (f.how.rfind("call=", 0) == 0) env += " NG_FAULT_ON=write NG_FAULT_CALL=" + f.how.substr(5);
  else env += " NG_FAULT_ON=" + f.how + " NG_FAULT_CALL=1";
  return normgate::test::run_normgate_with("env LD_PRELOAD=" + std::string(NG_FAULT_SHIM) + " " + env, args);
}

// The checks every fault shares: exit 3 (no crash), the shim's fault reached,
// the file named, the system's reason given, no temporary file left.
void expect_clean_failure(const CliRun& r, const Dir& d, const std::string& named, const std::string& reason,
                          const std::string& what) {
  EXPECT_EQ(r.code, 3) << what << "\n" << r.out;
  EXPECT_TRUE(contains(r.out, "fault_shim: ")) << what << ": the fault was never reached\n" << r.out;
  EXPECT_TRUE(contains(r.out, "normgate: fatal: ")) << what << "\n" << r.out;
  EXPECT_TRUE(contains(r.out, named)) << what << ": '" << named << "' not named\n" << r.out;
  EXPECT_TRUE(contains(r.out, reason)) << what << "\n" << r.out;
  EXPECT_TRUE(d.temps().empty()) << what << ": temporary file left: " << d.temps().front();
}

// Each report file at each step (a write past a full disk, an fsync EIO, the
// rename): exit 3 naming it; every report keeps its previous contents (the
// reports are written all or none: a full disk no longer left a new .md
// beside an old .json).
TEST(FaultCli, GateReportWriteFailuresLeaveEveryReportAsItWas) {
  const Dir d("reports");
  const std::string md = d / "r.md", json = d / "r.json", junit = d / "r.xml";
  for (const auto& f : {md, json, junit}) std::ofstream(f) << "previous " << f << "\n";
  const std::string args = "gate " + kSmall + kFast + " --windows H=256 --report-md " + md + " --report-json " +
                           json + " --report-junit " + junit;
  const struct {
    Fault fault;
    std::string named, reason;
  } cases[] = {
      {{"r.md", "bytes=100"}, md, "No space left on device"},
      {{"r.json", "bytes=0"}, json, "No space left on device"},
      {{"r.xml", "fsync", "EIO"}, junit, "Input/output error"},
      {{"r.json", "rename", "EIO"}, json, "Input/output error"},
      {{"r.md", "rename"}, md, "No space left on device"},
  };
  for (const auto& c : cases) {
    const std::string what = c.fault.path + " " + c.fault.how + " " + c.fault.err;
    const CliRun r = run_with(c.fault, args);
    expect_clean_failure(r, d, c.named, c.reason, what);
    EXPECT_TRUE(contains(r.out, "was left as it was")) << what << "\n" << r.out;
    for (const auto& f : {md, json, junit}) EXPECT_EQ(slurp(f), "previous " + f + "\n") << what << ": " << f;
  }
  // The same run without a fault writes all three.
  const CliRun ok = normgate::test::run_normgate(args);
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(contains(slurp(md), "| window | variant |"));
  EXPECT_TRUE(contains(slurp(json), "\"windows\""));
  EXPECT_TRUE(contains(slurp(junit), "<testsuites"));
}

// A journal append fails part-way (the disk fills inside a record), or its
// fsync fails: exit 3 naming the journal; the records before it stay, and a
// resume without the fault runs only what is missing and gives the
// uninterrupted run's report.
TEST(FaultCli, JournalAppendFailureKeepsWhatWasRecorded) {
  const Dir d("journal");
  const std::string base = "gate " + kSmall + kFast + " --windows H=256";
  const CliRun full = normgate::test::run_normgate(base + " --journal " + (d / "ref.jsonl") + " --report-json " +
                                                   (d / "ref.json"));
  ASSERT_EQ(full.code, 0) << full.out;
  const std::string ref = slurp(d / "ref.jsonl");
  // The byte budget ends 60 bytes into the 5th record (header + 3 records
  // whole; a record's "seconds" varies by a few bytes from run to run).
  size_t cut = 0;
  for (int line = 0; line < 4; ++line) cut = ref.find('\n', cut) + 1;
  ASSERT_GT(ref.size(), cut + 200);
  const struct {
    Fault fault;
    int whole_lines;  // complete lines left in the journal
    std::string reason;
  } cases[] = {
      {{"j.jsonl", "bytes=" + std::to_string(cut + 60)}, 4, "No space left on device"},
      {{"j.jsonl", "fsync", "EIO"}, 1, "Input/output error"},  // the header's fsync
      {{"j.jsonl", "call=3", "EIO"}, 2, "Input/output error"},  // the 2nd record's write
  };
  for (const auto& c : cases) {
    const std::string what = c.fault.how + " " + c.fault.err;
    const std::string j = d / "j.jsonl";
    fs::remove(j);
    const CliRun r = run_with(c.fault, base + " --journal " + j + " --report-json " + (d / "r.json"));
    EXPECT_EQ(r.code, 3) << what << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "fault_shim: ")) << what << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, j)) << what << ": journal not named\n" << r.out;
    EXPECT_TRUE(contains(r.out, c.reason)) << what << "\n" << r.out;
    EXPECT_FALSE(fs::exists(d / "r.json")) << what;
    // What was recorded before the fault is still there: the reference's
    // first records (but their time), and a torn tail at most.
    const std::string left = slurp(j);
    const int lines = static_cast<int>(std::count(left.begin(), left.end(), '\n'));
    EXPECT_EQ(lines, c.whole_lines) << what << "\n" << left;
    const std::vector<std::string> got = untimed_lines(left), want = untimed_lines(ref);
    ASSERT_GE(want.size(), got.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << what << ": line " << i + 1;
    // Resumed without the fault: the uninterrupted run's report.
    const CliRun resumed = normgate::test::run_normgate(base + " --journal " + j + " --report-json " + (d / "r.json"));
    ASSERT_EQ(resumed.code, 0) << what << "\n" << resumed.out;
    const int resumed_cases = c.whole_lines - 1;
    EXPECT_TRUE(contains(resumed.out, std::to_string(resumed_cases) +
                                          (resumed_cases == 1 ? " finished case resumed" : " finished cases resumed")))
        << what << "\n"
        << resumed.out;
    EXPECT_EQ(without_dates(slurp(d / "r.json")), without_dates(slurp(d / "ref.json"))) << what;
    fs::remove(d / "r.json");
  }
}

// The approvals file (gate --approve): a full disk or a failing rename while
// it is rewritten leaves the previous approvals intact, exit 3 naming it.
TEST(FaultCli, ApprovalsWriteFailureKeepsThePreviousApprovals) {
  const Dir d("approvals");
  const std::string t = d / "t.toml";
  fs::copy_file(kSmall, t);
  fs::copy_file(kPolicy, d / "t.policy.toml");
  const std::string approvals = d / "t.approvals.json";
  const CliRun first = normgate::test::run_normgate("gate " + t + kFast + " --windows H=256 --approve");
  ASSERT_EQ(first.code, 0) << first.out;
  const std::string before = slurp(approvals);
  ASSERT_TRUE(contains(before, "H=256")) << before;
  for (const Fault& f : {Fault{"t.approvals.json", "bytes=64"}, Fault{"t.approvals.json", "rename", "EIO"},
                         Fault{"t.approvals.json", "fsync", "EIO"}}) {
    const std::string what = f.how + " " + f.err;
    const CliRun r = run_with(f, "gate " + t + kFast + " --windows op=fwd --approve");
    expect_clean_failure(r, d, approvals, f.err == "EIO" ? "Input/output error" : "No space left on device", what);
    EXPECT_EQ(slurp(approvals), before) << what;
  }
}

// check --json and --md, and derive's table and report: the same guarantees
// at the other write sites of the CLI.
TEST(FaultCli, CheckAndDeriveOutputsFailCleanly) {
  const Dir d("check");
  const std::string json = d / "c.json";
  std::ofstream(json) << "previous\n";
  const CliRun r = run_with({"c.json", "bytes=10"},
                            "check --case H=64,T=5,w=bf16,family=normal,seed=0 --backend cpu --threads 1 --json " + json);
  expect_clean_failure(r, d, json, "No space left on device", "check --json");
  EXPECT_EQ(slurp(json), "previous\n");

  // derive from given timings, gating on the CPU models: the table and its
  // report are written all or none.
  std::ofstream(d / "spec.toml") << "arch = \"sm90a\"\nT = [1, 8, 60]\n[candidates]\n"
                                    "bwd_det = [\"bwd_det_chunked\"]\n[bench]\ncrossover_steps = 0\n"
                                    "[[group]]\nop = \"bwd\"\nmodes = \"det\"\nH = 64\nw = \"bf16\"\nform = \"plain\"\n";
  std::ofstream tm(d / "timings.json");
  tm << "{\"format\": \"normgate-timings/1\", \"gpu\": \"synthetic\", \"driver\": \"-\", \"cuda\": \"-\", "
        "\"date\": \"2026-12-01T00:00:00Z\", \"normgate_commit\": \"test\", \"rounds\": 3, \"reps\": 50, \"points\": [";
  const int ts[] = {1, 8, 60};
  for (int i = 0; i < 3; ++i)
    tm << (i ? "," : "") << "{\"op\": \"bwd\", \"H\": 64, \"w\": \"bf16\", \"form\": \"plain\", \"T\": " << ts[i]
       << ", \"aa_variant\": \"bwd_det_chunked\", \"aa_floor\": 0.01, \"median_us\": {\"bwd_det_chunked\": 10}, "
          "\"rounds_us\": {\"bwd_det_chunked\": [10]}}";
  tm << "]}\n";
  tm.close();
  fs::copy_file(kPolicy, d / "t.policy.toml");
  std::ofstream(d / "t.toml") << "previous table\n";
  const std::string derive = "derive " + (d / "spec.toml") + " --out " + (d / "t.toml") + " --report " + (d / "r") +
                             " --timings " + (d / "timings.json") +
                             " --backend cpu --threads 1 --seeds 3x1 --t-per-window 4 --dense-points 2 --approve";
  const CliRun dr = run_with({"r.json", "bytes=0"}, derive);
  expect_clean_failure(dr, d, d / "r.json", "No space left on device", "derive --report");
  EXPECT_EQ(slurp(d / "t.toml"), "previous table\n");
  EXPECT_FALSE(fs::exists(d / "r.md"));
  const CliRun ok = normgate::test::run_normgate(derive);
  ASSERT_EQ(ok.code, 0) << ok.out;
  EXPECT_TRUE(contains(slurp(d / "t.toml"), "bwd_det_chunked"));
}

}  // namespace
