// tests/gate/report_junit_test.cpp: format_gate_junit (gate.h) on a result
// built by hand, so that every kind of window is there: a pass, a failure
// over budget, a window whose cases threw, an INCONCLUSIVE one, a window
// unchanged against the base; counts, elements and XML escaping. The CLI
// test tests/cli/junit_cli_test.py parses the XML of a real gate.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "normgate/gate/gate.h"
#include "normgate/routing/routing.h"

namespace nv = normgate::validators;
namespace nk = normgate::kernels;

namespace {

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

size_t count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
  return n;
}

// The testcase element whose name attribute starts with `name`, through its end tag.
std::string testcase(const std::string& xml, const std::string& name) {
  const size_t at = xml.find("name=\"" + name);
  if (at == std::string::npos) return "";
  const size_t b = xml.rfind("<testcase", at);
  return xml.substr(b, xml.find("</testcase>", at) + 11 - b);
}

nv::GateResult result() {
  const auto table = nk::parse_route_table(
      "arch = \"sm90a\"\n"
      "route = [\n"
      "  { op = \"fwd\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 700], variant = \"fwd_rowwise\" },\n"
      "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 100], variant = \"bwd_det_chunked\" },\n"
      "  { op = \"bwd\", mode = \"det\", H = 64, w = \"bf16\", form = \"plain\", T = [101, 700], variant = \"bwd_det_chunked\" },\n"
      "  { op = \"bwd\", mode = \"nondet\", H = 64, w = \"bf16\", form = \"plain\", T = [1, 700], variant = \"bwd_nondet_atomic\" },\n"
      "]\n",
      "r&d/<t>.toml");
  nv::GateResult r;
  r.table_path = table.path;
  r.backend = "cpu-model";
  r.seeds = "3x1";
  r.date = "2027-01-02T03:04:05Z";
  r.base_path = "old\"table.toml";
  r.skipped = {"old.toml:3 bwd det H=128 -> bwd_det_chunked"};
  for (const auto& route : table.routes) {
    nv::WindowResult w;
    w.route = route;
    w.impl = route.variant->name;
    w.fwd = "fwd_rowwise";
    w.cases = 10;
    w.pass = true;
    w.verdict = nv::Verdict::pass;
    w.worst = 0.5;
    w.worst_output = "dw";
    w.worst_case = "H=64,T=5,w=bf16,form=plain,family=normal,seed=0";
    r.windows.push_back(w);
  }
  r.windows[0].cases = 20;  // time is shared out by case counts: 20 of 50
  auto& fail = r.windows[1];
  fail.pass = false;
  fail.verdict = nv::Verdict::fail;
  fail.worst = 36.08;
  fail.worst_case = "H=64,T=100,w=bf16,form=plain,family=cancel,seed=0";
  fail.out[3].max_ratio = 36.08;
  fail.out[3].cases_over = 3;
  fail.out[3].worst_case = fail.worst_case;
  auto& err = r.windows[2];
  err.pass = false;
  err.verdict = nv::Verdict::fail;
  err.errors = 2;
  err.error_samples = {"H=64,T=101,w=bf16,form=plain,family=llm,seed=0: out of memory <& \x01 >"};
  auto& inc = r.windows[3];
  inc.pass = false;
  inc.verdict = nv::Verdict::inconclusive;
  return r;
}

}  // namespace

TEST(GateJunit, CountsElementsAndEscaping) {
  const std::string x = nv::format_gate_junit(result(), 5.0);
  EXPECT_TRUE(x.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites ", 0) == 0) << x;
  // 4 windows and 1 skipped: 1 failure (over budget), 2 errors (threw; inconclusive).
  EXPECT_EQ(count(x, "tests=\"5\" failures=\"1\" errors=\"2\" skipped=\"1\" time=\"5.000\""), 2u) << x;
  EXPECT_EQ(count(x, "<testsuite "), 1u);
  EXPECT_EQ(count(x, "<testcase "), 5u);
  EXPECT_EQ(count(x, "<failure "), 1u);
  EXPECT_EQ(count(x, "<error "), 2u);
  EXPECT_EQ(count(x, "<skipped "), 1u);
  // The table path, escaped, names the suite; the date is its timestamp.
  EXPECT_TRUE(has(x, "<testsuite name=\"r&amp;d/&lt;t&gt;.toml\" ")) << x;
  EXPECT_TRUE(has(x, "timestamp=\"2027-01-02T03:04:05Z\"")) << x;
  EXPECT_TRUE(has(x, "<property name=\"base\" value=\"old&quot;table.toml\"/>")) << x;

  const std::string fwd = testcase(x, "fwd H=64");
  EXPECT_TRUE(has(fwd, "classname=\"normgate.fwd\"")) << fwd;
  EXPECT_TRUE(has(fwd, "file=\"r&amp;d/&lt;t&gt;.toml:3\"")) << fwd;
  EXPECT_TRUE(has(fwd, "time=\"2.000\"")) << fwd;  // 5 s x 20 of 50 cases
  EXPECT_FALSE(has(fwd, "<failure") || has(fwd, "<error")) << fwd;

  const std::string f = testcase(x, "bwd det H=64 w=bf16 form=plain T=1..100");
  EXPECT_TRUE(has(f, "classname=\"normgate.bwd.det\"")) << f;
  EXPECT_TRUE(has(f, "-&gt; bwd_det_chunked\"")) << f;  // name: the window and its variant
  EXPECT_TRUE(has(f, "<failure type=\"over budget\" message=\"dw err/tol 36.08 &gt; 1 in case "
                     "H=64,T=100,w=bf16,form=plain,family=cancel,seed=0\">")) << f;
  EXPECT_TRUE(has(f, "dw: max err/tol 36.08, cases over budget 3")) << f;
  EXPECT_TRUE(has(f, "repro: normgate repro 'H=64,T=100,w=bf16,form=plain,family=cancel,seed=0' --variant "
                     "bwd_det_chunked")) << f;

  const std::string e = testcase(x, "bwd det H=64 w=bf16 form=plain T=101..700");
  // The control character cannot be in XML 1.0: the text \x01.
  EXPECT_TRUE(has(e, "<error type=\"case error\" message=\"2 of 10 cases threw: H=64,T=101,w=bf16,form=plain,"
                     "family=llm,seed=0: out of memory &lt;&amp; \\x01 &gt;\">")) << e;
  EXPECT_FALSE(has(e, "<failure")) << e;
  EXPECT_FALSE(has(x, "\x01"));

  const std::string i = testcase(x, "bwd nondet");
  EXPECT_TRUE(has(i, "classname=\"normgate.bwd.nondet\"")) << i;
  EXPECT_TRUE(has(i, "<error type=\"inconclusive\" message=\"INCONCLUSIVE: ")) << i;

  const std::string s = testcase(x, "old.toml:3");
  EXPECT_TRUE(has(s, "classname=\"normgate.unchanged\"")) << s;
  EXPECT_TRUE(has(s, "<skipped message=\"unchanged against the base table old&quot;table.toml\"/>")) << s;
}

// No windows at all (every window unchanged against the base): a valid suite
// with zero counts and no division by zero in the times.
TEST(GateJunit, EmptyResult) {
  nv::GateResult r;
  r.table_path = "t.toml";
  const std::string x = nv::format_gate_junit(r, NAN);
  EXPECT_EQ(count(x, "tests=\"0\" failures=\"0\" errors=\"0\" skipped=\"0\" time=\"0.000\""), 2u) << x;
  EXPECT_EQ(count(x, "<testcase"), 0u);
  EXPECT_TRUE(has(x, "</testsuite>\n</testsuites>\n")) << x;
}

// A table path in another encoding (a Latin-1 byte) keeps the XML UTF-8: the
// stray byte becomes U+FFFD, well-formed sequences (é, a 4-byte emoji) stay,
// and a truncated or overlong sequence is replaced too.
TEST(GateJunit, BytesThatAreNotUtf8BecomeTheReplacementCharacter) {
  nv::GateResult r;
  r.table_path = "caf\xe9/r\xc3\xa9sum\xc3\xa9-\xf0\x9f\x98\x80-\xc0\xaf-\xe2\x82.toml";
  r.backend = "cpu-model";
  const std::string x = nv::format_gate_junit(r, NAN);
  EXPECT_TRUE(has(x, "name=\"caf\xef\xbf\xbd/r\xc3\xa9sum\xc3\xa9-\xf0\x9f\x98\x80-\xef\xbf\xbd\xef\xbf\xbd-\xef\xbf\xbd"
                     "\xef\xbf\xbd.toml\"")) << x;
  EXPECT_FALSE(has(x, "\xe9/")) << x;
  // U+FFFE and U+FFFF are well-formed UTF-8 but no XML 1.0 characters (a
  // parser refuses the document); U+FFFD and U+FFFC stay as they are.
  r.table_path = "a\xef\xbf\xbe-\xef\xbf\xbf-\xef\xbf\xbd-\xef\xbf\xbc.toml";
  const std::string y = nv::format_gate_junit(r, NAN);
  EXPECT_TRUE(has(y, "name=\"a\xef\xbf\xbd-\xef\xbf\xbd-\xef\xbf\xbd-\xef\xbf\xbc.toml\"")) << y;
  EXPECT_FALSE(has(y, "\xef\xbf\xbe") || has(y, "\xef\xbf\xbf")) << y;
  // A right-to-left override, U+2028 and a C1 control (a plugin's message
  // may hold them) are \uXXXX, as the Markdown report and stderr write them:
  // a CI page would show the text reordered or split (adversarial pass).
  r.table_path = "A\xe2\x80\xae" "B\xe2\x80\xa8" "C\xc2\x85" "D.toml";
  const std::string z = nv::format_gate_junit(r, NAN);
  EXPECT_TRUE(has(z, "name=\"A\\u202eB\\u2028C\\u0085D.toml\"")) << z;
  EXPECT_FALSE(has(z, "\xe2\x80\xae") || has(z, "\xe2\x80\xa8") || has(z, "\xc2\x85")) << z;
}
