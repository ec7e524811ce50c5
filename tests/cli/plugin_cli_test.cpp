// tests/cli: `--plugin LIB.so` as a user runs it: the example route table
// (examples/plugin/routes.toml) gated through the host reference plugin on
// the CPU passes; a missing or bad library is exit 2 naming it, before any
// work (no report written); variants, check and routes see the plugin's
// variants.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "cli_util.h"

namespace {

using normgate::test::contains;
using normgate::test::run_normgate;

const std::string kTable = std::string(NORMGATE_SOURCE_DIR) + "/examples/plugin/routes.toml";
const std::string kRef = NG_REF_PLUGIN;

// The whole file at `path` ("" when it cannot be read).
std::string file_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

std::string scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("ng_plugin_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

TEST(PluginCli, GateRoutesWindowsToThePlugin) {
  const std::string json = scratch("gate.json");
  const auto r = run_normgate("gate " + kTable + " --plugin " + kRef +
                              " --backend cpu --threads 2 --seeds 3x1 --t-per-window 3 --dense-points 1 "
                              "--fresh-factor 1 --quiet --report-json " + json);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "PASS: 4 of 4 windows pass")) << r.out;
  EXPECT_TRUE(std::filesystem::exists(json));
  const std::string report = file_text(json);
  EXPECT_TRUE(contains(report, "ex_ref_bwd")) << report.substr(0, 2000);
  EXPECT_TRUE(contains(report, "ex_ref_fwd"));
}

// An external forward runs its own step only: no carrier backward after it,
// so the reports do not say one ran (they did: "its dx, dw, and the
// verdict, include the carrier backward that ran after it").
TEST(PluginCli, AnExternalForwardIsNotSaidToHaveACarrierBackward) {
  const std::string json = scratch("fwd.json"), md = scratch("fwd.md"), maps = scratch("fwd.h5");
  auto r = run_normgate("gate " + kTable + " --plugin " + kRef + " --windows op=fwd --backend cpu --threads 2 "
                        "--seeds 3x1 --t-per-window 2 --dense-points 0 --fresh-factor 0 --quiet --report-json " +
                        json + " --report-md " + md);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string report = file_text(md);
  EXPECT_TRUE(contains(report, "an external forward: its own runs only")) << report.substr(0, 3000);
  r = run_normgate("export " + json + " --plugin " + kRef + " --backend cpu --threads 2 -o " + maps);
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_normgate("inspect " + maps);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "(forward window: it gates y and rstd of ex_ref_fwd's own run, an external "
                              "implementation's; no backward ran after it: dx and dw are not produced and not gated)"))
      << r.out;
  EXPECT_FALSE(contains(r.out, "carrier backward")) << r.out;
  r = run_normgate("check --plugin " + kRef + " --variant ex_ref_fwd --backend cpu --case "
                   "H=256,T=9,w=bf16,form=plain,family=normal,seed=0");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "not produced (left poisoned): dx dw")) << r.out;
  EXPECT_TRUE(contains(r.out, "dw vs FP32 baseline: - (dw not produced)")) << r.out;
}

TEST(PluginCli, TableNamingPluginVariantsNeedsThePlugin) {
  const auto r = run_normgate("gate " + kTable + " --backend cpu --seeds 3x1 --plan");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "ex_ref_")) << r.out;
}

TEST(PluginCli, MissingOrBadLibraryIsExit2BeforeAnyWork) {
  const std::string json = scratch("never.json");
  auto r = run_normgate("gate " + kTable + " --plugin /nonexistent/libnope.so --backend cpu --report-json " + json);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "normgate: error: plugin '/nonexistent/libnope.so': no such file")) << r.out;
  EXPECT_FALSE(std::filesystem::exists(json));
  const std::string bad = std::string(NG_TEST_PLUGIN_DIR) + "/libtp_version.so";
  r = run_normgate("check --case H=64,T=3,w=bf16,form=plain,family=normal,seed=0 --plugin " + bad);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "abi_version is 2, this normgate reads ABI version 1")) << r.out;
  r = run_normgate("variants --plugin " + kRef + " --plugin " + kRef);
  EXPECT_EQ(r.code, 2) << r.out;
  // One library given twice is named as such (it read "variant 'ex_ref_fwd'
  // is also a variant of plugin" the same library); two libraries sharing a
  // name: PluginRegister.TwoPluginsSharingANameRegisterNothing.
  EXPECT_TRUE(contains(r.out, "normgate: error: plugin '" + kRef + "' is given twice (--plugin '" + kRef +
                              "' loads ")) << r.out;
  EXPECT_TRUE(contains(r.out, " already): give each library once")) << r.out;
  const std::string noexp = std::string(NG_TEST_PLUGIN_DIR) + "/libtp_noentry.so";  // exports ng_plugin_v0
  r = run_normgate("variants --plugin " + noexp);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "or built with -fvisibility=hidden and the entry point not marked NG_PLUGIN_EXPORT"))
      << r.out;
}

// A plugin kernel that calls exit(0) mid-gate ended normgate with status
// 0 and no verdict line: a CI job read it as a PASS. Now exit 3, saying so.
TEST(PluginCli, AnExitFromAPluginKernelIsExit3NotAPass) {
  const std::string lib = std::string(NG_TEST_PLUGIN_DIR) + "/libtp_exit.so";
  const std::string table = scratch("exit.toml");
  {
    std::ofstream f(table);
    f << "arch = \"sm90a\"\ndescription = \"exit\"\nroute = [\n"
         "  { op = \"fwd\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 8], variant = \"tp_exit\" },\n]\n";
  }
  const std::string want = "normgate: error: exit() was called while the gate ran (by a plugin or a library it "
                           "loaded): no verdict was reached; exit 3";
  auto r = run_normgate("gate " + table + " --plugin " + lib + " --backend cpu --seeds 3x1 --t-per-window 2 "
                        "--dense-points 0 --fresh-factor 0 --quiet");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_TRUE(contains(r.out, want)) << r.out;
  EXPECT_FALSE(contains(r.out, "verdict  PASS")) << r.out;
  r = run_normgate("check --plugin " + lib + " --variant tp_exit --backend cpu --case H=64,T=3,w=bf16,form=plain,"
                   "family=normal,seed=0");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_TRUE(contains(r.out, "exit() was called while the check ran")) << r.out;
}

// A plugin's host workspace (and its staging copies) enter the host-memory
// check made before any work: a gate, check or repro whose plugin asks for
// more than the process may use is exit 2 naming the plugin, the case and
// the bytes, with nothing written. Before, the gate started and every case
// of the window was journalled as an error at run time.
TEST(PluginCli, AHostWorkspacePastTheMemoryBoundIsRefusedBeforeAnyWork) {
  const std::string lib = std::string(NG_TEST_PLUGIN_DIR) + "/libtp_bigws.so";  // asks for 2^40 bytes
  const std::string table = scratch("bigws.toml"), journal = scratch("bigws.jsonl"), md = scratch("bigws.md");
  {
    std::ofstream f(table);
    f << "arch = \"sm90a\"\ndescription = \"bigws\"\nroute = [\n"
         "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 8], "
         "variant = \"tp_bigws\" },\n]\n";
  }
  // ulimit -v: a bound below 1 TiB on any host.
  const std::string limit = "ulimit -v 4000000 &&";
  const std::string want = " bytes) that external implementation tp_bigws holds beside its case's tensors "
                           "(H=64,T=8,w=bf16,form=plain,";
  // The plugin's bytes: its 2^40-byte workspace and the staging copies, at
  // least x, dy, y and dx of [8, 64] (4 KiB) and well under a MiB.
  auto staging_of = [](const std::string& out) -> long long {
    std::smatch m;
    if (!std::regex_search(out, m, std::regex("1024\\.0 GiB \\(([0-9]+) bytes\\) that external"))) return -1;
    return std::stoll(m[1]) - (1LL << 40);
  };
  auto r = normgate::test::run_normgate_with(limit, "gate " + table + " --plugin " + lib +
                                                        " --backend cpu --seeds 3x1 --t-per-window 2 --dense-points 0 "
                                                        "--fresh-factor 0 --quiet --journal " + journal +
                                                        " --report-md " + md);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "normgate: error: case H=64,T=8,w=bf16,form=plain,")) << r.out;
  EXPECT_TRUE(contains(r.out, want)) << r.out;
  EXPECT_TRUE(contains(r.out, "more than this process's address-space limit (ulimit -v)")) << r.out;
  EXPECT_TRUE(contains(r.out, ": external implementation tp_bigws alone needs more than that at H=64,T=8,w=bf16,"
                              "form=plain,"))
      << r.out;
  EXPECT_GE(staging_of(r.out), 4096) << r.out;
  EXPECT_LT(staging_of(r.out), 1 << 20) << r.out;
  EXPECT_FALSE(std::filesystem::exists(journal));
  EXPECT_FALSE(std::filesystem::exists(md));
  r = normgate::test::run_normgate_with(limit, "check --plugin " + lib + " --variant tp_bigws --backend cpu --case "
                                               "H=64,T=8,w=bf16,form=plain,family=normal,seed=0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, want)) << r.out;
  const std::string dir = scratch("bigws-repro/");
  r = normgate::test::run_normgate_with(limit, "repro --plugin " + lib + " --variant tp_bigws --backend cpu --save " +
                                               dir + " H=64,T=8,w=bf16,form=plain,family=normal,seed=0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, want)) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// A host workspace is mapped for its run and unmapped after it. From the
// gate's heap (which keeps freed blocks) each case left its workspace
// behind when the next, slightly larger one did not fit the hole: under
// ulimit -v the address space grew by one workspace a case until the cases
// were journalled as errors (29 of 39 in the adversarial pass that found it).
TEST(PluginCli, AHostWorkspaceIsReleasedAfterEachRun) {
  const std::string lib = std::string(NG_TEST_PLUGIN_DIR) + "/libtp_midws.so";  // 64 MiB + 64 B a T
  const std::string table = scratch("midws.toml"), md = scratch("midws.md");
  {
    std::ofstream f(table);
    f << "arch = \"sm90a\"\ndescription = \"midws\"\nroute = [\n"
         "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [8, 600], "
         "variant = \"tp_midws\" },\n]\n";
  }
  // 24 cases of 64 MiB each under a 0.57 GiB bound: 9 at once would not fit.
  const auto r = normgate::test::run_normgate_with(
      "ulimit -v 600000 &&", "gate " + table + " --plugin " + lib +
                                 " --backend cpu --threads 1 --seeds 3x2 --t-per-window 4 --dense-points 0 "
                                  "--fresh-factor 0 --quiet --report-md " + md);
  // The plugin leaves dx and dw unwritten: every case fails, none errs.
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_FALSE(contains(r.out, "host workspace")) << r.out;
  const std::string report = file_text(md);
  EXPECT_TRUE(contains(report, "FAIL")) << report.substr(0, 3000);
  EXPECT_FALSE(contains(report, "host workspace")) << report.substr(0, 3000);
  EXPECT_FALSE(contains(report, "ERROR")) << report.substr(0, 3000);
}

// bwd_workspace_bytes refusing a shape the table gives the plugin is a
// refusal before any work: exit 2 naming the implementation and the case,
// nothing written (it was exit 3, "fatal", without the case). repro of a
// case the variant does not support says so and never asks the plugin.
TEST(PluginCli, AWorkspaceRefusalOrAnUnsupportedCaseIsExit2NamingTheCase) {
  const std::string lib = std::string(NG_TEST_PLUGIN_DIR) + "/libtp_midws.so";  // refuses T = 7
  const std::string table = scratch("midws7.toml"), journal = scratch("midws7.jsonl");
  {
    std::ofstream f(table);
    f << "arch = \"sm90a\"\ndescription = \"midws7\"\nroute = [\n"
         "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 7], "
         "variant = \"tp_midws\" },\n]\n";
  }
  auto r = run_normgate("gate " + table + " --plugin " + lib +
                        " --backend cpu --seeds 3x1 --t-per-window 2 --dense-points 0 --fresh-factor 0 --quiet "
                        "--journal " + journal);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "normgate: error: external implementation tp_midws cannot size a run of case "
                              "H=64,T=7,w=bf16,form=plain,")) << r.out;
  EXPECT_TRUE(contains(r.out, "bwd_workspace_bytes returned 2 (invalid arguments): tp_midws: no workspace for T=7"))
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(journal));
  r = run_normgate("check --plugin " + lib + " --variant tp_midws --backend cpu --case "
                   "H=64,T=7,w=bf16,form=plain,family=normal,seed=0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "cannot size a run of case H=64,T=7,w=bf16,form=plain,family=normal,seed=0")) << r.out;
  // form res is not among tp_midws's forms: the support refusal, not the plugin's.
  r = run_normgate("repro --plugin " + lib + " --variant tp_midws --backend cpu H=64,T=7,w=bf16,form=res,"
                   "family=normal,seed=0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "does not support")) << r.out;
  EXPECT_FALSE(contains(r.out, "bwd_workspace_bytes")) << r.out;
}

// A plugin declared deterministic whose dw differs between its two runs:
// `check` says FAIL and exits 1, as the gate fails its window (it was
// "fatal", exit 3, as if the run had broken down).
TEST(PluginCli, CheckOfANondeterministicPluginIsAFail) {
  const std::string lib = std::string(NG_TEST_PLUGIN_DIR) + "/libtp_flaky.so";
  const auto r = run_normgate("check --plugin " + lib + " --variant tp_flaky --backend cpu --case "
                              "H=64,T=3,w=bf16,form=plain,family=normal,seed=0");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "verdict  FAIL: nondeterministic: external implementation tp_flaky (plugin ")) << r.out;
  EXPECT_TRUE(contains(r.out, "gave different bits: output dw element 0 (0x3f800000 then 0x40000000)")) << r.out;
  EXPECT_FALSE(contains(r.out, "fatal")) << r.out;
  // A grid and repro say the same (both ended "fatal", exit 3); repro's
  // --save folder is not left behind.
  auto g = run_normgate("check --plugin " + lib + " --variant tp_flaky --backend cpu --seeds 3x1 --H 64 --T 3 --w bf16");
  EXPECT_EQ(g.code, 1) << g.out;
  EXPECT_TRUE(contains(g.out, "verdict  FAIL: nondeterministic: external implementation tp_flaky")) << g.out;
  const std::string dir = scratch("flaky-repro/");
  g = run_normgate("repro --plugin " + lib + " --variant tp_flaky --backend cpu --save " + dir +
                   " H=64,T=3,w=bf16,form=plain,family=normal,seed=0");
  EXPECT_EQ(g.code, 1) << g.out;
  EXPECT_TRUE(contains(g.out, "verdict  FAIL: nondeterministic: external implementation tp_flaky")) << g.out;
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// A plugin that writes outside an output's view does so on every run: the
// gate FAILs its window on that finding (it was ERROR, "cases that could
// not run ... run them again"), check says FAIL (was fatal, exit 3), and
// --retry-errors runs none of its cases again.
TEST(PluginCli, AWriteOutsideAViewIsAFindingNotAnError) {
  const std::string lib = std::string(NG_TEST_PLUGIN_DIR) + "/libtp_stride.so";  // y written without its stride
  const std::string table = scratch("stride.toml"), md = scratch("stride.md"), journal = scratch("stride.jsonl"),
                    junit = scratch("stride.xml"), json = scratch("stride.json");
  {
    std::ofstream f(table);
    f << "arch = \"sm90a\"\ndescription = \"stride\"\nroute = [\n"
         "  { op = \"fwd\", H = 64, w = \"bf16\", form = \"plain\", T = [2, 8], variant = \"tp_stride\" },\n]\n";
  }
  const std::string gate = "gate " + table + " --plugin " + lib + " --backend cpu --seeds 3x1 --t-per-window 2 "
                           "--dense-points 0 --fresh-factor 0 --quiet --journal " + journal + " --report-md " + md;
  auto r = run_normgate(gate + " --report-junit " + junit + " --report-json " + json);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "verdict  FAIL")) << r.out;
  const std::string report = file_text(md);
  EXPECT_TRUE(contains(report, "cases: tp_stride broke the implementation interface (e.g. wrote outside an output's "
                               "view; a finding: the window FAILs")) << report;
  EXPECT_TRUE(contains(report, "contract broken: external implementation tp_stride (plugin ")) << report;
  EXPECT_TRUE(contains(report, "wrote outside the view of y")) << report;
  EXPECT_FALSE(contains(report, "could not run")) << report;
  // No case gave results: the window's err/tol cells are "-", not 0.
  EXPECT_TRUE(contains(report, "| tp_stride | - | - | - | - |")) << report;
  EXPECT_TRUE(contains(report, "rerun it with: normgate check --plugin ")) << report;
  // JUnit says failure, as the Markdown and JSON do (it said error).
  const std::string xml = file_text(junit), js = file_text(json);
  EXPECT_TRUE(contains(xml, "failures=\"1\" errors=\"0\"")) << xml;
  EXPECT_TRUE(contains(xml, "<failure type=\"finding\" message=\"")) << xml;
  EXPECT_TRUE(contains(xml, " cases: broke the implementation interface: ")) << xml;
  EXPECT_TRUE(std::regex_search(js, std::regex("\"contract_broken\": *[1-9]"))) << js.substr(0, 2000);
  r = run_normgate(gate + " --retry-errors");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "verdict  FAIL")) << r.out;
  r = run_normgate("check --plugin " + lib + " --variant tp_stride --backend cpu --case "
                   "H=64,T=3,w=bf16,form=plain,family=normal,seed=0");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "verdict  FAIL: contract broken: external implementation tp_stride")) << r.out;
}

// A failing plugin window's report says how to run its worst case again:
// `normgate check` with the library loaded (--plugin), which works; before,
// the line had no --plugin and the command it gave exited 2.
TEST(PluginCli, AFailingPluginWindowsRerunLineLoadsThePlugin) {
  const std::string lib = std::string(NG_TEST_PLUGIN_DIR) + "/libtp_ok.so";  // y = x, rstd = 1: fails
  const std::string table = scratch("fail.toml"), md = scratch("fail.md");
  {
    std::ofstream f(table);
    f << "arch = \"sm90a\"\ndescription = \"fail\"\nroute = [\n"
         "  { op = \"fwd\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 8], variant = \"tp_ok\" },\n]\n";
  }
  const auto r = run_normgate("gate " + table + " --plugin " + lib + " --backend cpu --seeds 3x1 --t-per-window 2 "
                              "--dense-points 0 --fresh-factor 0 --quiet --report-md " + md);
  EXPECT_EQ(r.code, 1) << r.out;
  const std::string report = file_text(md);
  const std::string hint = "rerun it with: normgate check --plugin " + lib + " --case ";
  const size_t at = report.find(hint);
  ASSERT_NE(at, std::string::npos) << report;
  const size_t c0 = at + hint.size(), c1 = report.find(' ', c0);
  const std::string worst = report.substr(c0, c1 - c0);
  EXPECT_EQ(report.substr(c1, 17), " --variant tp_ok\n") << report.substr(at, 300);
  // The worst element named by its row and column too (H = 64).
  std::smatch m;
  ASSERT_TRUE(std::regex_search(report, m, std::regex("y does not pass [^\n]* at element ([0-9]+) \\(row ([0-9]+), "
                                                      "col ([0-9]+)\\) of ")))
      << report;
  const long long idx = std::stoll(m[1]);
  EXPECT_EQ(std::stoll(m[2]), idx / 64);
  EXPECT_EQ(std::stoll(m[3]), idx % 64);
  // The command it gives runs, and fails that case as the gate did.
  const auto again = run_normgate("check --plugin " + lib + " --case " + worst + " --variant tp_ok --backend cpu");
  EXPECT_EQ(again.code, 1) << again.out;
  EXPECT_TRUE(contains(again.out, worst)) << again.out;
}

TEST(PluginCli, VariantsCheckAndRoutesSeeThePluginVariants) {
  auto r = run_normgate("variants --plugin " + kRef);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "ex_ref_fwd")) << r.out;
  EXPECT_TRUE(contains(r.out, "ex_ref_bwd")) << r.out;
  EXPECT_TRUE(contains(r.out, "bwd_det_chunked")) << r.out;  // the registry's own are still there
  r = run_normgate("check --case H=64,T=40,w=bf16,form=plain,family=cancel,seed=0 --backend cpu --variant ex_ref_bwd "
                   "--plugin " + kRef);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "ex_ref_bwd")) << r.out;
  EXPECT_TRUE(contains(r.out, "plugin on host")) << r.out;
  // The example table's routes have no approval on file: listed, and exit 1
  // (the dispatcher would refuse them) naming the plugin's variant.
  r = run_normgate("routes " + kTable + " --plugin " + kRef);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "ex_ref_bwd")) << r.out;
  EXPECT_TRUE(contains(r.out, "without a current approval")) << r.out;
}

}  // namespace

// repro's printed commands load the plugins the run loaded: pasted back
// without --plugin they failed with "unknown implementation".
TEST(PluginCli, ReproCommandsNameThePlugin) {
  const std::string dir = std::filesystem::temp_directory_path() / ("ng_plugin_repro_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto r = run_normgate("repro H=64,T=3,w=bf16,form=plain,family=cancel,seed=0 --variant ex_ref_bwd --plugin " +
                              kRef + " --backend cpu --save " + dir + "/c.h5");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "--k 10 --plugin '" + kRef + "'\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "replay   normgate repro --file '" + dir + "/c.h5' --plugin '" + kRef + "'   (")) << r.out;
  // A plugin's partial sums are its own, not a built-in CPU model's.
  EXPECT_TRUE(contains(r.out, "variant partial sums: not known to normgate (ex_ref_bwd is an external")) << r.out;
  EXPECT_FALSE(contains(r.out, "not exposed by the kernel variants")) << r.out;
  EXPECT_FALSE(contains(r.out, "kernel variants run as their CPU models")) << r.out;  // no built-in ran
  const auto back = run_normgate("repro --file " + dir + "/c.h5 --plugin " + kRef);
  EXPECT_EQ(back.code, 0) << back.out;
  // The case file says where the plugin ran, not "cpu-model" (the label of a
  // built-in variant's CPU model).
  const auto ins = run_normgate("inspect " + dir + "/c.h5");
  EXPECT_EQ(ins.code, 0) << ins.out;
  EXPECT_TRUE(contains(ins.out, "on plugin on host (cpu)")) << ins.out;
  EXPECT_FALSE(contains(ins.out, "cpu-model")) << ins.out;
  std::filesystem::remove_all(dir);
}
