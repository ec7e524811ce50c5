// tests/cli/check_support_cli_test.cpp: `normgate check` and the
// implementations that do not support a case. `--variant all` says on
// stderr which variants it leaves out and why (and records it: the report,
// --json, --md); a grid naming a variant that does not support one of its
// cases exits 2 before any case runs, naming the variant, the case and why.
// On the CPU models.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "normgate/core/host_memory.h"

namespace {

using normgate::test::contains;
using normgate::test::fresh_dir;
using normgate::test::slurp;

// `normgate ARGS` with stdout and stderr apart (stderr through a file).
struct Split {
  int code = -1;
  std::string out, err;
};
Split run_split(const std::string& args, const std::string& dir) {
  const std::string err_path = dir + "/stderr.txt";
  const std::string cmd = normgate::test::normgate_bin() + " " + args + " 2>" + err_path;
  Split r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.err = slurp(err_path);
  return r;
}

constexpr const char* kH512 = "H=512,T=3,w=bf16,form=plain,family=normal,seed=0";

TEST(CheckSupportCli, AllSaysOnStderrWhichVariantsItSkipsAndWhy) {
  const std::string d = fresh_dir("cli", "skip_all_case");
  const Split r = run_split(std::string("check --backend cpu --variant all --case ") + kH512 + " --json " + d + "/c.json", d);
  EXPECT_LE(r.code, 1) << r.out << r.err;  // 1 when a negative control fails, as it may
  EXPECT_TRUE(contains(r.err, "fwd_narrow skipped: H = 512 outside 256..256\n")) << r.err;
  EXPECT_FALSE(contains(r.err, "fwd_multirow skipped")) << r.err;
  EXPECT_TRUE(contains(r.out, "skipped  fwd_narrow: H = 512 outside 256..256")) << r.out;
  const nlohmann::json j = nlohmann::json::parse(slurp(d + "/c.json"));
  bool found = false;
  for (const auto& s : j.at("skipped")) found = found || (s["impl"] == "fwd_narrow" && s["why"] == "H = 512 outside 256..256");
  EXPECT_TRUE(found) << j["skipped"].dump();
  for (const auto& i : j.at("impls")) EXPECT_NE(i["impl"], "fwd_narrow");
  std::filesystem::remove_all(d);
}

TEST(CheckSupportCli, GridWithAllSaysPerVariantHowManyCasesItSkips) {
  const std::string d = fresh_dir("cli", "skip_all_grid");
  const Split r = run_split("check --backend cpu --variant all --seeds normal:0..0 --H 256,512 --T 3 --w bf16 --quiet --md " +
                                d + "/g.md",
                            d);
  EXPECT_LE(r.code, 1) << r.out << r.err;
  const std::string line = "fwd_narrow skipped on 1 of 2 cases (first " + std::string(kH512) + ": H = 512 outside 256..256)";
  EXPECT_TRUE(contains(r.err, line + "\n")) << r.err;
  EXPECT_TRUE(contains(slurp(d + "/g.md"), "- " + line + "\n")) << slurp(d + "/g.md");
  EXPECT_FALSE(contains(r.err, "bwd_det_chunked skipped")) << r.err;
  std::filesystem::remove_all(d);
}

TEST(CheckSupportCli, GridNamingAnUnsupportedVariantExits2BeforeAnyWork) {
  const std::string d = fresh_dir("cli", "skip_named_grid");
  // H = 256 comes first in the grid: its cases would run before H = 512's.
  const Split r = run_split("check --backend cpu --variant bwd_det_chunked,fwd_narrow --seeds normal:0..1 --H 256,512 "
                            "--T 3 --w bf16 --quiet --json " + d + "/g.json --md " + d + "/g.md",
                            d);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, std::string("variant fwd_narrow does not support case ") + kH512 +
                                  " (H = 512 outside 256..256); it does not support 2 of the grid's 4 cases"))
      << r.err;
  EXPECT_EQ(r.out, "") << "work started before the refusal";
  EXPECT_FALSE(std::filesystem::exists(d + "/g.json"));
  EXPECT_FALSE(std::filesystem::exists(d + "/g.md"));
  std::filesystem::remove_all(d);
}

// A variant named besides "all" is not skipped: it must support every case,
// as when named alone (exit 2 before any work, nothing on stdout: not even
// the backend note). The single case and the grid alike.
TEST(CheckSupportCli, AVariantNamedBesideAllIsNotSkipped) {
  const std::string d = fresh_dir("cli", "skip_named_all");
  for (const std::string& where : {std::string("--case ") + kH512,
                                  std::string("--seeds normal:0..0 --H 256,512 --T 3 --w bf16 --quiet")}) {
    const Split r = run_split("check --backend cpu --variant fwd_narrow --variant all " + where + " --json " + d +
                                  "/x.json",
                              d);
    EXPECT_EQ(r.code, 2) << where << r.out << r.err;
    EXPECT_TRUE(contains(r.err, std::string("variant fwd_narrow does not support case ") + kH512 +
                                    " (H = 512 outside 256..256)"))
        << r.err;
    EXPECT_EQ(r.out, "") << where << ": output before the refusal";
    EXPECT_FALSE(std::filesystem::exists(d + "/x.json"));
  }
  // Named alone on a single case: the refusal is the only output too.
  const Split r = run_split(std::string("check --backend cpu --variant fwd_narrow --case ") + kH512, d);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_EQ(r.out, "") << "the backend note came before the refusal";
  std::filesystem::remove_all(d);
}

}  // namespace

// A case too large for any host's memory (2^31 + 16 rows of 256: 4.7 TiB of
// BF16 x, dy, y and dx) is refused before any work, exit 2 naming the case and the
// bound, instead of ending in std::bad_alloc (exit 3) or the OOM killer.
// The single case and the grid (its largest case) alike.
TEST(CheckSupportCli, ACaseLargerThanHostMemoryExits2BeforeAnyWork) {
  const std::string d = fresh_dir("cli", "host_memory");
  // Each command: exit 2, stderr holding every needle, nothing on stdout, `output` not created.
  auto refused = [&](const std::string& args, const std::vector<std::string>& needles, const std::string& output) {
    const Split r = run_split(args, d);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out << r.err;
    for (const auto& n : needles) EXPECT_TRUE(contains(r.err, n)) << n << "\n" << r.err;
    EXPECT_EQ(r.out, "") << "work started before the refusal: " << args;
    EXPECT_FALSE(std::filesystem::exists(output)) << output;
  };
  const std::string big = "H=256,T=89478486,w=bf16,form=heads24,family=normal,seed=1";
  refused("check --backend cpu --case " + big + " --json " + d + "/c.json",
          {"case " + big + " (2147483664 rows of 256) needs about ",
           // x is the q slice of packed qkv rows (5/3 of a tensor), dy, y, dx: 14/3 x 2 bytes an element
           " of host memory: 4778.7 GiB (5131054301184 bytes) of BF16 tensors (its inputs and the outputs of 1 "
           "implementation), ",
           " for the threads' stacks and ", " of margin (1% + 32 MiB); more than ", ": choose T <= "},
          d + "/c.json");
  refused("check --backend cpu --seeds normal:0..0 --H 256 --T 3,89478486 --form heads24 "
          "--variant fwd_rowwise,bwd_det_chunked --quiet --md " + d + "/g.md",
          {"T=89478486", "6826.7 GiB (7330077573120 bytes) of BF16 tensors", "the outputs of 2 implementations)"},
          d + "/g.md");
  // --variant all: the bound counts the implementations that run on the case
  // (as many as a small case of the same shape runs), not those it skips.
  const Split small = run_split("check --backend cpu --variant all --case H=256,T=2,w=bf16,form=heads24,family=normal,"
                                "seed=1 --json " + d + "/small.json", d);
  ASSERT_TRUE(std::filesystem::exists(d + "/small.json")) << small.out << small.err;
  const size_t ran = nlohmann::json::parse(slurp(d + "/small.json"))["impls"].size();
  ASSERT_GT(ran, 2u);
  EXPECT_TRUE(contains(small.err, " skipped: ")) << small.err;  // some are skipped on heads24
  refused("check --backend cpu --variant all --case " + big + " --json " + d + "/a.json",
          {"the outputs of " + std::to_string(ran) + " implementations)"}, d + "/a.json");
  // case too: generating the inputs alone (2.7 TiB of packed x and dy) is refused, with no "fewer implementations" advice.
  {
    const Split r = run_split("case " + big, d);
    EXPECT_EQ(r.code, 2) << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "of host memory: 2730.7 GiB (2932031029248 bytes) of BF16 tensors (its inputs), "))
        << r.err;
    EXPECT_TRUE(contains(r.err, ": choose T <= ")) << r.err;
    EXPECT_FALSE(contains(r.err, "fewer implementations")) << r.err;
  }
  // An address-space limit (ulimit -v) bounds the case as the host's memory
  // does: refused by name (it was std::bad_alloc, exit 3, under the limit).
  {
    const normgate::test::CliRun u = normgate::test::run_normgate_with("ulimit -v 4000000 &&",
                                                       "case H=16384,T=200000,w=fp32,family=normal,seed=0");
    EXPECT_EQ(u.code, 2) << u.out;
    EXPECT_TRUE(contains(u.out, "more than this process's address-space limit (ulimit -v) of 3.8 GiB (4096000000 "
                                "bytes), of which 3.8 GiB ("))
        << u.out;
    EXPECT_TRUE(contains(u.out, " is left (0.0 GiB (")) << u.out;
    EXPECT_TRUE(contains(u.out, " in use)")) << u.out;
    EXPECT_FALSE(contains(u.out, "shape   T=")) << u.out;  // refused before the case's lines
    // A case under the limit but over what the process leaves of it (its own
    // address space counts: the inputs, the threads' stacks and the margin
    // come to 20 MB under 4096000000 bytes; normgate's own mappings take
    // more than that) is refused too; against the whole limit it passed and
    // ended in bad_alloc.
    const uint64_t stacks = normgate::core::thread_stacks_bytes();
    const uint64_t row = 2 * 16384 * 2;  // x and dy, BF16
    const uint64_t rows = static_cast<uint64_t>((4076000000.0 - 33554432.0 - static_cast<double>(stacks)) / 1.01) / row;
    const normgate::test::CliRun v = normgate::test::run_normgate_with(
        "ulimit -v 4000000 &&", "case H=16384,T=" + std::to_string(rows) + ",w=fp32,family=normal,seed=0");
    EXPECT_EQ(v.code, 2) << v.out;
    EXPECT_TRUE(contains(v.out, " of host memory: " + normgate::core::gib_and_bytes(rows * row) +
                                    " of BF16 tensors (its inputs), "))
        << v.out;
  }
  // repro too, before its --save folder is made: 256 GiB of BF16 x, dy, y
  // and dx, and 14 bytes an element more for the case file it builds in
  // memory (704 GiB in all; more than any host this runs on).
  refused("repro --backend cpu H=16384,T=2097152,w=bf16,form=plain,family=llm,seed=0 --variant fwd_rowwise --save " +
              d + "/saved/",
          {" of host memory: 704.0 GiB (755914244096 bytes) of arrays (its inputs and the outputs of 1 "
           "implementation, and the case file built in memory (--save))"},
          d + "/saved");
  // --save's case file counts: [262144, 1024] needs about 2.1 GB checked and
  // 5.9 GB saved (measured: 8.2 and 22.3 bytes an element of peak RSS), so
  // under a 3.8 GiB address-space limit the saving run is refused before
  // any work (it ran the whole case and then failed writing the file).
  {
    const normgate::test::CliRun u = normgate::test::run_normgate_with(
        "ulimit -v 4000000 &&", "repro --backend cpu H=1024,T=262144,w=bf16,form=plain,family=normal,seed=0 "
                                "--variant bwd_det_chunked --save " + d + "/saved2/");
    EXPECT_EQ(u.code, 2) << u.out;
    EXPECT_TRUE(contains(u.out, " of host memory: 5.5 GiB (5905580032 bytes) of arrays (")) << u.out;
    EXPECT_TRUE(contains(u.out, "more than this process's address-space limit (ulimit -v)")) << u.out;
    EXPECT_FALSE(std::filesystem::exists(d + "/saved2")) << u.out;
  }
  std::filesystem::remove_all(d);
}
