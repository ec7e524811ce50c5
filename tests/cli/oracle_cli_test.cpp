// tests/cli: `normgate check --oracle fp64|auto|mpfr` and certification in the
// CLI's report (exit codes: 0 pass, 1 fail or inconclusive, 2 usage error).
#include <gtest/gtest.h>

#include "cli_util.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

using OracleRun = normgate::test::CliRun;
OracleRun normgate(const std::string& args) { return normgate::test::run_normgate(args); }
bool has(const std::string& s, const std::string& n) { return normgate::test::contains(s, n); }


TEST(CliOracle, EveryModeOnASmallCase) {
  const std::string id = " --case H=48,T=33,w=fp32,family=llm,seed=4";
  const OracleRun a = normgate("check --backend cpu --variant bwd_det_chunked" + id);
  EXPECT_EQ(a.code, 0) << a.out;
  EXPECT_TRUE(has(a.out, "FP64 with MPFR escalation (--oracle auto)")) << a.out;  // the default
  EXPECT_TRUE(has(a.out, "uncertified")) << a.out;
  const OracleRun m = normgate("check --backend cpu --oracle mpfr --variant bwd_det_chunked" + id);
  EXPECT_EQ(m.code, 0) << m.out;
  EXPECT_TRUE(has(m.out, "MPFR for every element")) << m.out;
  const OracleRun f = normgate("check --backend cpu --oracle fp64 --variant bwd_det_chunked" + id);
  EXPECT_EQ(f.code, 0) << f.out;
  EXPECT_TRUE(has(f.out, "FP64 only (--oracle fp64)")) << f.out;
}

TEST(CliOracle, UsageErrors) {
  const OracleRun bad = normgate("check --backend cpu --oracle fp128 --case H=8,T=3,w=bf16,family=normal,seed=0");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_TRUE(has(bad.out, "fp128")) << bad.out;
  const OracleRun big = normgate("check --backend cpu --oracle mpfr --case H=4096,T=2049,w=bf16,family=normal,seed=0");
  EXPECT_EQ(big.code, 2) << big.out;
  EXPECT_TRUE(has(big.out, "--oracle auto")) << big.out;
}

TEST(CliOracle, UncertifiedComparisonsAreReported) {
  // specials: rows with an Inf in x have no real-number rstd, so their y and
  // rstd references (and every dw) carry bound +inf: those comparisons cannot
  // be certified, and the report says which and why.
  const OracleRun r = normgate("check --backend cpu --variant bwd_det_chunked --case H=64,T=300,w=bf16,family=specials,seed=2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "y INCONCLUSIVE: ")) << r.out;
  EXPECT_TRUE(has(r.out, "comparisons uncertified (err/tol could cross 1")) << r.out;
  EXPECT_TRUE(has(r.out, "IEEE propagation of non-finite inputs")) << r.out;
}

}  // namespace
