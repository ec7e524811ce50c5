// Tests of case ids: canonical printing, round trips, and every error class.
#include "normgate/seeds/case_id.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace normgate::seeds {
namespace {

// Expects parse_case(s) to throw std::invalid_argument whose message contains
// every string in `needles`.
void expect_error(const std::string& s, std::initializer_list<std::string> needles) {
  try {
    (void)parse_case(s);
    ADD_FAILURE() << "no error for '" << s << "'";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("case id: ", 0), 0u) << m;
    for (const std::string& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "'" << n << "' not in: " << m;
  }
}

TEST(CaseId, ParsesExampleAndPrintsCanonically) {
  const CaseId c = parse_case("H=4096,T=65537,w=bf16,form=plain,family=cancel,seed=17");
  EXPECT_EQ(c.H, 4096);
  EXPECT_EQ(c.T, 65537);
  EXPECT_EQ(c.w, WDtype::bf16);
  EXPECT_EQ(c.form, Form::plain);
  EXPECT_EQ(c.family, Family::cancel);
  EXPECT_EQ(c.seed, 17u);
  EXPECT_EQ(c.eps, kDefaultEps);
  EXPECT_EQ(c.kappa, kDefaultKappa);
  EXPECT_EQ(to_string(c), "H=4096,T=65537,w=bf16,form=plain,family=cancel,seed=17");
  // Any key order; defaults filled in and omitted on print (form is always printed).
  const CaseId d = parse_case("seed=3,family=llm,w=fp32,T=7,H=256,eps=1e-5");
  EXPECT_EQ(to_string(d), "H=256,T=7,w=fp32,form=plain,family=llm,seed=3,eps=1e-05");
  EXPECT_EQ(to_string(parse_case("H=1,T=0,w=bf16,family=normal,seed=0,eps=0.000001")),
            "H=1,T=0,w=bf16,form=plain,family=normal,seed=0");  // eps == default
  EXPECT_EQ(to_string(parse_case("H=1,T=0,w=bf16,family=cancel,seed=0,kappa=1000000000000")),
            "H=1,T=0,w=bf16,form=plain,family=cancel,seed=0,kappa=1e+12");  // shortest spelling
  EXPECT_EQ(to_string(parse_case("H=0016,T=00,w=bf16,family=normal,seed=007")),
            "H=16,T=0,w=bf16,form=plain,family=normal,seed=7");  // leading zeros accepted, printed canonically
}

TEST(CaseId, RoundTrips) {
  const char* ids[] = {
      "H=4096,T=65537,w=bf16,form=plain,family=cancel,seed=17",
      "H=256,T=4096,w=fp32,form=heads24,family=llm,seed=18446744073709551615",
      "H=256,T=1,w=bf16,form=heads4,family=specials,seed=0,eps=0.1",
      "H=16384,T=2147483648,w=fp32,form=res,family=tiny,seed=5,eps=1.0000000000000002e-06",
      "H=7,T=3,w=bf16,form=plain,family=cancel,seed=9,eps=3e-38,kappa=123456.789",
      "H=64,T=33,w=bf16,form=plain,family=cancel,seed=1,kappa=1e+12",
  };
  for (const char* s : ids) {
    const CaseId c = parse_case(s);
    EXPECT_EQ(to_string(c), s);
    EXPECT_EQ(parse_case(to_string(c)), c);
  }
  // Doubles round-trip exactly through the shortest spelling.
  CaseId c = parse_case("H=64,T=1,w=bf16,family=cancel,seed=1");
  for (double v : {1e-6 * 1.1, 0.1 + 0.2, 1.1754943508222875e-38, 1.2345678901234567e-37, 3.4028234663852886e38}) {
    c.eps = v;
    EXPECT_EQ(parse_case(to_string(c)).eps, v);
  }
  c.eps = kDefaultEps;
  for (double k : {100.0, 1e12, 3.3333333333333335e7}) {
    c.kappa = k;
    EXPECT_EQ(parse_case(to_string(c)).kappa, k);
  }
}

TEST(CaseId, HeadsAndRows) {
  EXPECT_EQ(parse_case("H=256,T=10,w=bf16,form=heads24,family=normal,seed=0").rows(), 240);
  EXPECT_EQ(parse_case("H=256,T=10,w=bf16,form=heads4,family=normal,seed=0").rows(), 40);
  EXPECT_EQ(parse_case("H=256,T=10,w=bf16,form=res,family=normal,seed=0").rows(), 10);
}

TEST(CaseId, StructuralErrors) {
  expect_error("", {"empty"});
  expect_error("Hx=4096,T=1,w=bf16,family=normal,seed=0",
               {"unknown key 'Hx'", "known: H,T,w,form,family,seed,eps,kappa", "'Hx=4096,T=1,w=bf16,family=normal,seed=0'"});
  expect_error("H=4096,H=4096,T=1,w=bf16,family=normal,seed=0", {"duplicate key 'H'"});
  // eps above the largest float32 is infinite in the kernels (float32(eps)):
  // refused by the parser, not later as "eps is not finite" by a model.
  expect_error("H=64,T=3,w=bf16,family=normal,eps=1e308,seed=0", {"eps=1e+308", "largest float32"});
  expect_error("H=64,T=3,w=bf16,family=normal,eps=3.5e38,seed=0", {"largest float32"});
  EXPECT_EQ(parse_case("H=64,T=3,w=bf16,family=normal,eps=3.4e38,seed=0").eps, 3.4e38);
  expect_error("H=4096,T=1,w=bf16,family=normal", {"missing required key(s) 'seed'"});
  expect_error("H=4096,w=bf16,family=normal", {"'T'", "'seed'"});
  expect_error("H=4096,T=1,w=bf16,family=normal,seed=0,", {"empty key=value pair"});
  expect_error("H=4096,,T=1,w=bf16,family=normal,seed=0", {"empty key=value pair"});
  expect_error("H=4096,T=1,w=bf16,family=normal,seed", {"'seed' has no '='"});
  expect_error("H=,T=1,w=bf16,family=normal,seed=0", {"empty value for key 'H'"});
  // Spaces around pairs are trimmed (ids pasted as "H=4096, T=65537" parse), not inside keys.
  EXPECT_EQ(parse_case(" H=1, T=1 ,w=bf16,family=normal,seed=0"), parse_case("H=1,T=1,w=bf16,family=normal,seed=0"));
  expect_error("H=1,T=1,w=bf 16,family=normal,seed=0", {"bf 16"});
}

TEST(CaseId, NumberErrors) {
  expect_error("H=4096.5,T=1,w=bf16,family=normal,seed=0", {"H='4096.5'", "not a non-negative integer"});
  expect_error("H=4096,T=-1,w=bf16,family=normal,seed=0", {"T='-1'", "not a non-negative integer"});
  expect_error("H=4096,T=+1,w=bf16,family=normal,seed=0", {"T='+1'"});
  expect_error("H=4096,T=1e3,w=bf16,family=normal,seed=0", {"T='1e3'"});
  expect_error("H=4096,T=1,w=bf16,family=normal,seed=18446744073709551616", {"seed='18446744073709551616'", "out of range"});
  expect_error("H=4096,T=1,w=bf16,family=normal,seed=99999999999999999999999", {"seed=", "out of range"});
  expect_error("H=0,T=1,w=bf16,family=normal,seed=0", {"H='0'", "out of range (1..16384)"});
  // The upper end says the same range (it once said "(0..16384)" after a colon).
  expect_error("H=16385,T=1,w=bf16,family=normal,seed=0", {"H='16385' is out of range (1..16384)"});
  expect_error("H=99999999999999999999999,T=1,w=bf16,family=normal,seed=0", {"out of range (1..16384)"});
  expect_error("H=4x,T=1,w=bf16,family=normal,seed=0", {"H='4x': is not a non-negative integer"});
  expect_error("H=8,T=2147483649,w=bf16,family=normal,seed=0", {"T='2147483649'", "out of range"});
  expect_error("H=8,T=1,w=bf16,family=normal,seed=0,eps=abc", {"eps='abc'", "not a number"});
  expect_error("H=8,T=1,w=bf16,family=normal,seed=0,eps=1e-6x", {"eps='1e-6x'", "not a number"});
  expect_error("H=8,T=1,w=bf16,family=normal,seed=0,eps=inf", {"eps='inf'", "not finite"});
  expect_error("H=8,T=1,w=bf16,family=normal,seed=0,eps=nan", {"eps='nan'", "not finite"});
  expect_error("H=8,T=1,w=bf16,family=normal,seed=0,eps=1e999", {"eps='1e999'", "out of range"});
  expect_error("H=8,T=1,w=bf16,family=normal,seed=0,eps=0", {"eps='0'", "> 0"});
  expect_error("H=8,T=1,w=bf16,family=normal,seed=0,eps=-1e-6", {"eps='-1e-6'", "> 0"});
  expect_error("H=8,T=1,w=bf16,family=cancel,seed=0,kappa=10", {"kappa='10'", "out of range"});
  expect_error("H=8,T=1,w=bf16,family=cancel,seed=0,kappa=1e13", {"kappa='1e13'", "out of range"});
}

// eps must be a normal float32 (the kernels take float32(eps)): below FLT_MIN
// it would be 0 (1e-50: an all-zero row's y NaN) or a subnormal (1e-45, not
// the oracle's problem) in the kernels. Both ends of the range are accepted.
TEST(CaseId, EpsMustBeANormalFloat32) {
  const std::string base = "H=64,T=3,w=bf16,family=epsnear,seed=0";
  expect_error(base + ",eps=1e-50",
               {"eps=1e-50 is below the smallest normal float32 1.1754943508222875e-38", "which is 0 there"});
  expect_error(base + ",eps=1e-45", {"eps=1e-45 is below", "a subnormal 1.401298464324817e-45 there"});
  // Each refusal ends with what to give instead.
  EXPECT_NE(normgate::seeds::eps_problem(std::numeric_limits<double>::infinity())
                .find("must be finite and > 0; give eps in [1.1754943508222875e-38, 3.4028234663852886e+38], e.g. "
                      "1e-06"),
            std::string::npos);
  expect_error(base + ",eps=1e-50", {"which is 0 there; give eps in [1.1754943508222875e-38, "});
  expect_error(base + ",eps=1.1754943508222874e-38", {"eps=1.1754943508222874e-38 is below"});
  // Just outside the range but rounding to FLT_MIN / FLT_MAX in float32 (how
  // 8-digit printouts of them read): refused, and the message says that
  // float32(eps) is the normal bound itself, not a subnormal or inf.
  expect_error(base + ",eps=1.1754943e-38", {"rounds up to it", "give at least 1.1754943508222875e-38"});
  EXPECT_EQ(eps_problem(1.1754943e-38).find("subnormal"), std::string::npos) << eps_problem(1.1754943e-38);
  expect_error(base + ",eps=3.4028235e+38", {"rounds down to it", "give at most 3.4028234663852886e+38"});
  expect_error(base + ",eps=3.4028237e+38", {"which is inf there"});  // past FLT_MAX + half an ulp
  EXPECT_EQ(parse_case(base + ",eps=1.1754943508222875e-38").eps, kMinEps);
  EXPECT_EQ(parse_case(base + ",eps=3.4028234663852886e+38").eps, kMaxEps);
  EXPECT_EQ(parse_case(base).eps, kDefaultEps);
  EXPECT_EQ(kMinEps, static_cast<double>(std::numeric_limits<float>::min()));
  EXPECT_EQ(kMaxEps, static_cast<double>(std::numeric_limits<float>::max()));
  // The same rule for a programmatic case, and as eps_problem says it.
  CaseId c = parse_case(base);
  c.eps = std::nextafter(kMinEps, 0.0);
  EXPECT_THROW(validate_case(c), std::invalid_argument);
  c.eps = kMinEps;
  EXPECT_NO_THROW(validate_case(c));
  EXPECT_EQ(eps_problem(kMinEps), "");
  EXPECT_EQ(eps_problem(kDefaultEps), "");
  EXPECT_NE(eps_problem(1e-45).find("eps=1e-45 is below"), std::string::npos) << eps_problem(1e-45);
  EXPECT_NE(eps_problem(0.0).find("eps=0 must be finite and > 0"), std::string::npos) << eps_problem(0.0);
  EXPECT_NE(eps_problem(3.5e38).find("largest float32"), std::string::npos) << eps_problem(3.5e38);
}

TEST(CaseId, SemanticErrors) {
  expect_error("H=8,T=1,w=bf16,family=normal,seed=0,kappa=1e8", {"kappa is only valid with family=cancel", "family=normal"});
  expect_error("H=4096,T=1,w=bf16,form=heads24,family=normal,seed=0", {"form=heads24 needs H=256", "H=4096"});
  expect_error("H=128,T=1,w=bf16,form=heads4,family=normal,seed=0", {"form=heads4 needs H=256"});
  expect_error("H=8,T=1,w=fp16,family=normal,seed=0", {"w:", "'fp16'", "bf16 or fp32"});
  expect_error("H=8,T=1,w=bf16,form=rows,family=normal,seed=0", {"form:", "'rows'"});
  expect_error("H=8,T=1,w=bf16,family=gauss,seed=0", {"family:", "'gauss'", "normal, llm, cancel"});
}

TEST(CaseId, ValidateProgrammaticCases) {
  CaseId c;
  c.H = 64;
  c.T = 1;
  EXPECT_NO_THROW(validate_case(c));
  CaseId bad = c;
  bad.H = 0;
  EXPECT_THROW(validate_case(bad), std::invalid_argument);
  bad = c;
  bad.kappa = 5.0;  // kappa on a non-cancel family
  EXPECT_THROW(validate_case(bad), std::invalid_argument);
  bad.family = Family::cancel;  // and out of range for cancel
  EXPECT_THROW(validate_case(bad), std::invalid_argument);
  bad = c;
  bad.eps = -1;
  EXPECT_THROW(validate_case(bad), std::invalid_argument);
  bad = c;
  bad.form = Form::heads4;
  EXPECT_THROW(validate_case(bad), std::invalid_argument);
  bad.H = 256;
  EXPECT_NO_THROW(validate_case(bad));
}

TEST(CaseId, FamilyNames) {
  for (Family f : {Family::normal, Family::llm, Family::cancel, Family::zeros, Family::tiny, Family::huge, Family::specials,
                   Family::epsnear})
    EXPECT_EQ(parse_family(to_string(f)), f);
  EXPECT_THROW(parse_family("Normal"), std::invalid_argument);
  EXPECT_TRUE(is_gate_family(Family::normal));
  EXPECT_TRUE(is_gate_family(Family::llm));
  EXPECT_TRUE(is_gate_family(Family::cancel));
  EXPECT_TRUE(is_gate_family(Family::epsnear));
  EXPECT_FALSE(is_gate_family(Family::zeros));
  EXPECT_FALSE(is_gate_family(Family::specials));
}

}  // namespace
}  // namespace normgate::seeds
