// Tests of seed-set spellings.
#include "normgate/seeds/seed_set.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace normgate::seeds {
namespace {

const std::vector<Family> kGate = {Family::normal, Family::llm, Family::cancel};

void expect_error(const std::string& s, const std::string& needle) {
  try {
    (void)parse_seed_set(s);
    ADD_FAILURE() << "no error for '" << s << "'";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'" + s + "'"), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << "'" << needle << "' not in: " << m;
  }
}

TEST(SeedSet, Spellings) {
  const SeedSet a = parse_seed_set("3x120");
  EXPECT_EQ(a.families, kGate);
  EXPECT_EQ(a.first, 0u);
  EXPECT_EQ(a.last, 119u);
  EXPECT_EQ(a.size(), 360u);
  EXPECT_EQ(to_string(a), "3x120");

  const SeedSet b = parse_seed_set("seeds=120..239");
  EXPECT_EQ(b.families, kGate);
  EXPECT_EQ(b.first, 120u);
  EXPECT_EQ(b.last, 239u);
  EXPECT_EQ(b.size(), 360u);
  EXPECT_EQ(to_string(b), "seeds=120..239");

  const SeedSet c = parse_seed_set("normal:0..7");
  EXPECT_EQ(c.families, std::vector<Family>{Family::normal});
  EXPECT_EQ(c.first, 0u);
  EXPECT_EQ(c.last, 7u);
  EXPECT_EQ(c.size(), 8u);
  EXPECT_EQ(to_string(c), "normal:0..7");

  EXPECT_EQ(parse_seed_set("specials:5..5").size(), 1u);
  EXPECT_EQ(to_string(parse_seed_set("seeds=0..9")), "3x10");  // canonical form
  EXPECT_EQ(parse_seed_set("seeds=0..9"), parse_seed_set("3x10"));
  EXPECT_EQ(to_string(parse_seed_set("cancel:18446744073709551615..18446744073709551615")),
            "cancel:18446744073709551615..18446744073709551615");
}

TEST(SeedSet, RoundTrips) {
  for (const char* s : {"3x1", "3x120", "seeds=1..1", "seeds=120..239", "llm:3..9", "tiny:0..0", "3x65536", "5x1",
                        "5x120", "sweep=120..239", "cancel,kappa=10000:0..3", "epsnear,eps=1e-05:2..2",
                        "cancel,eps=1e-05,kappa=100:0..0"})
    EXPECT_EQ(to_string(parse_seed_set(s)), s);
}

TEST(SeedSet, Errors) {
  expect_error("", "empty");
  expect_error("3x0", "count must be >= 1");
  expect_error("2x5", "only the 3 seed families or the 5 gate families");
  expect_error("normal,kappa=1e4:0..3", "kappa is only valid with family=cancel");
  expect_error("cancel,kappa=10:0..3", "out of range (1e2..1e12)");
  expect_error("epsnear,eps=-1:0..3", "must be finite and > 0");
  // A one-family point's eps follows the case ids' rule: a normal float32.
  expect_error("epsnear,eps=1e-50:0..3", "eps=1e-50 is below the smallest normal float32");
  expect_error("epsnear,eps=1e-45:0..3", "a subnormal 1.401298464324817e-45 there");
  EXPECT_EQ(parse_seed_set("epsnear,eps=1.1754943508222875e-38:0..3").eps, kMinEps);
  expect_error("epsnear,eps=x:0..3", "eps 'x' is not a number");
  expect_error("cancel,sigma=2:0..3", "is not eps=<value> or kappa=<value>");
  expect_error("cancel,kappa=1e4,kappa=1e5:0..3", "given twice");
  expect_error("3x", "seed count '' is empty");
  expect_error("3x-4", "not a non-negative integer");
  expect_error("3x1.5", "not a non-negative integer");
  expect_error("seeds=9..3", "first seed 9 > last seed 3");
  expect_error("seeds=9", "has no '..'");
  expect_error("seeds=..3", "first seed '' is empty");
  expect_error("seeds=1..", "last seed '' is empty");
  expect_error("seeds=1..99999999999999999999", "out of range");
  expect_error("gauss:0..7", "bad family 'gauss'");
  expect_error("normal:7..0", "first seed 7 > last seed 0");
  expect_error("normal", "unrecognized");
  expect_error("seeds=0..18446744073709551615", "2^64 seeds, more than 65536");
  expect_error("3x18446744073709551615", "18446744073709551615 seeds, more than 65536");
  // kMaxSeedCount: --plan holds every case, so 3x1000000 ran out of memory
  // (std::bad_alloc, nothing named) before the bound.
  expect_error("3x1000000", "1000000 seeds, more than 65536");
  expect_error("5x65537", "65537 seeds");
  expect_error("cancel:10..65546", "65537 seeds");
  EXPECT_EQ(parse_seed_set("3x65536").last, 65535u);
  EXPECT_EQ(parse_seed_set("normal:18446744073709486080..18446744073709551615").first, 18446744073709486080ull);
}

// The default gate set: the seed's three families as before, epsnear at each
// eps of the sweep, cancel at each lower kappa; "3x" keeps its meaning.
TEST(SeedSet, DefaultSetSweepsEpsAndKappa) {
  const SeedSet g = parse_seed_set("5x2");
  EXPECT_TRUE(g.sweep);
  EXPECT_EQ(g.families, (std::vector<Family>{Family::normal, Family::llm, Family::cancel, Family::epsnear}));
  const std::vector<FamilyPoint> want = {{Family::normal},
                                         {Family::llm},
                                         {Family::cancel},
                                         {Family::epsnear, 1e-6},
                                         {Family::epsnear, 1e-5},
                                         {Family::epsnear, 0x1p-23},
                                         {Family::cancel, kDefaultEps, 1e2},
                                         {Family::cancel, kDefaultEps, 1e4},
                                         {Family::cancel, kDefaultEps, 1e6}};
  EXPECT_EQ(g.points(), want);
  EXPECT_EQ(g.size(), 18u);
  EXPECT_EQ(to_string(parse_seed_set("sweep=0..1")), "5x2");
  const SeedSet three = parse_seed_set("3x2");
  EXPECT_FALSE(three.sweep);
  EXPECT_EQ(three.points().size(), 3u);
  EXPECT_NE(three, g);
  EXPECT_EQ(to_string(FamilyPoint{Family::cancel, kDefaultEps, 1e4}), "cancel,kappa=10000");
  EXPECT_EQ(to_string(FamilyPoint{Family::epsnear, 1e-5}), "epsnear,eps=1e-05");
  EXPECT_EQ(to_string(FamilyPoint{Family::llm}), "llm");
  // One family at a point; point_seed_set keeps a case's eps and kappa.
  const SeedSet k = parse_seed_set("cancel,kappa=1e4:3..4");
  EXPECT_EQ(k.points(), (std::vector<FamilyPoint>{{Family::cancel, kDefaultEps, 1e4}}));
  CaseId c;
  c.H = 64;
  c.family = Family::epsnear;
  c.eps = 1e-5;
  c.seed = 9;
  EXPECT_EQ(to_string(point_seed_set(c, 10, 12)), "epsnear,eps=1e-05:10..12");
}

TEST(SeedSet, UnprintableSets) {
  SeedSet s;
  s.families = {Family::normal, Family::llm};
  EXPECT_THROW((void)to_string(s), std::invalid_argument);
  s.families = {Family::normal};
  s.first = 3;
  s.last = 2;
  EXPECT_THROW((void)to_string(s), std::invalid_argument);
}

}  // namespace
}  // namespace normgate::seeds

// append_cases: families in the set's order, seeds ascending, every case
// validated (a head form needs H = 256); seeds up to 2^64-1 end the loop.
TEST(SeedSet, AppendCasesInOrderAndValidated) {
  using namespace normgate;
  std::vector<seeds::CaseId> out;
  seeds::append_cases(seeds::parse_seed_set("seeds=5..6"), 64, 9, WDtype::fp32, Form::plain, out);
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(seeds::to_string(out[0]), "H=64,T=9,w=fp32,form=plain,family=normal,seed=5");
  EXPECT_EQ(seeds::to_string(out[1]), "H=64,T=9,w=fp32,form=plain,family=normal,seed=6");
  EXPECT_EQ(seeds::to_string(out[5]), "H=64,T=9,w=fp32,form=plain,family=cancel,seed=6");
  seeds::append_cases(seeds::parse_seed_set("llm:18446744073709551615..18446744073709551615"), 256, 3, WDtype::bf16,
                      Form::heads4, out);
  ASSERT_EQ(out.size(), 7u);
  EXPECT_EQ(out[6].seed, 18446744073709551615ull);
  EXPECT_THROW(seeds::append_cases(seeds::parse_seed_set("3x1"), 64, 3, WDtype::bf16, Form::heads24, out),
               std::invalid_argument);
  // The default set: its points in order, each case with the point's eps and kappa.
  out.clear();
  seeds::append_cases(seeds::parse_seed_set("5x1"), 64, 9, WDtype::bf16, Form::plain, out);
  ASSERT_EQ(out.size(), 9u);
  EXPECT_EQ(seeds::to_string(out[2]), "H=64,T=9,w=bf16,form=plain,family=cancel,seed=0");
  EXPECT_EQ(seeds::to_string(out[3]), "H=64,T=9,w=bf16,form=plain,family=epsnear,seed=0");
  EXPECT_EQ(seeds::to_string(out[4]), "H=64,T=9,w=bf16,form=plain,family=epsnear,seed=0,eps=1e-05");
  EXPECT_EQ(seeds::to_string(out[5]), "H=64,T=9,w=bf16,form=plain,family=epsnear,seed=0,eps=1.1920928955078125e-07");
  EXPECT_EQ(seeds::to_string(out[8]), "H=64,T=9,w=bf16,form=plain,family=cancel,seed=0,kappa=1e+06");
}
