// tests/routing/fuzz_findings_test.cpp: inputs the fuzz targets of tests/fuzz/
// (fuzz_route_table, fuzz_policy, fuzz_derive_spec) found, replayed in the
// normal build. The inputs are in tests/fuzz/corpus/.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "normgate/routing/derive.h"
#include "normgate/routing/policy.h"
#include "normgate/routing/routing.h"

namespace nk = normgate::kernels;

namespace {

std::string corpus(const std::string& target, const std::string& name) {
  std::ifstream f(std::string(NORMGATE_SOURCE_DIR) + "/tests/fuzz/corpus/" + target + "/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_TRUE(f.good() || f.eof()) << name;
  return ss.str();
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

// toml++ 3.3 reaches __builtin_unreachable() when it asks whether some
// non-ASCII characters (U+00A1..U+0499, U+2C5E..U+2FFF, U+3001..U+3057,
// U+FB26..U+FEFE) are whitespace (UBSan in fuzz_derive_spec): such text is
// refused before the parser sees it, naming the line and the character.
TEST(FuzzFindings, TomlCharactersTheParserCannotClassifyAreRefused) {
  const std::string spec = corpus("derive_spec", "crash-U+02BF-whitespace-class");
  EXPECT_EQ(error_of<nk::RouteTableError>([&] { (void)nk::parse_derive_spec(spec, "x.derive.toml"); }),
            "x.derive.toml:1: character U+02BF is not accepted (the TOML library cannot parse it safely; inside a "
            "string write it as \\u02BF)");
  const std::string table = corpus("route_table", "crash-U+02BF-after-value.toml");
  EXPECT_EQ(error_of<nk::RouteTableError>([&] { (void)nk::parse_route_table(table, "t.toml"); })
                .rfind("t.toml:1: character U+02BF is not accepted", 0),
            0u);
  const std::string policy = corpus("policy", "crash-U+2C5E-after-header.toml");
  EXPECT_EQ(error_of<nk::PolicyError>([&] { (void)nk::parse_policy(policy, "p.policy.toml"); })
                .rfind("p.policy.toml:1: character U+2C5E is not accepted", 0),
            0u);
  // The line is counted: the character on line 3.
  EXPECT_EQ(error_of<nk::RouteTableError>(
                [&] { (void)nk::parse_route_table("arch = \"sm90a\"\n\n# caf\xc3\xa9\n", "t.toml"); })
                .rfind("t.toml:3: character U+00E9", 0),
            0u);
}

// Characters the parser classifies still pass where TOML allows them: an em
// dash (U+2014) and U+3000 in a comment and a string, U+10000 in a string.
TEST(FuzzFindings, TomlCharactersTheParserClassifiesStillParse) {
  const std::string t = "# routes \xe2\x80\x94 test \xe3\x80\x80\n"
                        "arch = \"sm90a\"\n"
                        "description = \"a \xe2\x80\x94 b \xf0\x90\x80\x80 \\u00e9\"\n"
                        "route = [ { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", "
                        "T = [1, 5], variant = \"bwd_det_chunked\" } ]\n";
  const nk::RouteTable rt = nk::parse_route_table(t, "ok.toml");
  EXPECT_EQ(rt.description, "a \xe2\x80\x94 b \xf0\x90\x80\x80 \xc3\xa9");
  ASSERT_EQ(rt.routes.size(), 1u);
}
