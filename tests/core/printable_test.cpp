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

TEST(Printable, InvalidUtf8BytesEscapedValidTextKept) {
  using normgate::core::escape_invalid_utf8;
  // Well-formed text of every length is kept, backslashes and controls too
  // (escape_controls handles those): ASCII, U+00E9, U+20AC, U+1F600, the
  // edges of table 3-7 (U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFF,
  // U+10000, U+10FFFF).
  const std::string ok = "a\\b\n\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf"
                         "\xee\x80\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf";
  EXPECT_EQ(escape_invalid_utf8(ok), ok);
  EXPECT_EQ(escape_invalid_utf8(""), "");
  // Lone continuation, lone lead bytes, C0/C1/F5..FF never valid.
  EXPECT_EQ(escape_invalid_utf8("x\x80y"), "x\\x80y");
  EXPECT_EQ(escape_invalid_utf8("\xc0\xaf"), "\\xc0\\xaf");   // overlong '/'
  EXPECT_EQ(escape_invalid_utf8("\xc1\xbf"), "\\xc1\\xbf");
  EXPECT_EQ(escape_invalid_utf8("\xf5\x80\x80\x80"), "\\xf5\\x80\\x80\\x80");
  EXPECT_EQ(escape_invalid_utf8("\xff"), "\\xff");
  // Overlong 3- and 4-byte forms, surrogates, above U+10FFFF.
  EXPECT_EQ(escape_invalid_utf8("\xe0\x9f\xbf"), "\\xe0\\x9f\\xbf");
  EXPECT_EQ(escape_invalid_utf8("\xf0\x8f\xbf\xbf"), "\\xf0\\x8f\\xbf\\xbf");
  EXPECT_EQ(escape_invalid_utf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // U+D800
  EXPECT_EQ(escape_invalid_utf8("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  // Truncated at the end and interrupted: the lead byte escaped, what
  // follows read on its own.
  EXPECT_EQ(escape_invalid_utf8("ab\xe2\x82"), "ab\\xe2\\x82");
  EXPECT_EQ(escape_invalid_utf8("\xf0\x9f\x98"), "\\xf0\\x9f\\x98");
  EXPECT_EQ(escape_invalid_utf8("\xe2" "A\xc3\xa9"), "\\xe2A\xc3\xa9");
  EXPECT_EQ(escape_invalid_utf8("\xc3\xc3\xa9"), "\\xc3\xc3\xa9");
}
