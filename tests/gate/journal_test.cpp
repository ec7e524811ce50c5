// tests/gate/journal_test.cpp: the journal's records can be trusted
// (journal.h): every line carries a SHA-256 digest, so a flipped bit anywhere
// is an error naming the file and line, never a changed record; records are
// checked field by field and against the campaign's plan (run_gate); two
// records of one (case, implementation) that disagree stop the resume; a
// format-1 journal (no digests) is refused. Each test uses only the journal's
// entry points (open, append, to_json, case_record_from_json), so it runs on
// any build of them.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normgate/gate/gate.h"
#include "normgate/gate/journal.h"
#include "gate/gate_test_util.h"

namespace {

using namespace normgate;
using namespace normgate::validators;
using test::contains;
using test::error_of;
using test::put;
using test::slurp;

std::string temp_dir(const std::string& name) { return test::fresh_dir("test_journal", name); }

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const nlohmann::json kCampaign = {{"seeds", "3x1"}, {"table_sha256", "abc"}};

// A plausible record of one implementation on a case with H = 64, T = 5
// (y, dx: 320 elements; rstd: 5; dw: 64).
CaseRecord record(const std::string& case_id, const std::string& impl, double dw_ratio) {
  CaseRecord r;
  r.case_id = case_id;
  r.impls = {impl};
  r.seconds = 0.25;
  ImplRecord x;
  x.impl = impl;
  x.ran_on = "cpu model (no GPU used)";
  x.out[0] = {0.0625, 17, 0, 0.0625, true};
  x.out[1] = {0.002316, 2, 0, 0.002, true};
  x.out[2] = {0.3861, 100, 0, 0.39, true};
  const bool over = dw_ratio > 1;
  x.out[3] = {dw_ratio, 5, over ? 3 : 0, 2.4e-7, !over};
  x.dw_vs_fp32_worst = 1.5;
  x.dw_vs_fp32_median = kNaN;
  r.results.push_back(x);
  return r;
}

// Clears the process's journal key when a test that set one ends.
struct KeyReset {
  KeyReset() = default;
  KeyReset(const KeyReset&) = delete;
  KeyReset& operator=(const KeyReset&) = delete;
  ~KeyReset() { set_journal_key(""); }
};

const std::string kCase5 = "H=64,T=5,w=bf16,form=plain,family=cancel,seed=0";
const std::string kCase4 = "H=64,T=4,w=bf16,form=plain,family=cancel,seed=0";

std::vector<std::string> dumps(const std::vector<CaseRecord>& rs) {
  std::vector<std::string> out;
  for (const auto& r : rs) out.push_back(to_json(r).dump());
  return out;
}

// Every bit of every line of a small journal (the header, three records of
// each kind, their newlines), flipped one at a time: the journal is an error
// naming the file and the flipped line, and the file is left as it was. A
// flip that left the records as written would be harmless; none does (every
// byte of a line is under its digest, and a newline flipped into another
// byte leaves a complete line followed by a stray byte). Never a record
// that differs from what was written.
TEST(JournalDigest, EveryBitFlipIsAnErrorNamingTheLine) {
  const std::string dir = temp_dir("flip");
  const std::string path = dir + "/j.jsonl";
  std::vector<CaseRecord> recs = {record(kCase5, "ctl_fp32_seq", 39.0625), record(kCase4, "bwd_det_chunked", 0.5)};
  CaseRecord err;
  err.case_id = "H=64,T=1,w=bf16,form=plain,family=normal,seed=0";
  err.impls = {"bwd_det_chunked"};
  err.error = "CUDA error: out of memory";
  err.seconds = 1.5;
  recs.push_back(err);
  recs[1].results[0].out[3].ratio = kInf;  // "inf" and "nan" strings in a line too
  recs[1].results[0].out[3].over = 64;
  recs[1].results[0].out[3].pass = false;
  {
    Journal j = Journal::open(path, kCampaign);
    for (const auto& r : recs) j.append(r);
  }
  const std::string text = slurp(path);
  const std::vector<std::string> want = dumps(Journal::open(path, kCampaign).resumed());
  ASSERT_EQ(want, dumps(recs));
  // Line number of each byte (its newline belongs to the line).
  std::vector<int> line_of(text.size());
  for (size_t i = 0, line = 1; i < text.size(); ++i) {
    line_of[i] = static_cast<int>(line);
    if (text[i] == '\n') ++line;
  }
  // Flip bytes in place (pwrite; no truncation, which some file systems
  // flush on close), and put each back.
  const int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  auto poke = [&](size_t i, char c) { ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(i)), 1); };
  int harmless = 0, errors = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      const char flipped = static_cast<char>(text[i] ^ (1 << bit));
      poke(i, flipped);
      std::vector<std::string> got;
      const std::string e = error_of([&] { got = dumps(Journal::open(path, kCampaign).resumed()); });
      const std::string where = "byte " + std::to_string(i) + " bit " + std::to_string(bit) + " (line " +
                                std::to_string(line_of[i]) + ")";
      const std::string now = slurp(path);
      if (e.empty()) {
        ++harmless;
        ASSERT_EQ(got, want) << where << ": the journal opened with different records";
      } else {
        ++errors;
        ASSERT_TRUE(contains(e, path)) << where << ": " << e;
        ASSERT_TRUE(contains(e, "line " + std::to_string(line_of[i]))) << where << ": " << e;
        ASSERT_EQ(now.size(), text.size()) << where << ": a failed open changed the file";
        ASSERT_EQ(now[i], flipped) << where << ": a failed open changed the file";
      }
      poke(i, text[i]);
    }
  }
  ::close(fd);
  ASSERT_EQ(slurp(path), text);
  EXPECT_EQ(harmless, 0);
  EXPECT_EQ(errors, static_cast<int>(text.size()) * 8);
  std::filesystem::remove_all(dir);
}

// A journal key turns each line's SHA-256 into an HMAC-SHA256 under the key:
// a line rewritten with a recomputed plain digest (what anyone can do) is
// refused while the key is set, a keyed journal needs its key, and another
// key is refused; without a key the plain journal reads as before.
TEST(JournalKey, KeyedLinesCannotBeReSealedWithoutTheKey) {
  const KeyReset reset;
  const std::string dir = temp_dir("key");
  const std::string path = dir + "/j.jsonl";
  const std::string key(64, 'k');
  set_journal_key(key);
  {
    Journal j = Journal::open(path, kCampaign);
    j.append(record(kCase5, "ctl_fp32_seq", 39.0625));
    j.append(record(kCase4, "bwd_det_chunked", 0.5));
  }
  const std::string text = slurp(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 3);
  EXPECT_FALSE(contains(text, "\"sha256\""));
  ASSERT_EQ(dumps(Journal::read(path, kCampaign).resumed()).size(), 2u);

  // The failing record made to pass and sealed again as an unkeyed line is.
  std::vector<std::string> lines;
  for (std::istringstream in(text); lines.emplace_back(), std::getline(in, lines.back());) {
  }
  lines.pop_back();
  ASSERT_EQ(lines.size(), 3u);
  nlohmann::json forged = parse_journal_line(lines[1]);
  forged["results"][0]["dw"][0] = 0.5;
  forged["results"][0]["dw"][2] = 0;
  forged["results"][0]["dw"][4] = true;
  set_journal_key("");
  const std::string plain_line = journal_line(forged);  // what a forger without the key can write
  put(path, lines[0] + "\n" + plain_line + "\n" + lines[2] + "\n");
  set_journal_key(key);
  std::string e = error_of([&] { (void)Journal::read(path, kCampaign); });
  EXPECT_TRUE(contains(e, path) && contains(e, "line 2")) << e;
  EXPECT_TRUE(contains(e, "plain SHA-256, which anyone can recompute")) << e;
  // The same edit under a guessed key: refused as changed.
  set_journal_key(std::string(64, 'g'));
  const std::string guessed = journal_line(forged);
  set_journal_key(key);
  put(path, lines[0] + "\n" + guessed + "\n" + lines[2] + "\n");
  e = error_of([&] { (void)Journal::read(path, kCampaign); });
  EXPECT_TRUE(contains(e, "line 2") && contains(e, "HMAC-SHA256 does not match")) << e;
  // Untouched, it reads; without the key it cannot be checked.
  put(path, text);
  EXPECT_EQ(Journal::read(path, kCampaign).resumed().size(), 2u);
  set_journal_key("");
  e = error_of([&] { (void)Journal::read(path, kCampaign); });
  EXPECT_TRUE(contains(e, "line 1") && contains(e, std::string("set ") + kJournalKeyEnv)) << e;
  // A plain journal reads without a key, and not with one.
  const std::string plain = dir + "/p.jsonl";
  {
    Journal j = Journal::open(plain, kCampaign);
    j.append(record(kCase5, "ctl_fp32_seq", 39.0625));
  }
  EXPECT_EQ(Journal::read(plain, kCampaign).resumed().size(), 1u);
  set_journal_key(key);
  e = error_of([&] { (void)Journal::read(plain, kCampaign); });
  EXPECT_TRUE(contains(e, "line 1") && contains(e, "not with the journal key")) << e;
  EXPECT_THROW(set_journal_key("short"), std::invalid_argument);
  std::filesystem::remove_all(dir);
}

// The chain (format 3): each record's "prev" is the seal of the line before
// it, so a record that keeps its own valid seal (under the key, too) is
// refused when it is repeated, moved, or copied in from another journal of
// the same campaign and key: the splice a key holder's copy could make, a
// passing record of an earlier run put in place of a failing one. The
// error names the file and the line; a resume appends to the chain.
TEST(JournalChain, MovedRepeatedOrForeignLinesAreRefused) {
  const KeyReset reset;
  set_journal_key(std::string(64, 'k'));
  const std::string dir = temp_dir("chain");
  const std::string path = dir + "/j.jsonl", other = dir + "/o.jsonl";
  const std::string kCase3 = "H=64,T=3,w=bf16,form=plain,family=cancel,seed=0";
  {
    Journal j = Journal::open(path, kCampaign);
    j.append(record(kCase5, "bwd_det_chunked", 2.5));  // fails dw
    j.append(record(kCase4, "bwd_det_chunked", 0.5));
  }
  {
    Journal j = Journal::open(path, kCampaign);  // resumed: the chain goes on from line 3
    ASSERT_EQ(j.resumed().size(), 2u);
    j.append(record(kCase3, "bwd_det_chunked", 0.25));
  }
  {
    Journal o = Journal::open(other, kCampaign);
    o.append(record(kCase5, "bwd_det_chunked", 0.75));  // the same case passing, in another run
  }
  const auto ls = test::lines_of(path);
  ASSERT_EQ(ls.size(), 4u);
  for (size_t i = 1; i < ls.size(); ++i)
    EXPECT_EQ(parse_journal_line(ls[i])["prev"], journal_line_seal(ls[i - 1])) << "line " << i + 1;
  EXPECT_EQ(Journal::read(path, kCampaign).resumed().size(), 3u);
  const auto os = test::lines_of(other);
  auto refused_at = [&](const std::vector<std::string>& lines, size_t line) {
    test::put_lines(path, lines);
    const std::string e = error_of([&] { (void)Journal::open(path, kCampaign); });
    EXPECT_TRUE(contains(e, "journal " + path + " line " + std::to_string(line) + ": its \"prev\" is not the seal of "
                                "line " + std::to_string(line - 1)))
        << e;
    EXPECT_EQ(test::lines_of(path), lines) << "a refused journal was changed";
  };
  refused_at({ls[0], ls[2], ls[1], ls[3]}, 2);          // two records swapped
  refused_at({ls[0], ls[1], ls[2], ls[3], ls[3]}, 5);   // the last repeated
  refused_at({ls[0], ls[1], ls[3]}, 3);                 // one left out before the last
  // The failing record swapped for another run's pass: that run's header is
  // this one's (the same campaign), so the line after it is the one out of
  // place; one run's lines cannot follow another's anywhere else.
  refused_at({ls[0], os[1], ls[2], ls[3]}, 3);
  refused_at({ls[0], ls[1], os[1], ls[3]}, 3);
  // Without "prev": a line as format 2 wrote it.
  nlohmann::json bare = parse_journal_line(ls[1]);
  bare.erase("prev");
  test::put_lines(path, {ls[0], journal_line(bare)});
  std::string e = error_of([&] { (void)Journal::open(path, kCampaign); });
  EXPECT_TRUE(contains(e, "line 2: the record has no \"prev\" member")) << e;
  // The last line cut off is not caught by the chain: its case is missing
  // (a resume runs it again), and the rest reads.
  test::put_lines(path, {ls[0], ls[1], ls[2]});
  EXPECT_EQ(Journal::read(path, kCampaign).resumed().size(), 2u);
  std::filesystem::remove_all(dir);
}

// A journal that cannot be used is named as a journal, with why: of another
// format (JournalError), or sealed under another key (JournalKeyError), so
// `gate --merge` does not call it a misplaced argument; a gzip file says
// so; a second header is named as one.
TEST(JournalChain, RefusalsSayWhatTheFileIs) {
  const KeyReset reset;
  const std::string dir = temp_dir("refusals");
  const std::string path = dir + "/j.jsonl";
  {
    Journal j = Journal::open(path, kCampaign);
    j.append(record(kCase5, "bwd_det_chunked", 0.5));
  }
  const auto ls = test::lines_of(path);
  // Format 2: the same header sealed with another version.
  nlohmann::json h = parse_journal_line(ls[0]);
  h["normgate_journal"] = 2;
  const std::string v2 = dir + "/v2.jsonl";
  test::put_lines(v2, {journal_line(h)});
  try {
    (void)journal_campaign(v2);
    ADD_FAILURE() << "a format-2 journal's campaign was read";
  } catch (const JournalError& e) {
    EXPECT_TRUE(contains(e.what(), "is format 2; this normgate reads format 3 (format 2 lines are not chained"))
        << e.what();
  }
  std::string e = error_of([&] { (void)Journal::open(v2, kCampaign); });
  EXPECT_TRUE(contains(e, "is format 2; this normgate reads format 3")) << e;
  // Under another key: a key error naming the variable, not "no journal header".
  set_journal_key(std::string(64, 'a'));
  const std::string keyed = dir + "/k.jsonl";
  {
    Journal j = Journal::open(keyed, kCampaign);
    j.append(record(kCase5, "bwd_det_chunked", 0.5));
  }
  set_journal_key(std::string(64, 'b'));
  EXPECT_THROW((void)journal_campaign(keyed), JournalKeyError);
  e = error_of([&] { (void)Journal::open(keyed, kCampaign); });
  EXPECT_TRUE(contains(e, "journal " + keyed + " line 1: the line's HMAC-SHA256 does not match its content under "
                              "the key NORMGATE_JOURNAL_KEY_FILE names"))
      << e;
  EXPECT_FALSE(contains(e, "not a normgate gate journal")) << e;
  set_journal_key("");
  // A table (or any text) where a journal belongs: no journal, not a JournalError.
  const std::string table = dir + "/t.toml";
  put(table, "[[route]]\n");
  try {
    (void)journal_campaign(table);
    ADD_FAILURE() << "a table was read as a journal";
  } catch (const JournalError& e2) {
    ADD_FAILURE() << "a table was called a refused journal: " << e2.what();
  } catch (const std::invalid_argument& e2) {
    EXPECT_TRUE(contains(e2.what(), "is not a normgate gate journal")) << e2.what();
  }
  // gzip: named as such by the campaign reader and by open.
  const std::string gz = dir + "/j.jsonl.gz";
  put(gz, std::string("\x1f\x8b\x08\x00", 4) + "rest");
  e = error_of([&] { (void)journal_campaign(gz); });
  EXPECT_TRUE(contains(e, "is gzip-compressed")) << e;
  e = error_of([&] { (void)Journal::open(gz, kCampaign); });
  EXPECT_TRUE(contains(e, "is gzip-compressed")) << e;
  EXPECT_EQ(slurp(gz).size(), 8u) << "open changed a gzip file";
  // The header repeated as line 2.
  test::put_lines(path, {ls[0], ls[0], ls[1]});
  e = error_of([&] { (void)Journal::open(path, kCampaign); });
  EXPECT_TRUE(contains(e, "line 2: a second journal header")) << e;
  std::filesystem::remove_all(dir);
}

// The key file: trailing newlines not counted, at least 32 bytes, not open
// to every user, a regular file; each refusal names the file.
TEST(JournalKey, KeyFileChecks) {
  const std::string dir = temp_dir("keyfile");
  const std::string f = dir + "/key";
  put(f, std::string(64, 'a') + "\n");
  std::filesystem::permissions(f, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(load_journal_key(f), std::string(64, 'a'));
  std::filesystem::permissions(f, std::filesystem::perms::others_read, std::filesystem::perm_options::add);
  std::string e = error_of([&] { (void)load_journal_key(f); });
  EXPECT_TRUE(contains(e, f) && contains(e, "mode 604") && contains(e, "chmod o-rw")) << e;
  put(f, std::string(31, 'a') + "\r\n");
  std::filesystem::permissions(f, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  e = error_of([&] { (void)load_journal_key(f); });
  EXPECT_TRUE(contains(e, f) && contains(e, "31 bytes") && contains(e, "at least 32")) << e;
  e = error_of([&] { (void)load_journal_key(dir + "/none"); });
  EXPECT_TRUE(contains(e, dir + "/none") && contains(e, "No such file")) << e;
  e = error_of([&] { (void)load_journal_key(dir); });
  EXPECT_TRUE(contains(e, "not a regular file")) << e;
  std::filesystem::remove_all(dir);
}

// Two records of one (case, implementation) that disagree stop the resume,
// naming both lines; identical results (a rerun: only the wall time
// differs) are accepted.
TEST(JournalDigest, ContradictingRecordsAreAnError) {
  const std::string dir = temp_dir("contradict");
  const std::string path = dir + "/j.jsonl";
  {
    Journal j = Journal::open(path, kCampaign);
    j.append(record(kCase5, "ctl_fp32_seq", 39.0625));
    j.append(record(kCase4, "ctl_fp32_seq", 7.32421875));
    CaseRecord again = record(kCase5, "ctl_fp32_seq", 39.0625);
    again.seconds = 9.5;  // a rerun elsewhere: same results, other wall time
    j.append(again);
  }
  EXPECT_EQ(Journal::open(path, kCampaign).resumed().size(), 3u);
  {
    Journal j = Journal::open(path, kCampaign);
    j.append(record(kCase5, "ctl_fp32_seq", 0.5));  // line 5: says this case passes
  }
  const std::string e = error_of([&] { (void)Journal::open(path, kCampaign); });
  EXPECT_TRUE(contains(e, path)) << e;
  EXPECT_TRUE(contains(e, "line 5 contradicts line 2")) << e;
  EXPECT_TRUE(contains(e, kCase5)) << e;
  EXPECT_TRUE(contains(e, "ctl_fp32_seq")) << e;
  // An error of the same (case, implementation) is a failed attempt, not a
  // contradiction: after a result (merged journals) or before one (gate
  // --retry-errors) both are read; a second result that differs from the
  // first still contradicts it, across the error between them.
  {
    put(path, "");
    Journal j = Journal::open(path, kCampaign);
    j.append(record(kCase4, "bwd_det_chunked", 0.5));
    CaseRecord err = record(kCase4, "bwd_det_chunked", 0.5);
    err.results.clear();
    err.error = "CUDA error: out of memory";
    j.append(err);
  }
  EXPECT_EQ(Journal::open(path, kCampaign).resumed().size(), 2u);
  {
    Journal j = Journal::open(path, kCampaign);
    j.append(record(kCase4, "bwd_det_chunked", 0.25));
  }
  EXPECT_TRUE(contains(error_of([&] { (void)Journal::open(path, kCampaign); }), "line 4 contradicts line 2"));
  std::filesystem::remove_all(dir);
}

// A journal of format 1 (records without digests) is refused with what to
// do, and left as it is.
TEST(JournalDigest, FormatOneIsRefused) {
  const std::string dir = temp_dir("format1");
  const std::string path = dir + "/j.jsonl";
  const std::string v1 = nlohmann::json{{"normgate_journal", 1}, {"campaign", kCampaign}}.dump() + "\n" +
                         to_json(record(kCase5, "ctl_fp32_seq", 39.0625)).dump() + "\n";
  put(path, v1);
  const std::string e = error_of([&] { (void)Journal::open(path, kCampaign); });
  EXPECT_TRUE(contains(e, path)) << e;
  EXPECT_TRUE(contains(e, "format 1")) << e;
  EXPECT_TRUE(contains(e, "start a new journal")) << e;
  EXPECT_EQ(slurp(path), v1);
  std::filesystem::remove_all(dir);
}

// A new journal at `path`: its header and two records (cases T = 5 and T =
// 4 of ctl_fp32_seq), three lines; its text.
std::string two_record_journal(const std::string& path) {
  {
    Journal j = Journal::open(path, kCampaign);
    j.append(record(kCase5, "ctl_fp32_seq", 39.0625));
    j.append(record(kCase4, "ctl_fp32_seq", 7.32421875));
  }
  return slurp(path);
}

// The end of the file: a last line cut just before its newline is complete
// (its digest says so): kept, and the newline written; a torn one is dropped;
// a file whose only line is not this campaign's header is no journal and is
// left alone (never truncated).
TEST(JournalDigest, CompleteLastLineKeptForeignFileLeftAlone) {
  const std::string dir = temp_dir("tail");
  const std::string path = dir + "/j.jsonl";
  const std::string text = two_record_journal(path);
  put(path, text.substr(0, text.size() - 1));
  {
    const Journal j = Journal::open(path, kCampaign);
    EXPECT_EQ(j.resumed().size(), 2u);
    EXPECT_EQ(j.dropped_bytes(), 0);
  }
  EXPECT_EQ(slurp(path), text);
  put(path, text.substr(0, text.size() - 10));
  {
    const Journal j = Journal::open(path, kCampaign);
    EXPECT_EQ(j.resumed().size(), 1u);
    EXPECT_GT(j.dropped_bytes(), 0);
  }
  EXPECT_EQ(text.substr(0, slurp(path).size()), slurp(path));
  // The last line whole but without its newline, one digit of its content
  // changed: a change, not a torn write; refused naming the line, the file
  // left as it is (it was dropped and its case run again).
  {
    std::string changed = text.substr(0, text.size() - 1);
    const size_t last = changed.rfind('\n') + 1;
    const size_t digit = changed.find_first_of("0123456789", last + 2);
    ASSERT_LT(digit, changed.size() - 70);  // in the record, not in its digest
    changed[digit] = changed[digit] == '9' ? '8' : static_cast<char>(changed[digit] + 1);
    put(path, changed);
    const std::string e2 = error_of([&] { (void)Journal::open(path, kCampaign); });
    EXPECT_TRUE(contains(e2, path) && contains(e2, "line 3, the last (whole, without its newline): the line's "
                                                   "SHA-256 digest does not match its content"))
        << e2;
    EXPECT_EQ(slurp(path), changed);
    // The changed line with a byte after it (a space, a CR, a NUL): still a
    // whole line, changed: refused, not dropped as torn.
    for (const char extra : {' ', '\r', '\0'}) {
      put(path, changed + std::string(1, extra));
      const std::string e3 = error_of([&] { (void)Journal::open(path, kCampaign); });
      EXPECT_TRUE(contains(e3, "line 3: a whole line whose digest does not match its content, followed by 1 "
                               "bytes"))
          << static_cast<int>(extra) << ": " << e3;
      EXPECT_EQ(slurp(path), changed + std::string(1, extra));
    }
    // The same line with a run of NULs inside (a crash left a page
    // unwritten under a later one: normgate writes no NUL) is torn: dropped.
    std::string crashed = text.substr(0, text.size() - 1);
    for (size_t k = 0; k < 8; ++k) crashed[digit + k] = '\0';
    put(path, crashed);
    {
      const Journal j = Journal::open(path, kCampaign);
      EXPECT_EQ(j.resumed().size(), 1u);
      EXPECT_EQ(j.dropped_bytes(), static_cast<int64_t>(crashed.size() - last));
    }
  }
  const std::string foreign = "{\"format\": \"normgate-gate-report/1\", \"pass\": true}";
  put(path, foreign);
  const std::string e = error_of([&] { (void)Journal::open(path, kCampaign); });
  EXPECT_TRUE(contains(e, path) && contains(e, "not a normgate gate journal")) << e;
  EXPECT_EQ(slurp(path), foreign);
  std::filesystem::remove_all(dir);
}

// Blank lines (spaces, tabs, CRs) after the last record are formatting (an
// editor's or `echo >>`'s newline): read and resume see the records, read
// leaves the file alone, resume cuts them off so that appended records
// follow the last one. A blank line before a record is damage: refused
// naming the file and the line, the file left alone. Bytes after the last
// newline that are not all blank stay a torn record (dropped).
TEST(JournalTail, BlankLinesEndingTheFileAreFormatting) {
  const std::string dir = temp_dir("blank");
  const std::string path = dir + "/j.jsonl";
  const std::string text = two_record_journal(path);
  for (const std::string blank : {"\n", "\n\n", "  \n", " ", "\t", "\r\n", " \n\t\n  "}) {
    put(path, text + blank);
    {
      std::vector<std::string> got;
      const std::string e = error_of([&] {
        const Journal j = Journal::read(path, kCampaign);
        got = dumps(j.resumed());
        EXPECT_EQ(j.dropped_bytes(), 0);
      });
      EXPECT_EQ(e, "") << testing::PrintToString(blank);
      EXPECT_EQ(got.size(), 2u) << testing::PrintToString(blank);
    }
    EXPECT_EQ(slurp(path), text + blank) << "read changed the file";
    const std::string e = error_of([&] {
      Journal j = Journal::open(path, kCampaign);
      EXPECT_EQ(j.resumed().size(), 2u);
      EXPECT_EQ(j.dropped_bytes(), 0);
      j.append(record(kCase5, "bwd_det_chunked", 0.5));
    });
    EXPECT_EQ(e, "") << testing::PrintToString(blank);
    EXPECT_EQ(Journal::read(path, kCampaign).resumed().size(), 3u) << testing::PrintToString(blank);
    EXPECT_EQ(slurp(path).substr(0, text.size() + 1), text + "{") << testing::PrintToString(blank);
  }
  // A blank line before a record (line 3 of 4), or before the end of a torn one.
  const size_t second = text.find('\n', text.find('\n') + 1) + 1;  // where line 3 starts
  for (const std::string& bad : {text.substr(0, second) + "\n" + text.substr(second), text + " \n{\"case\":"}) {
    const int64_t line = bad.size() > text.size() + 2 ? 4 : 3;
    put(path, bad);
    for (bool read_only : {true, false}) {
      const std::string e = error_of([&] {
        if (read_only) (void)Journal::read(path, kCampaign);
        else (void)Journal::open(path, kCampaign);
      });
      EXPECT_TRUE(contains(e, "journal " + path + " line " + std::to_string(line) + ": ")) << e;
      EXPECT_TRUE(contains(e, "blank")) << e;
      EXPECT_EQ(slurp(path), bad);
    }
  }
  // A blank first line: the file does not start with a journal header.
  put(path, "\n" + text);
  EXPECT_TRUE(contains(error_of([&] { (void)Journal::read(path, kCampaign); }), "line 1 is no journal header"));
  EXPECT_EQ(slurp(path), "\n" + text);
  // Not blank: a torn record, dropped as ever.
  put(path, text + "  x");
  EXPECT_EQ(Journal::read(path, kCampaign).dropped_bytes(), 3);
  std::filesystem::remove_all(dir);
}

// Records are checked field by field (case_record_from_json): each of these
// is refused, naming what is wrong.
TEST(JournalRecord, ImpossibleValuesAreRefused) {
  struct Bad {
    const char* what;
    std::function<void(CaseRecord&)> edit;
    const char* needle;
  };
  const Bad bad[] = {
      {"index past the tensor", [](CaseRecord& r) { r.results[0].out[3].index = 64; }, "index 64 outside [0, 64)"},
      {"index below -1", [](CaseRecord& r) { r.results[0].out[0].index = -2; }, "index -2"},
      {"index -1 of a non-empty tensor", [](CaseRecord& r) { r.results[0].out[1].index = -1; }, "index -1"},
      {"over past the tensor", [](CaseRecord& r) { r.results[0].out[1] = {3.0, 1, 6, 0.0, false}; }, "over 6 outside"},
      {"negative ratio", [](CaseRecord& r) { r.results[0].out[0].ratio = -0.5; }, "ratio -0.5 < 0"},
      {"-inf ratio", [](CaseRecord& r) { r.results[0].out[0].ratio = -kInf; }, "ratio \"-inf\""},
      {"negative forced", [](CaseRecord& r) { r.results[0].out[2].forced = -1.0; }, "forced -1.0"},
      {"nan forced", [](CaseRecord& r) { r.results[0].out[2].forced = kNaN; }, "forced \"nan\""},
      {"pass beside elements over", [](CaseRecord& r) { r.results[0].out[3] = {39.0, 5, 3, 0.0, true}; },
       "pass true with over 3"},
      {"ratio over 1, none over", [](CaseRecord& r) { r.results[0].out[3] = {39.0, 5, 0, 0.0, false}; },
       "over 0 with ratio 39"},
      {"elements over, ratio <= 1", [](CaseRecord& r) { r.results[0].out[3] = {0.5, 5, 2, 0.0, false}; },
       "over 2 with ratio 0.5"},
      {"nan ratio that passes", [](CaseRecord& r) { r.results[0].out[2] = {kNaN, -1, 0, kNaN, true}; },
       "not produced"},
      {"nan ratio with an index", [](CaseRecord& r) { r.results[0].out[2] = {kNaN, 4, 0, kNaN, false}; },
       "not produced"},
      {"negative dw_vs_fp32", [](CaseRecord& r) { r.results[0].dw_vs_fp32_worst = -1; }, "dw_vs_fp32"},
      {"result of another impl", [](CaseRecord& r) { r.results[0].impl = "bwd_det_chunked"; }, "impls[0] is"},
      {"impl twice", [](CaseRecord& r) { r.impls.push_back(r.impls[0]); r.results.push_back(r.results[0]); },
       "twice"},
      {"no impls", [](CaseRecord& r) { r.impls.clear(); r.results.clear(); }, "impls"},
      {"error and results", [](CaseRecord& r) { r.error = "boom"; }, "both an error"},
      {"empty ran_on", [](CaseRecord& r) { r.results[0].ran_on.clear(); }, "ran_on"},
      {"negative seconds", [](CaseRecord& r) { r.seconds = -1; }, "seconds"},
      {"bad case id", [](CaseRecord& r) { r.case_id = "H=64,T=x,w=bf16,form=plain,family=cancel,seed=0"; }, "case"},
      {"case id not canonical", [](CaseRecord& r) { r.case_id = "T=5,H=64,w=bf16,form=plain,family=cancel,seed=0"; },
       "canonical"},
  };
  const CaseRecord good = record(kCase5, "ctl_fp32_seq", 39.0625);
  EXPECT_EQ(to_json(case_record_from_json(to_json(good))).dump(), to_json(good).dump());
  for (const auto& b : bad) {
    CaseRecord r = good;
    b.edit(r);
    const std::string e = error_of([&] { (void)case_record_from_json(to_json(r)); });
    EXPECT_TRUE(contains(e, b.needle)) << b.what << ": " << (e.empty() ? "accepted" : e);
  }
  nlohmann::json extra = to_json(good);
  extra["verdict"] = "pass";
  EXPECT_TRUE(contains(error_of([&] { (void)case_record_from_json(extra); }), "unknown field 'verdict'"));
  // T = 0: empty y, rstd, dx are [0, -1, 0, forced, true]; dw still has H elements.
  CaseRecord empty = good;
  empty.case_id = "H=64,T=0,w=bf16,form=plain,family=cancel,seed=0";
  for (int k = 0; k < 3; ++k) empty.results[0].out[k] = {0.0, -1, 0, 0.0, true};
  EXPECT_EQ(error_of([&] { (void)case_record_from_json(to_json(empty)); }), "");
  empty.results[0].out[0].index = 0;
  EXPECT_TRUE(contains(error_of([&] { (void)case_record_from_json(to_json(empty)); }), "empty tensor"));
}

// run_gate checks every resumed record against the campaign's plan: a record
// (with a valid digest) of a case no run of this campaign makes, or of an
// implementation no window holding the case routes, stops the resume with
// an error naming the journal and its line.
TEST(JournalRecord, RecordOutsideTheCampaignsPlanIsAnError) {
  const std::string dir = temp_dir("plan");
  GateOptions o;
  o.table_path = test::kSmallTable;
  o.seeds = "3x1";  // seed 0; fresh seeds 1..2 (fresh factor 2)
  o.t_per_window = 4;
  o.dense_points = 1;
  o.backend = Backend::cpu;
  o.threads = 1;
  o.windows = "op=bwd,mode=det,H=64,T=1..100";
  o.journal_path = dir + "/j.jsonl";
  const GateResult first = run_gate(o);
  ASSERT_TRUE(first.pass());
  const std::string text = slurp(o.journal_path);
  const nlohmann::json campaign = nlohmann::json::parse(text.substr(0, text.find('\n')))["campaign"];
  const int next_line = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
  const GateResult again = run_gate(o);  // the journal as written resumes
  EXPECT_EQ(again.cases_run_now, 0);

  auto rec = [](const std::string& id, const std::string& impl) {
    CaseRecord r = record(id, impl, 0.5);
    r.results[0].ran_on = "cpu model (no GPU used)";
    return r;
  };
  struct Bad {
    CaseRecord r;
    const char* needle;
  };
  const Bad bad[] = {
      {rec("H=64,T=5,w=bf16,form=plain,family=cancel,seed=7", "bwd_det_chunked"), "seed 7"},
      {rec("H=64,T=51,w=bf16,form=plain,family=cancel,seed=0", "bwd_det_chunked"), "no plan of this campaign: T=51"},
      {rec("H=128,T=5,w=bf16,form=plain,family=cancel,seed=0", "bwd_det_chunked"), "in no window of the table"},
      {rec("H=64,T=5,w=bf16,form=plain,family=cancel,seed=0", "bwd_fp32_blocked"), "implementation bwd_fp32_blocked"},
      {rec("H=64,T=5,w=bf16,form=plain,family=cancel,seed=0,eps=0.001", "bwd_det_chunked"),
       "family point cancel,eps=0.001, not one of the campaign's seed set 3x1"},
      {rec("H=64,T=5,w=bf16,form=plain,family=tiny,seed=0", "bwd_det_chunked"), "family point tiny,"},
      // 5x points are not 3x points: epsnear, and cancel at kappa 1e4.
      {rec("H=64,T=5,w=bf16,form=plain,family=epsnear,seed=0", "bwd_det_chunked"), "family point epsnear,"},
      {rec("H=64,T=5,w=bf16,form=plain,family=cancel,seed=0,kappa=10000", "bwd_det_chunked"),
       "family point cancel,kappa=10000,"},
  };
  for (const auto& b : bad) {
    put(o.journal_path, text);
    {
      Journal j = Journal::open(o.journal_path, campaign);
      j.append(b.r);
    }
    const std::string e = error_of([&] { (void)run_gate(o); });
    EXPECT_TRUE(contains(e, o.journal_path) && contains(e, "line " + std::to_string(next_line)) &&
                contains(e, b.needle))
        << b.r.case_id << " " << b.r.impls[0] << ": " << (e.empty() ? "resumed without an error" : e);
  }
  // A record of the campaign made by another slice (another --windows) is fine.
  put(o.journal_path, text);
  {
    Journal j = Journal::open(o.journal_path, campaign);
    j.append(rec("H=64,T=700,w=bf16,form=plain,family=llm,seed=0", "bwd_nondet_atomic"));
  }
  EXPECT_EQ(error_of([&] { (void)run_gate(o); }), "");
  std::filesystem::remove_all(dir);
}

}  // namespace
