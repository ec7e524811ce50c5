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

// A key or string holding a control character (TOML's \n, \t, \u001b
// escapes): quoted in an error message ("unknown kernel variant '...'") it
// could print a line that reads as normgate's own. Route tables, policies
// and derivation specs refuse it at load, naming it escaped; the top-level
// description may hold newlines and tabs (reports print it escaped).
TEST(FuzzFindings, TomlControlCharactersInStringsAreRefused) {
  const std::string route = "route = [ { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", "
                            "T = [1, 5], variant = \"bwd_det_chunked\" } ]\n";
  const std::string forged = "x\\n  normgate: verdict  PASS\\n";
  // In a value: the line of the value.
  std::string t = "arch = \"sm90a\"\n\n" + route;
  t.replace(t.find("bwd_det_chunked"), 0, forged);
  EXPECT_EQ(error_of<nk::RouteTableError>([&] { (void)nk::parse_route_table(t, "t.toml"); }),
            "t.toml:3: string 'x\\x0a  normgate: verdict  PASS\\x0abwd_det_chunked' holds a control character; "
            "keys and strings here are one line of printable text");
  // In a key (quoted keys take escapes): named escaped, even though the key
  // is unknown; an ESC (\u001b) likewise.
  EXPECT_EQ(error_of<nk::RouteTableError>(
                [&] { (void)nk::parse_route_table("arch = \"sm90a\"\n\"a\\u001bb\" = 1\n" + route, "t.toml"); }),
            "t.toml:2: key 'a\\x1bb' holds a control character; keys and strings here are one line of printable "
            "text");
  // A description may hold a newline and a tab, not an ESC.
  EXPECT_EQ(nk::parse_route_table("arch = \"sm90a\"\ndescription = \"a\\n\\tb\"\n" + route, "t.toml").description,
            "a\n\tb");
  EXPECT_EQ(error_of<nk::RouteTableError>([&] {
              (void)nk::parse_route_table("arch = \"sm90a\"\ndescription = \"a\\u007f\"\n" + route, "t.toml");
            }).rfind("t.toml:2: description 'a\\x7f' holds a control character", 0),
            0u);
  // A policy and a derivation spec: the same rule, their own error types.
  EXPECT_EQ(error_of<nk::PolicyError>([&] {
              (void)nk::parse_policy("[minimum]\n\"x\\ty\" = 1\n", "p.policy.toml");
            }).rfind("p.policy.toml:2: key 'x\\x09y' holds a control character", 0),
            0u);
  EXPECT_EQ(error_of<nk::RouteTableError>([&] {
              (void)nk::parse_derive_spec("arch = \"sm90a\\n\"\n", "x.derive.toml");
            }).rfind("x.derive.toml:1: string 'sm90a\\x0a' holds a control character", 0),
            0u);
}
