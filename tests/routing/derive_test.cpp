// tests/routing/derive_test.cpp: derivation specs, timings and the window
// derivation (derive.h) on synthetic timings.
#include <gtest/gtest.h>

#include <string>

#include "normgate/routing/derive.h"

namespace {

using namespace normgate;
using namespace normgate::kernels;

// Two det-capable backward candidates and the nondet one; one bwd group per mode.
const std::string kSpec = R"(arch = "sm90a"
description = "test"
T = [1, 100, 1000, 10000]
[candidates]
bwd_det = ["bwd_det_chunked"]
bwd_nondet = ["bwd_det_chunked", "bwd_nondet_atomic"]
fwd = ["fwd_rowwise"]
[bench]
rounds = 3
reps = 20
crossover_steps = 2
[fallback]
fwd = "fwd_rowwise"
[[group]]
op = "bwd"
modes = ["det", "nondet"]
H = 2048
w = "bf16"
form = "plain"
[[group]]
op = "fwd"
H = [1536, 2048]
w = ["bf16", "fp32"]
form = "plain"
)";

BenchPoint point(Op op, int64_t H, int64_t T, double det_us, double nondet_us, double floor) {
  BenchPoint p;
  p.key = BenchKey{op, H, WDtype::bf16, Form::plain, T};
  p.aa_variant = "bwd_det_chunked";
  p.aa_floor = floor;
  p.median_us["bwd_det_chunked"] = det_us;
  if (nondet_us > 0) p.median_us["bwd_nondet_atomic"] = nondet_us;
  for (const auto& [v, us] : p.median_us) p.rounds_us[v] = {us, us, us};
  return p;
}

Timings timings(std::initializer_list<std::tuple<int64_t, double, double>> pts, double floor = 0.01) {
  Timings t;
  t.gpu = "test";
  t.rounds = 3;
  t.reps = 20;
  for (auto [T, a, b] : pts) {
    auto p = point(Op::bwd, 2048, T, a, b, floor);
    t.points[p.key] = p;
  }
  return t;
}

DeriveGroup nondet() { return DeriveGroup{Op::bwd, Mode::nondet, 2048, WDtype::bf16, Form::plain}; }

TEST(DeriveSpec, ParsesAndExpandsGroups) {
  const DeriveSpec s = parse_derive_spec(kSpec, "s.toml");
  EXPECT_EQ(s.t_grid, (std::vector<int64_t>{1, 100, 1000, 10000}));
  ASSERT_EQ(s.groups.size(), 6u);  // 2 bwd modes + 2 H x 2 w fwd
  EXPECT_EQ(s.groups[1].key(), "bwd nondet H=2048 w=bf16 form=plain");
  EXPECT_EQ(s.groups[5].key(), "fwd H=2048 w=fp32 form=plain");
  EXPECT_EQ(s.candidates(nondet()).size(), 2u);
  EXPECT_EQ(s.crossover_steps, 2);
  ASSERT_EQ(s.fallback.size(), 1u);
}

TEST(DeriveSpec, RejectsWithLine) {
  auto bad = [](const std::string& from, const std::string& to) {
    std::string t = kSpec;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  const std::pair<std::string, std::string> cases[] = {
      {bad("T = [1, 100", "T = [2, 100"), "s.toml:3: T grid must start at 1"},
      {bad("[1, 100, 1000", "[1, 1000, 100"), "strictly ascending"},
      {bad("bwd_det = [\"bwd_det_chunked\"]", "bwd_det = [\"bwd_nondet_atomic\"]"), "non-deterministic"},
      {bad("bwd_det = [\"bwd_det_chunked\"]", "bwd_det = [\"ctl_fp32_seq\"]"), "NEGATIVE CONTROL"},
      {bad("bwd_det = [\"bwd_det_chunked\"]", "bwd_det = [\"fwd_rowwise\"]"), "is a fwd variant"},
      {bad("bwd_det = [\"bwd_det_chunked\"]", "bwd_det = [\"nope\"]"), "unknown kernel variant 'nope'"},
      {bad("rounds = 3", "rounds = 1"), "s.toml:9: bench.rounds = 1 out of range"},
      {bad("form = \"plain\"\n[[group]]", "form = \"heads4\"\n[[group]]"), "H must be 256"},
      {bad("reps = 20", "reps = 20\nfoo = 1"), "unknown key 'foo' in [bench]"},
      {bad("H = [1536, 2048]", "H = [1536, 1536]"), "listed twice"},
      // the fallback the written table will name: refused as its loader would (routing.h fallback_problem)
      {bad("fwd = \"fwd_rowwise\"\n[[group]]", "bwd_det = \"bwd_det_heads\"\n[[group]]"),
       "s.toml:13: fallback.bwd_det: variant bwd_det_heads cannot serve every call outside the windows"},
      {bad("fwd = \"fwd_rowwise\"\n[[group]]", "fwd = \"fwd_wide\"\n[[group]]"), "variant fwd_wide cannot serve"},
      {bad("fwd = \"fwd_rowwise\"\n[[group]]", "bwd_det = \"bwd_nondet_atomic\"\n[[group]]"),
       "fallback.bwd_det: variant bwd_nondet_atomic is non-deterministic"},
      {bad("fwd = \"fwd_rowwise\"\n[[group]]", "bwd = \"bwd_det_chunked\"\n[[group]]"), "unknown fallback key 'bwd'"},
      {bad("fwd = \"fwd_rowwise\"\n[[group]]", "fwd = \"fwd_nope\"\n[[group]]"),
       "fallback.fwd: unknown kernel variant 'fwd_nope'"},
  };
  for (const auto& [text, needle] : cases) {
    try {
      parse_derive_spec(text, "s.toml");
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (const RouteTableError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Derive, SplitsAtTheLastPointTheEarlierWinnerHolds) {
  const DeriveSpec s = parse_derive_spec(kSpec, "s.toml");
  // det faster at 1 and 100, nondet faster (beyond the 1% floor) from 1000 on.
  const Timings t = timings({{1, 5.0, 6.0}, {100, 8.0, 9.0}, {1000, 50.0, 40.0}, {10000, 400.0, 300.0}});
  const auto ws = derive_group(s, nondet(), t, {});
  ASSERT_EQ(ws.size(), 2u);
  EXPECT_EQ(ws[0].variant->name, "bwd_det_chunked");
  EXPECT_EQ(ws[0].t_lo, 1);
  EXPECT_EQ(ws[0].t_hi, 100);
  EXPECT_EQ(ws[1].variant->name, "bwd_nondet_atomic");
  EXPECT_EQ(ws[1].t_lo, 101);
  EXPECT_EQ(ws[1].t_hi, 10000);
  // The crossover interval (100, 1000) is bisected at its geometric mean.
  const auto more = crossover_points(s, t, {});
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].T, 316);
  // A timed crossover point moves the split: nondet already wins at 316.
  Timings t2 = t;
  auto p = point(Op::bwd, 2048, 316, 20.0, 15.0, 0.01);
  t2.points[p.key] = p;
  const auto ws2 = derive_group(s, nondet(), t2, {});
  ASSERT_EQ(ws2.size(), 2u);
  EXPECT_EQ(ws2[0].t_hi, 100);
  EXPECT_EQ(ws2[1].t_lo, 101);
  EXPECT_EQ(ws2[1].points.front(), 316);
  auto p2 = point(Op::bwd, 2048, 316, 15.0, 20.0, 0.01);  // det wins at 316 instead
  t2.points[p2.key] = p2;
  const auto ws3 = derive_group(s, nondet(), t2, {});
  EXPECT_EQ(ws3[0].t_hi, 316);
  EXPECT_EQ(ws3[1].t_lo, 317);
}

TEST(Derive, TiesWithinTheFloorGoToTheMoreAccurateCandidate) {
  const DeriveSpec s = parse_derive_spec(kSpec, "s.toml");
  // nondet 3% faster everywhere: a win at a 1% floor, a tie at a 5% floor.
  const auto near = [](double f) {
    return timings({{1, 10.3, 10.0}, {100, 10.3, 10.0}, {1000, 103.0, 100.0}, {10000, 1030.0, 1000.0}}, f);
  };
  auto ws = derive_group(s, nondet(), near(0.01), {});
  ASSERT_EQ(ws.size(), 1u);
  EXPECT_EQ(ws[0].variant->name, "bwd_nondet_atomic");
  ws = derive_group(s, nondet(), near(0.05), {});
  ASSERT_EQ(ws.size(), 1u);
  EXPECT_EQ(ws[0].variant->name, "bwd_det_chunked");  // listed first: the more accurate
  EXPECT_NE(ws[0].reasons[0].find("within the A/A floor"), std::string::npos) << ws[0].reasons[0];
}

// The point of docs/perf/routes.md D9 (res H = 2048 bf16 T = 131072 on the
// H200): the power cap slowed one round of everything, and one round's A/A
// gap of 23.8% made the max-over-rounds floor call a 14% difference a tie.
// With the per-round A/A repeats the paired rule sees the difference.
TEST(Derive, PairedRoundsSeeThroughADriftingRound) {
  BenchPoint p;
  p.key = BenchKey{Op::bwd, 2048, WDtype::bf16, Form::plain, 131072};
  p.aa_variant = "bwd_det_chunked";  // listed first (more accurate), slower
  p.rounds_us["bwd_det_chunked"] = {622.0, 712.0, 660.0};
  p.rounds_us["bwd_nondet_atomic"] = {540.0, 606.0, 577.0};
  p.median_us["bwd_det_chunked"] = 660.0;
  p.median_us["bwd_nondet_atomic"] = 577.0;
  p.aa_floor = 0.238;
  // Without the repeats: the old rule, 660 <= 577 * 1.238, a tie.
  EXPECT_TRUE(ties_with(p, "bwd_det_chunked", "bwd_nondet_atomic"));
  EXPECT_DOUBLE_EQ(tie_floor(p), 0.238);
  // With them: gaps 0.5%, 23.8% (the drifting round), 1%: median 1%;
  // ratios 1.152, 1.175, 1.144: median 1.152 > 1.01, no tie.
  p.aa_rounds_us = {625.11, 575.1, 666.6};
  EXPECT_NEAR(tie_floor(p), 0.01, 1e-3);
  EXPECT_FALSE(ties_with(p, "bwd_det_chunked", "bwd_nondet_atomic"));
  // A real tie stays one: the slower candidate within 0.5% every round.
  p.rounds_us["bwd_nondet_atomic"] = {619.0, 709.0, 657.0};
  EXPECT_TRUE(ties_with(p, "bwd_det_chunked", "bwd_nondet_atomic"));
  // One round's large ratio is outvoted by the two others (median, not max).
  p.rounds_us["bwd_nondet_atomic"] = {619.0, 600.0, 657.0};
  EXPECT_TRUE(ties_with(p, "bwd_det_chunked", "bwd_nondet_atomic"));
  // winner_at uses it, and says why.
  const DeriveSpec s = parse_derive_spec(kSpec, "s.toml");
  p.rounds_us["bwd_nondet_atomic"] = {540.0, 606.0, 577.0};
  std::string why;
  EXPECT_EQ(winner_at(s, nondet(), p, {}, &why)->name, "bwd_nondet_atomic") << why;
  p.rounds_us["bwd_nondet_atomic"] = {619.0, 709.0, 657.0};
  p.median_us["bwd_nondet_atomic"] = 657.0;
  EXPECT_EQ(winner_at(s, nondet(), p, {}, &why)->name, "bwd_det_chunked");
  EXPECT_NE(why.find("round by round"), std::string::npos) << why;
  // The repeats survive the JSON round trip; a count that does not match the
  // rounds, or a non-positive repeat, is refused naming the field.
  Timings t;
  t.gpu = "test";
  t.rounds = 3;
  t.reps = 20;
  t.points[p.key] = p;
  const Timings back = parse_timings(timings_to_json_text(t), "t.json");
  EXPECT_EQ(back.find(p.key)->aa_rounds_us, p.aa_rounds_us);
  for (const std::vector<double>& bad : {std::vector<double>{600.0, 600.0}, std::vector<double>{600.0, 0.0, 600.0}}) {
    Timings b = t;
    b.points[p.key].aa_rounds_us = bad;
    try {
      parse_timings(timings_to_json_text(b), "t.json");
      ADD_FAILURE() << "accepted " << bad.size() << " repeats";
    } catch (const RouteTableError& e) {
      EXPECT_NE(std::string(e.what()).find("aa_rounds_us"), std::string::npos) << e.what();
    }
  }
}

// D1's promise under the paired rule, which is not transitive: bwd_det_onepass
// ties with bwd_nondet_atomic (per-round ratios 1.3, 1.0, 1.05: median 1.05
// within the 10% floor) yet is measurably slower than bwd_det_chunked
// (1.16, 0.89, 1.875: median 1.16), the det route. Checking ties against the
// fastest alone routed nondet to bwd_det_onepass at 130 us beside det's
// 112 us; the winner must be measurably slower than no live candidate.
TEST(Derive, NondetIsNeverRoutedMeasurablySlowerThanDet) {
  const std::string spec = R"(arch = "sm90a"
T = [1, 100]
[candidates]
bwd_det = ["bwd_det_chunked", "bwd_det_onepass"]
bwd_nondet = ["bwd_det_chunked", "bwd_det_onepass", "bwd_nondet_atomic"]
[bench]
crossover_steps = 0
[[group]]
op = "bwd"
modes = ["det", "nondet"]
H = 2048
w = "bf16"
form = "plain"
)";
  const DeriveSpec s = parse_derive_spec(spec, "s.toml");
  BenchPoint p;
  p.key = BenchKey{Op::bwd, 2048, WDtype::bf16, Form::plain, 100};
  p.aa_variant = "bwd_det_chunked";
  p.rounds_us["bwd_nondet_atomic"] = {100.0, 100.0, 200.0};
  p.rounds_us["bwd_det_chunked"] = {112.0, 112.0, 112.0};
  p.rounds_us["bwd_det_onepass"] = {130.0, 100.0, 210.0};
  p.median_us = {{"bwd_nondet_atomic", 100.0}, {"bwd_det_chunked", 112.0}, {"bwd_det_onepass", 130.0}};
  p.aa_rounds_us = {123.2, 112.0, 100.0};  // gaps 10%, 0, 12%: median 10%
  p.aa_floor = 0.12;
  ASSERT_TRUE(paired_rounds(p));
  EXPECT_TRUE(ties_with(p, "bwd_det_onepass", "bwd_nondet_atomic"));
  EXPECT_TRUE(measurably_slower(p, "bwd_det_onepass", "bwd_det_chunked"));
  const DeriveGroup det{Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain};
  const Variant* d = winner_at(s, det, p, {}, nullptr);
  const Variant* n = winner_at(s, nondet(), p, {}, nullptr);
  ASSERT_NE(d, nullptr);
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(d->name, "bwd_det_chunked");
  EXPECT_EQ(n->name, "bwd_nondet_atomic");
  EXPECT_FALSE(measurably_slower(p, std::string(n->name), std::string(d->name)));
  // Round counts that differ from the repeats' are refused when read (the
  // rule would otherwise fall back silently while the report said "round by
  // round").
  Timings t;
  t.gpu = "test";
  t.rounds = 3;
  t.reps = 20;
  p.rounds_us["bwd_det_onepass"] = {130.0, 100.0};
  t.points[p.key] = p;
  try {
    parse_timings(timings_to_json_text(t), "t.json");
    ADD_FAILURE() << "accepted";
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find("bwd_det_onepass has 2 rounds"), std::string::npos) << e.what();
  }
}

TEST(Derive, ExclusionHandsTheWindowToTheNextCandidate) {
  const DeriveSpec s = parse_derive_spec(kSpec, "s.toml");
  const Timings t = timings({{1, 5.0, 6.0}, {100, 8.0, 9.0}, {1000, 50.0, 40.0}, {10000, 400.0, 300.0}});
  const std::vector<Exclusion> ex = {{nondet().key(), "bwd_nondet_atomic", 101, 10000}};
  const auto ws = derive_group(s, nondet(), t, ex);
  ASSERT_EQ(ws.size(), 1u);
  EXPECT_EQ(ws[0].variant->name, "bwd_det_chunked");
  EXPECT_EQ(ws[0].t_hi, 10000);
  // Every candidate excluded at a point: the fastest kept, flagged.
  const std::vector<Exclusion> all = {{nondet().key(), "bwd_nondet_atomic", 1, 10000},
                                      {nondet().key(), "bwd_det_chunked", 1000, 1000}};
  const auto ws2 = derive_group(s, nondet(), t, all);
  bool flagged = false;
  for (const auto& w : ws2) flagged |= w.no_candidate;
  EXPECT_TRUE(flagged);
}

TEST(Derive, MissingGridPointIsAnError) {
  const DeriveSpec s = parse_derive_spec(kSpec, "s.toml");
  const Timings t = timings({{1, 5.0, 6.0}, {100, 8.0, 9.0}, {10000, 400.0, 300.0}});
  try {
    derive_group(s, nondet(), t, {});
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("T=1000"), std::string::npos) << e.what();
  }
}

TEST(Derive, TableTextLoadsAndTimingsRoundTrip) {
  const DeriveSpec s = parse_derive_spec(kSpec, "s.toml");
  const Timings t = timings({{1, 5.0, 6.0}, {100, 8.0, 9.0}, {1000, 50.0, 40.0}, {10000, 400.0, 300.0}});
  std::vector<DerivedWindow> ws = derive_group(s, DeriveGroup{Op::bwd, Mode::det, 2048, WDtype::bf16, Form::plain}, t, {});
  for (auto& w : derive_group(s, nondet(), t, {})) ws.push_back(w);
  const std::string text = route_table_text(s, ws, "generated\nfor a test");
  EXPECT_EQ(text.rfind("# generated\n# for a test\narch = \"sm90a\"\n", 0), 0u) << text;
  const RouteTable rt = parse_route_table(text, "d.toml");
  ASSERT_EQ(rt.routes.size(), 3u);
  EXPECT_EQ(rt.find(Op::bwd, Mode::nondet, 2048, WDtype::bf16, Form::plain, 100)->variant->name, "bwd_det_chunked");
  EXPECT_EQ(rt.find(Op::bwd, Mode::nondet, 2048, WDtype::bf16, Form::plain, 101)->variant->name, "bwd_nondet_atomic");
  const Timings back = parse_timings(timings_to_json_text(t), "t.json");
  ASSERT_EQ(back.points.size(), t.points.size());
  EXPECT_DOUBLE_EQ(back.find(BenchKey{Op::bwd, 2048, WDtype::bf16, Form::plain, 1000})->median_us.at("bwd_nondet_atomic"),
                   40.0);
  EXPECT_THROW(parse_timings("{\"format\": \"x\"}", "t.json"), RouteTableError);
}

TEST(Derive, BadTimingsAreRefusedNamingTheField) {
  const Timings t = timings({{1, 5.0, 6.0}, {100, 8.0, 9.0}, {1000, 50.0, 40.0}, {10000, 400.0, 300.0}});
  const std::string good = timings_to_json_text(t);
  // A point missing a candidate's timing: derive refuses naming it.
  const DeriveSpec s = parse_derive_spec(kSpec, "s.toml");
  Timings missing = t;
  missing.points.begin()->second.median_us.erase("bwd_nondet_atomic");
  try {
    derive_group(s, nondet(), missing, {});
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("candidate bwd_nondet_atomic"), std::string::npos) << e.what();
  }
  // rounds_us without a median, a negative round, a duplicate point: refused, the path named once.
  Timings neg = t;
  neg.points.begin()->second.rounds_us["bwd_det_chunked"] = {-1.0};
  try {
    parse_timings(timings_to_json_text(neg), "t.json");
    FAIL() << "accepted";
  } catch (const RouteTableError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rounds_us of bwd_det_chunked must be > 0"), std::string::npos) << m;
    EXPECT_EQ(m.find("t.json: t.json"), std::string::npos) << m;
  }
  std::string dup = good;
  const auto a = dup.find("{\n   \"op\"");
  const auto b = dup.find("{\n   \"op\"", a + 1);
  ASSERT_NE(b, std::string::npos);
  dup.insert(b, dup.substr(a, b - a));
  try {
    parse_timings(dup, "t.json");
    FAIL() << "accepted";
  } catch (const RouteTableError& e) {
    EXPECT_NE(std::string(e.what()).find("a second point of bwd H=2048"), std::string::npos) << e.what();
  }
}

}  // namespace
