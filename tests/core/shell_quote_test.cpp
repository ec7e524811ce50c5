// tests/core/shell_quote_test.cpp: core::shell_quote's words read back by
// bash as the text they quote (the replay command repro prints is pasted).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "normgate/core/shell_quote.h"

namespace {

// What `bash -c "printf %s WORD"` prints for the quoted word.
std::string bash_reads(const std::string& word) {
  const std::string cmd = "bash -c " + normgate::core::shell_quote("printf %s " + word);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return "<popen failed>";
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

TEST(ShellQuote, PlainWordsInSingleQuotesControlBytesInAnsiC) {
  using normgate::core::shell_quote;
  EXPECT_EQ(shell_quote("a b.h5"), "'a b.h5'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("new\nline.h5"), "$'new\\nline.h5'");
  EXPECT_EQ(shell_quote("t\tab\x1b[31m\\'"), "$'t\\tab\\x1b[31m\\\\\\''");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(ShellQuote, BashReadsBackTheText) {
  for (const std::string text : {std::string("plain"), std::string("two words"), std::string("it's $HOME `x` \"q\""),
                                 std::string("new\nline.h5"), std::string("tab\there"), std::string("esc\x1b[31m"),
                                 std::string("back\\slash'quote\n"), std::string("\x7f\x01z9"), std::string("caf\xc3\xa9")}) {
    EXPECT_EQ(bash_reads(normgate::core::shell_quote(text)), text) << normgate::core::shell_quote(text);
  }
}

}  // namespace

// shell_word keeps a plain path as it is and quotes anything a shell would
// split, expand or show raw.
TEST(ShellWord, PlainStaysQuotedWhenNeeded) {
  using normgate::core::shell_word;
  EXPECT_EQ(shell_word("routes/sm90a.toml"), "routes/sm90a.toml");
  EXPECT_EQ(shell_word("3x16"), "3x16");
  EXPECT_EQ(shell_word("op=bwd,H=64"), "op=bwd,H=64");
  EXPECT_EQ(shell_word("a b"), "'a b'");
  EXPECT_EQ(shell_word(""), "''");
  EXPECT_EQ(shell_word("$HOME"), "'$HOME'");
  EXPECT_EQ(shell_word("x*"), "'x*'");
  EXPECT_EQ(shell_word("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_word("a\x1b"), "$'a\\x1b'");
}
