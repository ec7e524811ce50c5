// tests/core/printable_test.cpp: core::escape_controls, what keeps a quoted
// value on its line.
#include <gtest/gtest.h>

#include <string>

#include "normgate/core/printable.h"

using normgate::core::escape_controls;

TEST(Printable, C0ControlsAndDelAsHex) {
  EXPECT_EQ(escape_controls(std::string("a\nb\tc\x1b[31m\x7f\0d", 13)), "a\\x0ab\\x09c\\x1b[31m\\x7f\\x00d");
  // Newline and tab kept on request; the rest still escaped.
  EXPECT_EQ(escape_controls("a\nb\tc\rd", true), "a\nb\tc\\x0dd");
}

// U+0085 (NEL) and U+2028 split lines for Python's str.splitlines and for
// JavaScript; U+009B is CSI on terminals that take 8-bit controls; U+202E
// reverses the text after it. Each is written as \uXXXX.
TEST(Printable, UnicodeLineBreaksC1AndBidiControlsEscaped) {
  EXPECT_EQ(escape_controls("a\xc2\x85  normgate: verdict  PASS"), "a\\u0085  normgate: verdict  PASS");
  EXPECT_EQ(escape_controls("x\xc2\x9b" "31m"), "x\\u009b31m");
  EXPECT_EQ(escape_controls("p\xe2\x80\xa8q\xe2\x80\xa9r"), "p\\u2028q\\u2029r");
  EXPECT_EQ(escape_controls("\xe2\x80\xaa\xe2\x80\xae" "abc\xe2\x81\xa6\xe2\x81\xa9"),
            "\\u202a\\u202eabc\\u2066\\u2069");
  // Neighbours are text: U+00A0 (C2 A0), U+00E9, U+2027, U+202F, U+2065
  // (unassigned), U+206A, an em dash, a 4-byte character.
  const std::string keep = "\xc2\xa0\xc3\xa9\xe2\x80\xa7\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa\xe2\x80\x94\xf0\x9f\x98\x80";
  EXPECT_EQ(escape_controls(keep), keep);
  // Not UTF-8 (a lone C2, a truncated E2 80, an overlong E0 81 85): kept as
  // bytes, the control among them still escaped.
  EXPECT_EQ(escape_controls("\xc2"), "\xc2");
  EXPECT_EQ(escape_controls("\xe2\x80"), "\xe2\x80");
  EXPECT_EQ(escape_controls("\xc2\n"), "\xc2\\x0a");
  EXPECT_EQ(escape_controls("\xc1\x85"), "\xc1\x85");
}
