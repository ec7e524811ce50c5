// tests/cli: `normgate repro --from-report REPORT --window W` as a user runs
// it after a gate or a check: the window's worst case (as the JSON report
// records it) and variant, then exactly what `repro CASE --variant V` prints;
// usage errors exit 2 naming the bad value.
#include <gtest/gtest.h>

#include "cli_util.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>
#include <regex>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using normgate::test::CliRun;
using normgate::test::contains;
CliRun run(const std::string& args) { return normgate::test::run_normgate(args); }

const std::string kSmall = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/small.toml";

std::string temp_dir(const std::string& name) {
  const std::string d = std::string(NORMGATE_BINARY_DIR) + "/repro_cli_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

nlohmann::json load(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

double ratio(const nlohmann::json& v) { return v.is_number() ? v.get<double>() : INFINITY; }

// The value after "case     " in a repro report.
std::string printed_case(const std::string& out) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("case     ", 0) == 0) return line.substr(9);
  return "";
}

std::string without_from_line(const std::string& out) {
  std::istringstream in(out);
  std::string line, kept;
  while (std::getline(in, line))
    if (line.rfind("from     ", 0) != 0) kept += line + "\n";
  return kept;
}

// One gate of a small table (CPU models) for the whole suite.
class ReproFromReport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(temp_dir("gate"));
    const CliRun g = run("gate " + kSmall + " --backend cpu --threads 1 --seeds 3x1 --t-per-window 4 --dense-points 2 "
                         "--quiet --report-json " + *dir_ + "/gate.json");
    ASSERT_EQ(g.code, 0) << g.out;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string report() { return *dir_ + "/gate.json"; }
  static std::string* dir_;
};
std::string* ReproFromReport::dir_ = nullptr;

// Every window: the case printed is the window's worst case (the gate's own
// "worst", which is the largest max_err_tol over the outputs' worst cases),
// the variant is the window's (forward windows: a real backward variant,
// which runs the forward), and the output is exactly that of the plain
// `repro CASE --variant V`, whose form the reproduce line has.
TEST_F(ReproFromReport, EveryWindowReprosItsWorstCase) {
  const nlohmann::json j = load(report());
  ASSERT_EQ(j["windows"].size(), 6u);
  for (size_t i = 0; i < j["windows"].size(); ++i) {
    const auto& w = j["windows"][i];
    const std::string worst = w["worst"]["case"].get<std::string>();
    double best = -1;
    for (const auto& [name, o] : w["outputs"].items()) best = std::max(best, ratio(o["max_err_tol"]));
    EXPECT_EQ(ratio(w["worst"]["err_tol"]), best) << i;
    const std::string variant = w["op"] == "fwd" ? "bwd_det_chunked" : w["variant"].get<std::string>();

    // By index, label and FILE:LINE.
    for (const std::string& key : {std::to_string(i), w["window"].get<std::string>(), w["route"].get<std::string>()}) {
      const CliRun r = run("repro --from-report " + report() + " --window '" + key + "' --backend cpu --threads 1 --k 2");
      EXPECT_EQ(r.code, 0) << key << "\n" << r.out;
      EXPECT_EQ(printed_case(r.out), worst) << key << "\n" << r.out;
      EXPECT_TRUE(contains(r.out, "from     " + report() + ", window index " + std::to_string(i) + " '" +
                                      w["window"].get<std::string>() + "'"))
          << r.out;
      EXPECT_TRUE(contains(r.out, "reproduce: normgate repro '" + worst + "' --variant " + variant + " --backend cpu"))
          << r.out;
    }
    const CliRun from = run("repro --from-report " + report() + " --window " + std::to_string(i) +
                            " --backend cpu --threads 1 --k 2");
    const CliRun plain = run("repro '" + worst + "' --variant " + variant + " --backend cpu --threads 1 --k 2");
    EXPECT_EQ(plain.code, from.code);
    EXPECT_EQ(without_from_line(from.out), plain.out);
  }
}

// --output: the worst case of that output alone, the same run as `repro`
// of that case; the from-line says which output it was chosen by.
TEST_F(ReproFromReport, OneOutputsWorstCase) {
  const nlohmann::json j = load(report());
  for (size_t i = 0; i < j["windows"].size(); ++i) {
    const auto& w = j["windows"][i];
    if (w["op"] != "bwd" || !w["outputs"].contains("dw")) continue;
    const std::string worst = w["outputs"]["dw"]["worst_case"].get<std::string>();
    const CliRun r = run("repro --from-report " + report() + " --window " + std::to_string(i) +
                         " --output dw --backend cpu --threads 1 --k 2");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(printed_case(r.out), worst) << r.out;
    EXPECT_TRUE(contains(r.out, ": worst case of dw " + worst + " (dw err/tol ")) << r.out;
    // A built-in variant without a GPU: its CPU model ran, and the note says so.
    EXPECT_TRUE(contains(r.out, "note     no GPU in use: kernel variants run as their CPU models\n")) << r.out;
    return;
  }
  FAIL() << "the report has no backward window with dw";
}

// --variant overrides the window's variant (a control fails: exit 1); --save
// into a folder writes <case>,<variant>.h5.
TEST_F(ReproFromReport, VariantOverrideAndSave) {
  const nlohmann::json j = load(report());
  const auto& w = j["windows"][5];
  const std::string worst = w["worst"]["case"].get<std::string>();
  const std::string cases = *dir_ + "/cases";
  std::filesystem::create_directories(cases);
  const CliRun r = run("repro --from-report " + report() + " --window 5 --variant ctl_fp32_seq --backend cpu --k 1 "
                       "--save " + cases + "/");
  EXPECT_LE(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "variant ctl_fp32_seq (--variant; the window's is bwd_det_chunked)")) << r.out;
  EXPECT_TRUE(contains(r.out, "reproduce: normgate repro '" + worst + "' --variant ctl_fp32_seq")) << r.out;
  EXPECT_TRUE(std::filesystem::is_regular_file(cases + "/" + worst + ",ctl_fp32_seq.h5")) << r.out;
}

// --save FOLDER/ creates a missing folder (with parents); without the
// trailing '/' a missing folder is still a usage error (exit 2, nothing run).
TEST_F(ReproFromReport, SaveIntoANewFolderCreatesIt) {
  const std::string id = "H=64,T=40,w=bf16,form=plain,family=cancel,seed=1";
  const std::string fresh = *dir_ + "/new/cases";
  ASSERT_FALSE(std::filesystem::exists(fresh));
  const CliRun r = run("repro '" + id + "' --variant bwd_det_chunked --backend cpu --k 1 --save " + fresh + "/");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::filesystem::is_regular_file(fresh + "/" + id + ",bwd_det_chunked.h5")) << r.out;
  const CliRun bad = run("repro '" + id + "' --variant bwd_det_chunked --backend cpu --k 1 --save " + *dir_ +
                         "/missing/x.h5");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_TRUE(contains(bad.out, "does not exist")) << bad.out;
  EXPECT_FALSE(std::filesystem::exists(*dir_ + "/missing"));
}

// A check report (here a grid): windows are its implementations; the worst
// case of one is the case with its largest max_ratio.
TEST_F(ReproFromReport, CheckReportWindowIsAnImplementation) {
  const std::string grid = *dir_ + "/grid.json";
  const CliRun c = run("check --backend cpu --threads 1 --variant bwd_det_chunked,ctl_fp32_seq --H 64 --T 300 --w bf16 "
                       "--seeds cancel:0..2 --quiet --json " + grid);
  ASSERT_EQ(c.code, 1) << c.out;  // the control fails cancel
  std::string worst;
  double best = -1;
  for (const auto& cs : load(grid))
    for (const auto& i : cs["impls"])
      if (i["impl"] == "ctl_fp32_seq")
        for (const auto& [name, o] : i["outputs"].items())
          if (ratio(o["max_ratio"]) > best) {
            best = ratio(o["max_ratio"]);
            worst = cs["case"].get<std::string>();
          }
  const CliRun r = run("repro --from-report " + grid + " --window ctl_fp32_seq --backend cpu --threads 1 --k 1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(printed_case(r.out), worst) << r.out;
  EXPECT_TRUE(contains(r.out, "reproduce: normgate repro '" + worst + "' --variant ctl_fp32_seq")) << r.out;
}

// tools/audit_pick.py (h200.sh's audit step) on the same report: the window
// with the highest worst err/tol, and a cancel case of it on which the
// negative control fails.
TEST_F(ReproFromReport, AuditPickChoosesTheWorstWindowAndACancelCase) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  const nlohmann::json j = load(report());
  size_t want = 0;
  double best = -1;
  for (size_t i = 0; i < j["windows"].size(); ++i)
    if (ratio(j["windows"][i]["worst"]["err_tol"]) > best) {
      best = ratio(j["windows"][i]["worst"]["err_tol"]);
      want = i;
    }
  const std::string cmd = "python3 " + std::string(NORMGATE_SOURCE_DIR) + "/tools/audit_pick.py " + report();
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096] = {};
  const size_t n = fread(buf, 1, sizeof buf - 1, p);
  ASSERT_EQ(pclose(p), 0) << std::string(buf, n);
  std::istringstream line(std::string(buf, n));
  std::string index, cancel, label;
  std::getline(line, index, '\t');
  std::getline(line, cancel, '\t');
  std::getline(line, label);
  EXPECT_EQ(index, std::to_string(want));
  EXPECT_EQ(label, j["windows"][want]["window"].get<std::string>());
  EXPECT_TRUE(contains(cancel, ",family=cancel,")) << cancel;
  const CliRun ctl = run("repro '" + cancel + "' --variant ctl_fp32_seq --backend cpu --threads 1 --k 1");
  EXPECT_EQ(ctl.code, 1) << ctl.out;
  EXPECT_TRUE(contains(ctl.out, "verdict  FAIL")) << ctl.out;
}

// Usage and input errors: exit 2, naming the bad value.
TEST_F(ReproFromReport, ErrorsExit2AndNameTheBadValue) {
  const std::string bad = *dir_ + "/bad.json", empty_gate = *dir_ + "/empty_gate.json",
                    empty_check = *dir_ + "/empty_check.json";
  std::ofstream(bad) << "{\"windows\": [";
  std::ofstream(empty_gate) << "{\"windows\": []}\n";
  std::ofstream(empty_check) << "[]\n";
  const std::string md = *dir_ + "/gate.md";
  std::ofstream(md) << "# normgate gate: small.toml\n\n- verdict: **PASS**\n";
  const std::string id = "H=64,T=3,w=bf16,form=plain,family=normal,seed=0";
  struct Bad {
    std::string args, needle;
  };
  const Bad cases[] = {
      {"--from-report " + *dir_ + "/missing.json --window 0", *dir_ + "/missing.json"},
      {"--from-report " + bad + " --window 0", bad + "' is not JSON"},
      {"--from-report " + md + " --window 0", md + "' is not JSON: it is a Markdown report; give the JSON one"},
      {"--from-report " + report() + " --window 6", "no window '6'"},
      {"--from-report " + report() + " --window 'bwd det'", "no window 'bwd det'"},
      {"--from-report " + report() + " --window nope", "0  fwd H=64 w=bf16 form=plain T=1..700"},
      {"--from-report " + empty_gate + " --window 0", "names no cases"},
      {"--from-report " + empty_check + " --window 0", "names no cases"},
      {"--from-report " + report(), "--from-report needs --window W"},
      {"--from-report " + report(), "0  fwd H=64 w=bf16 form=plain T=1..700"},  // and lists the windows
      {"--window 0 --variant bwd_det_chunked " + id, "--from-report"},
      {id + " --from-report " + report() + " --window 0", "--from-report"},
      {"--file x.h5 --from-report " + report() + " --window 0", "--from-report"},
      {"--from-report " + report() + " --window 0 --variant bwd_magic", "bwd_magic"},
      {id, "--variant is required"},
      {"--output dw --variant bwd_det_chunked " + id, "--from-report"},
      {"--from-report " + report() + " --window 0 --output dz", "dz"},
      {"--from-report " + report() + " --window 0 --output dw", "names no worst case of output 'dw'"},
  };
  for (const auto& b : cases) {
    const CliRun r = run("repro " + b.args + " --backend cpu");
    EXPECT_EQ(r.code, 2) << b.args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, b.needle)) << b.args << "\n" << r.out;
  }
}

// export re-runs each case: a report naming an implementation this process
// does not know (gated from Python, or a plugin not loaded) is refused before
// any case runs, saying how to get one, and nothing is written.
TEST_F(ReproFromReport, ExportOfAnExternalsReportSaysWhyNot) {
  nlohmann::json j = load(report());
  ASSERT_FALSE(j["windows"].empty());
  for (auto& w : j["windows"]) w["variant"] = "my_rmsnorm";
  const std::string ext = *dir_ + "/external.json", out = *dir_ + "/ext.h5";
  std::ofstream(ext) << j.dump();
  const CliRun r = run("export " + ext + " -o " + out + " --backend cpu");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "ran 'my_rmsnorm', which this process does not know")) << r.out;
  EXPECT_TRUE(contains(r.out, "--plugin LIB.so for a plugin")) << r.out;
  EXPECT_FALSE(contains(r.out, "pairs from")) << r.out;  // refused before the export began
  EXPECT_FALSE(std::filesystem::exists(out));
  // repro --from-report of the same report: the same explanation, and the case to check from Python.
  const CliRun p = run("repro --from-report " + ext + " --window 0 --backend cpu");
  EXPECT_EQ(p.code, 2) << p.out;
  EXPECT_TRUE(contains(p.out, "the report's window ran 'my_rmsnorm', which this process does not know")) << p.out;
  EXPECT_TRUE(contains(p.out, "with normgate.check on the case H=")) << p.out;
  // A name with a newline is one value in the message, not two lines.
  for (auto& w : j["windows"]) w["variant"] = "my_rmsnorm\nPASS";
  std::ofstream(ext) << j.dump();
  const CliRun q = run("export " + ext + " -o " + out + " --backend cpu");
  EXPECT_EQ(q.code, 2) << q.out;
  EXPECT_TRUE(contains(q.out, "ran 'my_rmsnorm\\x0aPASS', which this process does not know")) << q.out;
  EXPECT_FALSE(contains(q.out, "\nPASS")) << q.out;
}


// export without --keep takes every output's worst case of a gate report's
// window: dw's, whose err/tol is far below y's and dx's, fell after the cut
// of the old default (--keep 3 ranked across outputs). --keep 1 takes the
// window's single largest.
TEST_F(ReproFromReport, ExportTakesEveryOutputsWorstCase) {
  nlohmann::json j = load(report());
  nlohmann::json w;
  for (const auto& x : j["windows"])
    if (x["op"] == "bwd" && x["outputs"].contains("dw")) {
      w = x;
      break;
    }
  ASSERT_FALSE(w.is_null());
  std::set<std::string> ids;
  for (const auto& [name, o] : w["outputs"].items()) ids.insert(o["worst_case"].get<std::string>());
  ids.insert(w["dw_vs_fp32"]["worst_case"].get<std::string>());
  ASSERT_GE(ids.size(), 4u) << w.dump();  // more than the old default's 3
  j["windows"] = nlohmann::json::array({w});
  const std::string rep = *dir_ + "/one.json", out = *dir_ + "/one.h5";
  std::ofstream(rep) << j.dump();
  const CliRun r = run("export " + rep + " -o " + out + " --backend cpu --threads 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "export   " + std::to_string(ids.size()) + " (case, implementation) pairs")) << r.out;
  for (const auto& id : ids) EXPECT_TRUE(contains(r.out, "  " + id + "  [window")) << id << "\n" << r.out;
  EXPECT_TRUE(contains(r.out, "  " + w["outputs"]["dw"]["worst_case"].get<std::string>())) << r.out;
  // Each backward pair lists the four outputs its window gates, y first (a
  // y-only failure read as a fail beside passing dw and dx).
  for (const auto& id : ids) {
    const size_t at = r.out.find("  " + id + "  [window");
    ASSERT_NE(at, std::string::npos) << id;
    const std::string line = r.out.substr(r.out.rfind('\n', at) + 1, at - r.out.rfind('\n', at) - 1);
    EXPECT_TRUE(std::regex_search(line, std::regex(" y [0-9.e+-]+ rstd [0-9.e+-]+ dx [0-9.e+-]+ dw [0-9.e+-]+$")))
        << line;
  }
  const CliRun one = run("export " + rep + " -o " + out + " --backend cpu --threads 1 --keep 1");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_TRUE(contains(one.out, "export   1 (case, implementation) pairs")) << one.out;
  EXPECT_TRUE(contains(one.out, "  " + w["worst"]["case"].get<std::string>() + "  [window")) << one.out;
}

// export checks every planned case before the first runs: one case beyond
// host memory in the last window (it ended in std::bad_alloc, exit 3, after
// the earlier windows' cases had run) is refused by name, nothing written.
TEST_F(ReproFromReport, ExportRefusesAnOversizedCaseBeforeAnyRuns) {
  nlohmann::json j = load(report());
  ASSERT_GE(j["windows"].size(), 2u);
  std::string big;
  for (auto& [name, out] : j["windows"].back()["outputs"].items()) {
    if (!out.is_object() || !out.contains("worst_case") || !out["worst_case"].is_string()) continue;
    std::string c = out["worst_case"].get<std::string>();
    const size_t t = c.find("T="), e = c.find(',', t);
    ASSERT_NE(t, std::string::npos) << c;
    big = c.substr(0, t) + "T=2147483648" + c.substr(e);
    out["worst_case"] = big;
    j["windows"].back()["T"][1] = 2147483648LL;  // inside the window (export checks that first)
    break;
  }
  ASSERT_FALSE(big.empty()) << j["windows"].back().dump();
  const std::string rep = *dir_ + "/big.json", out = *dir_ + "/big.h5";
  std::ofstream(rep) << j.dump();
  const CliRun r = run("export " + rep + " -o " + out + " --backend cpu --keep 1000");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "(case " + big + "): case " + big + " (")) << r.out;
  EXPECT_TRUE(contains(r.out, "of host memory")) << r.out;
  EXPECT_FALSE(contains(r.out, "pairs from")) << r.out;  // refused before the export began
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace

namespace {

// The first of python3 and /usr/bin/python3 that imports h5py (Debian's
// python3-h5py when pyenv shadows it), or nullptr.
const char* python_with_h5py() {
  for (const char* cand : {"python3", "/usr/bin/python3"})
    if (std::system((std::string(cand) + " -c 'import h5py' >/dev/null 2>&1").c_str()) == 0) return cand;
  return nullptr;
}

// The case shipped in datasets/cases/ replays without the generator: its
// stored inputs' digest verifies, the control it was saved with fails on it
// again and the real variants pass it.
TEST(ReproShippedCase, ReplaysFromTheStoredInputs) {
  const std::string f = std::string(NORMGATE_SOURCE_DIR) +
                        "/datasets/cases/H=64,T=600,w=bf16,form=plain,family=cancel,seed=1,ctl_fp32_seq.h5";
  ASSERT_TRUE(std::filesystem::exists(f)) << f;
  // Without --variant: the recorded one (ctl_fp32_seq), the same run.
  const CliRun ctl = run("repro --file '" + f + "' --backend cpu");
  EXPECT_EQ(ctl.code, 1) << ctl.out;
  EXPECT_TRUE(contains(ctl.out, "recorded outputs (recorded by ctl_fp32_seq on cpu-model): identical bit for bit"))
      << ctl.out;
  EXPECT_EQ(run("repro --file '" + f + "' --variant ctl_fp32_seq --backend cpu").out, ctl.out);
  EXPECT_TRUE(contains(ctl.out, "verified; recorded verdict of ctl_fp32_seq: fail")) << ctl.out;
  EXPECT_TRUE(contains(ctl.out, "given inputs (a saved case), not the generator")) << ctl.out;
  EXPECT_TRUE(contains(ctl.out, "dw FAILS")) << ctl.out;
  for (const char* v : {"bwd_det_chunked", "bwd_nondet_atomic"}) {
    const CliRun ok = run("repro --file '" + f + "' --variant " + v + " --backend cpu");
    EXPECT_EQ(ok.code, 0) << v << "\n" << ok.out;
    EXPECT_TRUE(contains(ok.out, "verdict  PASS")) << v << "\n" << ok.out;
  }
}

// The audit cases of issue 6, recorded on the H200 (2026-11-30, kernels of
// 44a0781; docs/results/audit/): the worst case of the heads4 campaign
// (bwd_det_chunked, pass) and the negative control on the same cancel inputs
// (ctl_fp32_seq, fail).
// Replayed here on the CPU models, each gives the recorded verdict and the
// recorded outputs bit for bit: the GPU kernels and their models agree on
// these inputs. A kernel change that moves a bit (and the model with it)
// fails here until the cases are recorded again on the H200.
TEST(ReproShippedCase, H200RecordingsReplayBitForBitOnTheCpuModels) {
  const std::string dir = std::string(NORMGATE_SOURCE_DIR) + "/datasets/cases/";
  const std::string id = "H=256,T=7,w=bf16,form=heads4,family=cancel,seed=2";
  for (const auto& [variant, code] : {std::pair<std::string, int>{"bwd_det_chunked", 0}, {"ctl_fp32_seq", 1}}) {
    const std::string f = dir + id + "," + variant + ".h5";
    ASSERT_TRUE(std::filesystem::exists(f)) << f;
    const CliRun r = run("repro --file '" + f + "' --variant " + variant + " --backend cpu");
    EXPECT_EQ(r.code, code) << variant << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "recorded verdict of " + variant + ": " + (code == 0 ? "pass" : "fail"))) << r.out;
    EXPECT_TRUE(contains(r.out, "recorded outputs (recorded by " + variant +
                                    " on gpu): identical bit for bit (y, rstd, dx, dw)"))
        << r.out;
  }
}

// The same heads4 recording replayed on the GPU (skips without one): the
// kernels of this build against the H200's recording, bit for bit.
TEST(ReproShippedCase, H200RecordingReplaysBitForBitOnTheGpu) {
  const std::string f = std::string(NORMGATE_SOURCE_DIR) +
                        "/datasets/cases/H=256,T=7,w=bf16,form=heads4,family=cancel,seed=2,bwd_det_chunked.h5";
  const CliRun r = run("repro --file '" + f + "' --variant bwd_det_chunked --backend gpu");
  if (contains(r.out, "no usable CUDA device")) GTEST_SKIP() << "no CUDA device: GPU test runs on the H200 (tools/h200.sh)";
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "recorded outputs (recorded by bwd_det_chunked on gpu): identical bit for bit")) << r.out;
}

// A recording whose dx was changed after the fact (one bit, with h5py):
// refused as modified (exit 2, the content digest); with the digest
// recomputed too (normgate.cases.content_sha256), the replay says which
// output differs and exits 4.
TEST(ReproShippedCase, ReplayOfAnAlteredRecordingExits4) {
  const char* py = python_with_h5py();
  if (py == nullptr) GTEST_SKIP() << "no python3 with h5py (scripts/bootstrap installs python3-h5py)";
  const std::string src = std::string(NORMGATE_SOURCE_DIR) +
                          "/datasets/cases/H=256,T=7,w=bf16,form=heads4,family=cancel,seed=2,bwd_det_chunked.h5";
  const std::string f = std::string(NORMGATE_BINARY_DIR) + "/altered_" + std::to_string(::getpid()) + ".h5";
  std::filesystem::copy_file(src, f, std::filesystem::copy_options::overwrite_existing);
  const std::string edit = std::string(py) + " -c \"import h5py; f = h5py.File('" + f +
                           "', 'r+'); d = f['outputs/dx']; v = d[0, 5]; d[0, 5] = v ^ 1; f.close()\"";
  ASSERT_EQ(std::system(edit.c_str()), 0) << edit;
  const CliRun m = run("repro --file '" + f + "' --variant bwd_det_chunked --backend cpu");
  EXPECT_EQ(m.code, 2) << m.out;
  EXPECT_TRUE(contains(m.out, f + ": content SHA-256 mismatch")) << m.out;
  const std::string reseal = std::string(py) + " -c \"import sys, h5py, numpy; sys.path.insert(0, '" +
                             NORMGATE_SOURCE_DIR + "/python'); from normgate.cases import content_sha256; " +
                             "f = h5py.File('" + f + "', 'r+'); " +
                             "f.attrs['content_sha256'] = numpy.bytes_(content_sha256(f).encode()); f.close()\"";
  ASSERT_EQ(std::system(reseal.c_str()), 0) << reseal;
  const CliRun r = run("repro --file '" + f + "' --variant bwd_det_chunked --backend cpu");
  std::filesystem::remove(f);
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_TRUE(contains(r.out, "DIFFER: dx 1 of 7168 elements differ")) << r.out;
  EXPECT_TRUE(contains(r.out, "identical: y, rstd, dw")) << r.out;
  EXPECT_TRUE(contains(r.out, "replay   MISMATCH")) << r.out;
}

// The recorded implementation is the default for --variant; one this
// process cannot run is named as the file's, not as an option never given.
TEST(ReproShippedCase, AnUnusableRecordedImplementationIsTheFilesNotAnOptions) {
  const char* py = python_with_h5py();
  if (py == nullptr) GTEST_SKIP() << "no python3 with h5py (scripts/bootstrap installs python3-h5py)";
  const std::string src = std::string(NORMGATE_SOURCE_DIR) +
                          "/datasets/cases/H=256,T=7,w=bf16,form=heads4,family=cancel,seed=2,bwd_det_chunked.h5";
  for (const auto& [name, needle] :
       std::vector<std::pair<std::string, std::string>>{{"nope", "records implementation 'nope', which this process "
                                                                 "does not know"},
                                                        {"all", "records implementation 'all': not one implementation"},
                                                        {"", "records implementation '': give one with --variant"}}) {
    const std::string f = std::string(NORMGATE_BINARY_DIR) + "/impl_" + std::to_string(::getpid()) + ".h5";
    std::filesystem::copy_file(src, f, std::filesystem::copy_options::overwrite_existing);
    const std::string edit = std::string(py) + " -c \"import sys, h5py, numpy; sys.path.insert(0, '" +
                             NORMGATE_SOURCE_DIR + "/python'); from normgate.cases import content_sha256; " +
                             "f = h5py.File('" + f + "', 'r+'); f.attrs['impl'] = numpy.bytes_(b'" + name + "'); " +
                             "f.attrs['content_sha256'] = numpy.bytes_(content_sha256(f).encode()); f.close()\"";
    ASSERT_EQ(std::system(edit.c_str()), 0) << edit;
    const CliRun r = run("repro --file '" + f + "' --backend cpu");
    std::filesystem::remove(f);
    EXPECT_EQ(r.code, 2) << name << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, needle)) << name << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, "--variant is required")) << r.out;
  }
}

}  // namespace
