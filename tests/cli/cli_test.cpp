// tests/cli: the normgate CLI as a user runs it: exit codes (0 ok, 1 failed
// verdict, 2 usage/input error), error messages naming the bad value, and
// outputs that agree with the libraries.
#include <gtest/gtest.h>

#include "cli_util.h"
#include "util/dispatch_fixture.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "normgate/seeds/case_id.h"
#include "normgate/seeds/generate.h"

namespace {

using normgate::test::CliRun;
using normgate::test::contains;
CliRun run(const std::string& args) { return normgate::test::run_normgate(args); }
// A number as check's table prints it (%.2g).
std::string fmt2(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2g", v);
  return b;
}


// /dev/shm is a plain tmpfs: an output there is written (outputs elsewhere
// under /dev and /proc are refused, UsageErrorsExit2AndNameTheBadValue).
// An output through a link into /proc in its folders, or under /sys, or a
// link loop, is refused before any work (the run wrote nothing, or
// replaced the link with a file).
TEST(Cli, OutputsThroughSystemFoldersAndLinkLoopsAreRefused) {
  const std::string d = normgate::test::fresh_dir("cli_outputs", "links");
  std::filesystem::create_symlink("/proc", d + "/pl");
  std::filesystem::create_symlink(d + "/loopB", d + "/loopA");
  std::filesystem::create_symlink(d + "/loopA", d + "/loopB");
  const std::string one = "check --backend cpu --threads 1 --case H=64,T=3,w=bf16,family=normal,seed=0 --json ";
  CliRun r = run(one + d + "/pl/version");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "is in /proc/, not a file to write")) << r.out;
  r = run(one + "/sys/normgate.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "is in /sys/, not a file to write")) << r.out;
  r = run(one + d + "/loopA");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "loopA': Too many levels of symbolic links")) << r.out;
  EXPECT_TRUE(std::filesystem::is_symlink(d + "/loopA"));
  std::filesystem::remove_all(d);
}

TEST(Cli, AnOutputInDevShmIsWritten) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm here";
  const std::string out = "/dev/shm/normgate_cli_" + std::to_string(::getpid()) + ".json";
  const CliRun r = run("check --backend cpu --threads 1 --case H=64,T=3,w=bf16,family=normal,seed=0 --json " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(std::filesystem::is_regular_file(out)) << r.out;
  std::filesystem::remove(out);
}

TEST(Cli, HelpOnEverySubcommand) {
  const CliRun top = run("--help");
  EXPECT_EQ(top.code, 0) << top.out;
  for (const char* sub : {"families", "case", "check", "variants", "gate", "routes", "approvals", "digest", "derive",
                          "mutate", "repro", "inspect", "export", "plot"}) {
    const CliRun r = run(std::string(sub) + " --help");
    EXPECT_EQ(r.code, 0) << sub << ": " << r.out;
    EXPECT_TRUE(contains(r.out, "Usage")) << sub << ": " << r.out;
    // `normgate --help` lists the subcommand on one short line; its own
    // --help has the whole description, which the listing leaves out when
    // it is long.
    const std::string own = r.out.substr(0, r.out.find('\n'));
    const size_t at = top.out.find("\n  " + std::string(sub) + " ");
    ASSERT_NE(at, std::string::npos) << sub << ": " << top.out;
    const std::string line = top.out.substr(at + 1, top.out.find('\n', at + 1) - at - 1);
    EXPECT_LE(line.size(), 120u) << line;
    if (own.size() > 100) {
      EXPECT_FALSE(contains(top.out, own)) << sub << ": " << top.out;
    }
  }
  EXPECT_TRUE(contains(top.out, "Run 'normgate SUBCOMMAND --help' for a subcommand's options")) << top.out;
  EXPECT_TRUE(contains(top.out, "2 usage or input error, 3 a runtime failure")) << top.out;
}

TEST(Cli, UsageErrorsExit2AndNameTheBadValue) {
  struct Bad {
    std::string args, needle;
  };
  const Bad cases[] = {
      {"case Hx=64,T=3,w=bf16,family=normal,seed=0", "Hx"},
      {"case H=64,T=-1,w=bf16,family=normal,seed=0", "-1"},
      {"case H=64,T=3,w=fp16,family=normal,seed=0", "fp16"},
      {"case H=64,T=3,w=bf16,family=gauss,seed=0", "gauss"},
      {"check --backend cpu --variant bwd_magic --case H=64,T=3,w=bf16,family=normal,seed=0", "bwd_magic"},
      {"check --backend tpu --case H=64,T=3,w=bf16,family=normal,seed=0", "tpu"},
      {"check --backend cpu --H 64,x --T 3 --seeds 3x1", "x"},
      {"check --backend cpu --H 64 --T 3 --seeds 3x0", "3x0"},
      {"frobnicate", "frobnicate"},
      // a value inside a line cannot start a line of its own (printable_line)
      {"\"$(printf 'frob\\nnormgate: PASS')\"", "unknown subcommand 'frob\\x0anormgate: PASS'"},
      {"case \"$(printf -- '--x\\nPASS')\"", "'--x\\x0aPASS'"},
      // nor a path inside an error message (main: printable_message)
      {"routes \"$(printf '/nonexistent/a\\nPASS sm90a.toml')\"", "/nonexistent/a\\x0aPASS sm90a.toml"},
      {"--bogus", "unknown option '--bogus' before the subcommand"},
      // an unknown option where a positional is missing: the option is named first
      {"routes --bogus", "unknown option '--bogus' for 'normgate routes'; table is required"},
      // a control byte in an argument is shown escaped, not sent to the terminal
      {"case \"$(printf 'H=64,T=3,w=bf16,family=normal,seed=0,eps=1e-6\\033[31m')\"", "eps='1e-6\\x1b[31m'"},
      {"check --backend cpu --impl fp32_baseline --case H=8,T=3,w=bf16,family=normal,seed=0", "fp32-baseline"},
      {"check --backend cpu --H 64 --seeds 3x1", "--T"},
      {"case H=4096,T=1,w=bf16,family=normal,seed=0,kappa=1e3", "kappa"},
      {"repro H=64,T=3,w=bf16,family=normal,seed=0 --backend cpu --variant bwd_magic", "bwd_magic"},
      {"repro H=64,T=3,w=bf16,family=normal,seed=0 --backend cpu --variant all", "all"},
      {"repro H=64,T=3,w=bf16,family=normal,seed=0 --backend cpu --variant bwd_det_chunked --k 0", "--k"},
      {"repro H=64,T=3,w=bf16,famly=normal,seed=0 --backend cpu --variant bwd_det_chunked", "famly"},
      {"repro --file /nonexistent/case.h5 --backend cpu --variant bwd_det_chunked", "/nonexistent/case.h5"},
      {"inspect /nonexistent/maps.h5", "/nonexistent/maps.h5: no such file"},
      {"inspect /", "/: is a directory"},  // not "no such file"
      {"export /nonexistent/report.json -o /tmp/x.h5 --backend cpu", "/nonexistent/report.json"},
      {"export /nonexistent/report.json -o /nonexistent-dir/x.h5 --backend cpu", "/nonexistent-dir"},
      {"mutate --seeds 4x1", "4x1"},
      {"mutate --expect-fail ctl_fp32_seq", "ctl_fp32_seq"},
      {"mutate --expect-fail bwd_magic", "bwd_magic"},
      {"mutate --json /nonexistent-dir/m.json", "/nonexistent-dir"},
      {"case H=64,T=3,w=bf16,family=cancel,seed=0,eps=0", "eps"},
      // integer options: decimal only (CLI11 alone takes these prefixes and separators)
      {"gate routes/sm90a-ci.toml --plan --threads 0x10", "--threads: '0x10' is not a decimal integer"},
      {"gate routes/sm90a-ci.toml --plan --t-per-window 0b11", "--t-per-window: '0b11' is not a decimal integer"},
      {"gate routes/sm90a-ci.toml --plan --dense-step 1_000", "--dense-step: '1_000' is not a decimal integer"},
      {"gate routes/sm90a-ci.toml --plan --dense-points 0o7", "--dense-points: '0o7' is not a decimal integer"},
      {"check --backend cpu --case H=8,T=1,w=bf16,family=normal,seed=0 --threads 1e3",
       "--threads: '1e3' is not a decimal integer"},
      // floating-point options: decimal notation only
      {"gate routes/sm90a-ci.toml --plan --rate 0x10", "--rate: '0x10' is not a decimal number"},
      {"gate routes/sm90a-ci.toml --plan --rate 0x1p3", "--rate: '0x1p3' is not a decimal number"},
      {"gate routes/sm90a-ci.toml --plan --rate 1_000", "--rate: '1_000' is not a decimal number"},
      {"gate routes/sm90a-ci.toml --plan --rate ' 5'", "--rate: ' 5' is not a decimal number"},
      {"gate routes/sm90a-ci.toml --plan --rate 1e", "--rate: '1e' is not a decimal number"},
      {"derive routes/sm90a.derive.toml --out x.toml --deadline-s 0x10", "--deadline-s: '0x10' is not a decimal number"},
      // grid options: beside --case refused, not ignored; items once each, none empty
      {"check --backend cpu --case H=64,T=3,w=bf16,family=normal,seed=0 --H 128", "--case excludes --H"},
      {"check --backend cpu --case H=64,T=3,w=bf16,family=normal,seed=0 --w fp32", "--case excludes --w"},
      // --all takes every case: a --keep beside it would be ignored
      {"export /nonexistent/report.json -o /tmp/x.h5 --backend cpu --all --keep 2", "--keep excludes --all"},
      // a single-value option given twice: both values named, under the names given
      {"gate routes/sm90a-ci.toml --plan --seeds 3x16 --seeds=5x120",
       "--seeds takes one value and was given 2 times (--seeds '3x16', --seeds '5x120'): give it once"},
      {"repro H=64,T=3,w=bf16,family=normal,seed=0 --impl fwd_rowwise --variant bwd_det_chunked",
       "--variant takes one value and was given 2 times (--impl 'fwd_rowwise', --variant 'bwd_det_chunked')"},
      {"export /nonexistent/r.json -oa.h5 -o b.h5", "--output takes one value and was given 2 times (-o 'a.h5', -o 'b.h5')"},
      // a quote or a control byte inside a value: one shell word each
      {"gate routes/sm90a-ci.toml --plan --seeds \"3x'4\" --seeds \"$(printf 'a\\tb')\"",
       "--seeds takes one value and was given 2 times (--seeds '3x'\\''4', --seeds $'a\\tb')"},
      {"approvals /nonexistent/a.json --carry a b --carry c d",
       "--carry takes 2 values and was given 2 times (--carry 'a' 'b', --carry 'c' 'd')"},
      {"check --backend cpu --H 64,64 --T 3 --seeds 3x1", "--H '64,64': '64' given twice"},
      {"check --backend cpu --H 64,064 --T 3 --seeds 3x1", "--H '64,064': 64 given twice"},
      {"check --backend cpu --H 64, --T 3 --seeds 3x1", "--H '64,': an empty item"},
      {"check --backend cpu --H 64 --T 3 --seeds 3x1 --form plain,plain", "--form 'plain,plain': 'plain' given twice"},
      // an output that is no file to write: "-" where stdout is not offered, a path in /proc
      {"check --backend cpu --case H=64,T=3,w=bf16,family=normal,seed=0 --json -", "--json -: give a file"},
      {"export /nonexistent/report.json -o - --backend cpu", "--output -: give a file"},
      {"check --backend cpu --case H=64,T=3,w=bf16,family=normal,seed=0 --json /proc/version",
       "--json '/proc/version' is in /proc/, not a file to write"},
  };
  for (const auto& b : cases) {
    const CliRun r = run(b.args);
    EXPECT_EQ(r.code, 2) << b.args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, b.needle)) << b.args << "\n" << r.out;
  }
}

// A gate output in /proc is refused; the hint offers "-" (stdout) only for
// the reports, which can go there, not for --journal or --stats-json.
TEST(Cli, SystemPathHintOffersStdoutOnlyWhereItIsTaken) {
  const std::string table = std::string(NORMGATE_SOURCE_DIR) + "/routes/sm90a-ci.toml";
  const CliRun md = run("gate " + table + " --backend cpu --report-md /proc/version");
  EXPECT_EQ(md.code, 2) << md.out;
  EXPECT_TRUE(contains(md.out, "--report-md '/proc/version' is in /proc/, not a file to write (use - for stdout)"))
      << md.out;
  for (const char* opt : {"--journal", "--stats-json"}) {
    const CliRun r = run("gate " + table + " --backend cpu " + opt + " /proc/version");
    EXPECT_EQ(r.code, 2) << opt << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, std::string(opt) + " '/proc/version' is in /proc/, not a file to write")) << r.out;
    EXPECT_FALSE(contains(r.out, "use - for stdout")) << opt << "\n" << r.out;
  }
}

// CLI11 alone reads 010 as octal 8 (the refused spellings are in
// UsageErrorsExit2AndNameTheBadValue); every integer option of every
// command is decimal, and floating-point ones keep their decimal spellings
// (apps/commands.h decimal_number_options).
TEST(Cli, IntegerOptionsAreDecimal) {
  // Leading zeros are decimal: 010 plans what 10 plans (octal would be 8).
  const std::string table = std::string(NORMGATE_SOURCE_DIR) + "/routes/sm90a-ci.toml";
  const std::string plan = "gate " + table + " --plan --seeds 3x1 --dense-points 0 --t-per-window ";
  const CliRun zero10 = run(plan + "010"), ten = run(plan + "10"), eight = run(plan + "8");
  ASSERT_EQ(zero10.code, 0) << zero10.out;
  ASSERT_EQ(ten.code, 0) << ten.out;
  ASSERT_EQ(eight.code, 0) << eight.out;
  EXPECT_EQ(zero10.out, ten.out);
  EXPECT_NE(zero10.out, eight.out);
  // Decimal floating-point notations still read as before.
  for (const char* rate : {"1e8", "1E+8", "100000000", "100000000.", "+1e8", ".1e9"}) {
    const CliRun r = run("gate " + table + " --plan --seeds 3x1 --rate " + rate);
    EXPECT_EQ(r.code, 0) << rate << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "at 1e+08 elements/s")) << rate << "\n" << r.out;
  }
}

// A mistyped option: exit 2 before any work, naming the option (CLI11 lists
// the stray value first) and the closest known one; an option with no near
// name is named alone.
TEST(Cli, UnknownOptionNamedWithTheClosestKnownOne) {
  struct Want {
    std::string args, says;
  };
  const Want cases[] = {
      {"check --backend cpu --case H=8,T=1,w=bf16,family=normal,seed=0 --seed 3x3",
       "unknown option '--seed' for 'normgate check' (did you mean '--seeds'?)"},
      {"check --backnd cpu --case H=8,T=1,w=bf16,family=normal,seed=0",
       "unknown option '--backnd' for 'normgate check' (did you mean '--backend'?)"},
      {"mutate --expectfail ctl_fp32_seq",
       "unknown option '--expectfail' for 'normgate mutate' (did you mean '--expect-fail'?)"},
      {"check --backend cpu --zzzzzz 1", "unknown option '--zzzzzz' for 'normgate check'; "},
      {"check --backend cpu -Q", "unknown option '-Q' for 'normgate check'"},
      // the same name in another case first; every option a prefix begins
      {"check --backend cpu --seeds 3x1 --H 8 --t 5", "unknown option '--t' for 'normgate check' (did you mean '--T'?)"},
      {"gate routes/sm90a-ci.toml --s 1",
       "unknown option '--s' for 'normgate gate' (did you mean one of '--seeds', '--stats-json', '--shard'?)"},
  };
  for (const auto& w : cases) {
    const CliRun r = run(w.args);
    EXPECT_EQ(r.code, 2) << w.args << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, w.says)) << w.args << "\n" << r.out;
  }
  // An empty stray argument is named as such, not as CLI11's empty name.
  {
    const CliRun r = run("gate routes/sm90a-ci.toml '' --plan");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "an empty argument (\"\") was not expected by 'normgate gate'")) << r.out;
    EXPECT_FALSE(contains(r.out, "not expected: \n")) << r.out;
  }
  {  // with other stray tokens, every one is named
    const CliRun r = run("gate routes/sm90a-ci.toml --plan foo '' bar");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_TRUE(contains(r.out, "(one of them empty) were not expected by 'normgate gate'")) << r.out;
    EXPECT_TRUE(contains(r.out, "\"foo\"") && contains(r.out, "\"bar\"") && contains(r.out, "\"\"")) << r.out;
    EXPECT_FALSE(contains(r.out, "The following arguments")) << r.out;
  }
  // A token CLI11 took as an option's value is not the stray one: here
  // "--seedz" is --base's value and "extra" is what was not expected.
  {
    const CliRun r = run("gate routes/sm90a-ci.toml --base --seedz extra");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_FALSE(contains(r.out, "unknown option")) << r.out;
    EXPECT_TRUE(contains(r.out, "extra")) << r.out;
  }
  // A stray value with every option known: CLI11's message alone.
  const CliRun r = run("case H=8,T=1,w=bf16,family=normal,seed=0 extra");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_FALSE(contains(r.out, "unknown option")) << r.out;
  EXPECT_TRUE(contains(r.out, "extra")) << r.out;
}

// eps must be a normal float32 (the kernels take float32(eps)): 1e-50 (0 in
// the kernels: a zeros row's y NaN) and 1e-45 (a subnormal there, another
// problem than the oracle's) are usage errors naming the value, exit 2 before
// any work, in a case id and in a seed set; FLT_MIN and the default run and pass.
TEST(Cli, EpsOutsideTheNormalFloat32RangeIsAUsageError) {
  const std::string zeros = "H=64,T=3,w=bf16,form=plain,family=zeros,seed=0";
  for (const char* eps : {"1e-50", "1e-45"}) {
    const std::string e = std::string("eps=") + eps;
    for (const std::string& args :
         {"case " + zeros + "," + e,
          "check --backend cpu --variant bwd_det_chunked --case " + zeros + "," + e,
          "repro " + zeros + "," + e + " --backend cpu --variant bwd_det_chunked",
          "check --backend cpu --variant bwd_det_chunked --seeds epsnear," + e + ":0..0 --H 64 --T 3 --w bf16"}) {
      const CliRun r = run(args);
      EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
      EXPECT_TRUE(contains(r.out, e + " is below the smallest normal float32 1.1754943508222875e-38")) << args << "\n"
                                                                                                     << r.out;
      EXPECT_FALSE(contains(r.out, "verdict")) << args << "\n" << r.out;
    }
  }
  for (const std::string& id : {zeros + ",eps=1.1754943508222875e-38", zeros,
                                std::string("H=64,T=3,w=bf16,form=plain,family=epsnear,seed=0,eps=1.1754943508222875e-38")}) {
    const CliRun r = run("check --backend cpu --variant bwd_det_chunked --case " + id);
    EXPECT_EQ(r.code, 0) << id << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "verdict  PASS")) << id << "\n" << r.out;
  }
}

// repro: exit 1 when the implementation fails, 0 when it passes; the report
// ends with a command that reproduces it.
TEST(Cli, ReproExitCodesAndCommand) {
  const CliRun bad = run("repro H=64,T=600,w=bf16,form=plain,family=cancel,seed=1 --backend cpu --variant ctl_fp32_seq --k 2");
  EXPECT_EQ(bad.code, 1) << bad.out;
  EXPECT_TRUE(contains(bad.out, "dw: the 2 worst elements")) << bad.out;
  EXPECT_TRUE(contains(bad.out, "reproduce: normgate repro 'H=64,T=600,w=bf16,form=plain,family=cancel,seed=1' "
                                "--variant ctl_fp32_seq")) << bad.out;
  const CliRun good = run("repro H=64,T=600,w=bf16,form=plain,family=cancel,seed=1 --backend cpu --variant bwd_det_chunked");
  EXPECT_EQ(good.code, 0) << good.out;
  EXPECT_TRUE(contains(good.out, "conditioning")) << good.out;
}

TEST(Cli, CaseDigestMatchesTheLibrary) {
  const std::string id = "H=40,T=9,w=fp32,form=plain,family=llm,seed=5";
  const CliRun r = run("case " + id);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto d = normgate::seeds::digest(normgate::seeds::generate_host(normgate::seeds::parse_case(id)));
  EXPECT_TRUE(contains(r.out, d.all)) << r.out;
  EXPECT_TRUE(contains(r.out, d.x)) << r.out;
  // Keys in another order print the canonical id.
  const CliRun r2 = run("case --no-digest seed=5,family=llm,T=9,H=40,w=fp32");
  EXPECT_TRUE(contains(r2.out, "case    " + id)) << r2.out;
}

// A failed write to stdout (a full disk, a closed pipe's reader gone) is a
// runtime failure, exit 3 naming stdout: the case's SHA-256, a listing or a
// verdict must not be lost with exit 0.
TEST(Cli, AFailedWriteToStdoutIsExit3) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::string err = ::testing::TempDir() + "/ng_stdout_full_" + std::to_string(::getpid()) + ".txt";
  for (const std::string args : {"case H=64,T=3,w=bf16,family=normal,seed=0", "families", "variants"}) {
    const int st = std::system((normgate::test::normgate_bin() + " " + args + " >/dev/full 2>" + err).c_str());
    ASSERT_TRUE(WIFEXITED(st)) << args;
    EXPECT_EQ(WEXITSTATUS(st), 3) << args;
    const std::string said = normgate::test::slurp(err);
    EXPECT_TRUE(contains(said, "normgate: fatal: cannot write to stdout: No space left on device; the command ran to "
                               "its end (the files it writes are written), its printed output is lost"))
        << args << ": " << said;
  }
  // A verdict stands: a check that does not pass is exit 1 with or without
  // its stdout (only a success whose output was lost becomes exit 3).
  {
    const std::string cmd = normgate::test::normgate_bin() +
                            " check --case H=2048,T=64,w=bf16,form=plain,family=cancel,seed=0 --variant ctl_sumsq_bf16 "
                            "--backend cpu";
    const int fail_full = std::system((cmd + " >/dev/full 2>" + err).c_str());
    const int fail_null = std::system((cmd + " >/dev/null 2>&1").c_str());
    ASSERT_TRUE(WIFEXITED(fail_full) && WIFEXITED(fail_null));
    EXPECT_EQ(WEXITSTATUS(fail_null), 1);
    EXPECT_EQ(WEXITSTATUS(fail_full), 1) << normgate::test::slurp(err);
    EXPECT_TRUE(contains(normgate::test::slurp(err), "cannot write to stdout")) << normgate::test::slurp(err);
  }
  // The same command with a working stdout still exits 0.
  const CliRun ok = normgate::test::run_normgate("case H=64,T=3,w=bf16,family=normal,seed=0");
  EXPECT_EQ(ok.code, 0) << ok.out;
  std::filesystem::remove(err);
}

TEST(Cli, FamiliesListsGateFamilies) {
  const CliRun r = run("families");
  ASSERT_EQ(r.code, 0);
  for (const char* f : {"normal", "llm", "cancel", "epsnear", "zeros", "tiny", "huge", "specials"})
    EXPECT_TRUE(contains(r.out, f)) << f;
  EXPECT_TRUE(contains(r.out, "epsnear   yes")) << r.out;  // gated by default
  EXPECT_EQ(run("families cancel").code, 0);
}

TEST(Cli, VariantsMarkControls) {
  const CliRun r = run("variants");
  ASSERT_EQ(r.code, 0);
  EXPECT_TRUE(contains(r.out, "ctl_fp32_seq")) << r.out;
  // Every control line says CONTROL; no real variant does.
  std::istringstream in(r.out);
  std::string line;
  int controls = 0;
  while (std::getline(in, line)) {
    const bool is_ctl = line.rfind("ctl_", 0) == 0;
    EXPECT_EQ(is_ctl, contains(line, "CONTROL")) << line;
    controls += is_ctl;
  }
  EXPECT_EQ(controls, 12);
  EXPECT_TRUE(contains(r.out, "ctl_eps_dropped op=bwd")) << r.out;
  EXPECT_TRUE(contains(r.out, "CONTROL MODEL-ONLY")) << r.out;
}

// --table: each line ends with the variant's standing there, as the
// dispatcher counts it (tests/util/dispatch_fixture.h: current records for
// the BF16 windows, a stale one for bwd det FP32, none for bwd nondet FP32).
TEST(Cli, VariantsTableSaysEachVariantsStanding) {
  const normgate::test::DispatchFixture fx("variants_cli");
  const CliRun r = run("variants --table " + fx.table);
  ASSERT_EQ(r.code, 0) << r.out;
  auto line_of = [&](const std::string& name) {
    std::istringstream in(r.out);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(name + " ", 0) == 0) return line;
    return std::string();
  };
  EXPECT_TRUE(contains(line_of("bwd_det_chunked"),
                       "| routes 3 (1 not current), fallback bwd_det; records: current gpu 2, cpu-model 0, stale 1"))
      << r.out;
  EXPECT_TRUE(contains(line_of("bwd_nondet_atomic"),
                       "| routes 2 (1 not current), fallback bwd_nondet; records: current gpu 1, cpu-model 0, stale 0"))
      << r.out;
  EXPECT_TRUE(contains(line_of("fwd_rowwise"), "| routes 1, fallback fwd; records: current gpu 1, cpu-model 0, stale 0"))
      << r.out;
  EXPECT_TRUE(contains(line_of("bwd_det_lean"), "| routes 0; records: current gpu 0")) << r.out;
  // Without --table the lines are the registry's alone.
  EXPECT_FALSE(contains(run("variants").out, "| routes"));
  // A table that is not there: a usage error naming it, nothing listed.
  const CliRun bad = run("variants --table " + fx.dir + "/none.toml");
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(contains(bad.out, "--table " + fx.dir + "/none.toml")) << bad.out;
  EXPECT_FALSE(contains(bad.out, "fwd_rowwise")) << bad.out;  // stdout and stderr merged: nothing listed
}

// The FP32 baseline fails dw on a cancellation case and the report says where;
// the deterministic variant's CPU model passes the same case. Exit code 1 when
// any implementation fails.
TEST(Cli, CheckExplainsTheFailingColumn) {
  const std::string json = std::string(NORMGATE_BINARY_DIR) + "/cli_check_test.json";
  std::filesystem::remove(json);
  const CliRun r = run("check --backend cpu --variant fp32-baseline,bwd_det_chunked --json " + json +
                    " --case H=64,T=4097,w=bf16,family=cancel,seed=1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "dw FAILS")) << r.out;
  EXPECT_TRUE(contains(r.out, "oracle bound")) << r.out;
  EXPECT_TRUE(contains(r.out, "column conditioning")) << r.out;
  EXPECT_TRUE(contains(r.out, "impl     bwd_det_chunked on cpu model")) << r.out;
  std::ifstream f(json);
  ASSERT_TRUE(f.good()) << "no JSON written";
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(text, "\"impl\": \"bwd_det_chunked\"")) << text.substr(0, 400);
  EXPECT_FALSE(std::filesystem::exists(json + ".tmp")) << "temporary file left behind";
}

// check's "forced" column is the ideal kernel's err/tol at the worst element
// (the JSON's "forced", the gate's margins table), so forced + kernel is the
// max err/tol. It showed the tensor's largest (the JSON's max_forced), which
// here is 30x dw's max err/tol and sits at another column.
TEST(Cli, CheckForcedIsAtTheWorstElement) {
  const std::string json = std::string(NORMGATE_BINARY_DIR) + "/cli_check_forced_" + std::to_string(::getpid()) + ".json";
  const CliRun r = run("check --backend cpu --threads 1 --variant bwd_det_chunked --json " + json +
                       " --case H=64,T=700,w=bf16,form=plain,family=normal,seed=2");
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream f(json);
  const nlohmann::json j = nlohmann::json::parse(f);
  std::filesystem::remove(json);
  const auto& dw = j["impls"][0]["outputs"]["dw"];
  const double forced = dw["forced"].get<double>(), max_forced = dw["max_forced"].get<double>();
  ASSERT_GT(max_forced, 4 * forced) << dw.dump();  // the case tells the two apart
  std::istringstream lines(r.out);
  std::string line, row;
  while (std::getline(lines, line))
    if (line.rfind("dw  ", 0) == 0 && row.empty()) row = line;  // the table's row, not "dw vs FP32"
  ASSERT_FALSE(row.empty()) << r.out;
  std::istringstream cols(row);
  std::string name, max_s, col_word, col_s, over_s, forced_s, kernel_s;
  cols >> name >> max_s >> col_word >> col_s >> over_s >> forced_s >> kernel_s;
  EXPECT_EQ(col_word, "col") << row;
  EXPECT_DOUBLE_EQ(std::stod(forced_s), std::stod(fmt2(forced))) << row;
  EXPECT_NE(std::stod(forced_s), std::stod(fmt2(max_forced))) << row;
  EXPECT_TRUE(contains(r.out, "(forced: an ideal kernel's err/tol at the worst element; kernel: max err/tol minus forced)"))
      << r.out;
}

TEST(Cli, JsonToUnwritablePathFailsCleanly) {
  const CliRun r = run("check --backend cpu --json /nonexistent-dir/x.json --case H=8,T=3,w=bf16,family=normal,seed=0");
  EXPECT_EQ(r.code, 2) << r.out;  // a usage error, found before any work
  EXPECT_TRUE(contains(r.out, "/nonexistent-dir/x.json")) << r.out;
}

}  // namespace
