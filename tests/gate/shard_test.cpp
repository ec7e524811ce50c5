// tests/gate/shard_test.cpp: a campaign split into shards (--shard K/N) and
// merged (--merge) gives exactly the unsharded run's reports; every grid case
// runs in exactly one shard; a missing shard leaves its windows INCOMPLETE,
// never PASS; a tampered, contradicting or misplaced shard record is refused
// naming the file and line; a killed shard resumes from its journal.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <set>
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
using test::json_without_date;
using test::lines_of;
using test::put;
using test::put_lines;
using test::slurp;
using test::small_opts;
using test::strip_date;

std::string temp_dir(const std::string& name) { return test::fresh_dir("test_shard", name); }

// Case ids of a journal's records.
std::vector<std::string> journal_cases(const std::string& path) {
  std::vector<std::string> v;
  const auto ls = lines_of(path);
  for (size_t i = 1; i < ls.size(); ++i) v.push_back(parse_journal_line(ls[i])["case"].get<std::string>());
  return v;
}

GateResult run_shard(GateOptions o, const std::string& dir, int k, int n) {
  o.shard_index = k;
  o.shard_count = n;
  o.journal_path = dir + "/shard-" + std::to_string(k) + "-of-" + std::to_string(n) + ".jsonl";
  return run_gate(o);
}

std::string shard_path(const std::string& dir, int k, int n) {
  return dir + "/shard-" + std::to_string(k) + "-of-" + std::to_string(n) + ".jsonl";
}

GateResult merge(GateOptions o, const std::string& out, const std::vector<std::string>& shards) {
  o.journal_path = out;
  o.merge_paths = shards;
  return run_gate(o);
}

TEST(Shard, ParseRefusesBadValuesNamingThem) {
  EXPECT_EQ(parse_shard("1/1"), std::make_pair(1, 1));
  EXPECT_EQ(parse_shard("3/7"), std::make_pair(3, 7));
  for (const char* bad : {"0/3", "4/3", "3", "", "/3", "1/", "a/3", "1/b", "-1/3", "1/0", "1/-2", "1/3x", " 1/3",
                          "1/99999999999", "1/65537"}) {
    const std::string e = error_of([&] { (void)parse_shard(bad); });
    EXPECT_TRUE(contains(e, "--shard '" + std::string(bad) + "'")) << bad << ": " << e;
  }
  // Past int: said to be too large, not "not a decimal integer".
  for (const char* big : {"1/99999999999", "99999999999/3", "1/4294967297"})
    EXPECT_TRUE(contains(error_of([&] { (void)parse_shard(big); }), "too large (at most 65536)")) << big;
  EXPECT_THROW((void)shard_of("H=64,T=1,w=bf16,form=plain,family=normal,seed=0", 0), std::invalid_argument);
}

// Every grid case of the plan runs in exactly one shard, for N = 1, 2, 3, 7;
// a shard runs no refinement, reports every window INCOMPLETE, and a
// --windows filter keeps each case in the shard it has without the filter.
TEST(Shard, EveryGridCaseInExactlyOneShard) {
  const std::string dir = temp_dir("partition");
  GateOptions o = small_opts();
  o.dense_points = 0;  // the grid alone: what the shards split
  o.fresh_factor = 0;
  o.journal_path = dir + "/full.jsonl";
  const GateResult full = run_gate(o);
  o.journal_path.clear();
  std::vector<std::string> all = journal_cases(dir + "/full.jsonl");
  const std::multiset<std::string> expect(all.begin(), all.end());
  ASSERT_GT(expect.size(), 50u);
  o = small_opts();
  for (int n : {1, 2, 3, 7}) {
    std::multiset<std::string> got;
    std::vector<int64_t> window_cases(full.windows.size(), 0);  // per window, summed over the shards
    for (int k = 1; k <= n; ++k) {
      GateOptions ok = o;
      int64_t elsewhere = 0, total = 0;
      ok.progress = [&](const GateProgress& p) {
        if (p.done == p.total) elsewhere = p.elsewhere, total = p.total;
      };
      const GateResult r = run_shard(ok, dir, k, n);
      ASSERT_EQ(r.windows.size(), full.windows.size());
      for (size_t i = 0; i < r.windows.size(); ++i) {
        // A shard's window counts the cases it holds; the others are missing.
        EXPECT_EQ(r.windows[i].cases + r.windows[i].missing, full.windows[i].cases) << r.windows[i].route.window();
        window_cases[i] += r.windows[i].cases;
      }
      EXPECT_EQ(r.shard, std::to_string(k) + "/" + std::to_string(n));
      EXPECT_FALSE(r.pass());
      for (const auto& w : r.windows) {
        EXPECT_TRUE(w.incomplete) << w.route.window();
        EXPECT_FALSE(w.pass);
        EXPECT_TRUE(w.dense.t.empty() && w.fresh.t.empty()) << "a shard ran refinement";
      }
      EXPECT_TRUE(contains(format_gate_markdown(r), "**shard " + r.shard + "**"));
      EXPECT_EQ(gate_to_json(r)["windows"][0]["verdict"], "incomplete");
      const auto cases = journal_cases(shard_path(dir, k, n));
      if (n > 1) {
        EXPECT_LT(cases.size(), expect.size()) << "shard " << k << "/" << n << " ran everything";
      }
      for (const auto& c : cases) EXPECT_EQ(shard_of(c, n), k) << c;
      // The progress says how many of the grid's cases are other shards'.
      EXPECT_EQ(total - elsewhere, static_cast<int64_t>(cases.size())) << "shard " << k << "/" << n;
      got.insert(cases.begin(), cases.end());
    }
    EXPECT_EQ(got, expect) << "N = " << n << ": the shards' cases are not the grid's, each once";
    for (size_t i = 0; i < full.windows.size(); ++i)
      EXPECT_EQ(window_cases[i], full.windows[i].cases) << "N = " << n << ": " << full.windows[i].route.window();
  }
  // A filter keeps each case in its shard: shard 2/3 of the H=256 windows
  // holds exactly the H=256 cases of shard 2/3 of the whole table.
  std::set<std::string> whole;
  for (const auto& c : journal_cases(shard_path(dir, 2, 3)))
    if (contains(c, "H=256,")) whole.insert(c);
  ASSERT_FALSE(whole.empty());
  std::filesystem::create_directories(dir + "/f");
  GateOptions f = small_opts();
  f.windows = "H=256";
  (void)run_shard(f, dir + "/f", 2, 3);
  const auto sub = journal_cases(shard_path(dir + "/f", 2, 3));
  EXPECT_EQ(std::set<std::string>(sub.begin(), sub.end()), whole);
  (void)full;
  std::filesystem::remove_all(dir);
}

// Merged shards give the unsharded run's reports (but the date), with the
// refinement run by the merge; a merge missing a shard is INCOMPLETE on the
// windows that lack its cases, and merging it later (the same output journal)
// completes it to the unsharded reports again.
TEST(Shard, MergeEqualsUnshardedAndMissingShardIsIncomplete) {
  const std::string dir = temp_dir("merge");
  const GateOptions o = small_opts();
  const GateResult full = run_gate(o);
  for (int k = 1; k <= 3; ++k) (void)run_shard(o, dir, k, 3);
  const std::vector<std::string> shards = {shard_path(dir, 1, 3), shard_path(dir, 2, 3), shard_path(dir, 3, 3)};

  const GateResult m = merge(o, dir + "/merged.jsonl", shards);
  EXPECT_TRUE(m.pass());
  EXPECT_EQ(m.cases_total, full.cases_total);
  EXPECT_EQ(strip_date(format_gate_markdown(m)), strip_date(format_gate_markdown(full)));
  EXPECT_EQ(json_without_date(m), json_without_date(full));
  EXPECT_GT(m.cases_run_now, 0) << "the merge ran no refinement";

  // Shard 3 missing.
  const GateResult part = merge(o, dir + "/part.jsonl", {shards[0], shards[1]});
  EXPECT_FALSE(part.pass());
  EXPECT_EQ(part.shards_missing, std::vector<std::string>{"3/3"});
  int incomplete = 0;
  const std::set<std::string> in3 = [&] {
    const auto v = journal_cases(shards[2]);
    return std::set<std::string>(v.begin(), v.end());
  }();
  for (const auto& w : part.windows) {
    // A window is incomplete exactly when shard 3 holds one of its grid cases.
    bool lacks = false;
    for (const auto& c : in3) {
      const seeds::CaseId id = seeds::parse_case(c);
      lacks = lacks || (id.H == w.route.H && id.w == w.route.w && id.T >= w.route.t_lo && id.T <= w.route.t_hi);
    }
    EXPECT_EQ(w.incomplete, lacks) << w.route.window();
    if (w.incomplete) {
      ++incomplete;
      EXPECT_FALSE(w.pass);
      EXPECT_GT(w.missing, 0);
      EXPECT_EQ(w.errors, 0) << "missing cases are not errors";
      EXPECT_TRUE(w.dense.t.empty() && w.fresh.t.empty());
    }
  }
  ASSERT_GT(incomplete, 0);
  const nlohmann::json pj = gate_to_json(part);
  EXPECT_EQ(pj["shards_missing"], nlohmann::json::array({"3/3"}));
  EXPECT_FALSE(pj["pass"].get<bool>());
  const std::string md = format_gate_markdown(part);
  EXPECT_TRUE(contains(md, "- verdict: **INCOMPLETE**")) << md;
  EXPECT_TRUE(contains(md, "shards not given: 3/3")) << md;
  EXPECT_TRUE(contains(md, "| **INCOMPLETE** |")) << md;
  EXPECT_TRUE(contains(format_gate_junit(part, 1.0), "type=\"incomplete\""));

  // The missing shard merged later into the same journal: the full reports.
  const GateResult done = merge(o, dir + "/part.jsonl", shards);
  EXPECT_TRUE(done.shards_missing.empty());
  EXPECT_EQ(strip_date(format_gate_markdown(done)), strip_date(format_gate_markdown(full)));
  EXPECT_EQ(json_without_date(done), json_without_date(full));
  std::filesystem::remove_all(dir);
}

// A merge missing a shard whose cases so far already fail a window (the
// negative control over budget on cancel) reports that window FAIL, not
// INCOMPLETE: more cases cannot pass it. Windows whose known cases pass stay
// INCOMPLETE.
TEST(Shard, KnownFailureOutranksMissingCases) {
  const std::string dir = temp_dir("known_fail");
  GateOptions o = small_opts();
  o.table_path = std::string(NORMGATE_SOURCE_DIR) + "/tests/data/routes/ctl_override.toml";
  o.allow_controls = true;
  for (int k = 1; k <= 3; ++k) (void)run_shard(o, dir, k, 3);
  int failed_known = 0;
  for (int skip = 1; skip <= 3; ++skip) {
    std::vector<std::string> given;
    for (int k = 1; k <= 3; ++k)
      if (k != skip) given.push_back(shard_path(dir, k, 3));
    const GateResult m = merge(o, dir + "/m" + std::to_string(skip) + ".jsonl", given);
    ASSERT_EQ(m.windows.size(), 1u);
    const WindowResult& w = m.windows[0];
    ASSERT_GT(w.missing, 0) << "shard " << skip << " held none of the window's cases";
    bool over = false;
    for (const auto& a : w.out) over = over || a.max_ratio > 1.0;
    EXPECT_FALSE(m.pass());
    EXPECT_EQ(w.incomplete, !over) << "without shard " << skip;
    const std::string md = format_gate_markdown(m);
    if (over) {
      ++failed_known;
      EXPECT_EQ(gate_to_json(m)["windows"][0]["verdict"], "fail");
      EXPECT_TRUE(contains(md, "- verdict: **FAIL**")) << md;
    } else {
      EXPECT_TRUE(contains(md, "- verdict: **INCOMPLETE**")) << md;
    }
  }
  EXPECT_GT(failed_known, 0) << "no merge held a failing cancel case: the test checks nothing";
  std::filesystem::remove_all(dir);
}

// What a merge refuses, naming the file and line: a flipped bit, a record
// contradicting one already merged, a case of another shard, a shard given
// twice, shards of different splits, a whole campaign's journal. Nothing is
// merged then.
TEST(Shard, MergeRefusesTamperedOrContradictingJournals) {
  const std::string dir = temp_dir("tamper");
  GateOptions o = small_opts();
  o.windows = "H=64";
  for (int k = 1; k <= 3; ++k) (void)run_shard(o, dir, k, 3);
  const std::vector<std::string> shards = {shard_path(dir, 1, 3), shard_path(dir, 2, 3), shard_path(dir, 3, 3)};
  (void)merge(o, dir + "/m.jsonl", shards);
  const std::string merged = slurp(dir + "/m.jsonl");

  // A flipped bit in line 3 of shard 1.
  auto ls = lines_of(shards[0]);
  ASSERT_GE(ls.size(), 3u);
  const std::string flipped = dir + "/flipped.jsonl";
  auto fl = ls;
  fl[2][fl[2].find("seed=") + 5] ^= 1;
  put_lines(flipped, fl);
  std::string e = error_of([&] { (void)merge(o, dir + "/x.jsonl", {flipped, shards[1]}); });
  EXPECT_TRUE(contains(e, "journal " + flipped + " line 3")) << e;
  EXPECT_TRUE(contains(e, "SHA-256")) << e;

  // A validly signed last line (its "prev" kept) with another dw ratio:
  // contradicts the merged journal.
  nlohmann::json rec = parse_journal_line(ls.back());
  nlohmann::json& dw = rec["results"][0]["dw"];
  dw[0] = dw[0].get<double>() * 0.5 + 1e-3;  // still <= 1: a valid record, another result
  auto cl = ls;
  cl.back() = journal_line(rec);
  const std::string contra = dir + "/contra.jsonl";
  put_lines(contra, cl);
  e = error_of([&] { (void)merge(o, dir + "/m.jsonl", {contra, shards[1], shards[2]}); });
  EXPECT_TRUE(contains(e, "journal " + contra + " line " + std::to_string(cl.size()) + " contradicts journal " + dir +
                              "/m.jsonl line "))
      << e;
  EXPECT_EQ(slurp(dir + "/m.jsonl"), merged) << "a refused merge changed the output journal";

  // A case of shard 2 copied into shard 1's journal: its "prev" is the seal
  // of shard 2's header, not of the line before it.
  auto mis = ls;
  mis.push_back(lines_of(shards[1])[1]);
  const std::string misplaced = dir + "/misplaced.jsonl";
  put_lines(misplaced, mis);
  e = error_of([&] { (void)merge(o, dir + "/y.jsonl", {misplaced}); });
  EXPECT_TRUE(contains(e, "journal " + misplaced + " line " + std::to_string(mis.size()) + ": its \"prev\" is not "
                              "the seal of line " + std::to_string(mis.size() - 1)))
      << e;
  // Chained in as the gate would write it (what a holder of the key could
  // do): the plan's shard check refuses it.
  nlohmann::json moved = parse_journal_line(lines_of(shards[1])[1]);
  moved["prev"] = journal_line_seal(ls.back());
  mis.back() = journal_line(moved);
  put_lines(misplaced, mis);
  e = error_of([&] { (void)merge(o, dir + "/y.jsonl", {misplaced}); });
  EXPECT_TRUE(contains(e, "journal " + misplaced + " line " + std::to_string(mis.size()))) << e;
  EXPECT_TRUE(contains(e, "belongs to shard 2/3, not to this journal's shard 1/3")) << e;

  // Shard 1's records reordered, or one repeated: each line's seal holds,
  // the chain does not.
  if (ls.size() >= 4) {
    auto re = ls;
    std::swap(re[2], re[3]);
    const std::string reordered = dir + "/reordered.jsonl";
    put_lines(reordered, re);
    e = error_of([&] { (void)merge(o, dir + "/z.jsonl", {reordered, shards[1], shards[2]}); });
    EXPECT_TRUE(contains(e, "journal " + reordered + " line 3: its \"prev\" is not the seal of line 2")) << e;
  }
  auto dup = ls;
  dup.push_back(ls.back());
  const std::string repeated = dir + "/repeated.jsonl";
  put_lines(repeated, dup);
  e = error_of([&] { (void)merge(o, dir + "/z.jsonl", {repeated, shards[1], shards[2]}); });
  EXPECT_TRUE(contains(e, "journal " + repeated + " line " + std::to_string(dup.size()) + ": its \"prev\"")) << e;
  EXPECT_FALSE(std::filesystem::exists(dir + "/z.jsonl")) << "a refused merge wrote its journal";

  // The same shard twice; shards of two splits; a whole campaign's journal.
  e = error_of([&] { (void)merge(o, "", {shards[0], shards[0]}); });
  EXPECT_TRUE(contains(e, "shard 1/3 given twice")) << e;
  (void)run_shard(o, dir, 1, 2);
  e = error_of([&] { (void)merge(o, "", {shards[0], shard_path(dir, 1, 2)}); });
  EXPECT_TRUE(contains(e, "one of 3 shards")) << e;
  e = error_of([&] { (void)merge(o, "", {dir + "/m.jsonl"}); });
  EXPECT_TRUE(contains(e, "not a shard's journal")) << e;
  // Another campaign's shard (other seeds): named with the differing field.
  GateOptions other = o;
  other.seeds = "3x2";
  std::filesystem::create_directories(dir + "/other");
  (void)run_shard(other, dir + "/other", 3, 3);
  e = error_of([&] { (void)merge(o, "", {shards[0], shard_path(dir + "/other", 3, 3)}); });
  EXPECT_TRUE(contains(e, "belongs to a different campaign")) << e;
  EXPECT_TRUE(contains(e, "seeds")) << e;
  std::filesystem::remove_all(dir);
}

// A shard journal ending in blank lines (an editor's newline, `echo >>`)
// merges as it is without them; a blank line between its records is refused
// naming the file and the line.
TEST(Shard, MergeTakesBlankLinesAtTheEndOfAShardOnly) {
  const std::string dir = temp_dir("blank");
  GateOptions o = small_opts();
  o.windows = "H=64";
  for (int k = 1; k <= 2; ++k) (void)run_shard(o, dir, k, 2);
  const std::vector<std::string> shards = {shard_path(dir, 1, 2), shard_path(dir, 2, 2)};
  const GateResult plain = merge(o, dir + "/plain.jsonl", shards);
  const std::string ended = dir + "/ended.jsonl";
  put(ended, slurp(shards[0]) + "\n \n");
  std::string e;
  GateResult got;
  e = error_of([&] { got = merge(o, dir + "/ended-merged.jsonl", {ended, shards[1]}); });
  ASSERT_EQ(e, "");
  EXPECT_EQ(strip_date(format_gate_markdown(got)), strip_date(format_gate_markdown(plain)));
  EXPECT_EQ(json_without_date(got), json_without_date(plain));
  EXPECT_EQ(got.journal_dropped_bytes, 0);
  EXPECT_EQ(slurp(ended), slurp(shards[0]) + "\n \n") << "the merge changed a shard's journal";

  auto ls = lines_of(shards[0]);
  ASSERT_GE(ls.size(), 3u);
  ls.insert(ls.begin() + 2, "");
  const std::string gap = dir + "/gap.jsonl";
  put_lines(gap, ls);
  e = error_of([&] { (void)merge(o, dir + "/gap-merged.jsonl", {gap, shards[1]}); });
  EXPECT_TRUE(contains(e, "journal " + gap + " line 3: ")) << e;
  EXPECT_TRUE(contains(e, "blank")) << e;
  std::filesystem::remove_all(dir);
}

// A shard killed after some cases resumes from its journal (only its own
// missing cases run), a torn last line of a shard's journal is dropped by the
// merge without changing the file, and the merge equals the unsharded run.
TEST(Shard, KilledShardResumesAndMergesToTheSameReport) {
  const std::string dir = temp_dir("resume");
  GateOptions o = small_opts();
  o.windows = "H=64";
  const GateResult full = run_gate(o);
  (void)run_shard(o, dir, 1, 3);
  (void)run_shard(o, dir, 3, 3);
  GateOptions killed = o;
  killed.after_case = [](int64_t n) {
    if (n == 4) throw std::runtime_error("simulated kill");
  };
  EXPECT_THROW((void)run_shard(killed, dir, 2, 3), std::runtime_error);
  EXPECT_EQ(journal_cases(shard_path(dir, 2, 3)).size(), 4u);
  // Its partial journal merged: INCOMPLETE, never PASS.
  const GateResult early = merge(o, "", {shard_path(dir, 1, 3), shard_path(dir, 2, 3), shard_path(dir, 3, 3)});
  EXPECT_FALSE(early.pass());
  EXPECT_TRUE(early.shards_missing.empty());
  bool any_incomplete = false;
  for (const auto& w : early.windows) any_incomplete = any_incomplete || w.incomplete;
  EXPECT_TRUE(any_incomplete);
  // Resumed: the 4 journalled cases are not run again.
  const GateResult resumed = run_shard(o, dir, 2, 3);
  EXPECT_EQ(resumed.cases_resumed, 4);
  EXPECT_GT(resumed.cases_run_now, 0);
  // Resuming shard 2's journal as shard 1 is refused (its campaign names its shard).
  GateOptions as1 = o;
  as1.shard_index = 1;
  as1.shard_count = 3;
  as1.journal_path = shard_path(dir, 2, 3);
  EXPECT_TRUE(contains(error_of([&] { (void)run_gate(as1); }), "shard: journal \"2/3\", this run \"1/3\""));
  // A torn last line (a shard killed mid-write) is dropped, the file kept.
  const std::string tail = "{\"case\":\"H=64,T=1";
  { std::ofstream(shard_path(dir, 3, 3), std::ios::app) << tail; }
  const std::string torn = slurp(shard_path(dir, 3, 3));
  const GateResult m = merge(o, dir + "/m.jsonl", {shard_path(dir, 1, 3), shard_path(dir, 2, 3), shard_path(dir, 3, 3)});
  EXPECT_EQ(m.journal_dropped_bytes, 0);  // the merged journal's own: none
  ASSERT_EQ(m.shard_dropped.size(), 1u);
  EXPECT_EQ(m.shard_dropped[0].first, shard_path(dir, 3, 3));
  EXPECT_EQ(m.shard_dropped[0].second, static_cast<int64_t>(tail.size()));
  EXPECT_EQ(slurp(shard_path(dir, 3, 3)), torn) << "the merge changed a shard's journal";
  EXPECT_EQ(strip_date(format_gate_markdown(m)), strip_date(format_gate_markdown(full)));
  EXPECT_EQ(json_without_date(m), json_without_date(full));
  std::filesystem::remove_all(dir);
}

}  // namespace
